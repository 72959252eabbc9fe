//! Every test runs on paused tokio time: delays are driven with `advance` or by
//! the runtime's auto-advance when all tasks are idle, never by real sleeps.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, advance, sleep};

use super::*;
use crate::control::workqueue::ratelimit::{
    ItemExponentialFailureRateLimiter, ItemFastSlowRateLimiter,
};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

fn queue<K: QueueKey>() -> WorkQueue<K> {
    WorkQueue::new(
        "test",
        Box::new(ItemExponentialFailureRateLimiter::new(5 * MS, 1000 * SEC)),
        Arc::new(NoopQueueMetrics),
    )
}

/// Polls once without a runtime waker: enough to ask "ready yet?" of futures
/// whose readiness only depends on the queue's state.
fn poll_now<F: Future + ?Sized>(fut: Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(Waker::noop()))
}

async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn never_handed_to_two_workers() {
    let q = queue::<&str>();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let getters: Vec<_> = (0..2)
        .map(|_| {
            let (q, tx) = (q.clone(), tx.clone());
            tokio::spawn(async move {
                while let Some(item) = q.get().await {
                    tx.send(item).unwrap();
                }
            })
        })
        .collect();
    settle().await;

    q.add("a");
    let first = rx.recv().await.unwrap();
    assert_eq!(*first, "a");
    // Added again while a worker holds it: the idle getter must not get it.
    q.add("a");
    sleep(SEC).await;
    assert!(rx.try_recv().is_err());
    assert_eq!(q.processing_len(), 1);

    first.done();
    let second = rx.recv().await.unwrap();
    assert_eq!(*second, "a");
    drop(second);

    q.shut_down();
    for getter in getters {
        getter.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn never_handed_to_two_workers_under_stress() {
    const KEYS: u32 = 100;
    let q = queue::<u32>();
    let in_flight = Arc::new(Mutex::new(HashSet::new()));
    let runs = Arc::new(Mutex::new(HashMap::<u32, u32>::new()));
    for key in 0..KEYS {
        q.add(key);
    }

    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (q, in_flight, runs) = (q.clone(), in_flight.clone(), runs.clone());
            tokio::spawn(async move {
                while let Some(item) = q.get().await {
                    let key = *item;
                    assert!(
                        in_flight.lock().unwrap().insert(key),
                        "key {key} handed to two workers"
                    );
                    let run = {
                        let mut runs = runs.lock().unwrap();
                        let run = runs.entry(key).or_insert(0);
                        *run += 1;
                        *run
                    };
                    if run == 1 {
                        for _ in 0..3 {
                            q.add(key);
                        }
                        q.add((key + 1) % KEYS);
                    }
                    sleep(MS * (key % 7 + 1)).await;
                    assert!(in_flight.lock().unwrap().remove(&key));
                    drop(item);
                }
            })
        })
        .collect();

    let producer = {
        let (q, in_flight) = (q.clone(), in_flight.clone());
        tokio::spawn(async move {
            let mut adds_while_in_flight = 0;
            for round in 0..300 {
                let key = round * 37 % KEYS;
                if in_flight.lock().unwrap().contains(&key) {
                    adds_while_in_flight += 1;
                }
                q.add(key);
                sleep(MS).await;
            }
            adds_while_in_flight
        })
    };

    let adds_while_in_flight = producer.await.unwrap();
    let idle = async {
        while !(q.pending_keys().is_empty() && q.processing_len() == 0) {
            sleep(10 * MS).await;
        }
    };
    tokio::time::timeout(600 * SEC, idle)
        .await
        .expect("the queue never went idle");
    q.shut_down();
    for worker in workers {
        worker.await.unwrap();
    }

    // The stress really exercised adds of keys that a worker held.
    assert!(adds_while_in_flight > 0);
    let runs = runs.lock().unwrap();
    assert_eq!(runs.len(), KEYS as usize);
    // Each key was re-added while processing its first run, so it ran again.
    assert!(runs.values().all(|&n| n >= 2), "{runs:?}");
    assert!(in_flight.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn requeued_once_on_done() {
    let q = queue::<&str>();
    q.add("a");
    q.add("a");
    assert_eq!(q.len(), 1, "a queued key is deduplicated");

    let item = q.get().await.unwrap();
    for _ in 0..3 {
        q.add("a");
    }
    assert_eq!(q.len(), 0, "not queued while processing");
    assert_eq!(q.pending_keys(), ["a"]);

    item.done();
    assert_eq!(q.len(), 1);
    let item = q.get().await.unwrap();
    assert_eq!(*item, "a");
    item.done();

    assert!(q.is_empty());
    assert!(q.pending_keys().is_empty());
    assert!(poll_now(pin!(q.get())).is_pending());
}

#[tokio::test(start_paused = true)]
async fn earliest_ready_time_wins() {
    let q = queue::<&str>();
    q.add_after("later-then-earlier", 10 * SEC);
    q.add_after("later-then-earlier", 2 * SEC);
    q.add_after("earlier-then-later", 2 * SEC);
    q.add_after("earlier-then-later", 10 * SEC);
    assert_eq!(
        q.pending_keys(),
        ["later-then-earlier", "earlier-then-later"]
    );

    advance(2 * SEC - MS).await;
    assert_eq!(q.len(), 0);
    advance(MS).await;
    assert_eq!(q.len(), 2);
    q.get().await.unwrap().done();
    q.get().await.unwrap().done();

    // The later requests were absorbed, not kept as second entries.
    advance(20 * SEC).await;
    assert!(q.is_empty());
    assert!(q.pending_keys().is_empty());
}

#[tokio::test(start_paused = true)]
async fn zero_delay_adds_immediately() {
    let q = queue::<&str>();
    q.add_after("a", Duration::ZERO);
    assert_eq!(q.len(), 1);
    assert_eq!(*q.get().await.unwrap(), "a");
}

#[tokio::test(start_paused = true)]
async fn ready_at_exactly_its_time() {
    let q = queue::<&str>();
    q.add_after("a", 10 * SEC);
    advance(10 * SEC - MS).await;
    assert_eq!(q.len(), 0);
    assert_eq!(q.pending_keys(), ["a"]);
    advance(MS).await;
    assert_eq!(q.len(), 1);
    q.get().await.unwrap().done();

    // A blocked getter sleeps until the key is due, and no longer.
    let start = Instant::now();
    q.add_after("b", 5 * SEC);
    let item = q.get().await.unwrap();
    assert_eq!(*item, "b");
    assert_eq!(Instant::now() - start, 5 * SEC);
}

#[tokio::test(start_paused = true)]
async fn sleeping_getter_wakes_for_an_earlier_key() {
    let q = queue::<&str>();
    let start = Instant::now();
    q.add_after("late", 10 * SEC);
    let getter = tokio::spawn({
        let q = q.clone();
        async move { q.get().await.map(|item| (*item, Instant::now())) }
    });
    settle().await;
    q.add_after("soon", SEC);
    let (key, at) = getter.await.unwrap().unwrap();
    assert_eq!(key, "soon");
    assert_eq!(at - start, SEC);
}

#[tokio::test(start_paused = true)]
async fn shutdown_wakes_blocked_getters() {
    let q = queue::<&str>();
    q.add_after("later", 60 * SEC);
    let getters: Vec<_> = (0..3)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.get().await.map(|item| *item) })
        })
        .collect();
    settle().await;
    let start = Instant::now();
    q.shut_down();
    for getter in getters {
        assert_eq!(getter.await.unwrap(), None);
    }
    assert_eq!(Instant::now(), start, "woken, not timed out");
}

