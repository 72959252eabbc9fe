//! The shared informer cache: one watcher + reflector per kind (and
//! namespace scope), shared by every plugin that needs it, fanning object
//! events out to the controllers subscribed to it.
//!
//! # A reconcile never reads older state than the event that woke it
//! An event is announced only after the store holds it. During a relist the
//! store keeps its previous contents (reads stay consistent) and the
//! relist's objects are announced only once it is complete and swapped in,
//! so a key enqueued by the relist reads the relisted object, never the old
//! one or a NotFound for an object created while the watch was down.
//!
//! # The first listing is not announced
//! Subscribers learn what the first listing held from the store, once
//! [`Informer::wait_synced`] returns, as a subscriber that arrives after it
//! must anyway; only changes after it, and relists, are announced. A listing
//! of a million objects is then one pass over the store instead of a million
//! events through a channel that would overflow into a resync, and the keys it
//! implies can be queued for what they are: not changes, so at low priority,
//! as controller-runtime queues its initial list.
//!
//! # Nothing is missed across a relist
//! When a watch expires (410 Gone) the watcher lists again. Objects deleted
//! while the watch was down never produce a delete event, so on the end of
//! every relist the informer compares the new list with what it held before
//! and emits a delete for each object that is gone.
//!
//! # A subscriber that falls behind gets what it missed, not everything
//! Every change to the store has a number, kept with the object (and, for
//! the last [`MAX_TOMBSTONES`] deletions holding at most
//! [`MAX_TOMBSTONE_BYTES`] of JSON, with the deleted object). A
//! subscriber that falls more than [`EVENT_BUFFER`] events behind re-reads
//! from the store the objects changed since the last event it received,
//! and goes on with those: a burst of a few thousand writes costs a few
//! thousand keys, never every key of the kind. Only when the deletions it
//! missed are no longer remembered is it told to resync (every key of the
//! informer enqueued).
//!
//! # managedFields are not cached (by default)
//! `metadata.managedFields` is the API server's bookkeeping for server-side
//! apply: no reconciler needs it to read the state it acts on, yet it is a
//! third to half of a typical object's JSON, and every guest that reads an
//! object from the cache parses all of it (with two managedFields entries,
//! 11 µs of a 17 µs reconcile: `wasmctrl-bench instance-cost`). The cache
//! drops it, as controller-runtime's `TransformStripManagedFields` does;
//! [`CacheOptions::strip_managed_fields`] keeps it. The host API drops it
//! from live reads and the answers to writes too
//! (`sandbox/hostapi/answer.rs`), so a guest never sees it unless the host
//! keeps it.

mod fanout;
mod key;
mod object;
mod wire;

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use key::InformerKey;

pub use object::{CacheObjectError, CachedObject, Owner};
use wire::WireObject;

/// Events buffered per informer before a slow subscriber must resync. Only
/// unread events take memory (`fanout`). A subscriber only maps events to
/// keys, so it falls this far behind only in a burst, such as a relist's
/// announcements, where a resync (every key enqueued) is the same work.
const EVENT_BUFFER: usize = 1024;
/// Deletions the store remembers, for subscribers that fall behind, and
/// the bytes of those deleted objects' JSON it keeps at most.
const MAX_TOMBSTONES: usize = 16 * EVENT_BUFFER;
const MAX_TOMBSTONE_BYTES: usize = 32 << 20;
/// Objects of a listing between two progress lines.
const PROGRESS_EVERY: usize = 50_000;
/// A listing that took this long logs its end.
const SLOW_LISTING: Duration = Duration::from_secs(1);

/// An object changed (or is gone).
#[derive(Debug, Clone)]
pub struct ObjectEvent {
    pub object: Arc<CachedObject>,
    pub deleted: bool,
    /// The change's number in its informer's store.
    seq: u64,
}

/// What a subscriber receives.
#[derive(Debug, Clone)]
pub enum Notification {
    Object(ObjectEvent),
    /// Changes were dropped for this subscriber and the store no longer
    /// knows them all: re-read the whole store.
    Resync,
}

