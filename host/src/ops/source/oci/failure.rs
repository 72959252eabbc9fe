//! Why talking to a registry failed: unreachable (the disk cache may stand
//! in) or refused.

use crate::ops::source::SourceError;

/// Why a fetch failed: the registry could not be reached (the cache may
/// stand in) or it answered something we refuse.
pub(super) enum Failure {
    Unreachable(String),
    Refused(Box<SourceError>),
    /// The registry answered with the manifest named here, and it is
    /// refused for what it is (not a wasm artifact, too large, corrupt).
    RefusedManifest(Box<SourceError>, String),
}

impl Failure {
    pub(super) fn refused(e: SourceError) -> Self {
        Failure::Refused(Box::new(e))
    }
}

impl From<SourceError> for Failure {
    fn from(e: SourceError) -> Self {
        Failure::refused(e)
    }
}

/// A failure where no cache stands in: an error either way.
pub(super) fn reached(origin: &str, f: Failure) -> SourceError {
    match f {
        Failure::Refused(e) | Failure::RefusedManifest(e, _) => *e,
        Failure::Unreachable(message) => SourceError::Download {
            origin: origin.to_string(),
            message: format!("cannot reach the registry: {message}"),
        },
    }
}

pub(super) fn describe(f: Failure) -> String {
    match f {
        Failure::Unreachable(m) => m,
        Failure::Refused(e) | Failure::RefusedManifest(e, _) => e.to_string(),
    }
}
