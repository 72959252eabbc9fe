//! The `kube` import: gets, lists, writes and events against the cluster's
//! store, patches and label selectors as kube-apiserver applies them.

use serde_json::{Value, json};
use wasmctrl_apimachinery::patch::{PatchBounds, json_patch, merge_patch};
use wasmctrl_apimachinery::selector::LabelSelector;

use crate::ApiError;
pub(crate) use crate::bindings::wasmctrl::reconciler::kube::{
    ApplyPatch, Event, EventType, ObjectPatch,
};
use crate::bindings::wasmctrl::reconciler::types as wit;
use crate::testing::Call;
use crate::testing::state::{Key, State, not_found, with};

type Reply<T> = Result<T, wit::ApiError>;

fn to_wit(e: ApiError) -> wit::ApiError {
    match e {
        ApiError::NotFound(m) => wit::ApiError::NotFound(m),
        ApiError::Conflict(m) => wit::ApiError::Conflict(m),
        ApiError::AlreadyExists(m) => wit::ApiError::AlreadyExists(m),
        ApiError::Forbidden(m) => wit::ApiError::Forbidden(m),
        ApiError::Invalid(m) | ApiError::Serialization(m) => wit::ApiError::Invalid(m),
        ApiError::Timeout(m) => wit::ApiError::Timeout(m),
        ApiError::Unavailable(m) => wit::ApiError::Unavailable(m),
        ApiError::Other(m) => wit::ApiError::Other(m),
    }
}

fn key(kind: &wit::Gvk, ns: Option<&str>, name: &str) -> Key {
    (
        kind.group.clone(),
        kind.kind.clone(),
        ns.map(str::to_string),
        name.to_string(),
    )
}

fn parse(text: &str) -> Result<Value, ApiError> {
    serde_json::from_str(text).map_err(|e| ApiError::Invalid(format!("invalid JSON: {e}")))
}

fn patch_parts(patch: &ObjectPatch) -> Result<(Value, String), ApiError> {
    Ok(match patch {
        ObjectPatch::Merge(s) => (parse(s)?, "merge".into()),
        ObjectPatch::Json(s) => (parse(s)?, "json".into()),
        ObjectPatch::Apply(a) => (
            parse(&a.body)?,
            format!("apply {} force={}", a.field_manager, a.force),
        ),
    })
}

/// Records and admits a call, then runs `op` on the state.
fn serve<T>(
    verb: &'static str,
    kind: &wit::Gvk,
    ns: Option<&str>,
    name: &str,
    body: Value,
    patch: String,
    op: impl FnOnce(&mut State, Value) -> Result<T, ApiError>,
) -> Reply<T> {
    let call = Call {
        verb,
        kind: crate::Gvk::new(&kind.group, &kind.version, &kind.kind),
        namespace: ns.map(str::to_string),
        name: name.to_string(),
        body: body.clone(),
        patch,
    };
    with(|s| {
        s.admit(call)?;
        op(s, body)
    })
    .map_err(to_wit)
}

fn existing(s: &State, kind: &wit::Gvk, ns: Option<&str>, name: &str) -> Result<Key, ApiError> {
    let k = key(kind, ns, name);
    if s.objects.contains_key(&k) {
        Ok(k)
    } else {
        Err(not_found(kind, ns, name))
    }
}

pub fn get(kind: &wit::Gvk, ns: Option<&str>, name: &str) -> Reply<String> {
    serve("get", kind, ns, name, Value::Null, String::new(), |s, _| {
        let k = existing(s, kind, ns, name)?;
        Ok(s.objects[&k].to_string())
    })
}

