//! `breakdown`: where `wasm-fresh` spends its time beyond `wasm-floor`. A
//! ladder from the floor to wasmctrl's own path, each step adding one thing
//! wasmctrl does (engine setting, store setup, executor), all interleaved in
//! rounds like `dispatch`. The difference between consecutive steps is what
//! that one thing costs.
//!
//! Steps 0–6 are bare wasmtime with the floor's synchronous import
//! implementations (the noop guest calls no import, so the sync WASI linker
//! never blocks even under tokio); step 7 is `Plugin::invoke` itself. What
//! step 6 → 7 adds is what the ladder does not reproduce: wasmctrl's async
//! linker (async WASI and `context`/`kube` imports), its `GuestOutput`
//! streams (approximated here by `MemoryOutputPipe`), and its bookkeeping.
//! Memory-reset settings, which differ between the floor and older wasmctrl
//! engines by far the most, are compared by `floor-settings`.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use wasmctrl::control::metrics::Metrics;
use wasmctrl::sandbox::{Plugin, PluginSpec, Runtime, RuntimeConfig};
use wasmctrl::{ObjectKey, ReconcileRequest};
use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::WasiCtx;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

use crate::floor::{self, EngineKnobs, Floor, FloorState, block_on};
use crate::stats::{Samples, load_average, round};

#[derive(Debug, Clone)]
pub struct Options {
    pub iterations: usize,
    pub rounds: usize,
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    FloorSync,
    FloorAsync,
    Epoch,
    Cow,
    WasmctrlPool,
    StoreSetup,
    TokioSelect,
    WasmFresh,
}

impl Step {
    const ALL: [Step; 8] = [
        Step::FloorSync,
        Step::FloorAsync,
        Step::Epoch,
        Step::Cow,
        Step::WasmctrlPool,
        Step::StoreSetup,
        Step::TokioSelect,
        Step::WasmFresh,
    ];

    fn name(self) -> &'static str {
        match self {
            Step::FloorSync => "0 floor-sync",
            Step::FloorAsync => "1 floor-async",
            Step::Epoch => "2 +epoch",
            Step::Cow => "3 +cow",
            Step::WasmctrlPool => "4 +wasmctrl-pool",
            Step::StoreSetup => "5 +store-setup",
            Step::TokioSelect => "6 +tokio-select",
            Step::WasmFresh => "7 wasm-fresh",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Step::FloorSync => "bare InstancePre, sync instantiate + call, best engine",
            Step::FloorAsync => "the same through the async API (a fiber), no executor",
            Step::Epoch => {
                "epoch interruption compiled in; deadline 1 + wasmctrl's callback; 1 ms ticker"
            }
            Step::Cow => "memory_init_cow on (data segments mapped from the image)",
            Step::WasmctrlPool => {
                "pool sized like wasmctrl (128 instances, 1 GiB): its engine exactly"
            }
            Step::StoreSetup => "WASI with 2 output pipes and no network, store limiter",
            Step::TokioSelect => "in tokio: select!(cancelled, timeout(backstop, call))",
            Step::WasmFresh => "Plugin::invoke (wasmctrl)",
        }
    }

    /// The engine a bare step runs on (None: wasmctrl's own). Each step
    /// changes one setting of the previous one, ending at wasmctrl's.
    fn engine(self) -> Option<EngineKnobs> {
        let floor = EngineKnobs::floor();
        let epoch = EngineKnobs {
            epoch: true,
            ..floor
        };
        let cow = EngineKnobs {
            memory_init_cow: true,
            ..epoch
        };
        match self {
            Step::FloorSync | Step::FloorAsync => Some(floor),
            Step::Epoch => Some(epoch),
            Step::Cow => Some(cow),
            Step::WasmctrlPool | Step::StoreSetup | Step::TokioSelect => {
                Some(EngineKnobs::WASMCTRL)
            }
            Step::WasmFresh => None,
        }
    }
}

struct Ladder {
    tokio: tokio::runtime::Runtime,
    plugin: Arc<Plugin>,
    /// One compiled floor per distinct engine setting.
    floors: Vec<(EngineKnobs, Floor)>,
    request: ReconcileRequest,
    key: floor::ObjectKey,
}

