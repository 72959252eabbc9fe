//! The manager: builds a controller per plugin from the host config, feeds
//! it from the shared cache, runs workers (only while leader, with leader
//! election on), serves the admin endpoints, and shuts down gracefully.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use futures::future::BoxFuture;
use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admin::{self, AdminState};
use crate::cache::{Informer, InformerKey, Notification, SharedCache};
use crate::config::{HostConfig, PluginConfig};
use crate::controller::watches::{KeyMapping, keys};
use crate::controller::{Controller, ControllerOptions, TerminalErrors, Workers};
use crate::discovery::{self, Resolver};
use crate::hostapi::{ClusterApi, Grant, Gvk};
use crate::leader::LeaderElection;
use crate::metrics::{Metrics, ReloadLabels};
use crate::ratelimit::controller_rate_limiter;
use crate::runtime::{Limits, LoadError, Plugin, PluginSpec, Runtime, RuntimeConfig, RuntimeError};
use crate::workqueue::WorkQueue;
use crate::{Action, ObjectKey, Reconcile, ReconcileError, ReconcileRequest};

/// Why the manager could not start a plugin or itself.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(
        "plugin {plugin:?} ({path}): its metadata asks for permissions the config does not grant: {missing}"
    )]
    PermissionsExceedGrant {
        plugin: String,
        path: PathBuf,
        missing: String,
    },
    #[error("plugin {plugin:?}: {source}")]
    Kind {
        plugin: String,
        source: discovery::ResolveError,
    },
    #[error(transparent)]
    Admin(#[from] admin::AdminError),
    #[error("leader election lost")]
    LeadershipLost,
}

/// Per-process settings that are not in the config file.
#[derive(Debug, Clone)]
pub struct ManagerOptions {
    /// This host's identity for leader election.
    pub identity: String,
    /// Overrides the config's admin address (tests bind port 0).
    pub admin_bind: Option<SocketAddr>,
    /// The config file: when set, its changes (and SIGHUP) reload it.
    pub config_path: Option<PathBuf>,
    /// Reload a plugin when its component file changes on disk.
    pub watch_files: bool,
}

impl Default for ManagerOptions {
    fn default() -> Self {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "wasmctrl".into());
        Self {
            identity: format!("{host}-{}", std::process::id()),
            admin_bind: None,
            config_path: None,
            watch_files: true,
        }
    }
}

/// The reconciler a controller calls: the plugin's current version,
/// swapped atomically on reload (in-flight reconciles keep the version they
/// started with).
pub struct PluginSlot {
    current: ArcSwap<Plugin>,
}

impl PluginSlot {
    pub fn current(&self) -> Arc<Plugin> {
        self.current.load_full()
    }
}

impl Reconcile for PluginSlot {
    async fn reconcile(&self, request: ReconcileRequest) -> Result<Action, ReconcileError> {
        let plugin = self.current.load_full();
        plugin.reconcile(request).await
    }
}

/// Terminal errors become Warning events on the object.
struct EventTerminalErrors {
    api: Arc<ClusterApi>,
    kind: Gvk,
}

impl TerminalErrors for EventTerminalErrors {
    fn record(&self, controller: &str, key: &ObjectKey, error: &ReconcileError) {
        tracing::error!(controller, %key, %error, "terminal reconcile error");
        let (api, kind, key, message) = (
            self.api.clone(),
            self.kind.clone(),
            key.clone(),
            error.to_string(),
        );
        tokio::spawn(async move { api.record_terminal_error(&kind, &key, &message).await });
    }
}

type PluginController = Controller<Arc<PluginSlot>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Starting,
    Running,
    Standby,
    Draining,
    Failed,
}

impl State {
    fn as_str(self) -> &'static str {
        match self {
            State::Starting => "starting",
            State::Running => "running",
            State::Standby => "standby",
            State::Draining => "draining",
            State::Failed => "failed",
        }
    }
}

