//! Plugins defined as Kubernetes objects: with `pluginsFrom: { kind:
//! WasmReconciler }` in the host config, every WasmReconciler object
//! (`deploy/crds/wasmreconciler.yaml`; group `wasmctrl.dev`, cluster-scoped)
//! is a plugin, named by the object, whose spec is a plugin entry of the
//! config ([`spec`]).
//!
//! # Through the manager's own paths
//! A controller of the host (a [`Controller`] on its own queue, one worker)
//! follows the objects through the shared informer cache: a new object is
//! [`Host::add_plugin`], an edit [`Host::rebuild_plugin`] (a new controller
//! on the same queue: keys, delays and backoff are kept), a delete
//! [`Host::remove_plugin`] (drained, then stopped). A moved tag or a
//! changed file is the plugin source's business, as for config plugins
//! ([`Host::reload_plugin`]); the object's status follows it.
//!
//! # What an object may not do
//! - take a name the host config uses (refused: `NameTaken`), or that
//!   another plugin holds;
//! - be granted more than the config's `maxGrant` (none without it):
//!   `GrantExceedsMaxGrant`, naming each access beyond it;
//! - ask for more API requests than `pluginsFrom.maxApiQps` (default
//!   `runtime.apiQps`) in `limits.apiQps`, or twice that in
//!   `limits.apiBurst`: `LimitsExceedMaxApiQps`, naming both numbers;
//! - make API requests outside the host's budget: every object plugin
//!   (whatever its `limits.apiQps`) and every config plugin without
//!   `limits.apiQps` draws from one bucket of `runtime.apiQps`, burst
//!   2 × that, besides its own. A config plugin with `limits.apiQps` is
//!   the config author's explicit choice and keeps only its own bucket;
//! - name files on the host (`file:`/`path:` sources need
//!   `pluginsFrom.allowFileSources`; `dockerConfig` is refused): registry
//!   credentials come only from its `imagePullSecret`, in
//!   `pluginsFrom.namespace`; without one, pulls are anonymous. The same
//!   holds for `spec.candidate`'s source, with its own `imagePullSecret`;
//!   the candidate has the plugin's grant, checked once;
//! - reach an address that is not public (loopback, where the admin
//!   endpoint listens; link-local, where cloud metadata answers; private
//!   and shared ones) from its `url` or `oci` source or its candidate's,
//!   unless `pluginsFrom.allowHosts` names the host: an address written in
//!   the spec is refused before anything connects (`SourceNotAllowed`,
//!   naming the entry that would allow it), a name resolving to one or a
//!   redirect to one when the source connects.
//!
//! # Candidates
//! `spec.candidate` runs a second version in shadow or as a canary, as in
//! the host config. Its state is in `status.candidate` (a rollback with its
//! reason, a promotion); promote for good by editing the spec (the
//! candidate's source becomes `spec.source`, `spec.candidate` goes), which
//! rebuilds the plugin; a `POST /plugins/{name}/promote` lasts until the
//! next rebuild.
//!
//! # Downloads hold no worker
//! Starting or rebuilding an object's plugin (a download, a compile) runs
//! as a task of its own ([`applying`]); a reconcile waits two seconds for it and
//! then lets its worker go, and the task queues the object again when it
//! ends. A download an object's author makes stall (a server that never
//! answers, up to the source's timeout) holds up no other object, however
//! many such objects there are. An edit stops the apply of the old spec,
//! a delete stops the apply.
//!
//! # Status
//! Written by the leader only ([`status`]): `observedGeneration`, the
//! serving digest and version, the digest the source last resolved to,
//! and `Ready`/`Degraded` conditions with the reason a version was refused
//! while the previous one keeps serving. A refused spec is not tried again
//! until the object changes, unless the refusal is transient (a registry
//! or Secret not reachable): then it is retried with backoff.

mod applying;
mod ceiling;
mod spec;
mod status;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use wasmctrl_apimachinery::time;

