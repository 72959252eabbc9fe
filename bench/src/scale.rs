//! `scale`: the wasm host with 1k, 10k and 100k objects of its kind
//! pre-loaded (status already set, so every reconcile finds nothing to
//! write: the host's own costs are measured, not the API server's writes).
//!
//! For each size, objects are topped up, then a fresh host process starts:
//! - **sync**: from starting the process to every object cached and
//!   reconciled once (ready, then the initial queue drained);
//! - **RSS** after `--settle-secs` idle (the host's, and the API server
//!   process's), and beside it the objects' JSON
//!   size, as the API server serves them and as the host caches them
//!   (without managedFields, `cache.stripManagedFields`), so the host's
//!   memory per cached object beyond the JSON it holds can be read off
//!   against a run with no objects;
//! - **drain**: the host queues every key again (`POST
//!   /plugins/{name}/reload`, the host's full re-enqueue) and the time until
//!   every key has been reconciled.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use kube::api::ListParams;
use serde::Serialize;

use crate::cluster::Cluster;
use crate::controllers::{ControllerArgs, Synced, Variant, resync, start_synced};
use crate::stats::{load_average, round};
use crate::throughput::{wasm_config, write_wasm_host};

/// The host's goals at a size: sync seconds, bytes per object beyond the
/// cached JSON, and (at a million) seconds to drain a full resync.
struct Goals {
    sync_s: f64,
    bytes_per_object: f64,
    drain_s: Option<f64>,
}