struct Entry {
    config: PluginConfig,
    slot: Arc<PluginSlot>,
    controller: PluginController,
    informers: Vec<Arc<Informer>>,
    tasks: Vec<JoinHandle<()>>,
    workers: Option<Workers<Arc<PluginSlot>>>,
    state: State,
    synced: bool,
    loaded_at: SystemTime,
    generation: u64,
    last_error: Option<String>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

struct Shared {
    config: HostConfig,
    client: Client,
    runtime: Runtime,
    metrics: Arc<Metrics>,
    cache: Arc<SharedCache>,
    resolver: Arc<Resolver>,
    plugins: Mutex<BTreeMap<String, Entry>>,
    leader: watch::Receiver<bool>,
    stop: CancellationToken,
}

/// A running host.
pub struct Manager {
    shared: Arc<Shared>,
    admin_addr: SocketAddr,
    leader_tx: Option<watch::Sender<bool>>,
    options: ManagerOptions,
}

impl Manager {
    /// Loads every plugin of `config` (any failure is an error: at start-up
    /// a bad plugin stops the host), starts their informers and the admin
    /// server. Workers start in [`Manager::run`].
    pub async fn start(
        config: HostConfig,
        client: Client,
        options: ManagerOptions,
    ) -> Result<Self, ManagerError> {
        let metrics = Arc::new(Metrics::new());
        let max_memory = config
            .plugins
            .iter()
            .map(|p| p.memory_limit as usize)
            .max()
            .unwrap_or(64 << 20)
            .max(64 << 20);
        let concurrency: usize = config
            .plugins
            .iter()
            .map(|p| p.max_concurrent_reconciles)
            .sum();
        let runtime = Runtime::new(
            RuntimeConfig {
                fuel: config.plugins.iter().any(|p| p.fuel.is_some()),
                // Room for every worker, load-time metadata calls and swaps.
                max_instances: (concurrency as u32 * 2 + 16).max(64),
                max_memory,
                cache_dir: config
                    .runtime
                    .cache_dir
                    .as_ref()
                    .map(|d| config.base_dir.join(d)),
                ..RuntimeConfig::default()
            },
            metrics.clone(),
        )?;
        let (leader_tx, leader) = watch::channel(!config.leader_election.enabled);
        let shared = Arc::new(Shared {
            cache: Arc::new(SharedCache::new(client.clone())),
            resolver: Arc::new(Resolver::new(client.clone())),
            client,
            runtime,
            metrics,
            plugins: Mutex::new(BTreeMap::new()),
            leader,
            stop: CancellationToken::new(),
            config,
        });
        for plugin in shared.config.plugins.clone() {
            let entry = shared.build(plugin, 1, None).await?;
            shared
                .plugins
                .lock()
                .unwrap()
                .insert(entry.config.name.clone(), entry);
        }
        let bind = options.admin_bind.unwrap_or(shared.config.admin.bind);
        let admin_addr = admin::serve(bind, shared.clone(), shared.stop.clone()).await?;
        tracing::info!(admin = %admin_addr, plugins = shared.config.plugins.len(), "wasmctrl started");
        Ok(Self {
            shared,
            admin_addr,
            leader_tx: Some(leader_tx),
            options,
        })
    }

    /// Where the admin endpoints are served.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.shared.metrics
    }

    /// The queue of plugin `name` (for inspection).
    pub fn queue(&self, name: &str) -> Option<WorkQueue<ObjectKey>> {
        let plugins = self.shared.plugins.lock().unwrap();
        plugins.get(name).map(|e| e.controller.queue().clone())
    }

