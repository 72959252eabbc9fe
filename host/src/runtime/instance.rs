//! One reconcile in a fresh instance: store, limits, deadline, imports.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::ReconcilerPre;
use super::bindings::wasmctrl::reconciler::{context, kube, types};
use super::output::GuestOutput;
use super::plugin::{Limits, Plugin, PluginMetadata};
use super::{Runtime, TrapKind};
use crate::hostapi::{ApiError, KubeApi, KubeRequest, KubeResponse};
use crate::reconcile::{Action, ReconcileError, ReconcileRequest};

/// How long `metadata` may run at load time.
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);

/// Raised from the epoch callback when the host cancels a running guest.
#[derive(Debug, thiserror::Error)]
#[error("reconcile cancelled by the host")]
struct Cancelled;

/// The pieces every instance of a plugin is made from.
pub(crate) struct Sandbox {
    pub(crate) runtime: Runtime,
    pub(crate) pre: ReconcilerPre<HostState>,
    pub(crate) name: Arc<str>,
    pub(crate) settings: Arc<str>,
    pub(crate) limits: Limits,
    pub(crate) kube: Arc<dyn KubeApi>,
}

/// The context one call runs under.
pub(crate) struct CallContext {
    pub(crate) attempt: u32,
    pub(crate) deadline: Instant,
    pub(crate) cancel: CancellationToken,
}

/// The outcome of one reconcile with what it cost.
#[derive(Debug)]
pub struct Invocation {
    pub result: Result<Action, ReconcileError>,
    /// Store creation + instantiation.
    pub instantiate: Duration,
    /// Fuel burnt, when fuel metering is on.
    pub fuel_consumed: Option<u64>,
}

impl Sandbox {
    fn new_store(&self, call: CallContext) -> Store<HostState> {
        let stdout = GuestOutput::new(self.name.clone(), "stdout");
        let stderr = GuestOutput::new(self.name.clone(), "stderr");
        // No preopens, no environment, no arguments, no sockets.
        let wasi = WasiCtx::builder()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let state = HostState {
            wasi,
            table: ResourceTable::new(),
            limiter: GuestLimiter {
                memory_bytes: self.limits.memory_bytes,
                table_elements: self.limits.table_elements,
                memory_denied: false,
            },
            call,
            plugin: self.name.clone(),
            settings: self.settings.clone(),
            kube: self.kube.clone(),
            output: [stdout, stderr],
        };
        let mut store = Store::new(self.runtime.engine(), state);
        store.limiter(|s| &mut s.limiter);
        if self.runtime.config().fuel {
            store
                .set_fuel(self.limits.fuel.unwrap_or(u64::MAX))
                .expect("fuel is enabled on the engine");
        }
        // Check at every tick: cancelled → error, past the deadline → trap,
        // otherwise yield so a busy guest never starves the executor.
        store.set_epoch_deadline(1);
        // Reads the context from the store: no token clone per reconcile.
        store.epoch_deadline_callback(|store| {
            let call = &store.data().call;
            if call.cancel.is_cancelled() {
                return Err(wasmtime::Error::new(Cancelled));
            }
            if Instant::now() >= call.deadline {
                return Ok(UpdateDeadline::Interrupt);
            }
            Ok(UpdateDeadline::Yield(1))
        });
        store
    }

    /// Calls `metadata` in a fresh instance. Err((None, _)) means the pool
    /// had no free slot; Err((Some(kind), _)) that the guest failed.
    pub(crate) async fn call_metadata(&self) -> Result<PluginMetadata, (Option<TrapKind>, String)> {
        let mut store = self.new_store(CallContext {
            attempt: 0,
            deadline: Instant::now() + METADATA_TIMEOUT,
            cancel: CancellationToken::new(),
        });
        let result = async {
            let instance = self.pre.instantiate_async(&mut store).await?;
            instance.call_metadata(&mut store).await
        }
        .await;
        store.data().flush_output();
        result.map_err(|e| {
            if e.is::<wasmtime::PoolConcurrencyLimitError>() {
                (None, format!("{e:#}"))
            } else {
                let kind = TrapKind::classify(&e, store.data().limiter.memory_denied);
                (Some(kind), format!("{e:#}"))
            }
        })
    }
}

