//! The workqueue: client-go's rate-limited, delaying, deduplicating queue of
//! keys to reconcile.
//!
//! One [`WorkQueue`] is client-go's three layers at once
//! (`k8s.io/client-go/util/workqueue`):
//!
//! - the basic queue (`Interface`): [`add`](WorkQueue::add) deduplicates
//!   through a `dirty` set, [`get`](WorkQueue::get) moves a key into
//!   `processing`, and the returned [`QueueItem`] ends the processing when it
//!   is dropped;
//! - the delaying queue (`DelayingInterface`):
//!   [`add_after`](WorkQueue::add_after) parks a key until its ready time;
//! - the rate-limited queue (`RateLimitingInterface`):
//!   [`add_rate_limited`](WorkQueue::add_rate_limited),
//!   [`forget`](WorkQueue::forget) and
//!   [`num_requeues`](WorkQueue::num_requeues) through a
//!   [`RateLimiter`];
//!
//! and controller-runtime's priority queue on top
//! (`sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue`): every key
//! has a [`Priority`] ([`add_with`](WorkQueue::add_with),
//! [`add_with_priority`](WorkQueue::add_with_priority)), `get` hands out the
//! highest priority first, and `workqueue_depth` is reported per priority.
//! The host queues the keys of an initial list or a resync at
//! [`Priority::LOW`] so that changes jump ahead of them, and while changes
//! come in, low-priority keys pause every other millisecond to leave the
//! machine room for them (see [`WorkQueue`]).
//!
//! Nothing runs in the background: there is no waiting-loop task and no
//! heartbeat. Every call moves the keys that have become due into the queue,
//! and a `get` with nothing ready sleeps exactly until the first delayed key is
//! due (or until something is added). Time is [`tokio::time::Instant`], so
//! paused tokio time drives the queue deterministically in tests.

mod delaying;
mod metrics;
mod priority;
mod queue;
pub mod ratelimit;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::fmt;
use std::ops::Deref;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use delaying::Waiting;
pub use metrics::{NoopQueueMetrics, QueueMetrics};
pub use priority::{AddOpts, Priority};
use queue::Queue;
pub use ratelimit::{QueueKey, RateLimiter};

/// Delays are clamped to about a century so that `now + delay` cannot
/// overflow; a key delayed that long is, for a running process, never due.
const MAX_DELAY: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// How long after the last change low-priority keys keep making room for
/// changes (see `State::paced`).
const PACE_AFTER: Duration = Duration::from_secs(1);

/// How long low-priority keys are handed out at a time while changes come
/// in, and how long they then pause.
const PACE_SLICE: Duration = Duration::from_millis(1);

/// A rate-limited, delaying work queue of keys; cheap to clone, every clone is
/// the same queue.
///
/// # Never handed to two workers
/// A key is in at most one [`QueueItem`] at a time. Adding a key while a worker
/// holds it only marks it dirty; it is queued again when that item is done.
///
/// # Re-queued once on done
/// However many times a key is added while it is being processed, it is handed
/// out exactly once more after the item is done. Adds of a key that is already
/// queued are dropped too (`dirty` deduplication).
///
/// # Earliest ready time wins
/// [`add_after`](Self::add_after) for a key that is already waiting keeps the
/// earlier of the two ready times, in whichever order they were requested.
///
/// # Ready at exactly its time
/// A delayed key is ready at `now + delay` (not a heartbeat later) and not a
/// moment before; a zero delay is a plain [`add`](Self::add).
///
/// # Shutdown drops pending work
/// [`shut_down`](Self::shut_down) drops every queued and delayed key, wakes
/// all blocked getters with `None`, and ignores later adds. Keys already
/// handed out stay valid and are still marked done when their items drop.
///
/// # Drain waits for in-flight keys
/// [`shut_down_with_drain`](Self::shut_down_with_drain) does the same, then
/// waits until every handed-out key is done.
///
/// # Cancel-safe get
/// Dropping a pending [`get`](Self::get) future loses no key: a key is only
/// taken in the same poll that returns it.
///
/// # Get yields before a ready key
/// A [`get`](Self::get) that finds a key ready first yields to the tokio
/// scheduler once (and takes whichever key is first when it resumes).
/// Workers whose reconciles never wait — a resync of cached objects that
/// need nothing — would otherwise take key after key without ever giving
/// their threads back, starving the informers and event feeds that fill
/// the queue and the IO driver they need: the event of a real change could
/// not even be queued, let alone jump ahead, until the queue ran dry.
///
/// # Highest priority first
/// [`get`](Self::get) hands out a ready key of the highest [`Priority`]
/// queued, and within one priority the key that became ready first (FIFO;
/// a key re-queued on done joins the back of its priority's line). Delayed
/// keys are ordered by priority once due, like any other ready key.
///
/// # Priority only rises while queued
/// Adding a key that is already queued (ready, waiting for its worker to
/// finish, or delayed) with a higher priority raises it — a ready key moves
/// to the back of its new priority's line — and with a lower or equal one
/// changes nothing. Once handed out, a key forgets its priority: the next
/// add sets it afresh.
///
/// # Low priority pauses for changes
/// While changes come in (a key of [`Priority::NORMAL`] or higher was added
/// within the last second), keys below normal priority are handed out in
/// slices of a millisecond, each followed by a millisecond with none. A
/// resync then leaves the machine about half its time for the changes,
/// the events that bring them and the API server, instead of keeping
/// every core busy when a change arrives; it drains at about half speed
/// while changes come in, and at full speed otherwise. A change is never
/// held: a getter waiting out a pause takes it at once.
///
/// # Depth per priority
/// The depth hook ([`QueueMetrics::set_depth`]) reports the dirty keys of
/// each priority separately; a raised key moves from one to the other, so
/// the sum is client-go's depth.
pub struct WorkQueue<K: QueueKey> {
    inner: Arc<Inner<K>>,
}

