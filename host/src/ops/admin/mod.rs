//! The admin server: `/` (the status page, see [`page`]), `/metrics`
//! (Prometheus text), `/healthz`, `/readyz`, `/plugins` (JSON status per
//! plugin), `/plugins/{name}/shadow` (a candidate's shadow runs), `POST
//! /plugins/{name}/reload` and `POST /plugins/{name}/promote` (a canary's
//! candidate).

pub mod page;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use page::PageData;

use crate::meta::syntax::quoted;
use crate::ops::serving;

/// Connections the admin server serves at once.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a client has to send a request's headers (and an idle
/// connection is kept).
const QUIET: std::time::Duration = std::time::Duration::from_secs(10);
/// The pages a browser opens, which may carry the token in their query.
const PAGES: [&str; 2] = ["/", "/status/fragment"];

/// What the admin endpoints report on; implemented by the manager.
pub trait AdminState: Send + Sync + 'static {
    /// The Prometheus exposition.
    fn metrics(&self) -> String;
    /// Ok while the process is alive and able to work.
    fn healthz(&self) -> Result<(), String>;
    /// Ok once every plugin loaded and its informers synced.
    fn readyz(&self) -> Result<(), String>;
    /// Each plugin's readiness, by name: Ok once it loaded and its
    /// informers synced; Err says what it waits for.
    fn plugin_readiness(&self) -> Vec<(String, Result<(), String>)>;
    /// A line `/readyz` adds to its answer (the shards held, with sharding).
    fn ready_detail(&self) -> Option<String> {
        None
    }
    /// Status of every plugin.
    fn plugins(&self) -> serde_json::Value;
    /// What the status page shows.
    fn page(&self) -> PageData;
    /// The shadow runs of plugin `name`'s candidate: counts and the last
    /// divergences.
    fn shadow(&self, name: String) -> Result<serde_json::Value, Refusal>;
    /// Promotes plugin `name`'s canary candidate; Ok: its new status.
    fn promote(&self, name: String) -> Result<serde_json::Value, Refusal>;
    /// Reloads one plugin from its source; Ok: its new status.
    fn reload(&self, name: String) -> BoxFuture<'_, Result<serde_json::Value, Refusal>>;
}

/// Why a mutating admin request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 404: no such plugin.
    NotFound(String),
    /// 409: the plugin is being removed.
    Conflict(String),
    /// 422: the new version was refused; the old one keeps running.
    Invalid(String),
}

impl Refusal {
    fn status(&self) -> StatusCode {
        match self {
            Refusal::NotFound(_) => StatusCode::NOT_FOUND,
            Refusal::Conflict(_) => StatusCode::CONFLICT,
            Refusal::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
        }
    }

    fn message(&self) -> &str {
        match self {
            Refusal::NotFound(m) | Refusal::Conflict(m) | Refusal::Invalid(m) => m,
        }
    }
}

/// Why the admin server could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot bind the admin server to {addr}: {source}")]
pub struct AdminError {
    pub addr: SocketAddr,
    pub source: std::io::Error,
}

