//! wasmctrl: a Kubernetes controller runtime whose reconcilers are sandboxed
//! WebAssembly components.
//!
//! The host owns the machinery of a controller — workqueue, rate limiters,
//! controller loop, deadlines — and calls a plugin only for `reconcile(key)`.

pub mod admin;
pub mod apply;
pub mod build;
pub mod cache;
pub mod client;
pub mod config;
pub mod controller;
pub mod discovery;
#[cfg(test)]
mod fuzz;
pub mod hostapi;
pub mod kind;
pub mod leader;
pub mod malloc;
pub mod manager;
pub mod metrics;
pub mod normalized;
pub mod rbac;
pub mod reconcile;
#[cfg(any(test, feature = "test-util"))]
pub mod residency;
pub mod runtime;
pub mod selector;
pub mod shard;
pub mod source;
pub mod syntax;
#[cfg(any(test, feature = "test-util"))]
pub mod test_util;
pub mod transcript;
mod wit;
pub mod workqueue;

pub use kind::Gvk;
pub use reconcile::{Action, ObjectKey, Reconcile, ReconcileError, ReconcileRequest, TrapKind};
