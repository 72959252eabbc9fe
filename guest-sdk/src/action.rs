use std::time::Duration;

use crate::bindings::wasmctrl::reconciler::types as wit;

/// What the host does with the key after a successful reconcile.
///
/// Mirrors controller-runtime's `Result`: [`Action::requeue_after`] re-adds
/// the key after a delay (and resets its backoff), [`Action::requeue`] re-adds
/// it with per-key backoff, and [`Action::done`] forgets the key until the
/// next watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Action {
    requeue: bool,
    requeue_after: Option<Duration>,
}

impl Action {
    /// The object is in its desired state; wait for the next change.
    pub fn done() -> Self {
        Self::default()
    }

    /// Reconcile again soon, with per-key exponential backoff.
    pub fn requeue() -> Self {
        Self {
            requeue: true,
            requeue_after: None,
        }
    }

    /// Reconcile again after `delay` (use this to wait for something external,
    /// never a sleep). A zero delay means [`Action::done`].
    pub fn requeue_after(delay: Duration) -> Self {
        Self {
            requeue: false,
            requeue_after: (!delay.is_zero()).then_some(delay),
        }
    }

    pub(crate) fn into_wit(self) -> wit::Action {
        wit::Action {
            requeue: self.requeue,
            requeue_after_ms: self
                .requeue_after
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1))
                .unwrap_or(0),
        }
    }
}
