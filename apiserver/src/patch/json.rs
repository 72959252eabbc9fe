//! JSON patch, RFC 6902 (`application/json-patch+json`).

use serde_json::{Map, Value};

use super::PatchError;

/// Applies an RFC 6902 JSON patch: a list of `add`, `remove`, `replace`,
/// `move`, `copy` and `test` operations, applied in order and atomically
/// (the target is untouched on any failure).
///
/// As in the JSON patch library Kubernetes uses, a `test` of an absent
/// location whose parent exists succeeds when the expected value is
/// `null`. kube-runtime's finalizer helper relies on this: it sends
/// `test /metadata/finalizers == null` before the first `add`. Numbers
/// compare by value, so `1` tests equal to `1.0`.
///
/// # Errors
///
/// Messages name the operation index, its `op` and its path. A failed
/// `test` is [`PatchError::TestFailed`]; a malformed patch, a missing path
/// or an out-of-range index is [`PatchError::Invalid`].
pub(crate) fn json_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let Value::Array(ops) = patch else {
        return Err(PatchError::Invalid(
            "json patch must be a JSON array of operations".to_owned(),
        ));
    };
    let mut doc = target.clone();
    for (index, op) in ops.iter().enumerate() {
        apply_op(&mut doc, index, op)?;
    }
    Ok(doc)
}

fn apply_op(doc: &mut Value, index: usize, op: &Value) -> Result<(), PatchError> {
    let invalid = |msg: String| PatchError::Invalid(format!("json patch operation {index}: {msg}"));
    let Value::Object(op) = op else {
        return Err(invalid("operation must be an object".to_owned()));
    };
    let name = op
        .get("op")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("missing string member \"op\"".to_owned()))?;
    let path = op
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("{name}: missing string member \"path\"")))?;
    // Failures below are reported against this op's index, name and path.
    let fail = |msg: &str| {
        PatchError::Invalid(format!(
            "json patch operation {index} ({name}) failed at path \"{path}\": {msg}"
        ))
    };
    let tokens = parse_pointer(path).map_err(|e| fail(&e))?;
    let value = || {
        op.get("value")
            .cloned()
            .ok_or_else(|| fail("missing member \"value\""))
    };
    let from = || -> Result<Vec<String>, PatchError> {
        let from = op
            .get("from")
            .and_then(Value::as_str)
            .ok_or_else(|| fail("missing string member \"from\""))?;
        parse_pointer(from).map_err(|e| fail(&format!("from: {e}")))
    };
    match name {
        "add" => add(doc, &tokens, value()?).map_err(|e| fail(&e)),
        "remove" => remove(doc, &tokens).map(drop).map_err(|e| fail(&e)),
        "replace" => {
            let slot = get_mut(doc, &tokens).ok_or_else(|| fail("path not found"))?;
            *slot = value()?;
            Ok(())
        }
        "move" => {
            let from = from()?;
            if from == tokens {
                return Ok(());
            }
            if tokens.len() > from.len() && tokens[..from.len()] == from[..] {
                return Err(fail("cannot move a value into one of its own children"));
            }
            let moved = remove(doc, &from).map_err(|e| fail(&format!("from: {e}")))?;
            add(doc, &tokens, moved).map_err(|e| fail(&e))
        }
        "copy" => {
            let from = from()?;
            let copied = get(doc, &from)
                .cloned()
                .ok_or_else(|| fail("from: path not found"))?;
            add(doc, &tokens, copied).map_err(|e| fail(&e))
        }
        "test" => {
            let expected = value()?;
            let actual = match (tokens.split_last(), get(doc, &tokens)) {
                (_, Some(actual)) => actual.clone(),
                // An absent child of an existing container reads as null.
                (Some((_, parent)), None) if get(doc, parent).is_some_and(is_container) => {
                    Value::Null
                }
                _ => return Err(fail("path not found")),
            };
            if json_equal(&actual, &expected) {
                Ok(())
            } else {
                Err(PatchError::TestFailed(format!(
                    "json patch operation {index} (test) failed at path \"{path}\": \
                     expected {expected}, found {actual}"
                )))
            }
        }
        other => Err(invalid(format!("unknown op \"{other}\""))),
    }
}

