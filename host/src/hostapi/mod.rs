//! The `kube` imports a guest sees: one request type for every verb, served
//! by a [`KubeApi`] implementation chosen by the host.

mod cluster;
mod grant;
mod selector;

use std::time::Instant;

use futures::future::BoxFuture;

pub use cluster::{ClusterApi, MAX_PAYLOAD, map_error};
pub use grant::{Access, Grant};
pub use selector::LabelSelector;

pub use crate::runtime::bindings::wasmctrl::reconciler::kube::{
    ApplyPatch, Event, EventType, ObjectPatch,
};
pub use crate::runtime::bindings::wasmctrl::reconciler::types::{ApiError, Gvk};

/// One call a guest makes through the `kube` interface.
#[derive(Debug, Clone)]
pub enum KubeRequest {
    Get {
        kind: Gvk,
        namespace: Option<String>,
        name: String,
    },
    List {
        kind: Gvk,
        namespace: Option<String>,
        label_selector: Option<String>,
    },
    Create {
        kind: Gvk,
        namespace: Option<String>,
        object: String,
    },
    Replace {
        kind: Gvk,
        namespace: Option<String>,
        name: String,
        object: String,
    },
    Patch {
        kind: Gvk,
        namespace: Option<String>,
        name: String,
        patch: ObjectPatch,
    },
    ReplaceStatus {
        kind: Gvk,
        namespace: Option<String>,
        name: String,
        object: String,
    },
    PatchStatus {
        kind: Gvk,
        namespace: Option<String>,
        name: String,
        patch: ObjectPatch,
    },
    Delete {
        kind: Gvk,
        namespace: Option<String>,
        name: String,
    },
    RecordEvent(Event),
}

impl KubeRequest {
    /// The Kubernetes verb this call needs permission for.
    pub fn verb(&self) -> &'static str {
        match self {
            KubeRequest::Get { .. } => "get",
            KubeRequest::List { .. } => "list",
            KubeRequest::Create { .. } | KubeRequest::RecordEvent(_) => "create",
            KubeRequest::Replace { .. } | KubeRequest::ReplaceStatus { .. } => "update",
            KubeRequest::Patch { .. } | KubeRequest::PatchStatus { .. } => "patch",
            KubeRequest::Delete { .. } => "delete",
        }
    }
}

/// What a successful call returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeResponse {
    Object(String),
    Objects(Vec<String>),
    Empty,
}

/// Serves a plugin's `kube` calls. Each call must finish by `deadline` (the
/// reconcile's context deadline) or return [`ApiError::Timeout`].
pub trait KubeApi: Send + Sync + 'static {
    fn call(
        &self,
        request: KubeRequest,
        deadline: Instant,
    ) -> BoxFuture<'_, Result<KubeResponse, ApiError>>;
}

/// A host with no API server: every call is `unavailable`. Used where a
/// plugin runs without a cluster (benchmarks, `inspect`, sandbox tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoApiServer;

impl KubeApi for NoApiServer {
    fn call(
        &self,
        request: KubeRequest,
        _deadline: Instant,
    ) -> BoxFuture<'_, Result<KubeResponse, ApiError>> {
        let verb = request.verb();
        Box::pin(async move {
            Err(ApiError::Unavailable(format!(
                "no API server is configured for this host ({verb} refused)"
            )))
        })
    }
}
