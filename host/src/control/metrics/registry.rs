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
use super::per_plugin::PluginFamily;
use super::refusals::{DISK_REFUSALS, SOURCE_REFUSALS};

fn seconds_histogram() -> Histogram {
    // 1 µs … ~1000 s, as client-go's workqueue buckets span.
    Histogram::new(exponential_buckets(1e-6, 4.0, 16))
}

type PluginHistograms<L> = PluginFamily<L, Histogram, fn() -> Histogram>;

/// Every metric the host exports, in one registry.
pub struct Metrics {
    registry: Mutex<Registry>,
    /// Every [`PluginFamily`] below, as registered.
    forgetters: Vec<Box<dyn Forget + Send + Sync>>,
    // workqueue_*
    pub queue_depth: PluginFamily<QueueDepthLabels, Gauge>,
    pub queue_adds: PluginFamily<NameLabel, Counter>,
    pub queue_retries: PluginFamily<NameLabel, Counter>,
    pub queue_duration: PluginHistograms<NameLabel>,
    pub work_duration: PluginHistograms<NameLabel>,
    pub unfinished_work: PluginFamily<NameLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub longest_running: PluginFamily<NameLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    // controller_runtime_*
    pub reconcile_total: PluginFamily<ResultLabels, Counter>,
    /// Reconciles skipped by `skipUnchanged`.
    pub reconcile_skipped: PluginFamily<PluginLabel, Counter>,
    /// Shadow runs of a candidate compared with the stable version.
    pub shadow_runs: PluginFamily<PluginLabel, Counter>,
    /// Shadow runs that diverged, per kind of divergent write (or `result`).
    pub shadow_divergences: PluginFamily<PluginKindLabels, Counter>,
    /// Keys that got no shadow run because every shadow permit was busy.
    pub shadow_skipped: PluginFamily<PluginLabel, Counter>,
    /// Unused pool slots kept warm, per pool (set at each scrape).
    pub pool_unused_warm: Family<PoolLabel, Gauge>,
    /// Bytes those warm slots keep resident, per pool.
    pub pool_unused_resident: Family<PoolLabel, Gauge>,
    /// Reconcile transcripts written (`record`).
    pub record_transcripts: PluginFamily<PluginLabel, Counter>,
    /// Transcripts not written, per reason (`too-large`, `backlog`, `io`).
    pub record_dropped: PluginFamily<PluginReasonLabels, Counter>,
    /// WasmReconciler objects refused, per status reason
    /// (`GrantExceedsMaxGrant`, `LimitsExceedMaxApiQps`, `SourceNotAllowed`,
    /// …: the host's fixed set, never an object's string).
    pub object_refusals: Family<ReasonLabel, Counter>,
    /// Bytes of components the WasmReconciler objects' loads under way
    /// hold in memory (at most `pluginsFrom.maxLoadingBytes`).
    pub object_component_bytes: Gauge,
    /// Reconciles per version while a canary runs.
    pub versioned_reconciles: PluginFamily<PluginVersionResultLabels, Counter>,
    /// Reconcile time per version while a canary runs.
    pub versioned_reconcile_time: PluginHistograms<PluginVersionLabels>,
    pub canary_rollbacks: PluginFamily<PluginLabel, Counter>,
    pub canary_promotions: PluginFamily<PluginLabel, Counter>,
    pub reconcile_errors: PluginFamily<ControllerVersionLabels, Counter>,
    pub reconcile_panics: PluginFamily<ControllerVersionLabels, Counter>,
    pub reconcile_timeouts: PluginFamily<ControllerVersionLabels, Counter>,
    pub terminal_errors: PluginFamily<ControllerVersionLabels, Counter>,
    pub reconcile_time: PluginHistograms<ControllerVersionLabels>,
    pub max_concurrent: PluginFamily<ControllerLabel, Gauge>,
    pub active_workers: PluginFamily<ControllerLabel, Gauge>,
    // wasmctrl_*
    pub plugin_traps: PluginFamily<TrapLabels, Counter>,
    pub plugin_fuel: PluginHistograms<CallLabels>,
    pub plugin_reloads: PluginFamily<ReloadLabels, Counter>,
    pub config_reloads: Family<ResultLabel, Counter>,
    /// Plugins per state (`loading`, `running`, `failed`, …), set when the
    /// metrics are read.
    pub plugins: Family<StateLabel, Gauge>,
    pub hostapi_calls: PluginFamily<HostApiLabels, Counter>,
    pub plugin_instantiate: PluginHistograms<CallLabels>,
    // wasmctrl_plugin_* usage and ceilings
    pub plugin_guest_seconds: PluginFamily<CallLabels, Counter<f64, AtomicU64>>,
    pub plugin_cpu_throttled_seconds: PluginFamily<CallLabels, Counter<f64, AtomicU64>>,
    pub plugin_memory_peak: PluginFamily<CallLabels, Gauge>,
    pub plugin_output_bytes: PluginFamily<CallLabels, Counter>,
    pub plugin_host_calls: PluginFamily<CallLabels, Counter>,
    pub api_requests: PluginFamily<PluginLabel, Counter>,
    pub api_throttled_seconds: PluginFamily<PluginLabel, Counter<f64, AtomicU64>>,
    pub limit_exceeded: PluginFamily<LimitLabels, Counter>,
    /// Outbound HTTP requests sent, per rule host and status.
    pub http_requests: PluginFamily<HttpRequestLabels, Counter>,
    /// Time from sending an outbound request to its response's head.
    pub http_duration: PluginHistograms<PluginVersionLabels>,
    /// Outbound HTTP requests refused, per reason.
    pub http_denied: PluginFamily<PluginReasonLabels, Counter>,
    /// `reveal` calls refused, per reason.
    pub secret_refusals: PluginFamily<PluginReasonLabels, Counter>,
    // controller_runtime_webhook_*, and the decisions plugins made
    pub webhook_requests: PluginFamily<WebhookCodeLabels, Counter>,
    pub webhook_latency: PluginHistograms<WebhookLabel>,
    pub webhook_in_flight: PluginFamily<WebhookLabel, Gauge>,
    pub webhook_decisions: PluginFamily<WebhookDecisionLabels, Counter>,
    /// Webhook server handshakes refused, per reason (`clientCertificate`
    /// or `tls`).
    pub webhook_refused_handshakes: Family<ReasonLabel, Counter>,
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
        let mut m = Self {
            registry: Mutex::new(Registry::default()),
            forgetters: Vec::new(),
            queue_depth: PluginFamily::default(),
            queue_adds: PluginFamily::default(),
            queue_retries: PluginFamily::default(),
            queue_duration: PluginFamily::new_with_constructor(seconds_histogram),
            work_duration: PluginFamily::new_with_constructor(seconds_histogram),
            unfinished_work: PluginFamily::default(),
            longest_running: PluginFamily::default(),
            reconcile_total: PluginFamily::default(),
            reconcile_skipped: PluginFamily::default(),
            shadow_runs: PluginFamily::default(),
            shadow_divergences: PluginFamily::default(),
            shadow_skipped: PluginFamily::default(),
            pool_unused_warm: Family::default(),
            pool_unused_resident: Family::default(),
            record_transcripts: PluginFamily::default(),
            record_dropped: PluginFamily::default(),
            object_refusals: Family::default(),
            object_component_bytes: Gauge::default(),
            versioned_reconciles: PluginFamily::default(),
            versioned_reconcile_time: PluginFamily::new_with_constructor(seconds_histogram),
            canary_rollbacks: PluginFamily::default(),
            canary_promotions: PluginFamily::default(),
            reconcile_errors: PluginFamily::default(),
            reconcile_panics: PluginFamily::default(),
            reconcile_timeouts: PluginFamily::default(),
            terminal_errors: PluginFamily::default(),
            reconcile_time: PluginFamily::new_with_constructor(seconds_histogram),
            max_concurrent: PluginFamily::default(),
            active_workers: PluginFamily::default(),
            plugin_traps: PluginFamily::default(),
            plugin_fuel: PluginFamily::new_with_constructor(|| {
                Histogram::new(exponential_buckets(1e3, 10.0, 10))
            }),
            plugin_reloads: PluginFamily::default(),
            config_reloads: Family::default(),
            plugins: Family::default(),
            hostapi_calls: PluginFamily::default(),
            plugin_instantiate: PluginFamily::new_with_constructor(seconds_histogram),
            plugin_guest_seconds: PluginFamily::default(),
            plugin_cpu_throttled_seconds: PluginFamily::default(),
            plugin_memory_peak: PluginFamily::default(),
            plugin_output_bytes: PluginFamily::default(),
            plugin_host_calls: PluginFamily::default(),
            api_requests: PluginFamily::default(),
            api_throttled_seconds: PluginFamily::default(),
            limit_exceeded: PluginFamily::default(),
            http_requests: PluginFamily::default(),
            http_duration: PluginFamily::new_with_constructor(seconds_histogram),
            http_denied: PluginFamily::default(),
            secret_refusals: PluginFamily::default(),
            webhook_requests: PluginFamily::default(),
            webhook_latency: PluginFamily::new_with_constructor(seconds_histogram),
            webhook_in_flight: PluginFamily::default(),
            webhook_decisions: PluginFamily::default(),
            webhook_refused_handshakes: Family::default(),
        };
        {
            let mut r = m.registry.lock().unwrap();
            let mut forgetters: Vec<Box<dyn Forget + Send + Sync>> = Vec::new();
            // A per-plugin family is registered and remembered for
            // `forget_plugin` in one step, so that none is left out.
            macro_rules! per_plugin {
                ($r:ident, $forgetters:ident, $name:expr, $help:expr, $family:expr) => {{
                    $r.register($name, $help, $family.family());
                    $forgetters.push(Box::new($family.clone()));
                }};
            }
            per_plugin!(
                r,
                forgetters,
                "workqueue_depth",
                "Current depth of workqueue",
                m.queue_depth
            );
            per_plugin!(
                r,
                forgetters,
                "workqueue_adds",
                "Total number of adds handled by workqueue",
                m.queue_adds
            );
            per_plugin!(
                r,
                forgetters,
                "workqueue_retries",
                "Total number of retries handled by workqueue",
                m.queue_retries
            );
            per_plugin!(
                r,
                forgetters,
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                m.queue_duration
            );
            per_plugin!(
                r,
                forgetters,
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
                m.work_duration
            );
            per_plugin!(
                r,
                forgetters,
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration",
                m.unfinished_work
            );
            per_plugin!(
                r,
                forgetters,
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running",
                m.longest_running
            );
            per_plugin!(
                r,
                forgetters,
                "controller_runtime_reconcile",
                "Total number of reconciliations per controller",
                m.reconcile_total
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_reconcile_skipped",
                "Reconciles skipped because nothing the last successful one read changed (skipUnchanged)",
                m.reconcile_skipped
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_shadow_runs",
                "Shadow runs of a candidate version compared with the stable version",
                m.shadow_runs
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_shadow_divergences",
                "Shadow runs whose writes or result differed from the stable version's, per kind of object written (or result)",
                m.shadow_divergences
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_shadow_skipped",
                "Keys that got no shadow run because every shadow permit was busy",
                m.shadow_skipped
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
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_record_transcripts",
                "Reconcile transcripts written by a plugin's record",
                m.record_transcripts
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_record_dropped",
                "Reconcile transcripts not written, per reason (too-large: over record.maxBytes; backlog: the writer fell behind; io: the write failed)",
                m.record_dropped
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_canary_reconciles",
                "Reconciles per version (stable|candidate) and result while a canary runs",
                m.versioned_reconciles
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_canary_reconcile_time_seconds",
                "Reconcile time per version (stable|candidate) while a canary runs",
                m.versioned_reconcile_time
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_canary_rollbacks",
                "Canaries rolled back automatically",
                m.canary_rollbacks
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_canary_promotions",
                "Canary candidates promoted (by the API or automatically)",
                m.canary_promotions
            );
            per_plugin!(
                r,
                forgetters,
                "controller_runtime_reconcile_errors",
                "Total number of reconciliation errors per controller",
                m.reconcile_errors
            );
            per_plugin!(
                r,
                forgetters,
                "controller_runtime_reconcile_panics",
                "Total number of reconciliation panics (guest traps) per controller",
                m.reconcile_panics
            );
            per_plugin!(
                r,
                forgetters,
                "controller_runtime_reconcile_timeouts",
                "Total number of reconciliation timeouts (deadline traps) per controller",
                m.reconcile_timeouts
            );
            per_plugin!(
                r,
                forgetters,
                "controller_runtime_terminal_reconcile_errors",
                "Total number of terminal reconciliation errors per controller",
                m.terminal_errors
            );
            per_plugin!(
                r,
                forgetters,
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                m.reconcile_time
            );
            per_plugin!(
                r,
                forgetters,
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
                m.max_concurrent
            );
            per_plugin!(
                r,
                forgetters,
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
                m.active_workers
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_plugin_traps",
                "Guest traps per plugin and reason (deadline|fuel|memory|panic|stack|other)",
                m.plugin_traps
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_plugin_fuel_consumed",
                "Fuel consumed per reconcile",
                m.plugin_fuel
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_plugin_reloads",
                "Plugin loads and hot swaps per plugin and result",
                m.plugin_reloads
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
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_hostapi_calls",
                "Host API calls per plugin, verb, resource and result code",
                m.hostapi_calls
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_plugin_instantiate_seconds",
                "Time to create a store and instantiate a plugin",
                m.plugin_instantiate
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_plugin_guest_seconds",
                "Time spent running guest code per plugin (CPU unless preempted)",
                m.plugin_guest_seconds
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_plugin_cpu_throttled_seconds",
                "Time the plugin's guests were held back past their CPU burst to share the CPU with other plugins (runtime.guestCpu)",
                m.plugin_cpu_throttled_seconds
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_plugin_memory_peak_bytes",
                "The most linear memory one instance of the plugin held (all memories together)",
                m.plugin_memory_peak
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_plugin_output_bytes",
                "Bytes of stdout, stderr and log messages the plugin wrote, kept or dropped",
                m.plugin_output_bytes
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_plugin_host_calls",
                "kube host calls the plugin made",
                m.plugin_host_calls
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_plugin_api_requests",
                "Requests the plugin's host calls sent to the API server",
                m.api_requests
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_plugin_api_throttled_seconds",
                "Time the plugin's API requests waited for its API rate limit",
                m.api_throttled_seconds
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_plugin_limit_exceeded",
                "Calls that ran into one of the plugin's ceilings, per limit",
                m.limit_exceeded
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_plugin_http_requests",
                "Outbound HTTP requests the plugin's guests sent, per rule host and status (error: no response)",
                m.http_requests
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_plugin_http_request_duration_seconds",
                "Time from sending an outbound HTTP request to its response's head",
                m.http_duration
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_plugin_http_denied",
                "Outbound HTTP requests refused, per reason (notAllowed|url|internalAddress|readOnly|requests|requestBytes|responseBytes|connections|lookups|deadline|secret|secretHost)",
                m.http_denied
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_plugin_secret_refusals",
                "Secret reveals refused, per reason (unknown|reveal|unavailable)",
                m.secret_refusals
            );
            per_plugin!(
                r,
                forgetters,
                "controller_runtime_webhook_requests",
                "Total number of admission requests by HTTP status code",
                m.webhook_requests
            );
            per_plugin!(
                r,
                forgetters,
                "controller_runtime_webhook_latency_seconds",
                "Histogram of the latency of processing admission requests",
                m.webhook_latency
            );
            per_plugin!(
                r,
                forgetters,
                "controller_runtime_webhook_requests_in_flight",
                "Current number of admission requests being served",
                m.webhook_in_flight
            );
            per_plugin!(
                r,
                forgetters,
                "wasmctrl_webhook_decisions",
                "Admission reviews per plugin, export (validate|mutate), decision (allowed|denied|failed) and mode; in monitor mode a denial is counted but not answered",
                m.webhook_decisions
            );
            r.register(
                "wasmctrl_webhook_refused_handshakes",
                "TLS handshakes the webhook server refused, per reason (clientCertificate: none presented, or not signed by webhook.clientCAFile; tls: any other failure)",
                m.webhook_refused_handshakes.clone(),
            );
            r.register(
                "wasmctrl_object_refusals",
                "WasmReconciler objects refused (their plugin not run as specified), per reason",
                m.object_refusals.clone(),
            );
            r.register(
                "wasmctrl_object_component_bytes",
                "Bytes of components that WasmReconciler objects' loads under way hold in memory, from the first byte read until the plugin is compiled (at most pluginsFrom.maxLoadingBytes)",
                m.object_component_bytes.clone(),
            );
            r.register(
                "wasmctrl_disk_refusals",
                "What the host refused to read back from its own disk, per what (process-wide)",
                DISK_REFUSALS.clone(),
            );
            r.register(
                "wasmctrl_outbound_lookups_in_flight",
                "Outbound name lookups on the host's resolver threads, those whose reconcile gave up on them included (process-wide; at most 128)",
                super::process::OUTBOUND_LOOKUPS.clone(),
            );
            r.register(
                "wasmctrl_source_refusals",
                "What network sources refused, per reason (process-wide)",
                SOURCE_REFUSALS.clone(),
            );
            drop(r);
            m.forgetters = forgetters;
        }
        m
    }

    /// Drops every series of `plugin`: it was removed, and its name may
    /// never come back (see [`PluginFamily`]).
    pub fn forget_plugin(&self, plugin: &str) {
        for family in &self.forgetters {
            family.forget(plugin);
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry.lock().unwrap())
            .expect("writing to a String cannot fail");
        out
    }
}

