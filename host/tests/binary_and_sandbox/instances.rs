//! Instance modes and the sandbox for every guest language: the same test
//! reconciler in Rust, Python and TypeScript (`misbehave`, `misbehave-py`,
//! `misbehave-ts`, which count their calls in a module global).
//!
//! - `reuse` keeps module globals across calls (documented for authors), but
//!   the SDK's per-reconcile context is never stale;
//! - an instance that trapped, or ran into its deadline, is never reused;
//! - an interpreted guest in an infinite loop stops at its deadline, and one
//!   that exhausts its memory fails only that reconcile.
//!
//! (That a hot swap empties the pool is tested in a cluster:
//! `cluster-tests/cluster/hotswap.rs::a_swap_empties_the_pool_of_warm_instances`.)

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use wasmctrl::sandbox::{InstanceMode, Limits, Plugin, PluginSpec, ReuseLimits, Runtime};
use wasmctrl::{Action, ObjectKey, ReconcileError, ReconcileRequest, TrapKind};
use wasmctrl_plugin_artifacts as artifacts;

use crate::{TIMEOUT, runtime_with_disk_cache as runtime, trap_kind};

const GUESTS: &[(&str, &str)] = &[
    ("misbehave", artifacts::MISBEHAVE),
    ("misbehave-py", artifacts::MISBEHAVE_PY),
    ("misbehave-ts", artifacts::MISBEHAVE_TS),
];

fn request(name: &str, attempt: u32, timeout: Duration) -> ReconcileRequest {
    ReconcileRequest {
        key: ObjectKey::namespaced("default", name),
        attempt,
        timeout,
        cancel: CancellationToken::new(),
    }
}

async fn call(plugin: &Plugin, name: &str) -> Result<Action, ReconcileError> {
    plugin.invoke(request(name, 0, TIMEOUT)).await.result
}

async fn load(
    rt: &Runtime,
    name: &str,
    path: &str,
    mode: InstanceMode,
    limits: Limits,
) -> Arc<Plugin> {
    let spec = PluginSpec {
        instance_mode: mode,
        reuse: ReuseLimits {
            max_calls: 1000,
            ..ReuseLimits::default()
        },
        limits,
        ..PluginSpec::new(name)
    };
    rt.load_file(path, spec)
        .await
        .unwrap_or_else(|e| panic!("{name} loads: {e}"))
}

fn counted(n: u32) -> Result<Action, ReconcileError> {
    Err(ReconcileError::Transient(format!("calls={n}")))
}

#[tokio::test]
async fn reuse_keeps_module_state_but_never_a_stale_context() {
    let rt = runtime();
    for (name, path) in GUESTS {
        let plugin = load(&rt, name, path, InstanceMode::Reuse, Limits::default()).await;
        assert!(plugin.reuses_instances(), "{name}");
        // One warm instance serves the calls in turn: its global counts on.
        assert_eq!(call(&plugin, "count").await, counted(1), "{name}");
        assert_eq!(call(&plugin, "count").await, counted(2), "{name}");
        assert_eq!(plugin.idle_instances(), 1, "{name}");
        // The context is the call's, not the instance's: attempt 2 passes,
        // and the next call on the same instance sees attempt 0 again.
        let passed = plugin.invoke(request("attempt-2", 2, TIMEOUT)).await.result;
        assert_eq!(passed, Ok(Action::done()), "{name}");
        let again = plugin.invoke(request("attempt-2", 0, TIMEOUT)).await.result;
        assert!(
            matches!(&again, Err(ReconcileError::Transient(m)) if m.contains("attempt 0")),
            "{name}: {again:?}"
        );
        assert_eq!(call(&plugin, "count").await, counted(5), "{name}");

        // Fresh instances start over every time.
        let fresh = load(&rt, name, path, InstanceMode::Fresh, Limits::default()).await;
        assert_eq!(call(&fresh, "count").await, counted(1), "{name}");
        assert_eq!(call(&fresh, "count").await, counted(1), "{name}");
        assert_eq!(fresh.idle_instances(), 0, "{name}");
    }
}

#[tokio::test]
async fn an_instance_that_ran_into_its_deadline_is_never_reused() {
    let rt = runtime();
    for (name, path) in GUESTS {
        let plugin = load(&rt, name, path, InstanceMode::Reuse, Limits::default()).await;
        assert_eq!(call(&plugin, "count").await, counted(1), "{name}");
        assert_eq!(call(&plugin, "count").await, counted(2), "{name}");
        // `loop` takes the warm instance and never returns.
        let looped = plugin
            .invoke(request("loop", 0, Duration::from_millis(300)))
            .await
            .result;
        assert_eq!(
            trap_kind(&looped),
            Some(TrapKind::Deadline),
            "{name}: {looped:?}"
        );
        assert_eq!(
            plugin.idle_instances(),
            0,
            "{name}: the trapped instance was kept"
        );
        // The next call gets a new instance: its counter starts over.
        assert_eq!(call(&plugin, "count").await, counted(1), "{name}");
    }
}

#[tokio::test]
async fn an_interpreted_guest_in_an_infinite_loop_stops_at_its_deadline() {
    let rt = runtime();
    for (name, path) in &GUESTS[1..] {
        let plugin = load(&rt, name, path, InstanceMode::Fresh, Limits::default()).await;
        let timeout = Duration::from_millis(500);
        let started = std::time::Instant::now();
        let looped = plugin.invoke(request("loop", 0, timeout)).await.result;
        assert_eq!(
            trap_kind(&looped),
            Some(TrapKind::Deadline),
            "{name}: {looped:?}"
        );
        // The epoch tick is 1 ms; the bound is generous for a loaded machine.
        assert!(
            started.elapsed() < timeout + Duration::from_secs(5),
            "{name}"
        );
        assert_eq!(call(&plugin, "fine").await, Ok(Action::done()), "{name}");
    }
}

#[tokio::test]
async fn an_interpreted_guest_exhausting_its_memory_fails_only_that_reconcile() {
    let rt = runtime();
    for (name, path) in &GUESTS[1..] {
        let limits = Limits {
            memory_bytes: 48 << 20,
            ..Limits::default()
        };
        let plugin = load(&rt, name, path, InstanceMode::Reuse, limits).await;
        assert_eq!(call(&plugin, "count").await, counted(1), "{name}");
        let bomb = call(&plugin, "bomb").await;
        assert!(bomb.is_err(), "{name}: {bomb:?}");
        if trap_kind(&bomb).is_some() {
            // A trapped instance is not kept: a new one counts from 1.
            assert_eq!(call(&plugin, "count").await, counted(1), "{name}");
        } else {
            // The interpreter turned the refused grow into its own
            // out-of-memory error, returned as this reconcile's error.
            assert!(
                matches!(&bomb, Err(ReconcileError::Transient(m)) if m.to_lowercase().contains("memory")),
                "{name}: {bomb:?}"
            );
        }
        assert_eq!(call(&plugin, "fine").await, Ok(Action::done()), "{name}");
    }
}