impl<K: QueueKey> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K: QueueKey> fmt::Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkQueue")
            .field("name", &self.inner.name)
            .field("len", &self.len())
            .field("processing", &self.processing_len())
            .field("shutting_down", &self.is_shutting_down())
            .finish()
    }
}

struct Inner<K: QueueKey> {
    name: String,
    state: Mutex<State<K>>,
    /// Read on every `add_rate_limited`; written only when the config changes.
    rate_limiter: RwLock<Arc<dyn RateLimiter<K>>>,
    /// Getters wait here: woken one per key that becomes ready, all at once on
    /// shutdown or when the first ready time moves earlier.
    ready: Notify,
    /// `shut_down_with_drain` waits here for `processing` to empty.
    drained: Notify,
}

struct State<K> {
    queue: Queue<K>,
    waiting: Waiting<K>,
    /// When a key of [`Priority::NORMAL`] or higher was last added: a
    /// change, which low-priority keys make room for (see [`PACE_AFTER`]).
    last_change: Option<Instant>,
    /// While changes come in: low-priority keys are handed out until the
    /// first time, then none until the second (see `State::paced`).
    low_slice: (Instant, Instant),
    shutting_down: bool,
    /// Set by `shut_down_with_drain`, cleared by `shut_down` (which, as in
    /// client-go, releases a pending drain).
    draining: bool,
    /// Whom to wake once the lock is released.
    wake: Wakeups,
}

#[derive(Default)]
struct Wakeups {
    getters: usize,
    all_getters: bool,
    drainers: bool,
}

impl<K: QueueKey> State<K> {
    fn add(&mut self, key: K, added_at: Instant, priority: Priority) {
        if priority >= Priority::NORMAL {
            self.last_change = Some(added_at);
        }
        if !self.shutting_down && self.queue.add(key, added_at, priority) {
            self.wake.getters += 1;
        }
    }

    /// When a low-priority key may be handed out, if not now. While changes
    /// come in (one was added within [`PACE_AFTER`]), keys below
    /// [`Priority::NORMAL`] are handed out in slices of [`PACE_SLICE`], each
    /// followed by as long with none, so that a resync leaves the machine
    /// idle about half the time for the changes, their events and the API
    /// server, instead of every core being busy when a change arrives. A
    /// slice starts when a getter asks after the pause: a timer that fires
    /// late shortens the pause's successor, never the slice. A change is
    /// never held: it is first in line whenever it is ready.
    fn paced(&mut self, now: Instant) -> Option<Instant> {
        let changing = self
            .last_change
            .is_some_and(|t| now.saturating_duration_since(t) < PACE_AFTER);
        if !changing || self.queue.first_priority()? >= Priority::NORMAL {
            return None;
        }
        let (slice_ends, pause_ends) = self.low_slice;
        if now < slice_ends {
            return None;
        }
        if now < pause_ends {
            return Some(pause_ends);
        }
        self.low_slice = (now + PACE_SLICE, now + 2 * PACE_SLICE);
        None
    }

