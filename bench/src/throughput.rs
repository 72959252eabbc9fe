//! `throughput`: N objects of a test CRD, each needing one reconcile that
//! reads the object from the cache and patches its status, for every
//! controller variant (`wasm`, `native`, `kube-rs`, see
//! [`crate::controllers`]) on the same API server and the same keys.
//!
//! A round of one variant: start its controller process and wait until it
//! is ready (cache synced, workers running, nothing to do); then create the
//! N objects (`spec.seq: 1`, 32 creates in flight from this process) while a
//! watch counts the objects whose `status.observed` became 1. Reported:
//! reconciles/s = N / (first create → last such status seen), and the CPU
//! seconds the controller process used over that time. The objects are then
//! deleted (controller stopped first) for the next round. Rounds rotate the
//! order of the variants; each variant's figures are the median over rounds.
//! Warm-up rounds run first and are not measured: the API server's CPU per
//! round climbs while its watch history and event ring fill (the first few
//! variant rounds of a run cost it ~25% less), so without them whichever
//! variant opens the run gets a cheaper API server.

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use serde::Serialize;
use wasmctrl_plugin_artifacts as artifacts;

use crate::cluster::{Cluster, metric_sum};
use crate::controllers::{ControllerArgs, Variant, child_args, host_config};
use crate::procs::{Child, cpu_seconds};
use crate::stats::{load_average, median, round};

/// Creates in flight while the objects are created.
const CREATES_IN_FLIGHT: usize = 32;

#[derive(Debug, Clone)]
pub struct Options {
    pub objects: usize,
    pub rounds: usize,
    /// Unmeasured rounds (every variant once each) before the measured ones.
    pub warmup: usize,
    pub concurrency: usize,
    pub variants: Vec<Variant>,
    pub json: bool,
}

#[derive(Serialize)]
struct JsonLine {
    scenario: &'static str,
    variant: &'static str,
    objects: usize,
    reconciles_per_s: f64,
    cpu_s: f64,
}

struct Round {
    variant: Variant,
    secs: f64,
    cpu_s: f64,
    /// Seconds the creates alone took (the load generator's share).
    create_secs: f64,
    /// CPU seconds of the API server process and of this process (the
    /// load generator and the status watch) over the same time.
    server_cpu_s: f64,
    driver_cpu_s: f64,
    /// Reconciles the wasm host ran and skipped (`skipUnchanged`) over the
    /// round, from its `/metrics`; None for the other variants.
    calls: Option<(f64, f64)>,
}

/// Writes the wasm variants' component and host configs into `dir`
/// (`host.yaml`: the default `instanceMode: fresh`; `host-reuse.yaml`;
/// `host-skip.yaml`: `fresh` with `skipUnchanged: true`).
pub fn write_wasm_host(dir: &std::path::Path, concurrency: usize) -> anyhow::Result<()> {
    let bytes = std::fs::read(artifacts::BENCH_STATUS)
        .with_context(|| format!("reading {}", artifacts::BENCH_STATUS))?;
    std::fs::write(dir.join("bench-0000.wasm"), bytes)?;
    std::fs::write(
        dir.join("host.yaml"),
        host_config(1, concurrency, "fresh", &[]),
    )?;
    std::fs::write(
        dir.join("host-reuse.yaml"),
        host_config(1, concurrency, "reuse", &[]),
    )?;
    std::fs::write(
        dir.join("host-skip.yaml"),
        host_config(1, concurrency, "fresh", &[("skipUnchanged", "true")]),
    )?;
    Ok(())
}

/// The host config `write_wasm_host` wrote for `variant`.
pub fn wasm_config(dir: &std::path::Path, variant: Variant) -> std::path::PathBuf {
    match variant {
        Variant::WasmReuse => dir.join("host-reuse.yaml"),
        Variant::WasmSkip => dir.join("host-skip.yaml"),
        _ => dir.join("host.yaml"),
    }
}

