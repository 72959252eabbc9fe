//! The scenario's entry: checks the options, measures, and reports (text,
//! or one JSON line).

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use serde::Serialize;

use super::measure::{Options, measure};
use super::probe::install_probe;
use crate::stats::{Samples, load_average, round};

/// The goal for the median warm swap.
const GOAL_SWAP_MS: f64 = 50.0;

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
