//! JSON patch, RFC 6902 (`application/json-patch+json`), applied by the
//! `json-patch` crate one operation at a time and bounded the way
//! kube-apiserver bounds it: at most [`MAX_OPERATIONS`] operations, and at
//! most [`MAX_COPY_BYTES`] added by `copy` operations, checked before each
//! copy is made so a patch that copies a value into itself over and over
//! (doubling it each time) is refused long before it costs memory. Values
//! from `add` and `replace` come from the request body, whose size is
//! bounded already; `copy` is the only operation that amplifies. No
//! operation may nest the result deeper than [`MAX_DEPTH`].
//!
//! Kept by hand, because the crate cannot express them:
//!
//! - the bounds, checked before each operation reaches the crate;
//! - `test`, which follows the JSON patch library Kubernetes uses rather
//!   than the crate: numbers compare by value (`1` equals `1.0`), and an
//!   absent member of an existing object or array reads as `null`;
//! - a `move` onto its own `from` is a no-op even where that path is
//!   absent, as upstream answers it;
//! - error messages that name the operation's index, `op` and path.

use json_patch::jsonptr::Pointer;
use json_patch::{
    AddOperation, CopyOperation, MoveOperation, PatchOperation, RemoveOperation, ReplaceOperation,
};
use serde_json::{Map, Value};

use super::PatchError;
use crate::metrics::Limit;

/// Most operations one patch may hold (kube-apiserver's
/// `maxJSONPatchOperations`); more is 413.
pub const MAX_OPERATIONS: usize = 10_000;

/// Most bytes the `copy` operations of one patch may add, each copied value
/// counted at its compact JSON size (kube-apiserver's default
/// `JSONPatchMaxCopyBytes`, 3 MiB); more is 422.
pub const MAX_COPY_BYTES: usize = 3 * 1024 * 1024;

/// Deepest nesting of arrays and objects an operation may produce. Far
/// deeper than any real object, and shallow enough that the server's
/// recursive code (serialization, comparison, drop) stays far from the
/// stack limit and the result still parses as JSON (128 levels) inside a
/// list or watch event. `copy` can otherwise double the depth per
/// operation.
pub const MAX_DEPTH: usize = 100;

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
/// `test` is [`PatchError::TestFailed`]; a malformed patch, a missing path,
/// an out-of-range index, copies past [`MAX_COPY_BYTES`] or nesting past
/// [`MAX_DEPTH`] are [`PatchError::Invalid`]; more than [`MAX_OPERATIONS`]
/// operations is [`PatchError::TooLarge`].
pub fn json_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    json_patch_bounded(target, patch).map_err(|(e, _)| e)
}

/// A refusal, with the limit it ran into if it was one.
type Refusal = (PatchError, Option<Limit>);

/// [`json_patch`], also naming the limit a refused patch ran into (for the
/// server's metrics; the error alone does not tell, its variants being
/// shared with other failures).
pub(crate) fn json_patch_bounded(target: &Value, patch: &Value) -> Result<Value, Refusal> {
    let Value::Array(ops) = patch else {
        return Err((
            PatchError::Invalid("json patch must be a JSON array of operations".to_owned()),
            None,
        ));
    };
    if ops.len() > MAX_OPERATIONS {
        return Err((
            PatchError::TooLarge(format!(
                "The allowed maximum operations in a JSON patch is {MAX_OPERATIONS}, got {}",
                ops.len()
            )),
            Some(Limit::JsonPatchOperations),
        ));
    }
    // Operations apply to a copy: on any failure the target is untouched.
    let mut doc = target.clone();
    let mut copied = 0;
    for (index, op) in ops.iter().enumerate() {
        apply_op(&mut doc, index, op, &mut copied)?;
    }
    Ok(doc)
}

