//! `density`: the memory of one host running 1, 10 and 100 plugins, idle
//! after sync, beside one idle kube-rs controller process.
//!
//! The 100 plugins are 100 distinct components made from the one
//! `bench-status` build by rewriting the four digits of its kind in the
//! component's bytes (`Bench0000` → `Bench0042`, `bench0000s` →
//! `bench0042s`; same length, so still a valid component, with its own
//! digest: nothing is shared by the compile cache). Plugin *i* reconciles
//! its own CRD `Bench<i>`, which holds `--objects` objects.
//!
//! For each plugin count: start the host process (API server in its own
//! process), wait until it is ready and idle (every object reconciled), let
//! it sit for `--settle-secs`, and read its RSS (`VmRSS`). Then the wake-up
//! time: one object of each of up to 5 plugins is written, one at a time,
//! and the time from the write's response to its new status being seen is
//! measured (`wake_ms`, the median).
//!
//! Each plugin count runs twice: plugins always resident
//! (`idle_unload: false`), and with `idleUnload: --idle-unload` (`true`):
//! the RSS is read once every plugin's code was unloaded, and `wake_ms` is
//! then the first reconcile of a plugin that must load its code again from
//! the on-disk compiled cache.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use futures::TryStreamExt;
use kube::api::{Patch, PatchParams, WatchEvent, WatchParams};
use serde::Serialize;
use serde_json::json;
use wasmctrl_plugin_artifacts as artifacts;

use crate::cluster::{self, Cluster};
use crate::controllers::{ControllerArgs, Variant, child_args, host_config};
use crate::procs::Child;
use crate::stats::{load_average, round};

/// The goals for 100 plugins: resident, unloaded, and the wake-up.
const GOAL_RSS_MIB: f64 = 150.0;
const GOAL_UNLOADED_RSS_MIB: f64 = 80.0;
const GOAL_WAKE_MS: f64 = 20.0;
/// Plugins written to when timing a wake-up.
const WAKES: usize = 5;

#[derive(Debug, Clone)]
pub struct Options {
    pub plugins: Vec<usize>,
    pub objects: usize,
    pub settle_secs: f64,
    /// `idleUnload` of the second row of each count (None: no such row).
    pub idle_unload: Option<String>,
    pub json: bool,
}

#[derive(Serialize)]
struct JsonLine {
    scenario: &'static str,
    variant: &'static str,
    plugins: usize,
    idle_unload: bool,
    rss_mib: f64,
    wake_ms: f64,
}

struct Row {
    variant: Variant,
    plugins: usize,
    idle_unload: bool,
    rss_mib: f64,
    /// Live heap (the counting allocator); the rest of the RSS is compiled
    /// code, stacks, instance slots' touched pages, and allocator slack.
    heap_mib: f64,
    map: crate::procs::MemoryMap,
    wake_ms: Option<f64>,
    ready_secs: f64,
}

/// Component `index`: the `bench-status` component with its kind's digits
/// replaced.
pub fn component(original: &[u8], index: usize) -> anyhow::Result<Vec<u8>> {
    ensure!(index < 10_000, "at most 10000 distinct components");
    let mut bytes = original.to_vec();
    let mut replaced = 0;
    for (from, to) in [
        (b"Bench0000".as_slice(), cluster::kind(index)),
        (b"bench0000".as_slice(), format!("bench{index:04}")),
    ] {
        let to = to.as_bytes();
        let mut i = 0;
        while i + from.len() <= bytes.len() {
            if &bytes[i..i + from.len()] == from {
                bytes[i..i + from.len()].copy_from_slice(to);
                replaced += 1;
                i += from.len();
            } else {
                i += 1;
            }
        }
    }
    if replaced < 2 {
        bail!("the bench-status component does not embed its kind as expected");
    }
    Ok(bytes)
}

/// The live heap of a child started with `--count-heap`, in MiB.
async fn heap_mib(child: &mut Child) -> anyhow::Result<f64> {
    child.send("heap").await?;
    let bytes: f64 = child
        .expect("heap", Duration::from_secs(10))
        .await?
        .parse()
        .context("heap line")?;
    Ok(bytes / (1024.0 * 1024.0))
}

