//! The basic queue: highest priority first and FIFO within a priority,
//! deduplication through `dirty`, and the `processing` set that keeps a key
//! away from a second worker.
//!
//! This is client-go's `workqueue.Type` with controller-runtime's priorities,
//! without the locking and waking, which [`WorkQueue`](super::WorkQueue) adds
//! around it. Time is passed in so the state machine itself never reads a
//! clock.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use tokio::time::Instant;

use super::QueueKey;
use super::metrics::QueueMetrics;
use super::priority::Priority;

/// Priority levels kept (empty) for reuse before empty ones are dropped: a
/// level's buffer then survives the queue running dry, which it does between
/// most adds when workers keep up.
const KEPT_LEVELS: usize = 8;

/// Stale entries tolerated whatever the number of live ones.
const MIN_COMPACTION: usize = 64;
/// Capacity a table or line keeps however empty it is: below this, giving
/// room back is not worth its rehash.
const MIN_SHRINK: usize = 1024;

pub(super) struct Queue<K> {
    /// Keys ready to be handed out: one FIFO line per priority, highest
    /// priority first. An entry is live only while its key's `dirty` record
    /// holds the entry's sequence number; raising a queued key's priority
    /// files a new entry and leaves the old one to be skipped when reached.
    ready: BTreeMap<Reverse<Priority>, VecDeque<(u64, K)>>,
    /// Live entries in `ready`.
    ready_len: usize,
    /// Stale entries in `ready`; compacted away once they outnumber the
    /// live ones, so a low line that never drains cannot grow without bound.
    stale: usize,
    next_seq: u64,
    /// Keys added and not yet handed out. A key that is also in `processing`
    /// was added while a worker had it and goes into `ready` on done.
    dirty: HashMap<K, Dirty>,
    /// Keys handed to a worker and not yet done, with when they were handed out.
    processing: HashMap<K, Instant>,
    /// Dirty keys per priority (the `workqueue_depth` gauge per `priority`).
    depth: BTreeMap<Priority, usize>,
    metrics: Arc<dyn QueueMetrics>,
}

struct Dirty {
    /// When it was added (for the queue-duration metric).
    added_at: Instant,
    priority: Priority,
    /// The sequence number of its live entry in `ready`; None while a worker
    /// holds the key.
    ready_seq: Option<u64>,
}

impl<K: QueueKey> Queue<K> {
    pub(super) fn new(metrics: Arc<dyn QueueMetrics>) -> Self {
        Self {
            ready: BTreeMap::new(),
            ready_len: 0,
            stale: 0,
            next_seq: 0,
            dirty: HashMap::new(),
            processing: HashMap::new(),
            depth: BTreeMap::new(),
            metrics,
        }
    }

    /// Marks `key` dirty as of `added_at` at `priority`. Returns true if it
    /// became ready to hand out; false if it was already dirty (deduplicated;
    /// its priority rises to `priority` if that is higher) or is being
    /// processed (it will be re-queued on done).
    pub(super) fn add(&mut self, key: K, added_at: Instant, priority: Priority) -> bool {
        if let Some(dirty) = self.dirty.get_mut(&key) {
            if priority > dirty.priority {
                let old = std::mem::replace(&mut dirty.priority, priority);
                let requeued = dirty.ready_seq.is_some();
                if requeued {
                    let seq = file(&mut self.ready, &mut self.next_seq, key, priority);
                    dirty.ready_seq = Some(seq);
                }
                self.count(old, -1);
                self.count(priority, 1);
                if requeued {
                    self.stale += 1;
                    if self.stale > self.ready_len.max(MIN_COMPACTION) {
                        self.compact();
                    }
                }
            }
            return false;
        }
        self.metrics.inc_adds();
        let in_flight = self.processing.contains_key(&key);
        let ready_seq = if in_flight {
            None
        } else {
            self.ready_len += 1;
            Some(file(
                &mut self.ready,
                &mut self.next_seq,
                key.clone(),
                priority,
            ))
        };
        self.dirty.insert(
            key,
            Dirty {
                added_at,
                priority,
                ready_seq,
            },
        );
        self.count(priority, 1);
        !in_flight
    }

