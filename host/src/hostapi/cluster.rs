//! The `kube` imports served by a real API server (a cluster or the
//! embedded one): discovery, the shared cache for reads of watched kinds,
//! the plugin's grant for every call, metrics for every call.

use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType, Recorder, Reporter};

use super::grant::{Access, Grant};
use super::selector::LabelSelector;
use super::{ApiError, EventType, KubeApi, KubeRequest, KubeResponse, ObjectPatch};
use crate::cache::{InformerKey, SharedCache};
use crate::discovery::{Resolved, Resolver};
use crate::metrics::{HostApiLabels, Metrics};

/// Objects larger than this are refused in both directions.
pub const MAX_PAYLOAD: usize = 4 << 20;

/// One plugin's view of the API server.
pub struct ClusterApi {
    plugin: String,
    client: Client,
    resolver: Arc<Resolver>,
    cache: Arc<SharedCache>,
    grant: Grant,
    metrics: Arc<Metrics>,
    recorder: Recorder,
}

impl ClusterApi {
    pub fn new(
        plugin: &str,
        client: Client,
        resolver: Arc<Resolver>,
        cache: Arc<SharedCache>,
        grant: Grant,
        metrics: Arc<Metrics>,
    ) -> Self {
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
        }
    }

    /// The grant every call of this plugin is checked against.
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    fn count(&self, verb: &str, resource: &str, code: &str) {
        self.metrics
            .hostapi_calls
            .get_or_create(&HostApiLabels {
                plugin: self.plugin.clone(),
                verb: verb.into(),
                resource: resource.into(),
                code: code.into(),
            })
            .inc();
    }

    async fn serve(&self, request: KubeRequest) -> Result<KubeResponse, ApiError> {
        let verb = request.verb();
        let (kind, namespace, status) = match &request {
            KubeRequest::Get {
                kind, namespace, ..
            }
            | KubeRequest::List {
                kind, namespace, ..
            }
            | KubeRequest::Create {
                kind, namespace, ..
            }
            | KubeRequest::Replace {
                kind, namespace, ..
            }
            | KubeRequest::Patch {
                kind, namespace, ..
            }
            | KubeRequest::Delete {
                kind, namespace, ..
            } => (kind.clone(), namespace.clone(), false),
            KubeRequest::ReplaceStatus {
                kind, namespace, ..
            }
            | KubeRequest::PatchStatus {
                kind, namespace, ..
            } => (kind.clone(), namespace.clone(), true),
            KubeRequest::RecordEvent(e) => {
                return self.record_event(e.clone()).await;
            }
        };
        let resolved = self.resolver.resolve(&kind).await.map_err(|e| {
            self.count(verb, &kind.kind.to_lowercase(), "invalid");
            ApiError::Invalid(e.to_string())
        })?;
        let namespace = if resolved.namespaced { namespace } else { None };
        let resource = if status {
            format!("{}/status", resolved.resource.plural)
        } else {
            resolved.resource.plural.clone()
        };
        let access = Access {
            verb,
            group: &kind.group,
            resource: &resource,
            namespace: namespace.as_deref(),
        };
        if !self.grant.allows(&access) {
            self.count(verb, &resource, "forbidden");
            tracing::warn!(plugin = %self.plugin, %access, "host API call denied by the plugin's grant");
            return Err(ApiError::Forbidden(format!(
                "plugin {:?} is not granted {access}",
                self.plugin
            )));
        }
        let result = self.execute(request, &resolved, namespace.as_deref()).await;
        self.count(verb, &resource, code(&result));
        result
    }

    async fn execute(
        &self,
        request: KubeRequest,
        resolved: &Resolved,
        namespace: Option<&str>,
    ) -> Result<KubeResponse, ApiError> {
        let ar = &resolved.resource;
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, ar),
            None => Api::all_with(self.client.clone(), ar),
        };
        let informer_key = |ns: Option<&str>| InformerKey {
            group: ar.group.clone(),
            version: ar.version.clone(),
            kind: ar.kind.clone(),
            namespace: ns.map(str::to_string),
        };
        // Reads of watched kinds come from the cache (once it has synced).
        let cached = |ns: Option<&str>| {
            self.cache
                .existing(&informer_key(ns))
                .or_else(|| self.cache.existing(&informer_key(None)))
                .filter(|i| i.is_synced())
        };
        match request {
            KubeRequest::Get { name, .. } => {
                if let Some(informer) = cached(namespace) {
                    return match informer.get(namespace, &name) {
                        Some(o) => Ok(KubeResponse::Object(to_json(&*o)?)),
                        None => Err(ApiError::NotFound(format!(
                            "{} {name:?} not found",
                            ar.plural
                        ))),
                    };
                }
                let o = api.get(&name).await.map_err(map_error)?;
                Ok(KubeResponse::Object(to_json(&o)?))
            }
            KubeRequest::List { label_selector, .. } => {
                if let Some(informer) = cached(namespace) {
                    let selector = match &label_selector {
                        Some(s) => Some(LabelSelector::parse(s).map_err(|e| {
                            ApiError::Invalid(format!("label selector {s:?}: {e}"))
                        })?),
                        None => None,
                    };
                    let objects = informer
                        .store()
                        .state()
                        .into_iter()
                        .filter(|o| {
                            namespace.is_none() || o.metadata.namespace.as_deref() == namespace
                        })
                        .filter(|o| {
                            selector.as_ref().is_none_or(|s| {
                                s.matches(o.metadata.labels.as_ref().unwrap_or(&Default::default()))
                            })
                        })
                        .map(|o| to_json(&*o))
                        .collect::<Result<Vec<_>, _>>()?;
                    return Ok(KubeResponse::Objects(objects));
                }
                let mut lp = ListParams::default();
                if let Some(s) = &label_selector {
                    lp = lp.labels(s);
                }
                let list = api.list(&lp).await.map_err(map_error)?;
                let objects = list
                    .items
                    .iter()
                    .map(to_json)
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(KubeResponse::Objects(objects))
            }
            KubeRequest::Create { object, .. } => {
                let obj = parse_object(&object, ar)?;
                let o = api
                    .create(&PostParams::default(), &obj)
                    .await
                    .map_err(map_error)?;
                Ok(KubeResponse::Object(to_json(&o)?))
            }
            KubeRequest::Replace { name, object, .. } => {
                let obj = parse_object(&object, ar)?;
                let o = api
                    .replace(&name, &PostParams::default(), &obj)
                    .await
                    .map_err(map_error)?;
                Ok(KubeResponse::Object(to_json(&o)?))
            }
            KubeRequest::ReplaceStatus { name, object, .. } => {
                let obj = parse_object(&object, ar)?;
                let o = api
                    .replace_status(&name, &PostParams::default(), &obj)
                    .await
                    .map_err(map_error)?;
                Ok(KubeResponse::Object(to_json(&o)?))
            }
            KubeRequest::Patch { name, patch, .. } => {
                let (params, patch) = to_patch(&self.plugin, patch)?;
                let o = api.patch(&name, &params, &patch).await.map_err(map_error)?;
                Ok(KubeResponse::Object(to_json(&o)?))
            }
            KubeRequest::PatchStatus { name, patch, .. } => {
                let (params, patch) = to_patch(&self.plugin, patch)?;
                let o = api
                    .patch_status(&name, &params, &patch)
                    .await
                    .map_err(map_error)?;
                Ok(KubeResponse::Object(to_json(&o)?))
            }
            KubeRequest::Delete { name, .. } => {
                api.delete(&name, &DeleteParams::background())
                    .await
                    .map_err(map_error)?;
                Ok(KubeResponse::Empty)
            }
            KubeRequest::RecordEvent(_) => unreachable!("handled before resolution"),
        }
    }

    async fn record_event(&self, event: super::Event) -> Result<KubeResponse, ApiError> {
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
        let kind = &event.regarding_kind;
        // The uid lets `kubectl describe` show the event on the object.
        let uid = match self.resolver.resolve(kind).await {
            Ok(resolved) => {
                let api: Api<DynamicObject> = match &event.regarding_namespace {
                    Some(ns) if resolved.namespaced => {
                        Api::namespaced_with(self.client.clone(), ns, &resolved.resource)
                    }
                    _ => Api::all_with(self.client.clone(), &resolved.resource),
                };
                api.get_opt(&event.regarding_name)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|o| o.metadata.uid)
            }
            Err(_) => None,
        };
        let reference = ObjectReference {
            api_version: Some(api_version(kind)),
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
        let result = self
            .recorder
            .publish(&ev, &reference)
            .await
            .map(|_| KubeResponse::Empty)
            .map_err(map_error);
        self.count("create", "events", code(&result));
        result
    }

    /// Records a terminal reconcile error as a Warning event on the object
    /// (host-side, not subject to the plugin's grant).
    pub async fn record_terminal_error(
        &self,
        kind: &super::Gvk,
        key: &crate::ObjectKey,
        message: &str,
    ) {
        let reference = ObjectReference {
            api_version: Some(api_version(kind)),
            kind: Some(kind.kind.clone()),
            name: Some(key.name.clone()),
            namespace: key.namespace.clone(),
            ..ObjectReference::default()
        };
        let ev = KubeEvent {
            type_: KubeEventType::Warning,
            reason: "ReconcileFailed".into(),
            note: Some(truncate(message, 1024)),
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
            self.serve(request).await
        })
    }
}

