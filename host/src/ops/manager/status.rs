//! What the host reports about its plugins: one typed [`PluginStatus`] for
//! `/plugins`, the reload API's answer and logs.

use serde::Serialize;
use wasmctrl_apimachinery::time;

use super::Host;
use super::canary::CanaryStatus;
use super::lifecycle::PluginEntry;
use crate::control::shard::ShardStatus;
use crate::sandbox::outbound::{OutboundRule, SecretBinding};

/// One plugin as `/plugins` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PluginStatus {
    pub name: String,
    /// Where the component comes from (a file path, …).
    pub source: String,
    /// `sha256:<hex>` of the running component.
    pub digest: String,
    /// The version the plugin's metadata declares.
    pub version: String,
    /// `loading` (at start, not compiled yet), `starting` (informers
    /// syncing), `running`, `standby`, `failed`, `draining`, `stopped`.
    pub state: String,
    /// Whether it loaded and its informers synced, as
    /// `/readyz/plugin/{name}` answers.
    pub ready: bool,
    /// When the running version was loaded (RFC 3339).
    pub loaded_at: String,
    /// 1 at start, +1 per swap or rebuild.
    pub generation: u64,
    /// Keys waiting in the plugin's queue.
    pub queue_depth: usize,
    /// Why the last reload or sync failed, until the next success.
    pub last_error: Option<String>,
    /// Whether the running version's compiled code is in memory (false
    /// while unloaded by `idleUnload`, until its next key).
    pub resident: bool,
    /// Idle unloads of the running version.
    pub unloads: u64,
    /// With sharding: the shards whose keys this replica reconciles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<ShardStatus>,
    /// The accesses of the plugin's grant RBAC refused this host at start
    /// (`verb group/resource in namespace NS` or `… cluster-wide`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rbac_denied: Vec<String>,
    /// The candidate version beside this one, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate: Option<CandidateStatus>,
    /// The rules of its outbound HTTP grant (none: every request refused).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outbound: Vec<OutboundRule>,
    /// Its secrets: where each value comes from and where it may go,
    /// never a value.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretBinding>,
    /// The admission webhooks the running version declares.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<WebhookStatus>,
}

/// An admission webhook as `/plugins` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebhookStatus {
    /// The name the API server knows it by (`<plugin>.validate.wasmctrl.dev`).
    pub name: String,
    /// The path the host serves it on, or None when the config has no
    /// `webhook` section (declared, but not served).
    pub path: Option<String>,
    pub failure_policy: &'static str,
    pub timeout_seconds: u32,
    /// `protect` or `monitor` (the plugin's `admission.mode`).
    pub mode: &'static str,
    /// Each rule as `OPERATIONS group/version resources`.
    pub rules: Vec<String>,
}

/// A candidate version as `/plugins` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CandidateStatus {
    /// `shadow` or `canary`.
    pub mode: String,
    pub source: String,
    pub digest: String,
    /// With a canary: its state (`canary`, `rolled-back`, `promoted`), the
    /// rollback's reason and both versions' measures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryStatus>,
}

impl PluginStatus {
    /// A plugin of the config that is not running: still `loading`, or
    /// `failed` to load with `error`.
    pub(super) fn pending(name: &str, origin: &str, state: &str, error: Option<&str>) -> Self {
        Self {
            name: name.to_string(),
            source: origin.to_string(),
            digest: String::new(),
            version: String::new(),
            state: state.into(),
            ready: false,
            loaded_at: String::new(),
            generation: 0,
            queue_depth: 0,
            last_error: error.map(str::to_string),
            resident: false,
            unloads: 0,
            shards: None,
            rbac_denied: Vec::new(),
            candidate: None,
            outbound: Vec::new(),
            secrets: Vec::new(),
            webhooks: Vec::new(),
        }
    }
}

impl Host {
    pub(super) fn status_of(&self, name: &str, entry: &PluginEntry) -> PluginStatus {
        let plugin = entry.slot().current();
        let lifecycle = entry.lifecycle();
        PluginStatus {
            name: name.to_string(),
            source: entry.source().origin(),
            digest: plugin.digest().to_string(),
            version: plugin.metadata().version.clone(),
            state: lifecycle.state().as_str().to_string(),
            ready: lifecycle.synced(),
            loaded_at: time::format_seconds(lifecycle.loaded_at()),
            generation: lifecycle.generation(),
            queue_depth: entry.controller().queue().len(),
            last_error: lifecycle.last_error().map(str::to_string),
            resident: plugin.is_resident(),
            unloads: plugin.unloads(),
            shards: self.shards.as_ref().map(|s| s.status()),
            rbac_denied: self
                .rbac_denied
                .lock()
                .unwrap()
                .get(name)
                .cloned()
                .unwrap_or_default(),
            candidate: entry
                .slot()
                .candidate()
                .map(|(candidate, mode)| CandidateStatus {
                    mode: mode.into(),
                    source: candidate.origin().to_string(),
                    digest: candidate.digest().to_string(),
                    canary: entry.slot().canary_status(),
                }),
            outbound: plugin.outbound().rules().cloned().collect(),
            secrets: plugin.outbound().secrets().bindings().cloned().collect(),
            webhooks: plugin
                .webhooks()
                .iter()
                .map(|w| {
                    let segment = crate::ops::webhook::path_segment(w.kind);
                    WebhookStatus {
                        name: crate::ops::webhook::webhook_name(name, w.kind),
                        path: self
                            .config
                            .webhook
                            .as_ref()
                            .map(|_| format!("/{segment}/{name}")),
                        failure_policy: w.failure_policy.as_str(),
                        timeout_seconds: w.timeout_seconds,
                        mode: entry.config().admission.mode.as_str(),
                        rules: w
                            .rules
                            .iter()
                            .map(|r| {
                                format!(
                                    "{} {}/{} {}",
                                    r.operations.join(","),
                                    r.groups.join(","),
                                    r.versions.join(","),
                                    r.resources.join(",")
                                )
                            })
                            .collect(),
                    }
                })
                .collect(),
        }
    }

    /// The status of plugin `name`, running or pending.
    pub(super) fn status(&self, name: &str) -> Option<PluginStatus> {
        let running = {
            let plugins = self.plugins.lock().unwrap();
            plugins.get(name).map(|e| self.status_of(name, e))
        };
        running.or_else(|| self.pending_statuses().into_iter().find(|s| s.name == name))
    }

    /// Every plugin's state, running or pending (what `/plugins` shows in
    /// `state`, without building the statuses).
    pub(super) fn states(&self) -> Vec<&'static str> {
        let mut states: Vec<&'static str> = {
            let plugins = self.plugins.lock().unwrap();
            plugins
                .values()
                .map(|e| e.lifecycle().state().as_str())
                .collect()
        };
        states.extend(self.pending_states());
        states
    }

    /// Every plugin, running or pending, by name.
    pub(super) fn statuses(&self) -> Vec<PluginStatus> {
        let mut statuses: Vec<PluginStatus> = {
            let plugins = self.plugins.lock().unwrap();
            plugins
                .iter()
                .map(|(name, e)| self.status_of(name, e))
                .collect()
        };
        statuses.extend(self.pending_statuses());
        statuses.sort_by(|a, b| a.name.cmp(&b.name));
        statuses
    }
}
