//! The `kube` imports served by a real API server (a cluster or the
//! embedded one).
//!
//! # One order for every call
//! 1. every string is checked against Kubernetes syntax (`validate`);
//! 2. the kind is resolved through discovery;
//! 3. the plugin's grant is checked against the *resolved* group and
//!    resource (`<plural>/status` for status writes — the only subresource
//!    the WIT names);
//! 4. the call is served: reads of watched kinds from the shared cache,
//!    everything else from the API server under the plugin's API rate limit;
//! 5. it is counted in `wasmctrl_hostapi_calls_total`.
//!
//! A refusal at 1–3 never reaches the API server.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType, Recorder, Reporter};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde_json::value::RawValue;

use super::answer::object_answer;
use super::body;
use super::grant::{Access, Grant};
use super::{
    ApiError, Event, EventType, Gvk, KubeApi, KubeRequest, KubeResponse, ObjectPatch, check_size,
};
use crate::control::discovery::{Resolved, Resolver};
use crate::control::informer::{CachedObject, InformerKey, SharedCache};
use crate::control::leader::Fence;
use crate::control::metrics::{HostApiLabels, Metrics, PluginLabel};
use crate::control::workqueue::ratelimit::BucketRateLimiter;
use crate::meta::selector::LabelSelector;
use crate::meta::syntax::{self as validate, Invalid};

/// Objects larger than this are refused in both directions.
pub const MAX_PAYLOAD: usize = 4 << 20;
/// Bytes of a label selector.
const MAX_SELECTOR: usize = 4096;
/// Kubernetes' limits on an event's fields (events.k8s.io/v1).
const MAX_EVENT_REASON: usize = 128;
const MAX_EVENT_ACTION: usize = 128;
const MAX_EVENT_NOTE: usize = 1024;
/// The `resource` label of a call refused before its kind was resolved:
/// guest strings never become metric labels.
const UNRESOLVED: &str = "<unresolved>";

/// Per-plugin ceilings of the host API.
#[derive(Debug, Clone)]
pub struct ApiLimits {
    /// Bytes of one `list` result (all objects' JSON together).
    pub list_bytes: usize,
    /// Requests per second to the API server (cache reads are free).
    pub qps: f64,
    /// Requests that may be made at once above `qps`.
    pub burst: u32,
    /// The host's API budget (`runtime.apiQps`) this plugin draws from
    /// besides its own `qps`, together with the other plugins sharing it:
    /// a request waits for both. None: its own bucket only.
    pub shared: Option<Arc<BucketRateLimiter>>,
}

impl Default for ApiLimits {
    fn default() -> Self {
        Self {
            list_bytes: 16 << 20,
            qps: 50.0,
            burst: 100,
            shared: None,
        }
    }
}

/// Why a request of a sharded reconcile was not sent.
const SHARD_LOST: &str = "this replica no longer surely holds the shard of the key being reconciled (its Lease was not renewed in time or was given away); the request was not sent";

/// What every plugin's [`ClusterApi`] shares: the client plugins' requests
/// go through, discovery, the informer cache, metrics and the leader fence.
#[derive(Clone)]
pub struct ClusterContext {
    pub client: Client,
    pub resolver: Arc<Resolver>,
    pub cache: Arc<SharedCache>,
    pub metrics: Arc<Metrics>,
    pub fence: Fence,
}

/// One plugin's view of the API server.
pub struct ClusterApi {
    plugin: String,
    client: Client,
    resolver: Arc<Resolver>,
    cache: Arc<SharedCache>,
    grant: Grant,
    metrics: Arc<Metrics>,
    recorder: Recorder,
    limits: ApiLimits,
    /// The plugin's API rate limit: a token bucket with reservations.
    bucket: BucketRateLimiter,
    /// Open while this host is the leader (always, without election).
    fence: Fence,
    counters: CallCounters,
}

/// The `wasmctrl_hostapi_calls_total` counters one plugin has counted on,
/// by resource, then verb and code: a call bumps its counter without
/// building the family's four-string label set. As many as the family
/// holds for the plugin (the resources the cluster serves, and
/// `<unresolved>`).
#[derive(Default)]
struct CallCounters(Mutex<HashMap<Box<str>, Vec<CallCounter>>>);

/// One verb and code's counter of a resource's calls.
struct CallCounter {
    verb: &'static str,
    code: &'static str,
    counter: Counter,
}

impl CallCounters {
    /// Adds one to `family`'s counter of these labels.
    fn inc(
        &self,
        family: &Family<HostApiLabels, Counter>,
        plugin: &str,
        verb: &'static str,
        resource: &str,
        code: &'static str,
    ) {
        let mut counters = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let known = counters
            .get(resource)
            .and_then(|c| c.iter().find(|c| c.verb == verb && c.code == code));
        if let Some(known) = known {
            known.counter.inc();
            return;
        }
        // A clone shares the family's value.
        let counter = family
            .get_or_create(&HostApiLabels {
                plugin: plugin.into(),
                verb: verb.into(),
                resource: resource.into(),
                code: code.into(),
            })
            .clone();
        counter.inc();
        counters
            .entry(resource.into())
            .or_default()
            .push(CallCounter {
                verb,
                code,
                counter,
            });
    }
}

