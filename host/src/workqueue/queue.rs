//! The basic queue: FIFO order, deduplication through `dirty`, and the
//! `processing` set that keeps a key away from a second worker.
//!
//! This is client-go's `workqueue.Type` without the locking and waking, which
//! [`WorkQueue`](super::WorkQueue) adds around it. Time is passed in so the
//! state machine itself never reads a clock.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use tokio::time::Instant;

use super::QueueKey;
use super::metrics::QueueMetrics;

pub(super) struct Queue<K> {
    /// Keys ready to be handed out, oldest first. Always a subset of `dirty`.
    queue: VecDeque<K>,
    /// Keys added and not yet handed out, with when they were added (for the
    /// queue-duration metric). A key that is also in `processing` was added
    /// while a worker had it and goes back into `queue` on done.
    dirty: HashMap<K, Instant>,
    /// Keys handed to a worker and not yet done, with when they were handed out.
    processing: HashMap<K, Instant>,
    metrics: Arc<dyn QueueMetrics>,
}

impl<K: QueueKey> Queue<K> {
    pub(super) fn new(metrics: Arc<dyn QueueMetrics>) -> Self {
        Self {
            queue: VecDeque::new(),
            dirty: HashMap::new(),
            processing: HashMap::new(),
            metrics,
        }
    }

    /// Marks `key` dirty as of `added_at`. Returns true if it became ready to
    /// hand out; false if it was already dirty (deduplicated) or is being
    /// processed (it will be re-queued on done).
    pub(super) fn add(&mut self, key: K, added_at: Instant) -> bool {
        if self.dirty.contains_key(&key) {
            return false;
        }
        self.metrics.inc_adds();
        let in_flight = self.processing.contains_key(&key);
        if !in_flight {
            self.queue.push_back(key.clone());
        }
        self.dirty.insert(key, added_at);
        self.metrics.set_depth(self.dirty.len());
        !in_flight
    }

    /// Hands out the oldest ready key, moving it from `dirty` to `processing`.
    pub(super) fn pop(&mut self, now: Instant) -> Option<K> {
        let key = self.queue.pop_front()?;
        if let Some(added_at) = self.dirty.remove(&key) {
            self.metrics
                .observe_queue_duration(now.saturating_duration_since(added_at));
        }
        self.metrics.set_depth(self.dirty.len());
        self.processing.insert(key.clone(), now);
        Some(key)
    }

    /// Ends the processing of `key`. Returns true if it was added meanwhile and
    /// is now ready again.
    pub(super) fn done(&mut self, key: &K, now: Instant) -> bool {
        if let Some(started) = self.processing.remove(key) {
            self.metrics
                .observe_work_duration(now.saturating_duration_since(started));
        }
        if self.dirty.contains_key(key) {
            self.queue.push_back(key.clone());
            true
        } else {
            false
        }
    }

    /// Drops every key not yet handed out, including the re-queue marks of
    /// keys in flight. Keys in flight stay in `processing` until done.
    pub(super) fn clear_pending(&mut self) {
        self.queue.clear();
        self.dirty.clear();
        self.metrics.set_depth(0);
    }

    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }

    pub(super) fn processing_len(&self) -> usize {
        self.processing.len()
    }

    pub(super) fn is_dirty(&self, key: &K) -> bool {
        self.dirty.contains_key(key)
    }

    /// Ready keys in queue order, then keys that will be re-queued on done.
    pub(super) fn pending(&self) -> impl Iterator<Item = &K> {
        let requeue_on_done = self
            .dirty
            .keys()
            .filter(|key| self.processing.contains_key(*key));
        self.queue.iter().chain(requeue_on_done)
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

    pub(super) fn metrics(&self) -> &dyn QueueMetrics {
        &*self.metrics
    }
}
