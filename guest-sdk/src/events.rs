//! Kubernetes Events about an object (events.k8s.io/v1 semantics), recorded
//! through the host.

use crate::host::kube;
use crate::{ApiError, Gvk, ObjectKey, Resource};

/// Whether an event is routine or worth someone's attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// Records events regarding one object.
///
/// The host fills in what the WIT `event` record does not carry: the
/// reporting controller (the plugin), the reporting instance, the event time
/// and the regarding object's uid. The events are visible with
/// `kubectl events --for webapp/hello` or `kubectl describe`.
///
/// ```no_run
/// # use wasmctrl_sdk::ApiError;
/// use wasmctrl_sdk::events::{EventType, Recorder};
/// use wasmctrl_sdk::k8s_openapi::api::core::v1::ConfigMap;
///
/// # fn f(cm: &ConfigMap) -> Result<(), ApiError> {
/// Recorder::new(cm).publish(EventType::Normal, "Synced", "Reconcile", "copied 3 keys")?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Recorder {
    kind: Gvk,
    key: ObjectKey,
}

impl Recorder {
    /// A recorder for events regarding `obj`.
    pub fn new<K: Resource>(obj: &K) -> Self {
        Self {
            kind: K::gvk(),
            key: obj.key(),
        }
    }

    /// A recorder for events regarding the object of `kind` at `key` (for
    /// example one that could not be read).
    pub fn for_key(kind: Gvk, key: ObjectKey) -> Self {
        Self { kind, key }
    }

    /// Records an event: `reason` is CamelCase and machine-readable
    /// (`Ready`), `action` what the controller did or failed to do
    /// (`Reconcile`), `note` a human-readable sentence.
    ///
    /// Events are best-effort signals; callers often ignore a failure
    /// (`.ok()`) rather than fail the reconcile.
    pub fn publish(
        &self,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Result<(), ApiError> {
        kube::record_event(&kube::Event {
            regarding_kind: self.kind.clone().into_wit(),
            regarding_namespace: self.key.namespace.clone(),
            regarding_name: self.key.name.clone(),
            type_: match type_ {
                EventType::Normal => kube::EventType::Normal,
                EventType::Warning => kube::EventType::Warning,
            },
            reason: reason.to_string(),
            action: action.to_string(),
            note: note.to_string(),
        })
        .map_err(ApiError::from)
    }
}
