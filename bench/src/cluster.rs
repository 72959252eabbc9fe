//! The cluster side of the controller benchmarks: the embedded API server
//! in its own process, the benchmark CRDs (`Bench0000`, `Bench0001`, … of
//! group `bench.wasmctrl.dev/v1`, the kinds the `bench-status` plugin
//! reconciles) and their objects.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use futures::{StreamExt, TryStreamExt};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use serde_json::json;

use crate::procs::{Child, say};

pub const GROUP: &str = "bench.wasmctrl.dev";
pub const VERSION: &str = "v1";
pub const NAMESPACE: &str = "default";

/// The kind of benchmark CRD `index` (`Bench0042`).
pub fn kind(index: usize) -> String {
    format!("Bench{index:04}")
}

/// Its plural (`bench0042s`).
pub fn plural(index: usize) -> String {
    format!("bench{index:04}s")
}

pub fn api_resource(index: usize) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: kind(index),
        plural: plural(index),
    }
}

/// The hidden `serve-apiserver` subcommand: an API server on loopback that
/// writes its kubeconfig to `kubeconfig`, says `ready` and serves until
/// stdin closes.
pub fn serve(kubeconfig: &Path) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let server = wasmctrl_apiserver::ApiServer::start(wasmctrl_apiserver::Config::default())
            .await
            .context("starting the API server")?;
        server.write_kubeconfig(kubeconfig)?;
        say(&format!("ready {}", crate::heap::backend_name()));
        let mut commands = crate::procs::commands();
        while commands.recv().await.is_some() {}
        server.shutdown().await;
        anyhow::Ok(())
    })
}

/// The allocator the API server process runs on: mimalloc, unless
/// [`crate::heap::APISERVER_ENV`] names another (`system`).
pub fn apiserver_allocator() -> &'static str {
    let named = std::env::var(crate::heap::APISERVER_ENV).unwrap_or_else(|_| "mimalloc".into());
    crate::heap::backend_for(named.as_bytes())
}

/// The API server process of one benchmark run.
pub struct Cluster {
    process: Child,
    _dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
    pub client: kube::Client,
}

