//! wasmctrl's per-call plugin families: what a guest call cost, how it
//! ended, and the plugin ceilings it ran into.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::labels::{
    CallLabels, HttpRequestLabels, LimitLabels, PluginReasonLabels, PluginVersionLabels, TrapLabels,
};
use super::registry::Metrics;
use super::version::{Version, current_version};
use crate::control::reconcile::TrapKind;

/// The kind of guest call: the `kind` label of the per-call families, so
/// that a plugin's admission reviews never blur its reconciles' figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    Reconcile = 0,
    Validate = 1,
    Mutate = 2,
}

impl CallKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CallKind::Reconcile => "reconcile",
            CallKind::Validate => "validate",
            CallKind::Mutate => "mutate",
        }
    }
}

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

impl Metrics {
    /// Counts one refusal at `limit` for `plugin` (its current version) in
    /// `wasmctrl_plugin_limit_exceeded_total`.
    pub fn count_limit(&self, plugin: &str, limit: &str) {
        self.count_limit_as(plugin, current_version(), limit, 1);
    }

    /// Counts `n` refusals at `limit` for `plugin` at once.
    pub fn count_limits(&self, plugin: &str, limit: &str, n: u64) {
        self.count_limit_as(plugin, current_version(), limit, n);
    }

    /// Counts one refused outbound request of `plugin` for `reason` in
    /// `wasmctrl_plugin_http_denied_total`.
    pub fn count_http_denied(&self, plugin: &str, reason: &str) {
        self.http_denied
            .get_or_create(&PluginReasonLabels {
                plugin: plugin.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// Counts one refused `reveal` of `plugin` for `reason` in
    /// `wasmctrl_plugin_secret_refusals_total`.
    pub fn count_secret_refused(&self, plugin: &str, reason: &str) {
        self.secret_refusals
            .get_or_create(&PluginReasonLabels {
                plugin: plugin.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// Records one outbound request sent: its rule's host, its status
    /// (`error` without one) and how long its response's head took.
    pub fn observe_http_request(
        &self,
        plugin: &str,
        version: Version,
        host: &str,
        code: &str,
        took: Duration,
    ) {
        self.http_requests
            .get_or_create(&HttpRequestLabels {
                plugin: plugin.into(),
                version: version.as_str().into(),
                host: host.into(),
                code: code.into(),
            })
            .inc();
        self.http_duration
            .get_or_create(&PluginVersionLabels {
                plugin: plugin.into(),
                version: version.as_str().into(),
            })
            .observe(took.as_secs_f64());
    }

    fn count_limit_as(&self, plugin: &str, version: Version, limit: &str, n: u64) {
        self.limit_exceeded
            .get_or_create(&LimitLabels {
                plugin: plugin.into(),
                limit: limit.into(),
                version: version.as_str().into(),
            })
            .inc_by(n);
    }

    /// Records what one reconcile of `version` cost and how it ended.
    pub fn observe_call_as(&self, plugin: &str, version: Version, usage: &CallUsage) {
        let kind = CallKind::Reconcile;
        let series = self.call_series(plugin, version, kind, usage.fuel_consumed.is_some());
        self.observe_call_in(&series, plugin, version, usage);
    }

    /// The series every `kind` of call of `plugin` at `version` updates,
    /// looked up once: to hold and pass to [`Metrics::observe_call_in`] (a
    /// label lookup per series per call was ~0.5 µs of a ~10 µs reconcile).
    /// The fuel series exists only `with_fuel` (fuel metering on).
    pub fn call_series(
        &self,
        plugin: &str,
        version: Version,
        kind: CallKind,
        with_fuel: bool,
    ) -> CallSeries {
        let label = CallLabels {
            plugin: plugin.into(),
            version: version.as_str().into(),
            kind: kind.as_str().into(),
        };
        CallSeries {
            kind,
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
        if let Some(trap) = usage.trap {
            self.plugin_traps
                .get_or_create(&TrapLabels {
                    plugin: plugin.into(),
                    reason: trap.as_str().into(),
                    version: version.as_str().into(),
                    kind: series.kind.as_str().into(),
                })
                .inc();
        }
        if let Some(limit) = usage.ceiling {
            self.count_limit_as(plugin, version, limit, 1);
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
    kind: CallKind,
    instantiate: Histogram,
    fuel: Option<Histogram>,
    guest_seconds: Counter<f64, AtomicU64>,
    cpu_throttled: Counter<f64, AtomicU64>,
    memory_peak: Gauge,
    output_bytes: Counter,
    host_calls: Counter,
}
