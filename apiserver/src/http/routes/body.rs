//! What a request's body and parameters say about a write: the object,
//! the patch kind, the delete options and the write context.

use std::sync::Arc;

use axum::http::{HeaderMap, header};
use serde_json::Value;

use super::params::{Query, header_str};
use super::request::Req;
use crate::admission::Caller;
use crate::error::ApiError;
use crate::http::media::MediaType;
use crate::http::protobuf;
use crate::http::state::ServerState;
use crate::metrics::json_limit;
use crate::registry::delete::DeleteOptions;
use crate::registry::resources::ResourceInfo;
use crate::registry::writes::{GrantCheck, PatchKind, QueryOptions, WriteCtx};

/// The longest `fieldManager` (kube-apiserver's `FieldManagerMaxLength`):
/// every object's managedFields name their managers, so the name is
/// stored with each field set it owns.
pub(super) const MAX_FIELD_MANAGER: usize = 128;

/// The request's `fieldManager`, if it names one: at most
/// [`MAX_FIELD_MANAGER`] bytes of printable characters, or 422 as upstream.
pub(super) fn field_manager<'q>(
    q: &'q Query,
    method: &axum::http::Method,
) -> Result<Option<&'q str>, ApiError> {
    let Some(name) = q.get("fieldManager").filter(|m| !m.is_empty()) else {
        return Ok(None);
    };
    let problem = if name.len() > MAX_FIELD_MANAGER {
        Some(format!(
            "Too long: may not be more than {MAX_FIELD_MANAGER} bytes"
        ))
    } else if name.chars().any(char::is_control) {
        Some("Invalid value: must consist of printable characters".to_string())
    } else {
        None
    };
    let Some(message) = problem else {
        return Ok(Some(name));
    };
    let kind = match *method {
        axum::http::Method::POST => "CreateOptions",
        axum::http::Method::PUT => "UpdateOptions",
        axum::http::Method::PATCH => "PatchOptions",
        _ => "DeleteOptions",
    };
    Err(ApiError::invalid(
        "meta.k8s.io",
        kind,
        "",
        vec![crate::error::Cause {
            reason: "FieldValueInvalid".into(),
            message,
            field: "fieldManager".into(),
        }],
    ))
}

/// The write parameters of `req`, a write of `info` in `ns`, sharing its
/// scope's warnings, audit annotations and durable waits; for a write of
/// an RBAC object, the check of what its author may grant.
pub(super) fn write_ctx(
    shared: &ServerState,
    info: &ResourceInfo,
    ns: &str,
    req: Req<'_>,
) -> Result<WriteCtx, ApiError> {
    let (q, headers, scope) = (req.q, req.headers, req.scope);
    let dry_run = dry_run(q.get("dryRun").into_iter())?;
    let given = field_manager(q, req.method)?;
    let query = QueryOptions {
        field_manager: given.map(str::to_string),
        field_validation: match q.get("fieldValidation") {
            Some("Strict") => Some("Strict"),
            Some("Warn") => Some("Warn"),
            Some("Ignore") => Some("Ignore"),
            _ => None,
        },
    };
    let manager = match given {
        Some(m) => m.to_string(),
        None => {
            // As upstream: the User-Agent's product, cut to the longest
            // name a manager may have.
            let agent = header_str(headers, header::USER_AGENT)
                .split('/')
                .next()
                .unwrap_or("");
            agent[..agent.floor_char_boundary(MAX_FIELD_MANAGER)].to_string()
        }
    };
    let user = req.user;
    let grants = (info.group == crate::auth::rbac::GROUP)
        .then(|| {
            shared
                .auth
                .escalation(user, if info.namespaced { ns } else { "" })
        })
        .flatten()
        .map(|e| Arc::new(e) as Arc<dyn GrantCheck>);
    Ok(WriteCtx {
        manager,
        dry_run,
        query,
        deadline: req.deadline,
        warnings: scope.warnings.clone(),
        audit_annotations: scope.audit_annotations.clone(),
        caller: Some(Arc::new(Caller {
            username: user.name.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
        })),
        pending: scope.pending.clone(),
        grants,
        create_refusal: None,
    })
}

/// Parses a JSON (or YAML) request body for create/update.
pub(super) fn parse_body(
    shared: &ServerState,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Value, ApiError> {
    let ct = MediaType::parse(header_str(headers, header::CONTENT_TYPE)).essence;
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
        "application/vnd.kubernetes.protobuf" => protobuf::decode(body).map_err(|e| match e {
            protobuf::ProtobufError::Malformed | protobuf::ProtobufError::NoEnvelope => {
                ApiError::BadRequest(e.to_string())
            }
            _ => ApiError::UnsupportedMediaType(e.to_string()),
        }),
        other => Err(ApiError::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {other})"
        ))),
    }
}

pub(super) fn patch_kind(
    headers: &HeaderMap,
    q: &Query,
    info: &ResourceInfo,
) -> Result<PatchKind, ApiError> {
    let ct = MediaType::parse(header_str(headers, header::CONTENT_TYPE)).essence;
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

/// Whether `values` (of `dryRun`, in the query or a DeleteOptions body)
/// ask for a dry run: each must be `All`, as upstream.
fn dry_run<'a>(values: impl Iterator<Item = &'a str>) -> Result<bool, ApiError> {
    let mut dry = false;
    for value in values {
        match value {
            "" => {}
            "All" => dry = true,
            other => {
                return Err(ApiError::BadRequest(format!(
                    "Invalid dryRun value: {}: supported values: \"All\"",
                    crate::values::go_quote(other)
                )));
            }
        }
    }
    Ok(dry)
}

/// The write parameters and DeleteOptions of `req`, a DELETE (of one
/// object or a collection) of `info` in `ns`. `dryRun` counts wherever
/// the client put it: kubectl and kube-rs send it in the body.
pub(super) fn delete_request(
    shared: &ServerState,
    info: &ResourceInfo,
    ns: &str,
    req: Req<'_>,
) -> Result<(WriteCtx, DeleteOptions), ApiError> {
    let mut ctx = write_ctx(shared, info, ns, req)?;
    let (opts, dry_run) = delete_options(shared, req.q, req.headers, req.body)?;
    ctx.dry_run |= dry_run;
    Ok((ctx, opts))
}

/// The DeleteOptions of a DELETE's body and query, and whether its body
/// asks for a dry run.
fn delete_options(
    shared: &ServerState,
    q: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(DeleteOptions, bool), ApiError> {
    let mut opts = DeleteOptions::default();
    let mut dry = false;
    let trimmed = body.iter().any(|b| !b.is_ascii_whitespace());
    if trimmed {
        let v = parse_body(shared, headers, body)?;
        dry = match &v["dryRun"] {
            Value::Null => false,
            Value::Array(values) => {
                let values: Vec<String> = values
                    .iter()
                    .map(|d| d.as_str().map_or_else(|| d.to_string(), str::to_string))
                    .collect();
                dry_run(values.iter().map(String::as_str))?
            }
            other => {
                return Err(ApiError::BadRequest(format!(
                    "DeleteOptions.dryRun must be a list of strings, not {other}"
                )));
            }
        };
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
    Ok((opts, dry))
}