impl ClusterApi {
    pub fn new(plugin: &str, context: &ClusterContext, grant: Grant, limits: ApiLimits) -> Self {
        let ClusterContext {
            client,
            resolver,
            cache,
            metrics,
            fence,
        } = context.clone();
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: format!("wasmctrl/{plugin}"),
                instance: std::env::var("HOSTNAME").ok(),
            },
        );
        Self {
            plugin: plugin.into(),
            client,
            resolver,
            cache,
            grant,
            metrics,
            recorder,
            bucket: BucketRateLimiter::new(limits.qps, limits.burst),
            limits,
            fence,
            counters: CallCounters::default(),
        }
    }

    /// The grant every call of this plugin is checked against.
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    fn count(&self, verb: &'static str, resource: &str, code: &'static str) {
        self.counters.inc(
            &self.metrics.hostapi_calls,
            &self.plugin,
            verb,
            resource,
            code,
        );
    }

    fn limit_exceeded(&self, limit: &str) {
        self.metrics.count_limit(&self.plugin, limit);
    }

    /// Refuses a call whose strings are not Kubernetes syntax.
    fn refuse_invalid(&self, verb: &'static str, e: Invalid) -> ApiError {
        self.count(verb, UNRESOLVED, "invalid");
        ApiError::Invalid(e.to_string())
    }

    /// Waits for the plugin's API rate limit and the host's API budget it
    /// shares, if any (bounded by `deadline`: a wait past it is refused and
    /// takes no token), and refuses when this host is not (or no longer
    /// surely) the leader.
    async fn throttle(&self, deadline: Instant) -> Result<(), ApiError> {
        if !self.fence.is_open() {
            return Err(ApiError::Unavailable(
                "this host is not the leader (its lease was not renewed in time); the request was not sent".into(),
            ));
        }
        if !crate::control::shard::request_allowed() {
            return Err(ApiError::Unavailable(SHARD_LOST.into()));
        }
        let label = PluginLabel {
            plugin: self.plugin.clone(),
        };
        self.metrics.api_requests.get_or_create(&label).inc();
        let shared = self.limits.shared.as_deref();
        let wait = match self.bucket.reserve_with(shared, |wait| {
            wait <= deadline.saturating_duration_since(Instant::now())
        }) {
            Ok(wait) if wait.is_zero() => return Ok(()),
            Ok(wait) => wait,
            Err((held_by, _)) => {
                self.limit_exceeded("apiQps");
                let message = match (held_by, shared) {
                    (crate::control::workqueue::ratelimit::HeldBy::Shared, Some(host)) => format!(
                        "the host's API budget, which this plugin shares with the host's other plugins (runtime.apiQps: {} requests/s, burst {}), would delay this call past the reconcile's deadline",
                        host.qps(),
                        host.burst()
                    ),
                    _ => format!(
                        "the plugin's API rate limit ({} requests/s, burst {}) would delay this call past the reconcile's deadline",
                        self.limits.qps, self.limits.burst
                    ),
                };
                return Err(ApiError::Timeout(message));
            }
        };
        self.metrics
            .api_throttled_seconds
            .get_or_create(&label)
            .inc_by(wait.as_secs_f64());
        tokio::time::sleep(wait).await;
        if !self.fence.is_open() {
            return Err(ApiError::Unavailable(
                "this host stopped being the leader while the request waited".into(),
            ));
        }
        if !crate::control::shard::request_allowed() {
            return Err(ApiError::Unavailable(SHARD_LOST.into()));
        }
        Ok(())
    }

    async fn serve(
        &self,
        request: KubeRequest,
        deadline: Instant,
        counted: bool,
    ) -> Result<KubeResponse, ApiError> {
        if let KubeRequest::RecordEvent(event) = request {
            return self.record_event(event, deadline).await;
        }
        let verb = request.verb();
        let call = self.check_call(&request, counted).await?;
        let result = self
            .execute(request, &call.resolved, call.namespace.as_deref(), deadline)
            .await;
        if counted {
            self.count(verb, call.resource(), code(&result));
        }
        result
    }

    /// Every check a call passes before it is served, in order: the
    /// body's size, the strings' syntax, the kind's resolution and the
    /// grant. A refusal is counted (when `counted`) and returned; what is
    /// admitted comes back resolved, with the namespace the call is in.
    async fn check_call(
        &self,
        request: &KubeRequest,
        counted: bool,
    ) -> Result<CheckedCall, ApiError> {
        let verb = request.verb();
        let count = |resource: &str, code: &'static str| {
            if counted {
                self.count(verb, resource, code);
            }
        };
        // Before anything reads it: the body's size is the one bound that
        // does not depend on what it says.
        request.check_payload().inspect_err(|_| {
            count(UNRESOLVED, "invalid");
            self.limit_exceeded("payload");
        })?;
        request.check_nesting().inspect_err(|_| {
            count(UNRESOLVED, "invalid");
            self.limit_exceeded("nesting");
        })?;
        let target = Target::of(request);
        target.validate().map_err(|e| {
            count(UNRESOLVED, "invalid");
            ApiError::Invalid(e.to_string())
        })?;
        let resolved = self.resolver.resolve(target.kind).await.map_err(|e| {
            count(UNRESOLVED, "invalid");
            ApiError::Invalid(e.to_string())
        })?;
        let ar = &resolved.resource;
        let namespace = target
            .namespace
            .filter(|_| resolved.namespaced)
            .map(str::to_string);
        if resolved.namespaced
            && namespace.is_none()
            && !matches!(request, KubeRequest::List { .. })
        {
            count(&ar.plural, "invalid");
            return Err(ApiError::Invalid(format!(
                "{} is namespaced: the call needs a namespace",
                ar.plural
            )));
        }
        let status_resource = target.status.then(|| format!("{}/status", ar.plural));
        let call = CheckedCall {
            resolved,
            namespace,
            status_resource,
        };
        let access = Access {
            verb,
            group: &call.resolved.resource.group,
            resource: call.resource(),
            namespace: call.namespace.as_deref(),
        };
        if !self.grant.allows(&access) {
            count(call.resource(), "forbidden");
            tracing::warn!(plugin = %self.plugin, %access, "host API call denied by the plugin's grant");
            return Err(ApiError::Forbidden(format!(
                "plugin {:?} is not granted {access}",
                self.plugin
            )));
        }
        Ok(call)
    }

    async fn execute(
        &self,
        request: KubeRequest,
        resolved: &Resolved,
        namespace: Option<&str>,
        deadline: Instant,
    ) -> Result<KubeResponse, ApiError> {
        let ar = &resolved.resource;
        // Built only by the calls that go to the API server: a cached read
        // needs neither a client nor a URL.
        let api = || -> Api<DynamicObject> {
            match namespace {
                Some(ns) => Api::namespaced_with(self.client.clone(), ns, ar),
                None => Api::all_with(self.client.clone(), ar),
            }
        };
        // Reads of watched kinds come from the cache (once it has synced).
        let cached = |ns: Option<&str>| {
            self.cache
                .existing_of(ar, ns)
                .or_else(|| self.cache.existing_of(ar, None))
                .filter(|i| i.is_synced())
        };
        match request {
            KubeRequest::Get { name, .. } => {
                if let Some(informer) = cached(namespace) {
                    return match informer.get(namespace, &name) {
                        Some(o) => Ok(KubeResponse::Object(self.cached_json(&o)?)),
                        None => Err(ApiError::NotFound(format!(
                            "{} {name:?} not found",
                            ar.plural
                        ))),
                    };
                }
                self.throttle(deadline).await?;
                let req = request_of(ar, namespace).get(&name, &Default::default());
                self.object_text(req, "get").await
            }
            KubeRequest::List { label_selector, .. } => {
                let selector = label_selector
                    .as_deref()
                    .map(|s| LabelSelector::parse(s).map_err(ApiError::Invalid))
                    .transpose()?;
                let mut list = ListJson::new(self.limits.list_bytes);
                if let Some(informer) = cached(namespace) {
                    for o in informer.objects() {
                        let in_namespace = namespace.is_none() || o.namespace() == namespace;
                        let selected = selector
                            .as_ref()
                            .is_none_or(|s| s.matches_by(|k| o.label(k)));
                        if in_namespace && selected {
                            list.push_json(self.cached_json(&o)?)
                                .map_err(|e| self.list_too_big(e))?;
                        }
                    }
                    return Ok(KubeResponse::Objects(list.objects));
                }
                self.throttle(deadline).await?;
                let mut lp = ListParams::default();
                if let Some(s) = &selector {
                    lp = lp.labels(&s.to_string());
                }
                let found = api().list(&lp).await.map_err(map_error)?;
                let options = self.cache.options();
                for mut o in found.items {
                    options.trim(&mut o);
                    list.push(&o).map_err(|e| self.list_too_big(e))?;
                }
                Ok(KubeResponse::Objects(list.objects))
            }
            KubeRequest::Create { object, .. } => {
                let body = write_body(object, ar, namespace)?;
                self.throttle(deadline).await?;
                let req = request_of(ar, namespace).create(&PostParams::default(), body);
                self.object_text(req, "create").await
            }
            KubeRequest::Replace { name, object, .. } => {
                let body = write_body(object, ar, namespace)?;
                self.throttle(deadline).await?;
                let req = request_of(ar, namespace).replace(&name, &PostParams::default(), body);
                self.object_text(req, "replace").await
            }
            KubeRequest::ReplaceStatus { name, object, .. } => {
                let body = write_body(object, ar, namespace)?;
                self.throttle(deadline).await?;
                let req = request_of(ar, namespace).replace_subresource(
                    "status",
                    &name,
                    &PostParams::default(),
                    body,
                );
                self.object_text(req, "replace_subresource").await
            }
            KubeRequest::Patch { name, patch, .. } => {
                let (params, patch) = to_patch(&self.plugin, patch, ar)?;
                self.throttle(deadline).await?;
                let req = patch.request(request_of(ar, namespace), &name, None, &params);
                self.object_text(req, "patch").await
            }
            KubeRequest::PatchStatus { name, patch, .. } => {
                let (params, patch) = to_patch(&self.plugin, patch, ar)?;
                self.throttle(deadline).await?;
                let req = patch.request(request_of(ar, namespace), &name, Some("status"), &params);
                self.object_text(req, "patch_subresource").await
            }
            KubeRequest::Delete { name, .. } => {
                self.throttle(deadline).await?;
                api()
                    .delete(&name, &DeleteParams::background())
                    .await
                    .map_err(map_error)?;
                Ok(KubeResponse::Empty)
            }
            KubeRequest::RecordEvent(_) => unreachable!("handled before resolution"),
        }
    }

    /// Sends a request whose answer is one object and hands the guest the
    /// API server's JSON as it came (within the response limit, an object;
    /// less managedFields when the host drops them: `answer.rs`), instead
    /// of parsing it into a tree and serialising that again: the
    /// guest parses it anyway, and that round trip is 6–8% of a `throughput`
    /// host's profile samples (docs/BENCHMARKS.md). A request that cannot
    /// be built is the guest's `invalid`. `what` names the request as kube-rs
    /// names its own (its tracing layer reads it).
    async fn object_text(
        &self,
        req: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
        what: &'static str,
    ) -> Result<KubeResponse, ApiError> {
        let mut req = req.map_err(|e| ApiError::Invalid(e.to_string()))?;
        req.extensions_mut().insert(what);
        let text = self.client.request_text(req).await.map_err(map_error)?;
        self.answer_within_limit(&text)?;
        let strip = self.cache.options().strip_managed_fields;
        let answer = object_answer(text, strip).map_err(|e| ApiError::Other(e.to_string()))?;
        Ok(KubeResponse::Object(answer))
    }

    /// A cached object's JSON for the guest, within the payload ceiling.
    fn cached_json(&self, o: &CachedObject) -> Result<String, ApiError> {
        self.answer_within_limit(o.json())?;
        Ok(o.json().to_string())
    }

    /// Refuses (and counts) an answer over the payload ceiling: neither the
    /// kube-apiserver (1.5 MiB in etcd) nor the embedded one (3 MiB) stores
    /// such an object, so only a misbehaving API server sends one.
    fn answer_within_limit(&self, json: &str) -> Result<(), ApiError> {
        within_response_limit(json).inspect_err(|_| self.limit_exceeded("payload"))
    }

    fn list_too_big(&self, e: ApiError) -> ApiError {
        self.limit_exceeded("listBytes");
        e
    }

    /// An event's strings and the grant to create events, checked.
    fn check_event(&self, event: &Event) -> Result<(), ApiError> {
        let checked = (|| {
            validate::gvk(&event.regarding_kind)?;
            if let Some(ns) = &event.regarding_namespace {
                validate::namespace(ns)?;
            }
            validate::object_name("regarding name", &event.regarding_name)?;
            validate::printable("reason", &event.reason, MAX_EVENT_REASON)?;
            validate::printable("action", &event.action, MAX_EVENT_ACTION)?;
            validate::text("note", &event.note, MAX_EVENT_NOTE)
        })();
        checked.map_err(|e| self.refuse_invalid("create", e))?;
        let access = Access {
            verb: "create",
            group: "events.k8s.io",
            resource: "events",
            namespace: event.regarding_namespace.as_deref(),
        };
        if !self.grant.allows(&access) {
            self.count("create", "events", "forbidden");
            return Err(ApiError::Forbidden(format!(
                "plugin {:?} is not granted {access}",
                self.plugin
            )));
        }
        Ok(())
    }

    async fn record_event(
        &self,
        event: Event,
        deadline: Instant,
    ) -> Result<KubeResponse, ApiError> {
        self.check_event(&event)?;
        let kind = &event.regarding_kind;
        // The uid lets `kubectl describe` show the event on the object; it
        // is read only where the plugin may read the object itself.
        let uid = match self.resolver.resolve(kind).await {
            Ok(resolved) => {
                let namespace = event
                    .regarding_namespace
                    .as_deref()
                    .filter(|_| resolved.namespaced);
                let may_read = self.grant.allows(&Access {
                    verb: "get",
                    group: &resolved.resource.group,
                    resource: &resolved.resource.plural,
                    namespace,
                });
                if may_read {
                    self.regarding_uid(&resolved, namespace, &event.regarding_name, deadline)
                        .await
                } else {
                    None
                }
            }
            Err(_) => None,
        };
        let reference = ObjectReference {
            api_version: Some(kind.api_version()),
            kind: Some(kind.kind.clone()),
            name: Some(event.regarding_name.clone()),
            namespace: event.regarding_namespace.clone(),
            uid,
            ..ObjectReference::default()
        };
        let ev = KubeEvent {
            type_: match event.type_ {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: event.reason,
            note: Some(event.note),
            action: event.action,
            secondary: None,
        };
        self.throttle(deadline).await?;
        let result = self
            .recorder
            .publish(&ev, &reference)
            .await
            .map(|_| KubeResponse::Empty)
            .map_err(map_error);
        self.count("create", "events", code(&result));
        result
    }

    /// The uid of the object an event is about, from the cache when it is
    /// watched.
    async fn regarding_uid(
        &self,
        resolved: &Resolved,
        namespace: Option<&str>,
        name: &str,
        deadline: Instant,
    ) -> Option<String> {
        let key = InformerKey::new(&resolved.resource, namespace);
        let informer = self
            .cache
            .existing(&key)
            .or_else(|| {
                self.cache
                    .existing(&InformerKey::new(&resolved.resource, None))
            })
            .filter(|i| i.is_synced());
        if let Some(informer) = informer {
            return informer.get(namespace, name)?.uid().map(str::to_string);
        }
        self.throttle(deadline).await.ok()?;
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resolved.resource),
            None => Api::all_with(self.client.clone(), &resolved.resource),
        };
        api.get_opt(name).await.ok().flatten()?.metadata.uid
    }

    /// Records a terminal reconcile error as a Warning event on the object
    /// (host-side, not subject to the plugin's grant).
    pub async fn record_terminal_error(&self, kind: &Gvk, key: &crate::ObjectKey, message: &str) {
        let reference = ObjectReference {
            api_version: Some(kind.api_version()),
            kind: Some(kind.kind.clone()),
            name: Some(key.name.clone()),
            namespace: key.namespace.clone(),
            ..ObjectReference::default()
        };
        let ev = KubeEvent {
            type_: KubeEventType::Warning,
            reason: "ReconcileFailed".into(),
            note: Some(truncate(message, MAX_EVENT_NOTE)),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &reference).await {
            tracing::warn!(plugin = %self.plugin, %key, "cannot record the terminal error as an event: {e}");
        }
    }
}

