//! The host's answers to the admin endpoint: metrics, health and
//! readiness, the plugins' statuses, and the reload, promote and shadow
//! operations, each refusal mapped to the HTTP status it means.

use std::time::SystemTime;

use futures::future::BoxFuture;

use super::Host;
use super::lifecycle::SlotPromoteError;
use super::reload::ReloadError;
use crate::ops::admin::page::{PageData, PluginPage};
use crate::ops::admin::{AdminState, Refusal};

/// What an admin reload answers: the plugin's status, or the refusal.
pub(super) type ReloadAnswer = Result<serde_json::Value, Refusal>;

impl AdminState for Host {
    fn metrics(&self) -> String {
        for entry in self.plugins.lock().unwrap().values() {
            entry.controller().queue().unfinished_work();
        }
        self.runtime.observe_pool();
        let mut states: std::collections::BTreeMap<&str, i64> = [
            "loading", "starting", "running", "standby", "failed", "draining",
        ]
        .into_iter()
        .map(|s| (s, 0))
        .collect();
        for state in self.states() {
            *states.entry(state).or_default() += 1;
        }
        for (state, n) in states {
            self.metrics
                .plugins
                .get_or_create(&crate::control::metrics::StateLabel {
                    state: state.into(),
                })
                .set(n);
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
        let waiting: Vec<String> = self
            .plugin_readiness()
            .into_iter()
            .filter_map(|(name, ready)| ready.err().map(|why| format!("{name}: {why}")))
            .collect();
        if waiting.is_empty() {
            Ok(())
        } else {
            Err(waiting.join("; "))
        }
    }

    fn plugin_readiness(&self) -> Vec<(String, Result<(), String>)> {
        let mut readiness: Vec<(String, Result<(), String>)> = {
            let plugins = self.plugins.lock().unwrap();
            plugins
                .iter()
                .map(|(n, e)| {
                    let ready = if e.lifecycle().synced() {
                        Ok(())
                    } else {
                        Err(e
                            .lifecycle()
                            .last_error()
                            .unwrap_or("informers not synced yet")
                            .to_string())
                    };
                    (n.clone(), ready)
                })
                .collect()
        };
        readiness.extend(self.pending_readiness());
        readiness.sort_by(|a, b| a.0.cmp(&b.0));
        readiness
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

    fn page(&self) -> PageData {
        let now = SystemTime::now();
        let role = match (&self.shards, self.config.leader_election.enabled) {
            (Some(_), _) => self.ready_detail().unwrap_or_else(|| "sharded".into()),
            (None, true) if *self.leader.borrow() => "leader".into(),
            (None, true) => "standby (another replica leads)".into(),
            (None, false) => "single replica".into(),
        };
        let plugins = self.plugins.lock().unwrap();
        let mut rows: Vec<PluginPage> = plugins
            .iter()
            .map(|(name, entry)| {
                let status = self.status_of(name, entry);
                let controller = entry.controller();
                PluginPage {
                    candidate: status.candidate.as_ref().map(|c| match &c.canary {
                        Some(canary) => format!(
                            "{} {}%: {} (candidate p99 {} ms, failures {:.0}%)",
                            c.mode,
                            canary.percent,
                            canary.state,
                            canary.candidate.p99_ms,
                            canary.candidate.failure_rate * 100.0
                        ),
                        None => c.mode.clone(),
                    }),
                    queue: controller
                        .queue()
                        .depth_by_priority()
                        .into_iter()
                        .map(|(p, n)| (p.0, n))
                        .collect(),
                    activity: controller.activity().summary(now),
                    name: status.name,
                    version: status.version,
                    digest: status.digest,
                    state: status.state,
                    generation: status.generation,
                    last_error: status.last_error,
                }
            })
            .collect();
        drop(plugins);
        let idle = crate::control::controller::Activity::default().summary(now);
        rows.extend(self.pending_statuses().into_iter().map(|s| PluginPage {
            name: s.name,
            version: s.version,
            digest: s.digest,
            state: s.state,
            generation: s.generation,
            candidate: None,
            queue: Vec::new(),
            last_error: s.last_error,
            activity: idle.clone(),
        }));
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        PageData {
            role,
            ready: self.readyz(),
            plugins: rows,
        }
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
            if let Some(config) = self.refused_config(&name)
                && let Some(host) = self.me.upgrade()
            {
                return match host.start_config_plugin(config).await {
                    Ok(()) => Ok(self
                        .status(&name)
                        .map(|s| serde_json::to_value(s).expect("a status serializes"))
                        .unwrap_or_default()),
                    Err(e) => Err(Refusal::Invalid(e.to_string())),
                };
            }
            if self.is_pending(&name) {
                return Err(Refusal::Conflict(format!(
                    "plugin {name:?} is still loading"
                )));
            }
            let Some(host) = self.me.upgrade() else {
                return Err(Refusal::Conflict("the host is stopping".into()));
            };
            let key = name.clone();
            let reload = async move {
                match host.reload_plugin(&name).await {
                    Ok(status) => Ok(serde_json::to_value(status).expect("a status serializes")),
                    Err(e @ ReloadError::Unknown(_)) => Err(Refusal::NotFound(e.to_string())),
                    Err(e @ (ReloadError::Removing(_) | ReloadError::Superseded(_))) => {
                        Err(Refusal::Conflict(e.to_string()))
                    }
                    Err(ReloadError::Failed(e)) => Err(Refusal::Invalid(e.to_string())),
                }
            };
            let stopped =
                |why: String| Err(Refusal::Conflict(format!("the reload stopped: {why}")));
            self.admin_reloads.run(&key, || reload, stopped).await
        })
    }
}