/// One watcher + reflector.
pub struct Informer {
    pub key: InformerKey,
    pub resource: ApiResource,
    store: Arc<RwLock<Objects>>,
    events: fanout::Sender<ObjectEvent>,
    synced: watch::Receiver<bool>,
    task: JoinHandle<()>,
}

impl Informer {
    /// The objects currently known (a snapshot, in no particular order).
    pub fn objects(&self) -> Vec<Arc<CachedObject>> {
        self.store.read().unwrap().iter().cloned().collect()
    }

    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits until the first list has been received.
    pub async fn wait_synced(&self) {
        let mut synced = self.synced.clone();
        let _ = synced.wait_for(|s| *s).await;
    }

    /// A stream of notifications for a new subscriber.
    pub fn subscribe(&self) -> Subscription {
        // Read before subscribing: a change made in between is then both
        // received and counted as unseen, never neither.
        let since = self.store.read().unwrap().next_seq;
        Subscription {
            events: self.events.subscribe(),
            store: Arc::downgrade(&self.store),
            since,
            missed: VecDeque::new(),
        }
    }

    /// The object `namespace/name`, if cached.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<CachedObject>> {
        self.store.read().unwrap().get(namespace, name).cloned()
    }
}

impl Drop for Informer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A subscriber's view of an informer's events.
pub struct Subscription {
    events: fanout::Receiver<ObjectEvent>,
    store: std::sync::Weak<RwLock<Objects>>,
    /// The number of the first change this subscriber has not received.
    since: u64,
    /// Changes re-read from the store after falling behind, to hand out.
    missed: VecDeque<ObjectEvent>,
}

impl Subscription {
    /// The next notification, or None once the informer stopped.
    pub async fn next(&mut self) -> Option<Notification> {
        loop {
            if let Some(e) = self.missed.pop_front() {
                return Some(Notification::Object(e));
            }
            match self.events.recv().await {
                fanout::Received::Event(e) => {
                    self.since = self.since.max(e.seq + 1);
                    return Some(Notification::Object(e));
                }
                fanout::Received::Lagged => {
                    let Some(store) = self.store.upgrade() else {
                        return Some(Notification::Resync);
                    };
                    let store = store.read().unwrap();
                    let changed = store.changed_since(self.since);
                    self.since = store.next_seq;
                    match changed {
                        Some(changed) => self.missed = changed.into(),
                        None => return Some(Notification::Resync),
                    }
                }
                fanout::Received::Closed => return None,
            }
        }
    }
}

/// What the cache keeps of each object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheOptions {
    /// Drop `metadata.managedFields` before an object is cached (default:
    /// true; see the module's documentation).
    pub strip_managed_fields: bool,
}

impl Default for CacheOptions {
    fn default() -> Self {
        Self {
            strip_managed_fields: true,
        }
    }
}

impl CacheOptions {
    /// Drops from `object`, listed live by the host API, what the host
    /// does not keep. The cache applies the same rule while it reads an
    /// object off the wire (`wire.rs`), and single-object answers are cut
    /// as text (`sandbox/hostapi/answer.rs`).
    pub fn trim(&self, object: &mut DynamicObject) {
        if self.strip_managed_fields {
            object.metadata.managed_fields = None;
        }
    }
}

/// The informers of the host, created on demand and shared.
pub struct SharedCache {
    client: Client,
    options: CacheOptions,
    informers: Mutex<HashMap<InformerKey, std::sync::Weak<Informer>>>,
}

impl SharedCache {
    /// A cache with the default [`CacheOptions`].
    pub fn new(client: Client) -> Self {
        Self::with_options(client, CacheOptions::default())
    }

    /// A cache whose informers keep objects as `options` say.
    pub fn with_options(client: Client, options: CacheOptions) -> Self {
        Self {
            client,
            options,
            informers: Mutex::new(HashMap::new()),
        }
    }

    /// What the cache keeps of each object.
    pub fn options(&self) -> CacheOptions {
        self.options
    }