impl KubeApi for ClusterApi {
    fn call(
        &self,
        request: KubeRequest,
        deadline: Instant,
    ) -> BoxFuture<'_, Result<KubeResponse, ApiError>> {
        Box::pin(async move {
            if Instant::now() >= deadline {
                return Err(ApiError::Timeout(
                    "the reconcile's deadline has passed".into(),
                ));
            }
            self.serve(request, deadline, true).await
        })
    }

    fn peek(
        &self,
        request: KubeRequest,
        deadline: Instant,
    ) -> BoxFuture<'_, Result<KubeResponse, ApiError>> {
        Box::pin(async move {
            if !matches!(request, KubeRequest::Get { .. } | KubeRequest::List { .. }) {
                return Err(ApiError::Invalid(format!(
                    "the host only peeks with reads, not {}",
                    request.verb()
                )));
            }
            if Instant::now() >= deadline {
                return Err(ApiError::Timeout(
                    "the reconcile's deadline has passed".into(),
                ));
            }
            self.serve(request, deadline, false).await
        })
    }

    fn admit<'a>(&'a self, request: &'a KubeRequest) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move {
            if let KubeRequest::RecordEvent(event) = request {
                return self.check_event(event);
            }
            self.check_call(request, true).await.map(|_| ())
        })
    }
}

