//! Loading a plugin: read, validate against the world, compile (through the
//! cache), pre-link, and ask it for its metadata.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Runtime;
use super::call::{self, Export, Returned, Sandbox};
use super::code::{Code, Resident};
use super::compiled::{self, CacheHit};
use super::failure::CallFailure;
use super::guest::GuestPre;
use super::limits::Limits;
use super::metadata::PluginMetadata;
use super::outbound::OutboundGrant;
use super::store::Spares;
use super::strategy::{AUTO_REUSE_PAGES, InstanceMode, InstanceStrategy, ReuseLimits};
use super::tape::ContextTape;
use crate::control::metrics::{CallKind, CallUsage};
use crate::control::reconcile::{Action, ReconcileError, ReconcileRequest, TrapKind};
use crate::sandbox::hostapi::KubeApi;
use crate::sandbox::wit::wasmctrl::reconciler::types;

/// How long `metadata` may run at load time.
const METADATA_TIMEOUT: Duration = Duration::from_secs(5);

/// The exports every plugin must have (the `reconciler` world).
const REQUIRED_EXPORTS: [&str; 2] = ["metadata", "reconcile"];

/// How to run a component.
#[derive(Clone)]
pub struct PluginSpec {
    /// The name the host knows the plugin by (the config's `name`).
    pub name: String,
    pub limits: Limits,
    /// Fresh instances, warm ones, or chosen by the component's size.
    pub instance_mode: InstanceMode,
    /// When a warm instance is recycled (`reuse` and `auto`).
    pub reuse: ReuseLimits,
    /// The plugin's settings, handed to the guest as JSON.
    pub settings: serde_json::Value,
    /// Serves the plugin's `kube` calls.
    pub kube: Arc<dyn KubeApi>,
    /// What the plugin's outbound HTTP requests may reach (default: nothing).
    pub outbound: Arc<OutboundGrant>,
}

impl PluginSpec {
    /// Default limits, fresh instances, `{}` settings and no API server:
    /// every `kube` call is `unavailable` (inspect, benchmarks, tests).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            limits: Limits::default(),
            instance_mode: InstanceMode::Fresh,
            reuse: ReuseLimits::default(),
            settings: serde_json::json!({}),
            kube: Arc::new(crate::sandbox::hostapi::NoApiServer),
            outbound: Arc::default(),
        }
    }
}

/// Why a plugin could not be loaded. Every variant names where it came from.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("plugin {origin}: cannot read the file: {source}")]
    Read {
        origin: String,
        source: std::io::Error,
    },
    #[error("plugin {origin}: not a WebAssembly file (no `\\0asm` header)")]
    NotWasm { origin: String },
    #[error(
        "plugin {origin}: a core WebAssembly module, not a component; build it with `cargo build --release --target wasm32-wasip2` against the wasmctrl:reconciler world"
    )]
    CoreModule { origin: String },
    #[error("plugin {origin}: invalid component: {message}")]
    Compile { origin: String, message: String },
    #[error(
        "plugin {origin}: missing export `{export}`: the component does not implement the wasmctrl:reconciler/reconciler@0.1.3 world"
    )]
    MissingExport {
        origin: String,
        export: &'static str,
    },
    #[error(
        "plugin {origin}: wrong world: the component's exports do not match wasmctrl:reconciler/reconciler@0.1.3: {message}"
    )]
    WrongWorld { origin: String, message: String },
    #[error("plugin {origin}: imports something the host does not provide: {message}")]
    UnsupportedImport { origin: String, message: String },
    #[error("plugin {origin}: `metadata` failed ({kind}): {message}")]
    Metadata {
        origin: String,
        kind: TrapKind,
        message: String,
    },
    #[error("plugin {origin}: `metadata` was cancelled")]
    MetadataCancelled { origin: String },
    #[error("plugin {origin}: invalid metadata: {message}")]
    InvalidMetadata { origin: String, message: String },
    #[error("plugin {origin}: {message}")]
    ExceedsLimits { origin: String, message: String },
    #[error("plugin {origin}: the instance pool is exhausted: {message}")]
    Pool { origin: String, message: String },
    #[error(
        "plugin {origin}: the kernel refused its instance {LOAD_ATTEMPTS} times in a row: {message}"
    )]
    HostBusy { origin: String, message: String },
}

