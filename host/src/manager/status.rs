//! What the host reports about its plugins: one typed [`PluginStatus`] for
//! `/plugins`, the reload API's answer and logs; readiness and health.

use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use serde::Serialize;

use super::Host;
use super::lifecycle::PluginEntry;
use super::reload::ReloadError;
use crate::admin::{AdminState, Refusal};
use crate::shard::ShardStatus;

/// One plugin as `/plugins` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
    /// With sharding: the shards whose keys this replica reconciles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<ShardStatus>,
    /// The accesses of the plugin's grant RBAC refused this host at start
    /// (`verb group/resource in namespace NS` or `… cluster-wide`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rbac_denied: Vec<String>,
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
            loaded_at: rfc3339(lifecycle.loaded_at()),
            generation: lifecycle.generation(),
            queue_depth: entry.controller().queue().len(),
            last_error: lifecycle.last_error().map(str::to_string),
            shards: self.shards.as_ref().map(|s| s.status()),
            rbac_denied: self
                .rbac_denied
                .lock()
                .unwrap()
                .get(name)
                .cloned()
                .unwrap_or_default(),
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

fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs() as i64;
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .map(|ts| ts.to_string())
        .unwrap_or_default()
}

impl AdminState for Host {
    fn metrics(&self) -> String {
        for entry in self.plugins.lock().unwrap().values() {
            entry.controller().queue().unfinished_work();
        }
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
