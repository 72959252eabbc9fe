//! Object semantics between HTTP and the store: system metadata, generation,
//! status-subresource rules, no-op detection, finalizer rules, patches
//! (through [`crate::patch`]) and the CRD hooks. Deletion is in
//! [`super::delete`], the scale subresource in [`super::scale`]. Writes follow the
//! real server's GuaranteedUpdate: read, compute outside the store lock,
//! admit (mutating webhooks, the server's rules, validating webhooks),
//! commit at the read resourceVersion, retry (admitting again) if someone
//! else got there first.
//!
//! | File | Job |
//! |---|---|
//! | `context` | a request's write parameters, the subresource and patch kind |
//! | `admit` | admission of a request's write: its attributes, namespace labels, Service addresses |
//! | `access` | reads, the body's type, commits for a request, the CRD hook |
//! | `prepare` | the create and update rules, and what an update comes to |
//! | `rules`, `defaults` | finalizers, schemas, no-op and generation checks; built-in defaults |
//! | `rbac`, `grants` | RBAC objects' defaults and validation; what a write of one grants, checked for its author |
//! | `create`, `update`, `patch` | one verb each |
//! | `errors` | store and patch errors as the real server's statuses |

mod access;
mod admit;
mod context;
mod create;
mod defaults;
mod errors;
mod grants;
mod patch;
mod prepare;
mod rbac;
mod rules;
mod update;
mod warnings;

pub(crate) use context::{GrantCheck, MAX_RETRIES, PatchKind, QueryOptions, Subresource, WriteCtx};
pub(crate) use errors::{patch_error, smp_unsupported};
pub(crate) use rbac::{GROUP as RBAC_GROUP, aggregation_rule, list as rbac_list};
pub(crate) use rules::{
    CRD_CLEANUP_FINALIZER, NAMESPACE_FINALIZER, finalizers, held_by_spec_finalizers, is_namespace,
    uid_precondition, without_finalizer, without_spec_finalizer,
};
pub(crate) use warnings::Warnings;
