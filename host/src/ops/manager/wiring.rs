//! Loading a plugin from its source and wiring its controller: the grant
//! checks a plugin must pass to load, and the feeds (informers → keys) of
//! its queue.

use crate::ops::transcript::record::{RecordOptions, Recorder};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::ApiResource;
use tokio::sync::watch;

use super::canary::Canary;
use super::lifecycle::{Feeds, PluginController, PluginEntry, PluginSlot, Watched};
use super::shadow::Shadow;
use super::{Host, ManagerError};
use crate::config::{CandidateMode, PluginConfig, RateLimiterConfig};
use crate::control::controller::watches::{KeyMapping, keys};
use crate::control::controller::{Controller, ControllerOptions, TerminalErrors};
use crate::control::informer::{Informer, InformerKey, Notification};
use crate::control::metrics::Version;
use crate::control::shard::Shards;
use crate::control::workqueue::ratelimit::{MaxOfRateLimiter, controller_rate_limiter};
use crate::control::workqueue::{Priority, WorkQueue};
use crate::ops::source::PluginSource;
use crate::sandbox::admission::WebhookKind;
use crate::sandbox::hostapi::{Access, ApiLimits, ClusterApi, ClusterContext, Grant, Gvk};
use crate::sandbox::{Plugin, PluginSpec, WatchMapping};
use crate::{ObjectKey, ReconcileError};