#[tokio::test(start_paused = true)]
async fn shutdown_drops_pending_work() {
    let q = queue::<&str>();
    q.add("held");
    q.add("queued");
    q.add_after("delayed", SEC);
    let held = q.get().await.unwrap();
    q.add("held"); // would be re-queued on done

    q.shut_down();
    assert!(q.is_shutting_down());
    assert_eq!(q.len(), 0);
    assert!(q.pending_keys().is_empty());
    assert!(q.get().await.is_none());

    q.add("new");
    q.add_after("new-delayed", SEC);
    q.add_rate_limited("new-limited");
    drop(held);
    advance(10 * SEC).await;
    assert_eq!(q.processing_len(), 0);
    assert!(q.is_empty());
    assert!(q.pending_keys().is_empty());
    assert!(q.get().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn drain_waits_for_in_flight_keys() {
    let q = queue::<&str>();
    for key in ["a", "b", "c"] {
        q.add(key);
    }
    let a = q.get().await.unwrap();
    let b = q.get().await.unwrap();

    let mut drain = pin!(q.shut_down_with_drain());
    assert!(poll_now(drain.as_mut()).is_pending());
    // New gets end at once while in-flight keys finish; "c" was dropped.
    assert!(q.get().await.is_none());
    assert!(q.pending_keys().is_empty());

    drop(a);
    assert!(poll_now(drain.as_mut()).is_pending());
    assert_eq!(q.processing_len(), 1);
    b.done();
    assert!(poll_now(drain.as_mut()).is_ready());
    assert_eq!(q.processing_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn drain_is_woken_by_a_worker_task() {
    let q = queue::<&str>();
    q.add("a");
    let worker = tokio::spawn({
        let q = q.clone();
        async move {
            let item = q.get().await.unwrap();
            sleep(30 * SEC).await;
            item.done();
        }
    });
    settle().await;
    let start = Instant::now();
    q.shut_down_with_drain().await;
    assert_eq!(Instant::now() - start, 30 * SEC);
    assert_eq!(q.processing_len(), 0);
    worker.await.unwrap();

    // With nothing in flight a drain returns at once.
    q.shut_down_with_drain().await;
}

#[tokio::test(start_paused = true)]
async fn shut_down_releases_a_drain() {
    let q = queue::<&str>();
    q.add("a");
    let held = q.get().await.unwrap();
    let mut drain = pin!(q.shut_down_with_drain());
    assert!(poll_now(drain.as_mut()).is_pending());
    q.shut_down();
    assert!(poll_now(drain.as_mut()).is_ready());
    assert_eq!(q.processing_len(), 1);
    drop(held);
    assert_eq!(q.processing_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn done_on_drop() {
    let q = queue::<&str>();
    q.add("a");
    let item = q.get().await.unwrap();
    assert_eq!(q.processing_len(), 1);
    drop(item);
    assert_eq!(q.processing_len(), 0);

    // A worker that panics mid-reconcile still releases its key, and an add
    // that arrived meanwhile is not lost.
    q.add("a");
    let worker = tokio::spawn({
        let q = q.clone();
        async move {
            let _item = q.get().await.unwrap();
            q.add("a");
            panic!("reconcile blew up");
        }
    });
    assert!(worker.await.unwrap_err().is_panic());
    assert_eq!(q.processing_len(), 0);
    assert_eq!(q.len(), 1);
    assert_eq!(*q.get().await.unwrap(), "a");
}

#[tokio::test(start_paused = true)]
async fn cancel_safe_get() {
    let q = queue::<&str>();
    assert!(
        tokio::time::timeout(SEC, q.get()).await.is_err(),
        "nothing to get"
    );
    q.add("a");
    assert_eq!(q.len(), 1, "the abandoned get took nothing");

    // A get dropped after it was chosen to be woken passes the wakeup on.
    q.get().await.unwrap().done();
    let mut early = Box::pin(q.get());
    assert!(poll_now(early.as_mut()).is_pending());
    let late = tokio::spawn({
        let q = q.clone();
        async move { q.get().await.map(|item| *item) }
    });
    settle().await;
    q.add("b"); // wakes the oldest waiter: `early`
    settle().await;
    assert!(!late.is_finished(), "the wakeup went to `early`");
    drop(early);
    assert_eq!(late.await.unwrap(), Some("b"));
}

#[tokio::test(start_paused = true)]
async fn add_rate_limited_waits_for_the_limiter() {
    let q = queue::<&str>();
    q.add_rate_limited("a");
    assert_eq!(q.num_requeues(&"a"), 1);
    advance(5 * MS - Duration::from_nanos(1)).await;
    assert_eq!(q.len(), 0);
    advance(Duration::from_nanos(1)).await;
    assert_eq!(q.len(), 1);
    q.get().await.unwrap().done();

    let start = Instant::now();
    q.add_rate_limited("a");
    assert_eq!(q.num_requeues(&"a"), 2);
    q.get().await.unwrap().done();
    assert_eq!(Instant::now() - start, 10 * MS);

    q.forget(&"a");
    assert_eq!(q.num_requeues(&"a"), 0);
    q.add_rate_limited("a");
    advance(5 * MS).await;
    assert_eq!(q.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn set_rate_limiter_resets_backoff() {
    let q = queue::<&str>();
    q.add_rate_limited("a");
    q.add_rate_limited("a");
    assert_eq!(q.num_requeues(&"a"), 2);

    q.set_rate_limiter(Box::new(ItemFastSlowRateLimiter::new(SEC, 60 * SEC, 1)));
    assert_eq!(q.num_requeues(&"a"), 0);
    // The key keeps the ready time it had (5 ms, the earlier of 5 and 10 ms).
    assert_eq!(q.pending_keys(), ["a"]);
    advance(5 * MS).await;
    assert_eq!(q.len(), 1);
    q.get().await.unwrap().done();

    q.add_rate_limited("a");
    advance(SEC - MS).await;
    assert_eq!(q.len(), 0);
    advance(MS).await;
    assert_eq!(q.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn pending_keys_lists_everything_once() {
    let q = queue::<&str>();
    q.add("processing");
    let item = q.get().await.unwrap();
    q.add("processing");
    q.add("queued");
    q.add_after("queued", SEC);
    q.add_after("delayed-2", 2 * SEC);
    q.add_after("delayed-1", SEC);
    assert_eq!(
        q.pending_keys(),
        ["queued", "processing", "delayed-1", "delayed-2"]
    );
    drop(item);
    assert_eq!(
        q.pending_keys(),
        ["queued", "processing", "delayed-1", "delayed-2"]
    );
}

#[derive(Default)]
struct Recording {
    depth: Mutex<Vec<usize>>,
    depth_by_priority: Mutex<Vec<(i32, usize)>>,
    adds: AtomicUsize,
    retries: AtomicUsize,
    queue_durations: Mutex<Vec<Duration>>,
    work_durations: Mutex<Vec<Duration>>,
    unfinished: Mutex<Vec<(f64, f64)>>,
}

impl QueueMetrics for Recording {
    fn set_depth(&self, priority: Priority, depth: usize) {
        self.depth.lock().unwrap().push(depth);
        self.depth_by_priority
            .lock()
            .unwrap()
            .push((priority.0, depth));
    }
    fn inc_adds(&self) {
        self.adds.fetch_add(1, Ordering::SeqCst);
    }
    fn inc_retries(&self) {
        self.retries.fetch_add(1, Ordering::SeqCst);
    }
    fn observe_queue_duration(&self, waited: Duration) {
        self.queue_durations.lock().unwrap().push(waited);
    }
    fn observe_work_duration(&self, worked: Duration) {
        self.work_durations.lock().unwrap().push(worked);
    }
    fn set_unfinished_work(&self, unfinished_seconds: f64, longest_running_seconds: f64) {
        self.unfinished
            .lock()
            .unwrap()
            .push((unfinished_seconds, longest_running_seconds));
    }
}

#[tokio::test(start_paused = true)]
async fn metrics_hooks() {
    let metrics = Arc::new(Recording::default());
    let q = WorkQueue::<&str>::new(
        "metered",
        Box::new(ItemExponentialFailureRateLimiter::new(5 * MS, SEC)),
        metrics.clone(),
    );
    assert_eq!(q.name(), "metered");

    q.add("a"); // t=0: adds 1, depth 1
    q.add("a"); // deduplicated: no hook
    q.add_after("b", 2 * SEC); // retries 1, no depth until due
    advance(SEC).await;
    let a = q.get().await.unwrap(); // t=1: waited 1 s, depth 0
    q.add("a"); // while processing: adds 2, depth 1
    advance(3 * SEC).await;
    // t=4: "b" became due at t=2 (adds 3, depth 2); "a" has run 3 s.
    assert_eq!(q.unfinished_work(), (3.0, 3.0));
    let b = q.get().await.unwrap(); // waited 2 s, depth 1
    advance(SEC).await;
    assert_eq!(q.unfinished_work(), (5.0, 4.0)); // t=5: a 4 s + b 1 s
    drop(a); // worked 4 s; re-queued without a second add
    b.done(); // worked 1 s
    let a = q.get().await.unwrap(); // waited 4 s (added at t=1), depth 0
    drop(a); // worked 0 s
    q.add_rate_limited("c"); // retries 2
    q.add_after("d", Duration::ZERO); // retries 3, adds 4, depth 1
    assert_eq!(q.unfinished_work(), (0.0, 0.0));
    q.shut_down(); // depth 0

    assert_eq!(metrics.adds.load(Ordering::SeqCst), 4);
    assert_eq!(metrics.retries.load(Ordering::SeqCst), 3);
    assert_eq!(*metrics.depth.lock().unwrap(), [1, 0, 1, 2, 1, 0, 1, 0]);
    assert_eq!(
        *metrics.queue_durations.lock().unwrap(),
        [SEC, 2 * SEC, 4 * SEC]
    );
    assert_eq!(
        *metrics.work_durations.lock().unwrap(),
        [4 * SEC, SEC, Duration::ZERO]
    );
    assert_eq!(
        *metrics.unfinished.lock().unwrap(),
        [(3.0, 3.0), (5.0, 4.0), (0.0, 0.0)]
    );
}

/// Takes every ready key, in order, marking each done.
async fn drain_ready<K: QueueKey + Copy>(q: &WorkQueue<K>) -> Vec<(K, Priority)> {
    let mut got = Vec::new();
    while !q.is_empty() {
        let item = q.get().await.unwrap();
        got.push((*item, item.priority()));
    }
    got
}

/// While changes come in, keys below normal priority are handed out in
/// slices of a millisecond, each followed by a millisecond with none; a
/// change is handed out at once, also to a getter waiting for the pause to
/// end; once no change came for a second, low keys go at once again.
#[tokio::test(start_paused = true)]
async fn low_priority_keys_pause_for_changes_every_other_millisecond() {
    let q = queue::<&str>();
    let get_after = |q: WorkQueue<&'static str>| async move {
        let asked = Instant::now();
        let item = q.get().await.unwrap();
        (*item.key(), asked.elapsed())
    };
    // No change yet: low keys go at once.
    q.add_with_priority("low-1", Priority::LOW);
    advance(5 * MS).await;
    assert_eq!(get_after(q.clone()).await, ("low-1", Duration::ZERO));

    // A change goes first; the low keys queued with it start a slice.
    q.add("change-1");
    q.add_with_priority("low-2", Priority::LOW);
    q.add_with_priority("low-3", Priority::LOW);
    q.add_with_priority("low-4", Priority::LOW);
    assert_eq!(get_after(q.clone()).await, ("change-1", Duration::ZERO));
    assert_eq!(get_after(q.clone()).await, ("low-2", Duration::ZERO));
    assert_eq!(get_after(q.clone()).await, ("low-3", Duration::ZERO));
    // The slice is over: the next low key waits out the pause, and then
    // starts the next slice.
    advance(MS).await;
    assert_eq!(get_after(q.clone()).await, ("low-4", MS));

    // A getter waiting out a pause takes a change at once.
    advance(MS).await;
    q.add_with_priority("low-5", Priority::LOW);
    let waiting = tokio::spawn(get_after(q.clone()));
    settle().await;
    assert!(!waiting.is_finished(), "a low key went during a pause");
    q.add("change-2");
    assert_eq!(waiting.await.unwrap(), ("change-2", Duration::ZERO));
    assert_eq!(get_after(q.clone()).await, ("low-5", MS));

    // A second without a change: low keys go at once again.
    advance(SEC + 2 * MS).await;
    q.add_with_priority("low-6", Priority::LOW);
    q.add_with_priority("low-7", Priority::LOW);
    advance(MS).await;
    assert_eq!(get_after(q.clone()).await, ("low-6", Duration::ZERO));
    advance(3 * MS).await;
    assert_eq!(get_after(q.clone()).await, ("low-7", Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn highest_priority_first() {
    let q = queue::<&str>();
    q.add_with_priority("low-1", Priority::LOW);
    q.add("normal-1");
    q.add_with_priority("high", Priority(10));
    q.add_with_priority("low-2", Priority::LOW);
    q.add("normal-2");
    assert_eq!(
        q.pending_keys(),
        ["high", "normal-1", "normal-2", "low-1", "low-2"]
    );
    let got = drain_ready(&q).await;
    assert_eq!(
        got,
        [
            ("high", Priority(10)),
            ("normal-1", Priority::NORMAL),
            ("normal-2", Priority::NORMAL),
            ("low-1", Priority::LOW),
            ("low-2", Priority::LOW),
        ]
    );

    // A key re-queued on done joins the back of its priority's line.
    q.add_with_priority("a", Priority::LOW);
    let a = q.get().await.unwrap();
    q.add_with_priority("a", Priority::LOW);
    q.add_with_priority("b", Priority::LOW);
    drop(a);
    assert_eq!(q.pending_keys(), ["b", "a"]);

    // Delayed keys are ordered by priority once due.
    q.add_with(
        "late-high",
        AddOpts {
            priority: Priority(5),
            after: SEC,
            rate_limited: false,
        },
    );
    advance(SEC).await;
    assert_eq!(q.pending_keys(), ["late-high", "b", "a"]);
    let got = drain_ready(&q).await;
    assert_eq!(
        got,
        [
            ("late-high", Priority(5)),
            ("b", Priority::LOW),
            ("a", Priority::LOW)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn priority_only_rises_while_queued() {
    let q = queue::<&str>();
    q.add_with_priority("a", Priority::LOW);
    q.add_with_priority("b", Priority::LOW);
    q.add_with_priority("c", Priority::LOW);
    q.add("n");
    // Raised: "b" moves to the back of the normal line.
    q.add("b");
    // Lower or equal: nothing changes.
    q.add_with_priority("n", Priority::LOW);
    q.add_with_priority("c", Priority::LOW);
    assert_eq!(q.len(), 4, "deduplicated, not added twice");
    assert_eq!(q.pending_keys(), ["n", "b", "a", "c"]);

    // While a worker holds a key, its re-queue mark rises too.
    let n = q.get().await.unwrap();
    assert_eq!(*n, "n");
    q.add_with_priority("n", Priority::LOW);
    q.add_with_priority("n", Priority(7));
    q.add_with_priority("n", Priority::NORMAL);
    drop(n);

    // A delayed key keeps the higher priority whatever the order of adds.
    let delayed = |priority, after| AddOpts {
        priority,
        after,
        rate_limited: false,
    };
    q.add_with("d", delayed(Priority(3), 2 * SEC));
    q.add_with("d", delayed(Priority::LOW, SEC));
    advance(SEC).await;

    let got = drain_ready(&q).await;
    assert_eq!(
        got,
        [
            ("n", Priority(7)),
            ("d", Priority(3)),
            ("b", Priority::NORMAL),
            ("a", Priority::LOW),
            ("c", Priority::LOW),
        ]
    );

    // Once handed out, a key forgets its priority.
    q.add_with_priority("a", Priority::LOW);
    assert_eq!(q.get().await.unwrap().priority(), Priority::LOW);
    advance(10 * SEC).await;
    assert!(
        q.pending_keys().is_empty(),
        "the later ready time was absorbed"
    );
}

#[tokio::test(start_paused = true)]
async fn raised_keys_leave_bounded_garbage() {
    // A low line that never drains while its keys are raised, handed out
    // and queued low again: the stale entries are compacted away.
    let q = queue::<u32>();
    for round in 0..50 {
        for key in 0..100 {
            q.add_with_priority(key, Priority::LOW);
        }
        for key in 0..100 {
            q.add(key);
            let item = q.get().await.unwrap();
            assert_eq!(
                (*item, item.priority()),
                (key, Priority::NORMAL),
                "round {round}"
            );
        }
        assert!(q.is_empty());
    }
    let inner = q.inner.lock();
    let entries: usize = inner.queue.entries();
    assert!(entries <= 64 + 100, "{entries} entries left in the lines");
}

#[tokio::test(start_paused = true)]
async fn add_with_rate_limited_takes_the_shorter_wait() {
    let q = queue::<&str>();
    let limited = |after| AddOpts {
        priority: Priority::LOW,
        after,
        rate_limited: true,
    };
    // The limiter says 5 ms, `after` 1 s: 5 ms.
    q.add_with("a", limited(SEC));
    assert_eq!(q.num_requeues(&"a"), 1);
    advance(5 * MS).await;
    assert_eq!(q.len(), 1);
    let a = q.get().await.unwrap();
    assert_eq!(a.priority(), Priority::LOW);
    drop(a);
    // The limiter says 10 ms, `after` 2 ms: 2 ms.
    q.add_with("a", limited(2 * MS));
    assert_eq!(q.num_requeues(&"a"), 2);
    advance(2 * MS).await;
    assert_eq!(q.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn depth_per_priority() {
    let metrics = Arc::new(Recording::default());
    let q = WorkQueue::<&str>::new(
        "metered",
        Box::new(ItemExponentialFailureRateLimiter::new(5 * MS, SEC)),
        metrics.clone(),
    );
    q.add_with_priority("a", Priority::LOW); // low 1
    q.add_with_priority("b", Priority::LOW); // low 2
    q.add("b"); // raised: low 1, normal 1
    q.add_with_priority("b", Priority::LOW); // no change
    let b = q.get().await.unwrap(); // normal 0
    q.add_with_priority("b", Priority::LOW); // while processing: low 2
    drop(b);
    q.shut_down(); // every priority 0
    assert_eq!(
        *metrics.depth_by_priority.lock().unwrap(),
        [
            (-100, 1),
            (-100, 2),
            (-100, 1),
            (0, 1),
            (0, 0),
            (-100, 2),
            (-100, 0),
            (0, 0),
        ]
    );
    assert_eq!(
        metrics.adds.load(Ordering::SeqCst),
        3,
        "a raise is not an add"
    );
}

#[tokio::test(start_paused = true)]
async fn get_yields_before_a_ready_key() {
    let q = queue::<u32>();
    for key in 0..3 {
        q.add(key);
    }
    // Another task on this (single-threaded) runtime, like an informer.
    let ran = Arc::new(AtomicUsize::new(0));
    let other = tokio::spawn({
        let ran = ran.clone();
        async move {
            loop {
                ran.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
            }
        }
    });
    // A worker whose work never waits: it only gives its thread back in get.
    for taken in 1..=3 {
        q.get().await.unwrap().done();
        assert!(
            ran.load(Ordering::SeqCst) >= taken,
            "the other task did not run before key {taken} was handed out"
        );
    }
    other.abort();
}

#[tokio::test(start_paused = true)]
async fn a_batch_is_added_as_its_keys_one_by_one_and_wakes_every_waiting_getter() {
    let q = queue::<&str>();
    q.add("change");
    let held = q.get().await.unwrap();
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.get().await.map(|item| *item.key()) })
        })
        .collect();
    settle().await;
    // "change" is in flight: it is queued again on done, not handed out twice.
    q.add_all_with_priority(vec!["a", "b", "a", "change", "c"], Priority::LOW);
    let mut got = Vec::new();
    for w in waiting {
        got.push(w.await.unwrap().unwrap());
    }
    got.sort();
    assert_eq!(got, ["a", "b", "c"]);
    // A batch never lowers a queued key's priority.
    q.add_all_with_priority(vec!["d"], Priority::NORMAL);
    q.add_all_with_priority(vec!["d"], Priority::LOW);
    drop(held);
    assert_eq!(q.pending_keys(), ["d", "change"]);
}
