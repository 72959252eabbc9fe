//! [`SingleFlight`]: one run of an operation per key at a time; whoever
//! asks while it runs gets that run's answer (Go's `singleflight`).
//!
//! Written here rather than taken from a crate: the few crates that offer
//! it either cancel the run when the first caller goes away or do not run
//! it as a task of its own, and an admin reload must run to its end.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};

/// A run's answer, for as many callers as wait for it.
pub(crate) type Flight<V> = Shared<BoxFuture<'static, V>>;

/// Runs of an operation in flight, by key.
pub(crate) struct SingleFlight<V: Clone> {
    flights: Arc<Mutex<BTreeMap<String, Flight<V>>>>,
}

impl<V: Clone + Send + Sync + 'static> SingleFlight<V> {
    pub(crate) fn new() -> Self {
        Self {
            flights: Arc::default(),
        }
    }

    /// The answer of the run for `key`: the one in flight, else a new run
    /// of `start()`, spawned as a task so that it ends even if every
    /// caller stops waiting. `stopped` answers for a run whose task ended
    /// without one (it panicked, or the runtime is shutting down).
    pub(crate) fn run<F>(
        &self,
        key: &str,
        start: impl FnOnce() -> F,
        stopped: impl FnOnce(String) -> V + Send + 'static,
    ) -> Flight<V>
    where
        F: Future<Output = V> + Send + 'static,
    {
        let mut flights = self.flights.lock().unwrap();
        flights
            .entry(key.to_string())
            .or_insert_with(|| {
                let run = start();
                let (flights, key) = (self.flights.clone(), key.to_string());
                // The map is locked until this flight is in it, so the run
                // cannot remove its entry before it is there.
                let task = tokio::spawn(async move {
                    let answer = run.await;
                    flights.lock().unwrap().remove(&key);
                    answer
                });
                async move { task.await.unwrap_or_else(|e| stopped(e.to_string())) }
                    .boxed()
                    .shared()
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn callers_while_a_run_is_in_flight_share_it_and_later_ones_start_anew() {
        let flights = SingleFlight::<usize>::new();
        let started = Arc::new(AtomicUsize::new(0));
        let (release, gate) = tokio::sync::watch::channel(false);
        let start = || {
            let (started, mut gate) = (started.clone(), gate.clone());
            move || async move {
                let n = started.fetch_add(1, Ordering::SeqCst) + 1;
                let _ = gate.wait_for(|open| *open).await;
                n
            }
        };
        let waiting: Vec<_> = (0..5).map(|_| flights.run("a", start(), |_| 0)).collect();
        let other = flights.run("b", start(), |_| 0);
        release.send(true).unwrap();
        let answers = futures::future::join_all(waiting).await;
        assert!(answers.iter().all(|a| *a == answers[0]), "{answers:?}");
        other.await;
        assert_eq!(started.load(Ordering::SeqCst), 2, "one run per key");

        // The run over, the next caller starts one.
        assert_eq!(flights.run("a", start(), |_| 0).await, 3);

        // A caller that stops waiting does not stop the run.
        let (release, gate) = tokio::sync::watch::channel(false);
        let (done_tx, done) = tokio::sync::oneshot::channel();
        let mut gate2 = gate.clone();
        drop(flights.run(
            "c",
            move || async move {
                let _ = gate2.wait_for(|open| *open).await;
                let _ = done_tx.send(());
                7
            },
            |_| 0,
        ));
        release.send(true).unwrap();
        done.await.expect("the run went on");
        drop(gate);
    }
}