/// A call that passed [`ClusterApi::check_call`]: its kind resolved, the
/// namespace it is in, and for a status write its `<plural>/status`.
struct CheckedCall {
    resolved: Arc<Resolved>,
    namespace: Option<String>,
    status_resource: Option<String>,
}

impl CheckedCall {
    /// The resource the grant was checked for and the call is counted as.
    fn resource(&self) -> &str {
        self.status_resource
            .as_deref()
            .unwrap_or(&self.resolved.resource.plural)
    }
}

/// What a call addresses, taken from the request for validation.
struct Target<'a> {
    kind: &'a Gvk,
    namespace: Option<&'a str>,
    name: Option<&'a str>,
    selector: Option<&'a str>,
    /// The status subresource.
    status: bool,
}

impl<'a> Target<'a> {
    fn of(request: &'a KubeRequest) -> Self {
        let t = |kind, namespace: &'a Option<String>, name: Option<&'a String>, status| Target {
            kind,
            namespace: namespace.as_deref(),
            name: name.map(String::as_str),
            selector: None,
            status,
        };
        match request {
            KubeRequest::Get {
                kind,
                namespace,
                name,
            }
            | KubeRequest::Replace {
                kind,
                namespace,
                name,
                ..
            }
            | KubeRequest::Patch {
                kind,
                namespace,
                name,
                ..
            }
            | KubeRequest::Delete {
                kind,
                namespace,
                name,
            } => t(kind, namespace, Some(name), false),
            KubeRequest::ReplaceStatus {
                kind,
                namespace,
                name,
                ..
            }
            | KubeRequest::PatchStatus {
                kind,
                namespace,
                name,
                ..
            } => t(kind, namespace, Some(name), true),
            KubeRequest::Create {
                kind, namespace, ..
            } => t(kind, namespace, None, false),
            KubeRequest::List {
                kind,
                namespace,
                label_selector,
            } => Target {
                selector: label_selector.as_deref(),
                ..t(kind, namespace, None, false)
            },
            KubeRequest::RecordEvent(_) => unreachable!("events are validated on their own"),
        }
    }