    /// Runs until `shutdown` resolves (or leadership is lost), then stops
    /// watches, drains every queue for up to `shutdownTimeout` and cancels
    /// what still runs.
    pub async fn run(
        mut self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), ManagerError> {
        let shared = self.shared.clone();
        let election_stop = CancellationToken::new();
        let election = if shared.config.leader_election.enabled {
            let le = &shared.config.leader_election;
            let election = LeaderElection {
                namespace: le.namespace.clone(),
                lease_name: le.lease_name.clone(),
                identity: self.options.identity.clone(),
                lease_duration: le.lease_duration,
                retry_period: le.retry_period,
            };
            let tx = self.leader_tx.take().expect("run is called once");
            Some(tokio::spawn(election.run(
                shared.client.clone(),
                tx,
                election_stop.clone(),
            )))
        } else {
            None
        };

        let names: Vec<String> = shared.plugins.lock().unwrap().keys().cloned().collect();
        for name in &names {
            let shared = shared.clone();
            let name = name.clone();
            tokio::spawn(async move { shared.sync_and_enqueue(&name).await });
        }

        let watcher = self
            .options
            .watch_files
            .then(|| spawn_file_watcher(shared.clone(), self.options.config_path.clone()));
        let mut hangup =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        let mut leader = shared.leader.clone();
        let mut was_leader = false;
        tokio::pin!(shutdown);
        let outcome = loop {
            let is_leader = *leader.borrow_and_update();
            if is_leader && !was_leader {
                shared.start_all_workers();
            } else if !is_leader && was_leader {
                break Err(ManagerError::LeadershipLost);
            } else if !is_leader {
                shared.set_all_states(State::Standby);
            }
            was_leader = is_leader;
            tokio::select! {
                _ = &mut shutdown => break Ok(()),
                changed = leader.changed() => if changed.is_err() { break Ok(()) },
                Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => {
                    tracing::info!("SIGHUP: reloading");
                    shared.reload_everything(self.options.config_path.as_deref()).await;
                }
            }
        };
        if let Some(w) = watcher {
            w.abort();
        }
        tracing::info!("shutting down: draining queues");
        shared.shutdown().await;
        election_stop.cancel();
        if let Some(e) = election {
            let _ = e.await;
        }
        shared.stop.cancel();
        tracing::info!("shutdown complete");
        outcome
    }
}

impl Shared {
    /// Loads a plugin and wires its controller (informers subscribed, no
    /// workers yet).
    async fn build(
        &self,
        config: PluginConfig,
        generation: u64,
        queue: Option<WorkQueue<ObjectKey>>,
    ) -> Result<Entry, ManagerError> {
        let api = self.plugin_api(&config);
        let plugin = self.load(&config, api.clone()).await.inspect_err(|_| {
            self.count_reload(&config.name, "error");
        })?;
        self.count_reload(&config.name, "success");
        let (watches, resources) = self.resolve_watches(&config, &plugin).await?;

        let rl = &config.rate_limiter;
        let queue = queue.unwrap_or_else(|| {
            let limiter = rate_limiter(rl);
            WorkQueue::new(
                config.name.clone(),
                Box::new(limiter),
                self.metrics.queue(&config.name),
            )
        });
        let for_kind = plugin.metadata().for_.clone();
        let slot = Arc::new(PluginSlot {
            current: ArcSwap::new(plugin),
        });
        let controller = Controller::new(
            ControllerOptions {
                name: config.name.clone(),
                max_concurrent_reconciles: config.max_concurrent_reconciles,
                reconcile_timeout: config.reconcile_timeout,
                max_retries: config.max_retries,
            },
            queue,
            slot.clone(),
            self.metrics.clone(),
            Arc::new(EventTerminalErrors {
                api: api.clone(),
                kind: for_kind.clone(),
            }),
        );
        let mut entry = Entry {
            config,
            slot,
            controller,
            informers: Vec::new(),
            tasks: Vec::new(),
            workers: None,
            state: State::Starting,
            synced: false,
            loaded_at: SystemTime::now(),
            generation,
            last_error: None,
        };
        self.watch(&mut entry, &for_kind, watches, resources);
        Ok(entry)
    }

