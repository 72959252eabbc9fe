//! `hotswap`: replacing the `stamp` reconciler under load.
//!
//! One process: the embedded API server, a [`Manager`] running the `stamp`
//! test plugin (`maxConcurrentReconciles: 2`, file watching off) on
//! `--keys` ConfigMaps, and a writer updating those ConfigMaps continuously
//! at `--rate` updates/s. Every update also *removes* the
//! `wasmctrl.dev/stamp` label, so a key carries a stamp only if some
//! reconcile wrote it after the key's last update.
//!
//! A swap copies the other version's component over the plugin file
//! (written aside, then renamed) and sends `POST /plugins/stamp/reload` to
//! the admin server (the admin path, not the file watcher, so the trigger
//! time is exact). Both versions are compiled once before measuring (v1 at
//! start-up, v2 by a warm-up swap), so the measured swaps hit the compile
//! cache.
//!
//! - **swap latency**: from just before the reload request is written to the
//!   moment a kube-rs watch on the ConfigMaps (opened at the start of the
//!   run) delivers the first ConfigMap whose stamp label is the new
//!   version's, at a resourceVersion after the request. Only a reconcile by
//!   the new version can write that label (writer updates remove it, the
//!   old version writes the other one). Also reported: the reload response
//!   time, and from the host's `reconcile` tracing spans the time to the
//!   first reconcile by the new digest returning.
//! - **cold swap**: one more swap, after the 20, to a component no cache has
//!   seen: the next version's bytes with a custom section appended (new
//!   digest, same code), so the reload compiles it.
//! - **lost**: after the last swap the writer stops; every ConfigMap must
//!   then carry the final version's stamp. Keys that do not within
//!   `--settle-secs` are lost: unstamped (the last update was never
//!   reconciled) or stamped by an older version.
//! - **overlapping**: keys reconciled by two versions at once, measured from
//!   the host's `reconcile` spans (created after a worker takes the key from
//!   the queue; the controller's disposition event is emitted before the
//!   worker releases it): two such spans of one key live at once with
//!   different digests. Concurrent spans of one key with any digests are
//!   counted too. By construction both are 0: the workqueue never hands a
//!   key to two workers, and a swap keeps the queue and workers and only
//!   replaces the plugin the next reconcile loads.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde::Serialize;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::span;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, filter};
use wasmctrl::config::HostConfig;
use wasmctrl::ops::manager::{Manager, ManagerOptions};
use wasmctrl_apiserver::ApiServer;
use wasmctrl_plugin_artifacts as artifacts;

use crate::apiserver::client_for;
use crate::stats::{Samples, load_average, round};

const STAMP_LABEL: &str = "wasmctrl.dev/stamp";
const NAMESPACE: &str = "default";
/// The issue's goal for the median warm swap.
const GOAL_SWAP_MS: f64 = 50.0;
/// Writer tasks; each owns every `WRITERS`-th key.
const WRITERS: usize = 4;

const CONFIG: &str = r#"
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
shutdownTimeout: 10s
plugins:
  - name: stamp
    path: stamp.wasm
    maxConcurrentReconciles: 2
    reconcileTimeout: 5s
    namespaces: [default]
    permissions:
      - { group: "", resources: [configmaps], verbs: [get, patch] }
"#;

#[derive(Debug, Clone)]
pub struct Options {
    /// Measured warm swaps.
    pub swaps: usize,
    /// ConfigMaps being updated.
    pub keys: usize,
    /// Writer updates per second (all keys together).
    pub rate: u32,
    /// Pause between a swap being observed and the next one.
    pub pause_ms: u64,
    /// Bound on the wait for every key to carry the final stamp.
    pub settle_secs: u64,
    pub json: bool,
}

#[derive(Serialize)]
struct JsonLine {
    scenario: &'static str,
    swap_ms_median: f64,
    swap_ms_p99: f64,
    lost: usize,
    overlapping: usize,
    cold_swap_ms: f64,
    swaps: usize,
    keys: usize,
}

/// One version of the plugin as installed.
#[derive(Clone)]
struct Version {
    bytes: Arc<Vec<u8>>,
    digest: String,
    stamp: &'static str,
}

impl Version {
    fn read(path: &str, stamp: &'static str) -> anyhow::Result<Self> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {path}"))?;
        Ok(Self::from_bytes(bytes, stamp))
    }