fn goals(objects: usize) -> Goals {
    if objects >= 1_000_000 {
        Goals {
            sync_s: 10.0,
            bytes_per_object: 512.0,
            drain_s: Some(5.0),
        }
    } else {
        Goals {
            sync_s: 30.0,
            bytes_per_object: 1024.0,
            drain_s: None,
        }
    }
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

#[derive(Debug, Clone)]
pub struct Options {
    pub objects: Vec<usize>,
    pub concurrency: usize,
    pub settle_secs: f64,
    /// `Wasm` or `WasmReuse`.
    pub variant: Variant,
    pub json: bool,
}

#[derive(Serialize)]
struct JsonLine {
    scenario: &'static str,
    objects: usize,
    sync_s: f64,
    rss_mib: f64,
    drain_s: f64,
    json_mib: f64,
    cached_json_mib: f64,
    /// The API server process's RSS holding the objects.
    apiserver_rss_mib: f64,
}

struct Row {
    objects: usize,
    ready_s: f64,
    sync_s: f64,
    rss_mib: f64,
    /// Live heap bytes (the counting allocator), in MiB.
    heap_mib: f64,
    drain_s: f64,
    /// Average JSON size of an object as the API server serves it.
    json_bytes: f64,
    /// The same without managedFields, as the host caches it.
    cached_json_bytes: f64,
    /// The API server process's RSS, after the host's sync.
    apiserver_rss_mib: f64,
}

/// The average JSON size of the objects, from one page of a list: as
/// served, and as cached (without managedFields).
async fn json_bytes_per_object(cluster: &Cluster) -> anyhow::Result<(f64, f64)> {
    let page = cluster
        .items(0)
        .list(&ListParams::default().limit(500))
        .await?;
    if page.items.is_empty() {
        return Ok((0.0, 0.0));
    }
    let n = page.items.len() as f64;
    let size = |o: &_| serde_json::to_vec(o).map_or(0, |v| v.len());
    let served: usize = page.items.iter().map(size).sum();
    let cached: usize = page
        .items
        .into_iter()
        .map(|mut o| {
            o.metadata.managed_fields = None;
            size(&o)
        })
        .sum();
    Ok((served as f64 / n, cached as f64 / n))
}

async fn one(
    cluster: &Cluster,
    config: &std::path::Path,
    objects: usize,
    options: &Options,
) -> anyhow::Result<Row> {
    let args = ControllerArgs {
        variant: options.variant,
        kubeconfig: cluster.kubeconfig.clone(),
        concurrency: options.concurrency,
        config: Some(config.to_path_buf()),
        hot: None,
        count_heap: true,
    };
    let Synced {
        mut child,
        ready_s,
        synced_s: sync_s,
    } = start_synced(&args, Duration::from_secs(300), Duration::from_secs(600)).await?;
    tokio::time::sleep(Duration::from_secs_f64(options.settle_secs)).await;
    let rss_mib = child.rss_mib()?;
    let apiserver_rss_mib = cluster.rss_mib()?;
    child.send("heap").await?;
    let heap_bytes: f64 = child
        .expect("heap", Duration::from_secs(10))
        .await?
        .parse()
        .context("heap line")?;
    let drain_s = resync(&mut child, Duration::from_secs(600))
        .await?
        .drain_s();
    child.stop(Duration::from_secs(60)).await?;
    let (json_bytes, cached_json_bytes) = json_bytes_per_object(cluster).await?;
    Ok(Row {
        objects,
        ready_s,
        sync_s,
        rss_mib,
        heap_mib: heap_bytes / (1024.0 * 1024.0),
        drain_s,
        json_bytes,
        cached_json_bytes,
        apiserver_rss_mib,
    })
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    let mut sizes = options.objects.clone();
    sizes.sort_unstable();
    sizes.dedup();
    ensure!(!sizes.is_empty(), "no size to run");
    ensure!(
        matches!(options.variant, Variant::Wasm | Variant::WasmReuse),
        "scale measures the wasm host: --variant wasm or wasm-reuse"
    );
    let load_before = load_average();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (baseline, rows) = runtime.block_on(async {
        let cluster = Cluster::start().await?;
        cluster.create_crds(0..1).await?;
        let dir = tempfile::tempdir()?;
        write_wasm_host(dir.path(), options.concurrency)?;
        let config = wasm_config(dir.path(), options.variant);
        let baseline = one(&cluster, &config, 0, options).await?;
        let mut rows = Vec::new();
        let mut have = 0;
        for &n in &sizes {
            cluster
                .create_items(0, (have..n).map(|i| format!("item-{i}")), 32, true)
                .await?;
            have = n;
            rows.push(one(&cluster, &config, n, options).await?);
        }
        cluster.stop().await?;
        anyhow::Ok((baseline, rows))
    })?;
    // Host memory per object beyond the JSON it caches, against the empty
    // host.
    let beyond = |r: &Row| {
        (r.rss_mib - baseline.rss_mib) * 1024.0 * 1024.0 / r.objects.max(1) as f64
            - r.cached_json_bytes
    };
    let heap_beyond = |r: &Row| {
        (r.heap_mib - baseline.heap_mib) * 1024.0 * 1024.0 / r.objects.max(1) as f64
            - r.cached_json_bytes
    };
    let mib = |bytes: f64, r: &Row| bytes * r.objects as f64 / (1024.0 * 1024.0);
    if options.json {
        for r in &rows {
            let line = JsonLine {
                scenario: "scale",
                objects: r.objects,
                sync_s: round(r.sync_s, 2),
                rss_mib: round(r.rss_mib, 1),
                drain_s: round(r.drain_s, 2),
                json_mib: round(mib(r.json_bytes, r), 1),
                cached_json_mib: round(mib(r.cached_json_bytes, r), 1),
                apiserver_rss_mib: round(r.apiserver_rss_mib, 1),
            };
            println!("{}", serde_json::to_string(&line)?);
        }
        return Ok(());
    }
    println!(
        "scale: {} host, concurrency {}, {} CPUs, load {load_before} before / {} after",
        options.variant.name(),
        options.concurrency,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    println!(
        "  {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>11} {:>9} {:>13} {:>14} {:>15} {:>11}",
        "objects",
        "ready s",
        "sync s",
        "RSS MiB",
        "heap MiB",
        "JSON MiB",
        "cached MiB",
        "drain s",
        "keys/s drain",
        "RSS B/obj>JSON",
        "heap B/obj>JSON",
        "API RSS MiB"
    );
    println!(
        "  {:>8} {:>8.2} {:>8.2} {:>9.1} {:>9.1} {:>9} {:>11} {:>9.3} {:>13} {:>14} {:>15} {:>11.1}",
        0,
        baseline.ready_s,
        baseline.sync_s,
        baseline.rss_mib,
        baseline.heap_mib,
        "-",
        "-",
        baseline.drain_s,
        "-",
        "-",
        "-",
        baseline.apiserver_rss_mib
    );
    for r in &rows {
        println!(
            "  {:>8} {:>8.2} {:>8.2} {:>9.1} {:>9.1} {:>9.1} {:>11.1} {:>9.3} {:>13.0} {:>14.0} {:>15.0} {:>11.1}",
            r.objects,
            r.ready_s,
            r.sync_s,
            r.rss_mib,
            r.heap_mib,
            mib(r.json_bytes, r),
            mib(r.cached_json_bytes, r),
            r.drain_s,
            r.objects as f64 / r.drain_s.max(1e-9),
            beyond(r),
            heap_beyond(r),
            r.apiserver_rss_mib
        );
    }
    if let Some(r) = rows.iter().max_by_key(|r| r.objects) {
        let goal = goals(r.objects);
        println!(
            "  {} objects: sync {:.1} s (goal <= {:.0} s: {}), {:.0} B/object beyond the cached JSON (goal <= {:.0}: {})",
            r.objects,
            r.sync_s,
            goal.sync_s,
            verdict(r.sync_s <= goal.sync_s),
            beyond(r),
            goal.bytes_per_object,
            verdict(beyond(r) <= goal.bytes_per_object),
        );
        if let Some(drain) = goal.drain_s {
            println!(
                "  full resync drained in {:.1} s (goal <= {drain:.0} s: {})",
                r.drain_s,
                verdict(r.drain_s <= drain)
            );
        }
        let json = mib(r.json_bytes, r);
        println!(
            "  API server: {:.1} MiB RSS holding {json:.1} MiB of objects' JSON ({:.2}x; goal <= 2x: {})",
            r.apiserver_rss_mib,
            r.apiserver_rss_mib / json.max(1e-9),
            verdict(r.apiserver_rss_mib <= 2.0 * json)
        );
    }
    Ok(())
}