/// Attempts of the load's `metadata` call the kernel may refuse for a
/// moment ([`CallFailure::HostBusy`]) before the load fails, and the waits
/// between them.
const LOAD_ATTEMPTS: usize = 4;
const LOAD_RETRY_WAITS: [Duration; LOAD_ATTEMPTS - 1] = [
    Duration::from_millis(10),
    Duration::from_millis(100),
    Duration::from_millis(500),
];

/// What serves one call's imports instead of the plugin's own. Default:
/// nothing, the plugin's own API and the live context.
#[derive(Default, Clone)]
pub struct Through {
    /// Serves the guest's `kube` calls (None: the plugin's API).
    pub kube: Option<Arc<dyn KubeApi>>,
    /// Records, or replays, the `context` values the guest reads.
    pub tape: Option<Arc<ContextTape>>,
    /// Set, when the call returns, to the outbound requests it made.
    pub http_made: Option<Arc<std::sync::atomic::AtomicU32>>,
    /// Records, or replays, the outbound exchanges the guest makes.
    pub http_tape: Option<Arc<crate::sandbox::outbound::HttpTape>>,
}

impl Through {
    /// The guest's `kube` calls served by `kube`.
    pub fn kube(kube: Arc<dyn KubeApi>) -> Self {
        Self {
            kube: Some(kube),
            tape: None,
            http_made: None,
            http_tape: None,
        }
    }
}

/// The outcome of one reconcile with what it cost.
#[derive(Debug)]
pub struct Invocation {
    pub result: Result<Action, ReconcileError>,
    pub usage: CallUsage,
}

/// A loaded plugin: a compiled, pre-linked, validated component. Each
/// reconcile runs in an instance from its strategy (see [`Plugin::invoke`]).
pub struct Plugin {
    pub(crate) sandbox: Sandbox,
    origin: String,
    digest: String,
    metadata: PluginMetadata,
    cache_hit: CacheHit,
    /// The metric series of this plugin's calls, per
    /// [`crate::control::metrics::Version`] and
    /// [`crate::control::metrics::CallKind`].
    series: [[std::sync::OnceLock<crate::control::metrics::CallSeries>; 3]; 2],
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.sandbox.name)
            .field("origin", &self.origin)
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// Counts `n` refusals of `limit` for this plugin in
    /// `wasmctrl_plugin_limit_exceeded_total`.
    pub fn count_limits(&self, limit: &str, n: u64) {
        self.sandbox
            .runtime
            .metrics()
            .count_limits(self.name(), limit, n);
    }

    pub fn name(&self) -> &str {
        &self.sandbox.name
    }

    /// Where the component came from (a file path, …).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// `sha256:<hex>` of the component file.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// What the plugin said about itself at load time.
    pub fn metadata(&self) -> &PluginMetadata {
        &self.metadata
    }

    pub fn limits(&self) -> &Limits {
        &self.sandbox.limits
    }

    /// Whether calls reuse warm instances (`instanceMode` resolved).
    pub fn reuses_instances(&self) -> bool {
        matches!(self.sandbox.strategy, InstanceStrategy::Reuse(_))
    }

    /// Warm instances waiting for a call.
    pub fn idle_instances(&self) -> usize {
        self.sandbox.strategy.idle()
    }

    /// WASI contexts of finished stores kept for the next fresh ones.
    pub fn spare_wasi_contexts(&self) -> usize {
        self.sandbox.spares.len()
    }

    /// Whether loading reused a compiled artifact.
    pub fn cache_hit(&self) -> CacheHit {
        self.cache_hit
    }

    /// Drops the plugin's compiled code and pre-linked state (and warm
    /// instances) if no call ran for `idle` and none runs now, and its
    /// compiled artifact is on disk to load it again from: the next call
    /// loads it before it runs (`idleUnload`). Returns whether it unloaded.
    pub fn unload_if_idle(&self, idle: Duration) -> bool {
        let runtime = &self.sandbox.runtime;
        let on_disk = runtime.inner.cache.has_artifact(&self.digest);
        let unloaded = self.sandbox.code.unload_if_idle(idle, on_disk);
        if unloaded {
            self.sandbox.strategy.clear();
        }
        unloaded
    }

    /// Whether the compiled code is in memory (false after an idle unload,
    /// until the next call).
    pub fn is_resident(&self) -> bool {
        self.sandbox.code.is_resident()
    }

    /// Idle unloads of this version so far.
    pub fn unloads(&self) -> u64 {
        self.sandbox.code.unloads()
    }

    /// Loads after an idle unload so far.
    pub fn wakes(&self) -> u64 {
        self.sandbox.code.wakes()
    }

    /// How long since the last call ended (zero while one runs).
    pub fn idle_for(&self) -> Duration {
        self.sandbox.code.idle_for()
    }
}

