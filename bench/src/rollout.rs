//! `shadow` and `skip`: what rolling out a new version costs and saves.
//! Both run the wasm host with the `bench-status` plugin against their own
//! API server, the two modes alternating per round, and report the median
//! over rounds.
//!
//! **`shadow`**: the `throughput` round (N new objects of a test CRD, each
//! needing one status patch), without and with the same component as a
//! shadow candidate (`candidate: { mode: shadow, maxConcurrentShadows: S }`).
//! Reported: reconciles/s from the first create to the last status seen
//! (does the stable version slow down?), the host's CPU seconds until its
//! queue is idle and, with the candidate, every shadow run ended (each
//! stable reconcile has a shadow run or a skip), per stable reconcile; and
//! the shadow runs, skips and divergences counted.
//!
//! **`skip`**: N objects that need nothing (their status already says
//! `observed: 1`), a fresh host per round without and with
//! `skipUnchanged: true`. Once the host's initial reconciles drained, it
//! queues every key again (`POST /plugins/{name}/reload`, as `scale`'s
//! drain; a resync enqueues the same keys the same way) and the round
//! measures until its queue is idle: time, reconciles run, reconciles
//! skipped, and the host's CPU seconds.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use serde::Serialize;

use crate::cluster::{Cluster, metric_sum};
use crate::controllers::{ControllerArgs, Variant, child_args, resync};
use crate::procs::Child;
use crate::stats::{load_average, median, round};
use crate::throughput::{wasm_config, write_wasm_host};

/// Creates in flight while the objects are created (as `throughput`).
const CREATES_IN_FLIGHT: usize = 32;
/// The plugin `write_wasm_host` configures.
const PLUGIN: &str = "bench-0000";
const LIMIT: Duration = Duration::from_secs(600);

#[derive(Debug, Clone)]
pub struct ShadowOptions {
    pub objects: usize,
    pub rounds: usize,
    pub concurrency: usize,
    pub shadows: usize,
    pub json: bool,
}

#[derive(Debug, Clone)]
pub struct SkipOptions {
    pub objects: usize,
    pub rounds: usize,
    pub concurrency: usize,
    pub json: bool,
}

/// `host.yaml` of `write_wasm_host` with `extra` keys added to its one
/// plugin entry (4-space indented lines), written as `file`.
fn config_with(dir: &Path, file: &str, extra: &str) -> anyhow::Result<PathBuf> {
    let base = std::fs::read_to_string(wasm_config(dir, Variant::Wasm))?;
    let path = dir.join(file);
    std::fs::write(&path, format!("{base}{extra}"))?;
    Ok(path)
}

/// Starts the wasm host with `config`; returns it and its admin address.
async fn start_host(
    cluster: &Cluster,
    config: &Path,
    concurrency: usize,
) -> anyhow::Result<(Child, SocketAddr)> {
    let args = ControllerArgs {
        variant: Variant::Wasm,
        kubeconfig: cluster.kubeconfig.clone(),
        concurrency,
        config: Some(config.to_path_buf()),
        hot: None,
        count_heap: false,
    };
    let mut child = Child::spawn("wasm host", &child_args(&args))?;
    let admin = child
        .expect("ready", Duration::from_secs(120))
        .await?
        .parse()
        .context("the host's admin address")?;
    Ok((child, admin))
}

async fn reconciles(admin: SocketAddr) -> anyhow::Result<f64> {
    metric_sum(
        admin,
        "controller_runtime_reconcile_total",
        &[&format!("controller=\"{PLUGIN}\"")],
    )
    .await
}

// ---------------------------------------------------------------------------
// shadow

struct ShadowRound {
    shadow: bool,
    /// First create → last status seen.
    secs: f64,
    /// Host CPU seconds until its queue was idle and the shadow runs ended.
    cpu_s: f64,
    /// Stable reconciles (an object is reconciled again after its status
    /// patch, and finds nothing to do).
    reconciles: f64,
    runs: f64,
    skipped: f64,
    divergent: f64,
}

