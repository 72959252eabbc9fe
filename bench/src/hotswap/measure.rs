//! One run: the API server, the host running `stamp`, the load, and the
//! measured swaps.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use wasmctrl::config::HostConfig;
use wasmctrl::ops::manager::{Manager, ManagerOptions};
use wasmctrl_apiserver::ApiServer;
use wasmctrl_plugin_artifacts as artifacts;

use super::admin::http;
use super::keys::{NAMESPACE, converge, key_name};
use super::probe::Probe;
use super::version::Version;
use super::watch::{Awaited, LabelProbe, watch_labels};
use super::writer::spawn_writer;
use crate::apiserver::client_for;

const CONFIG: &str = r#"
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
shutdownTimeout: 10s
# Compiled components are kept by digest: a swap back to a version loaded
# before is a cache hit, as in a deployment (the in-memory cache holds only
# the versions running).
runtime:
  cacheDir: cache
plugins:
  - name: stamp
    path: stamp.wasm
    maxConcurrentReconciles: 2
    reconcileTimeout: 5s
    namespaces: [default]
    permissions:
      - { group: "", resources: [configmaps], verbs: [get, list, watch, patch] }
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

/// One measured swap.
pub(super) struct Swap {
    /// Reload request → first ConfigMap with the new stamp seen by the watch.
    pub(super) observed: Duration,
    /// Reload request → reload response (compile/cache, metadata, swap).
    pub(super) response: Duration,
    /// Reload request → first reconcile by the new digest returned (spans).
    pub(super) first_done: Option<Duration>,
    /// Reload request → first reconcile by the new digest started (spans).
    pub(super) first_start: Option<Duration>,
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

pub(super) struct Outcome {
    pub(super) swaps: Vec<Swap>,
    pub(super) warmup: Swap,
    pub(super) cold: Swap,
    pub(super) lost_unstamped: usize,
    pub(super) lost_stale: usize,
    pub(super) converge_secs: f64,
    pub(super) updates: u64,
    pub(super) update_errors: u64,
    pub(super) load_secs: f64,
    pub(super) reconciles: u64,
    pub(super) failed: u64,
    pub(super) by_version: Vec<(String, u64)>,
    pub(super) concurrent: usize,
    pub(super) overlapping: usize,
    pub(super) final_stamp: &'static str,
}

pub(super) async fn measure(options: &Options, probe: &Probe) -> anyhow::Result<Outcome> {
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
