//! What is behind the store lock: the visible tables, the uid and owner
//! indexes, the watch history and the staged writes.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;

use super::durable::{Durable, PersistOp};
use super::event::Event;
use super::json::{self, Json};
use crate::registry::resources::GroupResource;

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub(crate) type ObjKey = (String, String);

/// A table's key: `namespace`, NUL, `name`, in one string. It sorts as the
/// pair does (NUL sorts before every other character, and a namespace, a
/// DNS label, holds none), at a third of the pair's size in every entry of
/// a million.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct TableKey(Box<str>);

impl TableKey {
    pub(super) fn new(ns: &str, name: &str) -> Self {
        let mut key = String::with_capacity(ns.len() + 1 + name.len());
        key.push_str(ns);
        key.push('\0');
        key.push_str(name);
        TableKey(key.into_boxed_str())
    }

    pub(super) fn of(key: &ObjKey) -> Self {
        Self::new(&key.0, &key.1)
    }

    /// The smallest key of namespace `ns`.
    pub(super) fn namespace_start(ns: &str) -> Self {
        Self::new(ns, "")
    }

    /// `(namespace, name)`.
    pub(super) fn parts(&self) -> (&str, &str) {
        self.0.split_once('\0').unwrap_or(("", &self.0))
    }

    pub(super) fn to_obj_key(&self) -> ObjKey {
        let (ns, name) = self.parts();
        (ns.to_string(), name.to_string())
    }
}

/// How many events are kept for watch resumption; older resourceVersions get
/// 410 Expired, as past the real server's watch cache.
pub(crate) const HISTORY_LEN: usize = 50_000;
/// How many bytes of object JSON the kept events may hold between them:
/// 50,000 updates of one 3 MiB object would otherwise keep 150 GiB.
pub(crate) const HISTORY_BYTES: usize = 256 << 20;

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
pub(super) struct Entry {
    pub(super) rv: u64,
    pub(super) obj: Json,
}

/// The newest staged state of one key.
#[derive(Debug)]
pub(super) struct StagedEntry {
    pub(super) rv: u64,
    /// None for a staged deletion.
    pub(super) obj: Option<Json>,
    pub(super) durable: Durable,
}

/// Everything behind the store lock.
#[derive(Default)]
pub(super) struct State {
    /// The newest visible resourceVersion.
    pub(super) rv: u64,
    /// The newest resourceVersion handed out (≥ `rv`; larger while writes
    /// are staged, and after discarded writes burned theirs).
    pub(super) assigned: u64,
    /// Watches may resume from resourceVersions ≥ floor.
    pub(super) floor: u64,
    pub(super) tables: HashMap<GroupResource, BTreeMap<TableKey, Entry>>,
    pub(super) history: VecDeque<Arc<Event>>,
    /// The bytes of the objects' JSON the history's events hold.
    pub(super) history_bytes: usize,
    /// Where each object is, by uid.
    pub(super) uids: UidIndex,
    /// owner uid → dependents that name it in ownerReferences.
    pub(super) dependents: HashMap<String, Dependents>,
    /// Owners the last of whose blocking dependents in some namespace went
    /// (deleted, unblocked or re-owned) since the garbage collector last
    /// took them: a foreground deletion waiting on them may be done. Kept
    /// only while the collector runs.
    pub(super) released: Vec<String>,
    /// With persistence: the newest not-yet-durable state per key.
    pub(super) staged: HashMap<(GroupResource, ObjKey), StagedEntry>,
    /// Bumped by every failed batch.
    pub(super) epoch: u64,
    /// Writes are staged and persisted (set once at start).
    pub(super) durable: bool,
    /// The persister's queue; None after shutdown.
    pub(super) persist: Option<mpsc::UnboundedSender<PersistOp>>,
    /// The garbage collector's queue; None after shutdown.
    pub(super) gc: Option<mpsc::UnboundedSender<Arc<Event>>>,
}

/// The objects whose ownerReferences name one owner.
#[derive(Default)]
pub(super) struct Dependents {
    pub(super) all: BTreeSet<(GroupResource, ObjKey)>,
    /// How many of them, by their namespace, have `blockOwnerDeletion`.
    blocking: BTreeMap<String, u32>,
}

impl Dependents {
    /// Whether an owner in namespace `owner_ns` (empty: cluster-scoped)
    /// waits for any of these in a foreground deletion. A namespaced
    /// owner's reference from another namespace is invalid, as it is to
    /// kube-apiserver's collector, so it holds nothing.
    pub(super) fn block(&self, owner_ns: &str) -> bool {
        if owner_ns.is_empty() {
            !self.blocking.is_empty()
        } else {
            self.blocking.contains_key(owner_ns)
        }
    }
}

