//! Every scenario of the benchmark binary, at a tiny size, through its
//! `--json` output: each runs to the end and prints the fields its
//! documentation in docs/BENCHMARKS.md reads, so no scenario can break
//! unnoticed between the runs that record figures. The figures themselves
//! mean nothing here (a debug build on a shared machine): only their
//! presence and shape are checked.
//!
//! The scenarios run one at a time, as they would on a quiet machine: each
//! starts its own API server and hosts, and several at once would only
//! compete for two cores.

use std::process::{Command, Stdio};
use std::sync::Mutex;

use serde_json::Value;

/// One scenario runs at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `wasmctrl-bench ARGS --json` and returns its JSON lines, each
/// checked to name one of `scenarios` and to carry `fields`.
fn run(args: &[&str], scenarios: &[&str], fields: &[&str]) -> Vec<Value> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new(env!("CARGO_BIN_EXE_wasmctrl-bench"))
        .args(args)
        .arg("--json")
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .output()
        .expect("the benchmark binary starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "wasmctrl-bench {args:?} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(!lines.is_empty(), "{args:?} printed no JSON:\n{stdout}");
    for line in &lines {
        let scenario = line["scenario"].as_str().unwrap_or_default();
        assert!(scenarios.contains(&scenario), "{args:?}: {line}");
        for field in fields {
            let value = &line[*field];
            let well_formed = match value {
                Value::Number(n) => n.as_f64().is_some_and(f64::is_finite),
                Value::String(_) | Value::Bool(_) => true,
                _ => false,
            };
            assert!(well_formed, "{args:?}: {field} in {line}");
        }
    }
    lines
}

