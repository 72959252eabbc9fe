//! `floor-settings`: the bare floor under each pooling-allocator memory
//! setting, sync and async, interleaved — how `wasm-floor`'s "best engine
//! settings" were chosen, and what the same settings would save wasmctrl.

use std::path::Path;
use std::time::Instant;

use anyhow::ensure;
use serde::Serialize;

use crate::floor::{self, EngineKnobs, Floor};
use crate::stats::{Samples, load_average, round};

#[derive(Debug, Clone)]
pub struct Options {
    pub iterations: usize,
    pub rounds: usize,
    pub json: bool,
}

/// The settings compared: memory kept resident × dirty-page scanning, then
/// with pagemap on, tables and fiber stacks not kept resident.
fn candidates() -> Vec<(String, EngineKnobs)> {
    const MIB: usize = 1 << 20;
    let base = EngineKnobs {
        pagemap_scan: false,
        ..EngineKnobs::FLOOR
    };
    let with = |keep: usize, pagemap: bool| EngineKnobs {
        memory_keep_resident: keep,
        pagemap_scan: pagemap,
        ..base
    };
    vec![
        ("keep=0".into(), with(0, false)),
        ("keep=1MiB".into(), with(MIB, false)),
        ("keep=2MiB".into(), with(2 * MIB, false)),
        ("keep=1MiB pagemap".into(), with(MIB, true)),
        ("keep=2MiB pagemap".into(), with(2 * MIB, true)),
        (
            "keep=2MiB pagemap tables=0".into(),
            EngineKnobs {
                table_keep_resident: 0,
                ..with(2 * MIB, true)
            },
        ),
        (
            "keep=2MiB pagemap cow=on".into(),
            EngineKnobs {
                memory_init_cow: true,
                ..with(2 * MIB, true)
            },
        ),
        (
            "keep=2MiB pagemap stacks=0".into(),
            EngineKnobs {
                stack_keep_resident: 0,
                ..with(2 * MIB, true)
            },
        ),
    ]
}

#[derive(Serialize)]
struct JsonLine<'a> {
    scenario: &'static str,
    variant: &'a str,
    median_us: f64,
    p99_us: f64,
    iterations: usize,
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    ensure!(options.rounds > 0, "--rounds must be at least 1");
    ensure!(
        options.iterations >= options.rounds,
        "--iterations must be at least --rounds"
    );
    let load_before = load_average();
    let noop = Path::new(wasmctrl_plugin_artifacts::NOOP);
    let mut variants: Vec<(String, Floor, bool)> = Vec::new();
    for (name, knobs) in candidates() {
        for sync in [true, false] {
            let label = format!("{name} {}", if sync { "sync" } else { "async" });
            variants.push((label, Floor::with_engine(noop, knobs)?, sync));
        }
    }
    let key = floor::ObjectKey {
        namespace: Some("default".into()),
        name: "bench".into(),
    };
    let batch = |(label, floor, sync): &(String, Floor, bool), n: usize, out: &mut Samples| {
        for _ in 0..n {
            let key = key.clone();
            let start = Instant::now();
            let result = if *sync {
                floor.call_sync(&key)
            } else {
                floor.call_async(&key)
            };
            out.push(start.elapsed());
            ensure!(matches!(result, Ok(Ok(_))), "{label}: {result:?}");
        }
        anyhow::Ok(())
    };

    let per_round = options.iterations.div_ceil(options.rounds);
    for v in &variants {
        batch(v, per_round.min(1000), &mut Samples::default())?;
    }
    let mut samples: Vec<Samples> = variants
        .iter()
        .map(|_| Samples::with_capacity(options.iterations))
        .collect();
    let started = Instant::now();
    for round in 0..options.rounds {
        let n = per_round.min(options.iterations - round * per_round);
        if n == 0 {
            break;
        }
        for i in 0..variants.len() {
            let v = (round + i) % variants.len();
            batch(&variants[v], n, &mut samples[v])?;
        }
    }
    let elapsed = started.elapsed();

    if options.json {
        for ((label, _, _), s) in variants.iter().zip(&samples) {
            let s = s.summary();
            let line = JsonLine {
                scenario: "floor-settings",
                variant: label,
                median_us: round(s.median_us(), 3),
                p99_us: round(s.p99_us(), 3),
                iterations: s.count,
            };
            println!("{}", serde_json::to_string(&line)?);
        }
        return Ok(());
    }
    println!(
        "floor-settings: the bare noop floor, {} iterations per setting in {} interleaved rounds ({:.1} s)",
        options.iterations,
        options.rounds,
        elapsed.as_secs_f64()
    );
    println!(
        "all: no epoch, no fuel, concurrency_support(false); tables and fiber stacks 64 KiB resident unless =0"
    );
    if !floor::pagemap_scan_available() {
        println!("PAGEMAP_SCAN is not available on this kernel: the pagemap rows run without it");
    }
    println!(
        "nproc {}, load average {load_before} before, {} after",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    println!();
    println!("{:<34} {:>10} {:>10}", "setting", "median µs", "p99 µs");
    for ((label, _, _), s) in variants.iter().zip(&samples) {
        let s = s.summary();
        println!("{label:<34} {:>10.2} {:>10.2}", s.median_us(), s.p99_us());
    }
    Ok(())
}
