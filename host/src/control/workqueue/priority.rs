//! How urgent a queued key is, and the options of an add
//! (controller-runtime's `priorityqueue.AddOpts`).

use std::fmt;
use std::time::Duration;

/// A key's priority in the queue: higher is handed out first.
///
/// The host uses two values, as controller-runtime does: [`NORMAL`](Self::NORMAL)
/// for keys from watch events and [`LOW`](Self::LOW) for keys enqueued in
/// bulk without anything having changed (the initial list, a periodic
/// resync, the re-enqueue after a hot swap), so that real changes jump ahead
/// of a queued resync. Each value used becomes a `priority` label value of
/// `workqueue_depth`: keep them to a handful of constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Priority(pub i32);

impl Priority {
    /// Keys from watch events (controller-runtime's default, 0).
    pub const NORMAL: Priority = Priority(0);
    /// Keys enqueued in bulk: initial list, resync (controller-runtime's
    /// `handler.LowPriority`, -100).
    pub const LOW: Priority = Priority(-100);
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// How [`WorkQueue::add_with`](super::WorkQueue::add_with) queues a key.
///
/// The default is a plain [`add`](super::WorkQueue::add): normal priority,
/// ready now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AddOpts {
    /// The key's priority; a key already queued keeps the higher of the two.
    pub priority: Priority,
    /// Ready after this delay (zero: now); a key already waiting keeps the
    /// earlier ready time.
    pub after: Duration,
    /// Wait as long as the rate limiter says (which counts a failure of the
    /// key); with `after` also set, the shorter of the two waits, as
    /// controller-runtime does.
    pub rate_limited: bool,
}

impl AddOpts {
    /// A plain add at `priority`.
    pub fn priority(priority: Priority) -> Self {
        Self {
            priority,
            ..Self::default()
        }
    }
}
