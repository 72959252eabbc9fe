//! wasmctrl: a Kubernetes controller runtime whose reconcilers are sandboxed
//! WebAssembly components.
//!
//! The host owns the machinery of a controller — workqueue, rate limiters,
//! controller loop, deadlines — and calls a plugin only for `reconcile(key)`.

pub mod config;
pub mod controller;
pub mod hostapi;
pub mod metrics;
pub mod ratelimit;
pub mod reconcile;
pub mod runtime;
pub mod workqueue;

pub use reconcile::{Action, ObjectKey, Reconcile, ReconcileError, ReconcileRequest};