    /// The `kube` imports of one plugin, held to its grant.
    fn plugin_api(&self, config: &PluginConfig) -> Arc<ClusterApi> {
        Arc::new(ClusterApi::new(
            &config.name,
            self.client.clone(),
            self.resolver.clone(),
            self.cache.clone(),
            Grant::new(config.permissions.clone(), config.namespaces.clone()),
            self.metrics.clone(),
        ))
    }

    async fn load(
        &self,
        config: &PluginConfig,
        api: Arc<ClusterApi>,
    ) -> Result<Arc<Plugin>, ManagerError> {
        let path = config.resolved_path(&self.config.base_dir);
        let plugin = self
            .runtime
            .load(PluginSpec {
                name: config.name.clone(),
                path: path.clone(),
                limits: Limits {
                    memory_bytes: config.memory_limit as usize,
                    fuel: config.fuel,
                    ..Limits::default()
                },
                settings: config.settings.clone(),
                kube: api.clone(),
            })
            .await?;
        let grant = api.grant();
        let missing: Vec<String> = plugin
            .metadata()
            .permissions
            .iter()
            .flat_map(|p| {
                p.resources.iter().flat_map(move |r| {
                    p.verbs
                        .iter()
                        .map(move |v| (p.group.clone(), r.clone(), v.clone()))
                })
            })
            .filter(|(g, r, v)| !grant.covers(v, g, r))
            .map(|(g, r, v)| format!("{v} {}/{r}", if g.is_empty() { "core" } else { &g }))
            .collect();
        if !missing.is_empty() {
            return Err(ManagerError::PermissionsExceedGrant {
                plugin: config.name.clone(),
                path,
                missing: missing.join(", "),
            });
        }
        Ok(plugin)
    }

    /// The kinds the plugin watches, resolved through discovery.
    async fn resolve_watches(
        &self,
        config: &PluginConfig,
        plugin: &Plugin,
    ) -> Result<(Vec<(Gvk, KeyMapping)>, Vec<kube::api::ApiResource>), ManagerError> {
        let m = plugin.metadata();
        let mut watches = vec![(m.for_.clone(), KeyMapping::Itself)];
        watches.extend(
            m.owns
                .iter()
                .map(|g| (g.clone(), KeyMapping::ControllerOwner)),
        );
        watches.extend(m.watches.iter().map(|w| {
            use crate::runtime::bindings::wasmctrl::reconciler::types::WatchMapping;
            let mapping = match &w.mapping {
                WatchMapping::Owner => KeyMapping::Owner,
                WatchMapping::SameName => KeyMapping::SameName,
                WatchMapping::Label(l) => KeyMapping::Label(l.clone()),
            };
            (w.kind.clone(), mapping)
        }));
        let mut resources = Vec::new();
        for (gvk, _) in &watches {
            let resolved =
                self.resolver
                    .resolve(gvk)
                    .await
                    .map_err(|source| ManagerError::Kind {
                        plugin: config.name.clone(),
                        source,
                    })?;
            resources.push(resolved.resource);
        }
        Ok((watches, resources))
    }

