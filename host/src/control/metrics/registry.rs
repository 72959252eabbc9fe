//! [`Metrics`]: every family the host exports, registered in one
//! Prometheus registry under controller-runtime's names and wasmctrl's.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::labels::{
    CallLabels, ControllerLabel, ControllerVersionLabels, HostApiLabels, HttpRequestLabels,
    LimitLabels, NameLabel, PluginKindLabels, PluginLabel, PluginReasonLabels, PluginVersionLabels,
    PluginVersionResultLabels, PoolLabel, QueueDepthLabels, ReasonLabel, ReloadLabels, ResultLabel,
    ResultLabels, StateLabel, TrapLabels, WebhookCodeLabels, WebhookDecisionLabels, WebhookLabel,
};
use super::refusals::{DISK_REFUSALS, SOURCE_REFUSALS};

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
    pub plugin_fuel: HistogramFamily<CallLabels>,
    pub plugin_reloads: Family<ReloadLabels, Counter>,
    pub config_reloads: Family<ResultLabel, Counter>,
    /// Plugins per state (`loading`, `running`, `failed`, …), set when the
    /// metrics are read.
    pub plugins: Family<StateLabel, Gauge>,
    pub hostapi_calls: Family<HostApiLabels, Counter>,
    pub plugin_instantiate: HistogramFamily<CallLabels>,
    // wasmctrl_plugin_* usage and ceilings
    pub plugin_guest_seconds: Family<CallLabels, Counter<f64, AtomicU64>>,
    pub plugin_cpu_throttled_seconds: Family<CallLabels, Counter<f64, AtomicU64>>,
    pub plugin_memory_peak: Family<CallLabels, Gauge>,
    pub plugin_output_bytes: Family<CallLabels, Counter>,
    pub plugin_host_calls: Family<CallLabels, Counter>,
    pub api_requests: Family<PluginLabel, Counter>,
    pub api_throttled_seconds: Family<PluginLabel, Counter<f64, AtomicU64>>,
    pub limit_exceeded: Family<LimitLabels, Counter>,
    /// Outbound HTTP requests sent, per rule host and status.
    pub http_requests: Family<HttpRequestLabels, Counter>,
    /// Time from sending an outbound request to its response's head.
    pub http_duration: HistogramFamily<PluginVersionLabels>,
    /// Outbound HTTP requests refused, per reason.
    pub http_denied: Family<PluginReasonLabels, Counter>,
    /// `reveal` calls refused, per reason.
    pub secret_refusals: Family<PluginReasonLabels, Counter>,
    // controller_runtime_webhook_*, and the decisions plugins made
    pub webhook_requests: Family<WebhookCodeLabels, Counter>,
    pub webhook_latency: HistogramFamily<WebhookLabel>,
    pub webhook_in_flight: Family<WebhookLabel, Gauge>,
    pub webhook_decisions: Family<WebhookDecisionLabels, Counter>,
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
            plugins: Family::default(),
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
            http_requests: Family::default(),
            http_duration: Family::new_with_constructor(seconds_histogram),
            http_denied: Family::default(),
            secret_refusals: Family::default(),
            webhook_requests: Family::default(),
            webhook_latency: Family::new_with_constructor(seconds_histogram),
            webhook_in_flight: Family::default(),
            webhook_decisions: Family::default(),
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
                "wasmctrl_plugins",
                "Plugins per state: loading (not compiled yet), starting, running, standby, failed (did not load, or informers not synced), draining",
                m.plugins.clone(),
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
                "wasmctrl_plugin_http_requests",
                "Outbound HTTP requests the plugin's guests sent, per rule host and status (error: no response)",
                m.http_requests.clone(),
            );
            r.register(
                "wasmctrl_plugin_http_request_duration_seconds",
                "Time from sending an outbound HTTP request to its response's head",
                m.http_duration.clone(),
            );
            r.register(
                "wasmctrl_plugin_http_denied",
                "Outbound HTTP requests refused, per reason (notAllowed|url|internalAddress|readOnly|requests|requestBytes|responseBytes|connections|deadline|secret|secretHost)",
                m.http_denied.clone(),
            );
            r.register(
                "wasmctrl_plugin_secret_refusals",
                "Secret reveals refused, per reason (unknown|reveal|unavailable)",
                m.secret_refusals.clone(),
            );
            r.register(
                "controller_runtime_webhook_requests",
                "Total number of admission requests by HTTP status code",
                m.webhook_requests.clone(),
            );
            r.register(
                "controller_runtime_webhook_latency_seconds",
                "Histogram of the latency of processing admission requests",
                m.webhook_latency.clone(),
            );
            r.register(
                "controller_runtime_webhook_requests_in_flight",
                "Current number of admission requests being served",
                m.webhook_in_flight.clone(),
            );
            r.register(
                "wasmctrl_webhook_decisions",
                "Admission reviews per plugin, export (validate|mutate), decision (allowed|denied|failed) and mode; in monitor mode a denial is counted but not answered",
                m.webhook_decisions.clone(),
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
}