/// `group/version`, or `version` for the core group.
fn api_version(kind: &super::Gvk) -> String {
    if kind.group.is_empty() {
        kind.version.clone()
    } else {
        format!("{}/{}", kind.group, kind.version)
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

fn code(result: &Result<KubeResponse, ApiError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(ApiError::NotFound(_)) => "not-found",
        Err(ApiError::Conflict(_)) => "conflict",
        Err(ApiError::AlreadyExists(_)) => "already-exists",
        Err(ApiError::Forbidden(_)) => "forbidden",
        Err(ApiError::Invalid(_)) => "invalid",
        Err(ApiError::Timeout(_)) => "timeout",
        Err(ApiError::Unavailable(_)) => "unavailable",
        Err(ApiError::Other(_)) => "other",
    }
}

fn check_size(payload: &str) -> Result<(), ApiError> {
    if payload.len() > MAX_PAYLOAD {
        return Err(ApiError::Invalid(format!(
            "object of {} bytes exceeds the host's {MAX_PAYLOAD}-byte limit",
            payload.len()
        )));
    }
    Ok(())
}

fn to_json<T: serde::Serialize>(o: &T) -> Result<String, ApiError> {
    let s = serde_json::to_string(o).map_err(|e| ApiError::Other(e.to_string()))?;
    check_size(&s).map_err(|_| {
        ApiError::Other(format!(
            "response of {} bytes exceeds the host's limit",
            s.len()
        ))
    })?;
    Ok(s)
}

fn parse_object(json: &str, ar: &kube::api::ApiResource) -> Result<DynamicObject, ApiError> {
    check_size(json)?;
    let mut obj: DynamicObject = serde_json::from_str(json)
        .map_err(|e| ApiError::Invalid(format!("object is not valid JSON: {e}")))?;
    if obj.types.is_none() {
        obj.types = Some(kube::api::TypeMeta {
            api_version: ar.api_version.clone(),
            kind: ar.kind.clone(),
        });
    }
    Ok(obj)
}

fn to_patch(
    plugin: &str,
    patch: ObjectPatch,
) -> Result<(PatchParams, Patch<serde_json::Value>), ApiError> {
    let parse = |s: &str| {
        check_size(s)?;
        serde_json::from_str::<serde_json::Value>(s)
            .map_err(|e| ApiError::Invalid(format!("patch is not valid JSON: {e}")))
    };
    Ok(match patch {
        ObjectPatch::Merge(s) => (PatchParams::default(), Patch::Merge(parse(&s)?)),
        ObjectPatch::Json(s) => {
            let p: json_patch::Patch = serde_json::from_value(parse(&s)?)
                .map_err(|e| ApiError::Invalid(format!("not a JSON patch: {e}")))?;
            (PatchParams::default(), Patch::Json(p))
        }
        ObjectPatch::Apply(a) => {
            let manager = if a.field_manager.is_empty() {
                format!("wasmctrl-{plugin}")
            } else {
                a.field_manager
            };
            let mut params = PatchParams::apply(&manager);
            if a.force {
                params = params.force();
            }
            (params, Patch::Apply(parse(&a.body)?))
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