    /// Starts (or shares) the informers and the tasks turning their events
    /// into keys.
    fn watch(
        &self,
        entry: &mut Entry,
        for_kind: &Gvk,
        watches: Vec<(Gvk, KeyMapping)>,
        resources: Vec<kube::api::ApiResource>,
    ) {
        let scopes: Vec<Option<String>> = match &entry.config.namespaces {
            Some(list) => list.iter().cloned().map(Some).collect(),
            None => vec![None],
        };
        for ((gvk, mapping), resource) in watches.into_iter().zip(resources) {
            for ns in &scopes {
                let key = InformerKey {
                    group: gvk.group.clone(),
                    version: gvk.version.clone(),
                    kind: gvk.kind.clone(),
                    namespace: ns.clone(),
                };
                let informer = self.cache.informer(key, resource.clone());
                let mut subscription = informer.subscribe();
                let queue = entry.controller.queue().clone();
                let weak = Arc::downgrade(&informer);
                let reconciled = for_kind.clone();
                let mapping2 = mapping.clone();
                entry.tasks.push(tokio::spawn(async move {
                    while let Some(n) = subscription.next().await {
                        match n {
                            Notification::Object(e) => {
                                for k in keys(&mapping2, &reconciled, &e.object) {
                                    queue.add(k);
                                }
                            }
                            Notification::Resync => {
                                let Some(informer) = weak.upgrade() else {
                                    break;
                                };
                                enqueue_store(&queue, &informer, &mapping2, &reconciled);
                            }
                        }
                    }
                }));
                if mapping == KeyMapping::Itself
                    && let Some(period) = entry.config.resync_period
                {
                    let queue = entry.controller.queue().clone();
                    let weak = Arc::downgrade(&informer);
                    let for_kind = for_kind.clone();
                    entry.tasks.push(tokio::spawn(async move {
                        let mut tick = tokio::time::interval(period);
                        tick.tick().await;
                        loop {
                            tick.tick().await;
                            let Some(informer) = weak.upgrade() else {
                                break;
                            };
                            enqueue_store(&queue, &informer, &KeyMapping::Itself, &for_kind);
                        }
                    }));
                }
                entry.informers.push(informer);
            }
        }
    }