/// Binds `bind` and serves until `stop` is cancelled. Returns the bound
/// address (useful with port 0).
///
/// # What needs the token
/// With a `token`, the `POST` endpoints and every read that carries what
/// plugins wrote or which objects they reconciled (`/plugins/{name}/shadow`:
/// both versions' write bodies, which may hold a Secret's data; the status
/// page: keys and error messages) answer 401 unless the request carries
/// `Authorization: Bearer <token>`, or for a page a browser opens,
/// `?token=<token>`. The config requires a token whenever the address is
/// not loopback. Metrics, probes and `/plugins` (state, digests, counts and
/// bounded error messages, no object bodies) stay open for scrapers,
/// kubelets and dashboards.
///
/// # Browsers on the same machine
/// Any web page a local browser opens can send requests to a loopback
/// port. So a `POST` whose `Origin` is not the admin server's own (another
/// site, or another port of this machine: a page can send a POST without
/// asking first) is refused, and on a loopback address without a
/// token, a request addressed to another name (`Host`: a DNS rebinding
/// page reaches the port under its own name) is refused too.
///
/// # Bounds
/// At most [`MAX_CONNECTIONS`] connections at once; a client has 10 s to
/// send each request's headers ([`serving`]).
pub async fn serve(
    bind: SocketAddr,
    state: Arc<dyn AdminState>,
    token: Option<String>,
    stop: CancellationToken,
) -> Result<SocketAddr, AdminError> {
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|source| AdminError { addr: bind, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| AdminError { addr: bind, source })?;
    let token = Arc::new(token);
    let guarded = |route: axum::routing::MethodRouter<Arc<dyn AdminState>>| {
        route.route_layer(axum::middleware::from_fn_with_state(
            token.clone(),
            require_token,
        ))
    };
    let loopback_only = bind.ip().is_loopback() && token.is_none();
    let app = Router::new()
        .route("/", guarded(get(status_page)))
        .route("/status/fragment", guarded(get(status_fragment)))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/readyz/plugin/{name}", get(plugin_readyz))
        .route("/plugins", get(plugins))
        .route("/plugins/{name}/shadow", guarded(get(shadow)))
        .route("/plugins/{name}/reload", guarded(post(reload)))
        .route("/plugins/{name}/promote", guarded(post(promote)))
        .layer(axum::middleware::from_fn_with_state(
            loopback_only,
            same_site,
        ))
        .with_state(state);
    let bounds = serving::Bounds::new(MAX_CONNECTIONS, QUIET);
    tokio::spawn(serving::serve(
        "admin",
        listener,
        app,
        bounds,
        stop,
        |tcp| async { Some(tcp) },
    ));
    Ok(addr)
}

/// `?token=` of a page request.
#[derive(serde::Deserialize)]
struct PageQuery {
    token: Option<String>,
}

async fn status_page(
    State(state): State<Arc<dyn AdminState>>,
    Query(query): Query<PageQuery>,
) -> Response {
    let html = page::document(&state.page(), query.token.as_deref());
    (
        [(header::CACHE_CONTROL, "no-store")],
        axum::response::Html(html),
    )
        .into_response()
}

async fn status_fragment(State(state): State<Arc<dyn AdminState>>) -> Response {
    (
        [(header::CACHE_CONTROL, "no-store")],
        axum::response::Html(page::fragment(&state.page())),
    )
        .into_response()
}

async fn metrics(State(state): State<Arc<dyn AdminState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics(),
    )
        .into_response()
}

fn check(result: Result<(), String>) -> Response {
    match result {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    }
}

async fn healthz(State(state): State<Arc<dyn AdminState>>) -> Response {
    check(state.healthz())
}

/// `?verbose` of `/readyz`.
#[derive(serde::Deserialize)]
struct ReadyQuery {
    verbose: Option<String>,
}

