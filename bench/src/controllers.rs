//! The controller under test, in its own process (the hidden `controller`
//! subcommand), in one of three variants with the same logic — read the
//! object from the cache; if `status.observed != spec.seq`, merge-patch the
//! status with `observed` and `startedAt` (the reconcile's start, Unix ns):
//!
//! - `wasm`: wasmctrl's [`Manager`] running the `bench-status` plugin
//!   (from a host config the parent writes);
//! - `native`: the same logic as a native [`Reconcile`] driven by
//!   wasmctrl's own [`Controller`], [`WorkQueue`] and shared informer cache;
//! - `kube-rs`: a plain `kube::runtime::Controller` with the same
//!   concurrency, reading the object its reflector passes in.
//!
//! Protocol (see [`crate::procs`]): the child says `ready` once its cache
//! has synced and its workers run. On `resync` it queues every key again
//! (wasm: `POST /plugins/{name}/reload`, whose `enqueue_all` is the host's
//! own full re-enqueue; native: every key at low priority, as the host
//! does; kube-rs: `reconcile_all_on`) and answers
//! `resync <start> <handed_out> <idle>`: when the keys were queued, when
//! the last of them was handed to a worker, and when every worker was
//! idle again (Unix ns). On `idle` it answers `idle <ns>` once nothing is
//! queued or running; on `unloaded` (wasm), `unloaded <ns>` once every
//! plugin's code was unloaded by `idleUnload`; on `heap`, `heap <bytes>`: its live heap (with
//! `--count-heap`). It stops when stdin closes.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action as KubeAction;
use kube::runtime::watcher;
use serde::{Deserialize, Serialize};
use serde_json::json;
use wasmctrl::config::HostConfig;
use wasmctrl::control::controller::{Controller, ControllerOptions, TracingTerminalErrors};
use wasmctrl::control::informer::{CachedObject, InformerKey, Notification, SharedCache};
use wasmctrl::control::metrics::Metrics;
use wasmctrl::control::workqueue::{Priority, WorkQueue};
use wasmctrl::ops::manager::{Manager, ManagerOptions};
use wasmctrl::{Action, ObjectKey, Reconcile, ReconcileError, ReconcileRequest};

use crate::cluster::{self, NAMESPACE};
use crate::procs::{Child, commands, now_ns, say};

/// How often a child looks at its queues while waiting for them to drain.
const POLL: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Variant {
    Wasm,
    /// The wasm host with `instanceMode: reuse` (warm instances).
    WasmReuse,
    /// The wasm host (`fresh`) with `skipUnchanged: true`: a key whose
    /// inputs are as its last done reconcile left them (its own write's
    /// echo) is not run again.
    WasmSkip,
    Native,
    #[value(name = "kube-rs")]
    KubeRs,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Wasm => "wasm",
            Variant::WasmReuse => "wasm-reuse",
            Variant::WasmSkip => "wasm-skip",
            Variant::Native => "native",
            Variant::KubeRs => "kube-rs",
        }
    }
}

/// The arguments of the hidden `controller` subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct ControllerArgs {
    #[arg(long, value_enum)]
    pub variant: Variant,
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// Keys reconciled at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// The host config (wasm variant).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Not counted as a resync key (kube-rs: the object the latency
    /// benchmark writes to).
    #[arg(long)]
    pub hot: Option<String>,
    /// Count live heap bytes (answered to `heap`).
    #[arg(long)]
    pub count_heap: bool,
}

/// When a controller child's full resync ran (Unix ns): its start, when
/// the last key was handed out, and when the last reconcile finished.
pub struct Resync {
    pub start: u64,
    pub handed_out: u64,
    pub idle: u64,
}

impl Resync {
    /// Seconds from the resync's start until the last reconcile finished.
    pub fn drain_s(&self) -> f64 {
        self.idle.saturating_sub(self.start) as f64 / 1e9
    }
}

/// Asks a controller child for a full resync of every key and waits, up
/// to `limit`, for its answer (`resync <start> <handed out> <idle>`).
pub async fn resync(child: &mut Child, limit: Duration) -> anyhow::Result<Resync> {
    child.send("resync").await?;
    let line = child.expect("resync", limit).await?;
    let t: Vec<u64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("resync line")?;
    ensure!(t.len() == 3, "resync line {line:?}");
    Ok(Resync {
        start: t[0],
        handed_out: t[1],
        idle: t[2],
    })
}