    /// Waits for a plugin's informers (bounded by `cacheSyncTimeout`), then
    /// enqueues every key they imply, and starts workers if leading.
    async fn sync_and_enqueue(&self, name: &str) {
        let informers: Vec<Arc<Informer>> = match self.plugins.lock().unwrap().get(name) {
            Some(e) => e.informers.clone(),
            None => return,
        };
        let synced = tokio::time::timeout(self.config.cache_sync_timeout, async {
            for i in &informers {
                i.wait_synced().await;
            }
        })
        .await
        .is_ok();
        let mut plugins = self.plugins.lock().unwrap();
        let Some(entry) = plugins.get_mut(name) else {
            return;
        };
        if !synced {
            let message = format!(
                "informers did not sync within {:?}: {}",
                self.config.cache_sync_timeout,
                informers
                    .iter()
                    .filter(|i| !i.is_synced())
                    .map(|i| format!("{}/{} {}", i.key.group, i.key.version, i.key.kind))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            tracing::error!(plugin = name, "{message}");
            entry.last_error = Some(message);
            entry.state = State::Failed;
            return;
        }
        entry.synced = true;
        enqueue_all(entry);
        if *self.leader.borrow() {
            start_workers(entry);
        }
    }

    fn start_all_workers(&self) {
        for entry in self.plugins.lock().unwrap().values_mut() {
            if entry.synced {
                start_workers(entry);
            }
        }
    }

    fn set_all_states(&self, state: State) {
        for entry in self.plugins.lock().unwrap().values_mut() {
            if entry.state != State::Failed {
                entry.state = state;
            }
        }
    }

    async fn shutdown(&self) {
        let timeout = self.config.shutdown_timeout;
        let mut draining = Vec::new();
        for entry in self.plugins.lock().unwrap().values_mut() {
            for t in entry.tasks.drain(..) {
                t.abort();
            }
            entry.state = State::Draining;
            let queue = entry.controller.queue().clone();
            match entry.workers.take() {
                Some(w) => draining.push(w.shutdown(timeout)),
                None => queue.shut_down(),
            }
        }
        futures::future::join_all(draining).await;
    }

    fn count_reload(&self, plugin: &str, result: &str) {
        self.metrics
            .plugin_reloads
            .get_or_create(&ReloadLabels {
                plugin: plugin.into(),
                result: result.into(),
            })
            .inc();
    }
}

/// Why a reload did not swap.
#[derive(Debug)]
enum ReloadError {
    Unknown,
    Failed(ManagerError),
}

impl Shared {
    /// Hot swap: loads the plugin's file again, validates it (world,
    /// metadata, permissions, watched kinds) off the hot path, and only then
    /// swaps the controller's plugin atomically. In-flight reconciles finish
    /// on the old version; the queue, its delays and backoff counters are
    /// kept; watches are re-pointed if the metadata changed; every key of
    /// the plugin is enqueued once. A failed reload changes nothing.
    async fn reload_plugin(&self, name: &str) -> Result<serde_json::Value, ReloadError> {
        let (config, old_meta) = {
            let plugins = self.plugins.lock().unwrap();
            let entry = plugins.get(name).ok_or(ReloadError::Unknown)?;
            (
                entry.config.clone(),
                entry.slot.current().metadata().clone(),
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
                entry.last_error = Some(message);
            }
            ReloadError::Failed(e)
        };
        let plugin = self
            .load(&config, self.plugin_api(&config))
            .await
            .map_err(fail)?;
        let new_meta = plugin.metadata().clone();
        let watches_changed = new_meta.for_ != old_meta.for_
            || new_meta.owns != old_meta.owns
            || new_meta.watches != old_meta.watches;
        let resolved = if watches_changed {
            Some(self.resolve_watches(&config, &plugin).await.map_err(fail)?)
        } else {
            None
        };
        let status = {
            let mut plugins = self.plugins.lock().unwrap();
            let entry = plugins.get_mut(name).ok_or(ReloadError::Unknown)?;
            let previous = entry.slot.current.swap(plugin.clone());
            if let Some((watches, resources)) = resolved {
                for t in entry.tasks.drain(..) {
                    t.abort();
                }
                entry.informers.clear();
                self.watch(entry, &new_meta.for_, watches, resources);
            }
            entry.generation += 1;
            entry.loaded_at = SystemTime::now();
            entry.last_error = None;
            enqueue_all(entry);
            tracing::info!(
                plugin = name,
                from = previous.digest(),
                to = plugin.digest(),
                version = %new_meta.version,
                generation = entry.generation,
                watches_changed,
                "plugin swapped"
            );
            serde_json::json!({
                "name": name,
                "digest": plugin.digest(),
                "version": new_meta.version,
                "generation": entry.generation,
            })
        };
        self.count_reload(name, "success");
        Ok(status)
    }
}

impl Shared {
    /// SIGHUP: the config file again if known, else every plugin's file.
    async fn reload_everything(&self, config_path: Option<&std::path::Path>) {
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
    /// validate changes nothing.
    async fn reload_config(&self, path: &std::path::Path) {
        let new = match HostConfig::load(path) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!("config reload refused, the running config stays: {e}");
                return;
            }
        };
        let current: BTreeMap<String, PluginConfig> = self
            .plugins
            .lock()
            .unwrap()
            .iter()
            .map(|(n, e)| (n.clone(), e.config.clone()))
            .collect();
        for name in current.keys() {
            if !new.plugins.iter().any(|p| &p.name == name) {
                let entry = self.plugins.lock().unwrap().remove(name);
                if let Some(mut entry) = entry {
                    tracing::info!(plugin = %name, "plugin removed from the config: draining");
                    entry.state = State::Draining;
                    for t in entry.tasks.drain(..) {
                        t.abort();
                    }
                    match entry.workers.take() {
                        Some(w) => {
                            w.shutdown(self.config.shutdown_timeout).await;
                        }
                        None => entry.controller.queue().shut_down(),
                    }
                }
            }
        }
        for plugin in new.plugins {
            let name = plugin.name.clone();
            match current.get(&name) {
                None => {
                    tracing::info!(plugin = %name, "plugin added to the config: starting");
                    match self.build(plugin, 1, None).await {
                        Ok(entry) => {
                            self.plugins.lock().unwrap().insert(name.clone(), entry);
                            self.sync_and_enqueue(&name).await;
                        }
                        Err(e) => {
                            tracing::error!(plugin = %name, "cannot start the added plugin: {e}")
                        }
                    }
                }
                Some(old) if *old != plugin => {
                    tracing::info!(plugin = %name, "plugin settings changed: rebuilding on the same queue");
                    let (queue, generation) = {
                        let plugins = self.plugins.lock().unwrap();
                        let Some(e) = plugins.get(&name) else {
                            continue;
                        };
                        (e.controller.queue().clone(), e.generation + 1)
                    };
                    if old.rate_limiter != plugin.rate_limiter {
                        let rl = &plugin.rate_limiter;
                        queue.set_rate_limiter(Box::new(rate_limiter(rl)));
                    }
                    match self.build(plugin, generation, Some(queue)).await {
                        Ok(mut entry) => {
                            let old_workers = {
                                let mut plugins = self.plugins.lock().unwrap();
                                let old = plugins.get_mut(&name).and_then(|e| e.workers.take());
                                entry.synced = true;
                                if *self.leader.borrow() {
                                    start_workers(&mut entry);
                                }
                                plugins.insert(name.clone(), entry);
                                old
                            };
                            if let Some(w) = old_workers {
                                w.detach(self.config.shutdown_timeout).await;
                            }
                            if let Some(e) = self.plugins.lock().unwrap().get(&name) {
                                enqueue_all(e);
                            }
                        }
                        Err(e) => {
                            tracing::error!(plugin = %name, "changed plugin refused, the old one keeps running: {e}");
                            if let Some(entry) = self.plugins.lock().unwrap().get_mut(&name) {
                                entry.last_error = Some(e.to_string());
                            }
                        }
                    }
                }
                Some(_) => {}
            }
        }
    }

