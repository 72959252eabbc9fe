//! Structural-schema handling of custom resources, as the real server does on
//! every write: null pruning, defaulting, pruning of unknown fields (unless
//! `x-kubernetes-preserve-unknown-fields`), and validation of types,
//! required fields, enums and bounds (422 with causes). CEL rules,
//! `pattern`, `format` and `allOf/anyOf/oneOf/not` are not evaluated.

use serde_json::{Map, Value};

use crate::error::{Cause, Causes};

/// What applying a schema found.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// Paths of removed unknown fields (for `fieldValidation=Strict`).
    pub(crate) pruned: Vec<String>,
    /// Validation failures.
    pub(crate) causes: Causes,
    /// Bytes of JSON the schema's defaults added.
    pub(crate) defaulted: usize,
}

/// The most bytes of JSON a schema's defaults may add to one object: what
/// the object may hold in all. A default may hold items whose own
/// defaults apply in turn, so the added size is counted as it is added,
/// never computed from the schema.
pub(crate) const MAX_DEFAULTED_BYTES: usize = 3 * 1024 * 1024;

fn truthy(s: &Value, key: &str) -> bool {
    s.get(key).and_then(Value::as_bool) == Some(true)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn short(v: &Value) -> String {
    match v {
        Value::String(s) => format!("\"{s}\""),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

/// Applies the schema of a custom resource to the whole object in place.
/// `apiVersion`, `kind` and `metadata` are left to the generic checks.
pub(crate) fn apply(obj: &mut Value, schema: &Value) -> Outcome {
    let mut out = Outcome::default();
    let Some(map) = obj.as_object_mut() else {
        return out;
    };
    let props = schema.get("properties").and_then(Value::as_object);
    let preserve = truthy(schema, "x-kubernetes-preserve-unknown-fields");
    apply_defaults(map, schema, &mut out);
    let keys: Vec<String> = map.keys().cloned().collect();
    for k in keys {
        if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match props.and_then(|p| p.get(&k)) {
            Some(ps) => {
                let remove = visit_child(map, &k, ps, &k, &mut out);
                if remove {
                    map.remove(&k);
                }
            }
            None if preserve => {}
            None => {
                map.remove(&k);
                out.pruned.push(k);
            }
        }
    }
    check_required(map, schema, "", &mut out);
    out
}

/// Drops a null that its schema does not allow (then defaulting may fill
/// it); returns whether to remove the key.
fn visit_child(
    map: &mut Map<String, Value>,
    key: &str,
    schema: &Value,
    path: &str,
    out: &mut Outcome,
) -> bool {
    let Some(v) = map.get_mut(key) else {
        return false;
    };
    if v.is_null() && !truthy(schema, "nullable") {
        return true;
    }
    visit(v, schema, path, out);
    false
}

fn apply_defaults(map: &mut Map<String, Value>, schema: &Value, out: &mut Outcome) {
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, ps) in props {
            let absent = map
                .get(k)
                .is_none_or(|v| v.is_null() && !truthy(ps, "nullable"));
            if absent && let Some(d) = ps.get("default") {
                // Past the bound nothing more is added: the write is
                // refused for it (`MAX_DEFAULTED_BYTES`).
                if out.defaulted > MAX_DEFAULTED_BYTES {
                    return;
                }
                out.defaulted += crate::values::json_len(d);
                map.insert(k.clone(), d.clone());
            }
        }
    }
}

fn check_required(map: &Map<String, Value>, schema: &Value, path: &str, out: &mut Outcome) {
    for r in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !map.contains_key(r) {
            out.causes.add(|| Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: join(path, r),
            });
        }
    }
}

fn type_ok(v: &Value, schema: &Value) -> bool {
    if truthy(schema, "x-kubernetes-int-or-string") {
        return matches!(type_name(v), "integer" | "string");
    }
    match schema.get("type").and_then(Value::as_str) {
        None | Some("") => true,
        Some("number") => v.is_number(),
        Some("integer") => type_name(v) == "integer",
        Some(t) => type_name(v) == t,
    }
}