    /// The informer for `key`, started if no one holds it yet. It stops when
    /// the last holder drops it (watches are re-pointed by dropping).
    pub fn informer(&self, key: InformerKey, resource: ApiResource) -> Arc<Informer> {
        let mut informers = self.informers.lock().unwrap();
        if let Some(i) = informers.get(&key).and_then(std::sync::Weak::upgrade) {
            return i;
        }
        let informer = Arc::new(start(
            self.client.clone(),
            key.clone(),
            resource,
            self.options,
        ));
        informers.insert(key, Arc::downgrade(&informer));
        informers.retain(|_, w| w.strong_count() > 0);
        informer
    }

    /// The running informer for `key`, if any.
    pub fn existing(&self, key: &InformerKey) -> Option<Arc<Informer>> {
        self.running_by(key)
    }

    /// The running informer of `resource` in `namespace` (None: the
    /// cluster-wide one), looked up without building its key: the host API
    /// asks this for every cached read.
    pub fn existing_of(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
    ) -> Option<Arc<Informer>> {
        self.running_by(&key::KeyParts::of(resource, namespace))
    }

    fn running_by(&self, key: &dyn key::AsParts) -> Option<Arc<Informer>> {
        self.informers
            .lock()
            .unwrap()
            .get(key)
            .and_then(std::sync::Weak::upgrade)
    }

    /// Keys of the informers running now.
    pub fn running(&self) -> Vec<InformerKey> {
        self.informers
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, w)| w.strong_count() > 0)
            .map(|(k, _)| k.clone())
            .collect()
    }
}

/// The objects of one informer, by namespace ("" for cluster-scoped ones,
/// a name no namespace can have) and name, so a lookup by `&str` needs no
/// allocation.
#[derive(Default)]
struct Objects {
    by_namespace: HashMap<Box<str>, HashSet<ByName>>,
    /// The number the next change gets.
    next_seq: u64,
    /// The latest deletions, oldest first, with their numbers.
    tombstones: VecDeque<(u64, Arc<CachedObject>)>,
    /// The JSON bytes of the objects in `tombstones`.
    tombstone_bytes: usize,
    /// Deletions numbered below this are forgotten.
    tombstones_from: u64,
}

/// A cached object in its namespace's set, found by its name, with the
/// number of the change that put it there. The set holds no copy of the
/// name: a key of its own cost ~60 bytes per object (the key's allocation
/// and its room in a table sized for a million).
struct ByName(Arc<CachedObject>, u64);

impl Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        self.0.name()
    }
}

impl Hash for ByName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.name().hash(state);
    }
}

impl PartialEq for ByName {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl Eq for ByName {}

impl Objects {
    fn get(&self, namespace: Option<&str>, name: &str) -> Option<&Arc<CachedObject>> {
        Some(&self.by_namespace.get(namespace.unwrap_or(""))?.get(name)?.0)
    }

    /// The objects' successor for a relist: empty, numbering on.
    fn successor(&self) -> Objects {
        Objects {
            next_seq: self.next_seq,
            tombstones_from: self.next_seq,
            ..Objects::default()
        }
    }

    fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Puts `object` in (replacing its namesake); the change's number.
    fn insert(&mut self, object: Arc<CachedObject>) -> u64 {
        let seq = self.take_seq();
        let namespace = object.namespace().unwrap_or("");
        if let Some(names) = self.by_namespace.get_mut(namespace) {
            names.replace(ByName(object, seq));
        } else {
            let namespace = namespace.into();
            self.by_namespace
                .insert(namespace, HashSet::from([ByName(object, seq)]));
        }
        seq
    }

    /// Takes `object`'s namesake out and remembers the deletion; its number.
    fn delete(&mut self, object: Arc<CachedObject>) -> u64 {
        self.remove(object.namespace(), object.name());
        self.remember_deletion(object)
    }

    fn remember_deletion(&mut self, object: Arc<CachedObject>) -> u64 {
        let seq = self.take_seq();
        self.tombstone_bytes += object.json().len();
        self.tombstones.push_back((seq, object));
        while self.tombstones.len() > MAX_TOMBSTONES || self.tombstone_bytes > MAX_TOMBSTONE_BYTES {
            let Some((oldest, gone)) = self.tombstones.pop_front() else {
                break;
            };
            self.tombstone_bytes -= gone.json().len();
            self.tombstones_from = oldest + 1;
        }
        seq
    }

