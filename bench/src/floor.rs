//! The floor: the `noop` component instantiated from a bare [`InstancePre`]
//! and called, with nothing of wasmctrl around it and the fastest engine
//! settings — the least a fresh-instance reconcile can cost on this machine.
//!
//! Engine ([`EngineKnobs::FLOOR`], chosen with `floor-settings`): pooling
//! allocator with linear memory (2 MiB), tables and fiber stacks kept
//! resident, `pagemap_scan` on (a reused memory slot is reset by restoring
//! only the pages the last instance dirtied; Linux ≥ 6.7), copy-on-write
//! memory images off (the noop's 2.8 KB of data segments are copied in),
//! `concurrency_support(false)`, no epoch interruption, no fuel.
//! Store: an empty WASI context (needed: a Rust `wasm32-wasip2` guest imports
//! `wasi:cli`/`wasi:io`) and trivial synchronous `context`/`kube` imports.
//! Both entry points are measured: [`Floor::call_sync`] (sync `instantiate` +
//! `call`, which must not run inside a tokio runtime: sync WASI calls
//! `Handle::block_on` there) and [`Floor::call_async`] (the async API on a
//! fiber, polled by a no-op waker, no executor).
//!
//! [`InstancePre`]: wasmtime::component::InstancePre

use std::future::Future;
use std::path::Path;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use anyhow::Context as _;
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig,
    ResourceLimiter, Store,
};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Synchronous bindings: sync imports, sync `call_reconcile`.
pub mod sync_world {
    wasmtime::component::bindgen!({ world: "reconciler", path: "../wit" });
}

/// The same world with async exports, reusing the sync world's interfaces
/// (and so its import implementations).
pub mod async_world {
    wasmtime::component::bindgen!({
        world: "reconciler",
        path: "../wit",
        exports: { default: async },
        with: { "wasmctrl:reconciler": crate::floor::sync_world::wasmctrl::reconciler },
    });
}

use sync_world::wasmctrl::reconciler::{context, kube, secrets, types};
pub use types::{Action, ObjectKey, ReconcileError};

/// Pooling-allocator memory kept resident between instances: more than the
/// noop guest's whole linear memory (17 pages, 1.06 MiB), so with
/// `pagemap_scan` no page is ever decommitted and faulted in again.
pub const KEEP_RESIDENT: usize = 2 << 20;

/// A store's data: a WASI context, and a memory limiter that only the
/// breakdown installs.
pub struct FloorState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub limiter: Limiter,
}

impl FloorState {
    pub fn new(wasi: WasiCtx) -> Self {
        Self {
            wasi,
            table: ResourceTable::new(),
            limiter: Limiter {
                memory_bytes: 64 << 20,
                table_elements: 20_000,
                memory_denied: false,
            },
        }
    }
}

/// What `wasmctrl`'s store limiter does: caps memory and tables, remembers a
/// refused grow.
pub struct Limiter {
    memory_bytes: usize,
    table_elements: usize,
    memory_denied: bool,
}

impl Limiter {
    /// Whether a memory grow was refused (how wasmctrl classifies a trap).
    pub fn memory_denied(&self) -> bool {
        self.memory_denied
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            self.memory_denied = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= self.table_elements)
    }
}

impl WasiView for FloorState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl types::Host for FloorState {}

/// The floor's guests reveal nothing: no secret is bound.
impl secrets::Host for FloorState {
    fn reveal(&mut self, name: String) -> Result<String, types::ApiError> {
        Err(types::ApiError::NotFound(format!(
            "no secret named {name:?}"
        )))
    }
}

impl context::Host for FloorState {
    fn deadline_remaining_ms(&mut self) -> u64 {
        u64::MAX
    }

    fn cancelled(&mut self) -> bool {
        false
    }

    fn attempt(&mut self) -> u32 {
        0
    }

    fn settings(&mut self) -> String {
        "{}".into()
    }

    fn log(&mut self, _level: types::LogLevel, _message: String, _fields: Vec<(String, String)>) {}

    fn log_enabled(&mut self, _level: types::LogLevel) -> bool {
        false
    }
}

fn unavailable<T>() -> Result<T, types::ApiError> {
    Err(types::ApiError::Unavailable(
        "no API server in the floor benchmark".into(),
    ))
}

