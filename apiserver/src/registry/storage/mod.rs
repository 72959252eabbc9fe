//! The object store: one global resourceVersion, per-resource ordered maps,
//! a bounded event history for watch resumption and a broadcast fan-out.
//!
//! Every method is synchronous and holds the lock only for map operations, so
//! callers compute patches and serialize outside it (optimistic concurrency:
//! read, compute, [`Store::commit`] with the expected resourceVersion, retry).
//!
//! With persistence (`--data-dir`) a write becomes visible only once it is
//! on disk. [`Store::commit`] *stages* it: conflict checks and
//! [`Store::latest`] see staged writes, so concurrent writers build on each
//! other without waiting, while reads ([`Store::get`], lists, watches) see
//! only durable state. The persister writes staged writes in batches and
//! hands each durable batch to [`Store::apply_durable`], which makes it
//! visible in resourceVersion order. If a batch cannot be written,
//! [`Store::abort_staged`] discards every staged write (later ones may build
//! on the failed ones), so memory never holds what the disk does not.
//! Without persistence a commit is applied at once.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, watch};

use super::resources::GroupResource;

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub(crate) type ObjKey = (String, String);

/// How many events are kept for watch resumption; older resourceVersions get
/// 410 Expired, as past the real server's watch cache.
pub(crate) const HISTORY_LEN: usize = 50_000;

/// Largest object stored, as compact JSON: the request body limit, so any
/// object a client can send fits, while patches (a JSON patch may copy
/// 3 MiB per request) cannot grow an object without bound across requests.
/// The real server's etcd refuses objects over 1.5 MiB of protobuf.
pub(crate) const MAX_OBJECT_BYTES: usize = 3 * 1024 * 1024;

/// Broadcast buffer per watcher; a watcher further behind than this is closed
/// with 410 Expired and relists.
const BROADCAST_CAPACITY: usize = 1 << 16;

/// Watch event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as watchers, the garbage collector and the persister see it.
#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) rv: u64,
    pub(crate) etype: EventType,
    pub(crate) resource: GroupResource,
    pub(crate) namespace: String,
    pub(crate) name: String,
    /// The new state (for DELETED, the last state carrying the deletion RV).
    pub(crate) object: Arc<Value>,
    /// The state before, so watchers can tell an object left their selector.
    pub(crate) prev: Option<Arc<Value>>,
    /// `object` serialized, computed once on first use.
    rendered: OnceLock<Bytes>,
}

impl Event {
    /// An ADDED event of `object` at `rv`, for tests of what watchers see.
    #[cfg(test)]
    pub(crate) fn added(rv: u64, resource: GroupResource, object: Value) -> Arc<Event> {
        let name = crate::values::meta_str(&object, "name")
            .unwrap_or("")
            .to_string();
        Arc::new(Event {
            rv,
            etype: EventType::Added,
            resource,
            namespace: String::new(),
            name,
            object: Arc::new(object),
            prev: None,
            rendered: OnceLock::new(),
        })
    }

    /// `object` serialized once and shared by the persister and every
    /// watcher of the stored version (the common case), which keeps fan-out
    /// cheap.
    pub(crate) fn rendered(&self) -> &Bytes {
        self.rendered
            .get_or_init(|| Bytes::from(serde_json::to_vec(&*self.object).unwrap_or_default()))
    }
}

/// Resolves once a staged write is durable and visible (`Ok`) or was
/// discarded because it could not be persisted (`Err` with the reason).
#[derive(Debug, Clone)]
pub(crate) struct Durable(watch::Receiver<Option<Result<(), Arc<str>>>>);

impl Durable {
    /// Waits for the outcome.
    pub(crate) async fn wait(mut self) -> Result<(), Arc<str>> {
        match self.0.wait_for(Option::is_some).await {
            Ok(outcome) => outcome.clone().unwrap_or(Ok(())),
            Err(_) => Err("persistence stopped before the write was durable".into()),
        }
    }
}

/// The persister's side of a [`Durable`]: resolves it exactly once.
#[derive(Debug)]
pub(crate) struct DurableSender(watch::Sender<Option<Result<(), Arc<str>>>>);

impl DurableSender {
    pub(crate) fn resolve(self, outcome: Result<(), Arc<str>>) {
        self.0.send_replace(Some(outcome));
    }
}

