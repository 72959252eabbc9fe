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

/// How many events are kept for watch resumption; older resourceVersions get
/// 410 Expired, as past the real server's watch cache.
pub(crate) const HISTORY_LEN: usize = 50_000;

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
    pub(super) tables: HashMap<GroupResource, BTreeMap<ObjKey, Entry>>,
    pub(super) history: VecDeque<Arc<Event>>,
    pub(super) uids: HashMap<String, (GroupResource, ObjKey)>,
    /// owner uid → dependents that name it in ownerReferences.
    pub(super) dependents: HashMap<String, BTreeSet<(GroupResource, ObjKey)>>,
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

pub(super) fn namespace_key() -> GroupResource {
    GroupResource::new("", "namespaces")
}

pub(super) fn is_deleting(obj: &Value) -> bool {
    obj.get("metadata")
        .and_then(|m| m.get("deletionTimestamp"))
        .is_some()
}

impl State {
    pub(super) fn index_remove(&mut self, gr: &GroupResource, key: &ObjKey, obj: &[u8]) {
        let (uid, owners) = json::uid_and_owners(obj);
        if let Some(uid) = uid {
            self.uids.remove(&uid);
        }
        for owner in owners {
            if let Some(set) = self.dependents.get_mut(&owner) {
                set.remove(&(gr.clone(), key.clone()));
                if set.is_empty() {
                    self.dependents.remove(&owner);
                }
            }
        }
    }

    pub(super) fn index_add(&mut self, gr: &GroupResource, key: &ObjKey, obj: &[u8]) {
        let (uid, owners) = json::uid_and_owners(obj);
        if let Some(uid) = uid {
            self.uids.insert(uid, (gr.clone(), key.clone()));
        }
        for owner in owners {
            self.dependents
                .entry(owner)
                .or_default()
                .insert((gr.clone(), key.clone()));
        }
    }

    pub(super) fn push_history(&mut self, ev: Arc<Event>) {
        self.history.push_back(ev);
        while self.history.len() > HISTORY_LEN {
            if let Some(old) = self.history.pop_front() {
                self.floor = self.floor.max(old.rv);
            }
        }
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
            .and_then(|t| t.get(key))
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