fn is_container(value: &Value) -> bool {
    value.is_object() || value.is_array()
}

/// Splits an RFC 6901 JSON pointer into unescaped reference tokens.
fn parse_pointer(pointer: &str) -> Result<Vec<String>, String> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(format!(
            "invalid JSON pointer \"{pointer}\": must start with '/'"
        ));
    };
    rest.split('/')
        .map(|token| {
            if token.replace("~0", "").replace("~1", "").contains('~') {
                Err(format!("invalid escape in JSON pointer \"{pointer}\""))
            } else {
                Ok(token.replace("~1", "/").replace("~0", "~"))
            }
        })
        .collect()
}

/// Parses an array index token: decimal without leading zeros (RFC 6901).
fn array_index(token: &str) -> Option<usize> {
    if token.is_empty() || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    if !token.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    token.parse().ok()
}

fn get<'a>(doc: &'a Value, tokens: &[String]) -> Option<&'a Value> {
    tokens.iter().try_fold(doc, |value, token| match value {
        Value::Object(map) => map.get(token),
        Value::Array(items) => items.get(array_index(token)?),
        _ => None,
    })
}

fn get_mut<'a>(doc: &'a mut Value, tokens: &[String]) -> Option<&'a mut Value> {
    tokens.iter().try_fold(doc, |value, token| match value {
        Value::Object(map) => map.get_mut(token),
        Value::Array(items) => items.get_mut(array_index(token)?),
        _ => None,
    })
}

fn add(doc: &mut Value, tokens: &[String], value: Value) -> Result<(), String> {
    let Some((last, parent)) = tokens.split_last() else {
        *doc = value;
        return Ok(());
    };
    match get_mut(doc, parent) {
        Some(Value::Object(map)) => {
            map.insert(last.clone(), value);
            Ok(())
        }
        Some(Value::Array(items)) => {
            let at = if last == "-" {
                items.len()
            } else {
                array_index(last).ok_or_else(|| format!("invalid array index \"{last}\""))?
            };
            if at > items.len() {
                return Err(format!(
                    "array index {at} out of bounds (length {})",
                    items.len()
                ));
            }
            items.insert(at, value);
            Ok(())
        }
        Some(_) => Err("parent is not an object or array".to_owned()),
        None => Err("parent path not found".to_owned()),
    }
}

fn remove(doc: &mut Value, tokens: &[String]) -> Result<Value, String> {
    let Some((last, parent)) = tokens.split_last() else {
        return Err("cannot remove the whole document".to_owned());
    };
    match get_mut(doc, parent) {
        Some(Value::Object(map)) => map.remove(last).ok_or_else(|| "path not found".to_owned()),
        Some(Value::Array(items)) => match array_index(last) {
            Some(at) if at < items.len() => Ok(items.remove(at)),
            _ => Err(format!("array index \"{last}\" out of bounds")),
        },
        _ => Err("path not found".to_owned()),
    }
}

/// Structural equality where numbers compare by value.
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y || matches!((x.as_f64(), y.as_f64()), (Some(x), Some(y)) if x == y)
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_equal(x, y))
        }
        (Value::Object(x), Value::Object(y)) => objects_equal(x, y),
        _ => a == b,
    }
}

