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
//!
//! - `registry`: [`Metrics`], every family in one registry.
//! - `workqueue` and `reconcile`: the controller-runtime families a queue
//!   and a controller update.
//! - `plugin`: wasmctrl's per-call plugin families ([`CallUsage`],
//!   [`CallSeries`]) and the ceilings a plugin ran into. Their `kind` label
//!   ([`CallKind`]) tells a plugin's reconciles from its admission reviews.
//! - `refusals`: the process-wide refusal counters of sources and of what
//!   the host reads back from its disk.
//! - `process`: the process-wide gauges of what every plugin shares.
//! - `per_plugin`: [`PluginFamily`], the families whose series belong to
//!   one plugin each and are dropped when it is removed
//!   ([`Metrics::forget_plugin`]).
//! - `version` and `labels`: the `version` label and every label set.

mod labels;
mod per_plugin;
mod plugin;
mod process;
mod reconcile;
mod refusals;
mod registry;
mod version;
mod workqueue;

pub use labels::{
    CallLabels, ControllerLabel, ControllerVersionLabels, HostApiLabels, HttpRequestLabels,
    LimitLabels, NameLabel, PluginKindLabels, PluginLabel, PluginReasonLabels, PluginVersionLabels,
    PluginVersionResultLabels, PoolLabel, QueueDepthLabels, ReasonLabel, ReloadLabels, ResultLabel,
    ResultLabels, StateLabel, TrapLabels, WebhookCodeLabels, WebhookDecisionLabels, WebhookLabel,
    WhatLabel,
};
pub use per_plugin::{OfPlugin, PluginFamily};
pub use plugin::{CallKind, CallSeries, CallUsage};
pub use process::OUTBOUND_LOOKUPS;
pub use reconcile::ReconcileSeries;
pub use refusals::{
    DiskRefusal, SourceRefusal, count_disk_refusal, count_source_refusal, disk_refusals,
    source_refusals,
};
pub use registry::Metrics;
pub use version::{Version, current_version, ran_as, with_version};
