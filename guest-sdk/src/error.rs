use std::fmt;

use crate::bindings::wasmctrl::reconciler::types as wit;

/// Why a reconcile failed.
///
/// A [`Error::Transient`] error is retried with per-key exponential backoff; a
/// [`Error::Permanent`] one is not retried and is recorded as a terminal error
/// (a Kubernetes Event and a metric) until the object changes again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    Transient(String),
    Permanent(String),
}

impl Error {
    /// A failure worth retrying (a conflict, an unavailable API server, …).
    pub fn transient(message: impl Into<String>) -> Self {
        Self::Transient(message.into())
    }

    /// A failure retrying cannot fix (an invalid spec, …).
    pub fn permanent(message: impl Into<String>) -> Self {
        Self::Permanent(message.into())
    }

    pub fn message(&self) -> &str {
        match self {
            Self::Transient(m) | Self::Permanent(m) => m,
        }
    }

    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::Permanent(_))
    }

    pub(crate) fn into_wit(self) -> wit::ReconcileError {
        match self {
            Self::Transient(m) => wit::ReconcileError::Transient(m),
            Self::Permanent(m) => wit::ReconcileError::Permanent(m),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Transient(m) => write!(f, "transient: {m}"),
            Self::Permanent(m) => write!(f, "permanent: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// A failed call to the Kubernetes API through the host.
pub type ApiError = wit::ApiError;

impl From<ApiError> for Error {
    /// API failures are transient by default: the next attempt re-reads the
    /// world. `invalid` is permanent, since retrying the same write cannot help.
    fn from(e: ApiError) -> Self {
        match e {
            ApiError::Invalid(m) => Error::Permanent(format!("invalid: {m}")),
            ApiError::Forbidden(m) => Error::Permanent(format!("forbidden: {m}")),
            other => Error::Transient(other.to_string()),
        }
    }
}