/// Where each object is, by uid, in an entry per object that is small at a
/// million objects: a uid the server made (a UUID) is its 16 bytes, the
/// resource is one copy shared by all of its objects, and the key is one
/// string.
#[derive(Default)]
pub(super) struct UidIndex {
    /// By the UUID's two halves (a `u128` key would align each entry to 16
    /// bytes, 8 of them padding), in a B-tree: random keys fill its nodes
    /// to about 70%, where a hash table of a million entries, its capacity
    /// a power of two, is half empty.
    uuids: BTreeMap<[u64; 2], Located>,
    /// Uids that are not UUIDs (written by another server into a restored
    /// data directory, say).
    others: HashMap<Box<str>, Located>,
    resources: HashMap<GroupResource, Arc<GroupResource>>,
}

/// An object's resource and key.
struct Located {
    resource: Arc<GroupResource>,
    key: TableKey,
}

impl UidIndex {
    fn uuid(uid: &str) -> Option<[u64; 2]> {
        // The canonical form only (an uppercase one is another uid), checked
        // without allocating: this runs on every write.
        let mut canonical = [0; uuid::fmt::Hyphenated::LENGTH];
        uuid::Uuid::try_parse(uid)
            .ok()
            .filter(|u| u.hyphenated().encode_lower(&mut canonical) == uid)
            .map(|u| {
                let (high, low) = u.as_u64_pair();
                [high, low]
            })
    }

    pub(super) fn insert(&mut self, uid: &str, gr: &GroupResource, key: &ObjKey) {
        let resource = self
            .resources
            .entry(gr.clone())
            .or_insert_with(|| Arc::new(gr.clone()))
            .clone();
        let located = Located {
            resource,
            key: TableKey::of(key),
        };
        match Self::uuid(uid) {
            Some(n) => self.uuids.insert(n, located),
            None => self.others.insert(uid.into(), located),
        };
    }

    pub(super) fn remove(&mut self, uid: &str) {
        match Self::uuid(uid) {
            Some(n) => self.uuids.remove(&n),
            None => self.others.remove(uid),
        };
    }

    pub(super) fn get(&self, uid: &str) -> Option<(GroupResource, ObjKey)> {
        let located = match Self::uuid(uid) {
            Some(n) => self.uuids.get(&n),
            None => self.others.get(uid),
        }?;
        Some((
            GroupResource::clone(&located.resource),
            located.key.to_obj_key(),
        ))
    }
}

pub(super) fn namespace_key() -> GroupResource {
    GroupResource::new("", "namespaces")
}

/// Whether the stored object `json` is being deleted; parsed only when the
/// bytes could say so.
pub(crate) fn is_deleting(json: &[u8]) -> bool {
    json::mentions(json, b"\"deletionTimestamp\"")
        && json::decode(json)
            .get("metadata")
            .and_then(|m| m.get("deletionTimestamp"))
            .is_some()
}

impl State {
    /// Moves the uid and owner indexes of `key` from its state `before` to
    /// its state `after` (None: absent). An update that keeps the uid and
    /// owners, nearly every one, leaves them as they are.
    pub(super) fn reindex(
        &mut self,
        gr: &GroupResource,
        key: &ObjKey,
        before: Option<&[u8]>,
        after: Option<&[u8]>,
    ) {
        let before = before.map(json::uid_and_owners);
        let after = after.map(json::uid_and_owners);
        if before == after {
            return;
        }
        if let Some(index) = before {
            self.index_remove(gr, key, index);
        }
        if let Some(index) = after {
            self.index_add(gr, key, index);
        }
    }

    fn index_remove(&mut self, gr: &GroupResource, key: &ObjKey, index: json::Index) {
        let (uid, owners) = index;
        if let Some(uid) = uid {
            self.uids.remove(&uid);
        }
        for owner in owners {
            let Some(deps) = self.dependents.get_mut(&owner.uid) else {
                continue;
            };
            let was_there = deps.all.remove(&(gr.clone(), key.clone()));
            if was_there
                && owner.blocks
                && let Some(n) = deps.blocking.get_mut(&key.0)
            {
                *n -= 1;
                if *n == 0 {
                    deps.blocking.remove(&key.0);
                    if self.gc.is_some() {
                        self.released.push(owner.uid.clone());
                    }
                }
            }
            if deps.all.is_empty() {
                self.dependents.remove(&owner.uid);
            }
        }
    }

    fn index_add(&mut self, gr: &GroupResource, key: &ObjKey, index: json::Index) {
        let (uid, owners) = index;
        if let Some(uid) = uid {
            self.uids.insert(&uid, gr, key);
        }
        for owner in owners {
            let deps = self.dependents.entry(owner.uid).or_default();
            // An object naming one owner twice is indexed once.
            if deps.all.insert((gr.clone(), key.clone())) && owner.blocks {
                *deps.blocking.entry(key.0.clone()).or_default() += 1;
            }
        }
    }

