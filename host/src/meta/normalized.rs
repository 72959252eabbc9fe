//! Normalized JSON: what two writes of the same object made at different
//! times have in common. Shadow runs and replays compare writes this way.
//!
//! Normalizing removes `resourceVersion`, `managedFields` and every field
//! whose name ends in `Time` or `Timestamp`; equality is on canonical JSON
//! (object keys sorted), whatever map order serde_json keeps.

use serde_json::Value;

/// Differences listed by [`differences`] at most.
const MAX_DIFFERENCES: usize = 20;
/// Bytes of a value quoted in a difference.
const MAX_QUOTED: usize = 200;

/// Drops what differs between two equal writes made at different times.
pub(crate) fn normalize(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|k, _| {
                k != "resourceVersion"
                    && k != "managedFields"
                    && !k.ends_with("Time")
                    && !k.ends_with("Timestamp")
            });
            for v in map.values_mut() {
                normalize(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        _ => {}
    }
}

/// JSON with object keys sorted: equal values have equal canonical forms.
pub(crate) fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&map[k])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}

/// A body as sent: its JSON, normalized (a body that is not JSON is kept
/// as a string).
pub(crate) fn parse_body(json: &str) -> Value {
    let mut v = serde_json::from_str(json).unwrap_or_else(|_| Value::String(json.to_string()));
    normalize(&mut v);
    v
}

/// Where `expected` and `actual` differ, as `JSON-pointer: expected → actual`
/// lines (at most 20, values quoted up to 200 bytes; a missing side is `∅`).
pub fn differences(expected: &Value, actual: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk("", expected, actual, &mut out);
    if out.len() > MAX_DIFFERENCES {
        let more = out.len() - MAX_DIFFERENCES;
        out.truncate(MAX_DIFFERENCES);
        out.push(format!("… and {more} more"));
    }
    out
}

fn walk(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    if out.len() > MAX_DIFFERENCES {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = format!("{path}/{}", k.replace('~', "~0").replace('/', "~1"));
                match (x.get(k), y.get(k)) {
                    (Some(v), Some(w)) => walk(&p, v, w, out),
                    (v, w) => out.push(format!("{p}: {} → {}", quote(v), quote(w))),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                walk(&format!("{path}/{i}"), v, w, out);
            }
        }
        _ if canonical(a) != canonical(b) => {
            let at = if path.is_empty() { "/" } else { path };
            out.push(format!("{at}: {} → {}", quote(Some(a)), quote(Some(b))));
        }
        _ => {}
    }
}

fn quote(v: Option<&Value>) -> String {
    let Some(v) = v else {
        return "∅".into();
    };
    let s = v.to_string();
    if s.len() <= MAX_QUOTED {
        return s;
    }
    let mut end = MAX_QUOTED;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn normalizing_drops_what_changes_between_equal_writes() {
        let mut v = json!({"metadata": {"name": "a", "resourceVersion": "7", "creationTimestamp": "x",
            "managedFields": []}, "status": {"conditions": [{"type": "Ready", "lastTransitionTime": "t"}]}});
        normalize(&mut v);
        assert_eq!(
            v,
            json!({"metadata": {"name": "a"}, "status": {"conditions": [{"type": "Ready"}]}})
        );
    }

    #[test]
    fn canonical_json_ignores_key_order() {
        assert_eq!(
            canonical(&json!({"b": 1, "a": [{"y": 2, "x": 1}]})),
            canonical(&json!({"a": [{"x": 1, "y": 2}], "b": 1}))
        );
    }

    #[test]
    fn differences_name_each_path_with_both_values() {
        let d = differences(
            &json!({"metadata": {"labels": {"app": "web", "a/b": "1"}}, "spec": {"replicas": 2}}),
            &json!({"metadata": {"labels": {"app": "web2"}}, "spec": {"replicas": 2, "paused": true}}),
        );
        assert_eq!(
            d,
            vec![
                r#"/metadata/labels/a~1b: "1" → ∅"#.to_string(),
                r#"/metadata/labels/app: "web" → "web2""#.to_string(),
                "/spec/paused: ∅ → true".to_string(),
            ]
        );
        assert!(differences(&json!([1, 2]), &json!([1, 2])).is_empty());
        assert_eq!(differences(&json!(1), &json!([1])), vec!["/: 1 → [1]"]);
    }

    #[test]
    fn differences_are_bounded() {
        let a: serde_json::Map<String, Value> =
            (0..50).map(|i| (format!("k{i:02}"), json!(i))).collect();
        let d = differences(&Value::Object(a), &json!({}));
        assert_eq!(d.len(), 21);
        assert_eq!(d[20], "… and 30 more");
        let long = "x".repeat(1000);
        let d = differences(&json!(long), &json!("y"));
        assert!(d[0].len() < 260, "{}", d[0]);
    }
}