    /// Hands out the oldest ready key of the highest priority, moving it
    /// from `dirty` to `processing`.
    pub(super) fn pop(&mut self, now: Instant) -> Option<(K, Priority)> {
        if self.ready_len == 0 {
            return None;
        }
        let (key, priority, dirty) = self.take_first_live();
        self.ready_len -= 1;
        self.release_spare();
        self.metrics
            .observe_queue_duration(now.saturating_duration_since(dirty.added_at));
        self.processing.insert(key.clone(), now);
        self.count(priority, -1);
        Some((key, priority))
    }

    /// Gives back the room of a burst: a table or line holding less than an
    /// eighth of its capacity shrinks to twice what it holds, so a queue
    /// that once held a million keys (an initial list, a full resync) does
    /// not keep their room, ~200 bytes per key. Amortized O(1): a shrink
    /// costs what it keeps, after seven eighths were removed.
    fn release_spare(&mut self) {
        let spare = |len: usize, capacity: usize| capacity >= MIN_SHRINK && len < capacity / 8;
        if spare(self.dirty.len(), self.dirty.capacity()) {
            self.dirty.shrink_to(self.dirty.len() * 2);
        }
        for line in self.ready.values_mut() {
            if spare(line.len(), line.capacity()) {
                line.shrink_to(line.len() * 2);
            }
        }
    }

    /// The capacities of `dirty` and of the largest line of `ready`.
    #[cfg(test)]
    pub(super) fn capacities(&self) -> (usize, usize) {
        let line = self.ready.values().map(VecDeque::capacity).max();
        (self.dirty.capacity(), line.unwrap_or(0))
    }

    /// Removes the first live entry of `ready` and its key's `dirty` record,
    /// dropping the stale entries before it. There must be one.
    fn take_first_live(&mut self) -> (K, Priority, Dirty) {
        let priority = self
            .first_priority()
            .expect("ready_len counts live entries");
        let (_, key) = self
            .ready
            .get_mut(&Reverse(priority))
            .and_then(VecDeque::pop_front)
            .expect("first_priority stops at a live entry");
        let record = self.dirty.remove(&key).expect("a live entry is dirty");
        (key, priority, record)
    }

    /// The priority of the key [`pop`](Self::pop) would hand out now,
    /// dropping the stale entries in front of it.
    pub(super) fn first_priority(&mut self) -> Option<Priority> {
        if self.ready_len == 0 {
            return None;
        }
        let Self {
            ready,
            dirty,
            stale,
            ..
        } = self;
        for (&Reverse(priority), line) in ready.iter_mut() {
            while let Some((seq, key)) = line.front() {
                if dirty.get(key).is_some_and(|d| d.ready_seq == Some(*seq)) {
                    return Some(priority);
                }
                line.pop_front();
                *stale -= 1;
            }
        }
        None
    }

    /// Ends the processing of `key`. Returns true if it was added meanwhile and
    /// is now ready again (at the back of its priority's line).
    pub(super) fn done(&mut self, key: &K, now: Instant) -> bool {
        if let Some(started) = self.processing.remove(key) {
            self.metrics
                .observe_work_duration(now.saturating_duration_since(started));
        }
        let Some(dirty) = self.dirty.get_mut(key) else {
            return false;
        };
        let seq = file(
            &mut self.ready,
            &mut self.next_seq,
            key.clone(),
            dirty.priority,
        );
        dirty.ready_seq = Some(seq);
        self.ready_len += 1;
        true
    }

    /// Drops every key not yet handed out, including the re-queue marks of
    /// keys in flight. Keys in flight stay in `processing` until done.
    pub(super) fn clear_pending(&mut self) {
        self.ready.clear();
        self.ready_len = 0;
        self.stale = 0;
        self.dirty.clear();
        self.dirty.shrink_to(MIN_SHRINK);
        for (&priority, depth) in &mut self.depth {
            *depth = 0;
            self.metrics.set_depth(priority, 0);
        }
    }