use super::lifecycle::PluginEntry;
use super::{Host, ManagerError};
use crate::config::{HostConfig, PluginConfig, PluginsFrom, SourceSpec};
use crate::control::controller::{Controller, ControllerOptions, TracingTerminalErrors, Workers};
use crate::control::discovery::Resolver;
use crate::control::informer::{Informer, InformerKey, Notification, SharedCache};
use crate::control::metrics::Metrics;
use crate::control::workqueue::WorkQueue;
use crate::control::workqueue::ratelimit::{BucketRateLimiter, controller_rate_limiter};
use crate::ops::source::{
    self, DiskCache, OciSource, PluginSource, PullSecret, Reach, SourceError, UrlSource, held,
};
use crate::sandbox::hostapi::{Gvk, PermissionRule};
use crate::{Action, ObjectKey, Reconcile, ReconcileError, ReconcileRequest};

use applying::Applying;
use spec::Refusal;
use spec::{GROUP, KIND, VERSION};
use status::{CandidateState, ObjectStatus, Serving};

/// The WasmReconciler CustomResourceDefinition (`wasmctrl dev` applies it
/// when the config sets `pluginsFrom`).
pub const CRD: &str = include_str!("../../../../deploy/crds/wasmreconciler.yaml");

/// The objects controller's name (metrics, logs): not a DNS label, so no
/// plugin can have it.
const CONTROLLER: &str = "wasmreconcilers.wasmctrl.dev";
/// The status writes' field manager.
const FIELD_MANAGER: &str = "wasmctrl";

/// The objects the host follows and what it knows of each.
pub(super) struct ObjectPlugins {
    /// `pluginsFrom`, its `maxApiQps` resolved (`runtime.apiQps` unset).
    from: PluginsFrom,
    /// The host's API budget (`runtime.apiQps`, burst twice that): object
    /// plugins are not counted in config plugins' shares of it, so they
    /// and the config plugins without a rate of their own draw from it
    /// together.
    api_budget: Arc<BucketRateLimiter>,
    /// The host config's `maxGrant` (None: object plugins get no grant).
    ceiling: Option<Vec<PermissionRule>>,
    /// Reads the objects' pull Secrets (unfenced: a standby loads plugins
    /// too).
    client: Client,
    /// Writes status (the plugins' client: fenced with leader election).
    api: Api<DynamicObject>,
    informer: Arc<Informer>,
    queue: WorkQueue<ObjectKey>,
    records: Mutex<BTreeMap<String, Record>>,
    /// Each object's plugin being started or rebuilt, off the workers.
    applying: Mutex<BTreeMap<String, Applying>>,
    /// What the objects' loads hold in memory together
    /// (`pluginsFrom.maxLoadingBytes`).
    loading: Arc<held::Budget>,
}

/// What the host knows of one object.
#[derive(Debug, Default)]
struct Record {
    /// The plugin of this name in the manager is this object's.
    owns: bool,
    /// Why the object's spec does not run, and the plugin config that was
    /// refused (None: refused before it was tried, e.g. an invalid spec).
    refused: Option<(Refusal, Option<PluginConfig>)>,
    /// The digest the source last fetched.
    resolved: Option<String>,
    /// The error a refused rebuild left on the running plugin: already said
    /// by `refused`, not a failed reload of the running version.
    rebuild_error: Option<String>,
}

/// Objects reconciled at once.
const OBJECT_WORKERS: usize = 4;
impl ObjectPlugins {
    /// With `pluginsFrom` set: checks the cluster serves WasmReconcilers
    /// (cluster-scoped) and starts their informer. None without it.
    /// `client` reads pull Secrets; `writer` writes status.
    pub(super) async fn start(
        config: &HostConfig,
        client: &Client,
        writer: &Client,
        resolver: &Resolver,
        cache: &SharedCache,
        metrics: &Arc<Metrics>,
    ) -> Result<Option<Self>, ManagerError> {
        let Some(from) = &config.plugins_from else {
            return Ok(None);
        };
        let gvk = Gvk::new(GROUP, VERSION, KIND);
        let resolved = resolver
            .resolve(&gvk)
            .await
            .map_err(|e| ManagerError::PluginsFrom {
                message: format!(
                    "{e}; install the CRD first: kubectl apply -f deploy/crds/wasmreconciler.yaml"
                ),
            })?;
        if resolved.namespaced {
            return Err(ManagerError::PluginsFrom {
                message: format!(
                    "{KIND} is namespaced in this cluster; its CRD (deploy/crds/wasmreconciler.yaml) makes it cluster-scoped"
                ),
            });
        }
        let resource = &resolved.resource;
        let informer = cache.informer(InformerKey::new(resource, None), resource.clone());
        let queue = WorkQueue::new(
            CONTROLLER,
            Box::new(controller_rate_limiter(
                Duration::from_millis(500),
                Duration::from_secs(300),
                10.0,
                100,
            )),
            metrics.queue(CONTROLLER),
        );
        let host_qps = config.runtime.api_qps;
        Ok(Some(Self {
            from: PluginsFrom {
                max_api_qps: Some(from.max_api_qps(&config.runtime)),
                ..from.clone()
            },
            api_budget: Arc::new(BucketRateLimiter::new(
                host_qps,
                (host_qps * 2.0).ceil().max(1.0) as u32,
            )),
            ceiling: config.max_grant.clone(),
            client: client.clone(),
            api: Api::all_with(writer.clone(), resource),
            informer,
            queue,
            records: Mutex::new(BTreeMap::new()),
            applying: Mutex::new(BTreeMap::new()),
            loading: held::Budget::new(
                from.max_loading_bytes,
                metrics.object_component_bytes.clone(),
            ),
        }))
    }