/// Checks one operation against the bounds, then applies it (`test`
/// here, every other operation through the crate).
fn apply_op(doc: &mut Value, index: usize, op: &Value, copied: &mut usize) -> Result<(), Refusal> {
    let invalid = |msg: String| {
        (
            PatchError::Invalid(format!("json patch operation {index}: {msg}")),
            None,
        )
    };
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
    let refuse = |msg: &str| (fail(msg), None);
    let pointer = Pointer::parse(path)
        .map_err(|e| refuse(&format!("invalid JSON pointer \"{path}\": {e}")))?;
    // Where a value lands is as many containers deep as the path has tokens.
    let check_depth = |value: &Value| {
        let depth = pointer.count() + nesting(value);
        if depth > MAX_DEPTH {
            Err((
                fail(&format!(
                    "the result would nest {depth} levels deep, exceeding the limit {MAX_DEPTH}"
                )),
                Some(Limit::JsonPatchDepth),
            ))
        } else {
            Ok(())
        }
    };
    let value = || -> Result<&Value, Refusal> {
        let v = op
            .get("value")
            .ok_or_else(|| refuse("missing member \"value\""))?;
        check_depth(v)?;
        Ok(v)
    };
    let from = || -> Result<&Pointer, Refusal> {
        let from = op
            .get("from")
            .and_then(Value::as_str)
            .ok_or_else(|| refuse("missing string member \"from\""))?;
        Pointer::parse(from)
            .map_err(|e| refuse(&format!("from: invalid JSON pointer \"{from}\": {e}")))
    };
    let operation = match name {
        "add" => PatchOperation::Add(AddOperation {
            path: pointer.to_buf(),
            value: value()?.clone(),
        }),
        "remove" => PatchOperation::Remove(RemoveOperation {
            path: pointer.to_buf(),
        }),
        "replace" => PatchOperation::Replace(ReplaceOperation {
            path: pointer.to_buf(),
            value: value()?.clone(),
        }),
        "move" => {
            let from = from()?;
            if from == pointer {
                return Ok(());
            }
            if let Some(v) = doc.pointer(from.as_str()) {
                check_depth(v)?;
            }
            PatchOperation::Move(MoveOperation {
                from: from.to_buf(),
                path: pointer.to_buf(),
            })
        }
        "copy" => {
            let from = from()?;
            let source = doc
                .pointer(from.as_str())
                .ok_or_else(|| refuse("from: path not found"))?;
            // Measured before the copy exists, and only up to the budget:
            // the check itself costs no more than the limit allows.
            let budget = MAX_COPY_BYTES - *copied;
            match json_size(source, budget) {
                Some(size) => *copied += size,
                None => {
                    return Err((
                        fail(&format!(
                            "Unable to complete the copy, the accumulated size increase of copy exceeds the limit {MAX_COPY_BYTES} bytes ({copied} bytes copied by earlier operations)"
                        )),
                        Some(Limit::JsonPatchCopyBytes),
                    ));
                }
            }
            check_depth(source)?;
            PatchOperation::Copy(CopyOperation {
                from: from.to_buf(),
                path: pointer.to_buf(),
            })
        }
        "test" => {
            let expected = value()?;
            let actual = match (doc.pointer(pointer.as_str()), pointer.parent()) {
                (Some(actual), _) => actual,
                // An absent child of an existing container reads as null.
                (None, Some(parent)) if doc.pointer(parent.as_str()).is_some_and(is_container) => {
                    &Value::Null
                }
                _ => return Err(refuse("path not found")),
            };
            return if json_equal(actual, expected) {
                Ok(())
            } else {
                Err((
                    PatchError::TestFailed(format!(
                        "json patch operation {index} (test) failed at path \"{path}\": \
                         expected {expected}, found {actual}"
                    )),
                    None,
                ))
            };
        }
        other => return Err(invalid(format!("unknown op \"{other}\""))),
    };
    // One operation on a copy the caller drops on failure: no undo needed.
    json_patch::patch_unsafe(doc, std::slice::from_ref(&operation))
        .map_err(|e| refuse(&e.kind.to_string()))
}