impl Cluster {
    pub async fn start() -> anyhow::Result<Cluster> {
        let dir = tempfile::tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig");
        let allocator = apiserver_allocator();
        let mut process = Child::spawn_with(
            "API server",
            &[
                "serve-apiserver".into(),
                "--kubeconfig".into(),
                kubeconfig.display().to_string(),
            ],
            &[(
                crate::heap::ALLOCATOR_ENV.to_str().expect("ASCII"),
                allocator,
            )],
        )?;
        let running_on = process.expect("ready", Duration::from_secs(30)).await?;
        ensure!(
            running_on == allocator,
            "the API server process runs on the {running_on} allocator, not {allocator}"
        );
        let client = client_from(&kubeconfig).await?;
        Ok(Cluster {
            process,
            _dir: dir,
            kubeconfig,
            client,
        })
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The API server process's resident memory, in MiB.
    pub fn rss_mib(&self) -> anyhow::Result<f64> {
        self.process.rss_mib()
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        self.process.stop(Duration::from_secs(10)).await
    }

    pub fn items(&self, index: usize) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), NAMESPACE, &api_resource(index))
    }

    /// Creates the benchmark CRDs `indices` and waits until each is served.
    pub async fn create_crds(&self, indices: impl Iterator<Item = usize>) -> anyhow::Result<()> {
        let crds: Api<DynamicObject> = Api::all_with(
            self.client.clone(),
            &ApiResource {
                group: "apiextensions.k8s.io".into(),
                version: "v1".into(),
                api_version: "apiextensions.k8s.io/v1".into(),
                kind: "CustomResourceDefinition".into(),
                plural: "customresourcedefinitions".into(),
            },
        );
        let indices: Vec<usize> = indices.collect();
        for &i in &indices {
            let crd: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": format!("{}.{GROUP}", plural(i))},
                "spec": {
                    "group": GROUP,
                    "scope": "Namespaced",
                    "names": {"plural": plural(i), "singular": kind(i).to_lowercase(), "kind": kind(i)},
                    "versions": [{
                        "name": VERSION, "served": true, "storage": true,
                        "subresources": {"status": {}},
                        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
                    }]
                }
            }))?;
            crds.create(&PostParams::default(), &crd)
                .await
                .with_context(|| format!("creating the CRD of {}", kind(i)))?;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for &i in &indices {
            while self
                .items(i)
                .list(&ListParams::default().limit(1))
                .await
                .is_err()
            {
                ensure!(Instant::now() < deadline, "{} is not served", kind(i));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(())
    }

    /// Creates objects `names` of kind `index` (`spec.seq: 1`), `in_flight`
    /// requests at a time; with `idle`, also sets their status as the
    /// reconciler would (`observed: 1`), so a controller finds nothing to do.
    pub async fn create_items(
        &self,
        index: usize,
        names: impl Iterator<Item = String>,
        in_flight: usize,
        idle: bool,
    ) -> anyhow::Result<()> {
        let api = self.items(index);
        let kind = kind(index);
        futures::stream::iter(names)
            .map(|name| {
                let (api, kind) = (api.clone(), kind.clone());
                async move {
                    let obj: DynamicObject = serde_json::from_value(json!({
                        "apiVersion": format!("{GROUP}/{VERSION}"),
                        "kind": kind,
                        "metadata": {"name": name},
                        "spec": {"seq": 1},
                    }))?;
                    api.create(&PostParams::default(), &obj)
                        .await
                        .with_context(|| format!("creating {name}"))?;
                    if idle {
                        let status = json!({"status": {"observed": 1, "startedAt": 0}});
                        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                            .await
                            .with_context(|| format!("setting the status of {name}"))?;
                    }
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(in_flight)
            .try_for_each(|()| async { Ok(()) })
            .await
    }

    /// The resourceVersion of a list of kind `index` now: where a watch
    /// that must miss nothing from now on starts.
    pub async fn resource_version(&self, index: usize) -> anyhow::Result<String> {
        Ok(self
            .items(index)
            .list(&ListParams::default().limit(1))
            .await?
            .metadata
            .resource_version
            .unwrap_or_default())
    }

    /// Starts watching kind 0 from now; the task ends when `n` objects
    /// have had a status with `observed: 1` written (each counted once),
    /// with when the last was seen.
    pub async fn watch_observed(
        &self,
        n: usize,
    ) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<Instant>>> {
        let api = self.items(0);
        let rv = self.resource_version(0).await?;
        Ok(tokio::spawn(async move {
            let mut done = HashSet::with_capacity(n);
            let stream = api.watch(&WatchParams::default(), &rv).await?;
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.try_next().await? {
                if let WatchEvent::Modified(o) = ev
                    && seq_and_observed(&o).1 == Some(1)
                    && let Some(name) = o.metadata.name
                {
                    done.insert(name);
                    if done.len() == n {
                        return anyhow::Ok(Instant::now());
                    }
                }
            }
            anyhow::bail!("the status watch ended after {} of {n} objects", done.len())
        }))
    }

    /// Deletes every object of kind `index` and waits until they are gone.
    pub async fn delete_items(&self, index: usize) -> anyhow::Result<()> {
        let api = self.items(index);
        api.delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .context("deleting the objects")?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while !api
            .list(&ListParams::default().limit(1))
            .await?
            .items
            .is_empty()
        {
            ensure!(
                Instant::now() < deadline,
                "objects of {} still there after 60 s",
                kind(index)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }
}

/// A kube-rs client from a kubeconfig file.
pub async fn client_from(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let text = std::fs::read_to_string(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let kc = kube::config::Kubeconfig::from_yaml(&text)?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await?;
    Ok(kube::Client::try_from(config)?)
}

/// `spec.seq` and `status.observed` of a benchmark object.
pub fn seq_and_observed(o: &DynamicObject) -> (u64, Option<u64>) {
    let seq = o.data["spec"]["seq"].as_u64().unwrap_or(0);
    let observed = o.data.get("status").and_then(|s| s["observed"].as_u64());
    (seq, observed)
}

/// `status.startedAt` of a benchmark object (Unix nanoseconds).
pub fn started_at(o: &DynamicObject) -> Option<u64> {
    o.data.get("status").and_then(|s| s["startedAt"].as_u64())
}

/// The sum of the series of `family` (e.g. `wasmctrl_shadow_runs_total`)
/// whose labels include every one of `labels`, in the `/metrics` of the
/// wasm host whose admin address is `admin` (0 when there is none).
pub async fn metric_sum(admin: SocketAddr, family: &str, labels: &[&str]) -> anyhow::Result<f64> {
    let (status, body) = crate::hotswap::http(admin, "GET", "/metrics").await?;
    ensure!(status == 200, "/metrics answered {status}");
    let open = format!("{family}{{");
    Ok(body
        .lines()
        .filter(|l| l.starts_with(&open) || l.starts_with(&format!("{family} ")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        // Not `sum()`: an empty float sum is -0.0.
        .fold(0.0, |a, b| a + b))
}