    fn owns(&self, name: &str) -> bool {
        self.records
            .lock()
            .unwrap()
            .get(name)
            .is_some_and(|r| r.owns)
    }

    fn set_owns(&self, name: &str, owns: bool) {
        self.records
            .lock()
            .unwrap()
            .entry(name.to_string())
            .or_default()
            .owns = owns;
    }

    fn enqueue_all(&self) {
        for object in self.informer.objects() {
            self.queue
                .add(ObjectKey::cluster(object.name().to_string()));
        }
    }
}

/// The objects controller while it runs.
pub(super) struct ObjectsRun {
    forward: tokio::task::JoinHandle<()>,
    workers: Workers<ObjectReconciler>,
    host: Weak<Host>,
}

impl ObjectsRun {
    /// Stops following the objects (their plugins are drained with the
    /// others), and starting or rebuilding their plugins.
    pub(super) async fn stop(self) {
        self.forward.abort();
        self.workers.shutdown(Duration::ZERO).await;
        if let Some(host) = self.host.upgrade()
            && let Some(objects) = &host.objects
        {
            objects.stop_all_applying();
        }
    }
}

/// Reconciles one WasmReconciler: the controller's reconciler.
pub(super) struct ObjectReconciler {
    host: Weak<Host>,
}

impl Reconcile for ObjectReconciler {
    async fn reconcile(&self, request: ReconcileRequest) -> Result<Action, ReconcileError> {
        let Some(host) = self.host.upgrade() else {
            return Ok(Action::done());
        };
        tokio::select! {
            result = host.reconcile_object(&request.key.name) => result,
            _ = request.cancel.cancelled() => Err(ReconcileError::Transient("the host is stopping".into())),
        }
    }
}

impl Host {
    /// Whether plugin `name` is a WasmReconciler object's.
    pub(super) fn owned_by_object(&self, name: &str) -> bool {
        self.objects.as_ref().is_some_and(|o| o.owns(name))
    }

    /// The host's API budget plugin `config` draws from besides its own
    /// bucket: with `pluginsFrom`, an object's plugin's and a config
    /// plugin's without `limits.apiQps`. Without `pluginsFrom` there is
    /// none: config plugins' default shares add up to `runtime.apiQps`.
    pub(super) fn shared_api_budget(
        &self,
        config: &PluginConfig,
    ) -> Option<Arc<BucketRateLimiter>> {
        let objects = self.objects.as_ref()?;
        (config.limits.api_qps.is_none() || objects.owns(&config.name))
            .then(|| objects.api_budget.clone())
    }

    /// Runs `load`, a load of plugin `name`, with what it holds charged to
    /// its object's budget (`pluginsFrom.maxLoadingBytes`); a config
    /// plugin's load is not charged.
    pub(super) async fn load_within_budget<F: std::future::Future>(
        &self,
        name: &str,
        load: F,
    ) -> F::Output {
        let budget = self
            .objects
            .as_ref()
            .filter(|objects| objects.owns(name))
            .map(|objects| objects.loading.clone());
        match budget {
            Some(budget) => held::holding(budget, load).await,
            None => load.await,
        }
    }

