//! `deadline`: how late a runaway guest is stopped. The `misbehave` plugin
//! spins forever for the key `loop`; each trial gives it a 10 ms context
//! timeout and measures how long `Plugin::invoke` takes to return the
//! deadline trap. Overshoot = time to return − 10 ms: the epoch tick, the
//! ticker thread's scheduling, and the unwinding and teardown of the store.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use wasmctrl::TrapKind;
use wasmctrl::control::metrics::Metrics;
use wasmctrl::sandbox::{PluginSpec, Runtime, RuntimeConfig};
use wasmctrl::{ObjectKey, ReconcileError, ReconcileRequest};

use crate::stats::{Samples, load_average, round};

const TIMEOUT: Duration = Duration::from_millis(10);
/// The goal for the p99 overshoot.
const GOAL_P99_MS: f64 = 2.0;

#[derive(Debug, Clone)]
pub struct Options {
    pub trials: usize,
    /// Groups the trials are split into, to show run-to-run spread.
    pub rounds: usize,
    pub json: bool,
}

#[derive(Serialize)]
struct JsonLine {
    scenario: &'static str,
    timeout_ms: u64,
    overshoot_ms_p99: f64,
    overshoot_ms_median: f64,
    overshoot_ms_max: f64,
    trials: usize,
    epoch_tick_ms: f64,
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    ensure!(options.rounds > 0, "--rounds must be at least 1");
    ensure!(
        options.trials >= options.rounds,
        "--iterations must be at least --rounds"
    );
    let load_before = load_average();
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let config = RuntimeConfig::default();
    let tick = config.epoch_tick;
    let plugin = tokio.block_on(async {
        let runtime = Runtime::new(config, Arc::new(Metrics::new()))?;
        let spec = PluginSpec::new("misbehave");
        anyhow::Ok(
            runtime
                .load_file(wasmctrl_plugin_artifacts::MISBEHAVE, spec)
                .await?,
        )
    })?;

    let per_round = options.trials.div_ceil(options.rounds);
    let mut all = Samples::with_capacity(options.trials);
    let mut round_p99s = Vec::new();
    let started = Instant::now();
    for round in 0..options.rounds {
        let n = per_round.min(options.trials - round * per_round);
        if n == 0 {
            break;
        }
        let mut samples = Samples::with_capacity(n);
        for trial in 0..n {
            // Start each trial at a different phase of the epoch tick: a
            // trial that began right after the previous one ended would
            // always start just after a tick. The golden-ratio sequence
            // spreads the phases evenly over [0, tick).
            let i = (round * per_round + trial) as f64;
            std::thread::sleep(tick.mul_f64((i * 0.618_033_988_749_895).fract()));
            let request = ReconcileRequest {
                key: ObjectKey::namespaced("default", "loop"),
                attempt: 0,
                timeout: TIMEOUT,
                cancel: CancellationToken::new(),
            };
            let (took, result) = tokio.block_on(async {
                let start = Instant::now();
                let invocation = plugin.invoke(request).await;
                (start.elapsed(), invocation.result)
            });
            ensure!(
                matches!(
                    result,
                    Err(ReconcileError::Trap {
                        kind: TrapKind::Deadline,
                        ..
                    })
                ),
                "trial {i}: expected a deadline trap, got {result:?}"
            );
            ensure!(
                took >= TIMEOUT,
                "trial {i}: returned before its deadline, after {took:?}"
            );
            samples.push(took - TIMEOUT);
        }
        round_p99s.push(samples.summary().p99 as f64 / 1e6);
        all.extend(&samples);
    }
    let elapsed = started.elapsed();
    let s = all.summary();
    let ms = |nanos: u64| nanos as f64 / 1e6;

    if options.json {
        let line = JsonLine {
            scenario: "deadline",
            timeout_ms: TIMEOUT.as_millis() as u64,
            overshoot_ms_p99: round(ms(s.p99), 3),
            overshoot_ms_median: round(ms(s.median), 3),
            overshoot_ms_max: round(ms(s.max), 3),
            trials: s.count,
            epoch_tick_ms: tick.as_secs_f64() * 1e3,
        };
        println!("{}", serde_json::to_string(&line)?);
        return Ok(());
    }
    println!(
        "deadline: misbehave `loop` with a {} ms timeout, {} trials in {} rounds ({:.1} s), epoch tick {:?}",
        TIMEOUT.as_millis(),
        s.count,
        round_p99s.len(),
        elapsed.as_secs_f64(),
        tick
    );
    println!(
        "nproc {}, load average {load_before} before, {} after",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    println!();
    println!(
        "overshoot ms: median {:.3}, p99 {:.3}, min {:.3}, max {:.3}",
        ms(s.median),
        ms(s.p99),
        ms(s.min),
        ms(s.max)
    );
    let spread: Vec<String> = round_p99s.iter().map(|p| format!("{p:.3}")).collect();
    println!("p99 per round ms: {}", spread.join(", "));
    println!(
        "goal p99 <= {GOAL_P99_MS} ms: {}",
        if ms(s.p99) <= GOAL_P99_MS {
            "met"
        } else {
            "MISSED"
        }
    );
    Ok(())
}