    fn from_bytes(bytes: Vec<u8>, stamp: &'static str) -> Self {
        Self {
            digest: wasmctrl::sandbox::digest(&bytes),
            bytes: Arc::new(bytes),
            stamp,
        }
    }

    /// The same code with a custom section appended: a digest no cache has
    /// seen.
    fn fresh_copy(&self) -> Self {
        let name = b"wasmctrl-bench-cold";
        let nonce = format!(
            "{:?}",
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)
        );
        let mut body = Vec::new();
        leb128(&mut body, name.len());
        body.extend_from_slice(name);
        body.extend_from_slice(nonce.as_bytes());
        let mut bytes = (*self.bytes).clone();
        bytes.push(0); // custom section id
        leb128(&mut bytes, body.len());
        bytes.extend_from_slice(&body);
        Self::from_bytes(bytes, self.stamp)
    }

    /// Writes the component aside, then renames it over `to`, as a deploy
    /// tool would.
    fn install(&self, to: &Path) -> anyhow::Result<()> {
        let tmp = to.with_extension("partial");
        std::fs::write(&tmp, &*self.bytes)?;
        std::fs::rename(&tmp, to)?;
        Ok(())
    }
}

fn leb128(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

// ---------------------------------------------------------------------------
// The host's reconcile spans, observed through a tracing layer.

#[derive(Default)]
struct ProbeState {
    live: HashMap<span::Id, Live>,
    /// Live spans per key.
    by_key: HashMap<String, Vec<span::Id>>,
    reconciles: u64,
    failed: u64,
    by_digest: BTreeMap<String, u64>,
    /// Keys with two reconcile spans live at once (any digests).
    concurrent: HashSet<String>,
    /// Keys with two reconcile spans of different digests live at once.
    overlapping: HashSet<String>,
    /// The digest a swap is waiting for, and when its first reconcile
    /// started and returned.
    armed: Option<String>,
    first_start: Option<Instant>,
    first_done: Option<Instant>,
}

struct Live {
    key: String,
    digest: Option<String>,
    /// The disposition event was seen: the key is about to be released.
    ended: bool,
}

#[derive(Clone, Default)]
struct Probe(Arc<Mutex<ProbeState>>);

impl Probe {
    fn arm(&self, digest: &str) {
        let mut st = self.0.lock().unwrap();
        st.armed = Some(digest.to_string());
        st.first_start = None;
        st.first_done = None;
    }

    fn first(&self) -> (Option<Instant>, Option<Instant>) {
        let st = self.0.lock().unwrap();
        (st.first_start, st.first_done)
    }
}

#[derive(Default)]
struct Fields {
    key: Option<String>,
    digest: Option<String>,
}

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "key" => self.key = Some(value.to_string()),
            "digest" => self.digest = Some(value.to_string()),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "key" => self.key = Some(format!("{value:?}")),
            "digest" => self.digest = Some(format!("{value:?}")),
            _ => {}
        }
    }
}

impl<S> Layer<S> for Probe
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, _ctx: Context<'_, S>) {
        let mut f = Fields::default();
        attrs.record(&mut f);
        let Some(key) = f.key else { return };
        let mut guard = self.0.lock().unwrap();
        let st = &mut *guard;
        let others = st.by_key.entry(key.clone()).or_default();
        if others
            .iter()
            .any(|o| st.live.get(o).is_some_and(|l| !l.ended))
        {
            st.concurrent.insert(key.clone());
        }
        others.push(id.clone());
        st.live.insert(
            id.clone(),
            Live {
                key,
                digest: None,
                ended: false,
            },
        );
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, _ctx: Context<'_, S>) {
        let mut f = Fields::default();
        values.record(&mut f);
        let Some(digest) = f.digest else { return };
        let mut guard = self.0.lock().unwrap();
        let st = &mut *guard;
        let Some(live) = st.live.get_mut(id) else {
            return;
        };
        live.digest = Some(digest.clone());
        let key = live.key.clone();
        if st.armed.as_deref() == Some(digest.as_str()) && st.first_start.is_none() {
            st.first_start = Some(Instant::now());
        }
        let other_version = st.by_key.get(&key).is_some_and(|ids| {
            ids.iter().filter(|o| *o != id).any(|o| {
                st.live
                    .get(o)
                    .is_some_and(|l| !l.ended && l.digest.as_ref().is_some_and(|d| *d != digest))
            })
        });
        if other_version {
            st.overlapping.insert(key);
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.event_span(event) else {
            return;
        };
        let mut guard = self.0.lock().unwrap();
        let st = &mut *guard;
        let Some(live) = st.live.get_mut(&span.id()) else {
            return;
        };
        if live.ended {
            return;
        }
        live.ended = true;
        let digest = live.digest.clone().unwrap_or_default();
        st.reconciles += 1;
        if *event.metadata().level() <= tracing::Level::WARN {
            st.failed += 1;
        }
        if st.armed.as_deref() == Some(digest.as_str()) && st.first_done.is_none() {
            st.first_done = Some(Instant::now());
        }
        *st.by_digest.entry(digest).or_default() += 1;
    }

    fn on_close(&self, id: span::Id, _ctx: Context<'_, S>) {
        let mut guard = self.0.lock().unwrap();
        let st = &mut *guard;
        if let Some(live) = st.live.remove(&id)
            && let Some(ids) = st.by_key.get_mut(&live.key)
        {
            ids.retain(|o| *o != id);
            if ids.is_empty() {
                st.by_key.remove(&live.key);
            }
        }
    }
}