fn durable_pair() -> (DurableSender, Durable) {
    let (tx, rx) = watch::channel(None);
    (DurableSender(tx), Durable(rx))
}

/// An object and its resourceVersion as a reader or writer sees it.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub(crate) rv: u64,
    pub(crate) obj: Arc<Value>,
    /// Set when this state is staged, not yet durable: a writer that answers
    /// with it unchanged (a no-op) must wait for it.
    pub(crate) durable: Option<Durable>,
}

/// A visible object in a table.
#[derive(Debug, Clone)]
struct Entry {
    rv: u64,
    obj: Arc<Value>,
}

/// The newest staged state of one key.
#[derive(Debug)]
struct StagedEntry {
    rv: u64,
    /// None for a staged deletion.
    obj: Option<Arc<Value>>,
    durable: Durable,
}

/// What `commit` expects to find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expect {
    /// Create: nothing stored under the key.
    Absent,
    /// Update/delete: the object at exactly this resourceVersion.
    Rv(u64),
}

/// What `commit` does.
#[derive(Debug)]
pub(crate) enum Change {
    Put(Value),
    Delete,
}

/// Why a commit was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("stored state changed (now at {0:?})")]
    Mismatch(Option<u64>),
    #[error("namespace {0} not found")]
    NamespaceMissing(String),
    #[error("namespace {0} is terminating")]
    NamespaceTerminating(String),
    #[error("too old resource version: {requested} ({oldest})")]
    Expired { requested: u64, oldest: u64 },
    #[error("the server is shutting down and no longer persists writes")]
    ShuttingDown,
    #[error("the object is {bytes} bytes as JSON, more than the limit {MAX_OBJECT_BYTES}")]
    TooLarge { bytes: usize },
}

/// A committed (or dry-run) change.
#[derive(Debug, Clone)]
pub(crate) struct Committed {
    /// The stored object (for deletes, the last state with the deletion RV).
    pub(crate) object: Arc<Value>,
    /// With persistence: resolves when the change is durable and visible.
    pub(crate) durable: Option<Durable>,
}

/// Work for the persister, queued in resourceVersion order.
#[derive(Debug)]
pub(crate) enum PersistOp {
    /// A staged write; `done` is resolved after it is durable and applied,
    /// or after it was discarded.
    Write {
        event: Arc<Event>,
        /// The store's failure epoch when it was staged; a write staged
        /// before a failed batch is discarded (it may build on that batch).
        epoch: u64,
        done: DurableSender,
    },
    /// A resourceVersion bump with no object (forced expiry).
    Rv { rv: u64, epoch: u64 },
}

impl PersistOp {
    pub(crate) fn epoch(&self) -> u64 {
        match self {
            PersistOp::Write { epoch, .. } | PersistOp::Rv { epoch, .. } => *epoch,
        }
    }
}

/// Everything behind the store lock.
#[derive(Default)]
struct State {
    /// The newest visible resourceVersion.
    rv: u64,
    /// The newest resourceVersion handed out (≥ `rv`; larger while writes
    /// are staged, and after discarded writes burned theirs).
    assigned: u64,
    /// Watches may resume from resourceVersions ≥ floor.
    floor: u64,
    tables: HashMap<GroupResource, BTreeMap<ObjKey, Entry>>,
    history: VecDeque<Arc<Event>>,
    uids: HashMap<String, (GroupResource, ObjKey)>,
    /// owner uid → dependents that name it in ownerReferences.
    dependents: HashMap<String, BTreeSet<(GroupResource, ObjKey)>>,
    /// With persistence: the newest not-yet-durable state per key.
    staged: HashMap<(GroupResource, ObjKey), StagedEntry>,
    /// Bumped by every failed batch.
    epoch: u64,
    /// Writes are staged and persisted (set once at start).
    durable: bool,
    /// The persister's queue; None after shutdown.
    persist: Option<mpsc::UnboundedSender<PersistOp>>,
    /// The garbage collector's queue; None after shutdown.
    gc: Option<mpsc::UnboundedSender<Arc<Event>>>,
}

/// Called for every event as it becomes visible, under the store lock.
type ApplyHook = Box<dyn Fn(&Event) + Send + Sync>;

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchFrom {
    /// Send the current state first (synthetic ADDED events).
    Snapshot,
    /// Replay history after this resourceVersion.
    Rv(u64),
}

