//! Where a request goes: resource requests to [`resource`], anything else
//! by its path (version, health, metrics, discovery, OpenAPI).

use std::sync::Arc;

use axum::http::{Method, StatusCode, header};
use axum::response::Response;
use serde_json::Value;

use super::params::header_str;
use super::request::Req;
use super::resource::resource;
use crate::error::ApiError;
use crate::http::discovery;
use crate::http::request_info::RequestInfo;
use crate::http::response;
use crate::http::state::ServerState;

/// What prometheus-client's text encoder writes: OpenMetrics text, which
/// Prometheus scrapes as such.
const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Answers a request: a resource request as `info` (what authorization
/// decided on) reads it, anything else by its path segments `s`.
pub(super) async fn dispatch(
    shared: &Arc<ServerState>,
    s: &[&str],
    info: &RequestInfo,
    req: Req<'_>,
) -> Result<Response, ApiError> {
    if info.is_resource {
        return resource(shared, info, req).await;
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
            shared.metrics.exceeded_by(
                crate::metrics::Limit::WatchHistoryBytes,
                shared.objects.store.take_history_trims(),
            );
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
        ["openapi", "v3", "api", v] => openapi_gv(shared, method, "", v),
        ["openapi", "v3", "apis", g, v] => openapi_gv(shared, method, g, v),
        _ => Err(ApiError::no_route()),
    }
}

/// `/openapi/v3/{api/v1 | apis/g/v}`, from the documents built at the
/// registry's generation.
fn openapi_gv(
    shared: &ServerState,
    method: &Method,
    group: &str,
    version: &str,
) -> Result<Response, ApiError> {
    if *method != Method::GET {
        return Err(ApiError::MethodNotAllowed(format!(
            "the server does not allow this method on the requested resource ({method})"
        )));
    }
    let generation = shared.objects.registry_generation();
    let doc = shared
        .openapi
        .get(generation, &format!("{group}/{version}"), || {
            discovery::openapi_gv(&shared.objects.registry(), group, version)
        })
        .ok_or_else(ApiError::no_route)?;
    Ok(response::bytes_with_type(
        StatusCode::OK,
        "application/json",
        doc,
    ))
}
