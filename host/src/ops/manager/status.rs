//! What the host reports about its plugins: one typed [`PluginStatus`] for
//! `/plugins`, the reload API's answer and logs; readiness and health.

use futures::future::BoxFuture;
use serde::Serialize;
use wasmctrl_apimachinery::time;

use super::Host;
use super::canary::CanaryStatus;
use super::lifecycle::PluginEntry;
use super::lifecycle::SlotPromoteError;
use super::reload::ReloadError;
use crate::control::shard::ShardStatus;
use crate::ops::admin::{AdminState, Refusal};

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
    /// `starting`, `running`, `standby`, `failed`, `draining`, `stopped`.
    pub state: String,
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
        }
    }

    pub(super) fn statuses(&self) -> Vec<PluginStatus> {
        let plugins = self.plugins.lock().unwrap();
        plugins
            .iter()
            .map(|(name, e)| self.status_of(name, e))
            .collect()
    }
}

impl AdminState for Host {
    fn metrics(&self) -> String {
        for entry in self.plugins.lock().unwrap().values() {
            entry.controller().queue().unfinished_work();
        }
        self.runtime.observe_pool();
        self.metrics.encode()
    }

    fn healthz(&self) -> Result<(), String> {
        if self.stop.is_cancelled() {
            return Err("shutting down".into());
        }
        Ok(())
    }

    fn readyz(&self) -> Result<(), String> {
        self.healthz()?;
        let plugins = self.plugins.lock().unwrap();
        let waiting: Vec<String> = plugins
            .iter()
            .filter(|(_, e)| !e.lifecycle().synced())
            .map(|(n, e)| match e.lifecycle().last_error() {
                Some(err) => format!("{n}: {err}"),
                None => format!("{n}: informers not synced yet"),
            })
            .collect();
        if waiting.is_empty() {
            Ok(())
        } else {
            Err(waiting.join("; "))
        }
    }

    fn ready_detail(&self) -> Option<String> {
        let s = self.shards.as_ref()?.status();
        let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        Some(format!(
            "shards held: [{}] of {}; draining: [{}]",
            list(&s.held),
            s.total,
            list(&s.draining)
        ))
    }

    fn plugins(&self) -> serde_json::Value {
        serde_json::to_value(self.statuses()).expect("statuses serialize")
    }

    fn promote(&self, name: String) -> Result<serde_json::Value, Refusal> {
        let plugins = self.plugins.lock().unwrap();
        let entry = plugins
            .get(&name)
            .ok_or_else(|| Refusal::NotFound(format!("no plugin named {name:?}")))?;
        entry.slot().promote().map_err(|e| match e {
            SlotPromoteError::NoCanary => Refusal::NotFound(format!("plugin {name:?}: {e}")),
            SlotPromoteError::Refused(e) => Refusal::Conflict(format!("plugin {name:?}: {e}")),
        })?;
        Ok(serde_json::to_value(self.status_of(&name, entry)).expect("a status serializes"))
    }

    fn shadow(&self, name: String) -> Result<serde_json::Value, Refusal> {
        let plugins = self.plugins.lock().unwrap();
        let entry = plugins
            .get(&name)
            .ok_or_else(|| Refusal::NotFound(format!("no plugin named {name:?}")))?;
        let report = entry.slot().shadow_report().ok_or_else(|| {
            Refusal::NotFound(format!("plugin {name:?} has no candidate in shadow mode"))
        })?;
        Ok(serde_json::to_value(report).expect("a shadow report serializes"))
    }

    fn reload(&self, name: String) -> BoxFuture<'_, Result<serde_json::Value, Refusal>> {
        Box::pin(async move {
            match self.reload_plugin(&name).await {
                Ok(status) => Ok(serde_json::to_value(status).expect("a status serializes")),
                Err(e @ ReloadError::Unknown(_)) => Err(Refusal::NotFound(e.to_string())),
                Err(e @ ReloadError::Removing(_)) => Err(Refusal::Conflict(e.to_string())),
                Err(ReloadError::Failed(e)) => Err(Refusal::Invalid(e.to_string())),
            }
        })
    }
}
