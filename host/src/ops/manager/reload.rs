//! Every way a running host changes: a plugin's source changed, the admin
//! API or SIGHUP asked for a reload, or the config file changed.
//!
//! # A failed reload changes nothing
//! A new version is fetched, compiled, type-checked, asked for its metadata
//! and checked against the grant off the hot path; only then is it swapped
//! in. Anything that fails on the way is logged, counted
//! (`wasmctrl_plugin_reloads_total{result="error"}`) and shown in
//! `/plugins`, and the running version keeps running. A config that does
//! not parse or validate is refused whole
//! (`wasmctrl_config_reloads_total{result="error"}`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;

use super::status::PluginStatus;
use super::wiring::{enqueue_all, rate_limiter};
use super::{Host, ManagerError};
use crate::config::{HostConfig, PluginConfig};
use crate::control::metrics::{ResultLabel, Version};
use crate::ops::source::FileWatcher;

/// Why a reload did not swap.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("no plugin named {0:?}")]
    Unknown(String),
    #[error("plugin {0:?} is being removed")]
    Removing(String),
    /// The plugin was rebuilt (its settings or source changed) while this
    /// reload loaded its component: the rebuilt entry runs what its own
    /// config names, and the code loaded under the old config, with its
    /// grant, is not swapped into it.
    #[error(
        "plugin {0:?} was rebuilt with changed settings while it reloaded; the rebuilt version runs"
    )]
    Superseded(String),
    #[error(transparent)]
    Failed(#[from] ManagerError),
}

impl Host {
    /// The source reported a change: reloads if the content differs from
    /// the running version (a touch without change is no swap).
    pub(super) async fn reload_plugin_if_changed(&self, name: &str) {
        let Some(source) = self
            .plugins
            .lock()
            .unwrap()
            .get(name)
            .map(|e| e.source().clone())
        else {
            return;
        };
        let running = self
            .plugins
            .lock()
            .unwrap()
            .get(name)
            .map(|e| e.slot().current());
        // Only the digest outlives the fetch, whose bytes its budget
        // counted while they were held.
        let digest = async { source.fetch().await.map(|a| a.digest) };
        match self.load_within_budget(name, digest).await {
            Ok(d) if running.is_some_and(|p| p.digest() == d) => {}
            Ok(_) => {
                tracing::info!(plugin = name, origin = %source.origin(), "plugin source changed: reloading");
                let _ = self.reload_plugin(name).await;
            }
            // A half-written file: the next change event tries again.
            Err(e) => tracing::debug!(plugin = name, "source changed but cannot be read yet: {e}"),
        }
    }

    /// Hot swap: loads the plugin's source again, validates it (world,
    /// metadata, permissions, watched kinds) off the hot path, and only then
    /// swaps the controller's plugin atomically. In-flight reconciles finish
    /// on the old version; the queue, its delays and backoff counters are
    /// kept; watches are re-pointed if the metadata changed; every key of
    /// the plugin is enqueued once.
    pub(super) async fn reload_plugin(&self, name: &str) -> Result<PluginStatus, ReloadError> {
        let (config, source, old_meta) = {
            let plugins = self.plugins.lock().unwrap();
            let entry = plugins
                .get(name)
                .ok_or_else(|| ReloadError::Unknown(name.to_string()))?;
            (
                entry.config().clone(),
                entry.source().clone(),
                entry.slot().current().metadata().clone(),
            )
        };
        let fail = |e: ManagerError| {
            self.count_reload(name, "error");
            let message = e.to_string();
            tracing::error!(
                plugin = name,
                "reload failed, the old version keeps running: {message}"
            );
            if let Some(entry) = self.plugins.lock().unwrap().get_mut(name) {
                entry.record_error(message);
            }
            self.plugin_changed(name);
            ReloadError::Failed(e)
        };
        let api = self.plugin_api(&config);
        let plugin = self
            .load(&config, &*source, api.clone(), Version::Stable, false)
            .await
            .map_err(fail)?;
        let new_meta = plugin.metadata().clone();
        let watches_changed = new_meta.for_ != old_meta.for_
            || new_meta.owns != old_meta.owns
            || new_meta.watches != old_meta.watches;
        let watches = if watches_changed {
            Some(
                self.resolve_watches(&config, &plugin, api.grant(), &source.origin())
                    .await
                    .map_err(fail)?,
            )
        } else {
            None
        };
        let (resync, previous) = {
            let mut plugins = self.plugins.lock().unwrap();
            let entry = plugins
                .get_mut(name)
                .ok_or_else(|| ReloadError::Unknown(name.to_string()))?;
            if !Arc::ptr_eq(entry.source(), &source) {
                tracing::info!(
                    plugin = name,
                    "a reload was superseded by a rebuild; the rebuilt version runs"
                );
                return Err(ReloadError::Superseded(name.to_string()));
            }
            let feeds =
                watches.map(|w| self.feeds(&config, entry.controller(), &new_meta.for_, &w));
            let previous = entry
                .swap(plugin.clone(), feeds)
                .map_err(|_| ReloadError::Removing(name.to_string()))?;
            (enqueue_all(entry), previous)
        };
        resync.await;
        let status = {
            let plugins = self.plugins.lock().unwrap();
            let entry = plugins
                .get(name)
                .ok_or_else(|| ReloadError::Removing(name.to_string()))?;
            self.status_of(name, entry)
        };
        tracing::info!(
            plugin = name,
            from = previous.digest(),
            to = plugin.digest(),
            version = %new_meta.version,
            generation = status.generation,
            watches_changed,
            "plugin swapped"
        );
        self.count_reload(name, "success");
        self.plugin_changed(name);
        Ok(status)
    }

