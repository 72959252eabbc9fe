//! `dispatch`: what one reconcile of a do-nothing reconciler costs, as
//! wasmctrl runs it (`wasm-fresh`), as bare wasmtime can at best
//! (`wasm-floor`), and as a native Rust reconciler (`native`); and, beside
//! `wasm-fresh`, the same reconciler built without the standard library
//! (`wasm-lean`, the `noop-lean` plugin: no WASI import), to show what
//! std's imports cost a fresh instance.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use wasmctrl::control::metrics::Metrics;
use wasmctrl::sandbox::{Plugin, PluginSpec, Runtime, RuntimeConfig};
use wasmctrl::{Action, ObjectKey, Reconcile, ReconcileError, ReconcileRequest};

use crate::floor::{self, Floor};
use crate::stats::{Samples, Summary, load_average, round};

/// The goals from the acceptance.
const GOAL_FRESH_OVER_FLOOR: f64 = 1.2;
const GOAL_FLOOR_US: f64 = 20.0;

#[derive(Debug, Clone)]
pub struct Options {
    /// Measured iterations per variant.
    pub iterations: usize,
    /// Interleaved rounds the iterations are split into.
    pub rounds: usize,
    pub json: bool,
    /// Measure only these variants (all when empty); for profiling one path.
    pub only: Vec<Variant>,
}

/// What is measured. The floor is measured both ways and reported as the
/// faster of the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Variant {
    #[value(name = "wasm-fresh")]
    WasmFresh,
    #[value(name = "wasm-lean")]
    WasmLean,
    #[value(name = "wasm-floor-sync")]
    WasmFloorSync,
    #[value(name = "wasm-floor-async")]
    WasmFloorAsync,
    #[value(name = "native")]
    Native,
}

impl Variant {
    const ALL: [Variant; 5] = [
        Variant::WasmFresh,
        Variant::WasmLean,
        Variant::WasmFloorSync,
        Variant::WasmFloorAsync,
        Variant::Native,
    ];

    fn name(self) -> &'static str {
        match self {
            Variant::WasmFresh => "wasm-fresh",
            Variant::WasmLean => "wasm-lean",
            Variant::WasmFloorSync => "wasm-floor-sync",
            Variant::WasmFloorAsync => "wasm-floor-async",
            Variant::Native => "native",
        }
    }
}

/// The same logic as the `noop` plugin, as a native reconciler in the host.
struct NativeNoop;

impl Reconcile for NativeNoop {
    async fn reconcile(&self, _request: ReconcileRequest) -> Result<Action, ReconcileError> {
        Ok(Action::done())
    }
}

/// Everything the variants run, set up once.
struct Bench {
    tokio: tokio::runtime::Runtime,
    plugin: Arc<Plugin>,
    lean: Arc<Plugin>,
    floor: Floor,
    native: NativeNoop,
    request: ReconcileRequest,
    floor_key: floor::ObjectKey,
}

impl Bench {
    fn new() -> anyhow::Result<Self> {
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the tokio runtime")?;
        let noop = wasmctrl_plugin_artifacts::NOOP;
        let (plugin, lean) = tokio.block_on(async {
            let runtime = Runtime::new(RuntimeConfig::default(), Arc::new(Metrics::new()))?;
            let plugin = runtime.load_file(noop, PluginSpec::new("noop")).await?;
            let lean = runtime
                .load_file(
                    wasmctrl_plugin_artifacts::NOOP_LEAN,
                    PluginSpec::new("noop-lean"),
                )
                .await?;
            anyhow::Ok((plugin, lean))
        })?;
        let floor = Floor::new(Path::new(noop))?;
        let request = ReconcileRequest {
            key: ObjectKey::namespaced("default", "bench"),
            attempt: 0,
            timeout: Duration::from_secs(10),
            cancel: CancellationToken::new(),
        };
        let floor_key = floor::ObjectKey {
            namespace: request.key.namespace.clone(),
            name: request.key.name.clone(),
        };
        let bench = Self {
            tokio,
            plugin,
            lean,
            floor,
            native: NativeNoop,
            request,
            floor_key,
        };
        bench.check()?;
        Ok(bench)
    }