    /// Keeps `ev` for watches that resume; the oldest go (raising the
    /// floor) past [`HISTORY_LEN`] events or [`HISTORY_BYTES`] of JSON.
    /// Returns how many went for the bytes.
    pub(super) fn push_history(&mut self, ev: Arc<Event>) -> usize {
        self.history_bytes += ev.object.len();
        self.history.push_back(ev);
        let mut for_bytes = 0;
        while self.history.len() > HISTORY_LEN
            || (self.history_bytes > HISTORY_BYTES && self.history.len() > 1)
        {
            if self.history.len() <= HISTORY_LEN {
                for_bytes += 1;
            }
            if let Some(old) = self.history.pop_front() {
                self.history_bytes -= old.object.len();
                self.floor = self.floor.max(old.rv);
            }
        }
        for_bytes
    }

    /// The JSON and resourceVersion the next write to `key` builds on:
    /// staged if any, else visible; with the staged write's durability.
    pub(super) fn latest_json(
        &self,
        gr: &GroupResource,
        key: &ObjKey,
    ) -> Option<(u64, Json, Option<Durable>)> {
        if !self.staged.is_empty()
            && let Some(s) = self.staged.get(&(gr.clone(), key.clone()))
        {
            return s
                .obj
                .as_ref()
                .map(|obj| (s.rv, obj.clone(), Some(s.durable.clone())));
        }
        self.tables
            .get(gr)
            .and_then(|t| t.get(&TableKey::of(key)))
            .map(|e| (e.rv, e.obj.clone(), None))
    }
}

impl Stored {
    /// The stored state `(rv, json, durable)` with its object parsed.
    pub(super) fn parse((rv, obj, durable): (u64, Json, Option<Durable>)) -> Stored {
        Stored {
            rv,
            obj: json::decode_arc(&obj),
            durable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_keeps_at_most_its_bytes_of_json() {
        use super::super::event::{Event, EventType};
        // One 1 MiB object shared by every event: counted per event, as
        // each update of a real object holds JSON of its own.
        let object = Json::from(vec![b' '; 1 << 20]);
        let mut st = State::default();
        let mut for_bytes = 0;
        for rv in 1..=300u64 {
            for_bytes += st.push_history(Arc::new(Event {
                rv,
                etype: EventType::Modified,
                resource: GroupResource::new("", "configmaps"),
                namespace: "default".into(),
                name: "big".into(),
                object: object.clone(),
                prev: None,
                selectable: Default::default(),
            }));
        }
        assert_eq!(st.history.len(), HISTORY_BYTES >> 20);
        assert_eq!(st.history_bytes, HISTORY_BYTES);
        assert_eq!(for_bytes, 300 - (HISTORY_BYTES >> 20));
        assert_eq!(st.floor, 300 - (HISTORY_BYTES >> 20) as u64);
    }

    #[test]
    fn table_keys_sort_as_their_namespace_and_name_pairs() {
        let pairs = [
            ("", "z"),
            ("a", ""),
            ("a", "b"),
            ("a", "b-c"),
            ("a-b", "a"),
            ("a.b", "a"),
            ("ab", ""),
            ("b", "a"),
        ];
        for x in pairs {
            for y in pairs {
                let (kx, ky) = (TableKey::new(x.0, x.1), TableKey::new(y.0, y.1));
                assert_eq!(kx.cmp(&ky), x.cmp(&y), "{x:?} against {y:?}");
            }
            assert_eq!(TableKey::new(x.0, x.1).parts(), x);
        }
        assert!(TableKey::namespace_start("a") <= TableKey::new("a", ""));
        assert!(TableKey::new("", "zzz") < TableKey::namespace_start("a"));
    }

    #[test]
    fn the_uid_index_finds_objects_by_uuid_and_by_any_other_uid() {
        let mut index = UidIndex::default();
        let pods = GroupResource::new("", "pods");
        let uuid = "0b0c1d2e-3f40-4a5b-8c6d-7e8f90a1b2c3";
        let upper = uuid.to_uppercase();
        index.insert(uuid, &pods, &("default".into(), "a".into()));
        index.insert(&upper, &pods, &("default".into(), "b".into()));
        index.insert(
            "not-a-uuid",
            &namespace_key(),
            &(String::new(), "ns".into()),
        );
        assert_eq!(index.uuids.len(), 1, "only the canonical form is packed");
        assert_eq!(
            index.get(uuid),
            Some((pods.clone(), ("default".into(), "a".into())))
        );
        assert_eq!(
            index.get(&upper),
            Some((pods.clone(), ("default".into(), "b".into())))
        );
        assert_eq!(
            index.get("not-a-uuid"),
            Some((namespace_key(), (String::new(), "ns".into())))
        );
        index.remove(uuid);
        assert_eq!(index.get(uuid), None);
        assert!(index.get(&upper).is_some());
    }
}