    /// The changes numbered `since` or later: each object changed since,
    /// as it is now, and each deletion since. None when deletions that old
    /// are forgotten.
    fn changed_since(&self, since: u64) -> Option<Vec<ObjectEvent>> {
        if since < self.tombstones_from {
            return None;
        }
        let changed = self
            .iter_numbered()
            .filter(|(_, seq)| *seq >= since)
            .map(|(object, seq)| ObjectEvent {
                object: object.clone(),
                deleted: false,
                seq,
            });
        let deleted =
            self.tombstones
                .iter()
                .filter(|(seq, _)| *seq >= since)
                .map(|(seq, object)| ObjectEvent {
                    object: object.clone(),
                    deleted: true,
                    seq: *seq,
                });
        let mut all: Vec<ObjectEvent> = changed.chain(deleted).collect();
        all.sort_by_key(|e| e.seq);
        Some(all)
    }

    fn remove(&mut self, namespace: Option<&str>, name: &str) -> Option<Arc<CachedObject>> {
        let ns = namespace.unwrap_or("");
        let names = self.by_namespace.get_mut(ns)?;
        let removed = names.take(name);
        if names.is_empty() {
            self.by_namespace.remove(ns);
        }
        removed.map(|r| r.0)
    }

    fn iter(&self) -> impl Iterator<Item = &Arc<CachedObject>> {
        self.iter_numbered().map(|(object, _)| object)
    }