/// Writes one object of kind `index` and times response → status seen.
async fn wake(cluster: &Cluster, index: usize) -> anyhow::Result<f64> {
    let api = cluster.items(index);
    let rv = cluster.resource_version(index).await?;
    let stream = api.watch(&WatchParams::default(), &rv).await?;
    let mut stream = std::pin::pin!(stream);
    let written = api
        .patch(
            "item-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"seq": 2}})),
        )
        .await?;
    let answered = Instant::now();
    ensure!(cluster::seq_and_observed(&written).0 == 2, "write lost");
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(ev) = stream.try_next().await? {
            if let WatchEvent::Modified(o) = ev
                && o.metadata.name.as_deref() == Some("item-0")
                && cluster::seq_and_observed(&o).1 == Some(2)
            {
                return anyhow::Ok(Instant::now());
            }
        }
        bail!("the watch ended")
    })
    .await
    .context("no status within 30 s")??;
    Ok((seen - answered).as_secs_f64() * 1e3)
}

async fn host_row(
    cluster: &Cluster,
    dir: &std::path::Path,
    plugins: usize,
    idle_unload: Option<&str>,
    options: &Options,
) -> anyhow::Result<Row> {
    let config = dir.join(format!("host-{plugins}.yaml"));
    std::fs::write(
        &config,
        host_config(
            plugins,
            1,
            "fresh",
            idle_unload.map(|d| ("idleUnload", d)).as_slice(),
        ),
    )?;
    let args = ControllerArgs {
        variant: Variant::Wasm,
        kubeconfig: cluster.kubeconfig.clone(),
        concurrency: 1,
        config: Some(config),
        hot: None,
        count_heap: true,
    };
    let started = Instant::now();
    let mut child = Child::spawn("wasm host", &child_args(&args))?;
    child.expect("ready", Duration::from_secs(900)).await?;
    child.send("idle").await?;
    child.expect("idle", Duration::from_secs(120)).await?;
    let ready_secs = started.elapsed().as_secs_f64();
    if idle_unload.is_some() {
        child.send("unloaded").await?;
        child.expect("unloaded", Duration::from_secs(300)).await?;
    }
    tokio::time::sleep(Duration::from_secs_f64(options.settle_secs)).await;
    let rss_mib = child.rss_mib()?;
    let heap_mib = heap_mib(&mut child).await?;
    let map = child.memory_map()?;
    let mut wakes = Vec::new();
    for i in (0..plugins).step_by((plugins / WAKES).max(1)).take(WAKES) {
        wakes.push(wake(cluster, i).await?);
        // Back to seq 1 for the next host.
        let api = cluster.items(i);
        api.patch(
            "item-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"seq": 1}})),
        )
        .await?;
    }
    child.send("idle").await?;
    child.expect("idle", Duration::from_secs(60)).await?;
    child.stop(Duration::from_secs(30)).await?;
    wakes.sort_by(f64::total_cmp);
    Ok(Row {
        variant: Variant::Wasm,
        plugins,
        idle_unload: idle_unload.is_some(),
        rss_mib,
        heap_mib,
        map,
        wake_ms: wakes.get((wakes.len().max(1) - 1) / 2).copied(),
        ready_secs,
    })
}