    fn validate(&self) -> Result<(), Invalid> {
        validate::gvk(self.kind)?;
        if let Some(ns) = self.namespace {
            validate::namespace(ns)?;
        }
        if let Some(name) = self.name {
            validate::object_name("name", name)?;
        }
        if let Some(s) = self.selector
            && s.len() > MAX_SELECTOR
        {
            return Err(Invalid {
                field: "label selector",
                message: format!("is {} bytes; at most {MAX_SELECTOR} are allowed", s.len()),
            });
        }
        Ok(())
    }
}

/// A list's objects as JSON, refused once they pass `limit` bytes together.
struct ListJson {
    objects: Vec<String>,
    bytes: usize,
    limit: usize,
}

impl ListJson {
    fn new(limit: usize) -> Self {
        Self {
            objects: Vec::new(),
            bytes: 0,
            limit,
        }
    }

    fn push<T: serde::Serialize>(&mut self, o: &T) -> Result<(), ApiError> {
        self.push_json(to_json(o)?)
    }

    fn push_json(&mut self, json: String) -> Result<(), ApiError> {
        self.bytes += json.len();
        if self.bytes > self.limit {
            return Err(ApiError::Invalid(format!(
                "the list result exceeds the plugin's limit of {} bytes (limits.listBytes) after {} objects; narrow it with a namespace or a label selector",
                self.limit,
                self.objects.len()
            )));
        }
        self.objects.push(json);
        Ok(())
    }
}

/// How much of a guest's string an error message quotes back: enough to
/// recognise it, never the payload itself.
const ECHO: usize = 96;

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

fn code(result: &Result<KubeResponse, ApiError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(e) => e.code(),
    }
}

fn to_json<T: serde::Serialize>(o: &T) -> Result<String, ApiError> {
    let s = serde_json::to_string(o).map_err(|e| ApiError::Other(e.to_string()))?;
    within_response_limit(&s)?;
    Ok(s)
}

