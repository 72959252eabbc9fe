//! Bounded polling: convergence in tests is always polled against a
//! deadline, never waited for with a bare sleep.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often [`eventually`] checks.
const POLL: Duration = Duration::from_millis(20);

/// What a check of [`eventually`] answers: `true`, or `Some(value)`, once
/// what it waits for holds.
pub trait Outcome {
    /// What `eventually` returns once the check holds.
    type Value;
    /// The value if the check holds.
    fn holds(self) -> Option<Self::Value>;
}

impl<T> Outcome for Option<T> {
    type Value = T;
    fn holds(self) -> Option<T> {
        self
    }
}

impl Outcome for bool {
    type Value = ();
    fn holds(self) -> Option<()> {
        self.then_some(())
    }
}

/// Polls `check` every 20 ms until it holds (answers `true` or `Some`),
/// and returns what it answered then (`()` or the value); panics naming
/// `what` once `limit` has passed without it holding. A check that takes
/// longer than 20 ms (a kubectl process) waits as long as it took before
/// the next: a poll spends at most about half a core, and what it waits
/// for keeps the rest.
pub async fn eventually<O, F, Fut>(what: &str, limit: Duration, mut check: F) -> O::Value
where
    O: Outcome,
    F: FnMut() -> Fut,
    Fut: Future<Output = O>,
{
    let deadline = Instant::now() + limit;
    loop {
        let started = Instant::now();
        if let Some(v) = check().await.holds() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(POLL.max(started.elapsed())).await;
    }
}