async fn one(
    cluster: &Cluster,
    variant: Variant,
    options: &Options,
    config: &std::path::Path,
) -> anyhow::Result<Round> {
    let args = ControllerArgs {
        variant,
        kubeconfig: cluster.kubeconfig.clone(),
        concurrency: options.concurrency,
        config: Some(config.to_path_buf()),
        hot: None,
        count_heap: false,
    };
    let mut child = Child::spawn(variant.name(), &child_args(&args))?;
    let ready = child.expect("ready", Duration::from_secs(120)).await?;
    // The wasm hosts answer with their admin address: their guest calls
    // and skips are read from `/metrics` after the round.
    let admin: Option<std::net::SocketAddr> = ready.parse().ok();
    let guest_calls = || async {
        match admin {
            Some(a) => Ok::<_, anyhow::Error>(Some((
                metric_sum(a, "controller_runtime_reconcile_total", &[]).await?,
                metric_sum(a, "wasmctrl_reconcile_skipped_total", &[]).await?,
            ))),
            None => Ok(None),
        }
    };
    let calls_before = guest_calls().await?;

    let n = options.objects;
    let watch = cluster.watch_observed(n).await?;
    let cpu_before = child.cpu_seconds()?;
    let server_before = cpu_seconds(cluster.pid())?;
    let driver_before = cpu_seconds(std::process::id())?;
    let start = Instant::now();
    cluster
        .create_items(
            0,
            (0..n).map(|i| format!("item-{i}")),
            CREATES_IN_FLIGHT,
            false,
        )
        .await?;
    let create_secs = start.elapsed().as_secs_f64();
    let last = tokio::time::timeout(Duration::from_secs(600), watch)
        .await
        .context("not every status was patched within 600 s")???;
    let cpu_s = child.cpu_seconds()? - cpu_before;
    let server_cpu_s = cpu_seconds(cluster.pid())? - server_before;
    let driver_cpu_s = cpu_seconds(std::process::id())? - driver_before;
    let calls = match (calls_before, guest_calls().await?) {
        (Some((r0, s0)), Some((r1, s1))) => Some((r1 - r0, s1 - s0)),
        _ => None,
    };
    child.stop(Duration::from_secs(30)).await?;
    cluster.delete_items(0).await?;
    Ok(Round {
        variant,
        secs: (last - start).as_secs_f64(),
        cpu_s,
        create_secs,
        server_cpu_s,
        driver_cpu_s,
        calls,
    })
}