/// The distinct values of `field` across `lines`.
fn values(lines: &[Value], field: &str) -> Vec<String> {
    let mut v: Vec<String> = lines.iter().map(|l| l[field].to_string()).collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn throughput() {
    let lines = run(
        &[
            "throughput",
            "--objects",
            "20",
            "--rounds",
            "1",
            "--warmup",
            "0",
        ],
        &["throughput"],
        &["variant", "objects", "reconciles_per_s", "cpu_s"],
    );
    assert_eq!(
        values(&lines, "variant"),
        [r#""kube-rs""#, r#""native""#, r#""wasm""#]
    );
}

#[test]
fn latency() {
    let lines = run(
        &[
            "latency",
            "--idle-objects",
            "10",
            "--rate",
            "20",
            "--seconds",
            "0.5",
            "--resyncs",
            "1",
        ],
        &["latency"],
        &["variant", "during_resync", "p50_ms", "p99_ms", "samples"],
    );
    assert_eq!(values(&lines, "during_resync"), ["false", "true"]);
}

#[test]
fn density() {
    run(
        &[
            "density",
            "--plugins",
            "1,2",
            "--objects",
            "1",
            "--settle-secs",
            "0.2",
        ],
        &["density"],
        &["variant", "plugins", "rss_mib", "wake_ms"],
    );
}

#[test]
fn scale() {
    run(
        &["scale", "--objects", "20", "--settle-secs", "0.1"],
        &["scale"],
        &[
            "objects",
            "sync_s",
            "rss_mib",
            "drain_s",
            "json_mib",
            "cached_json_mib",
            "apiserver_rss_mib",
        ],
    );
}

#[test]
fn startup() {
    let lines = run(
        &["startup", "--plugins", "3"],
        &["startup"],
        &["cache", "plugins", "first_s", "ready_s", "reconciled_s"],
    );
    assert_eq!(values(&lines, "cache"), [r#""cold""#, r#""warm""#]);
}

#[test]
fn shadow_and_skip() {
    run(
        &["shadow", "--objects", "20", "--rounds", "1"],
        &["shadow"],
        &[
            "shadow",
            "objects",
            "reconciles_per_s",
            "shadow_runs",
            "divergent",
        ],
    );
    run(
        &["skip", "--objects", "20", "--rounds", "1"],
        &["skip"],
        &[
            "skip_unchanged",
            "objects",
            "drain_s",
            "reconciles",
            "skipped",
        ],
    );
}

#[test]
fn apiserver() {
    run(
        &[
            "apiserver",
            "--writers",
            "2",
            "--writes-per-writer",
            "10",
            "--watchers",
            "2",
            "--watch-events",
            "10",
            "--objects",
            "20",
        ],
        &["apiserver"],
        &["writes_per_s", "watch_events_per_s"],
    );
}

#[test]
fn hotswap() {
    run(
        &[
            "hotswap",
            "--swaps",
            "1",
            "--keys",
            "5",
            "--rate",
            "20",
            "--pause-ms",
            "50",
        ],
        &["hotswap"],
        &[
            "swap_ms_median",
            "swap_ms_p99",
            "lost",
            "cold_swap_ms",
            "swaps",
        ],
    );
}

#[test]
fn dispatch_breakdown_floor_and_instance_cost() {
    let small = ["--iterations", "50", "--rounds", "1"];
    for (scenario, fields) in [
        ("dispatch", &["variant", "median_us", "iterations"][..]),
        ("breakdown", &["variant", "median_us", "iterations"][..]),
        (
            "floor-settings",
            &["variant", "median_us", "iterations"][..],
        ),
        ("instance-cost", &["mode", "median_us", "calls"][..]),
    ] {
        let args: Vec<&str> = std::iter::once(scenario).chain(small).collect();
        let lines = run(&args, &[scenario], fields);
        if scenario == "dispatch" {
            assert_eq!(
                values(&lines, "variant"),
                [
                    "\"native\"",
                    "\"wasm-floor\"",
                    "\"wasm-fresh\"",
                    "\"wasm-lean\""
                ]
            );
        }
    }
}

#[test]
fn guests() {
    let cache = wasmctrl_testkit::kept::compiled_components_dir();
    let lines = run(
        &[
            "guests",
            "--iterations",
            "5",
            "--rounds",
            "1",
            "--instances",
            "1",
            // The interpreted guests compile once per build of them.
            "--cache-dir",
            cache.to_str().unwrap(),
        ],
        &["guests", "guests-memory"],
        &["guest"],
    );
    assert_eq!(
        values(&lines, "scenario"),
        [r#""guests""#, r#""guests-memory""#]
    );
}

#[test]
fn outbound() {
    let lines = run(
        &["outbound", "--iterations", "20", "--rounds", "1"],
        &["outbound"],
        &["variant", "median_us", "reconciles_per_s", "calls"],
    );
    assert_eq!(
        values(&lines, "variant"),
        [
            r#""native""#,
            r#""wasm""#,
            r#""wasm-reuse""#,
            r#""wasm-secret""#
        ]
    );
}

#[test]
fn admission() {
    let lines = run(
        &[
            "admission",
            "--rate",
            "20",
            "--seconds",
            "0.5",
            "--concurrency",
            "2",
            "--max-rate",
            "40",
        ],
        &["admission"],
        &[
            "variant",
            "row",
            "p50_us",
            "p99_us",
            "reviews_per_s",
            "errors",
        ],
    );
    assert_eq!(values(&lines, "variant").len(), 3);
    assert_eq!(
        lines.len(),
        6,
        "a fixed-rate and a sustained row per variant"
    );
    for line in &lines {
        assert_eq!(line["errors"], 0, "{line}");
    }
}

/// Rust alone: an interpreted guest's compile in a debug build takes
/// minutes, and the languages share every line of the scenario.
#[test]
fn compile() {
    let lines = run(
        &["compile", "--rounds", "1", "--language", "rust"],
        &["compile"],
        &["language", "function_cache", "first_s", "second_s"],
    );
    assert_eq!(values(&lines, "language"), [r#""rust""#]);
    assert_eq!(
        values(&lines, "function_cache"),
        [r#""disk""#, r#""memory""#, r#""off""#],
        "without the cache, in memory, and on disk across a restart"
    );
}

#[test]
fn deadline() {
    run(
        &["deadline", "--iterations", "4", "--rounds", "1"],
        &["deadline"],
        &[
            "timeout_ms",
            "overshoot_ms_median",
            "overshoot_ms_max",
            "trials",
        ],
    );
}
