//! `guests`: what one reconcile costs per guest language and instance mode,
//! and what a warm instance costs in memory.
//!
//! The same test reconciler in Rust, Python (componentize-py) and
//! TypeScript (componentize-js): `misbehave`, `misbehave-py`,
//! `misbehave-ts`, key `fine` (returns done at once). Each is dispatched in
//! `fresh` mode (an instance per call) and `reuse` mode (a warm instance),
//! interleaved in rounds so the ratios come from one run. Memory: `K`
//! concurrent slow reconciles make the pool hold `K` warm instances; the
//! process's growth over one instance, divided by `K - 1`, is the cost of
//! one more live instance. It is read several ways, because `VmRSS` counts
//! a page once per mapping: the interpreters' memory images are mapped
//! copy-on-write into every instance, so eight instances reading the same
//! image page count it eight times though the machine holds it once. `PSS`
//! divides shared pages among their mappings (what the machine pays);
//! `private` is the pages written (the guest's dirtied linear memory, the
//! host's per-instance heap); `host heap` is the part of `private` this
//! process allocated (wasmtime's instance structures, the store); `written`
//! is the image pages an instance copied on write: after instantiation and
//! the `metadata` call (`loaded`), after one short call (`first`) and after
//! the slow call (`warm`, per instance).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use wasmctrl::control::metrics::Metrics;
use wasmctrl::sandbox::{InstanceMode, Plugin, PluginSpec, ReuseLimits, Runtime, RuntimeConfig};
use wasmctrl::{Action, ObjectKey, ReconcileRequest};
use wasmctrl_plugin_artifacts as artifacts;

use crate::procs;
use crate::stats::{Samples, load_average, round};

#[derive(Debug, Clone)]
pub struct Options {
    /// Measured calls per guest and mode.
    pub iterations: usize,
    /// Interleaved rounds the calls are split into.
    pub rounds: usize,
    /// Warm instances for the memory measurement.
    pub instances: usize,
    /// `runtime.cacheDir`: compiled components persist there.
    pub cache_dir: Option<std::path::PathBuf>,
    pub json: bool,
}

const GUESTS: &[(&str, &str, &str)] = &[
    ("rust", "misbehave", artifacts::MISBEHAVE),
    ("python", "misbehave-py", artifacts::MISBEHAVE_PY),
    ("js", "misbehave-ts", artifacts::MISBEHAVE_TS),
];

#[derive(Serialize)]
struct DispatchRow {
    scenario: &'static str,
    guest: &'static str,
    mode: &'static str,
    median_us: f64,
    p99_us: f64,
    calls: usize,
}

#[derive(Serialize)]
struct MemoryRow {
    scenario: &'static str,
    guest: &'static str,
    instances: usize,
    /// `VmRSS` growth per instance (shared image pages counted per mapping).
    rss_per_instance_mib: f64,
    /// Proportional set size growth per instance.
    pss_per_instance_mib: f64,
    /// Private (`RssAnon`) growth per instance.
    private_per_instance_mib: f64,
    /// Live host heap growth per instance (part of `private`).
    heap_per_instance_mib: f64,
    /// Shared (file and shmem) growth per instance, counted per mapping.
    shared_per_instance_mib: f64,
    /// Image pages the first instance wrote in instantiation and `metadata`.
    loaded_written_kib: u64,
    /// The same after one more call (`fine`).
    first_written_kib: u64,
    /// Image pages written per warm instance, after the slow call (mean).
    warm_written_kib: u64,
}

fn request(name: &str) -> ReconcileRequest {
    ReconcileRequest {
        key: ObjectKey::namespaced("default", name),
        attempt: 0,
        timeout: Duration::from_secs(10),
        cancel: CancellationToken::new(),
    }
}

async fn load(
    rt: &Runtime,
    name: &str,
    path: &str,
    mode: InstanceMode,
    idle: usize,
) -> anyhow::Result<Arc<Plugin>> {
    let spec = PluginSpec {
        instance_mode: mode,
        reuse: ReuseLimits {
            max_calls: u32::MAX,
            max_idle: idle,
            ..ReuseLimits::default()
        },
        ..PluginSpec::new(name)
    };
    rt.load_file(path, spec)
        .await
        .with_context(|| format!("loading {path}"))
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    tokio.block_on(run_async(options))
}