/// A watched kind, resolved, with how its objects map to keys.
pub(super) struct ResolvedWatch {
    pub(super) mapping: KeyMapping,
    pub(super) resource: ApiResource,
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

impl Host {
    /// Loads a plugin and wires its controller (informers subscribed, no
    /// workers yet), on `queue` when given (a rebuild keeps its keys,
    /// delays and backoff).
    pub(super) async fn build(
        self: &Arc<Self>,
        config: PluginConfig,
        generation: u64,
        queue: Option<WorkQueue<ObjectKey>>,
    ) -> Result<PluginEntry, ManagerError> {
        let source = self.source_for(&config);
        // Subscribed before the fetch, so that a change made while the
        // plugin loads reaches its follower.
        let changes = source.changes();
        let api = self.plugin_api(&config);
        let plugin = self
            .load(&config, &*source, api.clone(), Version::Stable, false)
            .await
            .inspect_err(|_| self.count_reload(&config.name, "error"))?;
        let watches = self
            .resolve_watches(&config, &plugin, api.grant(), &source.origin())
            .await
            .inspect_err(|_| self.count_reload(&config.name, "error"))?;
        let candidate_plugin = match config.candidate_plugin() {
            Some(candidate_config) => Some(
                self.load_candidate(&candidate_config, api.clone(), shadowed(&config))
                    .await
                    .inspect_err(|_| self.count_reload(&config.name, "error"))?,
            ),
            None => None,
        };
        let recorder = match &config.record {
            Some(record) => {
                let options = RecordOptions {
                    dir: self.config.base_dir.join(&record.dir),
                    keys: record.selector().expect("validated: record.keys parses"),
                    max: record.max,
                    max_bytes: record.max_bytes,
                    files: record.files,
                };
                let recorder = Recorder::start(&config.name, options, self.metrics.clone())
                    .map_err(|e| ManagerError::Engine {
                        plugin: config.name.clone(),
                        message: e.to_string(),
                    })
                    .inspect_err(|_| self.count_reload(&config.name, "error"))?;
                Some(Arc::new(recorder))
            }
            None => None,
        };
        self.count_reload(&config.name, "success");

        let queue = queue.unwrap_or_else(|| {
            WorkQueue::new(
                config.name.clone(),
                Box::new(rate_limiter(&config.rate_limiter)),
                self.metrics.queue(&config.name),
            )
        });
        let for_kind = plugin.metadata().for_.clone();
        let mut slot = PluginSlot::new(plugin);
        if config.skip_unchanged {
            slot = slot.skipping_unchanged(self.metrics.clone());
        }
        if let (Some(candidate), Some(candidate_plugin)) = (&config.candidate, candidate_plugin) {
            match candidate.mode {
                CandidateMode::Shadow => {
                    slot = slot.shadowed_by(Arc::new(Shadow::new(
                        &config.name,
                        candidate_plugin,
                        candidate.max_concurrent_shadows,
                        candidate.keep_divergences,
                        self.metrics.clone(),
                    )));
                }
                CandidateMode::Canary => {
                    let canary = candidate
                        .canary
                        .clone()
                        .expect("validated: mode canary has a canary section");
                    // A rollback or promotion changes what the plugin's
                    // object (if it is one's) shows.
                    let host = Arc::downgrade(self);
                    let name = config.name.clone();
                    let decided = move || {
                        if let Some(host) = host.upgrade() {
                            host.plugin_changed(&name);
                        }
                    };
                    slot = slot.with_canary(Arc::new(Canary::new(
                        &config.name,
                        candidate_plugin,
                        canary,
                        queue.clone(),
                        self.metrics.clone(),
                        Box::new(decided),
                    )));
                }
            }
        }
        if let Some(recorder) = recorder {
            slot = slot.recorded_by(recorder);
        }
        let slot = Arc::new(slot.with_shards(self.shards.clone()));
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
                api,
                kind: for_kind.clone(),
            }),
        );
        let feeds = self.feeds(&config, &controller, &for_kind, &watches);
        let idler = config
            .idle_unload
            .map(|idle| unload_when_idle(&config.name, slot.clone(), idle));
        let mut entry = PluginEntry::new(config, source, slot, controller, feeds, generation);
        entry.keep_changes(changes);
        if let Some(idler) = idler {
            entry.unload_when_idle(idler);
        }
        Ok(entry)
    }

    /// Loads a plugin's candidate version (`candidate_config` is the
    /// plugin's config with the candidate's source and settings), through
    /// the plugin's API and checked against its grant.
    pub(super) async fn load_candidate(
        &self,
        candidate_config: &PluginConfig,
        api: Arc<ClusterApi>,
        shadow: bool,
    ) -> Result<Arc<Plugin>, ManagerError> {
        // Its source is not followed: a new candidate comes with a config
        // (or object) change, which rebuilds the plugin.
        let source = self.source_for(candidate_config);
        self.load(candidate_config, &*source, api, Version::Candidate, shadow)
            .await
    }

    /// The `kube` imports of one plugin, held to its grant and API limits:
    /// its own rate (`limits.apiQps`; by default a config plugin's equal
    /// share of `runtime.apiQps`, an object's all of it) and, when it has
    /// one, the host's API budget it shares.
    pub(super) fn plugin_api(&self, config: &PluginConfig) -> Arc<ClusterApi> {
        let host_qps = self.config.runtime.api_qps;
        let default_qps = if self.owned_by_object(&config.name) {
            // Objects are not counted in `plugins`; the shared budget
            // bounds them all together.
            host_qps
        } else {
            (host_qps / self.config.plugins.len().max(1) as f64).max(1.0)
        };
        let qps = config.limits.api_qps.unwrap_or(default_qps);
        let burst = config
            .limits
            .api_burst
            .unwrap_or((qps * 2.0).ceil().max(1.0) as u32);
        Arc::new(ClusterApi::new(
            &config.name,
            &ClusterContext {
                client: self.plugin_client.clone(),
                resolver: self.resolver.clone(),
                cache: self.cache.clone(),
                metrics: self.metrics.clone(),
                fence: self.fence.clone(),
            },
            Grant::new(config.permissions.clone(), config.namespaces.clone()),
            ApiLimits {
                list_bytes: config.limits.list_bytes as usize,
                qps,
                burst,
                shared: self.shared_api_budget(config),
                ..ApiLimits::default()
            },
        ))
    }

    /// Fetches the plugin's component, checks it fits the engine, loads it
    /// (world, metadata) and checks its declared permissions against the
    /// grant, and its declared outbound destinations against its outbound
    /// grant. `version` says which of the plugin's versions it is: only
    /// the stable version's fetch is what the plugin's source resolved to.
    /// A `shadow` candidate's outbound requests are held to GET and HEAD:
    /// its writes must never leave the host.
    ///
    /// An object's load holds its component's bytes within the objects'
    /// budget (`pluginsFrom.maxLoadingBytes`) until it is compiled.
    pub(super) async fn load(
        &self,
        config: &PluginConfig,
        source: &dyn PluginSource,
        api: Arc<ClusterApi>,
        version: Version,
        shadow: bool,
    ) -> Result<Arc<Plugin>, ManagerError> {
        let load = async move {
            let others: u32 = self
                .plugins
                .lock()
                .unwrap()
                .values()
                .filter(|e| e.config().name != config.name)
                .map(|e| e.config().concurrency() as u32)
                .sum();
            self.engine
                .admit(config, others)
                .map_err(|message| ManagerError::Engine {
                    plugin: config.name.clone(),
                    message,
                })?;
            let origin = source.origin();
            let artifact = source.fetch().await?;
            tracing::debug!(plugin = %config.name, %origin, digest = %artifact.digest, "component fetched");
            if version == Version::Stable {
                self.note_fetched(&config.name, &artifact.digest);
            }
            let mut outbound = config
                .outbound_grant_with(Some(&self.secret_watch))
                .sharing_connections(self.outbound_connections(&config.name));
            if let Some(tls) = &self.outbound_tls {
                outbound = outbound.with_tls(tls.clone());
            }
            let outbound = Arc::new(if shadow {
                outbound.read_only()
            } else {
                outbound
            });
            let plugin = self
                .runtime
                .load_bytes(
                    origin.clone(),
                    artifact.bytes,
                    PluginSpec {
                        limits: config.sandbox_limits(),
                        instance_mode: config.instance_mode.into(),
                        reuse: config.reuse_limits(),
                        settings: config.settings.clone(),
                        kube: api.clone(),
                        outbound: outbound.clone(),
                        ..PluginSpec::new(&config.name)
                    },
                )
                .await?;
            let grant = api.grant();
            let missing = plugin
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
                .map(|(g, r, v)| format!("{v} {}/{r}", if g.is_empty() { "core" } else { &g }));
            if let Some(missing) = name_some(missing) {
                return Err(ManagerError::PermissionsExceedGrant {
                    plugin: config.name.clone(),
                    origin,
                    missing,
                });
            }
            // Reviewing an object is reading it, and the API server sends a
            // webhook the objects of every namespace its rules match: every
            // resource a webhook's rules name must be one the grant lets the
            // plugin get in all namespaces, and patch (or update) too for a
            // mutating webhook, which changes what it reviews.
            let cluster_wide = |verb: &str, group: &str, resource: &str| {
                grant.allows(&Access {
                    verb,
                    group,
                    resource,
                    namespace: None,
                })
            };
            let unreadable = plugin
                .webhooks()
                .iter()
                .flat_map(|w| w.rules.iter().map(move |r| (w.kind, r)))
                .flat_map(|(kind, r)| {
                    r.groups.iter().flat_map(move |g| {
                        r.resources.iter().map(move |res| {
                            (kind, g.clone(), res.split('/').next().unwrap_or(res).to_string())
                        })
                    })
                })
                .filter_map(|(kind, g, r)| {
                    let shown = if g.is_empty() { "core" } else { &g };
                    if !cluster_wide("get", &g, &r) {
                        Some(format!("get {shown}/{r} in all namespaces"))
                    } else if kind == WebhookKind::Mutating
                        && !cluster_wide("patch", &g, &r)
                        && !cluster_wide("update", &g, &r)
                    {
                        Some(format!("patch {shown}/{r} in all namespaces (a mutating webhook changes what it reviews)"))
                    } else {
                        None
                    }
                });
            if let Some(missing) = name_some(unreadable) {
                return Err(ManagerError::WebhooksExceedGrant {
                    plugin: config.name.clone(),
                    origin,
                    missing,
                });
            }
            let uncovered = outbound.uncovered(&plugin.metadata().outbound);
            if !uncovered.is_empty() {
                let named: Vec<String> = plugin
                    .metadata()
                    .outbound
                    .iter()
                    .enumerate()
                    .filter(|(_, d)| uncovered.contains(d))
                    .map(|(i, d)| format!("outbound[{i}] {d}"))
                    .collect();
                return Err(ManagerError::OutboundExceedsGrant {
                    plugin: config.name.clone(),
                    origin,
                    missing: named.join(", "),
                });
            }
            Ok(plugin)
        };
        self.load_within_budget(&config.name, load).await
    }

    /// The kinds the plugin watches, resolved through discovery. Each must
    /// be granted `list` and `watch` in every namespace the plugin's
    /// informers cover: the host's informers read with the host's
    /// credentials, so watching is reading.
    pub(super) async fn resolve_watches(
        &self,
        config: &PluginConfig,
        plugin: &Plugin,
        grant: &Grant,
        origin: &str,
    ) -> Result<Vec<ResolvedWatch>, ManagerError> {
        let m = plugin.metadata();
        let mut wanted = vec![(m.for_.clone(), KeyMapping::Itself)];
        wanted.extend(
            m.owns
                .iter()
                .map(|g| (g.clone(), KeyMapping::ControllerOwner)),
        );
        wanted.extend(m.watches.iter().map(|w| {
            let mapping = match &w.mapping {
                WatchMapping::Owner => KeyMapping::Owner,
                WatchMapping::SameName => KeyMapping::SameName,
                WatchMapping::Label(l) => KeyMapping::Label(l.clone()),
            };
            (w.kind.clone(), mapping)
        }));
        let scopes = scopes(config);
        let mut resolved = Vec::new();
        let mut missing = Vec::new();
        for (kind, mapping) in wanted {
            let r = self
                .resolver
                .resolve(&kind)
                .await
                .map_err(|source| ManagerError::Kind {
                    plugin: config.name.clone(),
                    source,
                })?;
            for verb in ["list", "watch"] {
                for ns in &scopes {
                    let access = Access {
                        verb,
                        group: &r.resource.group,
                        resource: &r.resource.plural,
                        namespace: ns.as_deref().filter(|_| r.namespaced),
                    };
                    if !grant.allows(&access) {
                        missing.push(access.to_string());
                    }
                }
            }
            resolved.push(ResolvedWatch {
                mapping,
                resource: r.resource.clone(),
            });
        }
        if !missing.is_empty() {
            missing.dedup();
            return Err(ManagerError::WatchesExceedGrant {
                plugin: config.name.clone(),
                origin: origin.to_string(),
                missing: missing.join(", "),
            });
        }
        Ok(resolved)
    }

    /// Starts (or shares) the informers of `watches` and the tasks turning
    /// their events into keys of `controller`'s queue.
    pub(super) fn feeds(
        &self,
        config: &PluginConfig,
        controller: &PluginController,
        for_kind: &Gvk,
        watches: &[ResolvedWatch],
    ) -> Feeds {
        let mut feeds = Feeds::default();
        for watch in watches {
            for ns in scopes(config) {
                let key = InformerKey::new(&watch.resource, ns.as_deref());
                let informer = self.cache.informer(key, watch.resource.clone());
                let (task, primed) = forward_events(
                    &informer,
                    controller.reconciler().clone(),
                    controller.queue().clone(),
                    watch.mapping.clone(),
                    for_kind.clone(),
                );
                feeds.tasks.push(task);
                if watch.mapping == KeyMapping::Itself
                    && let Some(period) = config.resync_period
                {
                    feeds.tasks.push(resync_every(
                        period,
                        &informer,
                        controller.reconciler().clone(),
                        controller.queue().clone(),
                        for_kind.clone(),
                    ));
                }
                feeds.watched.push(Watched { informer, primed });
            }
        }
        feeds
    }

    /// Starts `entry`'s follower, which reloads plugin `name` whenever its
    /// source changes and the content differs from the version running,
    /// beginning with the changes made while it loaded. Called with the
    /// manager's plugins locked, as the entry goes in: the follower's
    /// reload waits for the lock, and then finds it.
    pub(super) fn follow_source(self: &Arc<Self>, name: &str, entry: &mut PluginEntry) {
        let Some(mut changes) = entry.take_changes() else {
            return;
        };
        let host = Arc::downgrade(self);
        let name = name.to_string();
        entry.follow(tokio::spawn(async move {
            while changes.next().await.is_some() {
                let Some(host) = host.upgrade() else {
                    return;
                };
                // Boxed: a reload's state is allocated only while one
                // runs, not by every plugin's follower while it waits.
                Box::pin(host.reload_plugin_if_changed(&name)).await;
            }
        }));
    }
}

