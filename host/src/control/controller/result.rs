//! The result switch of `processNextWorkItem`, and where terminal errors go.

use crate::control::reconcile::{Action, ObjectKey, ReconcileError};
use crate::control::workqueue::{AddOpts, Priority, WorkQueue};

/// What the controller did with a key after its reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Success: the key's backoff was forgotten.
    Forgotten,
    /// `requeue_after`: forgotten, then re-added after the delay.
    RequeuedAfter,
    /// `requeue` or a retryable error: re-added with backoff.
    RateLimited,
    /// A permanent error or `max_retries` reached: forgotten, not retried.
    Terminal,
}

/// Applies controller-runtime's result switch to `key`, which was handed out
/// at `priority`: a retry or requeue is queued at that priority again, so a
/// key from a resync does not jump ahead of changes by failing.
pub fn handle(
    queue: &WorkQueue<ObjectKey>,
    key: &ObjectKey,
    priority: Priority,
    result: &Result<Action, ReconcileError>,
    max_retries: Option<u32>,
) -> Disposition {
    let rate_limited = AddOpts {
        priority,
        rate_limited: true,
        ..AddOpts::default()
    };
    match result {
        Err(e) if e.is_permanent() => {
            queue.forget(key);
            Disposition::Terminal
        }
        Err(_) if max_retries.is_some_and(|max| queue.num_requeues(key) >= max) => {
            queue.forget(key);
            Disposition::Terminal
        }
        Err(_) => {
            queue.add_with(key.clone(), rate_limited);
            Disposition::RateLimited
        }
        Ok(Action {
            requeue_after: Some(after),
            ..
        }) if !after.is_zero() => {
            queue.forget(key);
            queue.add_with(
                key.clone(),
                AddOpts {
                    priority,
                    after: *after,
                    rate_limited: false,
                },
            );
            Disposition::RequeuedAfter
        }
        Ok(Action { requeue: true, .. }) => {
            queue.add_with(key.clone(), rate_limited);
            Disposition::RateLimited
        }
        Ok(_) => {
            queue.forget(key);
            Disposition::Forgotten
        }
    }
}

/// Where terminal errors are recorded (besides the metric): the manager
/// records a Kubernetes Event on the object.
pub trait TerminalErrors: Send + Sync + 'static {
    fn record(&self, controller: &str, key: &ObjectKey, error: &ReconcileError);
}

/// Records terminal errors in the log only.
#[derive(Debug, Default, Clone, Copy)]
pub struct TracingTerminalErrors;

impl TerminalErrors for TracingTerminalErrors {
    fn record(&self, controller: &str, key: &ObjectKey, error: &ReconcileError) {
        tracing::error!(controller, %key, %error, "terminal reconcile error");
    }
}