async fn kube_rs_row(cluster: &Cluster, options: &Options) -> anyhow::Result<Row> {
    let args = ControllerArgs {
        variant: Variant::KubeRs,
        kubeconfig: cluster.kubeconfig.clone(),
        concurrency: 1,
        config: None,
        hot: None,
        count_heap: true,
    };
    let started = Instant::now();
    let mut child = Child::spawn("kube-rs", &child_args(&args))?;
    child.expect("ready", Duration::from_secs(60)).await?;
    child.send("idle").await?;
    child.expect("idle", Duration::from_secs(60)).await?;
    let ready_secs = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs_f64(options.settle_secs)).await;
    let rss_mib = child.rss_mib()?;
    let heap_mib = heap_mib(&mut child).await?;
    let map = child.memory_map()?;
    let wake_ms = wake(cluster, 0).await?;
    cluster
        .items(0)
        .patch(
            "item-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"seq": 1}})),
        )
        .await?;
    child.stop(Duration::from_secs(30)).await?;
    Ok(Row {
        variant: Variant::KubeRs,
        plugins: 1,
        idle_unload: false,
        rss_mib,
        heap_mib,
        map,
        wake_ms: Some(wake_ms),
        ready_secs,
    })
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    ensure!(
        options.plugins.iter().all(|&n| (1..=10_000).contains(&n)),
        "--plugins must be between 1 and 10000"
    );
    ensure!(options.objects > 0, "--objects must be at least 1");
    let most = options.plugins.iter().copied().max().unwrap_or(1);
    let load_before = load_average();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let rows = runtime.block_on(async {
        let cluster = Cluster::start().await?;
        cluster.create_crds(0..most).await?;
        for i in 0..most {
            cluster
                .create_items(
                    i,
                    (0..options.objects).map(|j| format!("item-{j}")),
                    8,
                    false,
                )
                .await?;
        }
        let dir = tempfile::tempdir()?;
        let original = std::fs::read(artifacts::BENCH_STATUS)
            .with_context(|| format!("reading {}", artifacts::BENCH_STATUS))?;
        for i in 0..most {
            std::fs::write(
                dir.path().join(format!("bench-{i:04}.wasm")),
                component(&original, i)?,
            )?;
        }
        let mut rows = vec![kube_rs_row(&cluster, options).await?];
        for &n in &options.plugins {
            rows.push(host_row(&cluster, dir.path(), n, None, options).await?);
            if let Some(idle) = &options.idle_unload {
                rows.push(host_row(&cluster, dir.path(), n, Some(idle), options).await?);
            }
        }
        cluster.stop().await?;
        anyhow::Ok(rows)
    })?;
    if options.json {
        for r in &rows {
            let line = JsonLine {
                scenario: "density",
                variant: if r.variant == Variant::Wasm {
                    "wasmctrl"
                } else {
                    "kube-rs"
                },
                plugins: r.plugins,
                idle_unload: r.idle_unload,
                rss_mib: round(r.rss_mib, 1),
                wake_ms: round(r.wake_ms.unwrap_or(0.0), 2),
            };
            println!("{}", serde_json::to_string(&line)?);
        }
        return Ok(());
    }
    println!(
        "density: {} objects per CRD, idle {} s before RSS is read, {} CPUs, load {load_before} before / {} after",
        options.objects,
        options.settle_secs,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    println!(
        "  {:<22} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>13}",
        "process",
        "plugins",
        "unload",
        "RSS MiB",
        "heap",
        "anon",
        "JIT code",
        "pools",
        "files",
        "wake ms",
        "ready+idle s"
    );
    for r in &rows {
        let name = match r.variant {
            Variant::Wasm => "wasmctrl host",
            _ => "kube-rs controller",
        };
        println!(
            "  {:<22} {:>8} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8.2} {:>13.1}",
            name,
            r.plugins,
            if r.idle_unload { "yes" } else { "no" },
            r.rss_mib,
            r.heap_mib,
            r.map.anon,
            r.map.jit_code,
            r.map.reservations,
            r.map.files,
            r.wake_ms.unwrap_or(0.0),
            r.ready_secs
        );
    }
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    for r in rows
        .iter()
        .filter(|r| r.variant == Variant::Wasm && r.plugins == 100)
    {
        if r.idle_unload {
            let wake = r.wake_ms.unwrap_or(f64::INFINITY);
            println!(
                "  100 plugins, idleUnload: {:.1} MiB (goal <= {GOAL_UNLOADED_RSS_MIB:.0} MiB: {}), wake {wake:.1} ms (goal <= {GOAL_WAKE_MS:.0} ms: {})",
                r.rss_mib,
                verdict(r.rss_mib <= GOAL_UNLOADED_RSS_MIB),
                verdict(wake <= GOAL_WAKE_MS)
            );
        } else {
            println!(
                "  100 plugins: {:.1} MiB (goal <= {GOAL_RSS_MIB:.0} MiB: {})",
                r.rss_mib,
                verdict(r.rss_mib <= GOAL_RSS_MIB)
            );
        }
    }
    if let Some(k) = rows.iter().find(|r| r.variant == Variant::KubeRs) {
        println!(
            "  100 kube-rs controller processes: ~{:.0} MiB (100 x {:.1} MiB)",
            100.0 * k.rss_mib,
            k.rss_mib
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_differ_and_stay_valid() {
        let original = std::fs::read(artifacts::BENCH_STATUS).unwrap();
        let a = component(&original, 7).unwrap();
        let b = component(&original, 42).unwrap();
        assert_eq!(a.len(), original.len());
        assert_ne!(wasmctrl::sandbox::digest(&a), wasmctrl::sandbox::digest(&b));
        let find = |bytes: &[u8], s: &str| bytes.windows(s.len()).any(|w| w == s.as_bytes());
        assert!(find(&b, "Bench0042") && find(&b, "bench0042s"));
        assert!(!find(&b, "Bench0000") && !find(&b, "bench0000"));
        let engine = wasmtime::Engine::default();
        wasmtime::component::Component::new(&engine, &b).unwrap();
    }
}