fn objects_equal(x: &Map<String, Value>, y: &Map<String, Value>) -> bool {
    x.len() == y.len()
        && x.iter()
            .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(target: Value, patch: Value) -> Value {
        json_patch(&target, &patch).unwrap()
    }

    fn err(target: Value, patch: Value) -> PatchError {
        json_patch(&target, &patch).unwrap_err()
    }

    // RFC 6902 Appendix A, in order.

    #[test]
    fn a1_add_object_member() {
        assert_eq!(
            ok(
                json!({"foo":"bar"}),
                json!([{"op":"add","path":"/baz","value":"qux"}])
            ),
            json!({"baz":"qux","foo":"bar"})
        );
    }

    #[test]
    fn a2_add_array_element() {
        assert_eq!(
            ok(
                json!({"foo":["bar","baz"]}),
                json!([{"op":"add","path":"/foo/1","value":"qux"}])
            ),
            json!({"foo":["bar","qux","baz"]})
        );
    }

    #[test]
    fn a3_a4_remove_member_and_element() {
        assert_eq!(
            ok(
                json!({"baz":"qux","foo":"bar"}),
                json!([{"op":"remove","path":"/baz"}])
            ),
            json!({"foo":"bar"})
        );
        assert_eq!(
            ok(
                json!({"foo":["bar","qux","baz"]}),
                json!([{"op":"remove","path":"/foo/1"}])
            ),
            json!({"foo":["bar","baz"]})
        );
    }

    #[test]
    fn a5_replace() {
        assert_eq!(
            ok(
                json!({"baz":"qux","foo":"bar"}),
                json!([{"op":"replace","path":"/baz","value":"boo"}])
            ),
            json!({"baz":"boo","foo":"bar"})
        );
    }

    #[test]
    fn a6_a7_move_value_and_array_element() {
        assert_eq!(
            ok(
                json!({"foo":{"bar":"baz","waldo":"fred"},"qux":{"corge":"grault"}}),
                json!([{"op":"move","from":"/foo/waldo","path":"/qux/thud"}])
            ),
            json!({"foo":{"bar":"baz"},"qux":{"corge":"grault","thud":"fred"}})
        );
        assert_eq!(
            ok(
                json!({"foo":["all","grass","cows","eat"]}),
                json!([{"op":"move","from":"/foo/1","path":"/foo/3"}])
            ),
            json!({"foo":["all","cows","eat","grass"]})
        );
    }

    #[test]
    fn a8_test_success() {
        let doc = json!({"baz":"qux","foo":["a",2,"c"]});
        assert_eq!(
            ok(
                doc.clone(),
                json!([
                    {"op":"test","path":"/baz","value":"qux"},
                    {"op":"test","path":"/foo/1","value":2}
                ])
            ),
            doc
        );
    }

    #[test]
    fn a9_test_error_names_index_and_path() {
        let e = err(
            json!({"baz":"qux"}),
            json!([{"op":"test","path":"/baz","value":"bar"}]),
        );
        let PatchError::TestFailed(msg) = e else {
            panic!("expected TestFailed, got {e:?}")
        };
        assert!(
            msg.contains("operation 0") && msg.contains("\"/baz\""),
            "{msg}"
        );
    }

    #[test]
    fn a10_add_nested_member() {
        assert_eq!(
            ok(
                json!({"foo":"bar"}),
                json!([{"op":"add","path":"/child","value":{"grandchild":{}}}])
            ),
            json!({"foo":"bar","child":{"grandchild":{}}})
        );
    }

    #[test]
    fn a11_unrecognized_members_are_ignored() {
        assert_eq!(
            ok(
                json!({"foo":"bar"}),
                json!([{"op":"add","path":"/baz","value":"qux","xyz":123}])
            ),
            json!({"foo":"bar","baz":"qux"})
        );
    }

    #[test]
    fn a12_add_to_nonexistent_target_fails() {
        let e = err(
            json!({"foo":"bar"}),
            json!([{"op":"add","path":"/baz/bat","value":"qux"}]),
        );
        assert!(
            matches!(&e, PatchError::Invalid(m) if m.contains("/baz/bat")),
            "{e:?}"
        );
    }

    #[test]
    fn a14_escape_ordering() {
        assert_eq!(
            ok(
                json!({"/":9,"~1":10}),
                json!([{"op":"test","path":"/~01","value":10}])
            ),
            json!({"/":9,"~1":10})
        );
    }

    #[test]
    fn a15_comparing_strings_and_numbers() {
        let e = err(
            json!({"/":9,"~1":10}),
            json!([{"op":"test","path":"/~01","value":"10"}]),
        );
        assert!(matches!(e, PatchError::TestFailed(_)));
    }

    #[test]
    fn a16_add_array_value_appends_with_dash() {
        assert_eq!(
            ok(
                json!({"foo":["bar"]}),
                json!([{"op":"add","path":"/foo/-","value":["abc","def"]}])
            ),
            json!({"foo":["bar",["abc","def"]]})
        );
    }

    #[test]
    fn copy_duplicates_and_missing_from_fails() {
        assert_eq!(
            ok(
                json!({"a":{"b":1}}),
                json!([{"op":"copy","from":"/a","path":"/c"}])
            ),
            json!({"a":{"b":1},"c":{"b":1}})
        );
        let e = err(
            json!({"a":1}),
            json!([{"op":"copy","from":"/x","path":"/c"}]),
        );
        assert!(matches!(&e, PatchError::Invalid(m) if m.contains("operation 0 (copy)")));
    }

    #[test]
    fn move_into_own_child_fails_and_missing_from_fails() {
        let e = err(
            json!({"a":{"b":1}}),
            json!([{"op":"move","from":"/a","path":"/a/b/c"}]),
        );
        assert!(matches!(e, PatchError::Invalid(_)));
        let e = err(
            json!({"a":1}),
            json!([{"op":"add","path":"/b","value":2},{"op":"move","from":"/x","path":"/y"}]),
        );
        assert!(
            matches!(&e, PatchError::Invalid(m) if m.contains("operation 1 (move)") && m.contains("\"/y\"")),
            "{e:?}"
        );
    }

    #[test]
    fn failure_leaves_target_untouched_and_errors_on_bad_input() {
        let target = json!({"a":1});
        assert!(json_patch(&target, &json!([{"op":"remove","path":"/missing"}])).is_err());
        assert!(
            json_patch(
                &target,
                &json!([{"op":"replace","path":"/missing","value":1}])
            )
            .is_err()
        );
        assert!(json_patch(&target, &json!({"op":"add"})).is_err());
        assert!(json_patch(&target, &json!([{"op":"frobnicate","path":"/a"}])).is_err());
        assert!(json_patch(&target, &json!([{"op":"add","path":"a","value":1}])).is_err());
        assert!(
            json_patch(
                &json!({"l":[1]}),
                &json!([{"op":"add","path":"/l/01","value":1}])
            )
            .is_err()
        );
        assert!(
            json_patch(
                &json!({"l":[1]}),
                &json!([{"op":"add","path":"/l/5","value":1}])
            )
            .is_err()
        );
        assert_eq!(target, json!({"a":1}));
    }

    /// kube-runtime's `finalizer()` adds the first finalizer with a `test`
    /// against null, then removes it with a `test` of the element.
    #[test]
    fn kube_runtime_finalizer_sequence() {
        let obj = json!({"metadata":{"name":"w"}});
        let added = ok(
            obj,
            json!([
                {"op":"test","path":"/metadata/finalizers","value":null},
                {"op":"add","path":"/metadata/finalizers","value":["example.com/cleanup"]}
            ]),
        );
        assert_eq!(
            added,
            json!({"metadata":{"name":"w","finalizers":["example.com/cleanup"]}})
        );
        let removed = ok(
            added.clone(),
            json!([
                {"op":"test","path":"/metadata/finalizers/0","value":"example.com/cleanup"},
                {"op":"remove","path":"/metadata/finalizers/0"}
            ]),
        );
        assert_eq!(removed, json!({"metadata":{"name":"w","finalizers":[]}}));
        // Once finalizers exist, the null test must fail so the helper
        // does not clobber them.
        let e = err(
            added,
            json!([{"op":"test","path":"/metadata/finalizers","value":null}]),
        );
        assert!(matches!(e, PatchError::TestFailed(_)));
    }

    #[test]
    fn test_of_absent_path_under_missing_parent_fails() {
        let e = err(
            json!({}),
            json!([{"op":"test","path":"/metadata/finalizers","value":null}]),
        );
        assert!(matches!(e, PatchError::Invalid(_)));
    }

    #[test]
    fn numbers_compare_by_value() {
        ok(
            json!({"a":1}),
            json!([{"op":"test","path":"/a","value":1.0}]),
        );
    }
}