/// `/readyz`: 200 once every plugin is ready, else 503 naming what each
/// waits for. With `?verbose`, one line per plugin as kube-apiserver lists
/// its checks (`[+]plugin/NAME ok`, `[-]plugin/NAME loading`).
async fn readyz(
    State(state): State<Arc<dyn AdminState>>,
    Query(query): Query<ReadyQuery>,
) -> Response {
    let detail = state
        .ready_detail()
        .map(|d| format!("{d}\n"))
        .unwrap_or_default();
    let verdict = state.readyz();
    let status = match verdict {
        Ok(()) => StatusCode::OK,
        Err(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    if query.verbose.is_some() {
        let mut body = String::new();
        for (name, ready) in state.plugin_readiness() {
            match ready {
                Ok(()) => body.push_str(&format!("[+]plugin/{name} ok\n")),
                Err(why) => body.push_str(&format!("[-]plugin/{name} {why}\n")),
            }
        }
        body.push_str(&detail);
        body.push_str(match verdict {
            Ok(()) => "readyz check passed\n",
            Err(_) => "readyz check failed\n",
        });
        return (status, body).into_response();
    }
    match verdict {
        Ok(()) => (status, format!("ok\n{detail}")).into_response(),
        Err(e) => (status, format!("{e}\n{detail}")).into_response(),
    }
}

/// `/readyz/plugin/{name}`: one plugin's readiness (404: no such plugin).
async fn plugin_readyz(
    State(state): State<Arc<dyn AdminState>>,
    Path(name): Path<String>,
) -> Response {
    match state
        .plugin_readiness()
        .into_iter()
        .find(|(n, _)| *n == name)
    {
        Some((_, ready)) => check(ready),
        None => (
            StatusCode::NOT_FOUND,
            format!("no plugin named {}\n", crate::meta::syntax::quoted(&name)),
        )
            .into_response(),
    }
}

async fn plugins(State(state): State<Arc<dyn AdminState>>) -> Json<serde_json::Value> {
    Json(state.plugins())
}

async fn promote(State(state): State<Arc<dyn AdminState>>, Path(name): Path<String>) -> Response {
    refusable(state.promote(name))
}

async fn shadow(State(state): State<Arc<dyn AdminState>>, Path(name): Path<String>) -> Response {
    refusable(state.shadow(name))
}

fn refusable(result: Result<serde_json::Value, Refusal>) -> Response {
    match result {
        Ok(v) => Json(v).into_response(),
        Err(refusal) => (
            refusal.status(),
            Json(serde_json::json!({ "error": refusal.message() })),
        )
            .into_response(),
    }
}

async fn reload(State(state): State<Arc<dyn AdminState>>, Path(name): Path<String>) -> Response {
    match state.reload(name).await {
        Ok(v) => Json(v).into_response(),
        Err(refusal) => (
            refusal.status(),
            Json(serde_json::json!({ "error": refusal.message() })),
        )
            .into_response(),
    }
}

/// 401 unless the request carries the bearer token (when one is set).
async fn require_token(
    State(token): State<Arc<Option<String>>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(token) = token.as_deref() {
        let bearer = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_string);
        // A browser opening the status page cannot set a header: a GET may
        // carry the token in its query instead.
        let in_query = (request.method() == axum::http::Method::GET
            && PAGES.contains(&request.uri().path()))
        .then(|| {
            Query::<PageQuery>::try_from_uri(request.uri())
                .ok()
                .and_then(|q| q.0.token)
        })
        .flatten();
        let ok = bearer
            .or(in_query)
            .is_some_and(|p| constant_time_eq(p.as_bytes(), token.as_bytes()));
        if !ok {
            return (
                StatusCode::UNAUTHORIZED,
                Json(serde_json::json!({ "error": "this endpoint needs the admin token (Authorization: Bearer …)" })),
            )
                .into_response();
        }
    }
    next.run(request).await
}

/// Refuses what a web page in a local browser could send: a `POST` from
/// another origin's page, and, when `loopback_only`, a request addressed to
/// a name other than a loopback one.
async fn same_site(
    State(loopback_only): State<bool>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host_of = |authority: &str| -> String {
        let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split_once(']').map_or(v6, |(h, _)| h),
            None => authority.split_once(':').map_or(authority, |(h, _)| h),
        };
        host.to_ascii_lowercase()
    };
    let headers = request.headers();
    let text = |v: &axum::http::HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned();
    let authority = headers
        .get(header::HOST)
        .map(|h| text(h).to_ascii_lowercase());
    let host = authority.as_deref().map(host_of);
    let origin = headers.get(header::ORIGIN).map(text);
    if loopback_only
        && let Some(host) = &host
        && !(host == "localhost"
            || host.ends_with(".localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback()))
    {
        return refuse(format!(
            "this admin address answers only requests addressed to a loopback name or address, not {} (set admin.token to serve other names)",
            quoted(host)
        ));
    }
    if request.method() == axum::http::Method::POST
        && let Some(origin) = origin
    {
        // Same origin, not same site: a page on another port of the same
        // machine (a dev server, a notebook) is another origin. The admin
        // server speaks plain HTTP, so its own pages' origin is
        // `http://` and the authority the browser addressed.
        let same_origin = origin
            .to_ascii_lowercase()
            .strip_prefix("http://")
            .is_some_and(|rest| Some(rest) == authority.as_deref());
        if !same_origin {
            return refuse(format!(
                "a POST from a page of another origin (Origin {}) is refused",
                quoted(&origin)
            ));
        }
    }
    next.run(request).await
}

fn refuse(error: String) -> Response {
    (
        StatusCode::FORBIDDEN,
        Json(serde_json::json!({ "error": error })),
    )
        .into_response()
}

/// Compares without an early exit, so timing does not reveal the token.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