    /// Plugins whose component is at `path` (absolute) and whose content
    /// differs from the version running (a touch without change is no swap).
    fn changed_plugins_at(&self, path: &std::path::Path) -> Vec<String> {
        let Ok(bytes) = std::fs::read(path) else {
            return Vec::new();
        };
        let digest = crate::runtime::digest(&bytes);
        let plugins = self.plugins.lock().unwrap();
        plugins
            .iter()
            .filter(|(_, e)| absolute(&e.config.resolved_path(&self.config.base_dir)) == path)
            .filter(|(_, e)| e.slot.current().digest() != digest)
            .map(|(n, _)| n.clone())
            .collect()
    }

    fn watched_paths(&self) -> Vec<PathBuf> {
        self.plugins
            .lock()
            .unwrap()
            .values()
            .map(|e| e.config.resolved_path(&self.config.base_dir))
            .collect()
    }
}

/// `p` made absolute, as file events name paths.
fn absolute(p: &std::path::Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// How long file events settle before a reload (editors and `cargo build`
/// write in several steps).
const DEBOUNCE: Duration = Duration::from_millis(250);

/// Reloads a plugin when its file changes, and the config when it does.
fn spawn_file_watcher(shared: Arc<Shared>, config_path: Option<PathBuf>) -> JoinHandle<()> {
    use notify::{RecursiveMode, Watcher};
    let config_path = config_path.map(|p| absolute(&p));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<PathBuf>();
    let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if let Ok(event) = res {
            for p in event.paths {
                let _ = tx.send(p);
            }
        }
    });
    let mut watcher = match watcher {
        Ok(w) => w,
        Err(e) => {
            tracing::error!("cannot watch plugin files; reload with SIGHUP or the admin API: {e}");
            return tokio::spawn(async {});
        }
    };
    let mut dirs = std::collections::BTreeSet::new();
    let mut watch_new_dirs = move |watcher: &mut notify::RecommendedWatcher,
                                   shared: &Shared,
                                   config: Option<&PathBuf>| {
        let mut wanted: Vec<PathBuf> = shared.watched_paths();
        wanted.extend(config.cloned());
        for p in wanted {
            if let Some(dir) = absolute(&p).parent().map(std::path::Path::to_path_buf)
                && dirs.insert(dir.clone())
                && let Err(e) = watcher.watch(&dir, RecursiveMode::NonRecursive)
            {
                tracing::warn!(dir = %dir.display(), "cannot watch: {e}");
            }
        }
    };
    // Registered before returning, so no change after start-up is missed.
    watch_new_dirs(&mut watcher, &shared, config_path.as_ref());
    tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            let mut changed = std::collections::BTreeSet::from([first]);
            tokio::time::sleep(DEBOUNCE).await;
            while let Ok(p) = rx.try_recv() {
                changed.insert(p);
            }
            for path in changed {
                if config_path.as_ref() == Some(&path) {
                    tracing::info!("config file changed: reloading");
                    shared.reload_config(&path).await;
                    continue;
                }
                for name in shared.changed_plugins_at(&path) {
                    tracing::info!(plugin = %name, "component file changed: reloading");
                    let _ = shared.reload_plugin(&name).await;
                }
            }
            // Plugins added by a config reload may live in new directories.
            watch_new_dirs(&mut watcher, &shared, config_path.as_ref());
        }
    })
}

