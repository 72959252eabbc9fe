//! `startup`: from starting a host process with `--plugins` distinct
//! plugins (density's components: one `bench-status` build with its kind
//! rewritten per plugin, so no two share a digest) to every plugin's object
//! reconciled, twice in a row against the same `runtime.cacheDir`:
//! - **cold**: the cache is empty, so every component is compiled;
//! - **warm**: the compiled components of the cold run are in the cache.
//!
//! Each run reports when the first plugin's object was reconciled (plugins
//! load in the background in config order, and each reconciles as soon as
//! it has loaded: the host serves its first plugins while the rest
//! compile), when the host said it was ready (every plugin loaded,
//! informers synced, workers started), and when its queues first drained
//! after that (every plugin's object reconciled once). The first plugin's
//! object is changed before each run, so its reconcile is seen as a
//! status change.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use futures::TryStreamExt;
use kube::api::{Patch, PatchParams, WatchEvent, WatchParams};
use serde::Serialize;
use wasmctrl_plugin_artifacts as artifacts;

use crate::cluster::{self, Cluster};
use crate::controllers::{ControllerArgs, Variant, host_config, start_synced};
use crate::density::component;
use crate::stats::{load_average, round};

/// From start to every plugin's object reconciled, with `GOAL_PLUGINS`.
const GOAL_PLUGINS: usize = 100;
const GOAL_WARM_S: f64 = 1.0;
const GOAL_COLD_S: f64 = 20.0;

#[derive(Debug, Clone)]
pub struct Options {
    pub plugins: usize,
    pub json: bool,
}

#[derive(Serialize)]
struct JsonLine {
    scenario: &'static str,
    cache: &'static str,
    plugins: usize,
    first_s: f64,
    ready_s: f64,
    reconciled_s: f64,
}

struct Run {
    cache: &'static str,
    first_s: f64,
    ready_s: f64,
    reconciled_s: f64,
}

/// Sets the first plugin's object to `seq`, and returns a task that
/// resolves when its status shows it.
async fn first_reconcile(
    cluster: &Cluster,
    seq: u64,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<std::time::Instant>>> {
    let api = cluster.items(0);
    let rv = cluster.resource_version(0).await?;
    let stream = api.watch(&WatchParams::default(), &rv).await?;
    api.patch(
        "item-0",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"seq": seq}})),
    )
    .await?;
    Ok(tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.try_next().await? {
            if let WatchEvent::Modified(o) = ev
                && o.metadata.name.as_deref() == Some("item-0")
                && cluster::seq_and_observed(&o).1 == Some(seq)
            {
                return Ok(std::time::Instant::now());
            }
        }
        bail!("the watch of the first plugin's object ended")
    }))
}

async fn one(
    cluster: &Cluster,
    config: &std::path::Path,
    cache: &'static str,
    seq: u64,
) -> anyhow::Result<Run> {
    let first = first_reconcile(cluster, seq).await?;
    let args = ControllerArgs {
        variant: Variant::Wasm,
        kubeconfig: cluster.kubeconfig.clone(),
        concurrency: 1,
        config: Some(config.to_path_buf()),
        hot: None,
        count_heap: false,
    };
    let started = std::time::Instant::now();
    let host = start_synced(&args, Duration::from_secs(900), Duration::from_secs(300)).await?;
    let first_s = tokio::time::timeout(Duration::from_secs(60), first)
        .await
        .context("the first plugin's object was not reconciled")???
        .duration_since(started)
        .as_secs_f64();
    host.child.stop(Duration::from_secs(30)).await?;
    Ok(Run {
        cache,
        first_s,
        ready_s: host.ready_s,
        reconciled_s: host.synced_s,
    })
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    ensure!(
        (1..=10_000).contains(&options.plugins),
        "--plugins must be between 1 and 10000"
    );
    let load_before = load_average();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let runs = runtime.block_on(async {
        let cluster = Cluster::start().await?;
        cluster.create_crds(0..options.plugins).await?;
        for i in 0..options.plugins {
            cluster
                .create_items(i, std::iter::once("item-0".to_string()), 8, false)
                .await?;
        }
        let dir = tempfile::tempdir()?;
        let original = std::fs::read(artifacts::BENCH_STATUS)
            .with_context(|| format!("reading {}", artifacts::BENCH_STATUS))?;
        for i in 0..options.plugins {
            std::fs::write(
                dir.path().join(format!("bench-{i:04}.wasm")),
                component(&original, i)?,
            )?;
        }
        // `host_config` keeps compiled components in `compiled/` beside it.
        let config = dir.path().join("host.yaml");
        std::fs::write(&config, host_config(options.plugins, 1, "fresh", &[]))?;
        let cold = one(&cluster, &config, "cold", 10).await?;
        let warm = one(&cluster, &config, "warm", 11).await?;
        cluster.stop().await?;
        anyhow::Ok([cold, warm])
    })?;
    if options.json {
        for r in &runs {
            let line = JsonLine {
                scenario: "startup",
                cache: r.cache,
                plugins: options.plugins,
                first_s: round(r.first_s, 3),
                ready_s: round(r.ready_s, 3),
                reconciled_s: round(r.reconciled_s, 3),
            };
            println!("{}", serde_json::to_string(&line)?);
        }
        return Ok(());
    }
    println!(
        "startup: {} plugins, {} CPUs, load {load_before} before / {} after",
        options.plugins,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    println!(
        "  {:<6} {:>9} {:>9} {:>14}",
        "cache", "first s", "ready s", "reconciled s"
    );
    for r in &runs {
        println!(
            "  {:<6} {:>9.3} {:>9.3} {:>14.3}",
            r.cache, r.first_s, r.ready_s, r.reconciled_s
        );
    }
    let [cold, warm] = &runs;
    if options.plugins == GOAL_PLUGINS {
        let verdict = |s: f64, goal: f64| if s <= goal { "met" } else { "MISSED" };
        println!(
            "  every plugin's object reconciled: warm {:.2} s (goal <= {GOAL_WARM_S:.0} s: {}), cold {:.2} s (goal <= {GOAL_COLD_S:.0} s: {})",
            warm.reconciled_s,
            verdict(warm.reconciled_s, GOAL_WARM_S),
            cold.reconciled_s,
            verdict(cold.reconciled_s, GOAL_COLD_S),
        );
    } else {
        println!(
            "  every plugin's object reconciled: warm {:.2} s, cold {:.2} s ({:.1} and {:.1} ms per plugin; the goals are for {GOAL_PLUGINS} plugins)",
            warm.reconciled_s,
            cold.reconciled_s,
            warm.reconciled_s * 1e3 / options.plugins as f64,
            cold.reconciled_s * 1e3 / options.plugins as f64,
        );
    }
    Ok(())
}
