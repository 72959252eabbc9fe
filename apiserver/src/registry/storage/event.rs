//! One change, as watchers, the garbage collector and the persister see it.

use std::sync::{Arc, Mutex, Weak};

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
    /// What selectors read of `object` and `prev`, shared by the watchers
    /// that evaluate this event (see [`Event::selectable`]).
    pub(crate) selectable: Selectable,
}

/// The selectable parts of an event's object and previous state, made by
/// the first watcher that needs them and held only by watchers: each keeps
/// what it used for the last event it evaluated, so the parts live while
/// watchers are on this event, and the event itself (in the watch history)
/// holds nothing.
#[derive(Debug, Default)]
pub(crate) struct Selectable {
    object: Mutex<Weak<Value>>,
    prev: Mutex<Weak<Value>>,
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
            selectable: Selectable::default(),
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
            selectable: Selectable::default(),
        })
    }

    /// `object` parsed (each call parses: events in the history hold only
    /// their JSON).
    pub(crate) fn value(&self) -> Value {
        json::decode(&self.object)
    }

    /// The selectable parts of the object (or, with `prev`, of the state
    /// before; None if there is none), made from its JSON by `make` unless
    /// another watcher still holds them: an event is parsed once for all
    /// the watchers with selectors that evaluate it together, not once per
    /// watcher.
    pub(crate) fn selectable(
        &self,
        prev: bool,
        make: impl FnOnce(&[u8]) -> Value,
    ) -> Option<Arc<Value>> {
        let (json, slot) = if prev {
            (self.prev.as_ref()?, &self.selectable.prev)
        } else {
            (&self.object, &self.selectable.object)
        };
        // Made under the lock: watchers arriving meanwhile wait for it
        // rather than parse it again.
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(made) = slot.upgrade() {
            return Some(made);
        }
        let made = Arc::new(make(json));
        *slot = Arc::downgrade(&made);
        Some(made)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use serde_json::json;

    use super::*;

    /// Watchers that evaluate one event together parse it once; once none
    /// holds what was made, nothing is kept.
    #[test]
    fn the_selectable_parts_are_made_once_while_watchers_hold_them() {
        let ev = Event::added(
            1,
            GroupResource::new("", "configmaps"),
            json!({"metadata": {"name": "a"}}),
        );
        let made = Cell::new(0);
        let make = |_: &[u8]| {
            made.set(made.get() + 1);
            json!({"metadata": {"name": "a"}})
        };
        let first = ev.selectable(false, make).unwrap();
        let second = ev.selectable(false, make).unwrap();
        assert_eq!(made.get(), 1, "the second watcher shares the first's");
        assert!(Arc::ptr_eq(&first, &second));
        assert!(ev.selectable(true, make).is_none(), "no state before");
        drop((first, second));
        let _third = ev.selectable(false, make).unwrap();
        assert_eq!(made.get(), 2, "made again once nobody held it");
    }
}
