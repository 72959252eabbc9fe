//! wasmctrl: a Kubernetes controller runtime whose reconcilers are sandboxed
//! WebAssembly components.
//!
//! The host owns the machinery of a controller — workqueue, rate limiters,
//! controller loop, deadlines — and calls a plugin only for `reconcile(key)`.
//!
//! Its modules are layers, each importing only the ones listed before it:
//! - [`meta`]: the Kubernetes vocabulary (kinds, names, selectors);
//! - [`control`]: the controller machinery (workqueue, controller, informer
//!   cache, metrics, leader election, sharding);
//! - [`sandbox`]: plugins compiled and run in wasm sandboxes, and the host
//!   API they call;
//! - [`config`]: the host config file, mapped onto the options of the
//!   layers before it;
//! - [`ops`]: running plugins in a process (manager, sources, admin server,
//!   RBAC, transcripts);
//! - [`tools`]: the command-line tools.

pub mod config;
pub mod control;
#[cfg(test)]
mod fuzz;
pub mod meta;
pub mod ops;
pub mod sandbox;
pub mod tools;

pub use control::reconcile::{
    Action, ObjectKey, Reconcile, ReconcileError, ReconcileRequest, TrapKind,
};
pub use meta::kind::Gvk;