/// The consistent starting point of a watch.
pub(crate) struct WatchStart {
    /// Current objects (Snapshot) — filter by namespace/selectors outside.
    pub(crate) snapshot: Vec<Arc<Value>>,
    /// History after the requested RV (Rv).
    pub(crate) backlog: Vec<Arc<Event>>,
    pub(crate) rx: broadcast::Receiver<Arc<Event>>,
    pub(crate) rv: u64,
}

/// The shared store: every object, the watch history and the fan-out.
pub(crate) struct Store {
    state: Mutex<State>,
    tx: broadcast::Sender<Arc<Event>>,
    /// Keeps derived state (the CRD registry) in step with visible objects.
    /// Runs under the store lock, so lock order is store, then the hook's.
    on_apply: OnceLock<ApplyHook>,
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

fn namespace_key() -> GroupResource {
    GroupResource::new("", "namespaces")
}

fn owner_uids(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_string))
        .collect()
}

fn uid_of(obj: &Value) -> Option<String> {
    crate::values::meta_str(obj, "uid").map(str::to_string)
}

fn is_deleting(obj: &Value) -> bool {
    obj.get("metadata")
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some()
}

impl State {
    fn index_remove(&mut self, gr: &GroupResource, key: &ObjKey, obj: &Value) {
        if let Some(uid) = uid_of(obj) {
            self.uids.remove(&uid);
        }
        for owner in owner_uids(obj) {
            if let Some(set) = self.dependents.get_mut(&owner) {
                set.remove(&(gr.clone(), key.clone()));
                if set.is_empty() {
                    self.dependents.remove(&owner);
                }
            }
        }
    }

    fn index_add(&mut self, gr: &GroupResource, key: &ObjKey, obj: &Value) {
        if let Some(uid) = uid_of(obj) {
            self.uids.insert(uid, (gr.clone(), key.clone()));
        }
        for owner in owner_uids(obj) {
            self.dependents
                .entry(owner)
                .or_default()
                .insert((gr.clone(), key.clone()));
        }
    }

    fn push_history(&mut self, ev: Arc<Event>) {
        self.history.push_back(ev);
        while self.history.len() > HISTORY_LEN {
            if let Some(old) = self.history.pop_front() {
                self.floor = self.floor.max(old.rv);
            }
        }
    }

    /// The state the next write to `key` builds on: staged if any, else
    /// visible.
    fn latest(&self, gr: &GroupResource, key: &ObjKey) -> Option<Stored> {
        if let Some(s) = self.staged.get(&(gr.clone(), key.clone())) {
            return s.obj.as_ref().map(|obj| Stored {
                rv: s.rv,
                obj: obj.clone(),
                durable: Some(s.durable.clone()),
            });
        }
        self.tables
            .get(gr)
            .and_then(|t| t.get(key))
            .map(|e| Stored {
                rv: e.rv,
                obj: e.obj.clone(),
                durable: None,
            })
    }
}