impl Plugin {
    /// Runs one reconcile in a fresh instance: new store with the plugin's
    /// limits, epoch deadline = the request's timeout, `reconcile(key)`, and
    /// teardown. Never panics and never leaves the guest running: every
    /// failure comes back as a [`ReconcileError`].
    pub async fn invoke(&self, request: ReconcileRequest) -> Invocation {
        let sandbox = &self.sandbox;
        let started = Instant::now();
        let deadline = started + request.timeout;
        let cancel = request.cancel.clone();
        let mut store = sandbox.new_store(CallContext {
            attempt: request.attempt,
            deadline,
            cancel: request.cancel,
        });
        let key = types::ObjectKey {
            namespace: request.key.namespace,
            name: request.key.name,
        };
        // A guest blocked in a host call is not interrupted by epochs; the
        // host call is bounded by the deadline, and this is the backstop.
        let backstop =
            request.timeout + 2 * sandbox.runtime.config().epoch_tick + Duration::from_millis(5);
        let mut instantiate = Duration::ZERO;
        let outcome = {
            let call = async {
                let instance = sandbox.pre.instantiate_async(&mut store).await?;
                instantiate = started.elapsed();
                instance.call_reconcile(&mut store, &key).await
            };
            match bounded(call, &cancel, started + backstop).await {
                Bounded::Done(r) => Ok(r),
                Bounded::Cancelled => Err(ReconcileError::Cancelled),
                Bounded::TimedOut => Err(ReconcileError::Trap {
                    kind: TrapKind::Deadline,
                    message: format!(
                        "guest still running {backstop:?} after it started (blocked in a host call)"
                    ),
                }),
            }
        };
        store.data().flush_output();
        let fuel_consumed = if sandbox.runtime.config().fuel {
            let budget = sandbox.limits.fuel.unwrap_or(u64::MAX);
            store.get_fuel().ok().map(|left| budget - left)
        } else {
            None
        };
        let result = match outcome {
            Err(e) => Err(e),
            Ok(Ok(Ok(action))) => Ok(Action {
                requeue: action.requeue,
                requeue_after: (action.requeue_after_ms > 0)
                    .then(|| Duration::from_millis(action.requeue_after_ms)),
            }),
            Ok(Ok(Err(types::ReconcileError::Transient(m)))) => Err(ReconcileError::Transient(m)),
            Ok(Ok(Err(types::ReconcileError::Permanent(m)))) => Err(ReconcileError::Permanent(m)),
            Ok(Err(e)) if e.is::<Cancelled>() => Err(ReconcileError::Cancelled),
            Ok(Err(e)) if e.is::<wasmtime::PoolConcurrencyLimitError>() => {
                Err(ReconcileError::Host(format!("{e:#}")))
            }
            Ok(Err(e)) => Err(ReconcileError::Trap {
                kind: TrapKind::classify(&e, store.data().limiter.memory_denied),
                message: format!("{e:#}"),
            }),
        };
        if instantiate.is_zero() {
            instantiate = started.elapsed();
        }
        Invocation {
            result,
            instantiate,
            fuel_consumed,
        }
    }
}

impl crate::reconcile::Reconcile for Plugin {
    async fn reconcile(&self, request: ReconcileRequest) -> Result<Action, ReconcileError> {
        tracing::Span::current().record("digest", self.digest());
        let metrics = self.sandbox.runtime.metrics().clone();
        let invocation = self.invoke(request).await;
        metrics.observe_invocation(self.name(), &invocation);
        invocation.result
    }
}

enum Bounded<T> {
    Done(T),
    Cancelled,
    TimedOut,
}

/// The backstop timer and the cancellation waiter of a guest call.
type Guards = (
    std::pin::Pin<Box<tokio::time::Sleep>>,
    std::pin::Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
);

/// Runs `call` until it finishes, `cancel` fires or `deadline` passes.
///
/// The timer and the cancellation waiter are only set up once `call` first
/// returns Pending (a guest yielding at an epoch tick or blocked in a host
/// call): a short reconcile finishes on its first poll and never pays for
/// registering them (~1 µs of an ~8 µs noop reconcile).
async fn bounded<F: Future>(
    call: F,
    cancel: &CancellationToken,
    deadline: Instant,
) -> Bounded<F::Output> {
    let mut call = std::pin::pin!(call);
    let mut guards: Option<Guards> = None;
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(r) = call.as_mut().poll(cx) {
            return std::task::Poll::Ready(Bounded::Done(r));
        }
        let (sleep, cancelled) = guards.get_or_insert_with(|| {
            (
                Box::pin(tokio::time::sleep_until(deadline.into())),
                Box::pin(cancel.clone().cancelled_owned()),
            )
        });
        if cancelled.as_mut().poll(cx).is_ready() {
            return std::task::Poll::Ready(Bounded::Cancelled);
        }
        if sleep.as_mut().poll(cx).is_ready() {
            return std::task::Poll::Ready(Bounded::TimedOut);
        }
        std::task::Poll::Pending
    })
    .await
}

/// Caps memory and tables, and remembers a refused memory grow: wasmtime has
/// no trap code for it, so this is how a memory-limit trap is recognised.
pub(crate) struct GuestLimiter {
    memory_bytes: usize,
    table_elements: usize,
    memory_denied: bool,
}

impl ResourceLimiter for GuestLimiter {
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

/// A store's data: WASI, limits, and the reconcile's context.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: GuestLimiter,
    call: CallContext,
    plugin: Arc<str>,
    settings: Arc<str>,
    kube: Arc<dyn KubeApi>,
    output: [GuestOutput; 2],
}

impl HostState {
    fn flush_output(&self) {
        for o in &self.output {
            o.flush_partial();
        }
    }