    /// The source of `config`. An object's `oci` source reads registry
    /// credentials only from its `imagePullSecret` (anonymous without one),
    /// never from the host's docker config. An object's `oci` and `url`
    /// sources connect only to public addresses and `pluginsFrom.allowHosts`:
    /// the spec's check refuses an internal address written in it, this one
    /// a name that resolves to one, or a redirect to one.
    pub(super) fn source_for(&self, config: &PluginConfig) -> Arc<dyn PluginSource> {
        let spec = config.source();
        let cache = || DiskCache::new(self.config.source_cache_dir());
        match (&self.objects, &spec) {
            (Some(objects), SourceSpec::Oci(oci)) if objects.owns(&config.name) => {
                let secret = config
                    .source
                    .as_ref()
                    .and_then(|s| s.image_pull_secret.clone());
                let credentials = PullSecret::new(
                    objects.client.clone(),
                    objects.from.namespace.clone(),
                    secret,
                );
                Arc::new(
                    OciSource::with_credentials(oci.clone(), cache(), Arc::new(credentials))
                        .reaching(Reach::for_objects(&objects.from)),
                )
            }
            (Some(objects), SourceSpec::Url(url)) if objects.owns(&config.name) => Arc::new(
                UrlSource::new(url.clone(), cache()).reaching(Reach::for_objects(&objects.from)),
            ),
            _ => source::from_config(&spec, &self.config, self.watcher.as_ref()).into(),
        }
    }

    /// Plugin `name`'s source fetched `digest` (its object's
    /// `resolvedDigest`, whether or not that version loads).
    pub(super) fn note_fetched(&self, name: &str, digest: &str) {
        if let Some(objects) = &self.objects
            && let Some(r) = objects.records.lock().unwrap().get_mut(name)
            && r.owns
        {
            r.resolved = Some(digest.to_string());
        }
    }

    /// Plugin `name` changed on its own (synced, swapped, a reload failed):
    /// its object's status follows.
    pub(super) fn plugin_changed(&self, name: &str) {
        if let Some((_, Some(registrar))) = self.webhook.get() {
            registrar.changed(name);
        }
        if let Some(objects) = &self.objects
            && objects.owns(name)
        {
            objects.queue.add(ObjectKey::cluster(name));
        }
    }

    /// Looks at every object again (a config reload may have freed a name).
    pub(super) fn resync_objects(&self) {
        if let Some(objects) = &self.objects {
            objects.enqueue_all();
        }
    }

    /// Starts following the objects, if `pluginsFrom` is set: on every host
    /// (a standby has the plugins loaded), writing status only while it
    /// leads.
    pub(super) fn run_objects(self: &Arc<Self>) -> Option<ObjectsRun> {
        let objects = self.objects.as_ref()?;
        let controller = Controller::new(
            ControllerOptions {
                name: CONTROLLER.into(),
                // Objects are independent (each its own plugin name), and a
                // reconcile may wait minutes on a download an object's
                // author chose: several at once, so that one stalled
                // download never holds up another team's loads, edits or
                // deletes. The same object is never reconciled twice at once.
                max_concurrent_reconciles: OBJECT_WORKERS,
                // A reconcile may pull and compile a component; it is
                // bounded by the source's own timeout.
                reconcile_timeout: Duration::from_secs(3600),
                max_retries: None,
            },
            objects.queue.clone(),
            ObjectReconciler {
                host: Arc::downgrade(self),
            },
            self.metrics.clone(),
            Arc::new(TracingTerminalErrors),
        );
        let workers = controller.start();
        let host = Arc::downgrade(self);
        let informer = objects.informer.clone();
        let mut events = informer.subscribe();
        let mut leader = self.leader.clone();
        let forward = tokio::spawn(async move {
            informer.wait_synced().await;
            let enqueue_all = || {
                if let Some(h) = host.upgrade()
                    && let Some(o) = &h.objects
                {
                    o.enqueue_all();
                }
            };
            enqueue_all();
            loop {
                tokio::select! {
                    n = events.next() => match n {
                        Some(Notification::Object(e)) => {
                            let Some(h) = host.upgrade() else {
                                continue;
                            };
                            if let Some(o) = &h.objects {
                                o.queue.add(ObjectKey::cluster(e.object.name().to_string()));
                            }
                        }
                        Some(Notification::Resync) => enqueue_all(),
                        None => break,
                    },
                    // A new leader writes every status.
                    changed = leader.changed() => match changed {
                        Ok(()) => enqueue_all(),
                        Err(_) => break,
                    },
                }
            }
        });
        Some(ObjectsRun {
            forward,
            workers,
            host: Arc::downgrade(self),
        })
    }

