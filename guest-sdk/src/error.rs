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

/// A failed call to the Kubernetes API through the host. Each variant carries
/// a human-readable message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// The object (or its namespace) does not exist (HTTP 404).
    NotFound(String),
    /// A write lost a race: stale `resourceVersion`, or a server-side apply
    /// field conflict without `force` (HTTP 409).
    Conflict(String),
    /// `create` of a name that is taken (HTTP 409).
    AlreadyExists(String),
    /// The plugin's permission grant (or the API server) does not allow the call.
    Forbidden(String),
    /// The API server rejected the object or patch (HTTP 422/400), including a
    /// failed JSON-patch `test` operation.
    Invalid(String),
    /// The reconcile's deadline ran out during the call.
    Timeout(String),
    /// The host cannot reach an API server.
    Unavailable(String),
    /// Anything else the host or API server reported.
    Other(String),
    /// The JSON crossing the boundary does not match the Rust type: the
    /// object returned does not deserialize as the typed resource, or a body
    /// could not be serialized. Raised by the SDK, not by the host.
    Serialization(String),
}

impl ApiError {
    pub fn message(&self) -> &str {
        match self {
            Self::NotFound(m)
            | Self::Conflict(m)
            | Self::AlreadyExists(m)
            | Self::Forbidden(m)
            | Self::Invalid(m)
            | Self::Timeout(m)
            | Self::Unavailable(m)
            | Self::Other(m)
            | Self::Serialization(m) => m,
        }
    }

    /// The short name of the variant, as the host's metrics spell it.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound(_) => "not-found",
            Self::Conflict(_) => "conflict",
            Self::AlreadyExists(_) => "already-exists",
            Self::Forbidden(_) => "forbidden",
            Self::Invalid(_) => "invalid",
            Self::Timeout(_) => "timeout",
            Self::Unavailable(_) => "unavailable",
            Self::Other(_) => "other",
            Self::Serialization(_) => "serialization",
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound(_))
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict(_))
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code(), self.message())
    }
}

impl std::error::Error for ApiError {}

impl From<wit::ApiError> for ApiError {
    fn from(e: wit::ApiError) -> Self {
        use wit::ApiError as W;
        match e {
            W::NotFound(m) => Self::NotFound(m),
            W::Conflict(m) => Self::Conflict(m),
            W::AlreadyExists(m) => Self::AlreadyExists(m),
            W::Forbidden(m) => Self::Forbidden(m),
            W::Invalid(m) => Self::Invalid(m),
            W::Timeout(m) => Self::Timeout(m),
            W::Unavailable(m) => Self::Unavailable(m),
            W::Other(m) => Self::Other(m),
        }
    }
}

impl From<ApiError> for Error {
    /// API failures are transient by default: the next attempt re-reads the
    /// world. `invalid`, `forbidden` and `serialization` are permanent, since
    /// retrying the same call cannot help (the object changing, or a new
    /// grant or plugin version, re-enqueues the key anyway).
    fn from(e: ApiError) -> Self {
        match e {
            ApiError::Invalid(_) | ApiError::Forbidden(_) | ApiError::Serialization(_) => {
                Error::Permanent(e.to_string())
            }
            other => Error::Transient(other.to_string()),
        }
    }
}

impl From<wit::ApiError> for Error {
    fn from(e: wit::ApiError) -> Self {
        ApiError::from(e).into()
    }
}
