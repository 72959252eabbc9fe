//! wasmctrl benchmarks. Run in release mode:
//!
//! ```text
//! cargo run --release -p wasmctrl-bench -- dispatch [--json]
//! cargo run --release -p wasmctrl-bench -- instance-cost [--json]
//! cargo run --release -p wasmctrl-bench -- deadline [--json]
//! cargo run --release -p wasmctrl-bench -- apiserver [--json]
//! cargo run --release -p wasmctrl-bench -- hotswap [--json]
//! cargo run --release -p wasmctrl-bench -- throughput [--json]
//! cargo run --release -p wasmctrl-bench -- latency [--json]
//! cargo run --release -p wasmctrl-bench -- density [--json]
//! cargo run --release -p wasmctrl-bench -- scale [--json]
//! cargo run --release -p wasmctrl-bench -- startup [--json]
//! cargo run --release -p wasmctrl-bench -- shadow [--json]
//! cargo run --release -p wasmctrl-bench -- skip [--json]
//! cargo run --release -p wasmctrl-bench -- admission [--json]
//! ```
//!
//! docs/BENCHMARKS.md describes the scenarios and records results.

mod admission;
mod apiserver;
mod breakdown;
mod cluster;
mod compile;
mod controllers;
mod deadline;
mod density;
mod dispatch;
mod floor;
mod guests;
mod heap;
mod hotswap;
mod instance_cost;
mod latency;
mod outbound;
mod procs;
mod rollout;
mod scale;
mod startup;
mod stats;
mod sweep;
mod throughput;

use clap::{Parser, Subcommand};
use controllers::Variant;

