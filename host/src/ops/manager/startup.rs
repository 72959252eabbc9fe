//! Loading the config's plugins at start.
//!
//! Compiling a component is the slow part of a start (tens of milliseconds
//! each, cold), so a host of a thousand plugins would wait a minute before
//! its first reconcile if it loaded them one after another before serving.
//! Instead, [`Host::load_config_plugins`] loads them in the background, at
//! most one per CPU at a time, in config order, and each plugin syncs and
//! reconciles as soon as it has loaded: the host serves its first plugins
//! while the rest still compile.
//!
//! A plugin that does not load is *pending*: `/plugins` shows it `failed`
//! with the reason, `/readyz` names it, and the other plugins run. It is
//! tried again when its source changes, when the config file changes, or on
//! `POST /plugins/{name}/reload`. Until every plugin has loaded, `/readyz`
//! answers 503 naming those still `loading`; `/readyz/plugin/{name}`
//! answers for one plugin.

use std::sync::Arc;

use futures::StreamExt;
use tokio::task::JoinHandle;

use super::status::PluginStatus;
use super::{Host, ManagerError};
use crate::config::PluginConfig;

/// A config plugin that is not running: still loading at start, or
/// refused (until a change of its source or config, or a reload, loads it).
pub(super) struct PendingPlugin {
    config: PluginConfig,
    /// Where its component comes from, as `/plugins` shows it.
    origin: String,
    /// Why it did not load (None: still loading).
    error: Option<String>,
    /// Retries the load when the source reports a change.
    follower: Option<JoinHandle<()>>,
}

impl PendingPlugin {
    /// `loading`, or `failed` once a load refused it (`/plugins`' state).
    fn state(&self) -> &'static str {
        if self.error.is_some() {
            "failed"
        } else {
            "loading"
        }
    }
}

impl Drop for PendingPlugin {
    fn drop(&mut self) {
        if let Some(f) = &self.follower {
            f.abort();
        }
    }
}

/// A config plugin the host could not load at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadFailure {
    pub plugin: String,
    /// The load's error, as `/plugins` shows it in `last_error`.
    pub error: String,
}

/// How many plugins load at once: one per CPU (compiling is CPU-bound),
/// and never so many that a start floods the API server's discovery.
fn load_parallelism() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().min(8))
}

impl Host {
    /// Loads every plugin of the config in the background (see the module
    /// doc); `loaded` turns true once each has loaded or failed.
    pub(super) fn load_config_plugins(self: &Arc<Self>) -> JoinHandle<()> {
        {
            let mut pending = self.pending.lock().unwrap();
            for plugin in &self.config.plugins {
                pending.insert(
                    plugin.name.clone(),
                    PendingPlugin {
                        origin: self.source_for(plugin).origin(),
                        config: plugin.clone(),
                        error: None,
                        follower: None,
                    },
                );
            }
        }
        let host = self.clone();
        tokio::spawn(async move {
            let plugins = host.config.plugins.clone();
            let loading =
                futures::stream::iter(plugins).for_each_concurrent(load_parallelism(), |plugin| {
                    let host = host.clone();
                    async move {
                        host.check_rbac(&plugin).await;
                        let _ = host.start_config_plugin(plugin).await;
                    }
                });
            tokio::select! {
                () = loading => {}
                () = host.stop.cancelled() => return,
            }
            host.loaded.send_replace(true);
            tracing::info!("every plugin of the config has been loaded or refused");
        })
    }

    /// Loads a plugin of the config and starts it; a failure leaves it
    /// pending with the reason (logged), the other plugins untouched.
    pub(super) async fn start_config_plugin(
        self: &Arc<Self>,
        config: PluginConfig,
    ) -> Result<(), ManagerError> {
        let name = config.name.clone();
        // A fix written while the load fails is a change the retry sees.
        let source = self.source_for(&config);
        let changes = source.changes();
        let result = match self.build(config.clone(), 1, None).await {
            Ok(entry) => self.insert_and_start(&name, entry),
            Err(e) => Err(e),
        };
        match &result {
            Ok(()) => {
                self.pending.lock().unwrap().remove(&name);
                tracing::info!(plugin = %name, "plugin loaded");
            }
            Err(e) => {
                let error = e.to_string();
                tracing::error!(plugin = %name, "plugin not loaded, the others run: {error}");
                let follower = self.retry_on_change(&config, changes);
                self.pending.lock().unwrap().insert(
                    name.clone(),
                    PendingPlugin {
                        origin: source.origin(),
                        config,
                        error: Some(error),
                        follower: Some(follower),
                    },
                );
            }
        }
        self.plugin_changed(&name);
        result
    }

