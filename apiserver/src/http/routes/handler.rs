//! The entry of every request: authentication, impersonation and
//! authorization, the bounded body, the answer, the wait for durable
//! writes, the audit and the request metrics.

use std::sync::Arc;
use std::time::SystemTime;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};

use super::dispatch::dispatch;
use super::params::{Query, header_str};
use super::request::{Req, RequestScope};
use crate::auth::identity::UserInfo;
use crate::error::ApiError;
use crate::http::audit::Caller;
use crate::http::conn::Peer;
use crate::http::request_info::RequestInfo;
use crate::http::state::ServerState;
use crate::metrics::Limit;

/// The axum router serving everything through one fallback handler, because
/// the Kubernetes URL grammar does not fit a static route table.
pub(crate) fn router(shared: Arc<ServerState>) -> Router {
    Router::new().fallback(handle).with_state(shared)
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

async fn handle(State(shared): State<Arc<ServerState>>, req: Request) -> Response {
    let time = SystemTime::now();
    let peer = req.extensions().get::<Peer>().map(|p| p.0);
    let (parts, body) = req.into_parts();
    let Some(authenticated) = authenticate(&shared, &parts.headers) else {
        let mut response = ApiError::Unauthorized.into_response();
        // A client that cannot authenticate does not keep the connection:
        // otherwise a few unauthenticated requests a second would hold
        // every connection slot for the idle timeout.
        response.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
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
        scope.take_audit_annotations(),
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
    let started = tokio::time::Instant::now();
    let target = info
        .is_resource
        .then_some((info.group.as_str(), info.resource.as_str()));
    if shared.faults.fails_request(target) {
        return ApiError::Internal("injected failure (Faults::fail_requests)".into())
            .into_response();
    }
    shared.faults.held(target).await;
    let body = match read_body(shared, body).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    // As upstream's, every request but a long-running watch has one.
    let deadline = match (info.verb != "watch")
        .then(|| super::deadline::request_deadline(query, started))
        .transpose()
    {
        Ok(deadline) => deadline,
        Err(e) => return e.into_response(),
    };
    let req = Req {
        method: &parts.method,
        q: query,
        headers: &parts.headers,
        body: &body,
        scope,
        user,
        deadline,
    };
    let dispatched = dispatch(shared, segs, info, req);
    let result = match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, dispatched)
            .await
            .unwrap_or_else(|_| Err(ApiError::request_timeout())),
        None => dispatched.await,
    };
    let mut response = result.unwrap_or_else(|e| {
        tracing::debug!(method = %parts.method, path = %parts.uri.path(), code = e.code(), error = %e, "request failed");
        e.into_response()
    });
    // Warnings go with any answer: a webhook may warn and then deny.
    for w in scope.take_warnings() {
        let text = format!("299 - \"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""));
        if let Ok(v) = axum::http::HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, v);
        }
    }
    for durable in scope.take_pending() {
        if let Err(message) = durable.wait().await {
            response = ApiError::Internal(message.to_string()).into_response();
            break;
        }
    }
    response
}

/// The whole body, bounded in size ([`MAX_BODY_BYTES`]) and time (the
/// server's body timeout, [`crate::http::conn::BODY_READ_TIMEOUT`] by default).
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
