//! What the server fills in on every write: built-in defaults and a
//! Secret's `stringData` folded into `data`.

use serde_json::{Map, Value, json};

use crate::registry::resources::ResourceInfo;

/// The handful of built-in defaults clients commonly read back (the real
/// server defaults far more; these are the ones controllers and kubectl
/// output rely on). Applied on every write, as the real server defaults on
/// every decode, so they never show up as changes.
pub(super) fn apply_builtin_defaults(info: &ResourceInfo, obj: &mut Value) {
    if !info.builtin {
        return;
    }
    let set_if_absent = |v: &mut Value, key: &str, default: Value| {
        if let Some(m) = v.as_object_mut()
            && m.get(key).is_none_or(Value::is_null)
        {
            m.insert(key.to_string(), default);
        }
    };
    match (info.group.as_str(), info.kind.as_str()) {
        ("", "Secret") => set_if_absent(obj, "type", json!("Opaque")),
        ("", "Service") => {
            set_if_absent(obj, "spec", json!({}));
            let spec = &mut obj["spec"];
            set_if_absent(spec, "type", json!("ClusterIP"));
            set_if_absent(spec, "sessionAffinity", json!("None"));
            if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports {
                    set_if_absent(p, "protocol", json!("TCP"));
                    let port = p.get("port").cloned();
                    if let Some(port) = port {
                        set_if_absent(p, "targetPort", port);
                    }
                }
            }
        }
        ("apps", "Deployment" | "StatefulSet" | "ReplicaSet")
            if obj.get("spec").is_some_and(Value::is_object) =>
        {
            set_if_absent(&mut obj["spec"], "replicas", json!(1));
        }
        ("", "Pod") if obj.get("spec").is_some_and(Value::is_object) => {
            set_if_absent(&mut obj["spec"], "restartPolicy", json!("Always"));
        }
        _ => {}
    }
}

/// Folds a Secret's write-only `stringData` into base64 `data`, as the real
/// server does on every write.
pub(super) fn fold_string_data(info: &ResourceInfo, obj: &mut Value) {
    if !(info.group.is_empty() && info.plural == "secrets") {
        return;
    }
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let Some(Value::Object(sd)) = map.remove("stringData") else {
        return;
    };
    use base64::Engine;
    let data = map
        .entry("data")
        .or_insert_with(|| Value::Object(Map::new()));
    if !data.is_object() {
        *data = Value::Object(Map::new());
    }
    if let Some(d) = data.as_object_mut() {
        for (k, v) in sd {
            let text = v
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string());
            d.insert(
                k,
                json!(base64::engine::general_purpose::STANDARD.encode(text)),
            );
        }
    }
}
