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
//! and emits a delete for each object that is gone. A subscriber that falls
//! behind the event channel is told to resync (every key of the informer is
//! enqueued) instead of silently losing events.
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
use std::collections::{HashMap, HashSet};
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
/// Objects of a listing between two progress lines.
const PROGRESS_EVERY: usize = 50_000;
/// A listing that took this long logs its end.
const SLOW_LISTING: Duration = Duration::from_secs(1);

/// An object changed (or is gone).
#[derive(Debug, Clone)]
pub struct ObjectEvent {
    pub object: Arc<CachedObject>,
    pub deleted: bool,
}

/// What a subscriber receives.
#[derive(Debug, Clone)]
pub enum Notification {
    Object(ObjectEvent),
    /// Events were dropped for this subscriber: re-read the whole store.
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
        Subscription {
            events: self.events.subscribe(),
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
}

impl Subscription {
    /// The next notification, or None once the informer stopped.
    pub async fn next(&mut self) -> Option<Notification> {
        match self.events.recv().await {
            fanout::Received::Event(e) => Some(Notification::Object(e)),
            fanout::Received::Lagged => Some(Notification::Resync),
            fanout::Received::Closed => None,
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
}

/// A cached object in its namespace's set, found by its name. The set holds
/// no copy of the name: a key of its own cost ~60 bytes per object (the
/// key's allocation and its room in a table sized for a million).
struct ByName(Arc<CachedObject>);

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

    fn insert(&mut self, object: Arc<CachedObject>) {
        let namespace = object.namespace().unwrap_or("");
        if let Some(names) = self.by_namespace.get_mut(namespace) {
            names.replace(ByName(object));
        } else {
            let namespace = namespace.into();
            self.by_namespace
                .insert(namespace, HashSet::from([ByName(object)]));
        }
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
        self.by_namespace
            .values()
            .flat_map(|names| names.iter().map(|n| &n.0))
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
                    Event::Init => relist = Some(Objects::default()),
                    Event::InitApply(o) => {
                        if let Some(o) = cache_form(o) {
                            relist.get_or_insert_default().insert(o);
                        }
                    }
                    Event::InitDone => {
                        let listed = relist.take().unwrap_or_default();
                        let before = std::mem::replace(&mut *store.write().unwrap(), listed);
                        let now = store.read().unwrap();
                        // The first listing is read from the store once
                        // synced, not announced (see the module's doc).
                        if *synced_tx.borrow() {
                            for object in now.iter() {
                                tx.send(ObjectEvent {
                                    object: object.clone(),
                                    deleted: false,
                                });
                            }
                        }
                        // Deleted while the watch was down: no event told us.
                        for object in before.iter() {
                            if now.get(object.namespace(), object.name()).is_none() {
                                tx.send(ObjectEvent {
                                    object: object.clone(),
                                    deleted: true,
                                });
                            }
                        }
                        drop(now);
                        let _ = synced_tx.send(true);
                    }
                    Event::Apply(o) => {
                        if let Some(object) = cache_form(o) {
                            store.write().unwrap().insert(object.clone());
                            tx.send(ObjectEvent {
                                object,
                                deleted: false,
                            });
                        }
                    }
                    Event::Delete(o) => {
                        if let Some(object) = cache_form(o) {
                            store
                                .write()
                                .unwrap()
                                .remove(object.namespace(), object.name());
                            tx.send(ObjectEvent {
                                object,
                                deleted: true,
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
