//! End-to-end tests of the embedded API server over real HTTPS, driven by the
//! clients production uses: kube-rs, kubectl and the Python client.

mod bad_input;
mod common;
mod kube_rs;
mod kubectl;
mod protocol;
mod python;
