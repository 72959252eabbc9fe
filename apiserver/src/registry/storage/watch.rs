//! The consistent start of a watch (a snapshot, or history after a
//! resourceVersion), and forced expiry of every resourceVersion clients hold.

use std::sync::Arc;

use tokio::sync::broadcast;

use super::commit::StoreError;
use super::durable::PersistOp;
use super::event::Event;
use super::json::Json;
use super::state::{Entry, TableKey};
use super::store::Store;
use crate::registry::resources::GroupResource;

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
    /// Current objects' namespaces and JSON (Snapshot) — filter by
    /// namespace/selectors outside.
    pub(crate) snapshot: Vec<(String, Json)>,
    /// History after the requested RV (Rv).
    pub(crate) backlog: Vec<Arc<Event>>,
    pub(crate) rx: broadcast::Receiver<Arc<Event>>,
    pub(crate) rv: u64,
}

impl Store {
    /// Starts a watch on `gr` (in `namespace` only, if given) consistently
    /// with the history: nothing committed after this call is missed and
    /// nothing before `from` is replayed. A namespace's watch reads only
    /// that namespace's objects under the lock, not the resource's.
    pub(crate) fn watch(
        &self,
        gr: &GroupResource,
        namespace: Option<&str>,
        from: WatchFrom,
    ) -> Result<WatchStart, StoreError> {
        let st = self.lock();
        let rx = self.tx.subscribe();
        match from {
            WatchFrom::Snapshot => Ok(WatchStart {
                snapshot: st
                    .tables
                    .get(gr)
                    .map(|t| {
                        let entry =
                            |(k, e): (&TableKey, &Entry)| (k.parts().0.to_string(), e.obj.clone());
                        match namespace {
                            Some(ns) => t
                                .range(TableKey::namespace_start(ns)..)
                                .take_while(|(k, _)| k.parts().0 == ns)
                                .map(entry)
                                .collect(),
                            None => t.iter().map(entry).collect(),
                        }
                    })
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
                    .filter(|e| e.resource == *gr && namespace.is_none_or(|ns| e.namespace == ns))
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
