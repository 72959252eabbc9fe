//! The sandbox: plugins compiled once and run in wasm sandboxes, the host
//! API a guest calls (`hostapi`) and the bindings of the WIT world (`wit`).
//! sandbox imports meta, control and config.
//!
//! # The runtime
//! One wasmtime [`Engine`] for the host, plugins compiled once and
//! pre-linked, and a fresh sandboxed instance per reconcile.
//!
//! # Deadlines are the context timeout
//! One engine-wide ticker thread bumps the epoch every `epoch_tick`. Each
//! call's store checks, on every tick its guest runs through, whether the
//! call's deadline passed (→ a [`TrapKind::Deadline`] trap) or it was
//! cancelled more than `cancel_grace` ago (→ [`ReconcileError::Cancelled`]),
//! and otherwise yields to tokio. A runaway guest is therefore stopped within
//! one tick of its deadline, and a guest blocked in a host call is bounded by
//! the call's own deadline plus a backstop timeout.
//!
//! # Layout
//! `plugin` loads a component; `call` runs one call of it in an instance
//! from its `strategy`, in a store (`store`) held to its `limits`, with the
//! imports of `imports/` (one file per WIT interface, served by `hostapi`);
//! `outbound` checks and sends the guest's `wasi:http` requests under the
//! plugin's outbound grant; `admission` runs an admission review (the
//! `validate` and `mutate` exports) with a read-only host API and checks
//! the webhooks and verdicts a plugin returns; `failure` classifies how a call ended; `compiled` keeps compiled
//! components; `code` holds a plugin's compiled code, or drops it while the
//! plugin is idle (`idleUnload`).
//!
//! [`ReconcileError::Cancelled`]: crate::ReconcileError::Cancelled
//! [`TrapKind::Deadline`]: crate::TrapKind::Deadline

pub mod admission;
mod call;
mod code;
mod compiled;
mod failure;
mod function_cache;
mod guest;
pub mod hostapi;
mod imports;
mod limits;
mod metadata;
pub mod outbound;
mod output;
mod plugin;
mod share;
mod store;
mod strategy;
mod tape;
mod webhooks;
mod wit;

use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::Linker;
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig,
};

pub use compiled::{CacheHit, digest};
pub use failure::CallFailure;
pub use limits::{Ceiling, Limits, MAX_INSTANCES, MAX_MEMORIES, MAX_TABLES};
pub use metadata::{Permission, PluginMetadata, Watch, WatchMapping};
pub use plugin::{Invocation, LoadError, Plugin, PluginSpec, Through};
pub use share::GuestCpu;
pub use strategy::{AUTO_REUSE_PAGES, InstanceMode, ReuseLimits};
pub use tape::{ContextRead, ContextTape, MAX_CONTEXT_READS};

use crate::control::metrics::Metrics;
use store::StoreState;

/// Linear memory a pooled slot keeps resident between instances: more than
/// a small Rust guest's whole memory, so its pages are never refaulted.
const KEEP_RESIDENT: usize = 2 << 20;

/// Engine-wide settings. Changing them needs a new [`Runtime`] (and
/// recompiles every plugin).
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// How often the epoch advances: the precision of deadlines and cancellation.
    pub epoch_tick: Duration,
    /// How long a cancelled guest may keep running to notice the
    /// cancellation itself (`context.cancelled`) and return; past it the host
    /// interrupts the guest. Go's context is cooperative; this keeps a guest's
    /// own clean-up path reachable while bounding how long cancellation takes.
    pub cancel_grace: Duration,
    /// Compile fuel metering in, so plugins may have a deterministic CPU
    /// budget (`Limits::fuel`). Costs ~40% on call-heavy guests.
    pub fuel: bool,
    /// Instances that can be live at once across all plugins (the pooling
    /// allocator's slots). Size it to the sum of `maxConcurrentReconciles`
    /// plus headroom; when it is exhausted a reconcile fails and is retried.
    pub max_instances: u32,
    /// The largest linear memory any plugin may be granted (each memory's
    /// address-space reservation; plugins' own limits are enforced per store).
    pub max_memory: usize,
    /// Where precompiled components are kept across restarts (None: memory only).
    pub cache_dir: Option<PathBuf>,
    /// Pool slots (of each kind: memories, tables, stacks) kept warm while
    /// unused. A warm slot keeps up to its keep-resident bytes mapped, and a
    /// component with no warm slot of its own takes a never-used slot while
    /// there are fewer warm ones than this: so every hot swap (a new
    /// component) would leave one more warm slot behind, up to this bound.
    /// Size it to the instances that run at once; a slot's own component
    /// still finds it first.
    pub max_unused_warm_slots: u32,
    /// How guests share the CPU when several plugins have work (see
    /// [`GuestCpu`]).
    pub guest_cpu: GuestCpu,
    /// Bytes of compiled functions kept in memory for later compiles
    /// (0: none): a rebuilt or second plugin of an interpreted language
    /// compiles only the functions that changed (`function_cache`).
    pub function_cache_bytes: usize,
    /// Where compiled functions are kept across restarts, up to
    /// `function_cache_bytes` (None: `cache_dir`, if set). A later host
    /// compiling a component whose functions were compiled before (a
    /// rebuilt interpreted plugin) reads them instead.
    pub function_cache_dir: Option<PathBuf>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            epoch_tick: Duration::from_millis(1),
            cancel_grace: Duration::from_millis(100),
            fuel: false,
            max_instances: 128,
            max_memory: 4 << 30,
            cache_dir: None,
            max_unused_warm_slots: 16,
            guest_cpu: GuestCpu::default(),
            function_cache_bytes: 128 << 20,
            function_cache_dir: None,
        }
    }
}