impl Runtime {
    /// Loads the component file at `path` (see [`Runtime::load_bytes`]).
    pub async fn load_file(
        &self,
        path: impl AsRef<Path>,
        spec: PluginSpec,
    ) -> Result<Arc<Plugin>, LoadError> {
        let path = path.as_ref();
        let origin = path.display().to_string();
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|source| LoadError::Read {
                origin: origin.clone(),
                source,
            })?;
        self.load_bytes(origin, bytes, spec).await
    }

    /// Loads a component from `origin` (named in errors): validates it
    /// against the `reconciler` world, compiles it off the async executor
    /// (or reuses the compiled artifact of the same digest), pre-links it
    /// and calls its `metadata`. Nothing of a plugin that fails here is
    /// kept.
    pub async fn load_bytes(
        &self,
        origin: impl Into<String>,
        bytes: Vec<u8>,
        spec: PluginSpec,
    ) -> Result<Arc<Plugin>, LoadError> {
        let path: String = origin.into();
        check_header(&path, &bytes)?;
        let digest = compiled::digest(&bytes);
        // Pinned before the artifact is written: a load running beside this
        // one prunes the cache directory, and an artifact written but not
        // yet pinned would be among what it removes.
        let pin = self.inner.cache.pin(&digest);
        let runtime = self.clone();
        let pre_digest = digest.clone();
        let compile_path = path.clone();
        let limits = spec.limits.clone();
        let plugin = spec.name.clone();
        let (pre, component, cache_hit, initial_pages) = tokio::task::spawn_blocking(move || {
            runtime.prepare(&plugin, &compile_path, &pre_digest, &bytes, &limits)
        })
        .await
        .expect("plugin compilation panicked")?;

        let code = Code::new(
            digest.clone(),
            Resident {
                pre: Arc::new(pre),
                _component: component,
            },
            pin,
        );
        let name: Arc<str> = spec.name.into();
        let sandbox = Sandbox {
            runtime: self.clone(),
            code,
            activity: self.share().activity(&name),
            name,
            settings: spec.settings.to_string().into(),
            limits: spec.limits,
            kube: spec.kube,
            outbound: spec.outbound,
            strategy: match spec.instance_mode {
                InstanceMode::Fresh => InstanceStrategy::Fresh,
                InstanceMode::Reuse => InstanceStrategy::reuse(spec.reuse),
                InstanceMode::Auto if initial_pages > AUTO_REUSE_PAGES => {
                    InstanceStrategy::reuse(spec.reuse)
                }
                InstanceMode::Auto => InstanceStrategy::Fresh,
            },
            spares: Spares::default(),
        };
        let mut report = None;
        for wait in LOAD_RETRY_WAITS.iter().map(Some).chain([None]) {
            let context = call::context(0, METADATA_TIMEOUT, CancellationToken::new());
            let attempt = sandbox.call(Export::Metadata, context).await;
            let busy = matches!(attempt.result, Err(CallFailure::HostBusy(_)));
            report = Some(attempt);
            match wait {
                Some(wait) if busy => tokio::time::sleep(*wait).await,
                _ => break,
            }
        }
        let report = report.expect("the load calls `metadata` at least once");
        self.inner.cache.settle(&digest);
        let metadata = match report.result {
            Ok(Returned::Metadata(m, outbound, webhooks)) => {
                PluginMetadata::from_wit(m, outbound, webhooks).map_err(|message| {
                    self.inner.metrics.count_limit(&sandbox.name, "metadata");
                    LoadError::InvalidMetadata {
                        origin: path.clone(),
                        message,
                    }
                })?
            }
            Ok(Returned::Reconcile(_) | Returned::Review(_)) => {
                unreachable!("metadata returns metadata")
            }
            Err(CallFailure::Trap {
                kind,
                message,
                ceiling,
            }) => {
                // Load calls are not observed as reconciles, so a ceiling
                // that refused the instance is counted here.
                if let Some(ceiling) = ceiling {
                    self.inner
                        .metrics
                        .count_limit(&sandbox.name, ceiling.as_str());
                }
                return Err(LoadError::Metadata {
                    origin: path,
                    kind,
                    message,
                });
            }
            Err(CallFailure::Cancelled) => {
                return Err(LoadError::MetadataCancelled { origin: path });
            }
            Err(CallFailure::PoolExhausted(message)) => {
                return Err(LoadError::Pool {
                    origin: path,
                    message,
                });
            }
            Err(CallFailure::HostBusy(message)) => {
                return Err(LoadError::HostBusy {
                    origin: path,
                    message,
                });
            }
        };
        Ok(Arc::new(Plugin {
            sandbox,
            origin: path,
            digest,
            metadata,
            cache_hit,
            series: Default::default(),
        }))
    }

    fn prepare(
        &self,
        plugin: &str,
        path: &str,
        digest: &str,
        bytes: &[u8],
        limits: &Limits,
    ) -> Result<(GuestPre, Arc<wasmtime::component::Component>, CacheHit, u64), LoadError> {
        let (component, hit) = self
            .inner
            .cache
            .get_or_compile(digest, bytes)
            .map_err(|e| LoadError::Compile {
                origin: path.to_string(),
                message: format!("{e:#}"),
            })?;
        // Counts the component declares statically; instances are counted
        // by the store at instantiation.
        let needs = component.resources_required();
        let initial_pages = needs
            .as_ref()
            .and_then(|n| n.max_initial_memory_size)
            .unwrap_or(0);
        if let Some(needs) = needs
            && (needs.num_memories as usize > limits.memories
                || needs.num_tables as usize > limits.tables)
        {
            for (over, limit) in [
                (needs.num_memories as usize > limits.memories, "memories"),
                (needs.num_tables as usize > limits.tables, "tables"),
            ] {
                if over {
                    self.inner.metrics.count_limit(plugin, limit);
                }
            }
            return Err(LoadError::ExceedsLimits {
                origin: path.to_string(),
                message: format!(
                    "the component defines {} memories and {} tables; its limits allow {} and {} (limits.memories, limits.tables)",
                    needs.num_memories, needs.num_tables, limits.memories, limits.tables
                ),
            });
        }
        let ty = component.component_type();
        for export in REQUIRED_EXPORTS {
            if ty.get_export(&self.inner.engine, export).is_none() {
                return Err(LoadError::MissingExport {
                    origin: path.to_string(),
                    export,
                });
            }
        }
        let pre = self.inner.linker.instantiate_pre(&component).map_err(|e| {
            LoadError::UnsupportedImport {
                origin: path.to_string(),
                message: format!("{e:#}"),
            }
        })?;
        let pre = GuestPre::new(pre).map_err(|e| LoadError::WrongWorld {
            origin: path.to_string(),
            message: format!("{e:#}"),
        })?;
        Ok((pre, component, hit, initial_pages))
    }
}

