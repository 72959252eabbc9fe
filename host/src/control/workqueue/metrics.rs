//! The per-queue metric hooks.

use std::time::Duration;

use super::priority::Priority;

/// Hooks for client-go's seven per-queue metrics (`workqueue_depth`,
/// `workqueue_adds_total`, `workqueue_retries_total`,
/// `workqueue_queue_duration_seconds`, `workqueue_work_duration_seconds`,
/// `workqueue_unfinished_work_seconds`,
/// `workqueue_longest_running_processor_seconds`).
///
/// The queue calls these at the same points client-go does, with its lock held
/// so that values arrive in order: an implementation must be quick and must not
/// call back into the queue.
pub trait QueueMetrics: Send + Sync {
    /// Keys of `priority` added and not yet handed out, including keys added
    /// while being processed that will be re-queued on done (client-go's
    /// depth gauge, split by priority as controller-runtime's priority queue
    /// labels it). Called whenever that priority's depth changes; a key whose
    /// priority rises moves from one depth to the other.
    fn set_depth(&self, priority: Priority, depth: usize);
    /// A key entered the queue (an `add` that was not deduplicated).
    fn inc_adds(&self);
    /// A key was scheduled through `add_after` or `add_rate_limited`
    /// (client-go counts every `AddAfter`, whatever the delay).
    fn inc_retries(&self);
    /// Time from a key's add (or, for a delayed key, from when it became due)
    /// until a worker got it.
    fn observe_queue_duration(&self, waited: Duration);
    /// Time from a worker getting a key until it was done.
    fn observe_work_duration(&self, worked: Duration);
    /// Sum of the ages of all in-flight keys, and the oldest one, in seconds.
    /// Pushed whenever [`WorkQueue::unfinished_work`](super::WorkQueue::unfinished_work)
    /// is called; client-go refreshes these every 500 ms, here the metrics
    /// owner decides (typically at scrape time).
    fn set_unfinished_work(&self, unfinished_seconds: f64, longest_running_seconds: f64);
}

/// Metrics that go nowhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopQueueMetrics;

impl QueueMetrics for NoopQueueMetrics {
    fn set_depth(&self, _priority: Priority, _depth: usize) {}
    fn inc_adds(&self) {}
    fn inc_retries(&self) {}
    fn observe_queue_duration(&self, _waited: Duration) {}
    fn observe_work_duration(&self, _worked: Duration) {}
    fn set_unfinished_work(&self, _unfinished_seconds: f64, _longest_running_seconds: f64) {}
}