async fn shadow_round(
    cluster: &Cluster,
    config: &Path,
    shadow: bool,
    options: &ShadowOptions,
) -> anyhow::Result<ShadowRound> {
    let (mut child, admin) = start_host(cluster, config, options.concurrency).await?;
    let n = options.objects;
    let watch = cluster.watch_observed(n).await?;
    let cpu_before = child.cpu_seconds()?;
    let start = Instant::now();
    cluster
        .create_items(
            0,
            (0..n).map(|i| format!("item-{i}")),
            CREATES_IN_FLIGHT,
            false,
        )
        .await?;
    let last = tokio::time::timeout(LIMIT, watch)
        .await
        .context("not every status was patched within 600 s")???;
    child.send("idle").await?;
    child.expect("idle", LIMIT).await?;
    let stable = reconciles(admin).await?;
    // Each stable reconcile is followed by a shadow run or a skip; the
    // runs end after the stable version's.
    let deadline = Instant::now() + LIMIT;
    let (runs, skipped) = loop {
        let runs = metric_sum(admin, "wasmctrl_shadow_runs_total", &[]).await?;
        let skipped = metric_sum(admin, "wasmctrl_shadow_skipped_total", &[]).await?;
        if !shadow || runs + skipped >= stable {
            break (runs, skipped);
        }
        ensure!(
            Instant::now() < deadline,
            "{runs} shadow runs and {skipped} skips of {stable} reconciles after 600 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let cpu_s = child.cpu_seconds()? - cpu_before;
    let divergent = metric_sum(admin, "wasmctrl_shadow_divergences_total", &[]).await?;
    child.stop(Duration::from_secs(30)).await?;
    cluster.delete_items(0).await?;
    Ok(ShadowRound {
        shadow,
        secs: (last - start).as_secs_f64(),
        cpu_s,
        reconciles: stable,
        runs,
        skipped,
        divergent,
    })
}

/// Runs `rounds` pairs of rounds, one with the mode off and one with it
/// on, alternating which goes first so neither always meets a warmer
/// machine.
async fn alternating<R, F, Fut>(rounds: usize, mut round: F) -> anyhow::Result<Vec<R>>
where
    F: FnMut(bool) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<R>>,
{
    let mut done = Vec::with_capacity(rounds * 2);
    for r in 0..rounds {
        for i in 0..2 {
            done.push(round((i + r) % 2 == 1).await?);
        }
    }
    Ok(done)
}

/// The rounds with the mode off, then those with it on.
fn by_mode<R>(rounds: &[R], on: impl Fn(&R) -> bool) -> [(bool, Vec<&R>); 2] {
    [false, true].map(|mode| (mode, rounds.iter().filter(|r| on(r) == mode).collect()))
}

/// The median of `f` over `mine`.
fn median_of<R>(mine: &[&R], f: &dyn Fn(&R) -> f64) -> f64 {
    median(mine.iter().map(|r| f(r)).collect())
}

#[derive(Serialize)]
struct ShadowLine {
    scenario: &'static str,
    shadow: bool,
    objects: usize,
    reconciles_per_s: f64,
    cpu_s: f64,
    cpu_us_per_reconcile: f64,
    reconciles: f64,
    shadow_runs: f64,
    shadow_skipped: f64,
    divergent: f64,
}

pub fn run_shadow(options: &ShadowOptions) -> anyhow::Result<()> {
    ensure!(options.objects > 0, "--objects must be at least 1");
    ensure!(options.rounds > 0, "--rounds must be at least 1");
    ensure!(options.shadows > 0, "--shadows must be at least 1");
    let load_before = load_average();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let rounds = runtime.block_on(async {
        let cluster = Cluster::start().await?;
        cluster.create_crds(0..1).await?;
        let dir = tempfile::tempdir()?;
        write_wasm_host(dir.path(), options.concurrency)?;
        let plain = wasm_config(dir.path(), Variant::Wasm);
        let shadowed = config_with(
            dir.path(),
            "host-shadow.yaml",
            &format!(
                "    candidate: {{ path: bench-0000.wasm, mode: shadow, maxConcurrentShadows: {} }}\n",
                options.shadows
            ),
        )?;
        let rounds = alternating(options.rounds, |shadow| {
            let config = if shadow { &shadowed } else { &plain };
            shadow_round(&cluster, config, shadow, options)
        })
        .await?;
        cluster.stop().await?;
        anyhow::Ok(rounds)
    })?;
    let n = options.objects as f64;
    let rows = by_mode(&rounds, |r| r.shadow);
    let med = median_of::<ShadowRound>;
    if options.json {
        for (shadow, mine) in &rows {
            let line = ShadowLine {
                scenario: "shadow",
                shadow: *shadow,
                objects: options.objects,
                reconciles_per_s: round(med(mine, &|r| n / r.secs), 1),
                cpu_s: round(med(mine, &|r| r.cpu_s), 2),
                cpu_us_per_reconcile: round(med(mine, &|r| r.cpu_s * 1e6 / r.reconciles), 1),
                reconciles: med(mine, &|r| r.reconciles),
                shadow_runs: med(mine, &|r| r.runs),
                shadow_skipped: med(mine, &|r| r.skipped),
                divergent: med(mine, &|r| r.divergent),
            };
            println!("{}", serde_json::to_string(&line)?);
        }
        return Ok(());
    }
    println!(
        "shadow: {} objects, {} rounds, concurrency {}, maxConcurrentShadows {}, {} CPUs, load {load_before} before / {} after",
        options.objects,
        options.rounds,
        options.concurrency,
        options.shadows,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    println!(
        "  {:<9} {:>12} {:>8} {:>15} {:>11} {:>12} {:>8} {:>9}   per round: reconciles/s, CPU s",
        "mode",
        "reconcile/s",
        "cpu s",
        "cpu µs/reconc.",
        "reconciles",
        "shadow runs",
        "skipped",
        "divergent"
    );
    let mut per_reconcile = Vec::new();
    for (shadow, mine) in &rows {
        let cpu_per = med(mine, &|r| r.cpu_s * 1e6 / r.reconciles);
        per_reconcile.push(cpu_per);
        let per = mine
            .iter()
            .map(|r| format!("{:.0} {:.2}", n / r.secs, r.cpu_s))
            .collect::<Vec<_>>()
            .join("  ");
        println!(
            "  {:<9} {:>12.0} {:>8.2} {:>15.1} {:>11.0} {:>12.0} {:>8.0} {:>9.0}   {per}",
            if *shadow { "shadow" } else { "plain" },
            med(mine, &|r| n / r.secs),
            med(mine, &|r| r.cpu_s),
            cpu_per,
            med(mine, &|r| r.reconciles),
            med(mine, &|r| r.runs),
            med(mine, &|r| r.skipped),
            med(mine, &|r| r.divergent),
        );
    }
    println!(
        "  shadow mode costs {:+.1} µs of host CPU per stable reconcile ({:.2}x)",
        per_reconcile[1] - per_reconcile[0],
        per_reconcile[1] / per_reconcile[0]
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// skip

struct SkipRound {
    skip: bool,
    /// Keys queued again → queue idle.
    drain_s: f64,
    cpu_s: f64,
    reconciles: f64,
    skipped: f64,
}

async fn skip_round(
    cluster: &Cluster,
    config: &Path,
    skip: bool,
    options: &SkipOptions,
) -> anyhow::Result<SkipRound> {
    let (mut child, admin) = start_host(cluster, config, options.concurrency).await?;
    // The initial reconciles (which record what each read, with
    // skipUnchanged) drain first.
    child.send("idle").await?;
    child.expect("idle", LIMIT).await?;
    let skipped_now = || metric_sum(admin, "wasmctrl_reconcile_skipped_total", &[]);
    let (reconciles_before, skipped_before) = (reconciles(admin).await?, skipped_now().await?);
    let cpu_before = child.cpu_seconds()?;
    let drain_s = resync(&mut child, LIMIT).await?.drain_s();
    let cpu_s = child.cpu_seconds()? - cpu_before;
    let reconciles = reconciles(admin).await? - reconciles_before;
    let skipped = skipped_now().await? - skipped_before;
    child.stop(Duration::from_secs(30)).await?;
    Ok(SkipRound {
        skip,
        drain_s,
        cpu_s,
        reconciles,
        skipped,
    })
}

#[derive(Serialize)]
struct SkipLine {
    scenario: &'static str,
    skip_unchanged: bool,
    objects: usize,
    drain_s: f64,
    cpu_s: f64,
    reconciles: f64,
    skipped: f64,
}

pub fn run_skip(options: &SkipOptions) -> anyhow::Result<()> {
    ensure!(options.objects > 0, "--objects must be at least 1");
    ensure!(options.rounds > 0, "--rounds must be at least 1");
    let load_before = load_average();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let rounds = runtime.block_on(async {
        let cluster = Cluster::start().await?;
        cluster.create_crds(0..1).await?;
        cluster
            .create_items(
                0,
                (0..options.objects).map(|i| format!("item-{i}")),
                CREATES_IN_FLIGHT,
                true,
            )
            .await?;
        let dir = tempfile::tempdir()?;
        write_wasm_host(dir.path(), options.concurrency)?;
        let plain = wasm_config(dir.path(), Variant::Wasm);
        let skipping = config_with(dir.path(), "host-skip.yaml", "    skipUnchanged: true\n")?;
        let rounds = alternating(options.rounds, |skip| {
            let config = if skip { &skipping } else { &plain };
            skip_round(&cluster, config, skip, options)
        })
        .await?;
        cluster.stop().await?;
        anyhow::Ok(rounds)
    })?;
    let rows = by_mode(&rounds, |r| r.skip);
    let med = median_of::<SkipRound>;
    if options.json {
        for (skip, mine) in &rows {
            let line = SkipLine {
                scenario: "skip",
                skip_unchanged: *skip,
                objects: options.objects,
                drain_s: round(med(mine, &|r| r.drain_s), 3),
                cpu_s: round(med(mine, &|r| r.cpu_s), 2),
                reconciles: med(mine, &|r| r.reconciles),
                skipped: med(mine, &|r| r.skipped),
            };
            println!("{}", serde_json::to_string(&line)?);
        }
        return Ok(());
    }
    println!(
        "skip: a full resync of {} unchanged objects, {} rounds, concurrency {}, {} CPUs, load {load_before} before / {} after",
        options.objects,
        options.rounds,
        options.concurrency,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    println!(
        "  {:<15} {:>9} {:>8} {:>11} {:>9}   per round: drain s, CPU s",
        "mode", "drain s", "cpu s", "reconciles", "skipped"
    );
    let mut drains = Vec::new();
    for (skip, mine) in &rows {
        let drain = med(mine, &|r| r.drain_s);
        drains.push((drain, med(mine, &|r| r.cpu_s)));
        let per = mine
            .iter()
            .map(|r| format!("{:.3} {:.2}", r.drain_s, r.cpu_s))
            .collect::<Vec<_>>()
            .join("  ");
        println!(
            "  {:<15} {:>9.3} {:>8.2} {:>11.0} {:>9.0}   {per}",
            if *skip { "skipUnchanged" } else { "plain" },
            drain,
            med(mine, &|r| r.cpu_s),
            med(mine, &|r| r.reconciles),
            med(mine, &|r| r.skipped),
        );
    }
    println!(
        "  skipUnchanged: drain {:.2}x, CPU {:.2}x of plain",
        drains[1].0 / drains[0].0,
        drains[1].1 / drains[0].1
    );
    Ok(())
}
