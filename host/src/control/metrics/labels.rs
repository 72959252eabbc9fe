//! The label sets of every family.

use prometheus_client::encoding::EncodeLabelSet;

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

/// `wasmctrl_plugin_http_requests_total`: `host` is the host of the rule
/// that allowed the request, as the grant writes it (a bounded set).
/// controller-runtime's webhook families: `webhook` is the path served
/// (`/validate/<plugin>`), a bounded set.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabel {
    pub webhook: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookCodeLabels {
    pub webhook: String,
    pub code: String,
}

/// `wasmctrl_webhook_decisions_total`: `kind` is validate|mutate,
/// `decision` allowed|denied|failed, `mode` protect|monitor.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookDecisionLabels {
    pub plugin: String,
    pub kind: String,
    pub decision: String,
    pub mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpRequestLabels {
    pub plugin: String,
    pub version: String,
    pub host: String,
    /// The response's status, or `error` when none came.
    pub code: String,
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
    /// The call that trapped: `reconcile`, `validate` or `mutate`.
    pub kind: String,
}

/// A per-call `wasmctrl_plugin_*` family's labels: the plugin, the version
/// that ran, and the kind of call (`reconcile`, `validate` or `mutate`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub plugin: String,
    pub version: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    pub plugin: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WhatLabel {
    pub what: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostApiLabels {
    pub plugin: String,
    pub verb: String,
    pub resource: String,
    pub code: String,
}