    /// Adds a built plugin under `name` and starts it (its informers sync
    /// and its workers start once the manager runs). A name already taken
    /// is refused.
    pub(super) fn insert_and_start(
        self: &Arc<Self>,
        name: &str,
        entry: super::lifecycle::PluginEntry,
    ) -> Result<(), ManagerError> {
        match self.plugins.lock().unwrap().entry(name.to_string()) {
            std::collections::btree_map::Entry::Vacant(v) => {
                self.follow_source(name, v.insert(entry));
            }
            std::collections::btree_map::Entry::Occupied(_) => {
                return Err(ManagerError::NameTaken {
                    plugin: name.to_string(),
                });
            }
        }
        let host = self.clone();
        let name = name.to_string();
        let mut running = self.running.subscribe();
        tokio::spawn(async move {
            tokio::select! {
                r = running.wait_for(|r| *r) => if r.is_err() { return },
                () = host.stop.cancelled() => return,
            }
            host.sync_and_start(&name).await;
        });
        Ok(())
    }

    /// Tries a refused plugin again when its source reports a change (a
    /// rebuilt file, a new tag), as long as it is still pending with this
    /// config.
    fn retry_on_change(
        self: &Arc<Self>,
        config: &PluginConfig,
        mut changes: futures::stream::BoxStream<'static, ()>,
    ) -> JoinHandle<()> {
        let host = Arc::downgrade(self);
        let config = config.clone();
        tokio::spawn(async move {
            while changes.next().await.is_some() {
                let Some(host) = host.upgrade() else {
                    return;
                };
                let still_pending = host
                    .pending
                    .lock()
                    .unwrap()
                    .get(&config.name)
                    .is_some_and(|p| p.error.is_some() && p.config == config);
                if !still_pending {
                    return;
                }
                tracing::info!(plugin = %config.name, "source of a plugin that did not load changed: loading it again");
                // A retry that fails installs a new follower, which aborts this one.
                let _ = host.start_config_plugin(config.clone()).await;
            }
        })
    }

    /// The config of pending plugin `name`, if it did not load (not while
    /// still loading).
    pub(super) fn refused_config(&self, name: &str) -> Option<PluginConfig> {
        let pending = self.pending.lock().unwrap();
        pending
            .get(name)
            .filter(|p| p.error.is_some())
            .map(|p| p.config.clone())
    }

    /// Forgets pending plugins the config no longer has.
    pub(super) fn forget_pending_except(&self, keep: &[String]) {
        self.pending
            .lock()
            .unwrap()
            .retain(|name, _| keep.contains(name));
    }

    /// Whether `name` is a pending plugin (loading, or refused).
    pub(super) fn is_pending(&self, name: &str) -> bool {
        self.pending.lock().unwrap().contains_key(name)
    }

    /// The plugins that did not load, in config order.
    pub(super) fn load_failures(&self) -> Vec<LoadFailure> {
        let pending = self.pending.lock().unwrap();
        self.config
            .plugins
            .iter()
            .filter_map(|p| {
                let error = pending.get(&p.name)?.error.clone()?;
                Some(LoadFailure {
                    plugin: p.name.clone(),
                    error,
                })
            })
            .collect()
    }

    /// The pending plugins as `/plugins` shows them: `loading`, or
    /// `failed` with the reason in `last_error`.
    pub(super) fn pending_statuses(&self) -> Vec<PluginStatus> {
        let denied = self.rbac_denied.lock().unwrap();
        let pending = self.pending.lock().unwrap();
        pending
            .iter()
            .map(|(name, p)| PluginStatus {
                rbac_denied: denied.get(name).cloned().unwrap_or_default(),
                ..PluginStatus::pending(name, &p.origin, p.state(), p.error.as_deref())
            })
            .collect()
    }

    /// The state of each pending plugin.
    pub(super) fn pending_states(&self) -> Vec<&'static str> {
        let pending = self.pending.lock().unwrap();
        pending.values().map(PendingPlugin::state).collect()
    }

    /// Why each pending plugin is not ready, by name.
    pub(super) fn pending_readiness(&self) -> Vec<(String, Result<(), String>)> {
        let pending = self.pending.lock().unwrap();
        pending
            .iter()
            .map(|(name, p)| {
                let why = match &p.error {
                    None => "loading".to_string(),
                    Some(e) => format!("not loaded: {e}"),
                };
                (name.clone(), Err(why))
            })
            .collect()
    }
}
