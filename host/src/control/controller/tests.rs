//! The controller loop with native reconcilers and paused tokio time.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{Instant, advance};

use super::*;
use crate::Action;
use crate::control::workqueue::Priority;
use crate::control::workqueue::ratelimit::default_controller_rate_limiter;

const MS: Duration = Duration::from_millis(1);

fn queue() -> WorkQueue<ObjectKey> {
    WorkQueue::new(
        "test",
        Box::new(default_controller_rate_limiter()),
        Arc::new(crate::control::workqueue::NoopQueueMetrics),
    )
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::namespaced("default", name)
}

/// Lets spawned tasks and due timers run without moving the clock.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

/// Advances paused time by `d` and lets the queue's timers fire.
async fn pass(d: Duration) {
    advance(d).await;
    settle().await;
}

/// The key ready now, if any (a get yields once before taking one).
async fn get_now(q: &WorkQueue<ObjectKey>) -> Option<ObjectKey> {
    if q.is_empty() {
        return None;
    }
    q.get().await.map(|item| item.key().clone())
}

#[tokio::test(start_paused = true)]
async fn success_forgets_the_key() {
    let q = queue();
    let k = key("a");
    q.add_rate_limited(k.clone());
    q.add_rate_limited(k.clone());
    assert_eq!(q.num_requeues(&k), 2);
    let d = result::handle(&q, &k, Priority::NORMAL, &Ok(Action::done()), None);
    assert_eq!(d, Disposition::Forgotten);
    assert_eq!(q.num_requeues(&k), 0);
}

#[tokio::test(start_paused = true)]
async fn an_error_requeues_rate_limited() {
    let q = queue();
    let k = key("a");
    let d = result::handle(
        &q,
        &k,
        Priority::NORMAL,
        &Err(ReconcileError::Transient("x".into())),
        None,
    );
    assert_eq!(d, Disposition::RateLimited);
    assert_eq!(q.num_requeues(&k), 1);
    pass(4 * MS).await;
    assert_eq!(q.len(), 0, "not before the 5 ms backoff");
    pass(MS).await;
    assert_eq!(get_now(&q).await, Some(k));
}