    /// Each object with the number of its last change.
    fn iter_numbered(&self) -> impl Iterator<Item = (&Arc<CachedObject>, u64)> {
        self.by_namespace
            .values()
            .flat_map(|names| names.iter().map(|n| (&n.0, n.1)))
    }
}

fn start(
    client: Client,
    key: InformerKey,
    resource: ApiResource,
    options: CacheOptions,
) -> Informer {
    let api: Api<WireObject> = match &key.namespace {
        Some(ns) => Api::namespaced_with(client, ns, &resource),
        None => Api::all_with(client, &resource),
    };
    let store = Arc::new(RwLock::new(Objects::default()));
    let events = fanout::channel(EVENT_BUFFER);
    let (synced_tx, synced) = watch::channel(false);
    let tx = events.clone();
    let label = key.to_string();
    let task = tokio::spawn({
        let store = store.clone();
        async move {
            let config = watcher::Config::default().any_semantic();
            let mut stream = watcher::watcher(api, config).default_backoff().boxed();
            // A relist's objects, swapped in whole at its end (until then
            // reads see the previous state).
            let mut relist: Option<Objects> = None;
            let cache_form =
                |o: WireObject| match CachedObject::from_wire(o, options.strip_managed_fields) {
                    Ok(c) => Some(Arc::new(c)),
                    Err(e) => {
                        tracing::warn!(informer = %label, "object not cached: {e}");
                        None
                    }
                };
            // A listing of many objects takes seconds: its progress is
            // logged every PROGRESS_EVERY objects, and its end when slow.
            let mut listing = (Instant::now(), 0usize);
            while let Some(event) = stream.next().await {
                let event = match event {
                    Ok(e) => e,
                    Err(e) => {
                        tracing::warn!(informer = %label, "watch error (retrying with backoff): {e}");
                        continue;
                    }
                };
                match &event {
                    Event::Init => listing = (Instant::now(), 0),
                    Event::InitApply(_) => {
                        listing.1 += 1;
                        if listing.1.is_multiple_of(PROGRESS_EVERY) {
                            tracing::info!(informer = %label, objects = listing.1, "listing …");
                        }
                    }
                    Event::InitDone if listing.0.elapsed() >= SLOW_LISTING => {
                        tracing::info!(
                            informer = %label,
                            objects = listing.1,
                            seconds = format!("{:.1}", listing.0.elapsed().as_secs_f64()),
                            "synced"
                        );
                    }
                    _ => {}
                }
                // The store first, then the news: a subscriber that reacts
                // to an event reads at least that event's state. An event
                // carries the store's own Arc, never a copy.
                match event {
                    // Numbered on from the store's changes, so that every
                    // relisted object counts as changed since any earlier
                    // change.
                    Event::Init => relist = Some(store.read().unwrap().successor()),
                    Event::InitApply(o) => {
                        if let Some(o) = cache_form(o) {
                            relist
                                .get_or_insert_with(|| store.read().unwrap().successor())
                                .insert(o);
                        }
                    }
                    Event::InitDone => {
                        let listed = relist
                            .take()
                            .unwrap_or_else(|| store.read().unwrap().successor());
                        let mut now = store.write().unwrap();
                        let mut before = std::mem::replace(&mut *now, listed);
                        // The deletions remembered so far stay remembered.
                        now.tombstones = std::mem::take(&mut before.tombstones);
                        now.tombstone_bytes = before.tombstone_bytes;
                        now.tombstones_from = before.tombstones_from;
                        // Deleted while the watch was down: no event told us.
                        let mut gone = Vec::new();
                        for object in before.iter() {
                            if now.get(object.namespace(), object.name()).is_none() {
                                let seq = now.remember_deletion(object.clone());
                                gone.push(ObjectEvent {
                                    object: object.clone(),
                                    deleted: true,
                                    seq,
                                });
                            }
                        }
                        drop(now);
                        let now = store.read().unwrap();
                        // The first listing is read from the store once
                        // synced, not announced (see the module's doc).
                        if *synced_tx.borrow() {
                            // In the order of their numbers, as every
                            // change is announced: a subscriber counts on
                            // it to know what it missed.
                            let mut listed: Vec<_> = now.iter_numbered().collect();
                            listed.sort_unstable_by_key(|(_, seq)| *seq);
                            for (object, seq) in listed {
                                tx.send(ObjectEvent {
                                    object: object.clone(),
                                    deleted: false,
                                    seq,
                                });
                            }
                        }
                        for event in gone {
                            tx.send(event);
                        }
                        drop(now);
                        let _ = synced_tx.send(true);
                    }
                    Event::Apply(o) => {
                        if let Some(object) = cache_form(o) {
                            let seq = store.write().unwrap().insert(object.clone());
                            tx.send(ObjectEvent {
                                object,
                                deleted: false,
                                seq,
                            });
                        }
                    }
                    Event::Delete(o) => {
                        if let Some(object) = cache_form(o) {
                            let seq = store.write().unwrap().delete(object.clone());
                            tx.send(ObjectEvent {
                                object,
                                deleted: true,
                                seq,
                            });
                        }
                    }
                }
            }
        }
    });
    Informer {
        key,
        resource,
        store,
        events,
        synced,
        task,
    }
}

/// How long to wait between readiness checks of a cache sync.
pub const SYNC_POLL: Duration = Duration::from_millis(50);

#[cfg(test)]
mod tests {
    use super::*;

