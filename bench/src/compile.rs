//! `compile`: what the in-memory function cache (`runtime.functionCache`)
//! saves when a host compiles a second component of the same language, as
//! a `dev --watch` rebuild or a second plugin does. For each language, two
//! different plugins built by the same toolchain are compiled one after the
//! other on a fresh runtime, with the cache off and on; each row is the
//! median over rounds. The second compile with the cache on is the figure
//! of an interpreted plugin's rebuild. The `disk` row is a restart: a host
//! keeping its functions on disk compiles the first plugin, and a new host
//! on the same directory compiles a rebuild of it (other bytes, the same
//! functions), as `wasmctrl dev` does after a restart.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, ensure};
use serde::Serialize;
use wasmctrl::control::metrics::Metrics;
use wasmctrl::sandbox::{PluginSpec, Runtime, RuntimeConfig};
use wasmctrl_plugin_artifacts as artifacts;

use crate::stats::{load_average, round};

#[derive(Debug, Clone)]
pub struct Options {
    pub rounds: usize,
    /// The languages to compile (as [`PAIRS`] names them); all when empty.
    pub languages: Vec<String>,
    pub json: bool,
}

/// (language, first plugin, second plugin).
const PAIRS: &[(&str, &str, &str)] = &[
    ("rust", artifacts::WEBAPP, artifacts::MISBEHAVE),
    ("python", artifacts::WEBAPP_PY, artifacts::MISBEHAVE_PY),
    ("js", artifacts::WEBAPP_TS, artifacts::MISBEHAVE_TS),
];

#[derive(Debug, Serialize)]
struct Row {
    scenario: &'static str,
    language: &'static str,
    /// `off`, `memory` (one host compiles both) or `disk` (a restarted
    /// host compiles the rebuild).
    function_cache: &'static str,
    first_s: f64,
    second_s: f64,
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    ensure!(options.rounds > 0, "--rounds must be at least 1");
    for language in &options.languages {
        ensure!(
            PAIRS.iter().any(|(known, _, _)| known == language),
            "--language {language:?}: not one of rust, python, js"
        );
    }
    let pairs = PAIRS.iter().filter(|(language, _, _)| {
        options.languages.is_empty() || options.languages.iter().any(|l| l == language)
    });
    let load_before = load_average();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let mut rows = Vec::new();
    for &(language, first, second) in pairs {
        for cache in [false, true] {
            let mut firsts = Vec::new();
            let mut seconds = Vec::new();
            for _ in 0..options.rounds {
                let config = RuntimeConfig {
                    function_cache_bytes: if cache {
                        RuntimeConfig::default().function_cache_bytes
                    } else {
                        0
                    },
                    ..RuntimeConfig::default()
                };
                let (a, b) = tokio.block_on(async {
                    let runtime = Runtime::new(config, Arc::new(Metrics::new()))?;
                    let started = Instant::now();
                    runtime.load_file(first, PluginSpec::new("first")).await?;
                    let a = started.elapsed();
                    let started = Instant::now();
                    runtime.load_file(second, PluginSpec::new("second")).await?;
                    anyhow::Ok((a, started.elapsed()))
                })?;
                firsts.push(a.as_secs_f64());
                seconds.push(b.as_secs_f64());
            }
            rows.push(Row {
                scenario: "compile",
                language,
                function_cache: if cache { "memory" } else { "off" },
                first_s: round(median(&mut firsts), 2),
                second_s: round(median(&mut seconds), 2),
            });
        }
        let (mut firsts, mut seconds) = (Vec::new(), Vec::new());
        for _ in 0..options.rounds {
            let (a, b) = tokio.block_on(restarted(first))?;
            firsts.push(a);
            seconds.push(b);
        }
        rows.push(Row {
            scenario: "compile",
            language,
            function_cache: "disk",
            first_s: round(median(&mut firsts), 2),
            second_s: round(median(&mut seconds), 2),
        });
    }
    if options.json {
        for row in &rows {
            println!("{}", serde_json::to_string(row)?);
        }
    } else {
        println!("language  function cache  first compile  second compile");
        for r in &rows {
            println!(
                "{:<9} {:<14} {:>11.2} s {:>13.2} s",
                r.language, r.function_cache, r.first_s, r.second_s
            );
        }
        for language in rows.chunks(3) {
            if let [off, memory, disk] = language {
                // A restarted host's compile is the first of its engine:
                // it is held against the first compile without a cache.
                println!(
                    "{}: second compile off/memory = {:.2}×; a restart's compile of a rebuild, off/disk = {:.2}×",
                    off.language,
                    off.second_s / memory.second_s,
                    off.first_s / disk.second_s
                );
            }
        }
        println!(
            "load average before/after: {load_before} / {}",
            load_average()
        );
    }
    Ok(())
}

/// The seconds a host keeping its functions in a new directory takes to
/// compile `plugin`, and a second host on that directory to compile a
/// rebuild of it (a custom section more: other bytes, the same functions).
async fn restarted(plugin: &str) -> anyhow::Result<(f64, f64)> {
    let dir = tempfile::tempdir()?;
    let functions = dir.path().join("cache");
    let config = || RuntimeConfig {
        function_cache_dir: Some(functions.clone()),
        ..RuntimeConfig::default()
    };
    let runtime = Runtime::new(config(), Arc::new(Metrics::new()))?;
    let started = Instant::now();
    runtime.load_file(plugin, PluginSpec::new("first")).await?;
    let first = started.elapsed().as_secs_f64();
    drop(runtime);
    let mut rebuilt = std::fs::read(plugin).with_context(|| format!("reading {plugin}"))?;
    rebuilt.extend_from_slice(&[0, 7, 5, b'b', b'u', b'i', b'l', b'd', 1]);
    let path = dir.path().join("rebuilt.wasm");
    std::fs::write(&path, rebuilt)?;
    let runtime = Runtime::new(config(), Arc::new(Metrics::new()))?;
    let started = Instant::now();
    runtime.load_file(&path, PluginSpec::new("first")).await?;
    Ok((first, started.elapsed().as_secs_f64()))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