impl Ladder {
    fn floor(&self, knobs: EngineKnobs) -> &Floor {
        &self
            .floors
            .iter()
            .find(|(k, _)| *k == knobs)
            .expect("every step's engine is built")
            .1
    }

    /// What `wasmctrl`'s `new_store` does, on a bare engine: the epoch
    /// deadline and its callback, and with `setup` also WASI with output
    /// pipes and no network, and the store limiter.
    fn store(
        &self,
        floor: &Floor,
        setup: bool,
        cancel: CancellationToken,
        deadline: Instant,
    ) -> Store<FloorState> {
        let mut store = if setup {
            let stdout = MemoryOutputPipe::new(4096);
            let stderr = MemoryOutputPipe::new(4096);
            let wasi = WasiCtx::builder()
                .stdout(stdout)
                .stderr(stderr)
                .allow_tcp(false)
                .allow_udp(false)
                .allow_ip_name_lookup(false)
                .build();
            let mut store = Store::new(floor.engine(), FloorState::new(wasi));
            store.limiter(|s| &mut s.limiter);
            store
        } else {
            floor.store()
        };
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            if cancel.is_cancelled() {
                return Err(wasmtime::format_err!("cancelled"));
            }
            if Instant::now() >= deadline {
                return Ok(UpdateDeadline::Interrupt);
            }
            Ok(UpdateDeadline::Yield(1))
        });
        store
    }

    fn batch(&self, step: Step, n: usize, out: &mut Samples) -> anyhow::Result<()> {
        let ok = |r: anyhow::Result<Result<floor::Action, floor::ReconcileError>>| {
            ensure!(matches!(r, Ok(Ok(_))), "{}: {r:?}", step.name());
            Ok(())
        };
        match step {
            Step::WasmFresh => self.tokio.block_on(async {
                for _ in 0..n {
                    let request = self.request.clone();
                    let start = Instant::now();
                    let invocation = self.plugin.invoke(request).await;
                    out.push(start.elapsed());
                    ensure!(
                        invocation.result.is_ok(),
                        "wasm-fresh: {:?}",
                        invocation.result
                    );
                }
                Ok(())
            }),
            Step::TokioSelect => {
                let floor = self.floor(step.engine().expect("a bare step"));
                let timeout = self.request.timeout;
                let backstop = timeout + Duration::from_millis(7);
                self.tokio.block_on(async {
                    for _ in 0..n {
                        let key = self.key.clone();
                        let start = Instant::now();
                        let cancel = self.request.cancel.clone();
                        let mut store = self.store(floor, true, cancel.clone(), start + timeout);
                        let result = tokio::select! {
                            biased;
                            _ = cancel.cancelled() => None,
                            r = tokio::time::timeout(backstop, floor.instantiate_and_call(&mut store, &key)) => r.ok(),
                        };
                        black_box(store.data().limiter.memory_denied());
                        drop(store);
                        out.push(start.elapsed());
                        ok(result.context("cancelled or timed out")?)?;
                    }
                    Ok(())
                })
            }
            Step::FloorSync | Step::FloorAsync => {
                let floor = self.floor(EngineKnobs::floor());
                for _ in 0..n {
                    let key = self.key.clone();
                    let start = Instant::now();
                    let result = if step == Step::FloorSync {
                        floor.call_sync(&key)
                    } else {
                        floor.call_async(&key)
                    };
                    out.push(start.elapsed());
                    ok(result)?;
                }
                Ok(())
            }
            Step::Epoch | Step::Cow | Step::WasmctrlPool | Step::StoreSetup => {
                let floor = self.floor(step.engine().expect("a bare step"));
                let timeout = self.request.timeout;
                for _ in 0..n {
                    let key = self.key.clone();
                    let start = Instant::now();
                    let cancel = self.request.cancel.clone();
                    let result = block_on(async {
                        let mut store =
                            self.store(floor, step == Step::StoreSetup, cancel, start + timeout);
                        let r = floor.instantiate_and_call(&mut store, &key).await;
                        black_box(store.data().limiter.memory_denied());
                        r
                    });
                    out.push(start.elapsed());
                    ok(result)?;
                }
                Ok(())
            }
        }
    }
}

