//! Why a `kube` call failed: the WIT `api-error` on the host's side.

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
