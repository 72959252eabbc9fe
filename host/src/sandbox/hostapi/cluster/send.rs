//! Step 4 of a call: served from the shared informer cache, or sent to the
//! API server, and the answer handed to the guest as the server's text.

use std::time::Instant;

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};

use super::payload::{to_patch, write_body};
use super::{ClusterApi, map_error};
use crate::control::discovery::Resolved;
use crate::control::informer::CachedObject;
use crate::meta::selector::LabelSelector;
use crate::sandbox::hostapi::answer::object_answer;
use crate::sandbox::hostapi::api::KubeResponse;
use crate::sandbox::hostapi::error::ApiError;
use crate::sandbox::hostapi::request::{KubeRequest, check_size};

impl ClusterApi {
    /// Serves a call [`ClusterApi::check_call`] admitted, resolved to
    /// `resolved` in `namespace`.
    pub(super) async fn execute(
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
                // In pages, so that a list past `listBytes` is refused after
                // reading about that much, not after reading all of it.
                let mut lp = ListParams::default().limit(LIST_PAGE);
                if let Some(s) = &selector {
                    lp = lp.labels(&s.to_string());
                }
                let options = self.cache.options();
                loop {
                    self.throttle(deadline).await?;
                    let found = api().list(&lp).await.map_err(map_error)?;
                    for mut o in found.items {
                        options.trim(&mut o);
                        list.push(&o).map_err(|e| self.list_too_big(e))?;
                    }
                    match found.metadata.continue_.filter(|c| !c.is_empty()) {
                        Some(token) => lp = lp.continue_token(&token),
                        None => break,
                    }
                }
                Ok(KubeResponse::Objects(list.objects))
            }
            KubeRequest::Create { object, .. } => {
                let body = write_body(object.into_string(), ar, namespace)?;
                self.throttle(deadline).await?;
                let req = request_of(ar, namespace).create(&PostParams::default(), body);
                self.object_text(req, "create").await
            }
            KubeRequest::Replace { name, object, .. } => {
                let body = write_body(object.into_string(), ar, namespace)?;
                self.throttle(deadline).await?;
                let req = request_of(ar, namespace).replace(&name, &PostParams::default(), body);
                self.object_text(req, "replace").await
            }
            KubeRequest::ReplaceStatus { name, object, .. } => {
                let body = write_body(object.into_string(), ar, namespace)?;
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
            KubeRequest::RecordEvent { .. } => unreachable!("handled before resolution"),
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
}

/// Objects a list of a kind the plugin does not watch asks the API server
/// for at a time.
const LIST_PAGE: u32 = 100;

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
pub(super) fn within_response_limit(json: &str) -> Result<(), ApiError> {
    check_size(json).map_err(|_| {
        ApiError::Other(format!(
            "response of {} bytes exceeds the host's limit",
            json.len()
        ))
    })
}
