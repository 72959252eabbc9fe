//! The rules every write applies to an object: finalizers, the CRD's
//! cleanup finalizer, schemas, what counts as no change and what bumps the
//! generation.

use serde_json::Value;

use super::context::WriteCtx;
use crate::error::{ApiError, Cause};
use crate::registry::resources::ResourceInfo;
use crate::values::{meta_str, metadata_mut};

/// The finalizer a CRD carries until its custom resources are gone.
pub(crate) const CRD_CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

pub(crate) fn obj_name(obj: &Value) -> String {
    meta_str(obj, "name").unwrap_or("").to_string()
}

/// Drops an empty finalizer list (stored as absent so a JSON patch
/// `test /metadata/finalizers == null` behaves as kube-runtime expects).
pub(crate) fn normalize_finalizers(obj: &mut Value) {
    let md = metadata_mut(obj);
    if md
        .get("finalizers")
        .is_some_and(|f| f.is_null() || f.as_array().is_some_and(Vec::is_empty))
    {
        md.remove("finalizers");
    }
    for f in ["labels", "annotations", "ownerReferences"] {
        if md.get(f).is_some_and(Value::is_null) {
            md.remove(f);
        }
    }
}

/// `obj` without `finalizer` in its metadata; None when it has none such.
pub(crate) fn without_finalizer(obj: &Value, finalizer: &str) -> Option<Value> {
    let fins = finalizers(obj);
    if !fins.iter().any(|f| f == finalizer) {
        return None;
    }
    let rest: Vec<&String> = fins.iter().filter(|f| *f != finalizer).collect();
    let mut out = obj.clone();
    crate::values::metadata_mut(&mut out).insert("finalizers".into(), serde_json::json!(rest));
    Some(out)
}

/// The namespace controller's finalizer, in every namespace's
/// `spec.finalizers` from its creation until its contents are gone.
pub(crate) const NAMESPACE_FINALIZER: &str = "kubernetes";

/// Whether namespace `ns` is held by its `spec.finalizers`: a terminating
/// namespace goes only once they, as well as its metadata finalizers, are
/// empty.
pub(crate) fn held_by_spec_finalizers(ns: &Value) -> bool {
    ns["spec"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
}

/// Namespace `ns` without `finalizer` in its `spec.finalizers`, the list
/// left out once empty as upstream serializes it; None when it has none
/// such.
pub(crate) fn without_spec_finalizer(ns: &Value, finalizer: &str) -> Option<Value> {
    let list = ns["spec"]["finalizers"].as_array()?;
    if !list.iter().any(|f| f == finalizer) {
        return None;
    }
    let kept: Vec<Value> = list.iter().filter(|f| *f != finalizer).cloned().collect();
    let mut out = ns.clone();
    out["spec"] = if kept.is_empty() {
        serde_json::json!({})
    } else {
        serde_json::json!({"finalizers": kept})
    };
    Some(out)
}

pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// A copy without what a no-op check must ignore: the resourceVersion and
/// the timestamps of managedFields entries.
pub(super) fn comparable(obj: &Value) -> Value {
    let mut o = obj.clone();
    let md = metadata_mut(&mut o);
    md.remove("resourceVersion");
    if let Some(Value::Array(mf)) = md.get_mut("managedFields") {
        for e in mf {
            if let Some(m) = e.as_object_mut() {
                m.remove("time");
            }
        }
    }
    o
}

/// The part of an object whose change bumps `metadata.generation`.
pub(super) fn spec_part(info: &ResourceInfo, obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
        if info.status {
            m.remove("status");
        }
    }
    o
}

/// Prunes, defaults and validates a custom resource against its schema.
pub(super) fn apply_schema(
    info: &ResourceInfo,
    obj: &mut Value,
    ctx: &WriteCtx,
    causes: &mut Vec<Cause>,
) -> Result<(), ApiError> {
    let Some(schema) = &info.schema else {
        return Ok(());
    };
    let out = crate::registry::schema::apply(obj, schema);
    if out.defaulted > crate::registry::schema::MAX_DEFAULTED_BYTES {
        return Err(ApiError::RequestEntityTooLarge(format!(
            "the schema's defaults add more than {} bytes to the object, more than an object may hold",
            crate::registry::schema::MAX_DEFAULTED_BYTES
        )));
    }
    if ctx.strict() && !out.pruned.is_empty() {
        let fields = out
            .pruned
            .iter()
            .map(|p| format!("unknown field \"{p}\""))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(ApiError::BadRequest(format!(
            "strict decoding error: {fields}"
        )));
    }
    for p in &out.pruned {
        ctx.warn(format!("unknown field \"{p}\""));
    }
    causes.extend(out.causes.into_vec());
    Ok(())
}

pub(crate) fn is_crd(info: &ResourceInfo) -> bool {
    info.group == "apiextensions.k8s.io" && info.plural == "customresourcedefinitions"
}

pub(crate) fn is_namespace(info: &ResourceInfo) -> bool {
    info.group.is_empty() && info.plural == "namespaces"
}

/// The webhook configuration kind `info` stores, if it is one.
pub(crate) fn webhook_configuration(info: &ResourceInfo) -> Option<crate::admission::ConfigKind> {
    crate::admission::ConfigKind::of(&info.group, &info.plural)
}

/// Ok when `cur`, the stored object a write or delete would act on, has
/// the uid the request named as its precondition (`wanted`; None: no
/// precondition); else upstream's 409.
pub(crate) fn uid_precondition(
    info: &ResourceInfo,
    name: &str,
    wanted: Option<&str>,
    cur: &Value,
) -> Result<(), ApiError> {
    let found = meta_str(cur, "uid");
    match wanted {
        Some(uid) if found != Some(uid) => Err(ApiError::uid_precondition(
            &info.group,
            &info.plural,
            name,
            uid,
            found.unwrap_or(""),
        )),
        _ => Ok(()),
    }
}
