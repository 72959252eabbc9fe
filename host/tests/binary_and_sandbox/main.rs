//! The `wasmctrl` binary and the sandbox, with real plugin components
//! built from `plugins/`: the binary's processes and subcommands as a user
//! runs them (`run`, `dev`, `apiserver`, `rbac`, `replay`, `push`), and the
//! runtime in this process (instance modes, traps and limits, the instance
//! pool, CPU sharing, resident memory, plugin sources). The host in a
//! cluster, driven against the embedded API server over HTTPS, is the
//! `cluster-tests` crate. One test binary for the crate.

mod apiserver_cli;
mod binary;
mod build_session;
mod controller;
mod cpu_share;
mod dev_cache;
mod dev_cli;
mod instances;
mod load;
mod new_cli;
mod outbound;
mod polyglot;
mod pool;
mod process;
mod rbac;
mod replay;
mod replay_hostile;
mod resident;
mod sandbox;
mod sources;
mod status_page;
mod workflow;

use std::sync::Arc;
use std::time::Duration;

use wasmctrl::control::metrics::Metrics;
use wasmctrl::sandbox::{Limits, Plugin, PluginSpec, Runtime, RuntimeConfig};

/// A runtime sized for tests (many run at once in this process).
pub fn runtime() -> Runtime {
    runtime_with(test_runtime_config())
}

/// The engine settings of [`runtime`], to start from.
pub fn test_runtime_config() -> RuntimeConfig {
    RuntimeConfig {
        max_instances: 16,
        ..RuntimeConfig::default()
    }
}

pub fn runtime_with(config: RuntimeConfig) -> Runtime {
    Runtime::new(config, Arc::new(Metrics::new())).expect("runtime starts")
}

/// A runtime whose compiled components persist in the target directory, so
/// tests that load the large interpreted guests compile each once per build,
/// not once per test.
pub fn runtime_with_disk_cache() -> Runtime {
    runtime_with(RuntimeConfig {
        cache_dir: Some(wasmctrl_testkit::kept::compiled_components_dir()),
        ..test_runtime_config()
    })
}

pub fn spec(name: &str) -> PluginSpec {
    PluginSpec::new(name)
}

pub async fn load(runtime: &Runtime, name: &str, path: &str, limits: Limits) -> Arc<Plugin> {
    let spec = PluginSpec {
        limits,
        ..spec(name)
    };
    runtime.load_file(path, spec).await.expect("plugin loads")
}

pub const TIMEOUT: Duration = Duration::from_secs(5);

/// A first-attempt reconcile of `default/<name>` with `timeout`.
pub fn request(name: &str, timeout: Duration) -> wasmctrl::ReconcileRequest {
    wasmctrl::ReconcileRequest {
        key: wasmctrl::ObjectKey::namespaced("default", name),
        attempt: 0,
        timeout,
        cancel: tokio_util::sync::CancellationToken::new(),
    }
}

/// The trap kind of a failed reconcile, if it trapped.
pub fn trap_kind(
    result: &Result<wasmctrl::Action, wasmctrl::ReconcileError>,
) -> Option<wasmctrl::TrapKind> {
    match result {
        Err(wasmctrl::ReconcileError::Trap { kind, .. }) => Some(*kind),
        _ => None,
    }
}