#[global_allocator]
static ALLOCATOR: heap::Counting = heap::Counting;

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
    /// Reconciles/s and controller CPU for N new objects, each needing one
    /// status patch: wasm (wasmctrl + plugin), native (same logic in Rust on
    /// wasmctrl's loop), kube-rs (kube::runtime::Controller), interleaved.
    Throughput {
        /// Objects created per round.
        #[arg(long, default_value_t = 10_000)]
        objects: usize,
        /// Rounds; each runs every variant once, in a rotating order (a
        /// multiple of the variants puts each variant in each place once).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Unmeasured rounds first, so the measured ones all meet the API
        /// server in its steady state (its watch history full).
        #[arg(long, default_value_t = 1)]
        warmup: usize,
        /// Keys reconciled at once, in every variant.
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
        /// Variants to run.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "wasm,native,kube-rs"
        )]
        variants: Vec<Variant>,
        /// One JSON line per variant instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Write → reconcile-start latency of one object updated at a steady
    /// rate while 10,000 others sit idle, and while a full resync of them is
    /// queued: wasm and kube-rs.
    Latency {
        /// Objects idle in the cache.
        #[arg(long, default_value_t = 10_000)]
        idle_objects: usize,
        /// Writes per second to the hot object.
        #[arg(long, default_value_t = 200)]
        rate: u32,
        /// Seconds of the idle row.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Full resyncs queued for the second row.
        #[arg(long, default_value_t = 10)]
        resyncs: usize,
        /// Keys reconciled at once, in every variant.
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
        /// Variants to run.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "wasm,kube-rs"
        )]
        variants: Vec<Variant>,
        /// One JSON line per variant and row instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Host RSS with 1, 10 and 100 distinct plugins loaded and idle, beside
    /// one idle kube-rs controller process.
    Density {
        /// Plugin counts to measure.
        #[arg(long, value_delimiter = ',', default_value = "1,10,100")]
        plugins: Vec<usize>,
        /// Objects per plugin's CRD.
        #[arg(long, default_value_t = 3)]
        objects: usize,
        /// Idle seconds before the RSS is read.
        #[arg(long, default_value_t = 3.0)]
        settle_secs: f64,
        /// `idleUnload` of the second row of each plugin count ("none": no
        /// such row).
        #[arg(long, default_value = "1s")]
        idle_unload: String,
        /// One JSON line per row instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// The wasm host with 1k, 10k, 100k objects: initial sync time, RSS,
    /// full-resync drain time.
    Scale {
        /// Object counts to measure (cumulative: objects are topped up).
        #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
        objects: Vec<usize>,
        /// Keys reconciled at once.
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
        /// Idle seconds before the RSS is read.
        #[arg(long, default_value_t = 3.0)]
        settle_secs: f64,
        /// The host's instance mode: `wasm` (a fresh instance per
        /// reconcile, the default) or `wasm-reuse`.
        #[arg(long, default_value = "wasm")]
        variant: Variant,
        /// One JSON line per size instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// From starting a host with N plugins to every plugin's object
    /// reconciled, with their compiled code not yet in `runtime.cacheDir`
    /// (cold) and then in it (warm).
    Startup {
        /// Plugins, each a distinct component with its own kind.
        #[arg(long, default_value_t = 100)]
        plugins: usize,
        #[arg(long)]
        json: bool,
    },
    /// The cost of a shadow candidate: reconciles/s and host CPU for N new
    /// objects (as `throughput`), without and with the same component in
    /// shadow mode.
    Shadow {
        /// Objects created per round.
        #[arg(long, default_value_t = 5_000)]
        objects: usize,
        /// Rounds; each runs both modes, in a rotating order.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Keys reconciled at once.
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
        /// The candidate's `maxConcurrentShadows`.
        #[arg(long, default_value_t = 4)]
        shadows: usize,
        /// One JSON line per mode instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// The savings of `skipUnchanged`: a full resync of N unchanged objects
    /// (drain time, reconciles run, host CPU), without and with it.
    Skip {
        /// Unchanged objects resynced.
        #[arg(long, default_value_t = 10_000)]
        objects: usize,
        /// Rounds; each runs both modes, in a rotating order.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Keys reconciled at once.
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
        /// One JSON line per mode instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// (internal) An API server process for the controller benchmarks.
    #[command(hide = true)]
    ServeApiserver {
        #[arg(long)]
        kubeconfig: std::path::PathBuf,
    },
    /// (internal) A controller process for the controller benchmarks.
    #[command(hide = true)]
    Controller(controllers::ControllerArgs),
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
    /// wasm-lean (the same built without std), wasm-floor (bare wasmtime),
    /// native (a Rust reconciler), interleaved.
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
        /// Compiled components are read from and written to this
        /// directory (`runtime.cacheDir`), so a second run compiles
        /// nothing. The guests' code is then mapped from its file, which
        /// the memory rows count as shared, not private.
        #[arg(long)]
        cache_dir: Option<std::path::PathBuf>,
        /// One JSON line per row instead of the tables.
        #[arg(long)]
        json: bool,
    },
    /// AdmissionReviews over HTTPS to the host's webhook server, answered
    /// by the webapp validator as wasm (fresh, reuse) and as native Rust in
    /// the same server: p50/p99 at a fixed rate, the highest rate with p99
    /// under 10 ms, and sustained reviews/s.
    Admission {
        /// Reviews per second of the fixed-rate row.
        #[arg(long, default_value_t = 500)]
        rate: u32,
        /// Seconds per row.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Clients of the sustained row.
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        /// The highest rate the doubling search tries.
        #[arg(long, default_value_t = 16_000)]
        max_rate: u32,
        /// One JSON line per variant and row instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// One GET to a loopback server per reconcile: a wasm plugin through
    /// the host's outbound hook against the same request sent natively.
    Outbound {
        /// Measured calls per variant.
        #[arg(long, default_value_t = 5_000)]
        iterations: usize,
        /// Interleaved rounds.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// One JSON line per variant instead of the table.
        #[arg(long)]
        json: bool,
        /// Run only this variant (`wasm`, `wasm-reuse` or `native`);
        /// repeatable. For profilers.
        #[arg(long)]
        only: Vec<String>,
    },
    /// What the in-memory function cache saves on a second component of the
    /// same language (a `dev --watch` rebuild): compile times, cache off
    /// and on.
    Compile {
        /// Rounds per language and setting (the median is reported).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Only these languages (`rust`, `python`, `js`); repeatable.
        /// All three by default.
        #[arg(long = "language")]
        languages: Vec<String>,
        /// One JSON line per row instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// The per-reconcile price of a fresh instance for a reconcile that does
    /// real work (the throughput reconciler, canned host answers): fresh
    /// against reuse, in process.
    InstanceCost {
        /// Measured calls per mode.
        #[arg(long, default_value_t = 100_000)]
        iterations: usize,
        /// Interleaved rounds.
        #[arg(long, default_value_t = 10)]
        rounds: usize,
        /// Answers carry managedFields (a host with
        /// `cache.stripManagedFields: false`).
        #[arg(long)]
        keep_managed_fields: bool,
        /// One JSON line per mode instead of the table.
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
        Scenario::Throughput {
            objects,
            rounds,
            warmup,
            concurrency,
            variants,
            json,
        } => throughput::run(&throughput::Options {
            objects,
            rounds,
            warmup,
            concurrency,
            variants,
            json,
        }),
        Scenario::Latency {
            idle_objects,
            rate,
            seconds,
            resyncs,
            concurrency,
            variants,
            json,
        } => latency::run(&latency::Options {
            idle_objects,
            rate,
            seconds,
            resyncs,
            concurrency,
            variants,
            json,
        }),
        Scenario::Density {
            plugins,
            objects,
            settle_secs,
            idle_unload,
            json,
        } => density::run(&density::Options {
            plugins,
            objects,
            settle_secs,
            idle_unload: (idle_unload != "none").then_some(idle_unload),
            json,
        }),
        Scenario::Scale {
            objects,
            concurrency,
            settle_secs,
            variant,
            json,
        } => scale::run(&scale::Options {
            objects,
            concurrency,
            settle_secs,
            variant,
            json,
        }),
        Scenario::Shadow {
            objects,
            rounds,
            concurrency,
            shadows,
            json,
        } => rollout::run_shadow(&rollout::ShadowOptions {
            objects,
            rounds,
            concurrency,
            shadows,
            json,
        }),
        Scenario::Skip {
            objects,
            rounds,
            concurrency,
            json,
        } => rollout::run_skip(&rollout::SkipOptions {
            objects,
            rounds,
            concurrency,
            json,
        }),
        Scenario::ServeApiserver { kubeconfig } => cluster::serve(&kubeconfig),
        Scenario::Controller(args) => controllers::run(args),
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
        Scenario::Admission {
            rate,
            seconds,
            concurrency,
            max_rate,
            json,
        } => admission::run(&admission::Options {
            rate,
            seconds,
            concurrency,
            max_rate,
            json,
        }),
        Scenario::Outbound {
            iterations,
            rounds,
            json,
            only,
        } => outbound::run(&outbound::Options {
            iterations,
            rounds,
            json,
            only,
        }),
        Scenario::Compile {
            rounds,
            languages,
            json,
        } => compile::run(&compile::Options {
            rounds,
            languages,
            json,
        }),
        Scenario::InstanceCost {
            iterations,
            rounds,
            keep_managed_fields,
            json,
        } => instance_cost::run(&instance_cost::Options {
            iterations,
            rounds,
            keep_managed_fields,
            json,
        }),
        Scenario::Guests {
            iterations,
            rounds,
            instances,
            cache_dir,
            json,
        } => guests::run(&guests::Options {
            iterations,
            rounds,
            instances,
            cache_dir,
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
        Scenario::Startup { plugins, json } => startup::run(&startup::Options { plugins, json }),
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
