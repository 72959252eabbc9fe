//! The test kit of wasmctrl: what every test suite of the workspace shares,
//! so that each helper exists once and the suites read as specifications.
//!
//! - [`eventually`]: bounded polling, the only way a test waits for
//!   convergence;
//! - [`client`]: a kube client for a kubeconfig (a file or its text);
//! - [`admin`]: the host's admin server over plain HTTP, and its metrics;
//! - [`process`]: a binary run as a child process, its output kept, killed
//!   when dropped;
//! - [`dns_provider`]: a fake HTTP DNS provider on a loopback port, for
//!   operators of records outside the cluster;
//! - [`kept`]: directories kept across runs in the target directory (the
//!   compiled-component cache the suites share);
//! - [`kubectl`]: kubectl run against a kubeconfig;
//! - [`registry`]: a real OCI registry on a loopback port;
//! - [`residency`]: a directory on a real disk, and what of its mapped files
//!   is resident;
//! - [`structure`]: the checks of the source tree's structure (no import
//!   cycle among sibling modules, no overlong source file);
//! - `host` (feature `host`): helpers built on the wasmctrl library — a
//!   manager started in-process, registry options, pushing a component.
//!
//! # Which part a suite may use
//!
//! Everything outside `host` depends on no crate of the workspace, so any
//! suite may use it, the host's own unit tests included. `host` is built
//! against the wasmctrl library as other crates see it. The host's unit
//! tests are a separate `cfg(test)` build of that crate, whose types are
//! not the library's: a unit test handing a `crate::config::HostConfig`
//! to `host::host_config`'s caller would meet two distinct `HostConfig`s.
//! So the host's unit tests use only the parts outside `host`, and the
//! integration suites (`host/tests/`, `cluster-tests/`) use all of it.
//! The API server's suite leaves the feature off and builds without the
//! host.

pub mod admin;
pub mod client;
pub mod dns_provider;
#[cfg(feature = "host")]
pub mod host;
pub mod kept;
pub mod kubectl;
pub mod process;
pub mod registry;
pub mod residency;
pub mod structure;
mod wait;

pub use wait::{Outcome, eventually};
