//! Prometheus metrics, named like controller-runtime's so existing dashboards
//! work, plus wasmctrl's own plugin metrics.
//!
//! # The `version` label
//! Every reconcile metric (`controller_runtime_reconcile_*` but the worker
//! gauges, and the per-call `wasmctrl_plugin_*` metrics) carries `version`:
//! `stable` for the plugin's running version, `candidate` for a candidate's
//! reconciles (a canary's share of the keys, or shadow runs). The label is
//! always there, `stable` while one version runs, so that a family's label
//! set never changes at runtime and a dashboard can always split by it.
//! Which version ran is the ambient [`Version`] of the reconcile's task: the
//! controller opens it ([`with_version`]), the code that routes a key to a
//! candidate sets it ([`ran_as`]), and whatever observes the call reads it.

use std::cell::Cell;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::control::reconcile::{ReconcileError, TrapKind};
use crate::control::workqueue::{Priority, QueueMetrics};

/// What one guest call cost and how it ended, as the runtime measured it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallUsage {
    /// Store creation and instantiation.
    pub instantiate: Duration,
    /// Time spent running the guest (its polls: CPU time unless the OS
    /// preempted the thread).
    pub guest_time: Duration,
    /// Fuel burnt, when fuel metering is on.
    pub fuel_consumed: Option<u64>,
    /// The most linear memory the instance held, all memories together.
    pub memory_peak: usize,
    /// Bytes the guest wrote to stdout/stderr or logged.
    pub output_bytes: u64,
    /// `kube` calls the guest made.
    pub host_calls: u32,
    /// Time the guest was held back to share the CPU with other plugins.
    pub cpu_throttled: Duration,
    /// How the call trapped, if it did.
    pub trap: Option<TrapKind>,
    /// The plugin ceiling the call ran into (a `Limits` field name).
    pub ceiling: Option<&'static str>,
}

/// Which version of a plugin ran a reconcile: the `version` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// The plugin's running version (the only one, unless a candidate runs).
    Stable,
    /// A candidate running beside it (canary or shadow).
    Candidate,
}

impl Version {
    /// The label value: `stable` or `candidate`.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Stable => "stable",
            Version::Candidate => "candidate",
        }
    }
}

tokio::task_local! {
    /// The version the reconcile running on this task ran as.
    static RECONCILE_VERSION: Cell<Version>;
}

/// Runs `reconcile` as [`Version::Stable`] unless it calls [`ran_as`];
/// returns its output and the version it ran as.
pub async fn with_version<F: Future>(reconcile: F) -> (F::Output, Version) {
    RECONCILE_VERSION
        .scope(Cell::new(Version::Stable), async {
            let output = reconcile.await;
            (output, RECONCILE_VERSION.with(Cell::get))
        })
        .await
}

/// Marks the reconcile running on this task as run by `version` (no effect
/// outside [`with_version`]).
pub fn ran_as(version: Version) {
    let _ = RECONCILE_VERSION.try_with(|v| v.set(version));
}

/// The version the reconcile on this task runs as (`Stable` outside one).
pub fn current_version() -> Version {
    RECONCILE_VERSION
        .try_with(Cell::get)
        .unwrap_or(Version::Stable)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NameLabel {
    pub name: String,
}

/// `workqueue_depth`'s labels: the queue and the priority of the keys
/// counted (controller-runtime's priority queue labels depth the same way).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueDepthLabels {
    pub name: String,
    pub priority: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    pub controller: String,
}

