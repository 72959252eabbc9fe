//! wasmctrl benchmarks. Run in release mode:
//!
//! ```text
//! cargo run --release -p wasmctrl-bench -- dispatch [--json]
//! cargo run --release -p wasmctrl-bench -- deadline [--json]
//! cargo run --release -p wasmctrl-bench -- apiserver [--json]
//! cargo run --release -p wasmctrl-bench -- hotswap [--json]
//! ```
//!
//! docs/BENCHMARKS.md describes the scenarios and records results.

mod apiserver;
mod breakdown;
mod deadline;
mod dispatch;
mod floor;
mod guests;
mod hotswap;
mod stats;
mod sweep;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "wasmctrl-bench",
    about = "Reproducible benchmarks for wasmctrl"
)]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// Embedded API server throughput via kube-rs: writes/s from 16
    /// clients, watch events/s delivered to 100 watchers, list time at 100k
    /// objects.
    Apiserver {
        /// Concurrent kube-rs clients writing.
        #[arg(long, default_value_t = 16)]
        writers: usize,
        /// Writes per client in the write phase (half creates, half updates).
        #[arg(long, default_value_t = 1_250)]
        writes_per_writer: usize,
        /// Concurrent watchers.
        #[arg(long, default_value_t = 100)]
        watchers: usize,
        /// Events delivered to each watcher.
        #[arg(long, default_value_t = 5_000)]
        watch_events: usize,
        /// Objects in the store when the list is timed.
        #[arg(long, default_value_t = 100_000)]
        objects: usize,
        /// One JSON line instead of the report.
        #[arg(long)]
        json: bool,
    },
    /// Hot swaps of the `stamp` plugin under a steady update load: swap
    /// latency (warm and cold cache), lost and overlapping work.
    Hotswap {
        /// Measured warm swaps (alternating v1/v2).
        #[arg(long, default_value_t = 20)]
        swaps: usize,
        /// ConfigMaps being updated.
        #[arg(long, default_value_t = 1_000)]
        keys: usize,
        /// Writer updates per second, all keys together.
        #[arg(long, default_value_t = 500)]
        rate: u32,
        /// Pause after each swap is observed, in milliseconds.
        #[arg(long, default_value_t = 750)]
        pause_ms: u64,
        /// Bound on the wait for every key to carry the final stamp.
        #[arg(long, default_value_t = 30)]
        settle_secs: u64,
        /// One JSON line instead of the report.
        #[arg(long)]
        json: bool,
    },
    /// Cost of one reconcile of the noop plugin: wasm-fresh (wasmctrl),
    /// wasm-floor (bare wasmtime), native (a Rust reconciler), interleaved.
    Dispatch {
        /// Measured iterations per variant.
        #[arg(long, default_value_t = 40_000)]
        iterations: usize,
        /// Rounds the iterations are split into; each round runs a batch of
        /// every variant in turn.
        #[arg(long, default_value_t = 40)]
        rounds: usize,
        /// One JSON line per variant instead of the table.
        #[arg(long)]
        json: bool,
        /// Measure only these variants (for profiling one path).
        #[arg(long, value_enum, value_delimiter = ',')]
        only: Vec<dispatch::Variant>,
    },
    /// One reconcile per guest language (Rust, Python, TypeScript) in fresh
    /// and reuse mode, and the RSS of one more warm instance.
    Guests {
        /// Measured calls per guest and mode.
        #[arg(long, default_value_t = 2_000)]
        iterations: usize,
        /// Interleaved rounds.
        #[arg(long, default_value_t = 10)]
        rounds: usize,
        /// Warm instances for the memory measurement.
        #[arg(long, default_value_t = 8)]
        instances: usize,
        /// One JSON line per row instead of the tables.
        #[arg(long)]
        json: bool,
    },
    /// Where wasm-fresh spends its time beyond wasm-floor: a ladder of steps
    /// from the floor to wasmctrl's path, each adding one thing.
    Breakdown {
        /// Measured iterations per step.
        #[arg(long, default_value_t = 20_000)]
        iterations: usize,
        /// Interleaved rounds.
        #[arg(long, default_value_t = 20)]
        rounds: usize,
        /// One JSON line per step instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// The bare floor under each pooling-allocator memory setting (how the
    /// floor's settings were chosen).
    FloorSettings {
        /// Measured iterations per setting.
        #[arg(long, default_value_t = 10_000)]
        iterations: usize,
        /// Interleaved rounds.
        #[arg(long, default_value_t = 10)]
        rounds: usize,
        /// One JSON line per setting instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Overshoot of a runaway guest past a 10 ms reconcile timeout.
    Deadline {
        /// Trials (each about 11 ms).
        #[arg(long, visible_alias = "trials", default_value_t = 400)]
        iterations: usize,
        /// Rounds the trials are split into (reported separately for spread).
        #[arg(long, default_value_t = 4)]
        rounds: usize,
        /// One JSON line instead of the report.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().scenario {
        Scenario::Apiserver {
            writers,
            writes_per_writer,
            watchers,
            watch_events,
            objects,
            json,
        } => apiserver::run(&apiserver::Options {
            writers,
            writes_per_writer,
            watchers,
            watch_events,
            objects,
            json,
        }),
        Scenario::Hotswap {
            swaps,
            keys,
            rate,
            pause_ms,
            settle_secs,
            json,
        } => hotswap::run(&hotswap::Options {
            swaps,
            keys,
            rate,
            pause_ms,
            settle_secs,
            json,
        }),
        Scenario::Dispatch {
            iterations,
            rounds,
            json,
            only,
        } => dispatch::run(&dispatch::Options {
            iterations,
            rounds,
            json,
            only,
        }),
        Scenario::Guests {
            iterations,
            rounds,
            instances,
            json,
        } => guests::run(&guests::Options {
            iterations,
            rounds,
            instances,
            json,
        }),
        Scenario::Breakdown {
            iterations,
            rounds,
            json,
        } => breakdown::run(&breakdown::Options {
            iterations,
            rounds,
            json,
        }),
        Scenario::FloorSettings {
            iterations,
            rounds,
            json,
        } => sweep::run(&sweep::Options {
            iterations,
            rounds,
            json,
        }),
        Scenario::Deadline {
            iterations,
            rounds,
            json,
        } => deadline::run(&deadline::Options {
            trials: iterations,
            rounds,
            json,
        }),
    }
}