    /// Queues `key` once `delay` has passed (a zero delay: now), counting a
    /// retry if asked to.
    fn schedule(
        &mut self,
        key: K,
        now: Instant,
        delay: Duration,
        priority: Priority,
        count_retry: bool,
    ) {
        if self.shutting_down {
            return;
        }
        if count_retry {
            self.queue.metrics().inc_retries();
        }
        if delay.is_zero() {
            self.add(key, now, priority);
        } else if self
            .waiting
            .insert(key, now + delay.min(MAX_DELAY), priority)
        {
            // Sleeping getters armed their timers for a later key.
            self.wake.all_getters = true;
        }
    }

    /// Delayed keys count as added when they became due, not when some call
    /// happened to notice, so the queue-duration metric is not skewed.
    fn promote_due(&mut self, now: Instant) {
        while let Some((key, ready_at, priority)) = self.waiting.pop_due(now) {
            self.add(key, ready_at, priority);
        }
    }

    fn shut_down(&mut self, drain: bool) {
        self.shutting_down = true;
        self.draining = drain;
        self.queue.clear_pending();
        self.waiting.clear();
        self.wake.all_getters = true;
        self.wake.drainers = true;
    }
}

impl<K: QueueKey> Inner<K> {
    fn lock(&self) -> MutexGuard<'_, State<K>> {
        // State changes are a few map operations that leave it consistent at
        // every step, so a panic elsewhere (say in a metrics hook) must not
        // stop the queue, and above all not a `QueueItem` drop during unwinding.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `op` on the state after moving due keys into the queue, then wakes
    /// whoever the change concerns, outside the lock.
    fn update<R>(&self, op: impl FnOnce(&mut State<K>, Instant) -> R) -> R {
        let now = Instant::now();
        let (result, wake) = {
            let mut state = self.lock();
            state.promote_due(now);
            let result = op(&mut state, now);
            (result, std::mem::take(&mut state.wake))
        };
        if wake.all_getters {
            self.ready.notify_waiters();
        } else {
            for _ in 0..wake.getters {
                self.ready.notify_one();
            }
        }
        if wake.drainers {
            self.drained.notify_waiters();
        }
        result
    }

    fn done(&self, key: &K) {
        self.update(|state, now| {
            if state.queue.done(key, now) {
                state.wake.getters += 1;
            }
            if state.queue.processing_len() == 0 {
                state.wake.drainers = true;
            }
        });
    }

    fn rate_limiter(&self) -> Arc<dyn RateLimiter<K>> {
        Arc::clone(
            &self
                .rate_limiter
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }
}

enum Step<K> {
    Got(K, Priority),
    /// A key is ready, but this get has not let the scheduler run yet.
    Yield,
    ShutDown,
    Wait(Option<Instant>),
}

impl<K: QueueKey> WorkQueue<K> {
    /// An empty queue. Needs no runtime to be created; `get` and
    /// `shut_down_with_drain` must be awaited inside a tokio runtime.
    pub fn new(
        name: impl Into<String>,
        rate_limiter: Box<dyn RateLimiter<K>>,
        metrics: Arc<dyn QueueMetrics>,
    ) -> Self {
        let state = State {
            queue: Queue::new(metrics),
            waiting: Waiting::new(),
            last_change: None,
            low_slice: (Instant::now(), Instant::now()),
            shutting_down: false,
            draining: false,
            wake: Wakeups::default(),
        };
        Self {
            inner: Arc::new(Inner {
                name: name.into(),
                state: Mutex::new(state),
                rate_limiter: RwLock::new(Arc::from(rate_limiter)),
                ready: Notify::new(),
                drained: Notify::new(),
            }),
        }
    }

    /// The queue's name (the `name` label of its metrics).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Queues `key` at [`Priority::NORMAL`] unless it is already queued; if a
    /// worker has it, it is queued again once that worker is done. Ignored
    /// after shutdown.
    pub fn add(&self, key: K) {
        self.add_with_priority(key, Priority::NORMAL);
    }

    /// [`add`](Self::add) at `priority`: a key already queued keeps the
    /// higher of its two priorities.
    pub fn add_with_priority(&self, key: K, priority: Priority) {
        self.inner
            .update(|state, now| state.add(key, now, priority));
    }

