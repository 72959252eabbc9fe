//! `latency`: one object (`hot`) updated at a steady rate while
//! `--idle-objects` others sit idle in the controller's cache; the time
//! from each write's response to the start of the reconcile that served it.
//!
//! The writer (this process) merge-patches `spec.seq` of `hot` to 1, 2, 3, …
//! at `--rate` writes/s and records when each response arrived (Unix ns).
//! Every variant's reconciler records when it started in the status it
//! writes (`startedAt`, Unix ns, same clock) together with the `spec.seq`
//! it read (`observed`). A write of seq *i* is served by the first status
//! with `observed >= i` (reconciles of one key never overlap, so `observed`
//! only grows); its latency is that status's `startedAt` minus the write's
//! response time, or 0 when the serving reconcile had already started (it
//! read the new object from the cache after its event arrived, which can be
//! before the writer got its response).
//!
//! Two rows per variant: **idle** (nothing else queued), and **during
//! resync**: `--resyncs` times, the controller queues every one of its
//! keys again (see [`crate::controllers`]: the wasm host's own full
//! re-enqueue, kube-rs's `reconcile_all_on`) and reports when the last of
//! them was handed to a worker; only writes answered between the re-enqueue
//! and that moment count. The writer runs throughout.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use futures::TryStreamExt;
use kube::api::{ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use serde::Serialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::cluster::{self, Cluster};
use crate::controllers::{ControllerArgs, Variant, child_args, resync};
use crate::procs::{Child, now_ns};
use crate::stats::{Samples, load_average, round};
use crate::throughput::{wasm_config, write_wasm_host};

const HOT: &str = "hot";

#[derive(Debug, Clone)]
pub struct Options {
    pub idle_objects: usize,
    pub rate: u32,
    pub seconds: f64,
    pub resyncs: usize,
    pub concurrency: usize,
    pub variants: Vec<Variant>,
    pub json: bool,
}

#[derive(Serialize)]
struct JsonLine {
    scenario: &'static str,
    variant: &'static str,
    during_resync: bool,
    p50_ms: f64,
    p99_ms: f64,
    samples: usize,
}

/// What the writer and the status watch recorded.
#[derive(Default)]
struct Log {
    /// (seq, response time) of every write.
    writes: Vec<(u64, u64)>,
    /// (observed, startedAt) of every status the watch saw, in order.
    statuses: Vec<(u64, u64)>,
}

/// Latency (ns) of every write, None for a write no status served.
fn latencies(log: &Log) -> Vec<(u64, Option<u64>)> {
    let mut next = 0;
    log.writes
        .iter()
        .map(|&(seq, answered)| {
            while next < log.statuses.len() && log.statuses[next].0 < seq {
                next += 1;
            }
            let served = log
                .statuses
                .get(next)
                .map(|&(_, started)| started.saturating_sub(answered));
            (answered, served)
        })
        .collect()
}

struct Rows {
    idle: Samples,
    resync: Samples,
    windows: Vec<(u64, u64)>,
    unserved: usize,
}

/// Writes `hot` every 1/rate s until `stop`, logging response times.
fn spawn_writer(
    cluster: &Cluster,
    rate: u32,
    first_seq: u64,
    log: Arc<Mutex<Log>>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<anyhow::Result<u64>> {
    let api = cluster.items(0);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut seq = first_seq;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return Ok(seq),
                _ = tick.tick() => {}
            }
            seq += 1;
            let patch = json!({"spec": {"seq": seq}});
            api.patch(HOT, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .context("writing the hot object")?;
            log.lock().unwrap().writes.push((seq, now_ns()));
        }
    })
}

/// Follows the statuses of `hot` from `rv` on.
fn spawn_status_watch(
    cluster: &Cluster,
    rv: String,
    log: Arc<Mutex<Log>>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    let api = cluster.items(0);
    tokio::spawn(async move {
        let mut rv = rv;
        loop {
            let stream = api.watch(&WatchParams::default(), &rv).await?;
            let mut stream = std::pin::pin!(stream);
            loop {
                let ev = tokio::select! {
                    _ = stop.cancelled() => return Ok(()),
                    ev = stream.try_next() => ev?,
                };
                match ev {
                    Some(WatchEvent::Modified(o)) => {
                        rv = o.metadata.resource_version.clone().unwrap_or_default();
                        if o.metadata.name.as_deref() == Some(HOT)
                            && let (_, Some(observed)) = cluster::seq_and_observed(&o)
                            && let Some(started) = cluster::started_at(&o)
                        {
                            let mut log = log.lock().unwrap();
                            if log.statuses.last().map(|s| s.0) != Some(observed) {
                                log.statuses.push((observed, started));
                            }
                        }
                    }
                    Some(WatchEvent::Bookmark(b)) => rv = b.metadata.resource_version,
                    Some(WatchEvent::Error(e)) => bail!("status watch: {e:?}"),
                    Some(_) => {}
                    None => break,
                }
            }
        }
    })
}

