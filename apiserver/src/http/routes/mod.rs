//! HTTP routing: authentication, the Kubernetes URL grammar, query and body
//! parsing, and mapping results to responses. Everything answers
//! `application/json` whatever the Accept (clients that offer Table or
//! protobuf also accept JSON).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{Value, json};

use super::audit::Caller;
use super::conn::Peer;
use super::discovery;
use super::request_info::RequestInfo;
use super::response;
use super::state::ServerState;
use super::watch::{self, WatchParams};
use crate::auth::identity::UserInfo;
use crate::error::ApiError;
use crate::metrics::{Limit, json_limit};
use crate::registry::delete::DeleteOptions;
use crate::registry::resources::{Registry, ResourceInfo};
use crate::registry::selectors::{FieldSelector, LabelSelector, SelectorError};
use crate::registry::storage::Durable;
use crate::registry::views::to_view;
use crate::registry::writes::{PatchKind, Subresource, WriteCtx, is_namespace};

/// The axum router serving everything through one fallback handler, because
/// the Kubernetes URL grammar does not fit a static route table.
pub(crate) fn router(shared: Arc<ServerState>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

/// Query parameters; empty pairs (`?&watch=true`, a bare `?`) are ignored.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: Option<&str>) -> Self {
        Query(
            form_urlencoded::parse(q.unwrap_or("").as_bytes())
                .filter(|(k, _)| !k.is_empty())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(pk, _)| pk == k)
            .map(|(_, v)| v.as_str())
    }
    /// A boolean parameter, read as Go's `strconv.ParseBool` reads true
    /// (anything else is false).
    fn flag(&self, k: &str) -> Option<bool> {
        self.get(k)
            .map(|v| matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True"))
    }
}