    /// [`add_with_priority`](Self::add_with_priority) of every key of
    /// `keys`, under one lock: a bulk enqueue (a resync) takes the queue
    /// once per batch instead of once per key, and wakes the waiting
    /// workers once.
    pub fn add_all_with_priority(&self, keys: Vec<K>, priority: Priority) {
        self.inner.update(|state, now| {
            for key in keys {
                state.add(key, now, priority);
            }
            if state.wake.getters > 1 {
                state.wake.getters = 0;
                state.wake.all_getters = true;
            }
        });
    }

    /// Queues `key` as `opts` say (controller-runtime's `AddWithOpts`):
    /// at `opts.priority`, after `opts.after` and/or the rate limiter's delay
    /// (the shorter of the two when both are asked for). A delayed or
    /// rate-limited add counts a retry, as `add_after` does. Ignored after
    /// shutdown.
    pub fn add_with(&self, key: K, opts: AddOpts) {
        let delay = if opts.rate_limited {
            let limited = self.inner.rate_limiter().when(&key);
            if opts.after.is_zero() {
                limited
            } else {
                limited.min(opts.after)
            }
        } else {
            opts.after
        };
        let count_retry = opts.rate_limited || !opts.after.is_zero();
        self.inner.update(|state, now| {
            state.schedule(key, now, delay, opts.priority, count_retry);
        });
    }