/// The request builder of `resource` in `namespace` (None: cluster-wide or
/// all namespaces; the URL path `Api::resource_url` would give), for
/// requests whose answer the host passes on as text. Building an `Api`
/// instead would clone the client for one request.
fn request_of(resource: &kube::api::ApiResource, namespace: Option<&str>) -> kube::core::Request {
    use kube::Resource as _;
    kube::core::Request::new(DynamicObject::url_path(resource, namespace))
}

/// Refuses a response the guest must not be handed.
fn within_response_limit(json: &str) -> Result<(), ApiError> {
    check_size(json).map_err(|_| {
        ApiError::Other(format!(
            "response of {} bytes exceeds the host's limit",
            json.len()
        ))
    })
}

/// The guest's object for a write, as sent: valid JSON within the size
/// limit, of the kind the call resolved (apiVersion and kind are put in
/// when it names neither), in the call's namespace. Checked without
/// building a tree of it (`body::identity`), and sent without a copy.
fn write_body(
    json: String,
    ar: &kube::api::ApiResource,
    namespace: Option<&str>,
) -> Result<Vec<u8>, ApiError> {
    check_size(&json)?;
    let id = body::identity(&json).map_err(|e| {
        let detail = match e {
            body::BadBody::NotAnObject => serde_json::from_str::<serde::de::IgnoredAny>(&json)
                .err()
                .map(|e| format!(": {}", truncate(&e.to_string(), 4 * ECHO)))
                .unwrap_or_default(),
            _ => String::new(),
        };
        ApiError::Invalid(format!("{e}{detail}"))
    })?;
    if let (Some(api_version), Some(kind)) = (&id.api_version, &id.kind)
        && (*api_version != ar.api_version || *kind != ar.kind)
    {
        return Err(ApiError::Invalid(format!(
            "the object is a {} {}, but the call is for {} {}",
            truncate(api_version, ECHO),
            truncate(kind, ECHO),
            ar.api_version,
            ar.kind
        )));
    }
    if let (Some(ns), Some(own)) = (namespace, id.namespace.as_deref())
        && ns != own
    {
        return Err(ApiError::Invalid(format!(
            "the object's namespace {:?} is not the call's namespace {ns:?}",
            truncate(own, ECHO)
        )));
    }
    Ok(body::with_kind(json, &id, &ar.api_version, &ar.kind).into_bytes())
}

/// A patch body as the guest wrote it, checked to be one JSON value but not
/// parsed into a tree: kube-rs writes it out again as is, and a `Value` tree
/// built only to be serialised again was most of this call's cost.
type RawJson = Box<RawValue>;

/// A patch as it goes to the API server: the guest's text, checked.
#[derive(Debug)]
enum SentPatch {
    Merge(RawJson),
    /// kube-rs takes a JSON patch only as a `json_patch::Patch`, a tree of
    /// every operation's value, so its request is built as a merge patch
    /// of the same text and given the JSON patch media type.
    Json(RawJson),
    Apply(RawJson),
}

impl SentPatch {
    /// The PATCH request of `name` (its `subresource`, if any) with this
    /// patch as its body.
    fn request(
        &self,
        base: kube::core::Request,
        name: &str,
        subresource: Option<&str>,
        params: &PatchParams,
    ) -> Result<http::Request<Vec<u8>>, kube::core::request::Error> {
        let build = |patch: &Patch<&RawValue>| match subresource {
            Some(sub) => base.patch_subresource(sub, name, params, patch),
            None => base.patch(name, params, patch),
        };
        match self {
            SentPatch::Merge(raw) => build(&Patch::Merge(raw)),
            SentPatch::Apply(raw) => build(&Patch::Apply(raw)),
            SentPatch::Json(raw) => {
                let mut req = build(&Patch::Merge(raw))?;
                req.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json-patch+json"),
                );
                Ok(req)
            }
        }
    }
}

fn to_patch(
    plugin: &str,
    patch: ObjectPatch,
    ar: &kube::api::ApiResource,
) -> Result<(PatchParams, SentPatch), ApiError> {
    let not_json = |e: serde_json::Error| {
        ApiError::Invalid(format!(
            "patch is not valid JSON: {}",
            truncate(&e.to_string(), 4 * ECHO)
        ))
    };
    let parse = |s: String| {
        check_size(&s)?;
        serde_json::value::RawValue::from_string(s).map_err(not_json)
    };
    Ok(match patch {
        ObjectPatch::Merge(s) => (PatchParams::default(), SentPatch::Merge(parse(s)?)),
        ObjectPatch::Json(s) => {
            check_size(&s)?;
            // One pass, and no tree of the operations' values.
            body::json_patch_shape(&s)
                .map_err(|e| ApiError::Invalid(truncate(&e.to_string(), 4 * ECHO)))?;
            let raw = serde_json::value::RawValue::from_string(s).map_err(not_json)?;
            (PatchParams::default(), SentPatch::Json(raw))
        }
        ObjectPatch::Apply(a) => {
            let manager = if a.field_manager.is_empty() {
                format!("wasmctrl-{plugin}")
            } else {
                validate::field_manager(&a.field_manager)
                    .map_err(|e| ApiError::Invalid(e.to_string()))?;
                a.field_manager
            };
            let body = parse(a.body)?;
            /// What an apply body must say of its kind. A body naming it twice
            /// is refused (serde's duplicate-field error) rather than read one
            /// way here and another by the API server.
            #[derive(serde::Deserialize)]
            struct Types<'a> {
                #[serde(rename = "apiVersion", borrow)]
                api_version: Option<Cow<'a, str>>,
                #[serde(borrow)]
                kind: Option<Cow<'a, str>>,
            }
            let types = serde_json::from_str::<Types<'_>>(body.get()).ok();
            let names_kind = types.is_some_and(|t| {
                t.api_version.as_deref() == Some(ar.api_version.as_str())
                    && t.kind.as_deref() == Some(ar.kind.as_str())
            });
            if !names_kind {
                return Err(ApiError::Invalid(format!(
                    "an apply patch must name the call's kind: apiVersion {:?} and kind {:?}",
                    ar.api_version, ar.kind
                )));
            }
            let mut params = PatchParams::apply(&manager);
            if a.force {
                params = params.force();
            }
            (params, SentPatch::Apply(body))
        }
    })
}