fn header_str(h: &HeaderMap, name: header::HeaderName) -> &str {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// The user of the request's bearer token, if it carries a valid one.
fn authenticate(shared: &ServerState, headers: &HeaderMap) -> Option<UserInfo> {
    let auth = header_str(headers, header::AUTHORIZATION);
    shared
        .auth
        .authenticate(auth.strip_prefix("Bearer ")?.trim())
}

/// Largest request body accepted: kube-apiserver's default
/// (`MaxRequestBodyBytes`, 3 MiB); bigger bodies get 413.
pub(crate) const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Per-request state the synchronous handlers leave for the async layer.
#[derive(Default)]
struct RequestScope {
    /// Staged writes the response must wait for (see [`WriteCtx::pending`]).
    pending: Arc<Mutex<Vec<Durable>>>,
    /// The name a create gave its object (for the audit).
    created: Mutex<Option<String>>,
}

impl RequestScope {
    fn set_created(&self, obj: &Value) {
        if let Some(n) = crate::values::meta_str(obj, "name") {
            *self.created.lock().unwrap_or_else(|e| e.into_inner()) = Some(n.to_string());
        }
    }

    fn created(&self) -> Option<String> {
        self.created
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn take_pending(&self) -> Vec<Durable> {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

async fn handle(State(shared): State<Arc<ServerState>>, req: Request) -> Response {
    let time = SystemTime::now();
    let peer = req.extensions().get::<Peer>().map(|p| p.0);
    let (parts, body) = req.into_parts();
    let Some(authenticated) = authenticate(&shared, &parts.headers) else {
        let response = ApiError::Unauthorized.into_response();
        shared.metrics.request(
            &parts.method.as_str().to_ascii_lowercase(),
            response.status().as_u16(),
        );
        return response;
    };
    let query = Query::parse(parts.uri.query());
    let segs = match segments(parts.uri.path()) {
        Ok(s) => s,
        Err(e) => {
            shared.metrics.exceeded(Limit::PathSegment);
            let response = e.into_response();
            shared.metrics.request(
                &parts.method.as_str().to_ascii_lowercase(),
                response.status().as_u16(),
            );
            return response;
        }
    };
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    let info = RequestInfo::parse(
        parts.method.as_str(),
        &s,
        query.flag("watch") == Some(true),
        query.get("fieldSelector"),
    );
    let scope = RequestScope::default();
    // Impersonation, then authorization, before anything else looks at the
    // request (so a refused request learns nothing, not even a 404).
    let allowed =
        crate::auth::authenticate::impersonate(&shared.auth, authenticated.clone(), &parts.headers)
            .and_then(|user| shared.auth.check(&user, &info.attributes()).map(|()| user));
    let response = match allowed {
        Ok(user) => serve(&shared, &parts, body, &query, &s, &info, &scope, &user).await,
        Err(e) => {
            tracing::debug!(method = %parts.method, path = %parts.uri.path(), code = e.code(), error = %e, "request refused");
            e.into_response()
        }
    };
    if let Some(delay) = shared.faults.response_delay() {
        tokio::time::sleep(delay).await;
    }
    let caller = Caller {
        user: &authenticated.name,
        user_agent: header_str(&parts.headers, header::USER_AGENT),
        peer,
    };
    shared.audit.record(
        time,
        &caller,
        &info,
        query.get("fieldManager"),
        scope.created().as_deref(),
        response.status().as_u16(),
    );
    shared
        .metrics
        .request(&info.verb, response.status().as_u16());
    response
}

/// Reads the body and answers the (authorized) request of `user`; with
/// persistence, waits until its writes are durable (or answers 500 if they
/// could not be persisted).
#[allow(clippy::too_many_arguments)]
async fn serve(
    shared: &Arc<ServerState>,
    parts: &axum::http::request::Parts,
    body: Body,
    query: &Query,
    segs: &[&str],
    info: &RequestInfo,
    scope: &RequestScope,
    user: &UserInfo,
) -> Response {
    let target = info
        .is_resource
        .then_some((info.group.as_str(), info.resource.as_str()));
    if shared.faults.fails_request(target) {
        return ApiError::Internal("injected failure (Faults::fail_requests)".into())
            .into_response();
    }
    let body = match read_body(shared, body).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let req = Req {
        method: &parts.method,
        q: query,
        headers: &parts.headers,
        body: &body,
        scope,
        user,
    };
    let result = dispatch(shared, segs, info, req);
    let mut response = result.unwrap_or_else(|e| {
        tracing::debug!(method = %parts.method, path = %parts.uri.path(), code = e.code(), error = %e, "request failed");
        e.into_response()
    });
    for durable in scope.take_pending() {
        if let Err(message) = durable.wait().await {
            response = ApiError::Internal(message.to_string()).into_response();
            break;
        }
    }
    response
}

/// The whole body, bounded in size ([`MAX_BODY_BYTES`]) and time (the
/// server's body timeout, [`super::conn::BODY_READ_TIMEOUT`] by default).
async fn read_body(shared: &ServerState, body: Body) -> Result<bytes::Bytes, ApiError> {
    let limited = http_body_util::Limited::new(body, MAX_BODY_BYTES);
    let timeout = shared.body_timeout;
    match tokio::time::timeout(timeout, http_body_util::BodyExt::collect(limited)).await {
        Err(_) => {
            shared.metrics.exceeded(Limit::BodyTime);
            Err(ApiError::Timeout(format!(
                "request body not received within {}s",
                timeout.as_secs()
            )))
        }
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            shared.metrics.exceeded(Limit::RequestBody);
            Err(ApiError::RequestEntityTooLarge(format!(
                "limit is {MAX_BODY_BYTES}"
            )))
        }
        Ok(Err(e)) => Err(ApiError::BadRequest(format!("reading body: {e}"))),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

/// Decoded path segments; a segment that is not UTF-8 once decoded is a
/// 400 (names are UTF-8 strings).
fn segments(path: &str) -> Result<Vec<String>, ApiError> {
    path.split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|c| c.into_owned())
                .map_err(|_| ApiError::BadRequest(format!("path segment {s:?} is not UTF-8")))
        })
        .collect()
}

/// One request as the synchronous handlers see it.
#[derive(Clone, Copy)]
struct Req<'a> {
    method: &'a Method,
    q: &'a Query,
    headers: &'a HeaderMap,
    body: &'a [u8],
    scope: &'a RequestScope,
    /// Whom the request acts as (after impersonation).
    user: &'a UserInfo,
}

/// Answers a request: a resource request as `info` (what authorization
/// decided on) reads it, anything else by its path segments `s`.
fn dispatch(
    shared: &Arc<ServerState>,
    s: &[&str],
    info: &RequestInfo,
    req: Req<'_>,
) -> Result<Response, ApiError> {
    if info.is_resource {
        return resource(shared, info, req);
    }
    let Req {
        method, headers, ..
    } = req;
    let accept = header_str(headers, header::ACCEPT);
    let get_only = |r: Value| {
        if method == Method::GET {
            Ok(response::json(StatusCode::OK, &r))
        } else {
            Err(ApiError::MethodNotAllowed(format!(
                "the server does not allow this method on the requested resource ({method})"
            )))
        }
    };
    match s {
        ["version"] => get_only(discovery::version()),
        ["healthz"] | ["livez"] | ["readyz"] => Ok(response::bytes_with_type(
            StatusCode::OK,
            "text/plain",
            b"ok".to_vec(),
        )),
        // A non-resource URL as upstream's: system:masters may read it,
        // others only with a rule for `get` on nonResourceURL `/metrics`.
        ["metrics"] => get_only(Value::Null).map(|_| {
            response::bytes_with_type(
                StatusCode::OK,
                METRICS_CONTENT_TYPE,
                shared.metrics.encode().into_bytes(),
            )
        }),
        ["api"] | ["apis"] => {
            let core = s[0] == "api";
            if let Some(flavour) = discovery::aggregated_flavour(accept) {
                let doc = discovery::aggregated(&shared.objects.registry(), core, flavour);
                let ct = if flavour == "v2" {
                    discovery::AGGREGATED_V2
                } else {
                    discovery::AGGREGATED_V2BETA1
                };
                return Ok(response::json_with_type(StatusCode::OK, ct, &doc));
            }
            if core {
                get_only(discovery::api_versions(&shared.addr.to_string()))
            } else {
                get_only(discovery::api_group_list(&shared.objects.registry()))
            }
        }
        ["api", "v1"] => get_only(
            discovery::resource_list(&shared.objects.registry(), "", "v1")
                .ok_or_else(ApiError::no_route)?,
        ),
        ["apis", g] => get_only(
            discovery::api_group_doc(&shared.objects.registry(), g)
                .ok_or_else(ApiError::no_route)?,
        ),
        ["apis", g, v] => get_only(
            discovery::resource_list(&shared.objects.registry(), g, v)
                .ok_or_else(ApiError::no_route)?,
        ),
        ["openapi", "v3"] => get_only(discovery::openapi_root(
            &shared.objects.registry(),
            shared.objects.registry_generation(),
        )),
        ["openapi", "v3", "api", v] => get_only(
            discovery::openapi_gv(&shared.objects.registry(), "", v)
                .ok_or_else(ApiError::no_route)?,
        ),
        ["openapi", "v3", "apis", g, v] => get_only(
            discovery::openapi_gv(&shared.objects.registry(), g, v)
                .ok_or_else(ApiError::no_route)?,
        ),
        _ => Err(ApiError::no_route()),
    }
}

/// What a resource request addresses, as served.
struct Target<'a> {
    info: Arc<ResourceInfo>,
    /// None for cluster-scoped resources and all-namespace lists.
    namespace: Option<&'a str>,
    name: Option<&'a str>,
    sub: Option<&'a str>,
}