fn check_header(path: &str, bytes: &[u8]) -> Result<(), LoadError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(LoadError::NotWasm {
            origin: path.to_string(),
        });
    }
    // Bytes 4..8 are the version and layer: 1,0,0,0 is a core module;
    // components have layer 1 (`0d 00 01 00`).
    if bytes[6..8] == [0, 0] {
        return Err(LoadError::CoreModule {
            origin: path.to_string(),
        });
    }
    Ok(())
}

impl Plugin {
    /// Runs one reconcile in an instance from the plugin's strategy, under
    /// the request's deadline and cancellation. Never panics and never
    /// leaves the guest running: every failure comes back as a
    /// [`ReconcileError`].
    pub async fn invoke(&self, request: ReconcileRequest) -> Invocation {
        self.invoke_through(request, Through::default()).await
    }

    /// [`Plugin::invoke`] with the guest's imports served `through` what
    /// is given instead of the plugin's own (the host tracks what a
    /// reconcile read, captures a shadow run's writes, records or replays
    /// a transcript).
    pub async fn invoke_through(&self, request: ReconcileRequest, through: Through) -> Invocation {
        let mut context = call::context(request.attempt, request.timeout, request.cancel);
        context.kube = through.kube;
        context.tape = through.tape;
        context.http_made = through.http_made;
        context.http_tape = through.http_tape;
        let report = self
            .sandbox
            .call(Export::Reconcile(request.key), context)
            .await;
        let result = match report.result {
            Ok(Returned::Reconcile(Ok(action))) => Ok(Action {
                requeue: action.requeue,
                requeue_after: (action.requeue_after_ms > 0)
                    .then(|| Duration::from_millis(action.requeue_after_ms)),
            }),
            Ok(Returned::Reconcile(Err(types::ReconcileError::Transient(m)))) => {
                Err(ReconcileError::Transient(m))
            }
            Ok(Returned::Reconcile(Err(types::ReconcileError::Permanent(m)))) => {
                Err(ReconcileError::Permanent(m))
            }
            Ok(Returned::Metadata(..) | Returned::Review(_)) => {
                unreachable!("reconcile returns an action")
            }
            Err(failure) => Err(failure.into()),
        };
        Invocation {
            result,
            usage: report.usage,
        }
    }
}