    /// Every variant answers `done`, so all of them do the same work.
    fn check(&self) -> anyhow::Result<()> {
        for (plugin, variant) in [(&self.plugin, "wasm-fresh"), (&self.lean, "wasm-lean")] {
            let fresh = self
                .tokio
                .block_on(plugin.invoke(self.request.clone()))
                .result;
            ensure!(fresh == Ok(Action::done()), "{variant} returned {fresh:?}");
        }
        for result in [
            self.floor.call_sync(&self.floor_key)?,
            self.floor.call_async(&self.floor_key)?,
        ] {
            match result {
                Ok(a) if !a.requeue && a.requeue_after_ms == 0 => {}
                other => bail!("wasm-floor returned {other:?}"),
            }
        }
        let native = self
            .tokio
            .block_on(self.native.reconcile(self.request.clone()));
        ensure!(native == Ok(Action::done()), "native returned {native:?}");
        Ok(())
    }

    /// Runs `n` iterations of `variant`, timing each one alone (the
    /// request is cloned before the clock starts).
    fn batch(&self, variant: Variant, n: usize, out: &mut Samples) -> anyhow::Result<()> {
        match variant {
            Variant::WasmFresh | Variant::WasmLean => self.tokio.block_on(async {
                let plugin = if variant == Variant::WasmFresh {
                    &self.plugin
                } else {
                    &self.lean
                };
                for _ in 0..n {
                    let request = self.request.clone();
                    let start = Instant::now();
                    let invocation = plugin.invoke(request).await;
                    out.push(start.elapsed());
                    ensure!(
                        invocation.result.is_ok(),
                        "{}: {:?}",
                        variant.name(),
                        invocation.result
                    );
                }
                Ok(())
            }),
            Variant::WasmFloorSync | Variant::WasmFloorAsync => {
                for _ in 0..n {
                    let key = self.floor_key.clone();
                    let start = Instant::now();
                    let result = if variant == Variant::WasmFloorSync {
                        self.floor.call_sync(&key)
                    } else {
                        self.floor.call_async(&key)
                    };
                    out.push(start.elapsed());
                    ensure!(
                        matches!(result, Ok(Ok(_))),
                        "{}: {result:?}",
                        variant.name()
                    );
                }
                Ok(())
            }
            Variant::Native => self.tokio.block_on(async {
                for _ in 0..n {
                    let request = self.request.clone();
                    let start = Instant::now();
                    let result = reconcile_through_trait(black_box(&self.native), request).await;
                    out.push(start.elapsed());
                    ensure!(result.is_ok(), "native: {result:?}");
                }
                Ok(())
            }),
        }
    }
}

/// Calls a reconciler the way the controller loop does: through the trait.
async fn reconcile_through_trait<R: Reconcile>(
    reconciler: &R,
    request: ReconcileRequest,
) -> Result<Action, ReconcileError> {
    reconciler.reconcile(request).await
}

/// One line of `--json` output.
#[derive(Serialize)]
struct JsonLine {
    scenario: &'static str,
    variant: &'static str,
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
    let variants: Vec<Variant> = Variant::ALL
        .into_iter()
        .filter(|v| options.only.is_empty() || options.only.contains(v))
        .collect();
    let load_before = load_average();
    let bench = Bench::new()?;

    // Warm-up: one batch of each, discarded (page tables, pool slots, caches).
    let per_round = options.iterations.div_ceil(options.rounds);
    for &variant in &variants {
        bench.batch(variant, per_round.min(1000), &mut Samples::default())?;
    }