    pub(super) fn len(&self) -> usize {
        self.ready_len
    }

    pub(super) fn processing_len(&self) -> usize {
        self.processing.len()
    }

    pub(super) fn is_dirty(&self, key: &K) -> bool {
        self.dirty.contains_key(key)
    }

    /// Ready keys in the order they will be handed out, then keys that will
    /// be re-queued on done.
    pub(super) fn pending(&self) -> impl Iterator<Item = &K> {
        let ready = self.ready.values().flatten().filter_map(|(seq, key)| {
            self.dirty
                .get(key)
                .is_some_and(|d| d.ready_seq == Some(*seq))
                .then_some(key)
        });
        let requeue_on_done = self
            .dirty
            .keys()
            .filter(|key| self.processing.contains_key(*key));
        ready.chain(requeue_on_done)
    }

    /// (sum of in-flight ages, oldest in-flight age) in seconds.
    pub(super) fn unfinished_work(&self, now: Instant) -> (f64, f64) {
        self.processing
            .values()
            .map(|started| now.saturating_duration_since(*started).as_secs_f64())
            .fold((0.0, 0.0), |(total, longest), age| {
                (total + age, f64::max(longest, age))
            })
    }

    /// Entries in the lines, live and stale.
    #[cfg(test)]
    pub(super) fn entries(&self) -> usize {
        self.ready.values().map(VecDeque::len).sum()
    }

    pub(super) fn metrics(&self) -> &dyn QueueMetrics {
        &*self.metrics
    }

    /// Drops every stale entry from `ready`.
    fn compact(&mut self) {
        let dirty = &self.dirty;
        for line in self.ready.values_mut() {
            line.retain(|(seq, key)| dirty.get(key).is_some_and(|d| d.ready_seq == Some(*seq)));
        }
        self.stale = 0;
    }

    /// Dirty keys per priority, highest first, leaving out the empty ones.
    pub(super) fn depths(&self) -> Vec<(Priority, usize)> {
        self.depth
            .iter()
            .rev()
            .filter(|(_, n)| **n > 0)
            .map(|(p, n)| (*p, *n))
            .collect()
    }

    /// Moves the depth of `priority` by `delta` and reports it.
    fn count(&mut self, priority: Priority, delta: isize) {
        let depth = self.depth.entry(priority).or_default();
        *depth = depth.saturating_add_signed(delta);
        self.metrics.set_depth(priority, *depth);
    }
}

/// Appends `key` to the line of `priority`; returns the entry's sequence
/// number.
fn file<K>(
    ready: &mut BTreeMap<Reverse<Priority>, VecDeque<(u64, K)>>,
    next_seq: &mut u64,
    key: K,
    priority: Priority,
) -> u64 {
    let seq = *next_seq;
    *next_seq += 1;
    if !ready.contains_key(&Reverse(priority)) && ready.len() >= KEPT_LEVELS {
        ready.retain(|_, line| !line.is_empty());
    }
    ready
        .entry(Reverse(priority))
        .or_default()
        .push_back((seq, key));
    seq
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::workqueue::metrics::NoopQueueMetrics;

    #[test]
    fn a_drained_burst_gives_its_room_back() {
        let mut queue: Queue<String> = Queue::new(Arc::new(NoopQueueMetrics));
        let now = Instant::now();
        for i in 0..100_000 {
            queue.add(format!("key-{i}"), now, Priority::LOW);
        }
        let (dirty, line) = queue.capacities();
        assert!(dirty >= 100_000 && line >= 100_000, "{dirty} {line}");
        while let Some((key, _)) = queue.pop(now) {
            queue.done(&key, now);
        }
        let (dirty, line) = queue.capacities();
        assert!(dirty < 2 * MIN_SHRINK, "dirty keeps room for {dirty}");
        assert!(line < 2 * MIN_SHRINK, "the line keeps room for {line}");
    }
}
