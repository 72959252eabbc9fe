//! The wasm runtime: one wasmtime [`Engine`] for the host, plugins compiled
//! once and pre-linked, and a fresh sandboxed instance per reconcile.
//!
//! # Deadlines are the context timeout
//! One engine-wide ticker thread bumps the epoch every `epoch_tick`. Each
//! reconcile's store checks, on every tick its guest runs through, whether
//! the reconcile was cancelled (→ [`ReconcileError::Cancelled`]) or its
//! deadline passed (→ a [`TrapKind::Deadline`] trap), and otherwise yields to
//! tokio. A runaway guest is therefore stopped within one tick of its
//! deadline, and a guest blocked in a host call is bounded by the call's own
//! deadline plus a backstop timeout.
//!
//! [`ReconcileError::Cancelled`]: crate::ReconcileError::Cancelled

pub mod bindings;
mod cache;
mod instance;
mod output;
mod plugin;
mod trap;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig,
};

pub use cache::{CacheHit, digest};
pub use instance::Invocation;
pub use plugin::{Limits, LoadError, Plugin, PluginMetadata, PluginSpec};
pub use trap::TrapKind;

use crate::metrics::Metrics;
use instance::HostState;

/// Linear memory a pooled slot keeps resident between instances: more than
/// a small Rust guest's whole memory, so its pages are never refaulted.
const KEEP_RESIDENT: usize = 2 << 20;

/// Engine-wide settings. Changing them needs a new [`Runtime`] (and
/// recompiles every plugin).
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// How often the epoch advances: the precision of deadlines and cancellation.
    pub epoch_tick: Duration,
    /// Compile fuel metering in, so plugins may have a deterministic CPU
    /// budget (`Limits::fuel`). Costs ~40% on call-heavy guests.
    pub fuel: bool,
    /// Instances that can be live at once across all plugins (the pooling
    /// allocator's slots). Size it to the sum of `maxConcurrentReconciles`
    /// plus headroom; when it is exhausted a reconcile fails and is retried.
    pub max_instances: u32,
    /// The largest linear memory any plugin may be granted.
    pub max_memory: usize,
    /// Where precompiled components are kept across restarts (None: memory only).
    pub cache_dir: Option<PathBuf>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            epoch_tick: Duration::from_millis(1),
            fuel: false,
            max_instances: 128,
            max_memory: 1 << 30,
            cache_dir: None,
        }
    }
}

/// Why the runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot configure the wasm engine: {0:#}")]
    Engine(wasmtime::Error),
    #[error("cannot link the host imports: {0:#}")]
    Link(wasmtime::Error),
}

/// The host's wasm runtime. Cheap to clone; the epoch ticker stops when the
/// last clone is dropped.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    linker: Linker<HostState>,
    cache: cache::ComponentCache,
    config: RuntimeConfig,
    metrics: Arc<Metrics>,
}

impl Runtime {
    /// Builds the engine (component model, epoch interruption, optional fuel,
    /// pooling allocator), links WASI (no filesystem, network or environment)
    /// and the `context`/`kube` imports, and starts the epoch ticker.
    pub fn new(config: RuntimeConfig, metrics: Arc<Metrics>) -> Result<Self, RuntimeError> {
        let mut pool = PoolingAllocationConfig::new();
        let instances = config.max_instances.max(1);
        // Without PAGEMAP_SCAN (Linux < 6.7) the resident part of a slot is
        // memset whole on every reuse, dearer than decommitting it all
        // (`wasmctrl-bench -- floor-settings`: 2 MiB resident 25 µs, none 15 µs).
        let pagemap = PoolingAllocationConfig::is_pagemap_scan_available();
        pool.total_component_instances(instances)
            // Each reconciler instance uses ~3 core instances, 1 memory, 2 tables.
            .total_core_instances(instances * 4)
            .total_memories(instances * 2)
            .total_tables(instances * 4)
            .total_stacks(instances)
            .max_memory_size(config.max_memory)
            // A reused slot keeps this much resident and, with pagemap_scan
            // (Linux 6.7+), resets only the pages the last instance dirtied:
            // no decommit and refault per reconcile. Measured with
            // `wasmctrl-bench -- breakdown`: 38 µs → ~8 µs per fresh noop
            // instance (docs/BENCHMARKS.md).
            .linear_memory_keep_resident(if pagemap { KEEP_RESIDENT } else { 0 })
            .table_keep_resident(64 << 10)
            .async_stack_keep_resident(64 << 10)
            .pagemap_scan(if pagemap { Enabled::Yes } else { Enabled::No });

        let mut c = Config::new();
        c.wasm_component_model(true)
            .epoch_interruption(true)
            .consume_fuel(config.fuel)
            .cranelift_opt_level(OptLevel::Speed)
            .concurrency_support(false)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&c).map_err(RuntimeError::Engine)?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(RuntimeError::Link)?;
        bindings::Reconciler::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(RuntimeError::Link)?;

        start_ticker(&engine, config.epoch_tick);
        let cache = cache::ComponentCache::new(engine.clone(), config.cache_dir.clone());
        Ok(Self {
            inner: Arc::new(Inner {
                engine,
                linker,
                cache,
                config,
                metrics,
            }),
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }
}

/// Bumps the engine's epoch every `tick` until the engine is dropped.
fn start_ticker(engine: &Engine, tick: Duration) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("wasmctrl-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(tick);
            }
        })
        .expect("cannot spawn the epoch ticker thread");
}