/// The resource, scope, name and subresource `req` (a resource request)
/// was authorized for, resolved against the registry; 404 when nothing is
/// served there.
fn target<'a>(registry: &Registry, req: &'a RequestInfo) -> Result<Target<'a>, ApiError> {
    let (name, sub) = match req.parts.as_slice() {
        [_] => (None, None),
        [_, n] => (Some(n.as_str()), None),
        [_, n, s] => (Some(n.as_str()), Some(s.as_str())),
        _ => return Err(ApiError::no_route()),
    };
    let info = registry
        .find(&req.group, &req.version, &req.resource)
        .ok_or_else(ApiError::no_route)?;
    let namespace = match req.namespace.as_deref() {
        Some(ns) if info.namespaced => Some(ns),
        // `/api/v1/namespaces/{name}`: the namespace in the request is the
        // object itself. Only for the built-in kind, as upstream: a
        // cluster-scoped custom resource called `namespaces` must not be
        // reachable through a Role in a namespace of the same name.
        Some(_) if !req.namespace_scope && is_namespace(&info) => None,
        Some(_) => return Err(ApiError::no_route()),
        None => None,
    };
    if info.namespaced && namespace.is_none() && name.is_some() {
        return Err(ApiError::no_route());
    }
    Ok(Target {
        info,
        namespace,
        name,
        sub,
    })
}

