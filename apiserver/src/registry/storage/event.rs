//! One change, as watchers, the garbage collector and the persister see it.

#[cfg(test)]
use std::sync::Arc;

use serde_json::Value;

use super::json::{self, Json};

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
    /// The new state (for DELETED, the last state carrying the deletion
    /// RV), as the stored JSON: the same bytes for the persister and every
    /// watcher of the stored version, which keeps fan-out cheap.
    pub(crate) object: Json,
    /// The state before, so watchers can tell an object left their selector.
    pub(crate) prev: Option<Json>,
}

impl Event {
    /// This event as one of type `etype`, for tests.
    #[cfg(test)]
    pub(crate) fn retyped(&self, etype: EventType) -> Arc<Event> {
        Arc::new(Event {
            rv: self.rv,
            etype,
            resource: self.resource.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            object: self.object.clone(),
            prev: self.prev.clone(),
        })
    }

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
            object: json::encode(&object),
            prev: None,
        })
    }

    /// `object` parsed (each call parses: events in the history hold only
    /// their JSON).
    pub(crate) fn value(&self) -> Value {
        json::decode(&self.object)
    }
}