/// What [`Metrics::forget_plugin`] asks of each of its families.
trait Forget {
    fn forget(&self, plugin: &str);
}

impl<L, M, C> Forget for PluginFamily<L, M, C>
where
    L: Clone + std::hash::Hash + Eq + super::per_plugin::OfPlugin,
    M: Clone,
    C: prometheus_client::metrics::family::MetricConstructor<M> + Clone,
{
    fn forget(&self, plugin: &str) {
        PluginFamily::forget(self, plugin);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::control::metrics::{CallUsage, ReconcileSeries, Version};
    use crate::control::workqueue::Priority;

    #[test]
    fn forgetting_a_plugin_drops_its_series_from_every_family() {
        let metrics = std::sync::Arc::new(Metrics::new());
        for plugin in ["gone", "kept"] {
            metrics.observe_reconcile_in(
                &ReconcileSeries::default(),
                plugin,
                Version::Stable,
                Duration::from_millis(1),
                &Ok(crate::Action::done()),
            );
            metrics.observe_call_as(plugin, Version::Stable, &CallUsage::default());
            metrics.count_limit(plugin, "httpRequests");
            let queue = metrics.queue(plugin);
            queue.inc_adds();
            queue.set_depth(Priority::NORMAL, 1);
            metrics
                .webhook_in_flight
                .get_or_create(&WebhookLabel {
                    webhook: format!("/validate/{plugin}"),
                })
                .inc();
        }
        let lines_of = |text: &str, plugin: &str| {
            text.lines()
                .filter(|l| !l.starts_with('#') && l.contains(&format!("{plugin}\"")))
                .count()
        };
        let before = metrics.encode();
        assert!(lines_of(&before, "gone") > 20, "{before}");

        metrics.forget_plugin("gone");
        let after = metrics.encode();
        assert_eq!(lines_of(&after, "gone"), 0, "{after}");
        assert_eq!(lines_of(&after, "kept"), lines_of(&before, "kept"));
    }
}