pub fn list(kind: &wit::Gvk, ns: Option<&str>, selector: Option<&str>) -> Reply<Vec<String>> {
    let body = selector.map_or(Value::Null, |s| json!(s));
    serve("list", kind, ns, "", body, String::new(), |s, _| {
        // Parsed whether or not anything would match, as the API server
        // does, and within the host's bounds.
        let selector = selector
            .map(|text| {
                LabelSelector::parse(text)
                    .map_err(|e| ApiError::Invalid(format!("label selector {text:?}: {e}")))
            })
            .transpose()?;
        let mut items = Vec::new();
        for ((group, k, obj_ns, _), obj) in &s.objects {
            if *group != kind.group || *k != kind.kind || (ns.is_some() && obj_ns.as_deref() != ns)
            {
                continue;
            }
            if selector
                .as_ref()
                .is_none_or(|sel| sel.matches_json(&obj["metadata"]["labels"]))
            {
                items.push(obj.to_string());
            }
        }
        Ok(items)
    })
}

pub fn create(kind: &wit::Gvk, ns: Option<&str>, object: &str) -> Reply<String> {
    let body = parse(object).map_err(to_wit)?;
    serve("create", kind, ns, "", body, String::new(), |s, body| {
        let name = body["metadata"]["name"]
            .as_str()
            .ok_or_else(|| ApiError::Invalid("metadata.name is required".into()))?
            .to_string();
        Ok(s.create(key(kind, ns, &name), body)?.to_string())
    })
}

pub fn replace(kind: &wit::Gvk, ns: Option<&str>, name: &str, object: &str) -> Reply<String> {
    let body = parse(object).map_err(to_wit)?;
    serve("replace", kind, ns, name, body, String::new(), |s, body| {
        let k = existing(s, kind, ns, name)?;
        Ok(s.update(&k, body, false)?.to_string())
    })
}

pub fn replace_status(
    kind: &wit::Gvk,
    ns: Option<&str>,
    name: &str,
    object: &str,
) -> Reply<String> {
    let body = parse(object).map_err(to_wit)?;
    serve(
        "replace-status",
        kind,
        ns,
        name,
        body,
        String::new(),
        |s, body| {
            let k = existing(s, kind, ns, name)?;
            Ok(s.update(&k, body, true)?.to_string())
        },
    )
}

fn patch_any(
    verb: &'static str,
    kind: &wit::Gvk,
    ns: Option<&str>,
    name: &str,
    patch: &ObjectPatch,
) -> Reply<String> {
    let (body, how) = patch_parts(patch).map_err(to_wit)?;
    let status_only = verb == "patch-status";
    let is_apply = matches!(patch, ObjectPatch::Apply(_));
    serve(verb, kind, ns, name, body, how, |s, body| {
        let k = key(kind, ns, name);
        let Some(current) = s.objects.get(&k).cloned() else {
            if is_apply && !status_only {
                return Ok(s.create(k, body)?.to_string());
            }
            return Err(not_found(kind, ns, name));
        };
        let next = if matches!(patch, ObjectPatch::Json(_)) {
            json_patch(&current, &body, PatchBounds::KUBERNETES)
                .map_err(|e| ApiError::Invalid(e.to_string()))?
        } else {
            let mut next = current;
            merge_patch(&mut next, &body);
            next
        };
        Ok(s.update(&k, next, status_only)?.to_string())
    })
}

pub fn patch(kind: &wit::Gvk, ns: Option<&str>, name: &str, patch: &ObjectPatch) -> Reply<String> {
    patch_any("patch", kind, ns, name, patch)
}

pub fn patch_status(
    kind: &wit::Gvk,
    ns: Option<&str>,
    name: &str,
    patch: &ObjectPatch,
) -> Reply<String> {
    patch_any("patch-status", kind, ns, name, patch)
}

pub fn delete(kind: &wit::Gvk, ns: Option<&str>, name: &str) -> Reply<()> {
    serve(
        "delete",
        kind,
        ns,
        name,
        Value::Null,
        String::new(),
        |s, _| {
            let k = existing(s, kind, ns, name)?;
            s.delete(&k);
            Ok(())
        },
    )
}

pub fn record_event(event: &Event) -> Reply<()> {
    let body = json!({
        "type": match event.type_ {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        },
        "reason": event.reason,
        "action": event.action,
        "note": event.note,
    });
    serve(
        "record-event",
        &event.regarding_kind,
        event.regarding_namespace.as_deref(),
        &event.regarding_name,
        body,
        String::new(),
        |_, _| Ok(()),
    )
}
