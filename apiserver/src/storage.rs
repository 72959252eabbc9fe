//! The object store: one global resourceVersion, per-resource ordered maps,
//! a bounded event history for watch resumption and a broadcast fan-out.
//!
//! Every method is synchronous and holds the lock only for map operations, so
//! callers compute patches and serialize outside it (optimistic concurrency:
//! read, compute, [`Store::commit`] with the expected resourceVersion, retry).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};

use crate::resources::GroupResource;

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type ObjKey = (String, String);

/// How many events are kept for watch resumption; older resourceVersions get
/// 410 Expired, as past the real server's watch cache.
pub const HISTORY_LEN: usize = 50_000;

/// Broadcast buffer per watcher; a watcher further behind than this is closed
/// with 410 Expired and relists.
const BROADCAST_CAPACITY: usize = 1 << 16;

/// Watch event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as watchers and the garbage collector see it.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub etype: EventType,
    pub resource: GroupResource,
    pub namespace: String,
    pub name: String,
    /// The new state (for DELETED, the last state carrying the deletion RV).
    pub object: Arc<Value>,
    /// The state before, so watchers can tell an object left their selector.
    pub prev: Option<Arc<Value>>,
    rendered: OnceLock<Bytes>,
}

impl Event {
    /// `object` serialized once and shared by every watcher of the stored
    /// version (the common case), which keeps fan-out cheap.
    pub fn rendered(&self) -> &Bytes {
        self.rendered
            .get_or_init(|| Bytes::from(serde_json::to_vec(&*self.object).unwrap_or_default()))
    }
}

/// A stored object and its resourceVersion.
#[derive(Debug, Clone)]
pub struct Stored {
    pub rv: u64,
    pub obj: Arc<Value>,
}

/// What `commit` expects to find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Create: nothing stored under the key.
    Absent,
    /// Update/delete: the object at exactly this resourceVersion.
    Rv(u64),
}

/// What `commit` does.
#[derive(Debug)]
pub enum Change {
    Put(Value),
    Delete,
}

/// Why a commit was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("stored state changed (now at {0:?})")]
    Mismatch(Option<u64>),
    #[error("namespace {0} not found")]
    NamespaceMissing(String),
    #[error("namespace {0} is terminating")]
    NamespaceTerminating(String),
    #[error("too old resource version: {requested} ({oldest})")]
    Expired { requested: u64, oldest: u64 },
}

/// A committed (or dry-run) change.
#[derive(Debug, Clone)]
pub struct Committed {
    pub rv: u64,
    /// The stored object (for deletes, the last state with the deletion RV).
    pub object: Arc<Value>,
}

/// A write for the persistence task.
#[derive(Debug)]
pub enum PersistOp {
    Put {
        resource: GroupResource,
        key: ObjKey,
        json: Bytes,
        rv: u64,
    },
    Delete {
        resource: GroupResource,
        key: ObjKey,
        rv: u64,
    },
    /// A resourceVersion bump with no object (forced expiry).
    Rv(u64),
}