/// A reconcile metric's labels: the controller and the version that ran.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerVersionLabels {
    pub controller: String,
    pub version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub controller: String,
    pub result: String,
    pub version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabel {
    pub plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginKindLabels {
    pub plugin: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginVersionLabels {
    pub plugin: String,
    /// `stable` or `candidate`.
    pub version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginVersionResultLabels {
    pub plugin: String,
    pub version: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabel {
    /// `memory`, `table` or `stack`.
    pub pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginReasonLabels {
    pub plugin: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TrapLabels {
    pub plugin: String,
    pub reason: String,
    pub version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    pub plugin: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    pub plugin: String,
    /// The `limits` field that was exceeded.
    pub limit: String,
    pub version: String,
}

/// What a network source refused: the `reason` of
/// `wasmctrl_source_refusals_total`, from this fixed set (never a string a
/// server or an object chose).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceRefusal {
    /// A connection to an address a WasmReconciler's source may not reach
    /// (named literally, resolved to, or redirected to).
    InternalAddress,
    /// A redirect to a scheme the source may not use, or one too many.
    Redirect,
    /// A registry's token answer over its bound.
    TokenAnswer,
    /// A manifest over its bound.
    Manifest,
    /// A component over the source's `maxSize`.
    Component,
}

impl SourceRefusal {
    const ALL: [SourceRefusal; 5] = [
        SourceRefusal::InternalAddress,
        SourceRefusal::Redirect,
        SourceRefusal::TokenAnswer,
        SourceRefusal::Manifest,
        SourceRefusal::Component,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SourceRefusal::InternalAddress => "internalAddress",
            SourceRefusal::Redirect => "redirect",
            SourceRefusal::TokenAnswer => "tokenAnswer",
            SourceRefusal::Manifest => "manifest",
            SourceRefusal::Component => "component",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

/// `wasmctrl_source_refusals_total`. Sources are built far from the host's
/// [`Metrics`] (from a config, a CLI command, a reload) and hold no handle
/// to it, so the family is process-wide: every registry registers the same
/// counters, which count every source of the process. Every reason is
/// there from the start, at 0.
static SOURCE_REFUSALS: std::sync::LazyLock<Family<ReasonLabel, Counter>> =
    std::sync::LazyLock::new(|| {
        let family = Family::<ReasonLabel, Counter>::default();
        for reason in SourceRefusal::ALL {
            let _ = family.get_or_create(&ReasonLabel {
                reason: reason.as_str().into(),
            });
        }
        family
    });

/// Counts a source's refusal in `wasmctrl_source_refusals_total`.
pub fn count_source_refusal(reason: SourceRefusal) {
    SOURCE_REFUSALS
        .get_or_create(&ReasonLabel {
            reason: reason.as_str().into(),
        })
        .inc();
}

/// What the host refused to believe when it read it back from its own
/// disk: the `what` of `wasmctrl_disk_refusals_total`, from this fixed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DiskRefusal {
    /// A precompiled artifact whose MAC, engine or shape did not check out
    /// (recompiled instead).
    CompiledArtifact,
    /// A cached component over its `maxSize` or not matching its digest.
    CachedComponent,
    /// A cached reference record over 64 KiB or not well-formed.
    CachedRecord,
    /// A docker `config.json` over 1 MiB.
    DockerConfig,
}

impl DiskRefusal {
    const ALL: [DiskRefusal; 4] = [
        DiskRefusal::CompiledArtifact,
        DiskRefusal::CachedComponent,
        DiskRefusal::CachedRecord,
        DiskRefusal::DockerConfig,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DiskRefusal::CompiledArtifact => "compiledArtifact",
            DiskRefusal::CachedComponent => "cachedComponent",
            DiskRefusal::CachedRecord => "cachedRecord",
            DiskRefusal::DockerConfig => "dockerConfig",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WhatLabel {
    pub what: String,
}

/// `wasmctrl_disk_refusals_total`: process-wide for the reason
/// [`SOURCE_REFUSALS`] is (the caches and credential files are read far
/// from the host's [`Metrics`]).
static DISK_REFUSALS: std::sync::LazyLock<Family<WhatLabel, Counter>> =
    std::sync::LazyLock::new(|| {
        let family = Family::<WhatLabel, Counter>::default();
        for what in DiskRefusal::ALL {
            let _ = family.get_or_create(&WhatLabel {
                what: what.as_str().into(),
            });
        }
        family
    });

/// Counts what the host refused to read back from its disk.
pub fn count_disk_refusal(what: DiskRefusal) {
    DISK_REFUSALS
        .get_or_create(&WhatLabel {
            what: what.as_str().into(),
        })
        .inc();
}

/// How many times `what` was refused in this process (for tests).
pub fn disk_refusals(what: DiskRefusal) -> u64 {
    DISK_REFUSALS
        .get_or_create(&WhatLabel {
            what: what.as_str().into(),
        })
        .get()
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostApiLabels {
    pub plugin: String,
    pub verb: String,
    pub resource: String,
    pub code: String,
}

fn seconds_histogram() -> Histogram {
    // 1 µs … ~1000 s, as client-go's workqueue buckets span.
    Histogram::new(exponential_buckets(1e-6, 4.0, 16))
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Every metric the host exports, in one registry.
pub struct Metrics {
    registry: Mutex<Registry>,
    // workqueue_*
    pub queue_depth: Family<QueueDepthLabels, Gauge>,
    pub queue_adds: Family<NameLabel, Counter>,
    pub queue_retries: Family<NameLabel, Counter>,
    pub queue_duration: HistogramFamily<NameLabel>,
    pub work_duration: HistogramFamily<NameLabel>,
    pub unfinished_work: Family<NameLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub longest_running: Family<NameLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    // controller_runtime_*
    pub reconcile_total: Family<ResultLabels, Counter>,
    /// Reconciles skipped by `skipUnchanged`.
    pub reconcile_skipped: Family<PluginLabel, Counter>,
    /// Shadow runs of a candidate compared with the stable version.
    pub shadow_runs: Family<PluginLabel, Counter>,
    /// Shadow runs that diverged, per kind of divergent write (or `result`).
    pub shadow_divergences: Family<PluginKindLabels, Counter>,
    /// Keys that got no shadow run because every shadow permit was busy.
    pub shadow_skipped: Family<PluginLabel, Counter>,
    /// Unused pool slots kept warm, per pool (set at each scrape).
    pub pool_unused_warm: Family<PoolLabel, Gauge>,
    /// Bytes those warm slots keep resident, per pool.
    pub pool_unused_resident: Family<PoolLabel, Gauge>,
    /// Reconcile transcripts written (`record`).
    pub record_transcripts: Family<PluginLabel, Counter>,
    /// Transcripts not written, per reason (`too-large`, `backlog`, `io`).
    pub record_dropped: Family<PluginReasonLabels, Counter>,
    /// WasmReconciler objects refused, per status reason
    /// (`GrantExceedsMaxGrant`, `LimitsExceedMaxApiQps`, `SourceNotAllowed`,
    /// …: the host's fixed set, never an object's string).
    pub object_refusals: Family<ReasonLabel, Counter>,
    /// Reconciles per version while a canary runs.
    pub versioned_reconciles: Family<PluginVersionResultLabels, Counter>,
    /// Reconcile time per version while a canary runs.
    pub versioned_reconcile_time: HistogramFamily<PluginVersionLabels>,
    pub canary_rollbacks: Family<PluginLabel, Counter>,
    pub canary_promotions: Family<PluginLabel, Counter>,
    pub reconcile_errors: Family<ControllerVersionLabels, Counter>,
    pub reconcile_panics: Family<ControllerVersionLabels, Counter>,
    pub reconcile_timeouts: Family<ControllerVersionLabels, Counter>,
    pub terminal_errors: Family<ControllerVersionLabels, Counter>,
    pub reconcile_time: HistogramFamily<ControllerVersionLabels>,
    pub max_concurrent: Family<ControllerLabel, Gauge>,
    pub active_workers: Family<ControllerLabel, Gauge>,
    // wasmctrl_*
    pub plugin_traps: Family<TrapLabels, Counter>,
    pub plugin_fuel: HistogramFamily<PluginVersionLabels>,
    pub plugin_reloads: Family<ReloadLabels, Counter>,
    pub config_reloads: Family<ResultLabel, Counter>,
    pub hostapi_calls: Family<HostApiLabels, Counter>,
    pub plugin_instantiate: HistogramFamily<PluginVersionLabels>,
    // wasmctrl_plugin_* usage and ceilings
    pub plugin_guest_seconds: Family<PluginVersionLabels, Counter<f64, AtomicU64>>,
    pub plugin_cpu_throttled_seconds: Family<PluginVersionLabels, Counter<f64, AtomicU64>>,
    pub plugin_memory_peak: Family<PluginVersionLabels, Gauge>,
    pub plugin_output_bytes: Family<PluginVersionLabels, Counter>,
    pub plugin_host_calls: Family<PluginVersionLabels, Counter>,
    pub api_requests: Family<PluginLabel, Counter>,
    pub api_throttled_seconds: Family<PluginLabel, Counter<f64, AtomicU64>>,
    pub limit_exceeded: Family<LimitLabels, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let m = Self {
            registry: Mutex::new(Registry::default()),
            queue_depth: Family::default(),
            queue_adds: Family::default(),
            queue_retries: Family::default(),
            queue_duration: Family::new_with_constructor(seconds_histogram),
            work_duration: Family::new_with_constructor(seconds_histogram),
            unfinished_work: Family::default(),
            longest_running: Family::default(),
            reconcile_total: Family::default(),
            reconcile_skipped: Family::default(),
            shadow_runs: Family::default(),
            shadow_divergences: Family::default(),
            shadow_skipped: Family::default(),
            pool_unused_warm: Family::default(),
            pool_unused_resident: Family::default(),
            record_transcripts: Family::default(),
            record_dropped: Family::default(),
            object_refusals: Family::default(),
            versioned_reconciles: Family::default(),
            versioned_reconcile_time: Family::new_with_constructor(seconds_histogram),
            canary_rollbacks: Family::default(),
            canary_promotions: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_panics: Family::default(),
            reconcile_timeouts: Family::default(),
            terminal_errors: Family::default(),
            reconcile_time: Family::new_with_constructor(seconds_histogram),
            max_concurrent: Family::default(),
            active_workers: Family::default(),
            plugin_traps: Family::default(),
            plugin_fuel: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(1e3, 10.0, 10))
            }),
            plugin_reloads: Family::default(),
            config_reloads: Family::default(),
            hostapi_calls: Family::default(),
            plugin_instantiate: Family::new_with_constructor(seconds_histogram),
            plugin_guest_seconds: Family::default(),
            plugin_cpu_throttled_seconds: Family::default(),
            plugin_memory_peak: Family::default(),
            plugin_output_bytes: Family::default(),
            plugin_host_calls: Family::default(),
            api_requests: Family::default(),
            api_throttled_seconds: Family::default(),
            limit_exceeded: Family::default(),
        };
        {
            let mut r = m.registry.lock().unwrap();
            r.register(
                "workqueue_depth",
                "Current depth of workqueue",
                m.queue_depth.clone(),
            );
            r.register(
                "workqueue_adds",
                "Total number of adds handled by workqueue",
                m.queue_adds.clone(),
            );
            r.register(
                "workqueue_retries",
                "Total number of retries handled by workqueue",
                m.queue_retries.clone(),
            );
            r.register(
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                m.queue_duration.clone(),
            );
            r.register(
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
                m.work_duration.clone(),
            );
            r.register("workqueue_unfinished_work_seconds", "How many seconds of work has been done that is in progress and hasn't been observed by work_duration", m.unfinished_work.clone());
            r.register(
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running",
                m.longest_running.clone(),
            );
            r.register(
                "controller_runtime_reconcile",
                "Total number of reconciliations per controller",
                m.reconcile_total.clone(),
            );
            r.register(
                "wasmctrl_reconcile_skipped",
                "Reconciles skipped because nothing the last successful one read changed (skipUnchanged)",
                m.reconcile_skipped.clone(),
            );
            r.register(
                "wasmctrl_shadow_runs",
                "Shadow runs of a candidate version compared with the stable version",
                m.shadow_runs.clone(),
            );
            r.register(
                "wasmctrl_shadow_divergences",
                "Shadow runs whose writes or result differed from the stable version's, per kind of object written (or result)",
                m.shadow_divergences.clone(),
            );
            r.register(
                "wasmctrl_shadow_skipped",
                "Keys that got no shadow run because every shadow permit was busy",
                m.shadow_skipped.clone(),
            );
            r.register(
                "wasmctrl_pool_unused_warm_slots",
                "Unused instance-pool slots kept warm (with resident pages), per pool (memory, table, stack); bounded by the engine's warm-slot budget",
                m.pool_unused_warm.clone(),
            );
            r.register(
                "wasmctrl_pool_unused_resident_bytes",
                "Bytes the unused warm pool slots keep resident, per pool",
                m.pool_unused_resident.clone(),
            );
            r.register(
                "wasmctrl_record_transcripts",
                "Reconcile transcripts written by a plugin's record",
                m.record_transcripts.clone(),
            );
            r.register(
                "wasmctrl_record_dropped",
                "Reconcile transcripts not written, per reason (too-large: over record.maxBytes; backlog: the writer fell behind; io: the write failed)",
                m.record_dropped.clone(),
            );
            r.register(
                "wasmctrl_canary_reconciles",
                "Reconciles per version (stable|candidate) and result while a canary runs",
                m.versioned_reconciles.clone(),
            );
            r.register(
                "wasmctrl_canary_reconcile_time_seconds",
                "Reconcile time per version (stable|candidate) while a canary runs",
                m.versioned_reconcile_time.clone(),
            );
            r.register(
                "wasmctrl_canary_rollbacks",
                "Canaries rolled back automatically",
                m.canary_rollbacks.clone(),
            );
            r.register(
                "wasmctrl_canary_promotions",
                "Canary candidates promoted (by the API or automatically)",
                m.canary_promotions.clone(),
            );
            r.register(
                "controller_runtime_reconcile_errors",
                "Total number of reconciliation errors per controller",
                m.reconcile_errors.clone(),
            );
            r.register(
                "controller_runtime_reconcile_panics",
                "Total number of reconciliation panics (guest traps) per controller",
                m.reconcile_panics.clone(),
            );
            r.register(
                "controller_runtime_reconcile_timeouts",
                "Total number of reconciliation timeouts (deadline traps) per controller",
                m.reconcile_timeouts.clone(),
            );
            r.register(
                "controller_runtime_terminal_reconcile_errors",
                "Total number of terminal reconciliation errors per controller",
                m.terminal_errors.clone(),
            );
            r.register(
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                m.reconcile_time.clone(),
            );
            r.register(
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
                m.max_concurrent.clone(),
            );
            r.register(
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
                m.active_workers.clone(),
            );
            r.register(
                "wasmctrl_plugin_traps",
                "Guest traps per plugin and reason (deadline|fuel|memory|panic|stack|other)",
                m.plugin_traps.clone(),
            );
            r.register(
                "wasmctrl_plugin_fuel_consumed",
                "Fuel consumed per reconcile",
                m.plugin_fuel.clone(),
            );
            r.register(
                "wasmctrl_plugin_reloads",
                "Plugin loads and hot swaps per plugin and result",
                m.plugin_reloads.clone(),
            );
            r.register(
                "wasmctrl_config_reloads",
                "Config file reloads per result (error: refused, the running config stays)",
                m.config_reloads.clone(),
            );
            r.register(
                "wasmctrl_hostapi_calls",
                "Host API calls per plugin, verb, resource and result code",
                m.hostapi_calls.clone(),
            );
            r.register(
                "wasmctrl_plugin_instantiate_seconds",
                "Time to create a store and instantiate a plugin",
                m.plugin_instantiate.clone(),
            );
            r.register(
                "wasmctrl_plugin_guest_seconds",
                "Time spent running guest code per plugin (CPU unless preempted)",
                m.plugin_guest_seconds.clone(),
            );
            r.register(
                "wasmctrl_plugin_cpu_throttled_seconds",
                "Time the plugin's guests were held back past their CPU burst to share the CPU with other plugins (runtime.guestCpu)",
                m.plugin_cpu_throttled_seconds.clone(),
            );
            r.register(
                "wasmctrl_plugin_memory_peak_bytes",
                "The most linear memory one instance of the plugin held (all memories together)",
                m.plugin_memory_peak.clone(),
            );
            r.register(
                "wasmctrl_plugin_output_bytes",
                "Bytes of stdout, stderr and log messages the plugin wrote, kept or dropped",
                m.plugin_output_bytes.clone(),
            );
            r.register(
                "wasmctrl_plugin_host_calls",
                "kube host calls the plugin made",
                m.plugin_host_calls.clone(),
            );
            r.register(
                "wasmctrl_plugin_api_requests",
                "Requests the plugin's host calls sent to the API server",
                m.api_requests.clone(),
            );
            r.register(
                "wasmctrl_plugin_api_throttled_seconds",
                "Time the plugin's API requests waited for its API rate limit",
                m.api_throttled_seconds.clone(),
            );
            r.register(
                "wasmctrl_plugin_limit_exceeded",
                "Calls that ran into one of the plugin's ceilings, per limit",
                m.limit_exceeded.clone(),
            );
            r.register(
                "wasmctrl_object_refusals",
                "WasmReconciler objects refused (their plugin not run as specified), per reason",
                m.object_refusals.clone(),
            );
            r.register(
                "wasmctrl_disk_refusals",
                "What the host refused to read back from its own disk, per what (process-wide)",
                DISK_REFUSALS.clone(),
            );
            r.register(
                "wasmctrl_source_refusals",
                "What network sources refused, per reason (process-wide)",
                SOURCE_REFUSALS.clone(),
            );
        }
        m
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry.lock().unwrap())
            .expect("writing to a String cannot fail");
        out
    }

    /// Hooks for the workqueue named `name`.
    pub fn queue(self: &Arc<Self>, name: &str) -> Arc<dyn QueueMetrics> {
        Arc::new(QueueMetricsHandle {
            metrics: self.clone(),
            label: NameLabel { name: name.into() },
            depth: Mutex::default(),
        })
    }

    /// Records one finished reconcile of `controller`, run by `version`.
    pub fn observe_reconcile(
        &self,
        controller: &str,
        version: Version,
        took: Duration,
        result: &Result<crate::Action, ReconcileError>,
    ) {
        let label = ControllerVersionLabels {
            controller: controller.into(),
            version: version.as_str().into(),
        };
        let outcome = match result {
            Ok(a) if a.requeue_after.is_some() => "requeue_after",
            Ok(a) if a.requeue => "requeue",
            Ok(_) => "success",
            Err(_) => "error",
        };
        self.reconcile_total
            .get_or_create(&ResultLabels {
                controller: controller.into(),
                result: outcome.into(),
                version: version.as_str().into(),
            })
            .inc();
        self.reconcile_time
            .get_or_create(&label)
            .observe(took.as_secs_f64());
        if let Err(e) = result {
            self.reconcile_errors.get_or_create(&label).inc();
            match e.trap_kind() {
                Some(TrapKind::Deadline) => {
                    self.reconcile_timeouts.get_or_create(&label).inc();
                }
                Some(_) => {
                    self.reconcile_panics.get_or_create(&label).inc();
                }
                None => {}
            }
        }
    }

    /// Counts one refusal at `limit` for `plugin` (its current version) in
    /// `wasmctrl_plugin_limit_exceeded_total`.
    pub fn count_limit(&self, plugin: &str, limit: &str) {
        self.count_limit_as(plugin, current_version(), limit);
    }

    fn count_limit_as(&self, plugin: &str, version: Version, limit: &str) {
        self.limit_exceeded
            .get_or_create(&LimitLabels {
                plugin: plugin.into(),
                limit: limit.into(),
                version: version.as_str().into(),
            })
            .inc();
    }

    /// Records what one guest call of `version` cost and how it ended.
    pub fn observe_call_as(&self, plugin: &str, version: Version, usage: &CallUsage) {
        let series = self.call_series(plugin, version, usage.fuel_consumed.is_some());
        self.observe_call_in(&series, plugin, version, usage);
    }

    /// The series every call of `plugin` at `version` updates, looked up
    /// once: to hold and pass to [`Metrics::observe_call_in`] (a label
    /// lookup per series per call was ~0.5 µs of a ~10 µs reconcile). The
    /// fuel series exists only `with_fuel` (fuel metering on).
    pub fn call_series(&self, plugin: &str, version: Version, with_fuel: bool) -> CallSeries {
        let label = PluginVersionLabels {
            plugin: plugin.into(),
            version: version.as_str().into(),
        };
        CallSeries {
            instantiate: self.plugin_instantiate.get_or_create(&label).clone(),
            fuel: with_fuel.then(|| self.plugin_fuel.get_or_create(&label).clone()),
            guest_seconds: self.plugin_guest_seconds.get_or_create(&label).clone(),
            cpu_throttled: self
                .plugin_cpu_throttled_seconds
                .get_or_create(&label)
                .clone(),
            memory_peak: self.plugin_memory_peak.get_or_create(&label).clone(),
            output_bytes: self.plugin_output_bytes.get_or_create(&label).clone(),
            host_calls: self.plugin_host_calls.get_or_create(&label).clone(),
        }
    }

    /// Records what one guest call cost into `series` (from
    /// [`Metrics::call_series`] of the same `plugin` and `version`), and
    /// how it ended.
    pub fn observe_call_in(
        &self,
        series: &CallSeries,
        plugin: &str,
        version: Version,
        usage: &CallUsage,
    ) {
        series.instantiate.observe(usage.instantiate.as_secs_f64());
        if let (Some(fuel), Some(h)) = (usage.fuel_consumed, &series.fuel) {
            h.observe(fuel as f64);
        }
        if let Some(kind) = usage.trap {
            self.plugin_traps
                .get_or_create(&TrapLabels {
                    plugin: plugin.into(),
                    reason: kind.as_str().into(),
                    version: version.as_str().into(),
                })
                .inc();
        }
        if let Some(limit) = usage.ceiling {
            self.count_limit_as(plugin, version, limit);
        }
        series.guest_seconds.inc_by(usage.guest_time.as_secs_f64());
        if !usage.cpu_throttled.is_zero() {
            series
                .cpu_throttled
                .inc_by(usage.cpu_throttled.as_secs_f64());
        }
        let memory = i64::try_from(usage.memory_peak).unwrap_or(i64::MAX);
        if memory > series.memory_peak.get() {
            series.memory_peak.set(memory);
        }
        series.output_bytes.inc_by(usage.output_bytes);
        series.host_calls.inc_by(u64::from(usage.host_calls));
    }
}

/// Handles on one plugin version's per-call series (the metric values are
/// shared with the registry's families: updating a handle updates
/// `/metrics`).
#[derive(Clone, Debug)]
pub struct CallSeries {
    instantiate: Histogram,
    fuel: Option<Histogram>,
    guest_seconds: Counter<f64, AtomicU64>,
    cpu_throttled: Counter<f64, AtomicU64>,
    memory_peak: Gauge,
    output_bytes: Counter,
    host_calls: Counter,
}

struct QueueMetricsHandle {
    metrics: Arc<Metrics>,
    label: NameLabel,
    /// The depth gauge of each priority seen: the queue reports depth on
    /// every add and get, which must not build label strings each time.
    depth: Mutex<Vec<(Priority, Gauge)>>,
}

impl QueueMetrics for QueueMetricsHandle {
    fn set_depth(&self, priority: Priority, depth: usize) {
        let mut gauges = self.depth.lock().unwrap_or_else(|e| e.into_inner());
        let gauge = match gauges.iter().find(|(p, _)| *p == priority) {
            Some((_, gauge)) => gauge,
            None => {
                let gauge = self
                    .metrics
                    .queue_depth
                    .get_or_create(&QueueDepthLabels {
                        name: self.label.name.clone(),
                        priority: priority.to_string(),
                    })
                    .clone();
                gauges.push((priority, gauge));
                &gauges.last().expect("just pushed").1
            }
        };
        gauge.set(depth as i64);
    }

    fn inc_adds(&self) {
        self.metrics.queue_adds.get_or_create(&self.label).inc();
    }

    fn inc_retries(&self) {
        self.metrics.queue_retries.get_or_create(&self.label).inc();
    }

    fn observe_queue_duration(&self, waited: Duration) {
        self.metrics
            .queue_duration
            .get_or_create(&self.label)
            .observe(waited.as_secs_f64());
    }

    fn observe_work_duration(&self, worked: Duration) {
        self.metrics
            .work_duration
            .get_or_create(&self.label)
            .observe(worked.as_secs_f64());
    }

    fn set_unfinished_work(&self, unfinished_seconds: f64, longest_running_seconds: f64) {
        self.metrics
            .unfinished_work
            .get_or_create(&self.label)
            .set(unfinished_seconds);
        self.metrics
            .longest_running
            .get_or_create(&self.label)
            .set(longest_running_seconds);
    }
}

#[cfg(test)]
mod tests {
    // Beside the metrics rather than the workqueue, so that the workqueue
    // never imports them (the module graph stays acyclic).
    use std::sync::Arc;
    use std::time::Duration;

    use super::Metrics;
    use crate::control::workqueue::ratelimit::ItemExponentialFailureRateLimiter;
    use crate::control::workqueue::{Priority, WorkQueue};

    const MS: Duration = Duration::from_millis(1);
    const SEC: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn depth_is_exposed_per_priority_label() {
        let metrics = Arc::new(Metrics::new());
        let q = WorkQueue::<&str>::new(
            "exposed",
            Box::new(ItemExponentialFailureRateLimiter::new(5 * MS, SEC)),
            metrics.queue("exposed"),
        );
        q.add_with_priority("a", Priority::LOW);
        q.add_with_priority("b", Priority::LOW);
        q.add("c");
        let text = metrics.encode();
        let line = |priority: &str| {
            text.lines()
                .find(|l| {
                    l.starts_with("workqueue_depth{")
                        && l.contains(r#"name="exposed""#)
                        && l.contains(&format!(r#"priority="{priority}""#))
                })
                .map(|l| l.rsplit(' ').next().unwrap().to_string())
        };
        assert_eq!(line("-100").as_deref(), Some("2"), "{text}");
        assert_eq!(line("0").as_deref(), Some("1"), "{text}");
        let _c = q.get().await.unwrap();
        let text = metrics.encode();
        assert!(
            text.lines().any(|l| l.starts_with("workqueue_depth{")
                && l.contains(r#"priority="0""#)
                && l.ends_with(" 0")),
            "{text}"
        );
    }
}