/// Bumps the epoch of every engine every `tick` while any of them lives.
fn start_ticker(engines: Vec<Engine>, tick: Duration) {
    let weak: Vec<_> = engines.iter().map(Engine::weak).collect();
    drop(engines);
    std::thread::Builder::new()
        .name("bench-epoch".into())
        .spawn(move || {
            loop {
                let live: Vec<Engine> = weak.iter().filter_map(|w| w.upgrade()).collect();
                if live.is_empty() {
                    return;
                }
                for e in &live {
                    e.increment_epoch();
                }
                drop(live);
                std::thread::sleep(tick);
            }
        })
        .expect("cannot spawn the ticker thread");
}

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
    let load_before = load_average();
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let config = RuntimeConfig::default();
    let tick = config.epoch_tick;
    let noop = wasmctrl_plugin_artifacts::NOOP;
    let plugin = tokio.block_on(async {
        let runtime = Runtime::new(config, Arc::new(Metrics::new()))?;
        let spec = PluginSpec::new("noop");
        anyhow::Ok(runtime.load_file(noop, spec).await?)
    })?;
    let mut floors: Vec<(EngineKnobs, Floor)> = Vec::new();
    for knobs in Step::ALL.iter().filter_map(|s| s.engine()) {
        if !floors.iter().any(|(k, _)| *k == knobs) {
            floors.push((knobs, Floor::with_engine(Path::new(noop), knobs)?));
        }
    }
    start_ticker(
        floors
            .iter()
            .filter(|(k, _)| k.epoch)
            .map(|(_, f)| f.engine().clone())
            .collect(),
        tick,
    );
    let request = ReconcileRequest {
        key: ObjectKey::namespaced("default", "bench"),
        attempt: 0,
        timeout: Duration::from_secs(10),
        cancel: CancellationToken::new(),
    };
    let key = floor::ObjectKey {
        namespace: request.key.namespace.clone(),
        name: request.key.name.clone(),
    };
    let ladder = Ladder {
        tokio,
        plugin,
        floors,
        request,
        key,
    };

    let per_round = options.iterations.div_ceil(options.rounds);
    for step in Step::ALL {
        ladder.batch(step, per_round.min(1000), &mut Samples::default())?;
    }
    let mut samples: Vec<Samples> = Step::ALL
        .iter()
        .map(|_| Samples::with_capacity(options.iterations))
        .collect();
    let started = Instant::now();
    for round in 0..options.rounds {
        let n = per_round.min(options.iterations - round * per_round);
        if n == 0 {
            break;
        }
        for i in 0..Step::ALL.len() {
            let s = (round + i) % Step::ALL.len();
            ladder.batch(Step::ALL[s], n, &mut samples[s])?;
        }
    }
    let elapsed = started.elapsed();
    let summaries: Vec<_> = samples.iter().map(Samples::summary).collect();

    if options.json {
        for (step, s) in Step::ALL.iter().zip(&summaries) {
            let line = JsonLine {
                scenario: "breakdown",
                variant: step.name(),
                median_us: round(s.median_us(), 3),
                p99_us: round(s.p99_us(), 3),
                iterations: s.count,
            };
            println!("{}", serde_json::to_string(&line)?);
        }
        return Ok(());
    }
    println!(
        "breakdown: the noop plugin, {} iterations per step in {} interleaved rounds ({:.1} s)",
        options.iterations,
        options.rounds,
        elapsed.as_secs_f64()
    );
    println!(
        "nproc {}, load average {load_before} before, {} after",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    println!();
    println!(
        "{:<18} {:>10} {:>10} {:>10}  what the step adds",
        "step", "median µs", "p99 µs", "Δ median"
    );
    let mut previous: Option<f64> = None;
    for (step, s) in Step::ALL.iter().zip(&summaries) {
        let delta = previous.map_or(String::new(), |p| format!("{:+.2}", s.median_us() - p));
        println!(
            "{:<18} {:>10.2} {:>10.2} {:>10}  {}",
            step.name(),
            s.median_us(),
            s.p99_us(),
            delta,
            step.describe()
        );
        previous = Some(s.median_us());
    }
    Ok(())
}
