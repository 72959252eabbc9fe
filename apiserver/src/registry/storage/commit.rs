//! Optimistic writes: a change committed at the resourceVersion it was
//! computed against, applied at once or staged for the persister, and
//! made visible in resourceVersion order.

use std::sync::Arc;

use serde_json::Value;

use super::durable::{Durable, PersistOp, durable_pair};
use super::event::{Event, EventType};
use super::json;
use super::state::{Entry, ObjKey, StagedEntry, State, TableKey, is_deleting, namespace_key};
use super::store::Store;
use crate::registry::resources::GroupResource;

/// Largest object stored, as compact JSON: the request body limit, so any
/// object a client can send fits, while patches (a JSON patch may copy
/// 3 MiB per request) cannot grow an object without bound across requests.
/// The real server's etcd refuses objects over 1.5 MiB of protobuf.
pub(crate) const MAX_OBJECT_BYTES: usize = 3 * 1024 * 1024;

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
    #[error(
        "the object nests arrays and objects more than {MAX_OBJECT_DEPTH} levels deep, more than clients can read back"
    )]
    TooDeep,
}

/// The deepest nesting of arrays and objects a stored object may have.
/// Clients parse at most 128 levels (serde_json, Go's decoder under
/// client-go's); a list wraps an object in two more, `managedFields`
/// repeats its fields a few levels down, and this server reads its own
/// records back with the same parser. An object past it would be stored
/// but could be neither read, listed, watched nor loaded again.
pub(crate) const MAX_OBJECT_DEPTH: usize = 100;

/// A committed (or dry-run) change.
#[derive(Debug, Clone)]
pub(crate) struct Committed {
    /// The stored object (for deletes, the last state with the deletion RV).
    pub(crate) object: Arc<Value>,
    /// With persistence: resolves when the change is durable and visible.
    pub(crate) durable: Option<Durable>,
}

impl Store {
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
            if crate::values::deeper_than(obj, MAX_OBJECT_DEPTH) {
                return Err(StoreError::TooDeep);
            }
        }
        let key: ObjKey = (ns.to_string(), name.to_string());
        let mut st = self.lock();
        let current = st.latest_json(gr, &key);
        match (expect, &current) {
            (Expect::Absent, None) => {
                if !ns.is_empty() {
                    let nskey = (String::new(), ns.to_string());
                    match st.latest_json(&namespace_key(), &nskey) {
                        None => return Err(StoreError::NamespaceMissing(ns.to_string())),
                        Some((_, n, _)) if matches!(change, Change::Put(_)) && is_deleting(&n) => {
                            return Err(StoreError::NamespaceTerminating(ns.to_string()));
                        }
                        Some(_) => {}
                    }
                }
            }
            (Expect::Rv(want), Some((rv, ..))) if *rv == want => {}
            _ => return Err(StoreError::Mismatch(current.map(|c| c.0))),
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
                let Some((_, cur, _)) = &current else {
                    return Err(StoreError::Mismatch(None));
                };
                let mut last = json::decode(cur);
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
        let stored = json::encode(&object);
        let event = Arc::new(Event {
            rv,
            etype,
            resource: gr.clone(),
            namespace: key.0.clone(),
            name: key.1.clone(),
            object: stored.clone(),
            // Writes become visible in order, so the latest state now is
            // the visible state just before this one.
            prev: current.map(|c| c.1),
            selectable: Default::default(),
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
                obj: (etype != EventType::Deleted).then_some(stored),
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
        let table_key = TableKey::new(&ev.namespace, &ev.name);
        let prev = st
            .tables
            .get(&ev.resource)
            .and_then(|t| t.get(&table_key))
            .map(|e| e.obj.clone());
        let after = (ev.etype != EventType::Deleted).then_some(&*ev.object);
        st.reindex(&ev.resource, &key, prev.as_deref(), after);
        let table = st.tables.entry(ev.resource.clone()).or_default();
        if ev.etype == EventType::Deleted {
            table.remove(&table_key);
        } else {
            table.insert(
                table_key,
                Entry {
                    rv: ev.rv,
                    obj: ev.object.clone(),
                },
            );
        }
        let trimmed = st.push_history(ev.clone());
        if trimmed > 0 {
            self.history_trims
                .fetch_add(trimmed as u64, std::sync::atomic::Ordering::Relaxed);
        }
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
}
