//! How a stored object is presented in each served version, and back.
//!
//! Most resources are stored as served, with only `apiVersion` and `kind`
//! rewritten. Core v1 Events and `events.k8s.io/v1` Events are one store:
//! objects are kept in core form (what `kubectl describe` and field
//! selectors read) and converted for the events.k8s.io API (what
//! kube-runtime's Recorder writes).

use serde_json::{Map, Value};

use super::resources::{ResourceInfo, View};

/// A stored object as the served version presents it.
pub(crate) fn to_view(info: &ResourceInfo, obj: &Value) -> Value {
    match info.view {
        View::Plain => {
            let mut o = obj.clone();
            if let Some(m) = o.as_object_mut() {
                m.insert("apiVersion".into(), Value::String(info.api_version()));
                m.insert("kind".into(), Value::String(info.kind.clone()));
            }
            o
        }
        View::EventsV1 => core_to_events_v1(obj),
    }
}

/// A served-version object in stored form.
pub(crate) fn from_view(info: &ResourceInfo, obj: Value) -> Value {
    match info.view {
        View::Plain => {
            let mut o = obj;
            if let Some(m) = o.as_object_mut() {
                m.insert(
                    "apiVersion".into(),
                    Value::String(info.storage_api_version.clone()),
                );
                m.insert("kind".into(), Value::String(info.kind.clone()));
            }
            o
        }
        View::EventsV1 => events_v1_to_core(&obj),
    }
}

/// Whether the stored object `json` already equals its served form (no
/// conversion needed, so the stored bytes are the answer), read without
/// parsing it (the store writes `apiVersion` first).
pub(crate) fn stored_view_is_identity(info: &ResourceInfo, json: &[u8]) -> bool {
    info.view == View::Plain
        && crate::registry::storage::api_version_of(json).as_deref()
            == Some(info.api_version().as_str())
}

/// Field renames between the two APIs: (core v1, events.k8s.io/v1).
const RENAMES: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("count", "deprecatedCount"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("source", "deprecatedSource"),
];

/// Fields with the same name in both APIs.
const SHARED: &[&str] = &[
    "metadata",
    "reason",
    "type",
    "eventTime",
    "series",
    "action",
    "related",
    "reportingInstance",
];

fn convert(obj: &Value, to_v1: bool, api_version: &str) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::String(api_version.into()));
    out.insert("kind".into(), Value::String("Event".into()));
    let Some(src) = obj.as_object() else {
        return Value::Object(out);
    };
    for f in SHARED {
        if let Some(v) = src.get(*f) {
            out.insert((*f).to_string(), v.clone());
        }
    }
    for (core, v1) in RENAMES {
        let (from, to) = if to_v1 { (core, v1) } else { (v1, core) };
        if let Some(v) = src.get(*from) {
            out.insert((*to).to_string(), v.clone());
        }
    }
    Value::Object(out)
}

/// A stored core v1 Event as `events.k8s.io/v1`.
fn core_to_events_v1(obj: &Value) -> Value {
    convert(obj, true, "events.k8s.io/v1")
}

/// An `events.k8s.io/v1` Event in stored core v1 form.
fn events_v1_to_core(obj: &Value) -> Value {
    let mut core = convert(obj, false, "v1");
    // Core consumers (kubectl describe, field selectors) key on source and
    // lastTimestamp; derive them from the v1 fields when the writer set only
    // those, as the real conversion does.
    if core.get("source").is_none()
        && let Some(ctrl) = obj.get("reportingController")
    {
        let mut src = Map::new();
        src.insert("component".into(), ctrl.clone());
        if let Some(inst) = obj.get("reportingInstance") {
            src.insert("host".into(), inst.clone());
        }
        core["source"] = Value::Object(src);
    }
    core
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "default"},
            "regarding": {"kind": "ConfigMap", "name": "c"}, "note": "hi",
            "reason": "Created", "type": "Normal", "reportingController": "ctl",
            "reportingInstance": "ctl-1", "action": "Create", "eventTime": "2025-01-01T00:00:00.000000Z",
            "series": {"count": 2, "lastObservedTime": "2025-01-01T00:00:01.000000Z"}});
        let core = events_v1_to_core(&v1);
        assert_eq!(core["involvedObject"]["name"], "c");
        assert_eq!(core["message"], "hi");
        assert_eq!(core["source"]["component"], "ctl");
        assert_eq!(core["apiVersion"], "v1");
        let back = core_to_events_v1(&core);
        for k in [
            "regarding",
            "note",
            "reason",
            "reportingController",
            "series",
            "action",
        ] {
            assert_eq!(back[k], v1[k], "{k}");
        }
    }
}