fn write_ctx(q: &Query, headers: &HeaderMap, scope: &RequestScope) -> Result<WriteCtx, ApiError> {
    let dry_run = match q.get("dryRun") {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "Invalid dryRun value: \"{other}\": supported values: \"All\""
            )));
        }
    };
    let manager = match q.get("fieldManager") {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => header_str(headers, header::USER_AGENT)
            .split('/')
            .next()
            .unwrap_or("")
            .to_string(),
    };
    Ok(WriteCtx {
        manager,
        dry_run,
        strict: q.get("fieldValidation") == Some("Strict"),
        warnings: Default::default(),
        pending: scope.pending.clone(),
    })
}

/// What prometheus-client's text encoder writes: OpenMetrics text, which
/// Prometheus scrapes as such.
const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Parses a JSON (or YAML) request body for create/update.
fn parse_body(shared: &ServerState, headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    let ct = header_str(headers, header::CONTENT_TYPE)
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match ct.as_str() {
        // The Python client sends POST without a Content-Type.
        "" | "application/json" | "*/*" => serde_json::from_slice(body).map_err(|e| {
            shared.metrics.exceeded_if(json_limit(&e));
            ApiError::BadRequest(format!(
                "the object provided is unrecognized: couldn't get version/kind; json parse error: {e}"
            ))
        }),
        "application/yaml" | "application/x-yaml" | "text/yaml" => {
            crate::yaml::from_slice(body).map_err(|e| {
                shared.metrics.exceeded_if(e.limit);
                ApiError::BadRequest(format!("error decoding YAML: {e}"))
            })
        }
        "application/vnd.kubernetes.protobuf" => super::protobuf::decode(body).map_err(|e| match e {
            super::protobuf::ProtobufError::Malformed | super::protobuf::ProtobufError::NoEnvelope => {
                ApiError::BadRequest(e.to_string())
            }
            _ => ApiError::UnsupportedMediaType(e.to_string()),
        }),
        other => Err(ApiError::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {other})"
        ))),
    }
}

fn patch_kind(headers: &HeaderMap, q: &Query, info: &ResourceInfo) -> Result<PatchKind, ApiError> {
    let ct = header_str(headers, header::CONTENT_TYPE)
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    Ok(match ct.as_str() {
        "application/merge-patch+json" => PatchKind::Merge,
        "application/json-patch+json" => PatchKind::Json,
        "application/strategic-merge-patch+json" if info.builtin => PatchKind::Strategic,
        "application/strategic-merge-patch+json" => {
            return Err(crate::registry::writes::smp_unsupported());
        }
        "application/apply-patch+yaml" => PatchKind::Apply {
            force: q.flag("force").unwrap_or(false),
        },
        _ => {
            let accepted = if info.builtin {
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json"
            } else {
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
            };
            return Err(ApiError::UnsupportedMediaType(format!(
                "the body of the request was in an unknown format - accepted media types include: {accepted}"
            )));
        }
    })
}

fn selector_error(e: SelectorError) -> ApiError {
    ApiError::BadRequest(e.to_string())
}

fn selectors(q: &Query, info: &ResourceInfo) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels =
        LabelSelector::parse(q.get("labelSelector").unwrap_or("")).map_err(selector_error)?;
    let fields = FieldSelector::parse(
        q.get("fieldSelector").unwrap_or(""),
        &info.group,
        &info.kind,
    )
    .map_err(selector_error)?;
    Ok((labels, fields))
}

fn delete_options(
    shared: &ServerState,
    q: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<DeleteOptions, ApiError> {
    let mut opts = DeleteOptions::default();
    let trimmed = body.iter().any(|b| !b.is_ascii_whitespace());
    if trimmed {
        let v = parse_body(shared, headers, body)?;
        opts.propagation = v["propagationPolicy"].as_str().map(str::to_string);
        opts.grace_period = v["gracePeriodSeconds"].as_i64();
        if v["orphanDependents"].as_bool() == Some(true) {
            opts.propagation.get_or_insert_with(|| "Orphan".into());
        }
        opts.precondition_uid = v["preconditions"]["uid"].as_str().map(str::to_string);
        opts.precondition_rv = v["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_string);
    }
    if let Some(p) = q.get("propagationPolicy") {
        opts.propagation = Some(p.to_string());
    }
    if let Some(g) = q.get("gracePeriodSeconds") {
        opts.grace_period = g.parse().ok();
    }
    if q.flag("orphanDependents") == Some(true) {
        opts.propagation.get_or_insert_with(|| "Orphan".into());
    }
    if let Some(p) = &opts.propagation
        && !matches!(p.as_str(), "Background" | "Foreground" | "Orphan")
    {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "DeleteOptions",
            "",
            vec![crate::error::Cause {
                reason: "FieldValueNotSupported".into(),
                message: format!(
                    "Unsupported value: \"{p}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
                ),
                field: "propagationPolicy".into(),
            }],
        ));
    }
    Ok(opts)
}