/// The argument list that starts `args` in a child.
pub fn child_args(args: &ControllerArgs) -> Vec<String> {
    let mut v = vec![
        "controller".to_string(),
        "--variant".into(),
        args.variant.name().into(),
        "--kubeconfig".into(),
        args.kubeconfig.display().to_string(),
        "--concurrency".into(),
        args.concurrency.to_string(),
    ];
    if let Some(c) = &args.config {
        v.extend(["--config".into(), c.display().to_string()]);
    }
    if let Some(h) = &args.hot {
        v.extend(["--hot".into(), h.clone()]);
    }
    if args.count_heap {
        v.push("--count-heap".into());
    }
    v
}

/// A controller process started with `args`, once it has drained the
/// queues of its first sync.
pub struct Synced {
    pub child: Child,
    /// From just before the spawn to the child's `ready` line.
    pub ready_s: f64,
    /// From just before the spawn to every key of the first sync
    /// reconciled (the child's own clock, as it saw its queues drain).
    pub synced_s: f64,
}

/// Starts `args` in a child and waits, at most `ready_within` for it to be
/// ready and then `synced_within` for its first sync to be reconciled.
pub async fn start_synced(
    args: &ControllerArgs,
    ready_within: Duration,
    synced_within: Duration,
) -> anyhow::Result<Synced> {
    let spawned = now_ns();
    let started = std::time::Instant::now();
    let mut child = Child::spawn("wasm host", &child_args(args))?;
    child.expect("ready", ready_within).await?;
    let ready_s = started.elapsed().as_secs_f64();
    child.send("idle").await?;
    let idle: u64 = child
        .expect("idle", synced_within)
        .await?
        .parse()
        .context("idle line")?;
    Ok(Synced {
        child,
        ready_s,
        synced_s: idle.saturating_sub(spawned) as f64 / 1e9,
    })
}

/// The host config of the wasm variant: `plugins` plugins named
/// `bench-NNNN`, each reconciling `BenchNNNN` from `bench-NNNN.wasm` in the
/// config's directory, with `instanceMode: instance_mode` and each of
/// `settings` (`key: value` of every plugin, such as `idleUnload: 1s`;
/// compiled artifacts cached in `compiled/` beside the config, which
/// `idleUnload` needs).
pub fn host_config(
    plugins: usize,
    concurrency: usize,
    instance_mode: &str,
    settings: &[(&str, &str)],
) -> String {
    let mut s = String::from(
        "apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\nshutdownTimeout: 5s\nruntime: { apiQps: 1000000, cacheDir: compiled }\nplugins:\n",
    );
    let settings: String = settings
        .iter()
        .map(|(key, value)| format!("    {key}: {value}\n"))
        .collect();
    for i in 0..plugins {
        let plural = cluster::plural(i);
        s.push_str(&format!(
            "  - name: bench-{i:04}\n    path: bench-{i:04}.wasm\n    instanceMode: {instance_mode}\n    maxConcurrentReconciles: {concurrency}\n    reconcileTimeout: 10s\n{settings}    namespaces: [{NAMESPACE}]\n    limits: {{ apiQps: 100000, apiBurst: 100000 }}\n    permissions:\n      - {{ group: {}, resources: [{plural}, {plural}/status], verbs: [get, list, watch, patch] }}\n",
            cluster::GROUP
        ));
    }
    s
}

pub fn run(args: ControllerArgs) -> anyhow::Result<()> {
    // The wasmctrl hosts as `wasmctrl` runs them; the kube-rs baseline as
    // kube-rs users run theirs.
    if args.variant != Variant::KubeRs {
        wasmctrl::ops::malloc::limit_arenas();
    }
    if args.count_heap {
        crate::heap::start();
    }
    // With RUST_LOG set, the child logs to stderr (for debugging a run).
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let client = cluster::client_from(&args.kubeconfig).await?;
        match args.variant {
            Variant::Wasm | Variant::WasmReuse | Variant::WasmSkip => run_wasm(&args, client).await,
            Variant::Native => run_native(&args, client).await,
            Variant::KubeRs => run_kube_rs(&args, client).await,
        }
    })
}