impl Store {
    /// An empty store at resourceVersion 0... plus whatever `load` adds.
    pub(crate) fn new() -> Self {
        let (tx, _) = broadcast::channel(BROADCAST_CAPACITY);
        Store {
            state: Mutex::new(State::default()),
            tx,
            on_apply: OnceLock::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent maps (every
        // mutation is a single insert/remove), so poisoning is ignored.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stages every later write and queues it to the persister, which
    /// reports back through [`Store::apply_durable`] and
    /// [`Store::abort_staged`].
    pub(crate) fn set_persist(&self, tx: mpsc::UnboundedSender<PersistOp>) {
        let mut st = self.lock();
        st.durable = true;
        st.persist = Some(tx);
    }

    /// Routes every visible event to the garbage collector.
    pub(crate) fn set_gc(&self, tx: mpsc::UnboundedSender<Arc<Event>>) {
        self.lock().gc = Some(tx);
    }

    /// Runs `hook` for every event as it becomes visible (once; later calls
    /// are ignored).
    pub(crate) fn set_apply_hook(&self, hook: impl Fn(&Event) + Send + Sync + 'static) {
        let _ = self.on_apply.set(Box::new(hook));
    }

    /// Stops queuing work for persistence and the garbage collector, so
    /// their tasks drain and exit (shutdown). Later writes to a persistent
    /// store fail.
    pub(crate) fn detach(&self) {
        let mut st = self.lock();
        st.persist = None;
        st.gc = None;
    }

    /// Restores objects loaded from disk, and the resourceVersion they reached.
    pub(crate) fn load(&self, rv: u64, objects: Vec<(GroupResource, ObjKey, u64, Value)>) {
        let mut st = self.lock();
        st.rv = st.rv.max(rv);
        for (gr, key, orv, obj) in objects {
            st.rv = st.rv.max(orv);
            st.index_add(&gr, &key, &obj);
            st.tables.entry(gr).or_default().insert(
                key,
                Entry {
                    rv: orv,
                    obj: Arc::new(obj),
                },
            );
        }
        st.assigned = st.rv;
        // Nothing before the restart can be replayed.
        st.floor = st.rv;
    }

    /// Synthetic MODIFIED events for every object being deleted, so the
    /// garbage collector resumes work interrupted by a restart.
    pub(crate) fn deleting_events(&self) -> Vec<Arc<Event>> {
        let st = self.lock();
        let mut out = Vec::new();
        for (gr, table) in &st.tables {
            for (key, e) in table {
                if is_deleting(&e.obj) {
                    out.push(Arc::new(Event {
                        rv: e.rv,
                        etype: EventType::Modified,
                        resource: gr.clone(),
                        namespace: key.0.clone(),
                        name: key.1.clone(),
                        object: e.obj.clone(),
                        prev: Some(e.obj.clone()),
                        rendered: OnceLock::new(),
                    }));
                }
            }
        }
        out
    }

    /// The newest visible resourceVersion.
    pub(crate) fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// One visible object (what GET answers).
    pub(crate) fn get(&self, gr: &GroupResource, ns: &str, name: &str) -> Option<Stored> {
        self.lock()
            .tables
            .get(gr)?
            .get(&(ns.to_string(), name.to_string()))
            .map(|e| Stored {
                rv: e.rv,
                obj: e.obj.clone(),
                durable: None,
            })
    }

    /// The state the next write to an object must build on: a staged write
    /// if one is pending, else the visible object. Equal to [`Store::get`]
    /// without persistence.
    pub(crate) fn latest(&self, gr: &GroupResource, ns: &str, name: &str) -> Option<Stored> {
        self.lock().latest(gr, &(ns.to_string(), name.to_string()))
    }

    /// Where the object with this uid is stored.
    pub(crate) fn locate_uid(&self, uid: &str) -> Option<(GroupResource, ObjKey)> {
        self.lock().uids.get(uid).cloned()
    }

    /// Objects whose ownerReferences name `uid`.
    pub(crate) fn dependents(&self, uid: &str) -> Vec<(GroupResource, ObjKey)> {
        self.lock()
            .dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Keys of every object in namespace `ns`, across all resources.
    pub(crate) fn namespace_contents(&self, ns: &str) -> Vec<(GroupResource, String)> {
        let st = self.lock();
        let mut out = Vec::new();
        for (gr, table) in &st.tables {
            let start = (ns.to_string(), String::new());
            for ((kns, name), _) in table.range(start..) {
                if kns != ns {
                    break;
                }
                out.push((gr.clone(), name.clone()));
            }
        }
        out
    }

    /// Whether namespace `ns` holds no object (cheap: one range probe per
    /// resource, as the namespace controller asks after every deletion).
    pub(crate) fn namespace_is_empty(&self, ns: &str) -> bool {
        let st = self.lock();
        st.tables.values().all(|table| {
            table
                .range((ns.to_string(), String::new())..)
                .next()
                .is_none_or(|((kns, _), _)| kns != ns)
        })
    }

    /// Whether any object of a resource is stored.
    pub(crate) fn has_any(&self, gr: &GroupResource) -> bool {
        self.lock().tables.get(gr).is_some_and(|t| !t.is_empty())
    }

    /// Every object of a resource (all namespaces), for CRD cleanup and GC.
    pub(crate) fn keys(&self, gr: &GroupResource) -> Vec<ObjKey> {
        self.lock()
            .tables
            .get(gr)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// A filtered, ordered page of objects. `ns` None lists all namespaces;
    /// `after` is the exclusive start key of a continued list; at most `limit`
    /// matches are returned, with the key to continue from when more remain.
    pub(crate) fn list(
        &self,
        gr: &GroupResource,
        ns: Option<&str>,
        after: Option<&ObjKey>,
        limit: Option<usize>,
        filter: &dyn Fn(&Value) -> bool,
    ) -> (u64, Vec<Arc<Value>>, Option<ObjKey>) {
        let st = self.lock();
        let rv = st.rv;
        let Some(table) = st.tables.get(gr) else {
            return (rv, Vec::new(), None);
        };
        let mut out = Vec::new();
        let lower = match (after, ns) {
            (Some(k), _) => std::ops::Bound::Excluded(k.clone()),
            (None, Some(ns)) => std::ops::Bound::Included((ns.to_string(), String::new())),
            (None, None) => std::ops::Bound::Unbounded,
        };
        for (key, entry) in table.range((lower, std::ops::Bound::Unbounded)) {
            if let Some(ns) = ns
                && key.0 != ns
            {
                break;
            }
            if !filter(&entry.obj) {
                continue;
            }
            if let Some(limit) = limit
                && out.len() == limit
            {
                // The previous item is the last returned one.
                let last = out.last().map(|o: &Arc<Value>| {
                    (
                        crate::values::meta_str(o, "namespace")
                            .unwrap_or("")
                            .to_string(),
                        crate::values::meta_str(o, "name").unwrap_or("").to_string(),
                    )
                });
                return (rv, out, last);
            }
            out.push(entry.obj.clone());
        }
        (rv, out, None)
    }

    /// Applies `change` if the latest state matches `expect`. A dry run
    /// validates the same way and returns what would be stored. With
    /// persistence the change is staged: `durable` in the result resolves
    /// when it is on disk and visible.
    pub(crate) fn commit(
        &self,
        gr: &GroupResource,
        ns: &str,
        name: &str,
        expect: Expect,
        change: Change,
        dry_run: bool,
    ) -> Result<Committed, StoreError> {
        if let Change::Put(obj) = &change {
            // Measured outside the lock; the resourceVersion added below
            // is a few bytes.
            let bytes = crate::values::json_len(obj);
            if bytes > MAX_OBJECT_BYTES {
                return Err(StoreError::TooLarge { bytes });
            }
        }
        let key: ObjKey = (ns.to_string(), name.to_string());
        let mut st = self.lock();
        let current = st.latest(gr, &key);
        match (expect, &current) {
            (Expect::Absent, None) => {
                if !ns.is_empty() {
                    let nskey = (String::new(), ns.to_string());
                    match st.latest(&namespace_key(), &nskey) {
                        None => return Err(StoreError::NamespaceMissing(ns.to_string())),
                        Some(n) if is_deleting(&n.obj) && matches!(change, Change::Put(_)) => {
                            return Err(StoreError::NamespaceTerminating(ns.to_string()));
                        }
                        Some(_) => {}
                    }
                }
            }
            (Expect::Rv(want), Some(cur)) if cur.rv == want => {}
            _ => return Err(StoreError::Mismatch(current.map(|c| c.rv))),
        }
        if st.durable && st.persist.is_none() && !dry_run {
            return Err(StoreError::ShuttingDown);
        }
        let rv = if dry_run { st.rv } else { st.assigned + 1 };
        let (etype, object) = match change {
            Change::Put(mut obj) => {
                if !dry_run {
                    crate::values::metadata_mut(&mut obj)
                        .insert("resourceVersion".into(), Value::String(rv.to_string()));
                }
                let et = if current.is_some() {
                    EventType::Modified
                } else {
                    EventType::Added
                };
                (et, Arc::new(obj))
            }
            Change::Delete => {
                let Some(cur) = &current else {
                    return Err(StoreError::Mismatch(None));
                };
                let mut last = (*cur.obj).clone();
                if !dry_run {
                    crate::values::metadata_mut(&mut last)
                        .insert("resourceVersion".into(), Value::String(rv.to_string()));
                }
                (EventType::Deleted, Arc::new(last))
            }
        };
        if dry_run {
            return Ok(Committed {
                object,
                durable: None,
            });
        }
        let event = Arc::new(Event {
            rv,
            etype,
            resource: gr.clone(),
            namespace: key.0.clone(),
            name: key.1.clone(),
            object: object.clone(),
            // Writes become visible in order, so the latest state now is
            // the visible state just before this one.
            prev: current.map(|c| c.obj),
            rendered: OnceLock::new(),
        });
        if !st.durable {
            st.assigned = rv;
            self.apply_locked(&mut st, event);
            return Ok(Committed {
                object,
                durable: None,
            });
        }
        let (done, durable) = durable_pair();
        let op = PersistOp::Write {
            event,
            epoch: st.epoch,
            done,
        };
        if st.persist.as_ref().is_none_or(|p| p.send(op).is_err()) {
            return Err(StoreError::ShuttingDown);
        }
        st.assigned = rv;
        st.staged.insert(
            (gr.clone(), key),
            StagedEntry {
                rv,
                obj: (etype != EventType::Deleted).then(|| object.clone()),
                durable: durable.clone(),
            },
        );
        Ok(Committed {
            object,
            durable: Some(durable),
        })
    }

    /// Makes one event visible: tables, indexes, history, the apply hook,
    /// the garbage collector and watchers, in that order.
    fn apply_locked(&self, st: &mut State, ev: Arc<Event>) {
        st.rv = st.rv.max(ev.rv);
        let key: ObjKey = (ev.namespace.clone(), ev.name.clone());
        let prev = st
            .tables
            .get(&ev.resource)
            .and_then(|t| t.get(&key))
            .map(|e| e.obj.clone());
        if let Some(prev) = prev {
            st.index_remove(&ev.resource, &key, &prev);
        }
        let table = st.tables.entry(ev.resource.clone()).or_default();
        if ev.etype == EventType::Deleted {
            table.remove(&key);
        } else {
            table.insert(
                key.clone(),
                Entry {
                    rv: ev.rv,
                    obj: ev.object.clone(),
                },
            );
            st.index_add(&ev.resource, &key, &ev.object);
        }
        st.push_history(ev.clone());
        if let Some(hook) = self.on_apply.get() {
            hook(&ev);
        }
        if let Some(g) = &st.gc {
            let _ = g.send(ev.clone());
        }
        // No receivers is normal.
        let _ = self.tx.send(ev);
    }

    /// The persister's failure epoch: writes staged under an older one are
    /// discarded.
    pub(crate) fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// Makes a durable batch visible, in order.
    pub(crate) fn apply_durable(&self, events: impl IntoIterator<Item = Arc<Event>>) {
        let mut st = self.lock();
        for ev in events {
            let k = (ev.resource.clone(), (ev.namespace.clone(), ev.name.clone()));
            if st.staged.get(&k).is_some_and(|s| s.rv == ev.rv) {
                st.staged.remove(&k);
            }
            self.apply_locked(&mut st, ev);
        }
    }

    /// Discards every staged write after a batch failed to persist: later
    /// staged writes may build on the failed ones, so all of them fail and
    /// the latest state falls back to what is durable. Returns the new
    /// epoch; queued writes of older epochs are failed by the persister.
    pub(crate) fn abort_staged(&self) -> u64 {
        let mut st = self.lock();
        st.epoch += 1;
        st.staged.clear();
        st.epoch
    }

    /// Starts a watch on `gr` consistently with the history: nothing committed
    /// after this call is missed and nothing before `from` is replayed.
    pub(crate) fn watch(
        &self,
        gr: &GroupResource,
        from: WatchFrom,
    ) -> Result<WatchStart, StoreError> {
        let st = self.lock();
        let rx = self.tx.subscribe();
        match from {
            WatchFrom::Snapshot => Ok(WatchStart {
                snapshot: st
                    .tables
                    .get(gr)
                    .map(|t| t.values().map(|e| e.obj.clone()).collect())
                    .unwrap_or_default(),
                backlog: Vec::new(),
                rx,
                rv: st.rv,
            }),
            WatchFrom::Rv(n) => {
                // A version from the future comes from a client of an
                // earlier, unpersisted run of this server: make it relist.
                if n < st.floor || n > st.rv {
                    return Err(StoreError::Expired {
                        requested: n,
                        oldest: st.floor,
                    });
                }
                // History is ordered by RV; skip to the first event after n.
                let idx = st.history.partition_point(|e| e.rv <= n);
                let backlog = st
                    .history
                    .range(idx..)
                    .filter(|e| e.resource == *gr)
                    .cloned()
                    .collect();
                Ok(WatchStart {
                    snapshot: Vec::new(),
                    backlog,
                    rx,
                    rv: st.rv,
                })
            }
        }
    }

    /// Forgets the event history and bumps the resourceVersion, so every
    /// resourceVersion a client holds is too old to resume from (410). Open
    /// watches are closed by the caller.
    pub(crate) fn expire_history(&self) -> u64 {
        let mut st = self.lock();
        st.assigned += 1;
        st.rv = st.assigned;
        st.floor = st.rv;
        st.history.clear();
        let rv = st.rv;
        let epoch = st.epoch;
        if let Some(p) = &st.persist {
            let _ = p.send(PersistOp::Rv { rv, epoch });
        }
        rv
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default", "uid": format!("u-{name}")}})
    }

    fn rv_of(c: &Committed) -> u64 {
        c.object["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    fn store() -> Store {
        let s = Store::new();
        let ns = GroupResource::new("", "namespaces");
        s.commit(
            &ns,
            "",
            "default",
            Expect::Absent,
            Change::Put(json!({"metadata": {"name": "default"}})),
            false,
        )
        .unwrap();
        s
    }

    #[test]
    fn commit_checks_expectations_and_bumps_rv() {
        let s = store();
        let gr = GroupResource::new("", "configmaps");
        let c = s
            .commit(
                &gr,
                "default",
                "a",
                Expect::Absent,
                Change::Put(cm("a")),
                false,
            )
            .unwrap();
        assert_eq!(rv_of(&c), 2);
        assert_eq!(c.object["metadata"]["resourceVersion"], "2");
        assert_eq!(
            s.commit(
                &gr,
                "default",
                "a",
                Expect::Absent,
                Change::Put(cm("a")),
                false
            )
            .unwrap_err(),
            StoreError::Mismatch(Some(2))
        );
        assert_eq!(
            s.commit(
                &gr,
                "nope",
                "a",
                Expect::Absent,
                Change::Put(cm("a")),
                false
            )
            .unwrap_err(),
            StoreError::NamespaceMissing("nope".into())
        );
        let dry = s
            .commit(&gr, "default", "a", Expect::Rv(2), Change::Delete, true)
            .unwrap();
        assert_eq!(rv_of(&dry), 2);
        assert!(s.get(&gr, "default", "a").is_some());
        let del = s
            .commit(&gr, "default", "a", Expect::Rv(2), Change::Delete, false)
            .unwrap();
        assert_eq!(del.object["metadata"]["resourceVersion"], "3");
        assert!(s.get(&gr, "default", "a").is_none());
    }

    #[test]
    fn list_pages_in_key_order() {
        let s = store();
        let gr = GroupResource::new("", "configmaps");
        for n in ["c", "a", "b"] {
            s.commit(&gr, "default", n, Expect::Absent, Change::Put(cm(n)), false)
                .unwrap();
        }
        let (_, page, next) = s.list(&gr, Some("default"), None, Some(2), &|_| true);
        assert_eq!(page.len(), 2);
        assert_eq!(page[0]["metadata"]["name"], "a");
        let next = next.unwrap();
        let (_, page, more) = s.list(&gr, Some("default"), Some(&next), Some(2), &|_| true);
        assert_eq!(page.len(), 1);
        assert_eq!(page[0]["metadata"]["name"], "c");
        assert!(more.is_none());
    }

    #[test]
    fn watch_resumes_and_expires() {
        let s = store();
        let gr = GroupResource::new("", "configmaps");
        for n in ["a", "b"] {
            s.commit(&gr, "default", n, Expect::Absent, Change::Put(cm(n)), false)
                .unwrap();
        }
        let w = s.watch(&gr, WatchFrom::Rv(2)).unwrap();
        assert_eq!(w.backlog.len(), 1);
        assert_eq!(w.backlog[0].name, "b");
        let rv = s.expire_history();
        assert!(matches!(
            s.watch(&gr, WatchFrom::Rv(3)),
            Err(StoreError::Expired { .. })
        ));
        assert!(s.watch(&gr, WatchFrom::Rv(rv)).is_ok());
        assert!(matches!(
            s.watch(&gr, WatchFrom::Rv(rv + 1)),
            Err(StoreError::Expired { .. })
        ));
    }

    #[test]
    fn tracks_dependents() {
        let s = store();
        let gr = GroupResource::new("", "configmaps");
        let mut child = cm("child");
        child["metadata"]["ownerReferences"] = json!([{"uid": "u-parent"}]);
        s.commit(
            &gr,
            "default",
            "child",
            Expect::Absent,
            Change::Put(child),
            false,
        )
        .unwrap();
        assert_eq!(s.dependents("u-parent").len(), 1);
        assert!(s.locate_uid("u-child").is_some());
    }

    fn durable_store() -> (Store, mpsc::UnboundedReceiver<PersistOp>) {
        let s = store();
        let (tx, rx) = mpsc::unbounded_channel();
        s.set_persist(tx);
        (s, rx)
    }

    fn events(rx: &mut mpsc::UnboundedReceiver<PersistOp>) -> Vec<(Arc<Event>, DurableSender)> {
        let mut out = Vec::new();
        while let Ok(op) = rx.try_recv() {
            if let PersistOp::Write { event, done, .. } = op {
                out.push((event, done));
            }
        }
        out
    }

    #[tokio::test]
    async fn staged_writes_are_invisible_until_durable() {
        let (s, mut rx) = durable_store();
        let gr = GroupResource::new("", "configmaps");
        let c = s
            .commit(
                &gr,
                "default",
                "a",
                Expect::Absent,
                Change::Put(cm("a")),
                false,
            )
            .unwrap();
        assert!(s.get(&gr, "default", "a").is_none(), "not visible yet");
        let latest = s.latest(&gr, "default", "a").expect("writers see it");
        assert_eq!(latest.rv, rv_of(&c));
        // A second writer builds on the staged state without waiting.
        s.commit(
            &gr,
            "default",
            "a",
            Expect::Rv(rv_of(&c)),
            Change::Put(cm("a")),
            false,
        )
        .unwrap();
        let staged = events(&mut rx);
        assert_eq!(staged.len(), 2);
        let mut watch = s.watch(&gr, WatchFrom::Rv(s.current_rv())).unwrap();
        let (evs, dones): (Vec<_>, Vec<_>) = staged.into_iter().unzip();
        s.apply_durable(evs);
        for d in dones {
            d.resolve(Ok(()));
        }
        assert_eq!(s.get(&gr, "default", "a").unwrap().rv, rv_of(&c) + 1);
        assert_eq!(watch.rx.recv().await.unwrap().etype, EventType::Added);
        assert_eq!(watch.rx.recv().await.unwrap().etype, EventType::Modified);
        c.durable.unwrap().wait().await.unwrap();
    }

    #[tokio::test]
    async fn an_aborted_batch_discards_every_staged_write() {
        let (s, mut rx) = durable_store();
        let gr = GroupResource::new("", "configmaps");
        s.commit(
            &gr,
            "default",
            "a",
            Expect::Absent,
            Change::Put(cm("a")),
            false,
        )
        .unwrap();
        let rv_before = s.current_rv();
        let c = s
            .commit(
                &gr,
                "default",
                "b",
                Expect::Absent,
                Change::Put(cm("b")),
                false,
            )
            .unwrap();
        let old_epoch = s.epoch();
        assert_eq!(s.abort_staged(), old_epoch + 1);
        for (_, done) in events(&mut rx) {
            done.resolve(Err("disk full".into()));
        }
        let c_rv = rv_of(&c);
        assert_eq!(&*c.durable.unwrap().wait().await.unwrap_err(), "disk full");
        assert!(s.latest(&gr, "default", "a").is_none());
        assert!(s.get(&gr, "default", "b").is_none());
        assert_eq!(s.current_rv(), rv_before, "nothing became visible");
        // Later writes start from durable state again, with fresh versions.
        let again = s
            .commit(
                &gr,
                "default",
                "a",
                Expect::Absent,
                Change::Put(cm("a")),
                false,
            )
            .unwrap();
        assert!(rv_of(&again) > c_rv, "discarded versions are not reused");
        s.detach();
        assert_eq!(
            s.commit(
                &gr,
                "default",
                "z",
                Expect::Absent,
                Change::Put(cm("z")),
                false
            )
            .unwrap_err(),
            StoreError::ShuttingDown
        );
    }
}