#[derive(Default)]
struct State {
    rv: u64,
    /// Watches may resume from resourceVersions ≥ floor.
    floor: u64,
    tables: HashMap<GroupResource, BTreeMap<ObjKey, Stored>>,
    history: VecDeque<Arc<Event>>,
    uids: HashMap<String, (GroupResource, ObjKey)>,
    /// owner uid → dependents that name it in ownerReferences.
    dependents: HashMap<String, BTreeSet<(GroupResource, ObjKey)>>,
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchFrom {
    /// Send the current state first (synthetic ADDED events).
    Snapshot,
    /// Replay history after this resourceVersion.
    Rv(u64),
}

/// The consistent starting point of a watch.
pub struct WatchStart {
    /// Current objects (Snapshot) — filter by namespace/selectors outside.
    pub snapshot: Vec<Arc<Value>>,
    /// History after the requested RV (Rv).
    pub backlog: Vec<Arc<Event>>,
    pub rx: broadcast::Receiver<Arc<Event>>,
    pub rv: u64,
}

/// The shared store.
pub struct Store {
    state: Mutex<State>,
    tx: broadcast::Sender<Arc<Event>>,
    persist: Mutex<Option<mpsc::UnboundedSender<PersistOp>>>,
    gc: Mutex<Option<mpsc::UnboundedSender<Arc<Event>>>>,
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
    crate::util::meta_str(obj, "uid").map(str::to_string)
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
}

impl Store {
    /// An empty store at resourceVersion 0... plus whatever `load` adds.
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(BROADCAST_CAPACITY);
        Store {
            state: Mutex::new(State::default()),
            tx,
            persist: Mutex::new(None),
            gc: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent maps (every
        // mutation is a single insert/remove), so poisoning is ignored.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Routes every committed write to the persistence task.
    pub fn set_persist(&self, tx: mpsc::UnboundedSender<PersistOp>) {
        *self.persist.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
    }

    /// Routes every event to the garbage collector.
    pub fn set_gc(&self, tx: mpsc::UnboundedSender<Arc<Event>>) {
        *self.gc.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
    }

    /// Stops queuing writes for persistence and the garbage collector, so
    /// their tasks drain and exit (shutdown).
    pub fn detach(&self) {
        *self.persist.lock().unwrap_or_else(|e| e.into_inner()) = None;
        *self.gc.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Restores objects loaded from disk, and the resourceVersion they reached.
    pub fn load(&self, rv: u64, objects: Vec<(GroupResource, ObjKey, u64, Value)>) {
        let mut st = self.lock();
        st.rv = st.rv.max(rv);
        for (gr, key, orv, obj) in objects {
            st.rv = st.rv.max(orv);
            st.index_add(&gr, &key, &obj);
            st.tables.entry(gr).or_default().insert(
                key,
                Stored {
                    rv: orv,
                    obj: Arc::new(obj),
                },
            );
        }
        // Nothing before the restart can be replayed.
        st.floor = st.rv;
    }

    /// Synthetic MODIFIED events for every object being deleted, so the
    /// garbage collector resumes work interrupted by a restart.
    pub fn deleting_events(&self) -> Vec<Arc<Event>> {
        let st = self.lock();
        let mut out = Vec::new();
        for (gr, table) in &st.tables {
            for (key, s) in table {
                if s.obj["metadata"].get("deletionTimestamp").is_some() {
                    out.push(Arc::new(Event {
                        rv: s.rv,
                        etype: EventType::Modified,
                        resource: gr.clone(),
                        namespace: key.0.clone(),
                        name: key.1.clone(),
                        object: s.obj.clone(),
                        prev: Some(s.obj.clone()),
                        rendered: OnceLock::new(),
                    }));
                }
            }
        }
        out
    }

    /// The current global resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// One object.
    pub fn get(&self, gr: &GroupResource, ns: &str, name: &str) -> Option<Stored> {
        self.lock()
            .tables
            .get(gr)?
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Where the object with this uid is stored.
    pub fn locate_uid(&self, uid: &str) -> Option<(GroupResource, ObjKey)> {
        self.lock().uids.get(uid).cloned()
    }

    /// Objects whose ownerReferences name `uid`.
    pub fn dependents(&self, uid: &str) -> Vec<(GroupResource, ObjKey)> {
        self.lock()
            .dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Keys of every object in namespace `ns`, across all resources.
    pub fn namespace_contents(&self, ns: &str) -> Vec<(GroupResource, String)> {
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
    pub fn namespace_is_empty(&self, ns: &str) -> bool {
        let st = self.lock();
        st.tables.values().all(|table| {
            table
                .range((ns.to_string(), String::new())..)
                .next()
                .is_none_or(|((kns, _), _)| kns != ns)
        })
    }

    /// Whether any object of a resource is stored.
    pub fn has_any(&self, gr: &GroupResource) -> bool {
        self.lock().tables.get(gr).is_some_and(|t| !t.is_empty())
    }

    /// Every object of a resource (all namespaces), for CRD cleanup and GC.
    pub fn keys(&self, gr: &GroupResource) -> Vec<ObjKey> {
        self.lock()
            .tables
            .get(gr)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// A filtered, ordered page of objects. `ns` None lists all namespaces;
    /// `after` is the exclusive start key of a continued list; at most `limit`
    /// matches are returned, with the key to continue from when more remain.
    pub fn list(
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
        for (key, stored) in table.range((lower, std::ops::Bound::Unbounded)) {
            if let Some(ns) = ns
                && key.0 != ns
            {
                break;
            }
            if !filter(&stored.obj) {
                continue;
            }
            if let Some(limit) = limit
                && out.len() == limit
            {
                // The previous item is the last returned one.
                let last = out.last().map(|o: &Arc<Value>| {
                    (
                        crate::util::meta_str(o, "namespace")
                            .unwrap_or("")
                            .to_string(),
                        crate::util::meta_str(o, "name").unwrap_or("").to_string(),
                    )
                });
                return (rv, out, last);
            }
            out.push(stored.obj.clone());
        }
        (rv, out, None)
    }

    /// Applies `change` if the stored state matches `expect`. A dry run
    /// validates the same way and returns what would be stored.
    pub fn commit(
        &self,
        gr: &GroupResource,
        ns: &str,
        name: &str,
        expect: Expect,
        change: Change,
        dry_run: bool,
    ) -> Result<Committed, StoreError> {
        let key: ObjKey = (ns.to_string(), name.to_string());
        let mut st = self.lock();
        let current = st.tables.get(gr).and_then(|t| t.get(&key)).cloned();
        match (expect, &current) {
            (Expect::Absent, None) => {
                if !ns.is_empty() {
                    let nskey = (String::new(), ns.to_string());
                    match st.tables.get(&namespace_key()).and_then(|t| t.get(&nskey)) {
                        None => return Err(StoreError::NamespaceMissing(ns.to_string())),
                        Some(n)
                            if n.obj["metadata"].get("deletionTimestamp").is_some()
                                && matches!(change, Change::Put(_)) =>
                        {
                            return Err(StoreError::NamespaceTerminating(ns.to_string()));
                        }
                        Some(_) => {}
                    }
                }
            }
            (Expect::Rv(want), Some(cur)) if cur.rv == want => {}
            _ => return Err(StoreError::Mismatch(current.map(|c| c.rv))),
        }
        let rv = if dry_run { st.rv } else { st.rv + 1 };
        let (etype, object) = match change {
            Change::Put(mut obj) => {
                if !dry_run {
                    crate::util::metadata_mut(&mut obj)
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
                    crate::util::metadata_mut(&mut last)
                        .insert("resourceVersion".into(), Value::String(rv.to_string()));
                }
                (EventType::Deleted, Arc::new(last))
            }
        };
        if dry_run {
            return Ok(Committed { rv, object });
        }
        st.rv = rv;
        if let Some(cur) = &current {
            st.index_remove(gr, &key, &cur.obj);
        }
        let table = st.tables.entry(gr.clone()).or_default();
        if etype == EventType::Deleted {
            table.remove(&key);
        } else {
            table.insert(
                key.clone(),
                Stored {
                    rv,
                    obj: object.clone(),
                },
            );
            st.index_add(gr, &key, &object);
        }
        let event = Arc::new(Event {
            rv,
            etype,
            resource: gr.clone(),
            namespace: key.0.clone(),
            name: key.1.clone(),
            object: object.clone(),
            prev: current.map(|c| c.obj),
            rendered: OnceLock::new(),
        });
        st.push_history(event.clone());
        if let Some(p) = &*self.persist.lock().unwrap_or_else(|e| e.into_inner()) {
            let op = if etype == EventType::Deleted {
                PersistOp::Delete {
                    resource: gr.clone(),
                    key,
                    rv,
                }
            } else {
                PersistOp::Put {
                    resource: gr.clone(),
                    key,
                    json: event.rendered().clone(),
                    rv,
                }
            };
            let _ = p.send(op);
        }
        if let Some(g) = &*self.gc.lock().unwrap_or_else(|e| e.into_inner()) {
            let _ = g.send(event.clone());
        }
        // No receivers is normal.
        let _ = self.tx.send(event);
        Ok(Committed { rv, object })
    }

    /// Starts a watch on `gr` consistently with the history: nothing committed
    /// after this call is missed and nothing before `from` is replayed.
    pub fn watch(&self, gr: &GroupResource, from: WatchFrom) -> Result<WatchStart, StoreError> {
        let st = self.lock();
        let rx = self.tx.subscribe();
        match from {
            WatchFrom::Snapshot => Ok(WatchStart {
                snapshot: st
                    .tables
                    .get(gr)
                    .map(|t| t.values().map(|s| s.obj.clone()).collect())
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
    pub fn expire_history(&self) -> u64 {
        let mut st = self.lock();
        st.rv += 1;
        st.floor = st.rv;
        st.history.clear();
        let rv = st.rv;
        if let Some(p) = &*self.persist.lock().unwrap_or_else(|e| e.into_inner()) {
            let _ = p.send(PersistOp::Rv(rv));
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
        assert_eq!(c.rv, 2);
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
        assert_eq!(dry.rv, 2);
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
}