    /// The call, bounded by the reconcile's deadline. Built from clones so
    /// the future does not borrow the store's data across the await.
    fn kube_call(
        &self,
        request: KubeRequest,
    ) -> impl Future<Output = Result<KubeResponse, ApiError>> + Send + 'static {
        let kube = self.kube.clone();
        let deadline = self.call.deadline;
        async move {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let verb = request.verb();
            match tokio::time::timeout(remaining, kube.call(request, deadline)).await {
                Ok(r) => r,
                Err(_) => Err(ApiError::Timeout(format!(
                    "{verb} did not finish before the reconcile's deadline"
                ))),
            }
        }
    }

    fn kube_object(
        &self,
        request: KubeRequest,
    ) -> impl Future<Output = wasmtime::Result<Result<String, ApiError>>> + Send + 'static {
        let call = self.kube_call(request);
        async move {
            Ok(call.await.and_then(|r| match r {
                KubeResponse::Object(o) => Ok(o),
                other => Err(ApiError::Other(format!("unexpected response {other:?}"))),
            }))
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl types::Host for HostState {}

impl context::Host for HostState {
    async fn deadline_remaining_ms(&mut self) -> wasmtime::Result<u64> {
        let left = self.call.deadline.saturating_duration_since(Instant::now());
        Ok(u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
    }

    async fn cancelled(&mut self) -> wasmtime::Result<bool> {
        Ok(self.call.cancel.is_cancelled())
    }

    async fn attempt(&mut self) -> wasmtime::Result<u32> {
        Ok(self.call.attempt)
    }

    async fn settings(&mut self) -> wasmtime::Result<String> {
        Ok(self.settings.to_string())
    }

    async fn log(
        &mut self,
        level: types::LogLevel,
        message: String,
        fields: Vec<(String, String)>,
    ) -> wasmtime::Result<()> {
        let fields = if fields.is_empty() {
            String::new()
        } else {
            fields
                .iter()
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let plugin = &*self.plugin;
        match level {
            types::LogLevel::Trace => {
                tracing::trace!(target: "wasmctrl::guest", plugin, fields, "{message}")
            }
            types::LogLevel::Debug => {
                tracing::debug!(target: "wasmctrl::guest", plugin, fields, "{message}")
            }
            types::LogLevel::Info => {
                tracing::info!(target: "wasmctrl::guest", plugin, fields, "{message}")
            }
            types::LogLevel::Warn => {
                tracing::warn!(target: "wasmctrl::guest", plugin, fields, "{message}")
            }
            types::LogLevel::Error => {
                tracing::error!(target: "wasmctrl::guest", plugin, fields, "{message}")
            }
        }
        Ok(())
    }
}

type Gvk = types::Gvk;
type ApiResult<T> = wasmtime::Result<Result<T, ApiError>>;

impl kube::Host for HostState {
    async fn get(
        &mut self,
        kind: Gvk,
        namespace: Option<String>,
        name: String,
    ) -> ApiResult<String> {
        self.kube_object(KubeRequest::Get {
            kind,
            namespace,
            name,
        })
        .await
    }

    async fn list(
        &mut self,
        kind: Gvk,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> ApiResult<Vec<String>> {
        let request = KubeRequest::List {
            kind,
            namespace,
            label_selector,
        };
        Ok(self.kube_call(request).await.and_then(|r| match r {
            KubeResponse::Objects(o) => Ok(o),
            other => Err(ApiError::Other(format!("unexpected response {other:?}"))),
        }))
    }

    async fn create(
        &mut self,
        kind: Gvk,
        namespace: Option<String>,
        object: String,
    ) -> ApiResult<String> {
        self.kube_object(KubeRequest::Create {
            kind,
            namespace,
            object,
        })
        .await
    }

    async fn replace(
        &mut self,
        kind: Gvk,
        namespace: Option<String>,
        name: String,
        object: String,
    ) -> ApiResult<String> {
        self.kube_object(KubeRequest::Replace {
            kind,
            namespace,
            name,
            object,
        })
        .await
    }

    async fn patch(
        &mut self,
        kind: Gvk,
        namespace: Option<String>,
        name: String,
        patch: kube::ObjectPatch,
    ) -> ApiResult<String> {
        self.kube_object(KubeRequest::Patch {
            kind,
            namespace,
            name,
            patch,
        })
        .await
    }

    async fn replace_status(
        &mut self,
        kind: Gvk,
        namespace: Option<String>,
        name: String,
        object: String,
    ) -> ApiResult<String> {
        self.kube_object(KubeRequest::ReplaceStatus {
            kind,
            namespace,
            name,
            object,
        })
        .await
    }

    async fn patch_status(
        &mut self,
        kind: Gvk,
        namespace: Option<String>,
        name: String,
        patch: kube::ObjectPatch,
    ) -> ApiResult<String> {
        self.kube_object(KubeRequest::PatchStatus {
            kind,
            namespace,
            name,
            patch,
        })
        .await
    }

    async fn delete(
        &mut self,
        kind: Gvk,
        namespace: Option<String>,
        name: String,
    ) -> ApiResult<()> {
        let request = KubeRequest::Delete {
            kind,
            namespace,
            name,
        };
        Ok(self.kube_call(request).await.map(|_| ()))
    }

    async fn record_event(&mut self, event: kube::Event) -> ApiResult<()> {
        Ok(self
            .kube_call(KubeRequest::RecordEvent(event))
            .await
            .map(|_| ()))
    }
}