/// Maps a kube-rs error onto the WIT `api-error`.
pub fn map_error(e: kube::Error) -> ApiError {
    match e {
        kube::Error::Api(status) => {
            let message = status.message.clone();
            match (status.code, status.reason.as_str()) {
                (404, _) | (_, "NotFound") => ApiError::NotFound(message),
                (409, "AlreadyExists") => ApiError::AlreadyExists(message),
                (409, _) | (_, "Conflict") => ApiError::Conflict(message),
                (403, _) | (401, _) => ApiError::Forbidden(message),
                (400, _) | (422, _) | (415, _) => ApiError::Invalid(message),
                (504, _) | (_, "Timeout") => ApiError::Timeout(message),
                (500..=599, _) => ApiError::Unavailable(message),
                _ => ApiError::Other(format!("{} {}: {message}", status.code, status.reason)),
            }
        }
        e @ (kube::Error::HyperError(_) | kube::Error::Service(_)) => {
            ApiError::Unavailable(e.to_string())
        }
        other => ApiError::Other(other.to_string()),
    }
}

#[cfg(test)]
mod fuzz {
    //! The host API's JSON inputs (objects and the three patch kinds) under
    //! arbitrary guest text: never a panic, only an `invalid` refusal or a
    //! value of the call's kind, and refusals that quote at most a bounded
    //! piece of the input. `PROPTEST_CASES` scales the run (see
    //! docs/RELIABILITY.md for the long one).
    use super::*;
    use crate::sandbox::hostapi::ApplyPatch;
    use proptest::prelude::*;