async fn one(
    cluster: &Cluster,
    variant: Variant,
    options: &Options,
    config: &std::path::Path,
    seq: &mut u64,
) -> anyhow::Result<Rows> {
    let args = ControllerArgs {
        variant,
        kubeconfig: cluster.kubeconfig.clone(),
        concurrency: options.concurrency,
        config: Some(config.to_path_buf()),
        hot: Some(HOT.into()),
        count_heap: false,
    };
    let mut child = Child::spawn(variant.name(), &child_args(&args))?;
    child.expect("ready", Duration::from_secs(120)).await?;
    // The initial reconciles of the idle keys (no-ops: their status is set).
    child.send("idle").await?;
    child.expect("idle", Duration::from_secs(120)).await?;

    let rv = cluster
        .items(0)
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let log = Arc::new(Mutex::new(Log::default()));
    let stop = CancellationToken::new();
    let watch = spawn_status_watch(cluster, rv, log.clone(), stop.clone());

    // Idle row.
    let writer_stop = CancellationToken::new();
    let writer = spawn_writer(
        cluster,
        options.rate,
        *seq,
        log.clone(),
        writer_stop.clone(),
    );
    tokio::time::sleep(Duration::from_secs_f64(options.seconds)).await;
    let idle_until = now_ns();
    // During resync: the writer keeps going.
    let mut windows = Vec::new();
    for _ in 0..options.resyncs {
        let resync = resync(&mut child, Duration::from_secs(300)).await?;
        windows.push((resync.start, resync.handed_out));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    writer_stop.cancel();
    *seq = writer.await??;
    // Until the last write is served.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while log.lock().unwrap().statuses.last().map(|s| s.0) != Some(*seq) {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the last write was not reconciled within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.cancel();
    watch.await??;
    child.stop(Duration::from_secs(30)).await?;

    let log = log.lock().unwrap();
    let mut rows = Rows {
        idle: Samples::default(),
        resync: Samples::default(),
        windows: windows.clone(),
        unserved: 0,
    };
    for (answered, latency) in latencies(&log) {
        let Some(ns) = latency else {
            rows.unserved += 1;
            continue;
        };
        let d = Duration::from_nanos(ns);
        if answered <= idle_until {
            rows.idle.push(d);
        } else if windows.iter().any(|&(a, b)| (a..=b).contains(&answered)) {
            rows.resync.push(d);
        }
    }
    Ok(rows)
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    ensure!(options.rate > 0, "--rate must be at least 1");
    ensure!(!options.variants.is_empty(), "no variant to run");
    let load_before = load_average();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let results = runtime.block_on(async {
        let cluster = Cluster::start().await?;
        cluster.create_crds(0..1).await?;
        let dir = tempfile::tempdir()?;
        write_wasm_host(dir.path(), options.concurrency)?;
        cluster
            .create_items(
                0,
                (0..options.idle_objects)
                    .map(|i| format!("idle-{i}"))
                    .chain([HOT.to_string()]),
                32,
                true,
            )
            .await?;
        let mut seq = 1;
        let mut results = Vec::new();
        for &variant in &options.variants {
            let config = wasm_config(dir.path(), variant);
            results.push((
                variant,
                one(&cluster, variant, options, &config, &mut seq).await?,
            ));
        }
        cluster.stop().await?;
        anyhow::Ok(results)
    })?;
    let ms = |ns: u64| ns as f64 / 1e6;
    if options.json {
        for (v, rows) in &results {
            for (during, samples) in [(false, &rows.idle), (true, &rows.resync)] {
                let s = samples.summary();
                let line = JsonLine {
                    scenario: "latency",
                    variant: v.name(),
                    during_resync: during,
                    p50_ms: round(ms(s.median), 3),
                    p99_ms: round(ms(s.p99), 3),
                    samples: s.count,
                };
                println!("{}", serde_json::to_string(&line)?);
            }
        }
        return Ok(());
    }
    println!(
        "latency: 1 object written at {}/s, {} idle objects, {} resyncs, concurrency {}, {} CPUs, load {load_before} before / {} after",
        options.rate,
        options.idle_objects,
        options.resyncs,
        options.concurrency,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    println!(
        "  {:<8} {:<14} {:>9} {:>9} {:>9} {:>8}",
        "variant", "row", "p50 ms", "p99 ms", "max ms", "samples"
    );
    for (v, rows) in &results {
        for (name, samples) in [("idle", &rows.idle), ("during resync", &rows.resync)] {
            let s = samples.summary();
            println!(
                "  {:<8} {:<14} {:>9.3} {:>9.3} {:>9.3} {:>8}",
                v.name(),
                name,
                ms(s.median),
                ms(s.p99),
                ms(s.max),
                s.count
            );
        }
        let queued: Vec<String> = rows
            .windows
            .iter()
            .map(|(a, b)| format!("{:.0}", ms(b.saturating_sub(*a))))
            .collect();
        println!(
            "  {:<8} resync keys queued for (ms): {}; writes never served: {}",
            v.name(),
            queued.join(" "),
            rows.unserved
        );
    }
    let p99 = |v: Variant, resync: bool| {
        results.iter().find(|r| r.0 == v).map(|(_, rows)| {
            if resync {
                rows.resync.summary().p99
            } else {
                rows.idle.summary().p99
            }
        })
    };
    if let (Some(w), Some(k)) = (p99(Variant::Wasm, false), p99(Variant::KubeRs, false)) {
        println!(
            "  idle p99 wasm/kube-rs: {:.2} (goal <= 1)",
            w as f64 / k.max(1) as f64
        );
    }
    if let (Some(r), Some(i)) = (p99(Variant::Wasm, true), p99(Variant::Wasm, false)) {
        println!(
            "  wasm p99 during resync / idle: {:.2} (goal <= 10)",
            r as f64 / i.max(1) as f64
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_is_served_by_the_first_status_that_saw_it() {
        let log = Log {
            writes: vec![(2, 100), (3, 200), (4, 300), (5, 400)],
            // seq 2 and 3 served by one reconcile started at 250; 4 by one
            // started at 290 (before its write's response); 5 never.
            statuses: vec![(1, 50), (3, 250), (4, 290)],
        };
        assert_eq!(
            latencies(&log),
            [
                (100, Some(150)),
                (200, Some(50)),
                (300, Some(0)),
                (400, None)
            ]
        );
    }
}