/// Whether the plugin's candidate runs in shadow.
fn shadowed(config: &PluginConfig) -> bool {
    config
        .candidate
        .as_ref()
        .is_some_and(|c| c.mode == CandidateMode::Shadow)
}

/// The namespaces a plugin's informers cover (None: all).
fn scopes(config: &PluginConfig) -> Vec<Option<String>> {
    match &config.namespaces {
        Some(list) => list.iter().cloned().map(Some).collect(),
        None => vec![None],
    }
}

/// Turns an informer's events into keys of `queue` (those `slot` admits).
///
/// Once the informer has synced, the feed first queues the keys of every
/// object its store holds, at low priority: a first listing is not
/// announced as events, and a feed that joins an informer already synced
/// (a new plugin, a swap or rebuild that watches anew) has missed it
/// anyway. The receiver turns true once those keys are queued.
fn forward_events(
    informer: &Arc<Informer>,
    slot: Arc<PluginSlot>,
    queue: WorkQueue<ObjectKey>,
    mapping: KeyMapping,
    reconciled: Gvk,
) -> (tokio::task::JoinHandle<()>, watch::Receiver<bool>) {
    let mut subscription = informer.subscribe();
    let (primed_tx, primed) = watch::channel(false);
    let weak = Arc::downgrade(informer);
    let task = tokio::spawn(async move {
        {
            let Some(informer) = weak.upgrade() else {
                return;
            };
            informer.wait_synced().await;
            enqueue_store(
                &slot,
                &queue,
                &informer,
                &mapping,
                &reconciled,
                Priority::LOW,
                &|_| true,
            )
            .await;
        }
        let _ = primed_tx.send(true);
        while let Some(n) = subscription.next().await {
            match n {
                Notification::Object(e) => {
                    let mapped = keys(&mapping, &reconciled, &e.object);
                    count_refused_owners(&slot, mapped.refused);
                    for k in mapped.keys {
                        if slot.admits(&k) {
                            queue.add(k);
                        }
                    }
                }
                Notification::Resync => {
                    let Some(informer) = weak.upgrade() else {
                        break;
                    };
                    enqueue_store(
                        &slot,
                        &queue,
                        &informer,
                        &mapping,
                        &reconciled,
                        Priority::NORMAL,
                        &|_| true,
                    )
                    .await;
                }
            }
        }
    });
    (task, primed)
}