impl kube::Host for FloorState {
    fn get(
        &mut self,
        _: types::Gvk,
        _: Option<String>,
        _: String,
    ) -> Result<String, types::ApiError> {
        unavailable()
    }

    fn list(
        &mut self,
        _: types::Gvk,
        _: Option<String>,
        _: Option<String>,
    ) -> Result<Vec<String>, types::ApiError> {
        unavailable()
    }

    fn create(
        &mut self,
        _: types::Gvk,
        _: Option<String>,
        _: String,
    ) -> Result<String, types::ApiError> {
        unavailable()
    }

    fn replace(
        &mut self,
        _: types::Gvk,
        _: Option<String>,
        _: String,
        _: String,
    ) -> Result<String, types::ApiError> {
        unavailable()
    }

    fn patch(
        &mut self,
        _: types::Gvk,
        _: Option<String>,
        _: String,
        _: kube::ObjectPatch,
    ) -> Result<String, types::ApiError> {
        unavailable()
    }

    fn replace_status(
        &mut self,
        _: types::Gvk,
        _: Option<String>,
        _: String,
        _: String,
    ) -> Result<String, types::ApiError> {
        unavailable()
    }

    fn patch_status(
        &mut self,
        _: types::Gvk,
        _: Option<String>,
        _: String,
        _: kube::ObjectPatch,
    ) -> Result<String, types::ApiError> {
        unavailable()
    }

    fn delete(
        &mut self,
        _: types::Gvk,
        _: Option<String>,
        _: String,
    ) -> Result<(), types::ApiError> {
        unavailable()
    }

    fn record_event(&mut self, _: kube::Event) -> Result<(), types::ApiError> {
        unavailable()
    }
}

/// The engine settings the benchmarks vary; [`EngineKnobs::FLOOR`] is the
/// fastest found, [`EngineKnobs::WASMCTRL`] what `wasmctrl::sandbox` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineKnobs {
    /// Epoch interruption compiled into the guest.
    pub epoch: bool,
    /// `linear_memory_keep_resident`.
    pub memory_keep_resident: usize,
    /// `table_keep_resident`.
    pub table_keep_resident: usize,
    /// `async_stack_keep_resident`.
    pub stack_keep_resident: usize,
    /// `pagemap_scan`: reset only the dirty pages of the resident part
    /// (Linux ≥ 6.7); off, the whole resident part is `memset`.
    pub pagemap_scan: bool,
    /// `memory_init_cow`: map the data segments copy-on-write from the
    /// compiled image instead of copying them in at instantiation.
    pub memory_init_cow: bool,
    /// Instance slots of the pool, and the per-memory cap.
    pub max_instances: u32,
    pub max_memory: usize,
}

impl EngineKnobs {
    pub const FLOOR: Self = Self {
        epoch: false,
        memory_keep_resident: KEEP_RESIDENT,
        table_keep_resident: 64 << 10,
        stack_keep_resident: 64 << 10,
        pagemap_scan: true,
        memory_init_cow: false,
        max_instances: 16,
        max_memory: 64 << 20,
    };

    /// The floor's settings on this host. Without `PAGEMAP_SCAN` (Linux
    /// < 6.7) keeping memory resident only adds a `memset` per instance
    /// (see `floor-settings`), so nothing is kept.
    pub fn floor() -> Self {
        if pagemap_scan_available() {
            Self::FLOOR
        } else {
            Self {
                pagemap_scan: false,
                memory_keep_resident: 0,
                ..Self::FLOOR
            }
        }
    }

    /// `wasmctrl::sandbox::Runtime::new` with `RuntimeConfig::default()`
    /// (host/src/sandbox/mod.rs): `pagemap_scan(Auto)`, on wherever the
    /// kernel has it (Linux ≥ 6.7, as here).
    pub const WASMCTRL: Self = Self {
        epoch: true,
        memory_keep_resident: KEEP_RESIDENT,
        table_keep_resident: 64 << 10,
        stack_keep_resident: 64 << 10,
        pagemap_scan: true,
        memory_init_cow: true,
        max_instances: 128,
        max_memory: 1 << 30,
    };
}

/// Whether the kernel has the `PAGEMAP_SCAN` ioctl (Linux ≥ 6.7).
pub fn pagemap_scan_available() -> bool {
    PoolingAllocationConfig::is_pagemap_scan_available()
}