    /// Brings the plugin of object `name` in line with the object, and
    /// writes its status.
    async fn reconcile_object(self: &Arc<Self>, name: &str) -> Result<Action, ReconcileError> {
        let Some(objects) = &self.objects else {
            return Ok(Action::done());
        };
        // The cache keeps JSON; a WasmReconciler is read rarely enough to
        // parse it here.
        let object: Option<DynamicObject> = objects
            .informer
            .get(None, name)
            .map(|o| o.parse())
            .transpose()
            .map_err(|e| ReconcileError::Transient(format!("cached {KIND} {name:?}: {e}")))?;
        let Some(object) = object.filter(|o| o.metadata.deletion_timestamp.is_none()) else {
            // Deleted: what it was loading stops, and its plugin (if it ran
            // one) drains and stops.
            objects.stop_applying(name);
            let record = objects.records.lock().unwrap().remove(name);
            if record.is_some_and(|r| r.owns) {
                tracing::info!(plugin = name, "{KIND} deleted: draining its plugin");
                self.remove_plugin(name).await;
            }
            return Ok(Action::done());
        };
        let outcome = match spec::plugin_config(&object, &objects.from, objects.ceiling.as_deref())
        {
            Ok(config) => match self.apply_patiently(objects, config).await {
                Some(outcome) => outcome,
                // Still under way: it queues the object again when done.
                None => return Ok(Action::done()),
            },
            Err(refusal) => {
                objects.stop_applying(name);
                Err((refusal, None))
            }
        };
        let transient = match &outcome {
            Err((r, _)) => {
                tracing::warn!(
                    plugin = name,
                    reason = r.reason,
                    "{KIND} refused: {}",
                    r.message
                );
                self.metrics
                    .object_refusals
                    .get_or_create(&crate::control::metrics::ReasonLabel {
                        reason: r.reason.into(),
                    })
                    .inc();
                r.transient.then(|| r.to_string())
            }
            Ok(()) => None,
        };
        objects
            .records
            .lock()
            .unwrap()
            .entry(name.to_string())
            .or_default()
            .refused = outcome.err();
        self.write_object_status(objects, &object).await?;
        match transient {
            Some(message) => Err(ReconcileError::Transient(message)),
            None => Ok(Action::done()),
        }
    }

    /// Starts, rebuilds or keeps the object's plugin `config`.
    async fn apply_object(
        self: &Arc<Self>,
        objects: &ObjectPlugins,
        config: PluginConfig,
    ) -> Result<(), (Refusal, Option<PluginConfig>)> {
        let name = config.name.clone();
        let refused_before = objects
            .records
            .lock()
            .unwrap()
            .get(&name)
            .and_then(|r| r.refused.clone());
        if let Some((r, Some(tried))) = refused_before
            && tried == config
            && !r.transient
        {
            return Err((r, Some(tried)));
        }
        let running = self
            .plugins
            .lock()
            .unwrap()
            .get(&name)
            .map(|e| e.config().clone());
        // A config plugin still loading (or refused) holds its name too.
        let held_by_config = self.is_pending(&name);
        match running {
            Some(_) if !objects.owns(&name) => Err((
                Refusal::new(
                    "NameTaken",
                    format!(
                        "the host config already runs a plugin named {name:?}; a plugin name is taken once"
                    ),
                ),
                None,
            )),
            None if held_by_config => Err((
                Refusal::new(
                    "NameTaken",
                    format!(
                        "the host config has a plugin named {name:?} (not loaded yet); a plugin name is taken once"
                    ),
                )
                .transient(),
                None,
            )),
            None => {
                objects.set_owns(&name, true);
                self.add_plugin(config.clone()).await.map_err(|e| {
                    objects.set_owns(&name, false);
                    (refusal_of(&e), Some(config))
                })
            }
            Some(old) if old != config => {
                self.rebuild_plugin(&old, config.clone())
                    .await
                    .map_err(|e| {
                        if let Some(r) = objects.records.lock().unwrap().get_mut(&name) {
                            r.rebuild_error = Some(e.to_string());
                        }
                        (refusal_of(&e), Some(config))
                    })
            }
            Some(_) => Ok(()),
        }
    }