/// Nesting depth: 0 for a scalar, 1 for `[]`, 2 for `[[]]`. Iterative, so
/// it cannot overflow the stack whatever it is given.
fn nesting(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(a) => {
                deepest = deepest.max(d + 1);
                stack.extend(a.iter().map(|c| (c, d + 1)));
            }
            Value::Object(m) => {
                deepest = deepest.max(d + 1);
                stack.extend(m.values().map(|c| (c, d + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// The compact JSON size of `value` in bytes, or None once it exceeds
/// `budget` (the walk stops there). Iterative, so it cannot overflow the
/// stack.
fn json_size(value: &Value, budget: usize) -> Option<usize> {
    let mut size = 0usize;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        size += match v {
            Value::Null => 4,
            Value::Bool(b) => {
                if *b {
                    4
                } else {
                    5
                }
            }
            Value::Number(n) => crate::values::json_len(n),
            Value::String(s) => string_len(s),
            Value::Array(a) => {
                stack.extend(a.iter());
                // Brackets and the commas between elements.
                2 + a.len().saturating_sub(1)
            }
            Value::Object(m) => {
                stack.extend(m.values());
                // Braces, commas, colons and the quoted keys.
                2 + m.len().saturating_sub(1) + m.keys().map(|k| string_len(k) + 1).sum::<usize>()
            }
        };
        if size > budget {
            return None;
        }
    }
    Some(size)
}

/// Length of a quoted, escaped JSON string as serde_json writes it.
fn string_len(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

fn is_container(value: &Value) -> bool {
    value.is_object() || value.is_array()
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

    fn bomb(copies: usize) -> Value {
        let mut ops = vec![json!({"op": "add", "path": "/x", "value": [0]})];
        ops.extend((0..copies).map(|_| json!({"op": "copy", "from": "/x", "path": "/x/-"})));
        Value::Array(ops)
    }

    #[test]
    fn copy_amplification_stops_at_the_limit_before_copying() {
        for copies in [23, 30, 1000] {
            let e = err(json!({}), bomb(copies));
            assert!(
                matches!(&e, PatchError::Invalid(m) if m.contains("Unable to complete the copy") && m.contains("3145728")),
                "{e:?}"
            );
        }
        // Below the limit the same shape is fine.
        let ok = ok(json!({}), bomb(10));
        assert!(serde_json::to_vec(&ok).unwrap().len() < 8 * 1024);
    }

    #[test]
    fn refusals_name_the_limit_they_ran_into() {
        let limit = |patch: Value| json_patch_bounded(&json!({}), &patch).unwrap_err().1;
        assert_eq!(limit(bomb(30)), Some(Limit::JsonPatchCopyBytes));
        let ops: Vec<Value> = (0..=MAX_OPERATIONS)
            .map(|_| json!({"op": "test", "path": "", "value": {}}))
            .collect();
        assert_eq!(limit(Value::Array(ops)), Some(Limit::JsonPatchOperations));
        let mut ops = vec![json!({"op": "add", "path": "/x", "value": {}})];
        for i in 0..12 {
            ops.push(json!({"op": "copy", "from": "/x", "path": "/x".repeat((1 << i) + 1)}));
        }
        assert_eq!(limit(Value::Array(ops)), Some(Limit::JsonPatchDepth));
        assert_eq!(limit(json!([{"op": "remove", "path": "/nope"}])), None);
        assert_eq!(limit(json!([{"op": "test", "path": "", "value": 1}])), None);
    }

    #[test]
    fn operation_count_is_bounded() {
        let ops: Vec<Value> = (0..=MAX_OPERATIONS)
            .map(|_| json!({"op": "test", "path": "", "value": {}}))
            .collect();
        let e = err(json!({}), Value::Array(ops));
        assert_eq!(
            e,
            PatchError::TooLarge(
                "The allowed maximum operations in a JSON patch is 10000, got 10001".into()
            )
        );
    }

    #[test]
    fn nesting_is_bounded() {
        // Copying a value into its own deepest child doubles its depth.
        // After i copies `/a` is 2^i objects deep; the next copy goes one
        // below its deepest object.
        let mut ops = vec![json!({"op": "add", "path": "/a", "value": {}})];
        for i in 0..12 {
            ops.push(json!({"op": "copy", "from": "/a", "path": "/a".repeat((1 << i) + 1)}));
        }
        let e = err(json!({}), Value::Array(ops));
        assert!(
            matches!(&e, PatchError::Invalid(m) if m.contains("exceeding the limit 100")),
            "{e:?}"
        );
    }

    #[test]
    fn sizes_match_serde_json() {
        for v in [
            json!({"a": [1, -2.5, "x\"\\\n\u{1}é", null, true, false], "b": {}, "c": []}),
            json!("plain"),
            json!(12345678901234567u64),
        ] {
            let exact = serde_json::to_vec(&v).unwrap().len();
            assert_eq!(json_size(&v, usize::MAX), Some(exact), "{v}");
            assert_eq!(json_size(&v, exact - 1), None);
        }
        assert_eq!(nesting(&json!(1)), 0);
        assert_eq!(nesting(&json!({"a": [[]]})), 3);
    }
}
