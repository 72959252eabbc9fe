//! The delaying part: keys waiting for their ready time.
//!
//! client-go keeps a min-heap plus a map from key to heap entry, fed by a
//! goroutine with a 10 ms heartbeat. Here an ordered map plays the heap (its
//! first entry is the next key due) and nothing runs in the background:
//! [`WorkQueue`](super::WorkQueue) moves due keys into the queue whenever it
//! is touched, and a waiting `get` sleeps exactly until the first ready time.

use std::collections::{BTreeMap, HashMap};

use tokio::time::Instant;

use super::QueueKey;
use super::priority::Priority;

pub(super) struct Waiting<K> {
    /// Ordered by ready time, then by insertion so equal times stay FIFO.
    by_time: BTreeMap<(Instant, u64), K>,
    /// Each waiting key's slot in `by_time` and the priority it will be
    /// queued with.
    by_key: HashMap<K, ((Instant, u64), Priority)>,
    next_seq: u64,
}

impl<K: QueueKey> Waiting<K> {
    pub(super) fn new() -> Self {
        Self {
            by_time: BTreeMap::new(),
            by_key: HashMap::new(),
            next_seq: 0,
        }
    }

    /// Schedules `key` for `ready_at` at `priority`; a key already waiting
    /// keeps the earlier of its two ready times and the higher of its two
    /// priorities. Returns true if the first ready time changed, i.e.
    /// sleeping getters must re-arm their timers.
    pub(super) fn insert(&mut self, key: K, ready_at: Instant, priority: Priority) -> bool {
        let head_before = self.next_ready_at();
        let priority = match self.by_key.get_mut(&key) {
            Some((slot, waiting)) => {
                *waiting = (*waiting).max(priority);
                if slot.0 <= ready_at {
                    return false;
                }
                let priority = *waiting;
                self.by_time.remove(slot);
                priority
            }
            None => priority,
        };
        let slot = (ready_at, self.next_seq);
        self.next_seq += 1;
        self.by_time.insert(slot, key.clone());
        self.by_key.insert(key, (slot, priority));
        self.next_ready_at() != head_before
    }

    pub(super) fn next_ready_at(&self) -> Option<Instant> {
        self.by_time.first_key_value().map(|(&(at, _), _)| at)
    }

    /// Removes and returns the first key whose ready time is not after
    /// `now`, with that time and its priority.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<(K, Instant, Priority)> {
        let entry = self.by_time.first_entry()?;
        let ready_at = entry.key().0;
        if ready_at > now {
            return None;
        }
        let key = entry.remove();
        let (_, priority) = self.by_key.remove(&key).expect("indexed both ways");
        Some((key, ready_at, priority))
    }

    pub(super) fn clear(&mut self) {
        self.by_time.clear();
        self.by_key.clear();
    }

    /// Waiting keys, soonest first.
    pub(super) fn keys(&self) -> impl Iterator<Item = &K> {
        self.by_time.values()
    }
}