/// The order variant rounds run in, each with whether it is measured:
/// `warmup` unmeasured rounds, then `rounds` measured ones; round `r` runs
/// every variant once, starting `r` places further along the list, so over
/// a multiple of `variants.len()` measured rounds each variant holds each
/// place once.
fn schedule(variants: &[Variant], warmup: usize, rounds: usize) -> Vec<(Variant, bool)> {
    let k = variants.len();
    (0..warmup + rounds)
        .flat_map(|r| {
            let measured = r >= warmup;
            let shift = r.saturating_sub(warmup);
            (0..k).map(move |i| (variants[(i + shift) % k], measured))
        })
        .collect()
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    ensure!(options.objects > 0, "--objects must be at least 1");
    ensure!(options.rounds > 0, "--rounds must be at least 1");
    ensure!(!options.variants.is_empty(), "no variant to run");
    let load_before = load_average();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let rounds = runtime.block_on(async {
        let cluster = Cluster::start().await?;
        cluster.create_crds(0..1).await?;
        let dir = tempfile::tempdir()?;
        write_wasm_host(dir.path(), options.concurrency)?;
        let mut rounds = Vec::new();
        for (variant, measured) in schedule(&options.variants, options.warmup, options.rounds) {
            let config = wasm_config(dir.path(), variant);
            let round = one(&cluster, variant, options, &config).await?;
            if measured {
                rounds.push(round);
            }
        }
        cluster.stop().await?;
        anyhow::Ok(rounds)
    })?;
    let summary: Vec<(Variant, f64, f64, Vec<&Round>)> = options
        .variants
        .iter()
        .map(|&v| {
            let mine: Vec<&Round> = rounds.iter().filter(|r| r.variant == v).collect();
            let rate = median(
                mine.iter()
                    .map(|r| options.objects as f64 / r.secs)
                    .collect(),
            );
            let cpu = median(mine.iter().map(|r| r.cpu_s).collect());
            (v, rate, cpu, mine)
        })
        .collect();
    if options.json {
        for (v, rate, cpu, _) in &summary {
            let line = JsonLine {
                scenario: "throughput",
                variant: v.name(),
                objects: options.objects,
                reconciles_per_s: round(*rate, 1),
                cpu_s: round(*cpu, 2),
            };
            println!("{}", serde_json::to_string(&line)?);
        }
        return Ok(());
    }
    println!(
        "throughput: {} objects, {} rounds after {} warm-up, concurrency {}, {} CPUs, load {load_before} before / {} after; API server on {}, controllers on {}",
        options.objects,
        options.rounds,
        options.warmup,
        options.concurrency,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average(),
        crate::cluster::apiserver_allocator(),
        crate::heap::backend_name()
    );
    println!(
        "  {:<10} {:>12} {:>8} {:>13}   per round: reconciles/s, controller/API server/load generator CPU s, creates s (wasm: guest reconciles run, skipped)",
        "variant", "reconcile/s", "cpu s", "cpu µs/obj"
    );
    for (v, rate, cpu, mine) in &summary {
        let per = mine
            .iter()
            .map(|r| {
                let calls = r
                    .calls
                    .map(|(run, skipped)| format!(" ({run:.0} run, {skipped:.0} skipped)"))
                    .unwrap_or_default();
                format!(
                    "{:.0} {:.2}/{:.2}/{:.2} {:.2}{calls}",
                    options.objects as f64 / r.secs,
                    r.cpu_s,
                    r.server_cpu_s,
                    r.driver_cpu_s,
                    r.create_secs
                )
            })
            .collect::<Vec<_>>()
            .join("  ");
        println!(
            "  {:<10} {:>12.0} {:>8.2} {:>13.1}   {per}",
            v.name(),
            rate,
            cpu,
            cpu * 1e6 / options.objects as f64
        );
    }
    let get = |v: Variant| summary.iter().find(|s| s.0 == v).map(|s| (s.1, s.2));
    if let (Some(w), Some(n)) = (get(Variant::Wasm), get(Variant::Native)) {
        println!(
            "  wasm/native: {:.2} (goal >= 0.9), cpu {:.2}x",
            w.0 / n.0,
            w.1 / n.1
        );
    }
    if let (Some(w), Some(k)) = (get(Variant::Wasm), get(Variant::KubeRs)) {
        println!(
            "  wasm/kube-rs: {:.2} (goal >= 1.0), cpu {:.2}x",
            w.0 / k.0,
            w.1 / k.1
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_up_rounds_run_first_and_measured_rounds_rotate_the_order() {
        let (w, n, k) = (Variant::Wasm, Variant::Native, Variant::KubeRs);
        assert_eq!(
            schedule(&[w, n, k], 1, 3),
            vec![
                (w, false),
                (n, false),
                (k, false),
                (w, true),
                (n, true),
                (k, true),
                (n, true),
                (k, true),
                (w, true),
                (k, true),
                (w, true),
                (n, true),
            ]
        );
        assert_eq!(schedule(&[w, n], 0, 1), vec![(w, true), (n, true)]);
        // Over a multiple of the variants, each holds each place once.
        let measured: Vec<Variant> = schedule(&[w, n, k], 2, 3)
            .into_iter()
            .filter_map(|(v, m)| m.then_some(v))
            .collect();
        for place in 0..3 {
            let mut at: Vec<&str> = measured.chunks(3).map(|c| c[place].name()).collect();
            at.sort_unstable();
            assert_eq!(at, ["kube-rs", "native", "wasm"]);
        }
    }
}