/// Enqueues every key of the reconciled kind's informer each `period`.
fn resync_every(
    period: Duration,
    informer: &Arc<Informer>,
    slot: Arc<PluginSlot>,
    queue: WorkQueue<ObjectKey>,
    for_kind: Gvk,
) -> tokio::task::JoinHandle<()> {
    let weak = Arc::downgrade(informer);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(informer) = weak.upgrade() else {
                break;
            };
            enqueue_resync(&slot, &queue, &informer, &for_kind, &|_| true).await;
        }
    })
}

/// Every key the plugin's informers of its reconciled kind hold, once
/// (after swaps): what to await once the plugins' lock is released, since
/// a resync of 100,000 keys takes tens of milliseconds.
pub(super) fn enqueue_all(entry: &PluginEntry) -> impl Future<Output = ()> + Send + use<> {
    enqueue_reconciled(entry, |_| true)
}

/// The keys of the reconciled kind that fall in the shards just `taken`,
/// at low priority as a first listing's: a shard taken over brings objects
/// this replica has not reconciled, not changes.
pub(super) fn enqueue_taken(
    entry: &PluginEntry,
    shards: Arc<Shards>,
    taken: BTreeSet<u32>,
) -> impl Future<Output = ()> + Send + use<> {
    enqueue_reconciled(entry, move |k| taken.contains(&shards.shard_of(k)))
}