impl Plugin {
    /// One reconcile as the controller runs it: the call's cost recorded in
    /// the plugin metrics, imports served `through` what is given (see
    /// [`Plugin::invoke_through`]).
    pub async fn reconcile_through(
        &self,
        request: ReconcileRequest,
        through: Through,
    ) -> Result<Action, ReconcileError> {
        tracing::Span::current().record("digest", self.digest());
        let invocation = self.invoke_through(request, through).await;
        self.observe(CallKind::Reconcile, &invocation.usage);
        invocation.result
    }

    /// Records one `kind` of call's cost in the plugin metrics, through the
    /// series of the version it ran as (looked up once per version and
    /// kind, not per call).
    pub(crate) fn observe(&self, kind: CallKind, usage: &CallUsage) {
        let version = crate::control::metrics::current_version();
        let metrics = self.sandbox.runtime.metrics();
        let series = self.series[version as usize][kind as usize].get_or_init(|| {
            let fuel = self.sandbox.runtime.config().fuel;
            metrics.call_series(self.name(), version, kind, fuel)
        });
        metrics.observe_call_in(series, self.name(), version, usage);
    }

    /// The API the plugin's `kube` calls go to.
    pub fn kube(&self) -> &Arc<dyn KubeApi> {
        &self.sandbox.kube
    }

    /// What the plugin's outbound HTTP requests may reach.
    pub fn outbound(&self) -> &Arc<OutboundGrant> {
        &self.sandbox.outbound
    }

    /// The plugin's settings as the guest sees them (JSON).
    pub fn settings(&self) -> &str {
        &self.sandbox.settings
    }
}

impl crate::control::reconcile::Reconcile for Plugin {
    async fn reconcile(&self, request: ReconcileRequest) -> Result<Action, ReconcileError> {
        self.reconcile_through(request, Through::default()).await
    }
}