    // Round r runs a batch of every variant in turn, starting with a
    // different variant each round so none always follows the same one.
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
            bench.batch(variants[v], n, &mut samples[v])?;
        }
    }
    let elapsed = started.elapsed();
    let load_after = load_average();

    let summaries: Vec<(Variant, Summary)> = variants
        .iter()
        .zip(&samples)
        .map(|(&v, s)| (v, s.summary()))
        .collect();
    let get = |v: Variant| summaries.iter().find(|(x, _)| *x == v).map(|(_, s)| *s);
    let floor = [Variant::WasmFloorSync, Variant::WasmFloorAsync]
        .into_iter()
        .filter_map(|v| get(v).map(|s| (v, s)))
        .min_by_key(|(_, s)| s.median);
    let fresh = get(Variant::WasmFresh);
    let lean = get(Variant::WasmLean);
    let native = get(Variant::Native);

    if options.json {
        let mut lines = Vec::new();
        if let Some(s) = fresh {
            lines.push(("wasm-fresh", s));
        }
        if let Some(s) = lean {
            lines.push(("wasm-lean", s));
        }
        if let Some((_, s)) = floor {
            lines.push(("wasm-floor", s));
        }
        if let Some(s) = native {
            lines.push(("native", s));
        }
        for (variant, s) in lines {
            let line = JsonLine {
                scenario: "dispatch",
                variant,
                median_us: round(s.median_us(), 3),
                p99_us: round(s.p99_us(), 3),
                iterations: s.count,
            };
            println!("{}", serde_json::to_string(&line)?);
        }
        return Ok(());
    }

    println!(
        "dispatch: the noop plugin, {} iterations per variant in {} interleaved rounds ({:.1} s)",
        options.iterations,
        options.rounds,
        elapsed.as_secs_f64()
    );
    println!(
        "wasm-fresh, wasm-lean and native run on a tokio current_thread runtime; the floor runs outside tokio"
    );
    println!("floor engine: {:?}", floor::EngineKnobs::floor());
    println!(
        "nproc {}, load average {load_before} before, {load_after} after",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    println!(
        "{:<18} {:>10} {:>10} {:>10} {:>10} {:>11}",
        "variant", "median µs", "p99 µs", "min µs", "max µs", "iterations"
    );
    for (v, s) in &summaries {
        let mut name = v.name().to_string();
        if floor.is_some_and(|(f, _)| f == *v) {
            name = format!("{name} *");
        }
        println!(
            "{:<18} {:>10.2} {:>10.2} {:>10.2} {:>10.1} {:>11}",
            name,
            s.median_us(),
            s.p99_us(),
            s.min as f64 / 1e3,
            s.max as f64 / 1e3,
            s.count
        );
    }
    if let Some((v, _)) = floor {
        println!("* wasm-floor = {} (the faster floor by median)", v.name());
    }
    println!();
    if let (Some(fresh), Some((_, floor))) = (fresh, floor) {
        let ratio = fresh.median as f64 / floor.median as f64;
        println!(
            "wasm-fresh / wasm-floor median: {ratio:.2}x (goal <= {GOAL_FRESH_OVER_FLOOR}x: {}), p99: {:.2}x",
            verdict(ratio <= GOAL_FRESH_OVER_FLOOR),
            fresh.p99 as f64 / floor.p99 as f64
        );
        println!(
            "wasm-fresh - wasm-floor median: {:.2} µs",
            fresh.median_us() - floor.median_us()
        );
    }
    if let Some((_, floor)) = floor {
        println!(
            "wasm-floor median: {:.2} µs (goal <= {GOAL_FLOOR_US} µs: {})",
            floor.median_us(),
            verdict(floor.median_us() <= GOAL_FLOOR_US)
        );
    }
    if let (Some(fresh), Some(lean)) = (fresh, lean) {
        println!(
            "wasm-lean / wasm-fresh median: {:.2}x (the same reconciler without std's WASI imports)",
            lean.median as f64 / fresh.median as f64
        );
    }
    if let (Some(fresh), Some(native)) = (fresh, native) {
        println!(
            "wasm-fresh / native median: {:.0}x",
            fresh.median as f64 / native.median.max(1) as f64
        );
    }
    Ok(())
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}