fn enqueue_reconciled<F>(entry: &PluginEntry, wanted: F) -> impl Future<Output = ()> + Send + use<F>
where
    F: Fn(&ObjectKey) -> bool + Send + Sync + 'static,
{
    let for_kind = entry.slot().current().metadata().for_.clone();
    let queue = entry.controller().queue().clone();
    let slot = entry.slot().clone();
    let informers: Vec<Arc<Informer>> = entry
        .watched()
        .iter()
        .map(|w| &w.informer)
        .filter(|i| i.resource.group == for_kind.group && i.resource.kind == for_kind.kind)
        .cloned()
        .collect();
    async move {
        for informer in informers {
            enqueue_resync(&slot, &queue, &informer, &for_kind, &wanted).await;
        }
    }
}

/// Adds the key of every object of the reconciled kind `for_kind` that
/// `informer` holds (those `wanted` and `slot` admit), at low priority:
/// these are not changes, so events jump ahead of them (controller-runtime's
/// priority queue does the same for the initial list).
async fn enqueue_resync(
    slot: &PluginSlot,
    queue: &WorkQueue<ObjectKey>,
    informer: &Informer,
    for_kind: &Gvk,
    wanted: &(dyn Fn(&ObjectKey) -> bool + Sync),
) {
    enqueue_store(
        slot,
        queue,
        informer,
        &KeyMapping::Itself,
        for_kind,
        Priority::LOW,
        wanted,
    )
    .await;
}