fn start_workers(entry: &mut Entry) {
    if entry.workers.is_none() {
        entry.workers = Some(entry.controller.start());
    }
    entry.state = State::Running;
}

/// Every key the plugin's informers imply, once (after sync and swaps).
fn enqueue_all(entry: &Entry) {
    let for_kind = entry.slot.current().metadata().for_.clone();
    let queue = entry.controller.queue();
    for informer in &entry.informers {
        let is_for = informer.key.group == for_kind.group && informer.key.kind == for_kind.kind;
        if is_for {
            enqueue_store(queue, informer, &KeyMapping::Itself, &for_kind);
        }
    }
}

/// Adds the key of every object `informer` holds, as `mapping` maps it.
fn enqueue_store(
    queue: &WorkQueue<ObjectKey>,
    informer: &Informer,
    mapping: &KeyMapping,
    reconciled: &Gvk,
) {
    for o in informer.store().state() {
        for k in keys(mapping, reconciled, &o) {
            queue.add(k);
        }
    }
}

fn rate_limiter(
    rl: &crate::config::RateLimiterConfig,
) -> crate::ratelimit::MaxOfRateLimiter<ObjectKey> {
    controller_rate_limiter(rl.base_delay, rl.max_delay, rl.qps, rl.burst)
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

impl AdminState for Shared {
    fn metrics(&self) -> String {
        for entry in self.plugins.lock().unwrap().values() {
            entry.controller.queue().unfinished_work();
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
            .filter(|(_, e)| !e.synced)
            .map(|(n, e)| match &e.last_error {
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

    fn plugins(&self) -> serde_json::Value {
        let plugins = self.plugins.lock().unwrap();
        serde_json::Value::Array(
            plugins
                .iter()
                .map(|(name, e)| {
                    let p = e.slot.current();
                    serde_json::json!({
                        "name": name,
                        "path": p.path(),
                        "digest": p.digest(),
                        "version": p.metadata().version,
                        "state": e.state.as_str(),
                        "loaded_at": rfc3339(e.loaded_at),
                        "generation": e.generation,
                        "queue_depth": e.controller.queue().len(),
                        "last_error": e.last_error,
                    })
                })
                .collect(),
        )
    }

    fn reload(&self, name: String) -> BoxFuture<'_, Result<serde_json::Value, (u16, String)>> {
        Box::pin(async move {
            match self.reload_plugin(&name).await {
                Ok(status) => Ok(status),
                Err(ReloadError::Unknown) => Err((404, format!("no plugin named {name:?}"))),
                Err(ReloadError::Failed(e)) => Err((422, e.to_string())),
            }
        })
    }
}
