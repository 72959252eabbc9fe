//! The patch engine: every way a client can change an object without sending
//! all of it.
//!
//! | Content type                              | Entry point               |
//! |-------------------------------------------|---------------------------|
//! | `application/merge-patch+json`            | [`merge_patch`]           |
//! | `application/json-patch+json`             | [`json_patch`]            |
//! | `application/strategic-merge-patch+json`  | [`strategic_merge_patch`] |
//! | `application/apply-patch+yaml`            | [`server_side_apply`]     |
//!
//! Every other write (create, update and the three non-apply patch types)
//! ends with [`record_update`], which keeps `metadata.managedFields` in step
//! so that server-side appliers see the same ownership as on a real cluster.
//!
//! All functions are pure: they take the stored object and return the new
//! one, and leave persistence, preconditions, status rules and HTTP mapping to
//! the caller. Output is deterministic for equal input; `managedFields`
//! entries are kept in the order Kubernetes sorts them (all `Apply` entries
//! first, then by time, manager, apiVersion and subresource).

mod apply;
mod json;
mod managed_fields;
mod merge;
mod merge_keys;
mod strategic;

pub(crate) use apply::{ApplyRequest, record_update, server_side_apply};
pub use json::json_patch;
pub(crate) use json::json_patch_bounded;
pub use json::{MAX_COPY_BYTES, MAX_DEPTH, MAX_OPERATIONS};
pub use merge::merge_patch;
pub(crate) use strategic::strategic_merge_patch;

/// Why a patch could not be applied. Each variant maps to one HTTP status.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PatchError {
    /// The patch document is malformed or cannot apply to this object
    /// (400 Bad Request, or 422 Unprocessable Entity for JSON patch).
    #[error("{0}")]
    Invalid(String),
    /// A JSON patch `test` operation did not match (422).
    #[error("{0}")]
    TestFailed(String),
    /// Server-side apply would take fields owned by other managers (409).
    ///
    /// `message` is Kubernetes' text, e.g. `Apply failed with 1 conflict:
    /// conflict with "other" using apps/v1: .spec.replicas`. `conflicts` has
    /// one entry per conflicting (manager, field) pair, each the field path
    /// in Kubernetes' notation (`.spec.containers[name="app"].image`), which
    /// is what a `FieldManagerConflict` status cause carries in `field`.
    #[error("{message}")]
    Conflict {
        /// The whole human-readable message, naming managers and fields.
        message: String,
        /// The conflicting field paths, one per (manager, field) pair.
        conflicts: Vec<String>,
    },
    /// The patch type does not apply to this kind, e.g. a strategic merge
    /// patch of a custom resource (415).
    #[error("{0}")]
    Unsupported(String),
    /// The patch exceeds a limit on its own size, e.g. too many JSON patch
    /// operations (413).
    #[error("{0}")]
    TooLarge(String),
}
