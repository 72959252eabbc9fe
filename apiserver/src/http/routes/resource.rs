//! Resource requests, per name, subresource and method: reviews, lists
//! and watches, create, get, update, patch and delete, status, token
//! requests, scale and a namespace's finalizers.

use std::sync::Arc;

use axum::http::{Method, StatusCode, header};
use axum::response::Response;
use serde_json::json;

use super::body::{delete_request, field_manager, parse_body, patch_kind, write_ctx};
use super::collection::{delete_collection, list, watch_params};
use super::params::header_str;
use super::request::Req;
use super::target::target;
use crate::admission::Operation;
use crate::auth::rbac::Attributes;
use crate::error::ApiError;
use crate::http::request_info::RequestInfo;
use crate::http::response;
use crate::http::state::ServerState;
use crate::http::watch;
use crate::registry::resources::ResourceInfo;
use crate::registry::writes::{PatchKind, Subresource, is_namespace};

/// A PUT or PATCH of object `name` or of its status (`sub`). A
/// server-side apply may create the object, which is answered 201.
async fn update(
    shared: &ServerState,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
    sub: Subresource,
    req: Req<'_>,
) -> Result<Response, ApiError> {
    let (q, headers, body) = (req.q, req.headers, req.body);
    let mut ctx = write_ctx(shared, info, ns, req)?;
    let (object, code) = if *req.method == Method::PUT {
        let obj = parse_body(shared, headers, body)?;
        let object = shared
            .objects
            .update_object(info, ns, name, obj, sub, &ctx)
            .await?;
        (object, StatusCode::OK)
    } else {
        let kind = patch_kind(headers, q, info)?;
        if let PatchKind::Apply { .. } = kind {
            ctx.manager = field_manager(q, req.method)?.unwrap_or("").to_string();
            // An apply of an absent object creates it: as upstream, that
            // needs `create` as well as the `patch` the request was
            // authorized for.
            let create = Attributes::resource(
                "create",
                &info.group,
                &info.plural,
                sub.name().unwrap_or(""),
                if info.namespaced { ns } else { "" },
                name,
            );
            ctx.create_refusal = shared.auth.check(req.user, &create).err();
        }
        let (object, created) = shared
            .objects
            .patch_object(info, ns, name, kind, body, sub, &ctx)
            .await?;
        let code = if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        (object, code)
    };
    Ok(response::json(code, &object))
}

pub(super) async fn resource(
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
        ..
    } = req;
    let t = target(&shared.objects.registry(), request)?;
    let info = t.info.clone();
    let table = crate::http::table::wants_table(header_str(headers, header::ACCEPT));
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
                    list(shared, &t, q, table, req.deadline)
                }
            }
            Method::POST => {
                if info.namespaced && t.namespace.is_none() {
                    return Err(not_allowed());
                }
                let ctx = write_ctx(shared, &info, ns, req)?;
                let obj = parse_body(shared, headers, body)?;
                let created = shared.objects.create_object(&info, ns, obj, &ctx).await?;
                scope.set_created(&created);
                Ok(response::json(StatusCode::CREATED, &created))
            }
            // Upstream serves only list and watch across namespaces: a
            // collection delete names the namespace it empties.
            Method::DELETE if info.namespaced && t.namespace.is_none() => Err(not_allowed()),
            Method::DELETE => delete_collection(shared, &t, req).await,
            _ => Err(not_allowed()),
        },
        (Some(name), None) => match *method {
            Method::GET => {
                let obj = shared.objects.get_object(&info, ns, name)?;
                let Some(version) = table else {
                    return Ok(response::json(StatusCode::OK, &obj));
                };
                let metadata = json!({"resourceVersion": obj["metadata"]["resourceVersion"]});
                let include = crate::http::table::Include::parse(q.get("includeObject"));
                let mut body = Vec::new();
                crate::http::table::write_table(
                    &mut body,
                    &info,
                    version,
                    [obj],
                    &metadata,
                    include,
                )
                .map_err(|e| ApiError::Internal(e.to_string()))?;
                Ok(response::bytes_with_type(
                    StatusCode::OK,
                    "application/json",
                    body,
                ))
            }
            Method::PUT | Method::PATCH => {
                update(shared, &info, ns, name, Subresource::Main, req).await
            }
            Method::DELETE => {
                let (ctx, opts) = delete_request(shared, &info, ns, req)?;
                let v = shared
                    .objects
                    .delete_object(&info, ns, name, &opts, &ctx)
                    .await?;
                Ok(response::json(StatusCode::OK, &v))
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
            Method::PUT | Method::PATCH => {
                update(shared, &info, ns, name, Subresource::Status, req).await
            }
            _ => Err(not_allowed()),
        },
        (Some(name), Some("token")) if info.token_request => match *method {
            Method::POST => {
                use crate::auth::reviews;
                // As upstream: mutating webhooks see the request decoded,
                // validating ones see it checked and completed, and the
                // token is issued only once both allowed it.
                let mut asked = reviews::decode_token_request(parse_body(shared, headers, body)?)?;
                let ctx = write_ctx(shared, &info, ns, req)?;
                let admitting = shared
                    .objects
                    .admitting(&info, Some("token"), &ctx)
                    .map(|a| {
                        let options = a.write_options(Operation::Create);
                        (a, options)
                    });
                if let Some((a, options)) = &admitting {
                    a.mutate(
                        Operation::Create,
                        (ns, name),
                        Some(&mut asked),
                        None,
                        options.clone(),
                    )
                    .await?;
                }
                let ask = reviews::prepare_token_request(&shared.auth, ns, name, asked)?;
                if let Some((a, options)) = admitting {
                    a.validate(
                        Operation::Create,
                        (ns, name),
                        Some(ask.request()),
                        None,
                        options,
                    )
                    .await?;
                }
                let answer = reviews::issue_token_request(&shared.auth, ns, name, ask)?;
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
                let ctx = write_ctx(shared, &info, ns, req)?;
                let v = shared
                    .objects
                    .write_scale(&info, ns, name, None, body, &ctx)
                    .await?;
                Ok(response::json(StatusCode::OK, &v))
            }
            Method::PATCH => {
                let kind = patch_kind(headers, q, &info)?;
                let ctx = write_ctx(shared, &info, ns, req)?;
                let v = shared
                    .objects
                    .write_scale(&info, ns, name, Some(kind), body, &ctx)
                    .await?;
                Ok(response::json(StatusCode::OK, &v))
            }
            _ => Err(not_allowed()),
        },
        // Upstream serves a namespace's finalizers by PUT alone.
        (Some(name), Some("finalize")) if is_namespace(&info) => match *method {
            Method::PUT => update(shared, &info, ns, name, Subresource::Finalize, req).await,
            _ => Err(not_allowed()),
        },
        _ => Err(ApiError::no_route()),
    }
}
