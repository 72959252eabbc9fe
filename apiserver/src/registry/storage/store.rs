//! [`Store`]: the shared store, its setup, loading from disk and shutdown.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tokio::sync::{broadcast, mpsc};

use super::durable::PersistOp;
use super::event::{Event, EventType};
use super::json::Json;
use super::state::{Entry, ObjKey, State, TableKey, is_deleting};
use crate::registry::resources::GroupResource;

/// Broadcast buffer per watcher; a watcher further behind than this is closed
/// with 410 Expired and relists.
const BROADCAST_CAPACITY: usize = 1 << 16;

/// Called for every event as it becomes visible, under the store lock.
type ApplyHook = Box<dyn Fn(&Event) + Send + Sync>;

/// The shared store: every object, the watch history and the fan-out.
pub(crate) struct Store {
    pub(super) state: Mutex<State>,
    pub(super) tx: broadcast::Sender<Arc<Event>>,
    /// Keeps derived state (the CRD registry) in step with visible objects.
    /// Runs under the store lock, so lock order is store, then the hook's.
    pub(super) on_apply: OnceLock<ApplyHook>,
    /// Events the history dropped early for its bytes, not yet counted in
    /// the metrics.
    pub(super) history_trims: AtomicU64,
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
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
            history_trims: AtomicU64::new(0),
        }
    }

    /// Events the watch history dropped early for its bytes since the last
    /// call.
    pub(crate) fn take_history_trims(&self) -> u64 {
        self.history_trims.swap(0, Ordering::Relaxed)
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
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
        st.released = Vec::new();
    }

    /// Restores objects loaded from disk, and the resourceVersion they reached.
    pub(crate) fn load(&self, rv: u64, objects: Vec<(GroupResource, ObjKey, u64, Json)>) {
        let mut st = self.lock();
        st.rv = st.rv.max(rv);
        for (gr, key, orv, obj) in objects {
            st.rv = st.rv.max(orv);
            st.reindex(&gr, &key, None, Some(&obj));
            st.tables
                .entry(gr)
                .or_default()
                .insert(TableKey::of(&key), Entry { rv: orv, obj });
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
                        namespace: key.parts().0.to_string(),
                        name: key.parts().1.to_string(),
                        object: e.obj.clone(),
                        prev: Some(e.obj.clone()),
                        selectable: Default::default(),
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
}