    /// SIGHUP: the config file again if known, else every plugin's source.
    pub(super) async fn reload_everything(self: &Arc<Self>, config_path: Option<&Path>) {
        match config_path {
            Some(path) => self.reload_config(path).await,
            None => {
                let names: Vec<String> = self.plugins.lock().unwrap().keys().cloned().collect();
                for name in names {
                    let _ = self.reload_plugin(&name).await;
                }
            }
        }
    }

    /// Applies a changed config file: added plugins start, removed ones are
    /// drained and stopped, changed ones are rebuilt on the same queue (keys,
    /// delays and backoff are kept). A config that does not parse or
    /// validate changes nothing. Settings outside `plugins` take effect at
    /// the next start. Plugins of WasmReconciler objects are not the
    /// config's: a config plugin whose name one holds is refused.
    pub(super) async fn reload_config(self: &Arc<Self>, path: &Path) {
        let new = match HostConfig::load(path) {
            Ok(c) => c,
            Err(e) => {
                self.count_config_reload("error");
                tracing::error!("config reload refused, the running config stays: {e}");
                return;
            }
        };
        self.count_config_reload("success");
        // A change during start applies to what the start loaded.
        let _ = self.loaded.subscribe().wait_for(|done| *done).await;
        let current: BTreeMap<String, PluginConfig> = self
            .plugins
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _)| !self.owned_by_object(n))
            .map(|(n, e)| (n.clone(), e.config().clone()))
            .collect();
        for name in current.keys() {
            if !new.plugins.iter().any(|p| &p.name == name) {
                self.remove_plugin(name).await;
            }
        }
        let names: Vec<String> = new.plugins.iter().map(|p| p.name.clone()).collect();
        self.forget_pending_except(&names);
        for plugin in new.plugins {
            let name = plugin.name.clone();
            // Errors are logged where they happen; a plugin that did not
            // load is tried again, changed or not.
            let _ = match current.get(&name) {
                None if !self.owned_by_object(&name) => self.start_config_plugin(plugin).await,
                None => self.add_plugin(plugin).await,
                Some(old) if *old != plugin => self.rebuild_plugin(old, plugin).await,
                Some(_) => Ok(()),
            };
        }
        // A name an object could not have may be free now.
        self.resync_objects();
    }

    /// Starts a new plugin (from the config or an object); its informers
    /// sync and its workers start in the background. A name already taken
    /// is refused.
    pub(super) async fn add_plugin(
        self: &Arc<Self>,
        plugin: PluginConfig,
    ) -> Result<(), ManagerError> {
        let name = plugin.name.clone();
        let taken = || ManagerError::NameTaken {
            plugin: name.clone(),
        };
        if self.plugins.lock().unwrap().contains_key(&name) {
            tracing::error!(plugin = %name, "cannot start the added plugin: {}", taken());
            return Err(taken());
        }
        tracing::info!(plugin = %name, "plugin added: starting");
        let entry = self.build(plugin, 1, None).await.inspect_err(|e| {
            tracing::error!(plugin = %name, "cannot start the added plugin: {e}");
        })?;
        self.insert_and_start(&name, entry)
    }

    /// Drains and stops a plugin (removed from the config, or its object
    /// deleted).
    pub(super) async fn remove_plugin(&self, name: &str) {
        let entry = self.plugins.lock().unwrap().remove(name);
        if let Some(mut entry) = entry {
            tracing::info!(plugin = %name, "plugin removed: draining");
            let _ = entry.drain(self.config.shutdown_timeout).await;
            // Names come and go with objects; series of gone names would
            // pile up in memory and in every scrape.
            self.metrics.forget_plugin(name);
        }
        self.plugin_changed(name);
    }

    /// Changed settings: a new controller on the same queue takes over. A
    /// refused change leaves the old one running (Err says why).
    pub(super) async fn rebuild_plugin(
        self: &Arc<Self>,
        old: &PluginConfig,
        plugin: PluginConfig,
    ) -> Result<(), ManagerError> {
        let name = plugin.name.clone();
        tracing::info!(plugin = %name, "plugin settings changed: rebuilding on the same queue");
        let Some(queue) = self
            .plugins
            .lock()
            .unwrap()
            .get(&name)
            .map(|e| e.controller().queue().clone())
        else {
            return Ok(());
        };
        if old.rate_limiter != plugin.rate_limiter {
            queue.set_rate_limiter(Box::new(rate_limiter(&plugin.rate_limiter)));
        }
        let next = match self.build(plugin, 1, Some(queue)).await {
            Ok(next) => next,
            Err(e) => {
                tracing::error!(plugin = %name, "changed plugin refused, the old one keeps running: {e}");
                if let Some(entry) = self.plugins.lock().unwrap().get_mut(&name) {
                    entry.record_error(e.to_string());
                }
                return Err(e);
            }
        };
        let (old_workers, synced) = {
            let mut plugins = self.plugins.lock().unwrap();
            let Some(mut current) = plugins.remove(&name) else {
                return Ok(());
            };
            let (mut next, workers) = current.succeed(next);
            let synced = next.lifecycle().synced();
            self.follow_source(&name, &mut next);
            plugins.insert(name.clone(), next);
            (workers, synced)
        };
        // The new entry is in: the handover runs in a task of its own, so
        // that it finishes even when this one is aborted (a newer edit of
        // an object supersedes its rebuild) and every key is reconciled
        // with the new settings.
        if !synced {
            let host = self.clone();
            let name = name.clone();
            tokio::spawn(async move { host.sync_and_start(&name).await });
        }
        let host = self.clone();
        let handover = tokio::spawn(async move {
            if let Some(w) = old_workers {
                tokio::select! {
                    _ = w.detach(host.config.shutdown_timeout) => {}
                    // Dropping the detach cancels what the old workers still
                    // run: the host is stopping (or lost its leadership).
                    () = host.stopping.cancelled() => {}
                }
            }
            if synced {
                let resync = host.plugins.lock().unwrap().get(&name).map(enqueue_all);
                if let Some(resync) = resync {
                    resync.await;
                }
            }
        });
        if let Err(e) = handover.await
            && e.is_panic()
        {
            std::panic::resume_unwind(e.into_panic());
        }
        Ok(())
    }

    fn count_config_reload(&self, result: &str) {
        self.metrics
            .config_reloads
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .inc();
    }
}

