//! The manager: builds a controller per plugin from the host config, feeds
//! it from the shared cache, runs workers (only while leader, with leader
//! election on), serves the admin endpoints, and shuts down gracefully.
//!
//! # Layout
//! - `lifecycle`: a plugin's `PluginEntry` and its state machine;
//! - `wiring`: loading a plugin from its source and wiring its controller
//!   (grant checks, watches → informers → queue);
//! - `reload`: every way a plugin or the config is reloaded (source change,
//!   admin API, SIGHUP, config file);
//! - `startup`: the config's plugins loaded in the background at start,
//!   and those that did not load;
//! - `status`: the typed [`PluginStatus`] of `/plugins`, `/readyz`, logs;
//! - `engine`: engine settings fixed at start, and the check a plugin loaded
//!   later must pass against them;
//! - `objects`: plugins defined as WasmReconciler objects (`pluginsFrom`);
//! - `pruning`: pruning what URL and registry sources downloaded;
//! - `single_flight`: one admin reload per plugin at a time, shared by
//!   whoever asks while it runs.

mod answers;
mod canary;
mod engine;
mod lifecycle;
mod objects;
mod pruning;
mod reload;
mod shadow;
mod sharding;
mod single_flight;
mod skip;
mod startup;
mod status;
mod wiring;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use kube::Client;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::ObjectKey;
use crate::config::HostConfig;
use crate::control::discovery::{self, Resolver};
use crate::control::informer::{CacheOptions, SharedCache};
use crate::control::leader::{Fence, LeaderElection};
use crate::control::metrics::{Metrics, ReloadLabels};
use crate::control::secrets::SecretWatch;
use crate::control::shard::Shards;
use crate::control::workqueue::WorkQueue;
use crate::ops::admin;
use crate::ops::source::{FileWatcher, SourceError};
use crate::ops::webhook::{Registrar, Reviewers, WebhookError, WebhookServer};
use crate::sandbox::outbound::Connections;
use crate::sandbox::{LoadError, Runtime, RuntimeError};

pub use canary::{CanaryStatus, PromoteError, WindowStatus, in_canary};
pub use engine::EngineLimits;
pub use lifecycle::{InvalidTransition, Lifecycle, PluginSlot, PluginState, SlotPromoteError};
pub use objects::CRD as WASMRECONCILER_CRD;
pub use shadow::{Diff, Divergence, ShadowReport, Side, Write};
pub use startup::LoadFailure;
pub use status::{CandidateStatus, PluginStatus, WebhookStatus};

use lifecycle::PluginEntry;

/// Why the manager could not start a plugin or itself.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(
        "plugin {plugin:?} ({origin}): its metadata asks for permissions the config does not grant: {missing}"
    )]
    PermissionsExceedGrant {
        plugin: String,
        origin: String,
        missing: String,
    },
    #[error(
        "plugin {plugin:?} ({origin}): it declares outbound destinations its `outbound` grant does not cover: {missing}"
    )]
    OutboundExceedsGrant {
        plugin: String,
        origin: String,
        missing: String,
    },
    #[error(
        "plugin {plugin:?} ({origin}): it watches kinds the config does not grant list and watch on: {missing}"
    )]
    WatchesExceedGrant {
        plugin: String,
        origin: String,
        missing: String,
    },
    #[error("plugin {plugin:?}: {message}")]
    Engine { plugin: String, message: String },
    #[error("plugin {plugin:?}: {source}")]
    Kind {
        plugin: String,
        source: discovery::ResolveError,
    },
    #[error("cannot build the plugins' client: {0}")]
    Client(#[from] crate::control::client::ClientError),
    #[error("admin token file {path}: {message}")]
    AdminToken { path: PathBuf, message: String },
    #[error(
        "admin token file {path}: the token is {len} bytes without its surrounding whitespace; \
         it must be at least {MIN_ADMIN_TOKEN} (an empty file would let any request in)"
    )]
    AdminTokenTooShort { path: PathBuf, len: usize },
    #[error(transparent)]
    Admin(#[from] admin::AdminError),
    #[error(transparent)]
    Webhook(#[from] WebhookError),
    #[error(
        "plugin {plugin:?} ({origin}): its webhooks review resources the config does not grant it: {missing}"
    )]
    WebhooksExceedGrant {
        plugin: String,
        origin: String,
        missing: String,
    },
    #[error("leader election lost")]
    LeadershipLost,
    #[error("pluginsFrom: {message}")]
    PluginsFrom { message: String },
    #[error("plugin {plugin:?}: the name is taken by another plugin")]
    NameTaken { plugin: String },
    #[error("runtime.caBundle {path}: {message}")]
    CaBundle { path: PathBuf, message: String },
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
    /// Reload a plugin when its source changes (a file written, …).
    pub watch_sources: bool,
    /// The client config the host's client was made from. With leader
    /// election, plugins' requests then go through a client whose socket
    /// writes check the leader's fence (`control::client::fenced_client`);
    /// without it, the fence is checked before each request only.
    pub kube_config: Option<kube::Config>,
    /// PEM of the CA whose client certificates the webhook server requires
    /// when the config names no `webhook.clientCAFile` (`wasmctrl dev`:
    /// the embedded API server's, which signs the certificate it presents
    /// to webhooks).
    pub webhook_client_ca: Option<String>,
    /// Where compiled functions are kept across restarts when the config
    /// sets no `runtime.cacheDir` (`wasmctrl dev`: the user's cache).
    pub function_cache_dir: Option<PathBuf>,
}