/// An opaque continue token: the list's resourceVersion and the last key.
fn encode_continue(rv: u64, key: &(String, String)) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(
        serde_json::to_vec(&json!({"rv": rv, "ns": key.0, "name": key.1})).unwrap_or_default(),
    )
}

fn decode_continue(token: &str) -> Result<(u64, (String, String)), ApiError> {
    let bad = || ApiError::BadRequest("continue key is not valid: invalid token".into());
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    Ok((
        v["rv"].as_u64().ok_or_else(bad)?,
        (
            v["ns"].as_str().ok_or_else(bad)?.to_string(),
            v["name"].as_str().ok_or_else(bad)?.to_string(),
        ),
    ))
}

fn list(
    shared: &ServerState,
    t: &Target<'_>,
    q: &Query,
    table: Option<&'static str>,
) -> Result<Response, ApiError> {
    let info = &t.info;
    let (labels, fields) = selectors(q, info)?;
    let rv_param = q.get("resourceVersion").filter(|s| !s.is_empty());
    if q.get("resourceVersionMatch") == Some("Exact")
        && let Some(rv) = rv_param
        && rv != shared.objects.store.current_rv().to_string()
    {
        return Err(ApiError::Expired(format!(
            "too old resource version: {rv} ({})",
            shared.objects.store.current_rv()
        )));
    }
    let limit = q
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let cont = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => Some(decode_continue(c)?),
        None => None,
    };
    let name_pin = fields.exact_name().map(str::to_string);
    let filter = |o: &Value| {
        name_pin
            .as_deref()
            .is_none_or(|n| crate::values::meta_str(o, "name") == Some(n))
            && labels.matches(o)
            && fields.matches(o)
    };
    let (rv, items, next) = shared.objects.store.list(
        &info.storage,
        t.namespace,
        cont.as_ref().map(|(_, k)| k),
        limit,
        &filter,
    );
    // Later pages report the first page's resourceVersion, as a real
    // paginated list does.
    let list_rv = cont.as_ref().map(|(r, _)| *r).unwrap_or(rv);
    let mut metadata = json!({"resourceVersion": list_rv.to_string()});
    if let Some(k) = &next {
        metadata["continue"] = json!(encode_continue(list_rv, k));
    }
    if let Some(version) = table {
        let objects: Vec<Value> = items.iter().map(|o| to_view(info, o)).collect();
        let include = super::table::Include::parse(q.get("includeObject"));
        return Ok(response::json(
            StatusCode::OK,
            &super::table::table(info, version, &objects, metadata, include, true),
        ));
    }
    // Serialize items straight into the body: a 100k-object list should not
    // build a second Value tree.
    let mut out = Vec::with_capacity(items.len() * 256 + 128);
    out.extend_from_slice(b"{\"kind\":");
    serde_json::to_writer(&mut out, &info.list_kind())
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    out.extend_from_slice(b",\"apiVersion\":");
    serde_json::to_writer(&mut out, &info.api_version())
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    out.extend_from_slice(b",\"metadata\":");
    serde_json::to_writer(&mut out, &metadata).map_err(|e| ApiError::Internal(e.to_string()))?;
    out.extend_from_slice(b",\"items\":[");
    for (i, obj) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if crate::registry::views::view_is_identity(info, obj) {
            serde_json::to_writer(&mut out, &**obj)
        } else {
            serde_json::to_writer(&mut out, &to_view(info, obj))
        }
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    }
    out.extend_from_slice(b"]}");
    Ok(response::bytes_with_type(
        StatusCode::OK,
        "application/json",
        out,
    ))
}

