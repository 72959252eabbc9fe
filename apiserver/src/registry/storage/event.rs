//! One change, as watchers, the garbage collector and the persister see it.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use serde_json::Value;

use crate::registry::resources::GroupResource;

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
    pub(super) rendered: OnceLock<Bytes>,
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