/// This process's identity for leader election and sharding: the host
/// name, the process id and a random part. Containers usually run as pid 1
/// and pods on the host network share the node's name, so the first two
/// alone can name two replicas alike, and both would think they lead. At
/// most 253 bytes, as a sharding member's identity must be.
fn process_identity(host: &str) -> String {
    let mut end = host.len().min(220);
    while !host.is_char_boundary(end) {
        end -= 1;
    }
    let host = &host[..end];
    format!(
        "{host}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

impl Default for ManagerOptions {
    fn default() -> Self {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "wasmctrl".into());
        Self {
            identity: process_identity(&host),
            admin_bind: None,
            config_path: None,
            watch_sources: true,
            kube_config: None,
            webhook_client_ca: None,
            function_cache_dir: None,
        }
    }
}

/// What the manager's tasks share: the config it started with, the API
/// client, the wasm runtime, the shared cache and discovery, and the plugins.
pub(crate) struct Host {
    /// This host, for the admin answers that start a plugin's tasks.
    me: std::sync::Weak<Host>,
    config: HostConfig,
    client: Client,
    /// What plugins' requests go through (fenced with leader election).
    plugin_client: Client,
    runtime: Runtime,
    engine: EngineLimits,
    metrics: Arc<Metrics>,
    cache: Arc<SharedCache>,
    resolver: Arc<Resolver>,
    /// The Secrets plugins use by reference, read with the host's client.
    secret_watch: Arc<SecretWatch>,
    /// The TLS settings of plugins' outbound requests, with
    /// `runtime.caBundle`'s roots (None: the platform's roots only).
    outbound_tls: Option<Arc<rustls::ClientConfig>>,
    /// Per plugin name: the outbound connections its versions hold
    /// together, while any of them (or a connection) lives.
    outbound_connections: Mutex<BTreeMap<String, std::sync::Weak<Connections>>>,
    plugins: Mutex<BTreeMap<String, PluginEntry>>,
    /// The config's plugins not in `plugins`: loading, or refused.
    pending: Mutex<BTreeMap<String, startup::PendingPlugin>>,
    /// True once [`Manager::run`] runs: plugins sync and start workers.
    running: watch::Sender<bool>,
    /// True once every plugin of the config at start loaded or failed to.
    loaded: watch::Sender<bool>,
    /// Whether this host leads (always true without leader election).
    leader: watch::Receiver<bool>,
    /// Open while this host surely holds the lease; guards plugins' requests.
    fence: Fence,
    /// With sharding: the shards this replica holds (it never leads alone).
    shards: Option<Arc<Shards>>,
    /// Per plugin: the accesses of its grant the API server's authorization
    /// refused this host at start (see [`crate::ops::rbac::denied`]).
    rbac_denied: Mutex<BTreeMap<String, Vec<String>>>,
    /// The admin API's reloads in flight, per plugin: a request made
    /// while one runs waits for that one's answer instead of loading the
    /// plugin once more.
    admin_reloads: single_flight::SingleFlight<answers::ReloadAnswer>,
    /// Reports source and config file changes (None: not watching).
    watcher: Option<FileWatcher>,
    /// The WasmReconciler objects followed (None: no `pluginsFrom`).
    objects: Option<objects::ObjectPlugins>,
    /// The admission webhook server, and what registers the plugins'
    /// webhooks with the API server (None: `webhook.register: false`);
    /// set once at start when the config has `webhook`.
    webhook: std::sync::OnceLock<(WebhookServer, Option<Registrar>)>,
    stop: CancellationToken,
    /// Cancelled once the host's own drain is done: old workers a rebuild
    /// is still detaching stop then, cancelling what they run.
    stopping: CancellationToken,
}

/// A running host.
pub struct Manager {
    host: Arc<Host>,
    /// Loads the config's plugins (see `startup`).
    loader: tokio::task::JoinHandle<()>,
    admin_addr: SocketAddr,
    leader_tx: Option<watch::Sender<bool>>,
    options: ManagerOptions,
}

impl Manager {
    /// Starts the admin and webhook servers and begins loading every
    /// plugin of `config` in the background, at most one per CPU at a time
    /// (see [`Manager::loaded`]). A plugin that does not load is reported
    /// (`/plugins`, `/readyz`) and the others run; an error here is the
    /// host's own (a CA bundle, an admin token, a server's address).
    /// Informers sync and workers start in [`Manager::run`].
    pub async fn start(
        config: HostConfig,
        client: Client,
        options: ManagerOptions,
    ) -> Result<Self, ManagerError> {
        let metrics = Arc::new(Metrics::new());
        let engine = EngineLimits::for_config(&config);
        let runtime = Runtime::new(
            crate::sandbox::RuntimeConfig {
                function_cache_dir: options.function_cache_dir.clone(),
                ..engine.runtime_config(&config)
            },
            metrics.clone(),
        )?;
        let outbound_tls = match &config.runtime.ca_bundle {
            Some(file) => {
                let path = config.base_dir.join(file);
                let pem = crate::meta::files::read_regular_blocking(
                    &path,
                    crate::meta::pem::MAX_BUNDLE_BYTES as u64,
                )
                .map_err(|e| ManagerError::CaBundle {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
                Some(
                    crate::sandbox::outbound::tls_config(Some(&pem))
                        .map_err(|message| ManagerError::CaBundle { path, message })?,
                )
            }
            None => None,
        };
        let admin_token = match &config.admin.token_file {
            Some(file) => Some(read_admin_token(&config.base_dir.join(file))?),
            None => None,
        };
        // With sharding every replica runs workers, for its shards' keys.
        let elects_leader = config.leader_election.enabled && config.sharding.is_none();
        let (leader_tx, leader) = watch::channel(!elects_leader);
        let fence = if elects_leader {
            Fence::closed()
        } else {
            Fence::open()
        };
        let shards = config
            .sharding
            .as_ref()
            .map(|s| Arc::new(Shards::new(s.shards)));
        let plugin_client = match (&options.kube_config, elects_leader) {
            (Some(kube_config), true) => {
                crate::control::client::fenced_client(kube_config.clone(), fence.clone())?
            }
            _ => client.clone(),
        };
        let cache = Arc::new(SharedCache::with_options(
            client.clone(),
            CacheOptions {
                strip_managed_fields: config.cache.strip_managed_fields,
            },
        ));
        let resolver = Arc::new(Resolver::new(client.clone()));
        // Status writes go through the fenced client: a host that lost the
        // lease cannot overwrite the new leader's status.
        let objects = objects::ObjectPlugins::start(
            &config,
            &client,
            &plugin_client,
            &resolver,
            &cache,
            &metrics,
        )
        .await?;
        let host = Arc::new_cyclic(|me| Host {
            me: me.clone(),
            cache,
            resolver,
            secret_watch: SecretWatch::new(client.clone()),
            outbound_tls,
            outbound_connections: Mutex::default(),
            objects,
            client,
            plugin_client,
            runtime,
            engine,
            metrics,
            plugins: Mutex::new(BTreeMap::new()),
            pending: Mutex::new(BTreeMap::new()),
            running: watch::Sender::new(false),
            loaded: watch::Sender::new(false),
            leader,
            fence,
            shards,
            rbac_denied: Mutex::new(BTreeMap::new()),
            admin_reloads: single_flight::SingleFlight::new(),
            watcher: options.watch_sources.then(FileWatcher::new),
            webhook: std::sync::OnceLock::new(),
            stop: CancellationToken::new(),
            stopping: CancellationToken::new(),
            config,
        });
        if let Some(section) = &host.config.webhook {
            let reviewers: Arc<dyn Reviewers> = host.clone();
            let server = WebhookServer::start(
                section,
                Some(&host.client),
                options.webhook_client_ca.as_deref(),
                &host.config.base_dir,
                reviewers.clone(),
                host.metrics.clone(),
                host.stop.clone(),
            )
            .await?;
            let registrar = section.register.then(|| {
                Registrar::start(
                    host.client.clone(),
                    &server,
                    reviewers,
                    section.reapply_interval,
                    host.stop.clone(),
                )
            });
            let _ = host.webhook.set((server, registrar));
        }
        let bind = options.admin_bind.unwrap_or(host.config.admin.bind);
        let admin_addr = admin::serve(bind, host.clone(), admin_token, host.stop.clone()).await?;
        tracing::info!(admin = %admin_addr, plugins = host.config.plugins.len(), "wasmctrl started: loading plugins");
        let loader = host.load_config_plugins();
        Ok(Self {
            host,
            loader,
            admin_addr,
            leader_tx: Some(leader_tx),
            options,
        })
    }

    /// Waits until every plugin of the config at start has loaded or failed
    /// to, and returns those that failed, in config order (each also shown
    /// in `/plugins` as `failed`, and retried when its source or the config
    /// changes).
    pub fn loaded(&self) -> impl std::future::Future<Output = Vec<LoadFailure>> + Send + use<> {
        let host = self.host.clone();
        async move {
            let mut loaded = host.loaded.subscribe();
            let _ = loaded.wait_for(|done| *done).await;
            host.load_failures()
        }
    }

    /// Where the admin endpoints are served.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// Where the admission webhook server listens (None without `webhook`).
    pub fn webhook_addr(&self) -> Option<SocketAddr> {
        self.host.webhook.get().map(|(s, _)| s.addr())
    }

    /// The PEM the webhook server's certificate verifies against.
    pub fn webhook_ca_bundle(&self) -> Option<String> {
        self.host.webhook.get().and_then(|(s, _)| s.ca_bundle())
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.host.metrics
    }

    /// The queue of plugin `name` (for inspection).
    pub fn queue(&self, name: &str) -> Option<WorkQueue<ObjectKey>> {
        let plugins = self.host.plugins.lock().unwrap();
        plugins.get(name).map(|e| e.controller().queue().clone())
    }

    /// A reader of [`Manager::queue`] that lives on while the manager runs
    /// (plugins load after [`Manager::start`] returns).
    pub fn queue_reader(
        &self,
    ) -> impl Fn(&str) -> Option<WorkQueue<ObjectKey>> + Send + Sync + use<> {
        let host = self.host.clone();
        move |name| {
            let plugins = host.plugins.lock().unwrap();
            plugins.get(name).map(|e| e.controller().queue().clone())
        }
    }

    /// The status of every plugin, as `/plugins` serves it.
    pub fn status(&self) -> Vec<PluginStatus> {
        self.host.statuses()
    }

    /// A reader of [`Manager::status`] that lives on while the manager
    /// runs (for a tool that watches the host, as `dev --watch` does).
    pub fn status_reader(&self) -> impl Fn() -> Vec<PluginStatus> + Send + Sync + 'static {
        let host = self.host.clone();
        move || host.statuses()
    }

    /// Runs until `shutdown` resolves (or leadership is lost), then stops
    /// watches, drains every queue for up to `shutdownTimeout` and cancels
    /// what still runs.
    pub async fn run(
        mut self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<(), ManagerError> {
        let host = self.host.clone();
        let election_stop = CancellationToken::new();
        let election = if host.config.leader_election.enabled && host.shards.is_none() {
            let le = &host.config.leader_election;
            let election = LeaderElection {
                lease: le.lease(&self.options.identity),
            };
            let tx = self.leader_tx.take().expect("run is called once");
            Some(tokio::spawn(election.run(
                host.client.clone(),
                tx,
                host.fence.clone(),
                election_stop.clone(),
            )))
        } else {
            None
        };
        let coordinator = host.start_sharding(&self.options.identity, election_stop.clone());

        // Plugins loaded so far sync now; the rest as they load.
        host.running.send_replace(true);

        let objects = host.run_objects();
        let pruning = pruning::prune_periodically(&host);
        let reloads = reload::reload_on_changes(
            host.clone(),
            host.watcher.as_ref(),
            self.options.config_path.clone(),
        );
        let mut leader = host.leader.clone();
        let mut was_leader = false;
        tokio::pin!(shutdown);
        let outcome = loop {
            let is_leader = *leader.borrow_and_update();
            if is_leader && !was_leader {
                host.lead_all();
            } else if !is_leader && was_leader {
                break Err(ManagerError::LeadershipLost);
            }
            was_leader = is_leader;
            tokio::select! {
                _ = &mut shutdown => break Ok(()),
                changed = leader.changed() => if changed.is_err() { break Ok(()) },
            }
        };
        // A reload cut midway drops what it held (a drain's or a detach's
        // workers cancel what they run); it is gone before the drain below
        // walks the plugins, so it adds none behind it.
        reloads.abort();
        let _ = reloads.await;
        self.loader.abort();
        pruning.abort();
        if let Some(o) = objects {
            o.stop().await;
        }
        if let Err(ManagerError::LeadershipLost) = &outcome {
            // Another host may lead soon: stop at once, cancelling what runs.
            tracing::error!("leadership lost: stopping every worker now");
            host.shutdown(std::time::Duration::ZERO).await;
        } else {
            tracing::info!("shutting down: draining queues");
            host.shutdown(host.config.shutdown_timeout).await;
        }
        election_stop.cancel();
        if let Some(e) = election {
            let _ = e.await;
        }
        if let Some(c) = coordinator {
            let _ = c.await;
        }
        host.stop.cancel();
        tracing::info!("shutdown complete");
        outcome
    }
}

impl Reviewers for Host {
    fn reviewer(
        &self,
        name: &str,
    ) -> Option<(
        Arc<dyn crate::ops::webhook::Reviewer>,
        crate::config::AdmissionMode,
    )> {
        let plugins = self.plugins.lock().unwrap();
        let entry = plugins.get(name)?;
        Some((entry.slot().current(), entry.config().admission.mode))
    }
}

impl Host {
    /// The outbound connection count that every version of plugin `name`
    /// shares (stable, candidate, shadow, and the old version finishing
    /// its reconciles after a swap), so that `limits.httpConnections`
    /// bounds them together. Counts of plugins whose every version and
    /// connection is gone are dropped here.
    fn outbound_connections(&self, name: &str) -> Arc<Connections> {
        let mut all = self
            .outbound_connections
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        all.retain(|_, count| count.strong_count() > 0);
        if let Some(count) = all.get(name).and_then(std::sync::Weak::upgrade) {
            return count;
        }
        let count = Connections::new();
        all.insert(name.to_string(), Arc::downgrade(&count));
        count
    }

    /// Asks the API server, one SelfSubjectAccessReview per access, whether
    /// RBAC allows this host all of `plugin`'s grant, and reports what it
    /// refuses (logged, and shown by `/plugins` as `rbac_denied`) before the
    /// first request fails with a 403. The plugin still starts: what RBAC
    /// allows keeps working.
    async fn check_rbac(&self, plugin: &crate::config::PluginConfig) {
        match crate::ops::rbac::denied(&self.client, plugin).await {
            Ok(denied) if denied.is_empty() => {
                tracing::debug!(plugin = %plugin.name, "RBAC allows the whole grant");
            }
            Ok(denied) => {
                tracing::error!(
                    plugin = %plugin.name,
                    denied = ?denied,
                    "RBAC does not allow this host all of the plugin's grant (add these rules, e.g. from `wasmctrl rbac`): {}",
                    denied.join("; ")
                );
                self.rbac_denied
                    .lock()
                    .unwrap()
                    .insert(plugin.name.clone(), denied);
            }
            Err(e) => {
                tracing::warn!(plugin = %plugin.name, "cannot check the grant against RBAC (SelfSubjectAccessReview failed): {e}");
            }
        }
    }

    /// Waits for a plugin's informers (reporting Failed past
    /// `cacheSyncTimeout`, and still waiting) and for its feeds to queue
    /// every key they imply, then marks the plugin synced and starts
    /// workers if leading.
    async fn sync_and_start(&self, name: &str) {
        let informers = match self.plugins.lock().unwrap().get(name) {
            Some(e) => e
                .watched()
                .iter()
                .map(|w| w.informer.clone())
                .collect::<Vec<_>>(),
            None => return,
        };
        let wait_all = async {
            for i in &informers {
                i.wait_synced().await;
            }
        };
        tokio::pin!(wait_all);
        if tokio::time::timeout(self.config.cache_sync_timeout, &mut wait_all)
            .await
            .is_err()
        {
            let pending: Vec<String> = informers
                .iter()
                .filter(|i| !i.is_synced())
                .map(|i| i.key.to_string())
                .collect();
            let message = format!(
                "informers did not sync within {:?} (still retrying): {}",
                self.config.cache_sync_timeout,
                pending.join(", ")
            );
            tracing::error!(plugin = name, "{message}");
            if let Some(entry) = self.plugins.lock().unwrap().get_mut(name) {
                let _ = entry.fail(message);
            }
            self.plugin_changed(name);
            wait_all.await;
            tracing::info!(plugin = name, "informers synced after all");
        }
        // The first listing's keys are queued (by the feeds) before the
        // plugin counts as synced (ready) and its workers start, as
        // controller-runtime's handlers have seen the initial list before it
        // reports synced.
        let primed: Vec<_> = match self.plugins.lock().unwrap().get(name) {
            Some(entry) => entry.watched().iter().map(|w| w.primed.clone()).collect(),
            None => return,
        };
        for mut primed in primed {
            // Err: the feed is gone with its plugin, found missing below.
            let _ = primed.wait_for(|p| *p).await;
        }
        {
            let mut plugins = self.plugins.lock().unwrap();
            let Some(entry) = plugins.get_mut(name) else {
                return;
            };
            let leader = *self.leader.borrow();
            let _ = entry.start(leader);
        }
        self.plugin_changed(name);
    }

    fn lead_all(&self) {
        for entry in self.plugins.lock().unwrap().values_mut() {
            entry.lead();
        }
    }

    /// Drains every plugin: workers finish their keys for up to `timeout`,
    /// then what still runs is cancelled, and so is what old workers a
    /// rebuild is still detaching run.
    async fn shutdown(&self, timeout: std::time::Duration) {
        let mut draining = Vec::new();
        for entry in self.plugins.lock().unwrap().values_mut() {
            if let Ok(Some(workers)) = entry.begin_drain() {
                draining.push(workers.shutdown(timeout));
            }
        }
        futures::future::join_all(draining).await;
        self.stopping.cancel();
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

/// The shortest admin token taken: the admin port counts no failed
/// attempts, so a token must not be guessable, and an empty one would
/// match an empty `?token=`.
const MIN_ADMIN_TOKEN: usize = 16;

/// The most an admin token file may hold: a token is a line, and the path
/// may name a device or a FIFO that would never end.
const MAX_ADMIN_TOKEN_FILE: u64 = 4096;

/// The admin bearer token in `path`, without surrounding whitespace.
fn read_admin_token(path: &std::path::Path) -> Result<String, ManagerError> {
    let refused = |message: String| ManagerError::AdminToken {
        path: path.to_path_buf(),
        message,
    };
    let bytes = crate::meta::files::read_regular_blocking(path, MAX_ADMIN_TOKEN_FILE)
        .map_err(|e| refused(e.to_string()))?;
    let token =
        String::from_utf8(bytes).map_err(|_| refused("the token is not UTF-8 text".to_string()))?;
    let token = token.trim();
    if token.len() < MIN_ADMIN_TOKEN {
        return Err(ManagerError::AdminTokenTooShort {
            path: path.to_path_buf(),
            len: token.len(),
        });
    }
    Ok(token.to_string())
}

#[cfg(test)]
mod tests {
    use super::{process_identity, read_admin_token};

    #[test]
    fn an_empty_or_short_admin_token_is_refused_and_a_long_one_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        for short in ["", " \n", "s3cret\n"] {
            std::fs::write(&path, short).unwrap();
            let e = read_admin_token(&path).unwrap_err().to_string();
            assert!(e.contains("at least 16") && e.contains("token"), "{e}");
        }
        std::fs::write(&path, "0123456789abcdef\n").unwrap();
        assert_eq!(read_admin_token(&path).unwrap(), "0123456789abcdef");
    }

    #[test]
    fn an_admin_token_file_that_is_a_device_too_large_or_not_text_is_refused() {
        let e = read_admin_token(std::path::Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/dev/zero") && e.contains("character device"),
            "{e}"
        );

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "a".repeat(4097)).unwrap();
        let e = read_admin_token(&path).unwrap_err().to_string();
        assert!(e.contains("4097 bytes, larger than 4096"), "{e}");

        std::fs::write(&path, b"0123456789abcdef\xff").unwrap();
        let e = read_admin_token(&path).unwrap_err().to_string();
        assert!(e.contains("not UTF-8"), "{e}");
    }

    #[test]
    fn two_processes_of_one_host_and_pid_have_different_identities() {
        assert_ne!(process_identity("web-0"), process_identity("web-0"));
        assert!(process_identity("web-0").starts_with("web-0-"));
        let long = "é".repeat(200);
        let id = process_identity(&long);
        assert!(id.len() <= 253, "{}", id.len());
    }
}