/// Reloads on SIGHUP (the config file again if known, else every
/// plugin's source) and whenever the config file changes, one reload at a
/// time, in a task of its own: the manager's loop goes on answering
/// shutdown and lost leadership while a reload waits for a slow source or
/// drains a removed plugin.
pub(super) fn reload_on_changes(
    host: Arc<Host>,
    watcher: Option<&FileWatcher>,
    path: Option<PathBuf>,
) -> tokio::task::JoinHandle<()> {
    let mut changes = match (watcher, &path) {
        (Some(w), Some(path)) => w.subscribe(path),
        _ => futures::stream::pending().boxed(),
    };
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    if hangup.is_some() {
        tracing::debug!(config = ?path, "SIGHUP reloads the host");
    }
    tokio::spawn(async move {
        loop {
            tokio::select! {
                Some(()) = changes.next() => {
                    if let Some(path) = &path {
                        tracing::info!("config file changed: reloading");
                        host.reload_config(path).await;
                    }
                }
                Some(()) = async {
                    match hangup.as_mut() {
                        Some(h) => h.recv().await,
                        None => std::future::pending().await,
                    }
                } => {
                    tracing::info!("SIGHUP: reloading");
                    host.reload_everything(path.as_deref()).await;
                }
                else => break,
            }
        }
    })
}