/// Installs the probe (and, with `RUST_LOG` set, a log to stderr).
fn install_probe() -> anyhow::Result<Probe> {
    let probe = Probe::default();
    // The controller's `reconcile` span and the events inside it; nothing
    // else reaches the probe.
    let only_controller = filter::filter_fn(|m| {
        m.target() == "wasmctrl::control::controller" && (m.is_event() || m.name() == "reconcile")
    });
    let log = std::env::var_os("RUST_LOG").map(|_| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(tracing_subscriber::EnvFilter::from_default_env())
    });
    tracing_subscriber::registry()
        .with(probe.clone().with_filter(only_controller))
        .with(log)
        .try_init()
        .context("installing the tracing probe")?;
    Ok(probe)
}

// ---------------------------------------------------------------------------
// The label watch: the first ConfigMap stamped by the version being waited
// for.

struct Awaited {
    stamp: &'static str,
    after_rv: u64,
    tx: oneshot::Sender<Instant>,
}

type LabelProbe = Arc<Mutex<Option<Awaited>>>;

async fn watch_labels(
    api: Api<ConfigMap>,
    rv: u64,
    probe: LabelProbe,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let mut rv = rv.to_string();
    while !stop.is_cancelled() {
        let stream = api
            .watch(&WatchParams::default(), &rv)
            .await
            .context("watching ConfigMaps")?;
        let mut stream = std::pin::pin!(stream);
        loop {
            let ev = tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                ev = stream.try_next() => ev.context("ConfigMap watch")?,
            };
            let cm = match ev {
                Some(WatchEvent::Added(cm) | WatchEvent::Modified(cm)) => cm,
                Some(WatchEvent::Bookmark(b)) => {
                    rv = b.metadata.resource_version;
                    continue;
                }
                Some(WatchEvent::Deleted(_)) => continue,
                Some(WatchEvent::Error(e)) => bail!("ConfigMap watch: {e:?}"),
                None => break, // server-side timeout: resume from `rv`
            };
            let obj_rv = cm.metadata.resource_version.clone().unwrap_or_default();
            let at: u64 = obj_rv.parse().unwrap_or(0);
            rv = obj_rv;
            let stamp = cm.metadata.labels.as_ref().and_then(|l| l.get(STAMP_LABEL));
            let mut slot = probe.lock().unwrap();
            if let Some(a) = slot.as_ref()
                && stamp.map(String::as_str) == Some(a.stamp)
                && at > a.after_rv
                && let Some(a) = slot.take()
            {
                let _ = a.tx.send(Instant::now());
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------

fn key_name(i: usize) -> String {
    format!("hs-{i}")
}

/// Updates every key in turn (`WRITERS` tasks, each owning a share), paced
/// to `rate` updates/s in total; each update changes data and removes the
/// stamp.
fn spawn_writer(
    api: Api<ConfigMap>,
    keys: usize,
    rate: u32,
    stop: CancellationToken,
    count: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let per_task = (f64::from(rate) / WRITERS as f64).max(1.0);
    let period = Duration::from_secs_f64(1.0 / per_task);
    (0..WRITERS)
        .map(|w| {
            let (api, stop, count, errors) =
                (api.clone(), stop.clone(), count.clone(), errors.clone());
            tokio::spawn(async move {
                let mine: Vec<usize> = (w..keys).step_by(WRITERS).collect();
                let mut tick = tokio::time::interval(period);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                let mut round = 0u64;
                'outer: loop {
                    round += 1;
                    for &i in &mine {
                        tokio::select! {
                            _ = stop.cancelled() => break 'outer,
                            _ = tick.tick() => {}
                        }
                        let patch = serde_json::json!({
                            "metadata": {"labels": {STAMP_LABEL: null}},
                            "data": {"round": round.to_string()},
                        });
                        match api
                            .patch(&key_name(i), &PatchParams::default(), &Patch::Merge(&patch))
                            .await
                        {
                            Ok(_) => count.fetch_add(1, Ordering::Relaxed),
                            Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                }
            })
        })
        .collect()
}

/// A one-shot HTTP/1.1 request to the admin server: (status, body).
pub(crate) async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// Per-key stamps (None: unstamped) of the benchmark's ConfigMaps.
async fn stamps(api: &Api<ConfigMap>) -> anyhow::Result<Vec<Option<String>>> {
    let list = api.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("hs-"))
        })
        .map(|c| c.metadata.labels.and_then(|mut l| l.remove(STAMP_LABEL)))
        .collect())
}