/// An engine with a pooling allocator, no fuel and no component-model
/// concurrency, set up as `knobs` say (`pagemap_scan` only where the
/// kernel has it, as wasmctrl's `Enabled::Auto`).
pub fn engine(knobs: EngineKnobs) -> anyhow::Result<Engine> {
    let mut pool = PoolingAllocationConfig::new();
    let instances = knobs.max_instances;
    pool.total_component_instances(instances)
        .total_core_instances(instances * 4)
        .total_memories(instances * 2)
        .total_tables(instances * 4)
        .total_stacks(instances)
        .max_memory_size(knobs.max_memory)
        .linear_memory_keep_resident(knobs.memory_keep_resident)
        .table_keep_resident(knobs.table_keep_resident)
        .async_stack_keep_resident(knobs.stack_keep_resident)
        .pagemap_scan(if knobs.pagemap_scan {
            Enabled::Auto
        } else {
            Enabled::No
        });
    let mut c = Config::new();
    c.wasm_component_model(true)
        .epoch_interruption(knobs.epoch)
        .consume_fuel(false)
        .cranelift_opt_level(OptLevel::Speed)
        .concurrency_support(false)
        .memory_init_cow(knobs.memory_init_cow)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&c).map_err(anyhow)
}

/// The noop component compiled and pre-linked for both entry points.
pub struct Floor {
    engine: Engine,
    sync_pre: sync_world::ReconcilerPre<FloorState>,
    async_pre: async_world::ReconcilerPre<FloorState>,
}

impl Floor {
    /// The floor proper: the fastest engine settings on this host.
    pub fn new(component: &Path) -> anyhow::Result<Self> {
        Self::with_engine(component, EngineKnobs::floor())
    }

    pub fn with_engine(component: &Path, knobs: EngineKnobs) -> anyhow::Result<Self> {
        let engine = engine(knobs)?;
        let component = Component::from_file(&engine, component)
            .map_err(anyhow)
            .with_context(|| format!("compiling {}", component.display()))?;
        let mut linker = Linker::<FloorState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(anyhow)?;
        sync_world::Reconciler::add_to_linker::<FloorState, HasSelf<FloorState>>(
            &mut linker,
            |s| s,
        )
        .map_err(anyhow)?;
        let pre = linker.instantiate_pre(&component).map_err(anyhow)?;
        Ok(Self {
            sync_pre: sync_world::ReconcilerPre::new(pre.clone()).map_err(anyhow)?,
            async_pre: async_world::ReconcilerPre::new(pre).map_err(anyhow)?,
            engine,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// A store with an empty WASI context and nothing else.
    pub fn store(&self) -> Store<FloorState> {
        Store::new(&self.engine, FloorState::new(WasiCtx::builder().build()))
    }

    /// Fresh store + sync instantiate + `reconcile(key)` + drop. Must not
    /// be called inside a tokio runtime.
    pub fn call_sync(&self, key: &ObjectKey) -> anyhow::Result<Result<Action, ReconcileError>> {
        let mut store = self.store();
        let instance = self.sync_pre.instantiate(&mut store).map_err(anyhow)?;
        instance.call_reconcile(&mut store, key).map_err(anyhow)
    }

    /// The same through the async API (a fiber per call), polled in place.
    pub fn call_async(&self, key: &ObjectKey) -> anyhow::Result<Result<Action, ReconcileError>> {
        block_on(async {
            let mut store = self.store();
            self.instantiate_and_call(&mut store, key).await
        })
    }

    /// Async instantiate + `reconcile(key)` in the given store.
    pub async fn instantiate_and_call(
        &self,
        store: &mut Store<FloorState>,
        key: &ObjectKey,
    ) -> anyhow::Result<Result<Action, ReconcileError>> {
        let instance = self
            .async_pre
            .instantiate_async(&mut *store)
            .await
            .map_err(anyhow)?;
        instance
            .call_reconcile(&mut *store, key)
            .await
            .map_err(anyhow)
    }
}

/// wasmtime 48 has its own error type; `From` into anyhow needs a wasmtime
/// feature the workspace does not enable.
pub fn anyhow(e: wasmtime::Error) -> anyhow::Error {
    anyhow::Error::from_boxed(e.into_boxed_dyn_error())
}

/// Polls a future to completion on this thread without an executor. Nothing
/// the floor runs ever waits on I/O, so the first poll normally finishes it.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::yield_now();
    }
}