fn visit(v: &mut Value, schema: &Value, path: &str, out: &mut Outcome) {
    if v.is_null() {
        return;
    }
    if !type_ok(v, schema) {
        let t = schema
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("int-or-string");
        out.causes.add(|| Cause {
            reason: "FieldValueTypeInvalid".into(),
            message: format!(
                "Invalid value: \"{}\": {path} in body must be of type {t}: {}",
                type_name(v),
                short(v)
            ),
            field: path.to_string(),
        });
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(v)
    {
        let list = allowed.iter().map(short).collect::<Vec<_>>().join(", ");
        out.causes.add(|| Cause {
            reason: "FieldValueNotSupported".into(),
            message: format!("Unsupported value: {}: supported values: {list}", short(v)),
            field: path.to_string(),
        });
    }
    check_bounds(v, schema, path, out);
    match v {
        Value::Object(map) => visit_object(map, schema, path, out),
        Value::Array(items) => {
            if let Some(is) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    visit(item, is, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn visit_object(map: &mut Map<String, Value>, schema: &Value, path: &str, out: &mut Outcome) {
    let embedded = truthy(schema, "x-kubernetes-embedded-resource");
    let preserve = truthy(schema, "x-kubernetes-preserve-unknown-fields");
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    apply_defaults(map, schema, out);
    let keys: Vec<String> = map.keys().cloned().collect();
    for k in keys {
        let child_path = join(path, &k);
        if embedded && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        let child_schema = props
            .and_then(|p| p.get(&k))
            .or(additional.filter(|a| a.is_object()));
        match child_schema {
            Some(cs) => {
                if visit_child(map, &k, cs, &child_path, out) {
                    map.remove(&k);
                }
            }
            None if preserve || additional.and_then(Value::as_bool) == Some(true) => {}
            // A schema with no properties and no additionalProperties is an
            // opaque object only when it preserves unknown fields; otherwise
            // everything under it is unknown.
            None => {
                map.remove(&k);
                out.pruned.push(child_path);
            }
        }
    }
    check_required(map, schema, path, out);
}

fn check_bounds(v: &Value, schema: &Value, path: &str, out: &mut Outcome) {
    let mut fail = |msg: String| {
        out.causes.add(|| Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {}: {msg}", short(v)),
            field: path.to_string(),
        })
    };
    if let Some(n) = v.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            fail(format!(
                "{path} in body should be greater than or equal to {min}"
            ));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            fail(format!(
                "{path} in body should be less than or equal to {max}"
            ));
        }
    }
    if let Some(s) = v.as_str() {
        let len = s.chars().count() as u64;
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && len > max
        {
            fail(format!("{path} in body should be at most {max} chars long"));
        }
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && len < min
        {
            fail(format!(
                "{path} in body should be at least {min} chars long"
            ));
        }
    }
    if let Some(a) = v.as_array() {
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
            && a.len() as u64 > max
        {
            fail(format!("{path} in body should have at most {max} items"));
        }
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
            && (a.len() as u64) < min
        {
            fail(format!("{path} in body should have at least {min} items"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["size"], "properties": {
                "size": {"type": "integer", "minimum": 0},
                "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "port": {"x-kubernetes-int-or-string": true},
                "items": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "string"}}}},
                "opt": {"type": "string", "nullable": true}
            }},
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
        }})
    }

    #[test]
    fn prunes_defaults_and_keeps_preserved() {
        let mut o = json!({"apiVersion": "example.com/v1", "kind": "W", "metadata": {"name": "w", "x": 1},
            "spec": {"size": 1, "bogus": true, "labels": {"a": "b"}, "free": {"any": {"thing": 1}},
                "port": "http", "items": [{"n": "x", "drop": 1}], "opt": null, "mode": null},
            "extra": 1});
        let out = apply(&mut o, &schema());
        assert!(out.causes.is_empty(), "{:?}", out.causes);
        assert_eq!(
            out.pruned,
            vec![
                "extra".to_string(),
                "spec.bogus".into(),
                "spec.items[0].drop".into()
            ]
        );
        assert_eq!(o["spec"]["mode"], "a", "null replaced by the default");
        assert_eq!(o["spec"]["opt"], Value::Null, "nullable null kept");
        assert_eq!(o["spec"]["free"]["any"]["thing"], 1);
        assert_eq!(o["metadata"]["x"], 1, "metadata untouched");
    }

    #[test]
    fn validates_types_required_enum_bounds() {
        let mut o = json!({"spec": {"size": "big", "mode": "c"}});
        let out = apply(&mut o, &schema());
        let fields: Vec<&str> = out.causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, vec!["spec.mode", "spec.size"]);
        let mut o = json!({"spec": {"size": -1}});
        assert_eq!(apply(&mut o, &schema()).causes[0].field, "spec.size");
        let mut o = json!({"spec": {}});
        assert_eq!(
            apply(&mut o, &schema()).causes[0].reason,
            "FieldValueRequired"
        );
    }
}