/// Polls until every key carries `stamp` or `limit` passes; returns the
/// (unstamped, stamped by another version) counts at the end.
async fn converge(
    api: &Api<ConfigMap>,
    keys: usize,
    stamp: &str,
    limit: Duration,
) -> anyhow::Result<(usize, usize)> {
    let deadline = Instant::now() + limit;
    loop {
        let all = stamps(api).await?;
        ensure!(
            all.len() == keys,
            "found {} of {keys} ConfigMaps",
            all.len()
        );
        let unstamped = all.iter().filter(|s| s.is_none()).count();
        let stale = all
            .iter()
            .filter(|s| s.as_deref().is_some_and(|s| s != stamp))
            .count();
        if unstamped + stale == 0 || Instant::now() >= deadline {
            return Ok((unstamped, stale));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One measured swap.
struct Swap {
    /// Reload request → first ConfigMap with the new stamp seen by the watch.
    observed: Duration,
    /// Reload request → reload response (compile/cache, metadata, swap).
    response: Duration,
    /// Reload request → first reconcile by the new digest returned (spans).
    first_done: Option<Duration>,
    /// Reload request → first reconcile by the new digest started (spans).
    first_start: Option<Duration>,
}

struct Rig<'a> {
    server: &'a ApiServer,
    admin: std::net::SocketAddr,
    file: &'a Path,
    labels: LabelProbe,
    probe: &'a Probe,
}

impl Rig<'_> {
    async fn swap(&self, to: &Version) -> anyhow::Result<Swap> {
        to.install(self.file)?;
        let (tx, rx) = oneshot::channel();
        *self.labels.lock().unwrap() = Some(Awaited {
            stamp: to.stamp,
            after_rv: self.server.resource_version(),
            tx,
        });
        self.probe.arm(&to.digest);
        let t0 = Instant::now();
        let (status, body) = http(self.admin, "POST", "/plugins/stamp/reload").await?;
        let response = t0.elapsed();
        ensure!(status == 200, "reload answered {status}: {body}");
        ensure!(
            body.contains(&to.digest),
            "reload did not load {}: {body}",
            to.digest
        );
        let seen = tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .context("no ConfigMap stamped by the new version within 30 s")?
            .context("the label watch stopped")?;
        // The watch can deliver the new stamp before the reconcile that
        // wrote it has returned to the controller.
        let mut first = self.probe.first();
        let limit = Instant::now() + Duration::from_secs(2);
        while first.1.is_none() && Instant::now() < limit {
            tokio::time::sleep(Duration::from_millis(1)).await;
            first = self.probe.first();
        }
        let (start, done) = first;
        Ok(Swap {
            observed: seen - t0,
            response,
            first_done: done.map(|d| d - t0),
            first_start: start.map(|s| s - t0),
        })
    }
}

struct Outcome {
    swaps: Vec<Swap>,
    warmup: Swap,
    cold: Swap,
    lost_unstamped: usize,
    lost_stale: usize,
    converge_secs: f64,
    updates: u64,
    update_errors: u64,
    load_secs: f64,
    reconciles: u64,
    failed: u64,
    by_version: Vec<(String, u64)>,
    concurrent: usize,
    overlapping: usize,
    final_stamp: &'static str,
}

async fn measure(options: &Options, probe: &Probe) -> anyhow::Result<Outcome> {
    let v1 = Version::read(artifacts::STAMP_V1, "v1")?;
    let v2 = Version::read(artifacts::STAMP_V2, "v2")?;
    let server = ApiServer::start(wasmctrl_apiserver::Config::default())
        .await
        .context("starting the API server")?;
    let api: Api<ConfigMap> = Api::namespaced(client_for(&server).await?, NAMESPACE);
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("stamp.wasm");
    v1.install(&file)?;

    // The keys, before the host starts.
    futures::stream::iter(0..options.keys)
        .map(|i| {
            let api = api.clone();
            async move {
                let cm = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(key_name(i)),
                        ..ObjectMeta::default()
                    },
                    data: Some([("round".to_string(), "0".to_string())].into()),
                    ..ConfigMap::default()
                };
                api.create(&PostParams::default(), &cm).await
            }
        })
        .buffer_unordered(16)
        .try_for_each(|_| async { Ok(()) })
        .await
        .context("creating the ConfigMaps")?;

    let config = HostConfig::parse(Path::new("hotswap.yaml"), CONFIG, dir.path().to_path_buf())?;
    let manager = Manager::start(
        config,
        client_for(&server).await?,
        ManagerOptions {
            admin_bind: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
            watch_sources: false,
            ..ManagerOptions::default()
        },
    )
    .await?;
    let admin = manager.admin_addr();
    let (stop_host, stopped) = oneshot::channel::<()>();
    let host = tokio::spawn(manager.run(async move {
        let _ = stopped.await;
    }));
    let ready = Instant::now() + Duration::from_secs(30);
    while http(admin, "GET", "/readyz").await?.0 != 200 {
        ensure!(Instant::now() < ready, "the host did not become ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (unstamped, stale) = converge(&api, options.keys, "v1", Duration::from_secs(60)).await?;
    ensure!(
        unstamped + stale == 0,
        "v1 did not stamp every key ({unstamped} unstamped, {stale} other)"
    );

    // The label watch and the steady load.
    let stop = CancellationToken::new();
    let labels: LabelProbe = Arc::new(Mutex::new(None));
    let watcher = tokio::spawn(watch_labels(
        Api::namespaced(client_for(&server).await?, NAMESPACE),
        server.resource_version(),
        labels.clone(),
        stop.clone(),
    ));
    let updates = Arc::new(AtomicU64::new(0));
    let update_errors = Arc::new(AtomicU64::new(0));
    let load_started = Instant::now();
    let writers = spawn_writer(
        Api::namespaced(client_for(&server).await?, NAMESPACE),
        options.keys,
        options.rate,
        stop.clone(),
        updates.clone(),
        update_errors.clone(),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;

    let rig = Rig {
        server: &server,
        admin,
        file: &file,
        labels,
        probe,
    };
    let pause = Duration::from_millis(options.pause_ms);
    // Warm-up: v2's first load compiles it; from here both are cached.
    let warmup = rig.swap(&v2).await?;
    tokio::time::sleep(pause).await;
    let mut swaps = Vec::with_capacity(options.swaps);
    let mut current = &v2;
    for _ in 0..options.swaps {
        let next = if current.stamp == "v1" { &v2 } else { &v1 };
        swaps.push(rig.swap(next).await?);
        current = next;
        tokio::time::sleep(pause).await;
    }
    // Cold: the other version under a digest never seen.
    let fresh = if current.stamp == "v1" { &v2 } else { &v1 }.fresh_copy();
    let cold = rig.swap(&fresh).await?;
    tokio::time::sleep(pause).await;

    stop.cancel();
    for w in writers {
        w.await?;
    }
    let load_secs = load_started.elapsed().as_secs_f64();
    watcher.await??;
    let settle = Instant::now();
    let (lost_unstamped, lost_stale) = converge(
        &api,
        options.keys,
        fresh.stamp,
        Duration::from_secs(options.settle_secs),
    )
    .await?;
    let converge_secs = settle.elapsed().as_secs_f64();

    let _ = stop_host.send(());
    host.await??;
    server.shutdown().await;

    let st = probe.0.lock().unwrap();
    let name = |d: &str| {
        [(&v1, "v1"), (&v2, "v2"), (&fresh, "v-cold")]
            .iter()
            .find(|(v, _)| v.digest == d)
            .map_or_else(|| d.to_string(), |(_, n)| n.to_string())
    };
    Ok(Outcome {
        swaps,
        warmup,
        cold,
        lost_unstamped,
        lost_stale,
        converge_secs,
        updates: updates.load(Ordering::Relaxed),
        update_errors: update_errors.load(Ordering::Relaxed),
        load_secs,
        reconciles: st.reconciles,
        failed: st.failed,
        by_version: st.by_digest.iter().map(|(d, n)| (name(d), *n)).collect(),
        concurrent: st.concurrent.len(),
        overlapping: st.overlapping.len(),
        final_stamp: fresh.stamp,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn summary_ms(samples: impl Iterator<Item = Duration>) -> (f64, f64, f64, usize) {
    let mut s = Samples::default();
    let mut n = 0;
    for d in samples {
        s.push(d);
        n += 1;
    }
    let sum = s.summary();
    (
        sum.median as f64 / 1e6,
        sum.p99 as f64 / 1e6,
        sum.max as f64 / 1e6,
        n,
    )
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    ensure!(options.swaps > 0, "--swaps must be at least 1");
    ensure!(options.keys > 0, "--keys must be at least 1");
    ensure!(options.rate > 0, "--rate must be at least 1");
    let probe = install_probe()?;
    let load_before = load_average();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let started = Instant::now();
    let o = tokio.block_on(measure(options, &probe))?;
    let total_secs = started.elapsed().as_secs_f64();
    ensure!(
        o.reconciles > 0,
        "the probe saw no reconciles (are the controller's tracing events compiled out?)"
    );
    let (median, p99, max, n) = summary_ms(o.swaps.iter().map(|s| s.observed));
    let lost = o.lost_unstamped + o.lost_stale;
    if options.json {
        let line = JsonLine {
            scenario: "hotswap",
            swap_ms_median: round(median, 2),
            swap_ms_p99: round(p99, 2),
            lost,
            overlapping: o.overlapping,
            cold_swap_ms: round(ms(o.cold.observed), 1),
            swaps: n,
            keys: options.keys,
        };
        println!("{}", serde_json::to_string(&line)?);
        return Ok(());
    }
    let (resp_med, resp_p99, _, _) = summary_ms(o.swaps.iter().map(|s| s.response));
    let (done_med, done_p99, _, _) = summary_ms(o.swaps.iter().filter_map(|s| s.first_done));
    let (start_med, start_p99, _, _) = summary_ms(o.swaps.iter().filter_map(|s| s.first_start));
    println!(
        "hotswap: stamp plugin, {} keys, writer at {} updates/s, {} CPUs, load {load_before} before / {} after, {total_secs:.1} s",
        options.keys,
        options.rate,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    println!(
        "  swap (request -> new stamp seen):   median {median:.2} ms, p99 {p99:.2} ms, max {max:.2} ms over {n} warm swaps (goal median <= {GOAL_SWAP_MS:.0} ms: {})",
        if median <= GOAL_SWAP_MS {
            "met"
        } else {
            "MISSED"
        }
    );
    println!("  reload response (cache hit + swap): median {resp_med:.2} ms, p99 {resp_p99:.2} ms");
    println!(
        "  first reconcile by new version:     started median {start_med:.2} ms (p99 {start_p99:.2}), returned median {done_med:.2} ms (p99 {done_p99:.2})"
    );
    let opt = |d: Option<Duration>| d.map_or_else(|| "-".into(), |d| format!("{:.1}", ms(d)));
    println!(
        "  cold swap (digest never seen):      {:.1} ms to new stamp seen (reload response {:.1} ms, first reconcile returned {} ms)",
        ms(o.cold.observed),
        ms(o.cold.response),
        opt(o.cold.first_done)
    );
    println!(
        "  warm-up swap (v2's first compile):  {:.1} ms (reload response {:.1} ms)",
        ms(o.warmup.observed),
        ms(o.warmup.response)
    );
    println!(
        "  load: {} updates in {:.1} s ({:.0}/s, {} failed); {} reconciles ({} failed): {}",
        o.updates,
        o.load_secs,
        o.updates as f64 / o.load_secs,
        o.update_errors,
        o.reconciles,
        o.failed,
        o.by_version
            .iter()
            .map(|(v, n)| format!("{v} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  lost: {lost} ({} unstamped, {} stamped by an older version) of {} keys, checked until all carried {} (took {:.2} s, bound {} s)",
        o.lost_unstamped,
        o.lost_stale,
        options.keys,
        o.final_stamp,
        o.converge_secs,
        options.settle_secs
    );
    println!(
        "  overlapping: {} keys reconciled by two versions at once ({} keys with two concurrent reconciles of any version)",
        o.overlapping, o.concurrent
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` with the probe as the thread's subscriber.
    fn probed(f: impl FnOnce()) -> Probe {
        let probe = Probe::default();
        let only_controller = filter::filter_fn(|m| {
            m.target() == "wasmctrl::control::controller"
                && (m.is_event() || m.name() == "reconcile")
        });
        let subscriber =
            tracing_subscriber::registry().with(probe.clone().with_filter(only_controller));
        tracing::subscriber::with_default(subscriber, f);
        probe
    }

    fn reconcile(key: &str) -> tracing::Span {
        tracing::info_span!(target: "wasmctrl::control::controller", "reconcile", key = %key, digest = tracing::field::Empty)
    }

    fn done(span: &tracing::Span) {
        let _e = span.enter();
        tracing::debug!(target: "wasmctrl::control::controller", "reconciled");
    }

    #[test]
    fn two_versions_on_one_key_at_once_are_overlapping() {
        let probe = probed(|| {
            let a = reconcile("default/a");
            a.record("digest", "sha256:1");
            let b = reconcile("default/a");
            b.record("digest", "sha256:2");
            done(&a);
            done(&b);
        });
        let st = probe.0.lock().unwrap();
        assert_eq!(
            (st.overlapping.len(), st.concurrent.len(), st.reconciles),
            (1, 1, 2)
        );
    }

    #[test]
    fn sequential_reconciles_and_other_keys_are_not() {
        let probe = probed(|| {
            let a = reconcile("default/a");
            a.record("digest", "sha256:1");
            let other = reconcile("default/b");
            other.record("digest", "sha256:2");
            done(&a);
            // Released (disposition seen), span not closed yet.
            let b = reconcile("default/a");
            b.record("digest", "sha256:2");
            done(&b);
            done(&other);
            drop((a, b, other));
            let c = reconcile("default/a");
            c.record("digest", "sha256:1");
            done(&c);
        });
        let st = probe.0.lock().unwrap();
        assert_eq!(
            (st.overlapping.len(), st.concurrent.len(), st.reconciles),
            (0, 0, 4)
        );
        assert!(st.live.is_empty() && st.by_key.is_empty());
    }

    #[test]
    fn the_armed_digest_times_its_first_reconcile() {
        let probe = Probe::default();
        probe.arm("sha256:2");
        let p = probe.clone();
        let only_controller = filter::filter_fn(|m| m.target() == "wasmctrl::control::controller");
        let subscriber = tracing_subscriber::registry().with(p.with_filter(only_controller));
        tracing::subscriber::with_default(subscriber, || {
            let old = reconcile("default/a");
            old.record("digest", "sha256:1");
            done(&old);
            assert_eq!(probe.first(), (None, None));
            let new = reconcile("default/b");
            new.record("digest", "sha256:2");
            assert!(probe.first().0.is_some() && probe.first().1.is_none());
            done(&new);
        });
        assert!(probe.first().1.is_some());
    }

    #[test]
    fn a_custom_section_changes_the_digest_and_keeps_a_valid_component() {
        let v1 = Version::read(artifacts::STAMP_V1, "v1").unwrap();
        let fresh = v1.fresh_copy();
        assert_ne!(v1.digest, fresh.digest);
        assert_eq!(fresh.bytes[..v1.bytes.len()], v1.bytes[..]);
        let engine = wasmtime::Engine::default();
        wasmtime::component::Component::new(&engine, &*fresh.bytes).unwrap();
    }

    #[test]
    fn leb128_encodes_unsigned() {
        let enc = |n| {
            let mut v = Vec::new();
            leb128(&mut v, n);
            v
        };
        assert_eq!(enc(0), [0]);
        assert_eq!(enc(127), [127]);
        assert_eq!(enc(128), [0x80, 1]);
        assert_eq!(enc(624_485), [0xe5, 0x8e, 0x26]);
    }
}