// ---------------------------------------------------------------------------
// wasm: the real host.

async fn run_wasm(args: &ControllerArgs, client: kube::Client) -> anyhow::Result<()> {
    let path = args.config.clone().context("--config is needed")?;
    let text = std::fs::read_to_string(&path)?;
    let base = path.parent().context("config path")?.to_path_buf();
    let config = HostConfig::parse(&path, &text, base)?;
    let names: Vec<String> = config.plugins.iter().map(|p| p.name.clone()).collect();
    let manager = Manager::start(
        config,
        client,
        ManagerOptions {
            admin_bind: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
            watch_sources: false,
            ..ManagerOptions::default()
        },
    )
    .await?;
    let admin = manager.admin_addr();
    let queue = manager.queue_reader();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let host = tokio::spawn(manager.run(async move {
        let _ = stop_rx.await;
    }));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while crate::hotswap::http(admin, "GET", "/readyz").await?.0 != 200 {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the host did not become ready"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    say(&format!("ready {admin}"));
    // Every plugin has loaded once the host is ready.
    let queues: Vec<WorkQueue<ObjectKey>> = names
        .iter()
        .map(|n| queue(n).context("plugin queue"))
        .collect::<anyhow::Result<_>>()?;
    let mut commands = commands();
    while let Some(command) = commands.recv().await {
        match command.as_str() {
            "resync" => {
                for name in &names {
                    let (status, body) =
                        crate::hotswap::http(admin, "POST", &format!("/plugins/{name}/reload"))
                            .await?;
                    ensure!(status == 200, "reload answered {status}: {body}");
                }
                let start = now_ns();
                let (handed_out, idle) = drained(&queues).await;
                say(&format!("resync {start} {handed_out} {idle}"));
            }
            "idle" => {
                let (_, idle) = drained(&queues).await;
                say(&format!("idle {idle}"));
            }
            "unloaded" => {
                // Every plugin's code unloaded by `idleUnload` (`/plugins`).
                loop {
                    let (status, body) = crate::hotswap::http(admin, "GET", "/plugins").await?;
                    ensure!(status == 200, "/plugins answered {status}: {body}");
                    let plugins: Vec<serde_json::Value> = serde_json::from_str(&body)?;
                    if plugins.iter().all(|p| p["resident"] == false) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                say(&format!("unloaded {}", now_ns()));
            }
            "heap" => say(&format!("heap {}", crate::heap::live_bytes())),
            other => bail!("unknown command {other:?}"),
        }
    }
    let _ = stop_tx.send(());
    host.await??;
    Ok(())
}

/// Waits until no key is queued (returns when, Unix ns) and then until no
/// key is being reconciled either.
async fn drained(queues: &[WorkQueue<ObjectKey>]) -> (u64, u64) {
    while queues.iter().any(|q| !q.is_empty()) {
        tokio::time::sleep(POLL).await;
    }
    let handed_out = now_ns();
    while queues
        .iter()
        .any(|q| !q.is_empty() || q.processing_len() > 0)
    {
        tokio::time::sleep(POLL).await;
    }
    (handed_out, now_ns())
}

// ---------------------------------------------------------------------------
// native: the same logic in Rust, on wasmctrl's controller loop and cache.

struct NativeStatus {
    informer: Arc<wasmctrl::control::informer::Informer>,
    api: Api<DynamicObject>,
}

impl Reconcile for NativeStatus {
    async fn reconcile(&self, request: ReconcileRequest) -> Result<Action, ReconcileError> {
        let started_at = now_ns();
        let key = &request.key;
        let Some(item) = self.informer.get(key.namespace.as_deref(), &key.name) else {
            return Ok(Action::done());
        };
        // A native reconciler reads wasmctrl's cache as JSON, as the guest
        // does, into the fields it needs.
        let view: BenchView = item
            .parse()
            .map_err(|e| ReconcileError::Permanent(e.to_string()))?;
        let seq = view.spec.seq;
        if view.status.and_then(|s| s.observed) == Some(seq) {
            return Ok(Action::done());
        }
        let patch = json!({"status": {"observed": seq, "startedAt": started_at}});
        self.api
            .patch_status(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| ReconcileError::Transient(e.to_string()))?;
        Ok(Action::done())
    }
}

/// What the native reconciler reads of a benchmark object.
#[derive(serde::Deserialize)]
struct BenchView {
    #[serde(default)]
    spec: BenchSpec,
    status: Option<BenchStatus>,
}

#[derive(serde::Deserialize, Default)]
struct BenchSpec {
    #[serde(default)]
    seq: u64,
}

#[derive(serde::Deserialize)]
struct BenchStatus {
    observed: Option<u64>,
}

fn object_key(o: &CachedObject) -> ObjectKey {
    ObjectKey {
        namespace: o.namespace().map(str::to_string),
        name: o.name().to_string(),
    }
}

fn enqueue_all(queue: &WorkQueue<ObjectKey>, informer: &wasmctrl::control::informer::Informer) {
    for o in informer.objects() {
        queue.add_with_priority(object_key(&o), Priority::LOW);
    }
}

async fn run_native(args: &ControllerArgs, client: kube::Client) -> anyhow::Result<()> {
    let resource = cluster::api_resource(0);
    let cache = SharedCache::new(client.clone());
    let informer = cache.informer(
        InformerKey::new(&resource, Some(NAMESPACE)),
        resource.clone(),
    );
    let metrics = Arc::new(Metrics::new());
    let queue = WorkQueue::new(
        "native",
        Box::new(wasmctrl::control::workqueue::ratelimit::default_controller_rate_limiter()),
        metrics.queue("native"),
    );
    let controller = Controller::new(
        ControllerOptions {
            max_concurrent_reconciles: args.concurrency,
            reconcile_timeout: Duration::from_secs(10),
            ..ControllerOptions::new("native")
        },
        queue.clone(),
        NativeStatus {
            informer: informer.clone(),
            api: Api::namespaced_with(client, NAMESPACE, &resource),
        },
        metrics,
        Arc::new(TracingTerminalErrors),
    );
    // Events → keys, as the host's feeds do.
    let mut subscription = informer.subscribe();
    let feed = {
        let (queue, informer) = (queue.clone(), informer.clone());
        tokio::spawn(async move {
            while let Some(n) = subscription.next().await {
                match n {
                    Notification::Object(e) => {
                        queue.add(object_key(&e.object));
                    }
                    Notification::Resync => enqueue_all(&queue, &informer),
                }
            }
        })
    };
    informer.wait_synced().await;
    let workers = controller.start();
    enqueue_all(&queue, &informer);
    say("ready");
    let queues = [queue.clone()];
    let mut commands = commands();
    while let Some(command) = commands.recv().await {
        match command.as_str() {
            "resync" => {
                enqueue_all(&queue, &informer);
                let start = now_ns();
                let (handed_out, idle) = drained(&queues).await;
                say(&format!("resync {start} {handed_out} {idle}"));
            }
            "idle" => {
                let (_, idle) = drained(&queues).await;
                say(&format!("idle {idle}"));
            }
            "heap" => say(&format!("heap {}", crate::heap::live_bytes())),
            other => bail!("unknown command {other:?}"),
        }
    }
    workers.shutdown(Duration::from_secs(5)).await;
    feed.abort();
    Ok(())
}

// ---------------------------------------------------------------------------
// kube-rs: a plain kube::runtime::Controller.

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Spec {
    #[serde(default)]
    seq: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    #[serde(default)]
    observed: u64,
    #[serde(default)]
    started_at: u64,
}

/// `Bench0000`, typed, as a kube-rs user would declare it.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct BenchItem {
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Spec,
    #[serde(default)]
    status: Option<Status>,
}

impl kube::Resource for BenchItem {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Bench0000".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        cluster::GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        cluster::VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "bench0000s".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

struct KubeCtx {
    api: Api<BenchItem>,
    hot: Option<String>,
    /// Reconciles of keys other than `hot` started and finished.
    started: AtomicU64,
    finished: AtomicU64,
}

async fn kube_reconcile(
    item: Arc<BenchItem>,
    ctx: Arc<KubeCtx>,
) -> Result<KubeAction, kube::Error> {
    let started_at = now_ns();
    let name = item.metadata.name.clone().unwrap_or_default();
    let counted = ctx.hot.as_deref() != Some(name.as_str());
    if counted {
        ctx.started.fetch_add(1, Ordering::SeqCst);
    }
    let seq = item.spec.seq;
    let result = if item.status.as_ref().is_some_and(|s| s.observed == seq) {
        Ok(KubeAction::await_change())
    } else {
        let patch = json!({"status": {"observed": seq, "startedAt": started_at}});
        ctx.api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| KubeAction::await_change())
    };
    if counted {
        ctx.finished.fetch_add(1, Ordering::SeqCst);
    }
    result
}

fn kube_error_policy(_item: Arc<BenchItem>, _e: &kube::Error, _ctx: Arc<KubeCtx>) -> KubeAction {
    KubeAction::requeue(Duration::from_millis(5))
}

async fn run_kube_rs(args: &ControllerArgs, client: kube::Client) -> anyhow::Result<()> {
    let api: Api<BenchItem> = Api::namespaced(client, NAMESPACE);
    let ctx = Arc::new(KubeCtx {
        api: api.clone(),
        hot: args.hot.clone(),
        started: AtomicU64::new(0),
        finished: AtomicU64::new(0),
    });
    let (trigger, triggers) = futures::channel::mpsc::unbounded::<()>();
    let controller = kube::runtime::Controller::new(api, watcher::Config::default())
        .with_config(
            kube::runtime::controller::Config::default()
                .concurrency(u16::try_from(args.concurrency).unwrap_or(u16::MAX)),
        )
        .reconcile_all_on(triggers);
    let store = controller.store();
    let running = tokio::spawn(
        controller
            .run(kube_reconcile, kube_error_policy, ctx.clone())
            .for_each(|result| {
                if let Err(e) = result {
                    eprintln!("kube-rs controller: {e}");
                }
                futures::future::ready(())
            }),
    );
    // Polled: a waiter registered while the controller's runner also waits
    // is not always woken (kube-runtime 5's delayed init keeps one waker),
    // but a fresh call sees the store ready at once.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        match tokio::time::timeout(Duration::from_millis(5), store.wait_until_ready()).await {
            Ok(ready) => break ready.context("the kube-rs store never became ready")?,
            Err(_) => ensure!(
                tokio::time::Instant::now() < deadline,
                "the kube-rs store did not become ready"
            ),
        }
    }
    say("ready");
    let mut commands = commands();
    while let Some(command) = commands.recv().await {
        match command.as_str() {
            "resync" => {
                let keys = store
                    .state()
                    .iter()
                    .filter(|o| o.metadata.name.as_deref() != args.hot.as_deref())
                    .count() as u64;
                let (started, finished) = (
                    ctx.started.load(Ordering::SeqCst),
                    ctx.finished.load(Ordering::SeqCst),
                );
                trigger
                    .unbounded_send(())
                    .context("kube-rs controller gone")?;
                let start = now_ns();
                while ctx.started.load(Ordering::SeqCst) < started + keys {
                    tokio::time::sleep(POLL).await;
                }
                let handed_out = now_ns();
                while ctx.finished.load(Ordering::SeqCst) < finished + keys {
                    tokio::time::sleep(POLL).await;
                }
                say(&format!("resync {start} {handed_out} {}", now_ns()));
            }
            "idle" => {
                // kube-rs does not expose its scheduler: idle once the
                // counted reconciles stopped moving for 50 ms.
                let mut last = ctx.finished.load(Ordering::SeqCst);
                loop {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let now = ctx.finished.load(Ordering::SeqCst);
                    if now == last && ctx.started.load(Ordering::SeqCst) == now {
                        break;
                    }
                    last = now;
                }
                say(&format!("idle {}", now_ns()));
            }
            "heap" => say(&format!("heap {}", crate::heap::live_bytes())),
            other => bail!("unknown command {other:?}"),
        }
    }
    running.abort();
    Ok(())
}