#[tokio::test(start_paused = true)]
async fn requeue_after_wins_over_requeue_and_forgets_first() {
    let q = queue();
    let k = key("a");
    q.add_rate_limited(k.clone());
    q.add_rate_limited(k.clone());
    pass(100 * MS).await;
    let _ = get_now(&q).await;
    let action = Action {
        requeue: true,
        requeue_after: Some(Duration::from_secs(1)),
    };
    let d = result::handle(&q, &k, Priority::NORMAL, &Ok(action), None);
    assert_eq!(d, Disposition::RequeuedAfter);
    assert_eq!(q.num_requeues(&k), 0, "backoff forgotten");
    pass(999 * MS).await;
    assert_eq!(q.len(), 0);
    pass(MS).await;
    assert_eq!(q.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn requeue_is_rate_limited() {
    let q = queue();
    let k = key("a");
    assert_eq!(
        result::handle(&q, &k, Priority::NORMAL, &Ok(Action::requeue()), None),
        Disposition::RateLimited
    );
    assert_eq!(
        result::handle(&q, &k, Priority::NORMAL, &Ok(Action::requeue()), None),
        Disposition::RateLimited
    );
    assert_eq!(q.num_requeues(&k), 2);
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_is_forgotten_and_not_retried() {
    let q = queue();
    let k = key("a");
    q.add_rate_limited(k.clone());
    pass(10 * MS).await;
    let _ = get_now(&q).await;
    let d = result::handle(
        &q,
        &k,
        Priority::NORMAL,
        &Err(ReconcileError::Permanent("bad spec".into())),
        None,
    );
    assert_eq!(d, Disposition::Terminal);
    assert_eq!(q.num_requeues(&k), 0);
    pass(Duration::from_secs(3600)).await;
    assert_eq!(q.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn max_retries_makes_the_error_terminal() {
    let q = queue();
    let k = key("a");
    let err = Err(ReconcileError::Transient("flaky".into()));
    for _ in 0..3 {
        assert_eq!(
            result::handle(&q, &k, Priority::NORMAL, &err, Some(3)),
            Disposition::RateLimited
        );
    }
    assert_eq!(
        result::handle(&q, &k, Priority::NORMAL, &err, Some(3)),
        Disposition::Terminal
    );
    assert_eq!(q.num_requeues(&k), 0);
}

/// Answers each key from a script (then success), recording every call.
#[derive(Default)]
struct Scripted {
    script: Mutex<HashMap<String, VecDeque<Result<Action, ReconcileError>>>>,
    calls: Mutex<Vec<(String, u32, Instant)>>,
    panic_once: Mutex<HashSet<String>>,
}

impl Reconcile for Arc<Scripted> {
    async fn reconcile(&self, request: ReconcileRequest) -> Result<Action, ReconcileError> {
        let name = request.key.name.clone();
        self.calls
            .lock()
            .unwrap()
            .push((name.clone(), request.attempt, Instant::now()));
        if self.panic_once.lock().unwrap().remove(&name) {
            panic!("native reconciler bug");
        }
        let next = self
            .script
            .lock()
            .unwrap()
            .get_mut(&name)
            .and_then(|s| s.pop_front());
        next.unwrap_or(Ok(Action::done()))
    }
}

#[derive(Default)]
struct Recorded(Mutex<Vec<(ObjectKey, ReconcileError)>>);

impl TerminalErrors for Recorded {
    fn record(&self, _controller: &str, key: &ObjectKey, error: &ReconcileError) {
        self.0.lock().unwrap().push((key.clone(), error.clone()));
    }
}

fn controller<R: Reconcile>(
    reconciler: R,
    workers: usize,
    terminal: Arc<dyn TerminalErrors>,
) -> Controller<R> {
    let options = ControllerOptions {
        max_concurrent_reconciles: workers,
        ..ControllerOptions::new("test")
    };
    Controller::new(
        options,
        queue(),
        reconciler,
        Arc::new(Metrics::new()),
        terminal,
    )
}

#[tokio::test(start_paused = true)]
async fn errors_back_off_exponentially_then_succeed() {
    let scripted = Arc::new(Scripted::default());
    let err = || Err(ReconcileError::Transient("not yet".into()));
    scripted
        .script
        .lock()
        .unwrap()
        .insert("a".into(), VecDeque::from([err(), err(), err()]));
    let c = controller(scripted.clone(), 1, Arc::new(TracingTerminalErrors));
    let workers = c.start();
    c.queue().add(key("a"));
    for _ in 0..100 {
        pass(MS).await;
    }
    let calls = scripted.calls.lock().unwrap().clone();
    let attempts: Vec<u32> = calls.iter().map(|c| c.1).collect();
    assert_eq!(attempts, [0, 1, 2, 3]);
    let gaps: Vec<Duration> = calls.windows(2).map(|w| w[1].2 - w[0].2).collect();
    assert_eq!(gaps, [5 * MS, 10 * MS, 20 * MS]);
    assert_eq!(
        c.queue().num_requeues(&key("a")),
        0,
        "success forgot the backoff"
    );
    assert!(workers.shutdown(Duration::from_secs(1)).await);
}

#[tokio::test(start_paused = true)]
async fn terminal_errors_are_recorded_and_not_retried() {
    let scripted = Arc::new(Scripted::default());
    scripted.script.lock().unwrap().insert(
        "bad".into(),
        VecDeque::from([Err(ReconcileError::Permanent("invalid spec".into()))]),
    );
    let recorded = Arc::new(Recorded::default());
    let c = controller(scripted.clone(), 1, recorded.clone());
    let workers = c.start();
    c.queue().add(key("bad"));
    pass(Duration::from_secs(10)).await;
    assert_eq!(scripted.calls.lock().unwrap().len(), 1);
    assert_eq!(
        *recorded.0.lock().unwrap(),
        [(key("bad"), ReconcileError::Permanent("invalid spec".into()))]
    );
    assert!(workers.shutdown(Duration::from_secs(1)).await);
}

#[tokio::test(start_paused = true)]
async fn done_is_guaranteed_when_the_reconciler_panics() {
    let scripted = Arc::new(Scripted::default());
    scripted.panic_once.lock().unwrap().insert("a".into());
    let c = controller(scripted.clone(), 1, Arc::new(TracingTerminalErrors));
    let workers = c.start();
    c.queue().add(key("a"));
    for _ in 0..20 {
        pass(MS).await;
    }
    // The panic became an error (retried after 5 ms), the key was released,
    // and the worker survived to reconcile it again.
    let attempts: Vec<u32> = scripted.calls.lock().unwrap().iter().map(|c| c.1).collect();
    assert_eq!(attempts, [0, 1]);
    assert_eq!(c.queue().processing_len(), 0);
    assert!(workers.shutdown(Duration::from_secs(1)).await);
}

/// Tracks keys in flight; fails the test if one is ever reconciled twice at once.
struct Exclusive {
    queue: Mutex<Option<WorkQueue<ObjectKey>>>,
    in_flight: Mutex<HashSet<ObjectKey>>,
    overlaps: Mutex<u32>,
    reconciled: Mutex<HashMap<ObjectKey, u32>>,
}

impl Reconcile for Arc<Exclusive> {
    async fn reconcile(&self, request: ReconcileRequest) -> Result<Action, ReconcileError> {
        let key = request.key;
        if !self.in_flight.lock().unwrap().insert(key.clone()) {
            *self.overlaps.lock().unwrap() += 1;
        }
        // The first time, a watch event adds the key again (three times)
        // while this worker holds it.
        let first = !self.reconciled.lock().unwrap().contains_key(&key);
        if first {
            let queue = self.queue.lock().unwrap().clone().unwrap();
            for _ in 0..3 {
                queue.add(key.clone());
            }
        }
        tokio::time::sleep(MS).await;
        self.in_flight.lock().unwrap().remove(&key);
        *self.reconciled.lock().unwrap().entry(key).or_default() += 1;
        Ok(Action::done())
    }
}

#[tokio::test(start_paused = true)]
async fn three_workers_on_a_hundred_keys_never_overlap_one_key() {
    let exclusive = Arc::new(Exclusive {
        queue: Mutex::new(None),
        in_flight: Mutex::default(),
        overlaps: Mutex::new(0),
        reconciled: Mutex::default(),
    });
    let c = controller(exclusive.clone(), 3, Arc::new(TracingTerminalErrors));
    *exclusive.queue.lock().unwrap() = Some(c.queue().clone());
    for i in 0..100 {
        c.queue().add(key(&format!("k{i}")));
    }
    let workers = c.start();
    for _ in 0..200 {
        pass(MS).await;
    }
    assert_eq!(*exclusive.overlaps.lock().unwrap(), 0);
    let reconciled = exclusive.reconciled.lock().unwrap().clone();
    assert_eq!(reconciled.len(), 100);
    // Re-added while processing → reconciled exactly once more after done.
    assert!(reconciled.values().all(|n| *n == 2), "{reconciled:?}");
    workers.abort().await;
    assert_eq!(c.queue().processing_len(), 0);
}

/// Sleeps `work`, or stops early when cancelled.
#[derive(Default)]
struct Slow {
    work: Duration,
    cancelled: Mutex<u32>,
    finished: Mutex<u32>,
}

impl Reconcile for Arc<Slow> {
    async fn reconcile(&self, request: ReconcileRequest) -> Result<Action, ReconcileError> {
        tokio::select! {
            _ = tokio::time::sleep(self.work) => {
                *self.finished.lock().unwrap() += 1;
                Ok(Action::done())
            }
            _ = request.cancel.cancelled() => {
                *self.cancelled.lock().unwrap() += 1;
                Err(ReconcileError::Cancelled)
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_in_flight_reconciles_up_to_its_timeout() {
    let slow = Arc::new(Slow {
        work: Duration::from_millis(100),
        ..Slow::default()
    });
    let c = controller(slow.clone(), 2, Arc::new(TracingTerminalErrors));
    let workers = c.start();
    c.queue().add(key("a"));
    c.queue().add(key("b"));
    settle().await;
    assert_eq!(c.queue().processing_len(), 2);
    let started = Instant::now();
    assert!(
        workers.shutdown(Duration::from_secs(1)).await,
        "drained in time"
    );
    assert_eq!(started.elapsed(), 100 * MS);
    assert_eq!(*slow.cancelled.lock().unwrap(), 0);
    assert_eq!(c.queue().processing_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn shutdown_cancels_reconciles_still_running_at_its_timeout() {
    let slow = Arc::new(Slow {
        work: Duration::from_secs(60),
        ..Slow::default()
    });
    let c = controller(slow.clone(), 1, Arc::new(TracingTerminalErrors));
    let workers = c.start();
    c.queue().add(key("a"));
    settle().await;
    let started = Instant::now();
    assert!(!workers.shutdown(Duration::from_millis(250)).await);
    assert_eq!(started.elapsed(), 250 * MS);
    assert_eq!(*slow.cancelled.lock().unwrap(), 1);
    assert_eq!(c.queue().processing_len(), 0);
}

/// The task detaching workers can be aborted (a rebuild superseded by a
/// newer edit, a shutdown): the reconciles they hold are cancelled, and
/// their results handled, so no key's reconcile is lost with the task.
#[tokio::test(start_paused = true)]
async fn workers_whose_detach_is_abandoned_hand_back_the_keys_they_hold() {
    let slow = Arc::new(Slow {
        work: Duration::from_secs(5),
        ..Slow::default()
    });
    let c = controller(slow.clone(), 2, Arc::new(TracingTerminalErrors));
    let workers = c.start();
    c.queue().add(key("a"));
    settle().await;
    assert_eq!(c.queue().processing_len(), 1);
    let detaching = tokio::spawn(workers.detach(Duration::from_secs(10)));
    settle().await;
    detaching.abort();
    settle().await;
    assert_eq!(*slow.cancelled.lock().unwrap(), 1, "the guest was told");
    assert_eq!(c.queue().processing_len(), 0);
    // Abandoned workers take no new key; "a" is back with its backoff.
    c.queue().add(key("b"));
    pass(Duration::from_secs(1)).await;
    assert_eq!(c.queue().len(), 2, "a and b wait for the next workers");
    assert_eq!(*slow.finished.lock().unwrap(), 0);
    // The next version's controller takes over the queue, as a rebuild's
    // does.
    let successor = Controller::new(
        ControllerOptions {
            max_concurrent_reconciles: 2,
            ..ControllerOptions::new("test")
        },
        c.queue().clone(),
        slow.clone(),
        Arc::new(Metrics::new()),
        Arc::new(TracingTerminalErrors),
    );
    let next = successor.start();
    settle().await;
    pass(Duration::from_secs(6)).await;
    assert_eq!(*slow.finished.lock().unwrap(), 2);
    assert!(next.shutdown(Duration::from_secs(1)).await);
}

/// Takes 10 ms per reconcile and fails the first reconcile of "low".
#[derive(Default)]
struct Busy {
    calls: Mutex<Vec<String>>,
}

impl Reconcile for Arc<Busy> {
    async fn reconcile(&self, request: ReconcileRequest) -> Result<Action, ReconcileError> {
        tokio::time::sleep(10 * MS).await;
        let name = request.key.name;
        let mut calls = self.calls.lock().unwrap();
        let first = !calls.contains(&name);
        calls.push(name.clone());
        if first && name == "low" {
            Err(ReconcileError::Transient("once".into()))
        } else {
            Ok(Action::done())
        }
    }
}

#[tokio::test(start_paused = true)]
async fn retries_keep_the_keys_priority() {
    let busy = Arc::new(Busy::default());
    let c = controller(busy.clone(), 1, Arc::new(TracingTerminalErrors));
    c.queue().add_with_priority(key("low"), Priority::LOW);
    c.queue().add_with_priority(key("l2"), Priority::LOW);
    let workers = c.start();
    pass(MS).await;
    c.queue().add_with_priority(key("l3"), Priority::LOW);
    // t = 12 ms: "low" failed at 10 ms and is due again at 15 ms; "l2" runs
    // until 20 ms.
    pass(11 * MS).await;
    c.queue().add(key("n"));
    for _ in 0..60 {
        pass(MS).await;
    }
    // The retry of "low" stayed low: behind "l3", which was queued before
    // it became due, while "n" jumped ahead of both.
    assert_eq!(*busy.calls.lock().unwrap(), ["low", "l2", "n", "l3", "low"]);
    assert!(workers.shutdown(Duration::from_secs(1)).await);
}
