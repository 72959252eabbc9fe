//! The admin server: `/metrics` (Prometheus text), `/healthz`, `/readyz`,
//! `/plugins` (JSON status per plugin) and `POST /plugins/{name}/reload`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

/// What the admin endpoints report on; implemented by the manager.
pub trait AdminState: Send + Sync + 'static {
    /// The Prometheus exposition.
    fn metrics(&self) -> String;
    /// Ok while the process is alive and able to work.
    fn healthz(&self) -> Result<(), String>;
    /// Ok once every informer synced and the host is leader or standby.
    fn readyz(&self) -> Result<(), String>;
    /// Status of every plugin.
    fn plugins(&self) -> serde_json::Value;
    /// Reloads one plugin from its file; Err((status, message)).
    fn reload(&self, name: String) -> BoxFuture<'_, Result<serde_json::Value, (u16, String)>>;
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
pub async fn serve(
    bind: SocketAddr,
    state: Arc<dyn AdminState>,
    stop: CancellationToken,
) -> Result<SocketAddr, AdminError> {
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|source| AdminError { addr: bind, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| AdminError { addr: bind, source })?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/plugins", get(plugins))
        .route("/plugins/{name}/reload", post(reload))
        .with_state(state);
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
        if let Err(e) = served {
            tracing::error!("admin server failed: {e}");
        }
    });
    Ok(addr)
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

async fn readyz(State(state): State<Arc<dyn AdminState>>) -> Response {
    check(state.readyz())
}

async fn plugins(State(state): State<Arc<dyn AdminState>>) -> Json<serde_json::Value> {
    Json(state.plugins())
}

async fn reload(State(state): State<Arc<dyn AdminState>>, Path(name): Path<String>) -> Response {
    match state.reload(name).await {
        Ok(v) => Json(v).into_response(),
        Err((code, message)) => (
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            Json(serde_json::json!({ "error": message })),
        )
            .into_response(),
    }
}