    /// Writes the status of `object` if this host leads and it changed.
    async fn write_object_status(
        &self,
        objects: &ObjectPlugins,
        object: &DynamicObject,
    ) -> Result<(), ReconcileError> {
        if !*self.leader.borrow() {
            return Ok(());
        }
        let name = object.metadata.name.clone().unwrap_or_default();
        let (refusal, resolved, rebuild_error, owns) = {
            let records = objects.records.lock().unwrap();
            let r = records.get(&name);
            (
                r.and_then(|r| r.refused.as_ref().map(|(r, _)| r.clone())),
                r.and_then(|r| r.resolved.clone()),
                r.and_then(|r| r.rebuild_error.clone()),
                r.is_some_and(|r| r.owns),
            )
        };
        let serving = if owns {
            self.plugins
                .lock()
                .unwrap()
                .get(&name)
                .map(|e| serving_of(e, rebuild_error.as_deref()))
        } else {
            None
        };
        let previous: ObjectStatus = object
            .data
            .get("status")
            .and_then(|s| serde_json::from_value(s.clone()).ok())
            .unwrap_or_default();
        let status = ObjectStatus::new(
            object.metadata.generation,
            serving.as_ref(),
            refusal.as_ref(),
            resolved.as_deref(),
            &previous,
            &time::format_seconds(SystemTime::now()),
        );
        if status == previous {
            return Ok(());
        }
        let patch = serde_json::json!({ "status": status });
        match objects
            .api
            .patch_status(
                &name,
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => Ok(()),
            // Deleted meanwhile: its delete event follows.
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(ReconcileError::Transient(format!(
                "cannot write the status of {KIND} {name}: {e}"
            ))),
        }
    }
}

/// The object's plugin as the manager runs it. `rebuild_error` is the
/// error a refused rebuild left on it (said by the refusal already).
fn serving_of(entry: &PluginEntry, rebuild_error: Option<&str>) -> Serving {
    let plugin = entry.slot().current();
    let lifecycle = entry.lifecycle();
    Serving {
        digest: plugin.digest().to_string(),
        version: plugin.metadata().version.clone(),
        origin: entry.source().origin(),
        state: lifecycle.state().as_str(),
        synced: lifecycle.synced(),
        generation: lifecycle.generation(),
        last_error: lifecycle
            .last_error()
            .filter(|e| Some(*e) != rebuild_error)
            .map(str::to_string),
        candidate: entry.slot().candidate().map(|(candidate, mode)| {
            let canary = entry.slot().canary_status();
            CandidateState {
                mode: mode.into(),
                state: canary
                    .as_ref()
                    .map_or_else(|| mode.to_string(), |c| c.state.clone()),
                reason: canary.as_ref().and_then(|c| c.reason.clone()),
                decided_at: canary.and_then(|c| c.decided_at),
                digest: candidate.digest().to_string(),
                version: candidate.metadata().version.clone(),
                source: candidate.origin().to_string(),
            }
        }),
    }
}

/// Why loading an object's plugin failed, as a condition reason; failures
/// of the network, a registry or a Secret are transient.
fn refusal_of(e: &ManagerError) -> Refusal {
    let reason = match e {
        ManagerError::Source(
            SourceError::Download { .. }
            | SourceError::Timeout { .. }
            | SourceError::Unavailable { .. }
            | SourceError::Busy { .. }
            | SourceError::Credentials { .. }
            | SourceError::Read { .. },
        ) => return Refusal::new("SourceUnavailable", e.to_string()).transient(),
        ManagerError::Kind { .. } => {
            return Refusal::new("KindNotServed", e.to_string()).transient();
        }
        // Its source's rule refused where it led (a name resolving to an
        // internal address, a redirect): the same fetch leads there again.
        ManagerError::Source(SourceError::NotAllowed { .. }) => "SourceNotAllowed",
        ManagerError::Source(_) => "SourceRefused",
        ManagerError::PermissionsExceedGrant { .. }
        | ManagerError::WatchesExceedGrant { .. }
        | ManagerError::OutboundExceedsGrant { .. } => "PermissionsNotGranted",
        ManagerError::Engine { .. } => "EngineLimits",
        // Taken by a config plugin meanwhile: the config may free it.
        ManagerError::NameTaken { .. } => {
            return Refusal::new("NameTaken", e.to_string()).transient();
        }
        _ => "LoadFailed",
    };
    Refusal::new(reason, e.to_string())
}
