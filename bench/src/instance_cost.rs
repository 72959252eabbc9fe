//! `instance-cost`: what a fresh instance costs a reconcile that does real
//! work, beside a warm one. The `throughput` reconciler (`bench-status`:
//! a cached `get` of one object, parsed into its typed form; a status merge
//! patch, whose answer it parses too) is called in process with both host
//! calls answered at once by a canned object, so only the host's call path
//! and the guest run: no HTTP, no cache, no other process. Both answers
//! come as the host hands objects to guests: without managedFields, unless
//! `--keep-managed-fields` (a host with `cache.stripManagedFields: false`).
//!
//! `fresh` and `reuse` are interleaved over rounds on one current-thread
//! tokio runtime, each call timed alone; the table gives the median and p99
//! per mode and their difference, which is the per-reconcile price of
//! `instanceMode: fresh` for this guest.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use futures::future::BoxFuture;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use wasmctrl::control::metrics::Metrics;
use wasmctrl::sandbox::hostapi::{ApiError, KubeApi, KubeRequest, KubeResponse};
use wasmctrl::sandbox::{InstanceMode, Plugin, PluginSpec, Runtime, RuntimeConfig};
use wasmctrl::{Action, ObjectKey, ReconcileRequest};

use crate::stats::{Samples, load_average, round};

#[derive(Debug, Clone)]
pub struct Options {
    /// Measured calls per mode.
    pub iterations: usize,
    /// Interleaved rounds the iterations are split into.
    pub rounds: usize,
    /// Answer with the object's managedFields, as a host with
    /// `cache.stripManagedFields: false` does.
    pub keep_managed_fields: bool,
    pub json: bool,
}

/// A benchmark object as the API server stores it after its first status
/// patch: two managedFields entries, as in `throughput`.
const OBJECT: &str = r#"{"apiVersion":"bench.wasmctrl.dev/v1","kind":"Bench0000","metadata":{"name":"item-1","namespace":"default","uid":"0b6f1f3e-8f5e-4a8e-9d1e-4f2b1c3d4e5f","resourceVersion":"12345","generation":1,"creationTimestamp":"2026-12-03T21:00:00Z","managedFields":[{"manager":"wasmctrl-bench","operation":"Update","apiVersion":"bench.wasmctrl.dev/v1","time":"2026-12-03T21:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{".":{},"f:seq":{}}}},{"manager":"wasmctrl-bench-status","operation":"Update","apiVersion":"bench.wasmctrl.dev/v1","time":"2026-12-03T21:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:status":{".":{},"f:observed":{},"f:startedAt":{}}},"subresource":"status"}]},"spec":{"seq":1}}"#;

/// Answers every call with [`OBJECT`], less its managedFields unless
/// they are kept: the `get` finds it without `status.observed`, so every
/// reconcile also patches.
struct Canned {
    object: String,
}

impl Canned {
    fn new(managed_fields: bool) -> anyhow::Result<Self> {
        let mut object: serde_json::Value = serde_json::from_str(OBJECT)?;
        if !managed_fields {
            object["metadata"]
                .as_object_mut()
                .context("the canned object has metadata")?
                .remove("managedFields");
        }
        Ok(Self {
            object: object.to_string(),
        })
    }
}

impl KubeApi for Canned {
    fn call(
        &self,
        _request: KubeRequest,
        _deadline: Instant,
    ) -> BoxFuture<'_, Result<KubeResponse, ApiError>> {
        let answer = self.object.clone();
        Box::pin(async { Ok(KubeResponse::Object(answer)) })
    }
}

#[derive(Serialize)]
struct JsonLine {
    scenario: &'static str,
    mode: &'static str,
    median_us: f64,
    p99_us: f64,
    calls: usize,
}

const MODES: [(InstanceMode, &str); 2] = [
    (InstanceMode::Fresh, "fresh"),
    (InstanceMode::Reuse, "reuse"),
];

pub fn run(options: &Options) -> anyhow::Result<()> {
    ensure!(options.rounds > 0, "--rounds must be at least 1");
    ensure!(options.iterations > 0, "--iterations must be at least 1");
    let load_before = load_average();
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let samples = tokio.block_on(async {
        let runtime = Runtime::new(RuntimeConfig::default(), Arc::new(Metrics::new()))?;
        let mut plugins: Vec<Arc<Plugin>> = Vec::new();
        let canned = Arc::new(Canned::new(options.keep_managed_fields)?);
        for (mode, _) in MODES {
            let mut spec = PluginSpec::new("bench-status");
            spec.instance_mode = mode;
            spec.kube = canned.clone();
            plugins.push(
                runtime
                    .load_file(wasmctrl_plugin_artifacts::BENCH_STATUS, spec)
                    .await?,
            );
        }
        let per_round = options.iterations.div_ceil(options.rounds);
        let mut samples = vec![Samples::with_capacity(options.iterations); MODES.len()];
        // One unmeasured round warms both (the reuse pool, the code's pages).
        for measured in std::iter::once(false).chain(std::iter::repeat_n(true, options.rounds)) {
            for (plugin, out) in plugins.iter().zip(samples.iter_mut()) {
                for _ in 0..per_round {
                    let request = ReconcileRequest {
                        key: ObjectKey::namespaced("default", "item-1"),
                        attempt: 0,
                        timeout: Duration::from_secs(10),
                        cancel: CancellationToken::new(),
                    };
                    let start = Instant::now();
                    let invocation = plugin.invoke(request).await;
                    let took = start.elapsed();
                    ensure!(
                        invocation.result == Ok(Action::done()),
                        "bench-status returned {:?}",
                        invocation.result
                    );
                    if measured {
                        out.push(took);
                    }
                }
            }
        }
        anyhow::Ok(samples)
    })?;
    let summaries: Vec<_> = samples.iter().map(Samples::summary).collect();
    if options.json {
        for ((_, name), s) in MODES.iter().zip(&summaries) {
            let line = JsonLine {
                scenario: "instance-cost",
                mode: name,
                median_us: round(s.median_us(), 2),
                p99_us: round(s.p99_us(), 2),
                calls: s.count,
            };
            println!("{}", serde_json::to_string(&line)?);
        }
        return Ok(());
    }
    println!(
        "instance-cost: bench-status (cached get + status patch, canned answers {} managedFields), {} calls per mode in {} rounds, load {load_before} before / {} after",
        if options.keep_managed_fields {
            "with"
        } else {
            "without"
        },
        options.iterations,
        options.rounds,
        load_average()
    );
    println!("  {:<8} {:>10} {:>10}", "mode", "median µs", "p99 µs");
    for ((_, name), s) in MODES.iter().zip(&summaries) {
        println!("  {:<8} {:>10.2} {:>10.2}", name, s.median_us(), s.p99_us());
    }
    println!(
        "  fresh - reuse median: {:.2} µs per reconcile",
        summaries[0].median_us() - summaries[1].median_us()
    );
    Ok(())
}