fn watch_params(
    t: &Target<'_>,
    q: &Query,
    table: Option<&'static str>,
) -> Result<WatchParams, ApiError> {
    let (labels, fields) = selectors(q, &t.info)?;
    Ok(WatchParams {
        namespace: t.namespace.map(str::to_string),
        resource_version: q.get("resourceVersion").map(str::to_string),
        resource_version_match: q.get("resourceVersionMatch").map(str::to_string),
        send_initial_events: q.flag("sendInitialEvents"),
        allow_bookmarks: q.flag("allowWatchBookmarks").unwrap_or(false),
        timeout: q
            .get("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .map(Duration::from_secs),
        labels,
        fields,
        table: table.map(|v| (v, super::table::Include::parse(q.get("includeObject")))),
    })
}

fn delete_collection(
    shared: &ServerState,
    t: &Target<'_>,
    req: Req<'_>,
) -> Result<Response, ApiError> {
    let Req {
        q,
        headers,
        body,
        scope,
        ..
    } = req;
    let info = &t.info;
    let (labels, fields) = selectors(q, info)?;
    let ctx = write_ctx(q, headers, scope)?;
    let opts = delete_options(shared, q, headers, body)?;
    let (_, items, _) = shared
        .objects
        .store
        .list(&info.storage, t.namespace, None, None, &|o| {
            labels.matches(o) && fields.matches(o)
        });
    let mut deleted = Vec::new();
    for obj in items {
        let ns = crate::values::meta_str(&obj, "namespace")
            .unwrap_or("")
            .to_string();
        let name = crate::values::meta_str(&obj, "name")
            .unwrap_or("")
            .to_string();
        match shared.objects.delete_object(info, &ns, &name, &opts, &ctx) {
            Ok(_) => deleted.push(to_view(info, &obj)),
            // Someone else deleted it first: that is fine for a collection.
            Err(ApiError::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(response::json(
        StatusCode::OK,
        &json!({
            "kind": info.list_kind(),
            "apiVersion": info.api_version(),
            "metadata": {"resourceVersion": shared.objects.store.current_rv().to_string()},
            "items": deleted,
        }),
    ))
}

/// Adds `Warning: 299 - "..."` headers, which kubectl and client-go print.
fn with_warnings(mut resp: Response, ctx: &WriteCtx) -> Response {
    for w in ctx.warnings.borrow().iter() {
        let text = format!("299 - \"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""));
        if let Ok(v) = axum::http::HeaderValue::from_str(&text) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

fn resource(
    shared: &Arc<ServerState>,
    request: &RequestInfo,
    req: Req<'_>,
) -> Result<Response, ApiError> {
    let Req {
        method,
        q,
        headers,
        body,
        scope,
        user,
    } = req;
    let t = target(&shared.objects.registry(), request)?;
    let info = t.info.clone();
    let table = super::table::wants_table(header_str(headers, header::ACCEPT));
    let ns = t.namespace.unwrap_or("");
    let not_allowed = || {
        ApiError::MethodNotAllowed(format!(
            "the server does not allow this method on the requested resource ({method})"
        ))
    };
    if info.review {
        return match (t.name, method) {
            (None, &Method::POST) => {
                let body = parse_body(shared, headers, body)?;
                shared.objects.check_type(&info, &body)?;
                let answer =
                    crate::auth::reviews::answer(&shared.auth, &info, user, t.namespace, body)?;
                Ok(response::json(StatusCode::CREATED, &answer))
            }
            _ => Err(not_allowed()),
        };
    }
    match (t.name, t.sub) {
        (None, _) => match *method {
            Method::GET => {
                if request.verb == "watch" {
                    if shared.faults.take_watch_expiry(&info.group, &info.plural) {
                        return watch::expired(
                            "too old resource version: injected expiry (Faults::expire_watches)",
                        );
                    }
                    watch::serve(shared.clone(), info, watch_params(&t, q, table)?)
                } else {
                    list(shared, &t, q, table)
                }
            }
            Method::POST => {
                if info.namespaced && t.namespace.is_none() {
                    return Err(not_allowed());
                }
                let ctx = write_ctx(q, headers, scope)?;
                let obj = parse_body(shared, headers, body)?;
                let created = shared.objects.create_object(&info, ns, obj, &ctx)?;
                scope.set_created(&created);
                Ok(with_warnings(
                    response::json(StatusCode::CREATED, &created),
                    &ctx,
                ))
            }
            Method::DELETE => delete_collection(shared, &t, req),
            _ => Err(not_allowed()),
        },
        (Some(name), None) => match *method {
            Method::GET => {
                let obj = shared.objects.get_object(&info, ns, name)?;
                let body = match table {
                    Some(version) => super::table::table(
                        &info,
                        version,
                        std::slice::from_ref(&obj),
                        json!({"resourceVersion": obj["metadata"]["resourceVersion"]}),
                        super::table::Include::parse(q.get("includeObject")),
                        true,
                    ),
                    None => obj,
                };
                Ok(response::json(StatusCode::OK, &body))
            }
            Method::PUT => {
                let ctx = write_ctx(q, headers, scope)?;
                let obj = parse_body(shared, headers, body)?;
                let v =
                    shared
                        .objects
                        .update_object(&info, ns, name, obj, Subresource::Main, &ctx)?;
                Ok(with_warnings(response::json(StatusCode::OK, &v), &ctx))
            }
            Method::PATCH => {
                let kind = patch_kind(headers, q, &info)?;
                let mut ctx = write_ctx(q, headers, scope)?;
                if let PatchKind::Apply { .. } = kind {
                    ctx.manager = q.get("fieldManager").unwrap_or("").to_string();
                }
                let (v, created) = shared.objects.patch_object(
                    &info,
                    ns,
                    name,
                    kind,
                    body,
                    Subresource::Main,
                    &ctx,
                )?;
                let code = if created {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                };
                Ok(with_warnings(response::json(code, &v), &ctx))
            }
            Method::DELETE => {
                let ctx = write_ctx(q, headers, scope)?;
                let opts = delete_options(shared, q, headers, body)?;
                let v = shared.objects.delete_object(&info, ns, name, &opts, &ctx)?;
                Ok(with_warnings(response::json(StatusCode::OK, &v), &ctx))
            }
            _ => Err(not_allowed()),
        },
        (Some(name), Some("status"))
            if info.status
                && matches!(*method, Method::PUT | Method::PATCH)
                && shared
                    .faults
                    .refuses_status_write(&info.group, &info.plural, ns, name) =>
        {
            Err(ApiError::conflict(
                &info.group,
                &info.plural,
                name,
                "injected conflict on the first status write (Faults::conflict_first_status_writes)",
            ))
        }
        (Some(name), Some("status")) if info.status => match *method {
            Method::GET => Ok(response::json(
                StatusCode::OK,
                &shared.objects.get_object(&info, ns, name)?,
            )),
            Method::PUT => {
                let ctx = write_ctx(q, headers, scope)?;
                let obj = parse_body(shared, headers, body)?;
                let v = shared.objects.update_object(
                    &info,
                    ns,
                    name,
                    obj,
                    Subresource::Status,
                    &ctx,
                )?;
                Ok(with_warnings(response::json(StatusCode::OK, &v), &ctx))
            }
            Method::PATCH => {
                let kind = patch_kind(headers, q, &info)?;
                let mut ctx = write_ctx(q, headers, scope)?;
                if let PatchKind::Apply { .. } = kind {
                    ctx.manager = q.get("fieldManager").unwrap_or("").to_string();
                }
                let (v, _) = shared.objects.patch_object(
                    &info,
                    ns,
                    name,
                    kind,
                    body,
                    Subresource::Status,
                    &ctx,
                )?;
                Ok(with_warnings(response::json(StatusCode::OK, &v), &ctx))
            }
            _ => Err(not_allowed()),
        },
        (Some(name), Some("token")) if info.token_request => match *method {
            Method::POST => {
                let body = parse_body(shared, headers, body)?;
                let answer = crate::auth::reviews::token_request(&shared.auth, ns, name, body)?;
                Ok(response::json(StatusCode::CREATED, &answer))
            }
            _ => Err(not_allowed()),
        },
        (Some(name), Some("scale")) if info.scale.is_some() => match *method {
            Method::GET => {
                let ns_key = if info.namespaced { ns } else { "" };
                let stored = shared
                    .objects
                    .store
                    .get(&info.storage, ns_key, name)
                    .ok_or_else(|| ApiError::not_found(&info.group, &info.plural, name))?;
                Ok(response::json(
                    StatusCode::OK,
                    &shared.objects.scale_of(&info, &stored.obj)?,
                ))
            }
            Method::PUT => {
                let ctx = write_ctx(q, headers, scope)?;
                let v = shared
                    .objects
                    .write_scale(&info, ns, name, None, body, &ctx)?;
                Ok(with_warnings(response::json(StatusCode::OK, &v), &ctx))
            }
            Method::PATCH => {
                let kind = patch_kind(headers, q, &info)?;
                let ctx = write_ctx(q, headers, scope)?;
                let v = shared
                    .objects
                    .write_scale(&info, ns, name, Some(kind), body, &ctx)?;
                Ok(with_warnings(response::json(StatusCode::OK, &v), &ctx))
            }
            _ => Err(not_allowed()),
        },
        _ => Err(ApiError::no_route()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_ignores_empty_pairs() {
        let q = Query::parse(Some("&watch=true&&labelSelector=app%3Dx&"));
        assert_eq!(q.flag("watch"), Some(true));
        assert_eq!(q.get("labelSelector"), Some("app=x"));
        let q = Query::parse(Some(""));
        assert!(q.0.is_empty());
    }

    /// Where routing takes a GET of `path`: `plural ns=.. name=.. sub=..`
    /// with only what is set, or None for 404.
    fn routed(registry: &Registry, path: &str) -> Option<String> {
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let info = RequestInfo::parse("GET", &segs, false, None);
        let t = target(registry, &info).ok()?;
        let mut out = t.info.plural.clone();
        for (k, v) in [("ns", t.namespace), ("name", t.name), ("sub", t.sub)] {
            if let Some(v) = v {
                out.push_str(&format!(" {k}={v}"));
            }
        }
        Some(out)
    }

    fn crd(plural: &str, scope: &str) -> Value {
        json!({"metadata": {"name": format!("{plural}.example.com")},
            "spec": {"group": "example.com", "scope": scope,
                "names": {"plural": plural, "kind": "K"},
                "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}}]}})
    }

    #[test]
    fn routing_serves_what_the_request_info_names() {
        let mut registry = Registry::new();
        for (plural, scope) in [
            ("status", "Namespaced"),
            ("finalize", "Namespaced"),
            ("namespaces", "Cluster"),
        ] {
            let (storage, infos) = crate::registry::crd::infos_for(&crd(plural, scope));
            registry.set_custom(&storage, infos);
        }
        // A namespace's subresource, never an object of `status` or
        // `finalize`, with or without a trailing part.
        assert_eq!(
            routed(&registry, "/api/v1/namespaces/ns/status").as_deref(),
            Some("namespaces name=ns sub=status")
        );
        for path in [
            "/api/v1/namespaces/ns/status/obj",
            "/api/v1/namespaces/ns/finalize/obj",
            "/apis/example.com/v1/namespaces/ns/status/obj",
            "/apis/example.com/v1/namespaces/ns/finalize/obj",
            "/apis/example.com/v1/namespaces/ns/status",
            // The cluster-scoped custom `namespaces` is not reached
            // through a namespace of its own name.
            "/apis/example.com/v1/namespaces/ns",
            "/api/v1/namespaces/ns/namespaces/ns",
            "/api/v1/namespaces/ns/configmaps/c/status/extra",
        ] {
            assert_eq!(routed(&registry, path), None, "{path}");
        }
        // What the resources called `status` and `finalize` still serve.
        for (path, want) in [
            ("/apis/example.com/v1/status", "status"),
            ("/apis/example.com/v1/finalize", "finalize"),
            ("/apis/example.com/v1/namespaces", "namespaces"),
            ("/api/v1/namespaces/ns", "namespaces name=ns"),
            (
                "/api/v1/namespaces/ns/configmaps/c",
                "configmaps ns=ns name=c",
            ),
        ] {
            assert_eq!(routed(&registry, path).as_deref(), Some(want), "{path}");
        }
    }

    #[test]
    fn continue_tokens_round_trip() {
        let t = encode_continue(42, &("ns".into(), "n".into()));
        assert_eq!(
            decode_continue(&t).unwrap(),
            (42, ("ns".into(), "n".into()))
        );
        assert!(decode_continue("!!").is_err());
    }
}