async fn run_async(options: &Options) -> anyhow::Result<()> {
    let config = RuntimeConfig {
        max_instances: (options.instances as u32 + 4).max(16),
        cache_dir: options.cache_dir.clone(),
        ..RuntimeConfig::default()
    };
    let rt = Runtime::new(config, Arc::new(Metrics::new()))?;
    let mut plugins = Vec::new();
    for (guest, name, path) in GUESTS {
        for (mode, label) in [
            (InstanceMode::Fresh, "fresh"),
            (InstanceMode::Reuse, "reuse"),
        ] {
            let plugin = load(&rt, name, path, mode, 1).await?;
            // Warm up: the first call compiles nothing (loading did) but
            // faults in the code pages.
            for _ in 0..10 {
                let result = plugin.invoke(request("fine")).await.result;
                anyhow::ensure!(result == Ok(Action::done()), "{guest}: {result:?}");
            }
            plugins.push((
                *guest,
                label,
                plugin,
                Samples::with_capacity(options.iterations),
            ));
        }
    }
    let per_round = (options.iterations / options.rounds.max(1)).max(1);
    for _ in 0..options.rounds.max(1) {
        for (_, _, plugin, samples) in &mut plugins {
            for _ in 0..per_round {
                let started = Instant::now();
                let invocation = plugin.invoke(request("fine")).await;
                samples.push(started.elapsed());
                debug_assert_eq!(invocation.result, Ok(Action::done()));
            }
        }
    }
    let rows: Vec<DispatchRow> = plugins
        .iter()
        .map(|(guest, mode, _, samples)| {
            let s = samples.summary();
            DispatchRow {
                scenario: "guests",
                guest,
                mode,
                median_us: round(s.median_us(), 1),
                p99_us: round(s.p99_us(), 1),
                calls: s.count,
            }
        })
        .collect();
    drop(plugins);

    let mut memory = Vec::new();
    let k = options.instances.max(2);
    let pid = std::process::id();
    // Counting costs an atomic add per allocation: only from here on, so
    // the timings above are not affected.
    crate::heap::start();
    for (guest, name, path) in GUESTS {
        let plugin = load(&rt, name, path, InstanceMode::Reuse, k).await?;
        // Loading ran `metadata` on the instance the pool now holds.
        let loaded_written = procs::written_image_pages()?.iter().sum::<u64>();
        plugin.invoke(request("fine")).await;
        let before = procs::residency(pid)?;
        let heap_before = crate::heap::live_bytes();
        let first_written = procs::written_image_pages()?.iter().sum::<u64>();
        let calls: Vec<_> = (0..k)
            .map(|_| {
                let plugin = plugin.clone();
                tokio::spawn(async move { plugin.invoke(request("slow-300")).await.result })
            })
            .collect();
        for call in calls {
            let result = call.await?;
            anyhow::ensure!(result == Ok(Action::done()), "{guest}: {result:?}");
        }
        let warm = plugin.idle_instances();
        let after = procs::residency(pid)?;
        let heap = (crate::heap::live_bytes() - heap_before) as f64 / (1 << 20) as f64;
        let written = procs::written_image_pages()?;
        let per = |grown: f64| round(grown.max(0.0) / (warm.max(2) - 1) as f64, 2);
        memory.push(MemoryRow {
            scenario: "guests-memory",
            guest,
            instances: warm,
            rss_per_instance_mib: per(after.rss - before.rss),
            pss_per_instance_mib: per(after.pss - before.pss),
            private_per_instance_mib: per(after.private - before.private),
            heap_per_instance_mib: per(heap),
            shared_per_instance_mib: per(after.shared - before.shared),
            loaded_written_kib: loaded_written * 4,
            first_written_kib: first_written * 4,
            warm_written_kib: written.iter().sum::<u64>() * 4 / written.len().max(1) as u64,
        });
    }

    if options.json {
        for row in &rows {
            println!("{}", serde_json::to_string(row)?);
        }
        for row in &memory {
            println!("{}", serde_json::to_string(row)?);
        }
        return Ok(());
    }
    println!(
        "guests: one reconcile (key `fine`), {} calls each, load {}",
        per_round * options.rounds.max(1),
        load_average()
    );
    println!(
        "{:<8} {:<6} {:>11} {:>11}",
        "guest", "mode", "median µs", "p99 µs"
    );
    for r in &rows {
        println!(
            "{:<8} {:<6} {:>11} {:>11}",
            r.guest, r.mode, r.median_us, r.p99_us
        );
    }
    println!();
    println!("per warm instance: MiB, then KiB of memory image written");
    println!(
        "{:<8} {:>9} {:>7} {:>7} {:>8} {:>9} {:>7} {:>14} {:>13} {:>12}",
        "guest",
        "instances",
        "VmRSS",
        "PSS",
        "private",
        "host heap",
        "shared",
        "written loaded",
        "written first",
        "written warm"
    );
    for m in &memory {
        println!(
            "{:<8} {:>9} {:>7} {:>7} {:>8} {:>9} {:>7} {:>14} {:>13} {:>12}",
            m.guest,
            m.instances,
            m.rss_per_instance_mib,
            m.pss_per_instance_mib,
            m.private_per_instance_mib,
            m.heap_per_instance_mib,
            m.shared_per_instance_mib,
            m.loaded_written_kib,
            m.first_written_kib,
            m.warm_written_kib
        );
    }
    Ok(())
}