impl RuntimeConfig {
    /// The values `max_instances` may take: each slot reserves address
    /// space for [`MAX_MEMORIES`] memories.
    pub const INSTANCES: RangeInclusive<u64> = 1..=10_000;
    /// The values `function_cache_bytes` may take.
    pub const FUNCTION_CACHE_BYTES: RangeInclusive<u64> = 0..=(16 << 30);
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

/// What a [`Runtime`] shares between its clones.
struct Inner {
    engine: Engine,
    linker: Linker<StoreState>,
    cache: compiled::ComponentCache,
    config: RuntimeConfig,
    metrics: Arc<Metrics>,
    share: Arc<share::CpuShare>,
}

impl Runtime {
    /// Builds the engine (component model, epoch interruption, optional fuel,
    /// pooling allocator), links WASI (no filesystem, network or environment),
    /// `wasi:http` (every request sent by the host under the plugin's
    /// outbound grant) and the `context`/`kube` imports, and starts the
    /// epoch ticker.
    pub fn new(config: RuntimeConfig, metrics: Arc<Metrics>) -> Result<Self, RuntimeError> {
        let mut pool = PoolingAllocationConfig::new();
        let instances = config.max_instances.max(1);
        // Without PAGEMAP_SCAN (Linux < 6.7) the resident part of a slot is
        // memset whole on every reuse, dearer than decommitting it all
        // (`wasmctrl-bench -- floor-settings`: 2 MiB resident 25 µs, none 15 µs).
        let pagemap = PoolingAllocationConfig::is_pagemap_scan_available();
        // Sized for every instance at its plugin's ceilings at once, so no
        // component can take pool slots other plugins need: a component
        // beyond a ceiling is refused by its store, not by the pool.
        pool.total_component_instances(instances)
            .total_core_instances(instances * MAX_INSTANCES as u32)
            .total_memories(instances * MAX_MEMORIES as u32)
            .total_tables(instances * MAX_TABLES as u32)
            .max_core_instances_per_component(MAX_INSTANCES as u32)
            .max_memories_per_module(MAX_MEMORIES as u32)
            .max_tables_per_module(MAX_TABLES as u32)
            .max_memories_per_component(MAX_MEMORIES as u32)
            .max_tables_per_component(MAX_TABLES as u32)
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
            .max_unused_warm_slots(config.max_unused_warm_slots)
            .pagemap_scan(if pagemap { Enabled::Yes } else { Enabled::No });

        let mut c = Config::new();
        c.wasm_component_model(true)
            .epoch_interruption(true)
            .consume_fuel(config.fuel)
            .cranelift_opt_level(OptLevel::Speed)
            .concurrency_support(false)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let functions = (config.function_cache_bytes > 0).then(|| {
            Arc::new(function_cache::FunctionCache::new(
                config.function_cache_bytes,
            ))
        });
        if let Some(functions) = &functions {
            c.enable_incremental_compilation(functions.clone())
                .map_err(RuntimeError::Engine)?;
        }
        let engine = Engine::new(&c).map_err(RuntimeError::Engine)?;
        let functions_dir = config
            .function_cache_dir
            .as_ref()
            .or(config.cache_dir.as_ref());
        if let (Some(functions), Some(dir)) = (&functions, functions_dir) {
            functions.keep_on_disk(dir, &compiled::engine_hash(&engine));
        }

        let mut linker = Linker::new(&engine);
        imports::add_to_linker(&mut linker).map_err(RuntimeError::Link)?;

        start_ticker(&engine, config.epoch_tick);
        let cache = compiled::ComponentCache::new(engine.clone(), config.cache_dir.clone());
        let share = Arc::new(share::CpuShare::new(config.guest_cpu));
        Ok(Self {
            inner: Arc::new(Inner {
                engine,
                linker,
                cache,
                config,
                metrics,
                share,
            }),
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// Sets the pool gauges (`wasmctrl_pool_unused_warm_slots`,
    /// `wasmctrl_pool_unused_resident_bytes`) from the pooling allocator.
    pub fn observe_pool(&self) {
        let Some(pool) = self.inner.engine.pooling_allocator_metrics() else {
            return;
        };
        let m = &self.inner.metrics;
        let set = |kind: &str, warm: u32, resident: usize| {
            let label = crate::control::metrics::PoolLabel { pool: kind.into() };
            m.pool_unused_warm
                .get_or_create(&label)
                .set(i64::from(warm));
            m.pool_unused_resident
                .get_or_create(&label)
                .set(i64::try_from(resident).unwrap_or(i64::MAX));
        };
        set(
            "memory",
            pool.unused_warm_memories(),
            pool.unused_memory_bytes_resident(),
        );
        set(
            "table",
            pool.unused_warm_tables(),
            pool.unused_table_bytes_resident(),
        );
        set(
            "stack",
            pool.unused_warm_stacks(),
            pool.unused_stack_bytes_resident().unwrap_or(0),
        );
    }

    pub(crate) fn share(&self) -> &Arc<share::CpuShare> {
        &self.inner.share
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    /// How many compiled components are held in memory (those of loaded
    /// plugin versions; others are dropped).
    pub fn resident_components(&self) -> usize {
        self.inner.cache.resident()
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
