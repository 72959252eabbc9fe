//! The embedded API server over real HTTPS, driven by the clients
//! production uses: kube-rs, kubectl and the Python client. Modules
//! that need the `testing` feature (fault injection, the write audit) run
//! with `--features testing`.

mod bad_input;
mod collection;
mod common;
#[cfg(feature = "testing")]
mod faults;
mod fuzz;
mod kube_rs;
mod kubectl;
mod limits;
mod names;
mod namespaces;
#[cfg(feature = "testing")]
mod persistence;
mod protocol;
mod python;
mod rbac;
mod timeouts;
mod webhooks;