    /// Waits for a key and hands it out, or returns `None` once the queue is
    /// shutting down (with or without drain: new gets end at once while
    /// in-flight items finish).
    pub async fn get(&self) -> Option<QueueItem<K>> {
        // Whether this call has let other tasks run (yielded, or waited).
        let mut yielded = false;
        loop {
            // Registered before looking at the state, so a key added between
            // the look and the wait still wakes us.
            let mut notified = pin!(self.inner.ready.notified());
            notified.as_mut().enable();
            let step = self.inner.update(|state, now| {
                if state.shutting_down {
                    Step::ShutDown
                } else if !yielded && state.queue.len() > 0 {
                    Step::Yield
                } else if let Some(at) = state.paced(now) {
                    let due = state.waiting.next_ready_at();
                    Step::Wait(Some(due.map_or(at, |d| d.min(at))))
                } else if let Some((key, priority)) = state.queue.pop(now) {
                    Step::Got(key, priority)
                } else {
                    Step::Wait(state.waiting.next_ready_at())
                }
            });
            if !matches!(step, Step::Got(..) | Step::ShutDown) {
                yielded = true;
            }
            match step {
                Step::Got(key, priority) => {
                    return Some(QueueItem {
                        inner: Arc::clone(&self.inner),
                        key,
                        priority,
                    });
                }
                Step::ShutDown => return None,
                // Nothing is taken yet: dropping the get here loses nothing.
                Step::Yield => tokio::task::yield_now().await,
                Step::Wait(None) => notified.await,
                Step::Wait(Some(ready_at)) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(ready_at) => {}
                    }
                }
            }
        }
    }

    /// Keys ready to be handed out now (delayed keys not yet due and keys
    /// waiting for their worker to finish are not counted, as in client-go).
    pub fn len(&self) -> usize {
        self.inner.update(|state, _| state.queue.len())
    }

    /// Keys added and not yet handed out, per priority, highest first
    /// (the `workqueue_depth` gauge's values; zero depths left out).
    pub fn depth_by_priority(&self) -> Vec<(Priority, usize)> {
        self.inner.update(|state, _| state.queue.depths())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues `key` at [`Priority::NORMAL`] once `delay` has passed. A zero
    /// delay is an [`add`](Self::add); a key already waiting keeps the earlier
    /// ready time. Counts a retry, as client-go's `AddAfter` does (even for a
    /// zero delay). Ignored after shutdown.
    pub fn add_after(&self, key: K, delay: Duration) {
        self.inner.update(|state, now| {
            state.schedule(key, now, delay, Priority::NORMAL, true);
        });
    }

    /// `add_after(key, rate_limiter.when(&key))`: the key waits as long as the
    /// rate limiter says, which also counts the failure.
    pub fn add_rate_limited(&self, key: K) {
        let delay = self.inner.rate_limiter().when(&key);
        self.add_after(key, delay);
    }

    /// Tells the rate limiter to stop tracking `key` (reset its backoff).
    pub fn forget(&self, key: &K) {
        self.inner.rate_limiter().forget(key);
    }

    /// Failures the rate limiter has counted for `key` since its last forget.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.inner.rate_limiter().num_requeues(key)
    }

    /// Replaces the rate limiter, e.g. when a plugin's `rateLimiter` config
    /// changes. Backoff counters live in the limiter, so they reset exactly
    /// when the limiter is replaced: a hot swap that keeps the config must not
    /// call this. Keys already waiting keep their ready times.
    pub fn set_rate_limiter(&self, rate_limiter: Box<dyn RateLimiter<K>>) {
        *self
            .inner
            .rate_limiter
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::from(rate_limiter);
    }

    /// Stops the queue: drops queued and delayed keys, wakes every blocked
    /// getter with `None` and ignores later adds. Does not wait for in-flight
    /// keys, and releases a pending [`shut_down_with_drain`](Self::shut_down_with_drain)
    /// (client-go's `ShutDown` after `ShutDownWithDrain`).
    pub fn shut_down(&self) {
        self.inner.update(|state, _| state.shut_down(false));
    }

    /// Like [`shut_down`](Self::shut_down), then waits until every key handed
    /// out has been done (or until `shut_down` is called). Bound it with a
    /// timeout if workers may hang.
    pub async fn shut_down_with_drain(&self) {
        self.inner.update(|state, _| state.shut_down(true));
        loop {
            let mut drained = pin!(self.inner.drained.notified());
            drained.as_mut().enable();
            let finished = self
                .inner
                .update(|state, _| !state.draining || state.queue.processing_len() == 0);
            if finished {
                return;
            }
            drained.await;
        }
    }

    pub fn is_shutting_down(&self) -> bool {
        self.inner.update(|state, _| state.shutting_down)
    }

    /// Keys handed out and not yet done.
    pub fn processing_len(&self) -> usize {
        self.inner.update(|state, _| state.queue.processing_len())
    }

    /// (sum of the seconds every in-flight key has been processed, seconds of
    /// the longest-running one); also pushed to
    /// [`QueueMetrics::set_unfinished_work`]. A stuck worker shows up here
    /// long before its key's work duration is observed.
    pub fn unfinished_work(&self) -> (f64, f64) {
        self.inner.update(|state, now| {
            let (unfinished, longest) = state.queue.unfinished_work(now);
            state
                .queue
                .metrics()
                .set_unfinished_work(unfinished, longest);
            (unfinished, longest)
        })
    }

    /// Every key that will be handed out unless the queue shuts down, each
    /// once: ready keys in the order `get` hands them out, then keys to be
    /// re-queued when their worker is done, then delayed keys soonest first.
    pub fn pending_keys(&self) -> Vec<K> {
        self.inner.update(|state, _| {
            let mut seen = HashSet::new();
            state
                .queue
                .pending()
                .chain(
                    state
                        .waiting
                        .keys()
                        .filter(|key| !state.queue.is_dirty(key)),
                )
                .filter(|key| seen.insert(*key))
                .cloned()
                .collect()
        })
    }
}

/// A key handed to one worker by [`WorkQueue::get`].
///
/// # Done on drop
/// Dropping the item is client-go's `Done`: the key leaves `processing` and,
/// if it was added meanwhile, is queued again. [`done`](Self::done) only makes
/// that explicit; a worker that returns early, traps or panics still releases
/// its key.
pub struct QueueItem<K: QueueKey> {
    inner: Arc<Inner<K>>,
    key: K,
    priority: Priority,
}

impl<K: QueueKey> QueueItem<K> {
    pub fn key(&self) -> &K {
        &self.key
    }

    /// The priority the key was queued with (controller-runtime's
    /// `GetWithPriority`): a retry should be queued at it again.
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// Marks the key done (the same as dropping the item).
    pub fn done(self) {
        drop(self);
    }
}

impl<K: QueueKey> Deref for QueueItem<K> {
    type Target = K;

    fn deref(&self) -> &K {
        &self.key
    }
}

impl<K: QueueKey> Drop for QueueItem<K> {
    fn drop(&mut self) {
        self.inner.done(&self.key);
    }
}

impl<K: QueueKey + fmt::Debug> fmt::Debug for QueueItem<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueItem")
            .field("queue", &self.inner.name)
            .field("key", &self.key)
            .field("priority", &self.priority)
            .finish()
    }
}