/// Keys a bulk enqueue adds under one lock of the queue, between yields to
/// the runtime: a change that arrives during a resync of 100,000 keys is
/// queued (ahead of them) at once, instead of after the whole burst.
const ENQUEUE_BATCH: usize = 512;

/// Adds the key of every object `informer` holds, as `mapping` maps it
/// (those `wanted` and `slot` admit), at `priority`, a batch at a time.
async fn enqueue_store(
    slot: &PluginSlot,
    queue: &WorkQueue<ObjectKey>,
    informer: &Informer,
    mapping: &KeyMapping,
    reconciled: &Gvk,
    priority: Priority,
    wanted: &(dyn Fn(&ObjectKey) -> bool + Sync),
) {
    let objects = informer.objects();
    for batch in objects.chunks(ENQUEUE_BATCH) {
        let mut refused = 0;
        let keys: Vec<ObjectKey> = batch
            .iter()
            .flat_map(|o| {
                let mapped = keys(mapping, reconciled, o);
                refused += mapped.refused;
                mapped.keys
            })
            .filter(|k| wanted(k) && slot.admits(k))
            .collect();
        count_refused_owners(slot, refused);
        queue.add_all_with_priority(keys, priority);
        tokio::task::yield_now().await;
    }
}

/// Counts owner references an object named that mapped to no key
/// (`limit="ownerReferences"`): a name that is not an object name, or past
/// the most one object maps.
fn count_refused_owners(slot: &PluginSlot, refused: usize) {
    if refused > 0 {
        let plugin = slot.current();
        tracing::debug!(
            plugin = plugin.name(),
            refused,
            "owner references mapped to no key"
        );
        plugin.count_limits("ownerReferences", refused as u64);
    }
}

/// The first 20 of `items`, joined, and how many more (None when there are
/// none): a load error names what is missing without growing with it.
fn name_some(items: impl Iterator<Item = String>) -> Option<String> {
    const NAMED: usize = 20;
    let mut named = Vec::new();
    let mut more = 0usize;
    for item in items {
        if named.len() < NAMED {
            named.push(item);
        } else {
            more += 1;
        }
    }
    if named.is_empty() {
        return None;
    }
    let mut text = named.join(", ");
    if more > 0 {
        text.push_str(&format!(" and {more} more"));
    }
    Some(text)
}

/// The controller rate limiter of a plugin's config.
pub(super) fn rate_limiter(rl: &RateLimiterConfig) -> MaxOfRateLimiter<ObjectKey> {
    controller_rate_limiter(rl.base_delay, rl.max_delay, rl.qps, rl.burst)
}

/// Unloads the code of the slot's current version once no key reached it
/// for `idle` (checked every quarter of `idle`, within 10 ms … 30 s); the
/// informers and the queue are untouched, and the next key loads the code
/// again from the on-disk compiled cache.
fn unload_when_idle(
    name: &str,
    slot: Arc<PluginSlot>,
    idle: Duration,
) -> tokio::task::JoinHandle<()> {
    let name = name.to_string();
    let every = (idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(30));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let plugin = slot.current();
            if plugin.unload_if_idle(idle) {
                tracing::info!(plugin = %name, idle = ?idle, "idle: compiled code unloaded");
            }
        }
    })
}
