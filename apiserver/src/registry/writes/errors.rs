//! Store and patch errors as the real server's statuses.

use super::context::PatchKind;
use crate::error::{ApiError, Cause};
use crate::metrics::Limit;
use crate::patch::PatchError;
use crate::registry::Objects;
use crate::registry::resources::ResourceInfo;
use crate::registry::storage::StoreError;

pub(crate) fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(e.to_string())
}

/// Maps a patch engine error to the real server's status.
pub(crate) fn patch_error(
    info: &ResourceInfo,
    name: &str,
    e: PatchError,
    kind: PatchKind,
) -> ApiError {
    // A JSON patch that cannot apply is the object's fault (422), as on
    // a real server; other patch kinds that fail are a bad request.
    let invalid = |message: String| {
        ApiError::invalid(
            &info.group,
            &info.kind,
            name,
            vec![Cause {
                reason: "FieldValueInvalid".into(),
                message,
                field: String::new(),
            }],
        )
    };
    match e {
        PatchError::Invalid(m) if kind == PatchKind::Json => invalid(m),
        PatchError::Invalid(m) => ApiError::BadRequest(m),
        PatchError::TestFailed(m) => invalid(m),
        PatchError::Conflict { message, conflicts } => ApiError::Conflict {
            message,
            name: name.to_string(),
            group: info.group.clone(),
            kind: info.plural.clone(),
            causes: conflicts
                .into_iter()
                .map(|field| Cause {
                    reason: "FieldManagerConflict".into(),
                    message: format!("conflict with field {field}"),
                    field,
                })
                .collect(),
        },
        PatchError::Unsupported(m) => ApiError::UnsupportedMediaType(m),
        PatchError::TooLarge(m) => ApiError::RequestEntityTooLarge(m),
    }
}

/// The 415 the real server gives a strategic merge patch of a custom resource.
pub(crate) fn smp_unsupported() -> ApiError {
    ApiError::UnsupportedMediaType("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into())
}

impl Objects {
    pub(crate) fn store_error(&self, info: &ResourceInfo, name: &str, e: StoreError) -> ApiError {
        match e {
            StoreError::NamespaceMissing(ns) => ApiError::not_found("", "namespaces", &ns),
            StoreError::NamespaceTerminating(ns) => ApiError::Forbidden {
                message: format!(
                    "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    crate::error::qualified(&info.group, &info.plural)
                ),
                name: name.to_string(),
                group: info.group.clone(),
                kind: info.plural.clone(),
            },
            StoreError::Mismatch(Some(_)) => ApiError::stale(&info.group, &info.plural, name),
            StoreError::Mismatch(None) => ApiError::not_found(&info.group, &info.plural, name),
            StoreError::Expired { requested, oldest } => {
                ApiError::Expired(format!("too old resource version: {requested} ({oldest})"))
            }
            e @ StoreError::ShuttingDown => ApiError::Internal(e.to_string()),
            e @ StoreError::TooLarge { .. } => {
                self.metrics.exceeded(Limit::ObjectSize);
                ApiError::RequestEntityTooLarge(e.to_string())
            }
            e @ StoreError::TooDeep => {
                self.metrics.exceeded(Limit::ObjectDepth);
                ApiError::BadRequest(e.to_string())
            }
        }
    }
}