    fn config_map() -> kube::api::ApiResource {
        kube::api::ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
        }
    }

    /// Arbitrary JSON, biased to the shapes the host looks into.
    fn json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_map(serde_json::Value::from),
            ".{0,40}".prop_map(serde_json::Value::from),
            "[a-z]{1100,1200}".prop_map(serde_json::Value::from),
            prop_oneof![Just("v1"), Just("ConfigMap"), Just("default"), Just("add")]
                .prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(6, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("apiVersion".to_string()),
                        Just("kind".to_string()),
                        Just("metadata".to_string()),
                        Just("namespace".to_string()),
                        Just("name".to_string()),
                        Just("op".to_string()),
                        Just("path".to_string()),
                        Just("value".to_string()),
                        Just("from".to_string()),
                        ".{0,12}",
                    ],
                    inner,
                    0..8
                )
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Guest text: raw strings, JSON, and JSON with a long tail.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            ".{0,200}",
            json().prop_map(|v| v.to_string()),
            (json(), "[\\x00-\\x7f]{0,4}").prop_map(|(v, tail)| format!("{v}{tail}")),
            ".{0,64}".prop_map(|k| format!(r#"{{"apiVersion":"v1","kind":"{}"}}"#, k.repeat(40))),
        ]
    }

    fn check(result: Result<impl Sized, ApiError>) -> Result<(), TestCaseError> {
        if let Err(e) = result {
            prop_assert!(matches!(e, ApiError::Invalid(_)), "not `invalid`: {e:?}");
            prop_assert!(e.to_string().len() <= 1024, "an unbounded message: {e}");
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn objects_are_refused_or_of_the_calls_kind(json in text(), namespaced in any::<bool>()) {
            let ar = config_map();
            let result = write_body(json.clone(), &ar, namespaced.then_some("default"));
            if let Ok(body) = &result {
                let obj: serde_json::Value = serde_json::from_slice(body).expect("checked JSON");
                prop_assert_eq!(obj["kind"].as_str(), Some("ConfigMap"));
                prop_assert_eq!(obj["apiVersion"].as_str(), Some("v1"));
                if namespaced {
                    prop_assert!(matches!(obj["metadata"]["namespace"].as_str(), None | Some("default")));
                }
            }
            check(result)?;
        }

        #[test]
        fn patches_are_refused_or_well_formed(body in text(), manager in ".{0,200}", force in any::<bool>()) {
            let ar = config_map();
            check(to_patch("p", ObjectPatch::Merge(body.clone()), &ar))?;
            check(to_patch("p", ObjectPatch::Json(body.clone()), &ar))?;
            let apply = ObjectPatch::Apply(ApplyPatch { body, field_manager: manager, force });
            if let Ok((params, SentPatch::Apply(v))) = to_patch("p", apply.clone(), &ar) {
                let v: serde_json::Value = serde_json::from_str(v.get()).expect("checked JSON");
                prop_assert_eq!(v["kind"].as_str(), Some("ConfigMap"));
                prop_assert!(params.field_manager.is_some_and(|m| m.len() <= 128));
            }
            check(to_patch("p", apply, &ar))?;
        }
    }

    #[test]
    fn call_counters_count_every_call_under_its_own_labels() {
        let family = Family::<HostApiLabels, Counter>::default();
        let counters = CallCounters::default();
        for _ in 0..3 {
            counters.inc(&family, "p", "get", "configmaps", "ok");
        }
        counters.inc(&family, "p", "get", "configmaps", "not-found");
        counters.inc(&family, "p", "patch", "configmaps", "ok");
        counters.inc(&family, "p", "get", "secrets", "ok");
        let value = |verb: &str, resource: &str, code: &str| {
            family
                .get_or_create(&HostApiLabels {
                    plugin: "p".into(),
                    verb: verb.into(),
                    resource: resource.into(),
                    code: code.into(),
                })
                .get()
        };
        assert_eq!(value("get", "configmaps", "ok"), 3);
        assert_eq!(value("get", "configmaps", "not-found"), 1);
        assert_eq!(value("patch", "configmaps", "ok"), 1);
        assert_eq!(value("get", "secrets", "ok"), 1);
        assert_eq!(value("patch", "secrets", "ok"), 0);
    }

    #[test]
    fn a_merge_patch_is_sent_as_the_guest_wrote_it() {
        let body = r#"{"status":{"observed":7,"note":"\u00e9 \"q\""}}"#;
        let (_, patch) = to_patch("p", ObjectPatch::Merge(body.into()), &config_map()).unwrap();
        let SentPatch::Merge(raw) = &patch else {
            panic!("not a merge patch: {patch:?}")
        };
        assert_eq!(raw.get(), body);
        let sent = serde_json::to_string(raw).unwrap();
        assert_eq!(sent, body);
        let e = to_patch(
            "p",
            ObjectPatch::Merge(r#"{"status":"#.into()),
            &config_map(),
        );
        assert!(
            matches!(&e, Err(ApiError::Invalid(m)) if m.starts_with("patch is not valid JSON")),
            "{e:?}"
        );
    }

    #[test]
    fn a_json_patch_is_refused_as_bad_json_or_as_no_patch() {
        let refusal =
            |body: &str| match to_patch("p", ObjectPatch::Json(body.into()), &config_map()) {
                Err(ApiError::Invalid(m)) => m,
                other => panic!("{body}: {other:?}"),
            };
        assert!(refusal(r#"[{"op":"add""#).starts_with("patch is not valid JSON"));
        assert!(refusal(r#"[] x"#).starts_with("patch is not valid JSON"));
        assert!(refusal(r#"{"op":"add"}"#).starts_with("not a JSON patch"));
        assert!(refusal(r#"[{"op":"jump","path":"/a"}]"#).starts_with("not a JSON patch"));
        let ok = to_patch(
            "p",
            ObjectPatch::Json(r#"[{"op":"add","path":"/data/a","value":"b"}]"#.into()),
            &config_map(),
        );
        assert!(matches!(ok, Ok((_, SentPatch::Json(_)))), "{ok:?}");
    }

    #[test]
    fn an_apply_body_naming_its_kind_twice_is_refused() {
        // serde_json's tree keeps the last of two keys; an API server may
        // read either, so the host does not guess which one it checked.
        for body in [
            r#"{"apiVersion":"v1","kind":"Secret","kind":"ConfigMap"}"#,
            r#"{"apiVersion":"v1","kind":"ConfigMap","kind":"Secret"}"#,
            r#"{"apiVersion":"v1","apiVersion":"v1","kind":"ConfigMap"}"#,
        ] {
            let apply = ObjectPatch::Apply(ApplyPatch {
                body: body.into(),
                field_manager: String::new(),
                force: false,
            });
            let e = to_patch("p", apply, &config_map());
            assert!(
                matches!(&e, Err(ApiError::Invalid(m)) if m.contains("must name the call's kind")),
                "{body}: {e:?}"
            );
        }
        let apply = ObjectPatch::Apply(ApplyPatch {
            body: r#"{"apiVersion":"v1","kind":"ConfigMap","data":{"kind":"x"}}"#.into(),
            field_manager: String::new(),
            force: true,
        });
        let (params, patch) = to_patch("p", apply, &config_map()).unwrap();
        assert!(matches!(patch, SentPatch::Apply(_)));
        assert_eq!(params.field_manager.as_deref(), Some("wasmctrl-p"));
    }

    #[test]
    fn a_huge_kind_is_quoted_back_cut() {
        let kind = "K".repeat(1 << 20);
        let json = format!(r#"{{"apiVersion":"v1","kind":"{kind}"}}"#);
        let e = write_body(json, &config_map(), None).unwrap_err();
        assert!(e.to_string().len() < 400, "{} bytes", e.to_string().len());
    }

    /// (Whether an answer is one JSON object: `answer.rs`.)
    #[test]
    fn an_answer_over_the_payload_ceiling_is_refused() {
        let at_limit = format!(r#"{{"data":"{}"}}"#, "x".repeat(MAX_PAYLOAD - 11));
        assert_eq!(at_limit.len(), MAX_PAYLOAD);
        within_response_limit(&at_limit).unwrap();
        let huge = format!(r#"{{"data":"{}"}}"#, "x".repeat(MAX_PAYLOAD));
        let e = within_response_limit(&huge).unwrap_err();
        assert!(e.to_string().contains("exceeds the host's limit"), "{e}");
    }
}
