//! wasmctrl: a Kubernetes controller runtime whose reconcilers are sandboxed
//! WebAssembly components.
//!
//! The host owns the machinery of a controller — workqueue, rate limiters,
//! controller loop, deadlines — and calls a plugin only for `reconcile(key)`.
//!
//! Its modules are layers, each importing only the ones listed before it:
//! - `meta`: the Kubernetes vocabulary (kinds, names, selectors), internal;
//! - [`control`]: the controller machinery (workqueue, controller, informer
//!   cache, metrics, leader election, sharding);
//! - [`sandbox`]: plugins compiled and run in wasm sandboxes, and the host
//!   API they call;
//! - [`config`]: the host config file, mapped onto the options of the
//!   layers before it;
//! - [`ops`]: running plugins in a process (manager, sources, admin server,
//!   RBAC, transcripts);
//! - [`tools`]: the command-line tools.
//!
//! The public API is what embeds the host or measures it: the reconcile
//! contract re-exported here, the controller machinery of [`control`]
//! (workqueue, controller, informer, metrics, leader election, sharding),
//! loading and calling plugins ([`sandbox`]), the config file ([`config`]),
//! the manager, sources, RBAC and transcripts ([`ops`]), and the CLI and
//! plugin builds ([`tools`]). Everything else is `pub(crate)`.

pub mod config;
pub mod control;
#[cfg(test)]
mod fuzz;
pub(crate) mod meta;
pub mod ops;
pub mod sandbox;
pub mod tools;

pub use control::reconcile::{
    Action, ObjectKey, Reconcile, ReconcileError, ReconcileRequest, TrapKind,
};
pub use meta::kind::Gvk;