    fn object(namespace: Option<&str>, name: &str, rv: &str) -> Arc<CachedObject> {
        let mut metadata = serde_json::json!({"name": name, "resourceVersion": rv});
        if let Some(ns) = namespace {
            metadata["namespace"] = ns.into();
        }
        let json =
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata});
        Arc::new(CachedObject::from_json(&json.to_string()).unwrap())
    }

    /// A subscription to `store` through a queue of `capacity` events,
    /// and the queue's sender.
    fn subscribed(
        store: &Arc<RwLock<Objects>>,
        capacity: usize,
    ) -> (fanout::Sender<ObjectEvent>, Subscription) {
        let tx = fanout::channel(capacity);
        let subscription = Subscription {
            events: tx.subscribe(),
            store: Arc::downgrade(store),
            since: store.read().unwrap().next_seq,
            missed: VecDeque::new(),
        };
        (tx, subscription)
    }

    fn apply(store: &RwLock<Objects>, tx: &fanout::Sender<ObjectEvent>, object: Arc<CachedObject>) {
        let seq = store.write().unwrap().insert(object.clone());
        tx.send(ObjectEvent {
            object,
            deleted: false,
            seq,
        });
    }

    /// What `subscription` hands out until the queue closes: names, and
    /// whether a resync came.
    async fn drain(
        tx: fanout::Sender<ObjectEvent>,
        mut subscription: Subscription,
    ) -> (Vec<(String, bool)>, bool) {
        drop(tx);
        let (mut seen, mut resync) = (Vec::new(), false);
        while let Some(n) = subscription.next().await {
            match n {
                Notification::Object(e) => seen.push((e.object.name().to_string(), e.deleted)),
                Notification::Resync => resync = true,
            }
        }
        (seen, resync)
    }

    #[tokio::test]
    async fn a_subscriber_that_falls_behind_gets_the_changes_it_missed_not_the_whole_store() {
        let store = Arc::new(RwLock::new(Objects::default()));
        for i in 0..10_000 {
            store
                .write()
                .unwrap()
                .insert(object(Some("d"), &format!("idle-{i}"), "1"));
        }
        let (tx, subscription) = subscribed(&store, 16);
        for i in 0..100 {
            apply(&store, &tx, object(Some("d"), &format!("new-{i}"), "1"));
        }
        apply(&store, &tx, object(Some("d"), "idle-7", "2"));
        let gone = object(Some("d"), "idle-8", "1");
        let seq = store.write().unwrap().delete(gone.clone());
        tx.send(ObjectEvent {
            object: gone,
            deleted: true,
            seq,
        });
        let (seen, resync) = drain(tx, subscription).await;
        assert!(!resync);
        let names: HashSet<&(String, bool)> = seen.iter().collect();
        for i in 0..100 {
            assert!(names.contains(&(format!("new-{i}"), false)), "new-{i}");
        }
        assert!(names.contains(&("idle-7".to_string(), false)));
        assert!(names.contains(&("idle-8".to_string(), true)));
        assert!(
            seen.len() <= 102 + 16,
            "the changes, and at most a queue's worth again: {}",
            seen.len()
        );
    }

    #[tokio::test]
    async fn a_subscriber_that_missed_forgotten_deletions_resyncs() {
        let store = Arc::new(RwLock::new(Objects::default()));
        let (tx, subscription) = subscribed(&store, 16);
        for i in 0..MAX_TOMBSTONES + 1 {
            let o = object(Some("d"), &format!("o-{i}"), "1");
            let seq = store.write().unwrap().delete(o.clone());
            tx.send(ObjectEvent {
                object: o,
                deleted: true,
                seq,
            });
        }
        let (_, resync) = drain(tx, subscription).await;
        assert!(resync);
    }

    #[test]
    fn a_relisted_store_numbers_on_and_keeps_its_deletions() {
        let mut old = Objects::default();
        old.insert(object(Some("d"), "a", "1"));
        let deleted = old.delete(object(Some("d"), "b", "1"));
        let mut new = old.successor();
        let relisted = new.insert(object(Some("d"), "a", "1"));
        assert!(relisted > deleted, "every relisted object is a change");
        assert_eq!(new.changed_since(relisted).unwrap().len(), 1);
    }

    #[test]
    fn the_store_finds_replaces_and_removes_objects_by_namespace_and_name() {
        let mut objects = Objects::default();
        objects.insert(object(Some("a"), "x", "1"));
        objects.insert(object(Some("b"), "x", "2"));
        objects.insert(object(None, "x", "3"));
        objects.insert(object(Some("a"), "x", "4"));
        let rv = |ns, name| objects.get(ns, name).and_then(|o| o.resource_version());
        assert_eq!(rv(Some("a"), "x"), Some("4"), "an insert replaces");
        assert_eq!(rv(Some("b"), "x"), Some("2"));
        assert_eq!(rv(None, "x"), Some("3"), "cluster-scoped apart");
        assert_eq!(rv(Some("a"), "y"), None);
        assert_eq!(objects.iter().count(), 3);
        let removed = objects.remove(Some("a"), "x").unwrap();
        assert_eq!(removed.resource_version(), Some("4"));
        assert!(objects.remove(Some("a"), "x").is_none());
        assert!(
            !objects.by_namespace.contains_key("a"),
            "an emptied namespace is dropped"
        );
        assert_eq!(objects.iter().count(), 2);
    }
}
