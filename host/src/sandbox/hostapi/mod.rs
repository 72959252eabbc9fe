//! The `kube` imports a guest sees: one request type for every verb, served
//! by a [`KubeApi`] implementation chosen by the host.

mod answer;
mod body;
mod cluster;
mod grant;

use std::time::Instant;

use futures::future::BoxFuture;

pub use crate::meta::selector::LabelSelector;
pub use body::MAX_NESTING;
pub use cluster::{ApiLimits, ClusterApi, ClusterContext, MAX_PAYLOAD, map_error};
pub use grant::{Access, Grant, PermissionRule, RuleProblem, VERBS};

pub use crate::meta::kind::Gvk;

/// Why a `kube` call failed (the WIT `api-error`); the payload is a
/// human-readable message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("not found: {0}")]
    NotFound(String),
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// The plugin's grant (or the API server's authorization) refused it.
    #[error("forbidden: {0}")]
    Forbidden(String),
    #[error("invalid: {0}")]
    Invalid(String),
    /// The reconcile's deadline ran out during the call.
    #[error("timeout: {0}")]
    Timeout(String),
    /// No API server could be reached.
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("{0}")]
    Other(String),
}

impl ApiError {
    /// The `code` label of `wasmctrl_hostapi_calls_total`.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::NotFound(_) => "not-found",
            ApiError::Conflict(_) => "conflict",
            ApiError::AlreadyExists(_) => "already-exists",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::Invalid(_) => "invalid",
            ApiError::Timeout(_) => "timeout",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::Other(_) => "other",
        }
    }
}

/// A patch (the WIT `object-patch`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObjectPatch {
    /// JSON merge patch (RFC 7386).
    Merge(String),
    /// JSON patch (RFC 6902).
    Json(String),
    /// Server-side apply of the given object.
    Apply(ApplyPatch),
}

/// A server-side apply: the object, the field manager and whether to force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyPatch {
    pub body: String,
    pub field_manager: String,
    pub force: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// An event about an object (events.k8s.io/v1 semantics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub regarding_kind: Gvk,
    pub regarding_namespace: Option<String>,
    pub regarding_name: String,
    pub type_: EventType,
    pub reason: String,
    pub action: String,
    pub note: String,
}

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

    /// Refuses a call whose body is past [`MAX_PAYLOAD`] bytes: the one
    /// bound checked before anything reads the body.
    pub fn check_payload(&self) -> Result<(), ApiError> {
        self.payload().map_or(Ok(()), check_size)
    }

    /// Refuses a call whose body nests arrays and objects deeper than
    /// the API server parses ([`MAX_NESTING`]), before anything
    /// else reads it.
    pub fn check_nesting(&self) -> Result<(), ApiError> {
        self.payload()
            .map_or(Ok(()), body::check_nesting)
            .map_err(|e| ApiError::Invalid(e.to_string()))
    }

    /// The object or patch body the guest sends, if the call has one.
    pub fn payload(&self) -> Option<&str> {
        match self {
            KubeRequest::Create { object, .. }
            | KubeRequest::Replace { object, .. }
            | KubeRequest::ReplaceStatus { object, .. } => Some(object),
            KubeRequest::Patch { patch, .. } | KubeRequest::PatchStatus { patch, .. } => {
                Some(match patch {
                    ObjectPatch::Merge(body) | ObjectPatch::Json(body) => body,
                    ObjectPatch::Apply(apply) => &apply.body,
                })
            }
            KubeRequest::Get { .. }
            | KubeRequest::List { .. }
            | KubeRequest::Delete { .. }
            | KubeRequest::RecordEvent(_) => None,
        }
    }
}

/// Refuses a body past [`MAX_PAYLOAD`] bytes, naming its size.
pub(crate) fn check_size(payload: &str) -> Result<(), ApiError> {
    if payload.len() > MAX_PAYLOAD {
        return Err(ApiError::Invalid(format!(
            "object of {} bytes exceeds the host's {MAX_PAYLOAD}-byte payload limit",
            payload.len()
        )));
    }
    Ok(())
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

    /// A read (`get` or `list`) the host makes for the plugin, e.g. to see
    /// whether what a reconcile read has changed: served and checked like
    /// [`KubeApi::call`], but not counted as one of the plugin's calls.
    fn peek(
        &self,
        request: KubeRequest,
        deadline: Instant,
    ) -> BoxFuture<'_, Result<KubeResponse, ApiError>> {
        self.call(request, deadline)
    }

    /// Whether [`KubeApi::call`] would let `request` through to the API
    /// server: every check it makes before sending (the body's size, the
    /// strings' syntax, the kind's resolution, the grant), counted as the
    /// plugin's call when refused, and nothing sent. Shadow runs answer
    /// their writes in the host and must refuse exactly what a real call
    /// would. The default checks the body's size and nesting only.
    fn admit<'a>(&'a self, request: &'a KubeRequest) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move {
            request.check_payload()?;
            request.check_nesting()
        })
    }
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
