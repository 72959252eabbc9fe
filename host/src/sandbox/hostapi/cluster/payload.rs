//! The guest's bodies as they go to the API server: an object for a write
//! and the three kinds of patch, checked without building a tree and sent
//! as the guest wrote them.

use std::borrow::Cow;

use kube::api::{Patch, PatchParams};
use serde_json::value::RawValue;

use crate::meta::syntax as validate;
use crate::sandbox::hostapi::body;
use crate::sandbox::hostapi::error::ApiError;
use crate::sandbox::hostapi::request::{ObjectPatch, check_size};

/// How much of a guest's string an error message quotes back: enough to
/// recognise it, never the payload itself.
pub(super) const ECHO: usize = 96;

/// `s`, cut to at most `max` bytes (with a marker) at a character boundary.
pub(super) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The guest's object for a write, as sent: valid JSON within the size
/// limit, of the kind the call resolved (apiVersion and kind are put in
/// when it names neither), in the call's namespace. Checked without
/// building a tree of it (`body::identity`), and sent without a copy.
pub(super) fn write_body(
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
pub(super) enum SentPatch {
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
    pub(super) fn request(
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

/// The patch to send for the guest's `patch` of a resource `ar`, with its
/// parameters: a field manager named for `plugin` when the guest names
/// none.
pub(super) fn to_patch(
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
        ObjectPatch::Merge { body: patch } => (
            PatchParams::default(),
            SentPatch::Merge(parse(patch.into_string())?),
        ),
        ObjectPatch::Json { body: patch } => {
            let s = patch.into_string();
            check_size(&s)?;
            // One pass, and no tree of the operations' values.
            body::json_patch_shape(&s)
                .map_err(|e| ApiError::Invalid(truncate(&e.to_string(), 4 * ECHO)))?;
            let raw = serde_json::value::RawValue::from_string(s).map_err(not_json)?;
            (PatchParams::default(), SentPatch::Json(raw))
        }
        ObjectPatch::Apply {
            body: object,
            field_manager,
            force,
        } => {
            let manager = if field_manager.is_empty() {
                format!("wasmctrl-{plugin}")
            } else {
                validate::field_manager(&field_manager)
                    .map_err(|e| ApiError::Invalid(e.to_string()))?;
                field_manager
            };
            let body = parse(object.into_string())?;
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
            if force {
                params = params.force();
            }
            (params, SentPatch::Apply(body))
        }
    })
}
