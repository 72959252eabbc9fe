//! JSON patch, RFC 6902 (`application/json-patch+json`), applied by
//! `wasmctrl_apimachinery::patch` with kube-apiserver's bounds: at most
//! [`MAX_OPERATIONS`] operations, at most [`MAX_COPY_BYTES`] added by
//! `copy` operations (checked before each copy is made, so a patch that
//! copies a value into itself over and over is refused long before it
//! costs memory), and no result nested deeper than [`MAX_DEPTH`]. The same
//! implementation answers the guest SDK's fake API server and a host's
//! shadow runs, so all three apply a patch alike.
//!
//! What stays here is the server's side: which [`PatchError`] (and so which
//! HTTP status) each refusal is, and which limit it ran into for the
//! metrics.

use serde_json::Value;
use wasmctrl_apimachinery::patch::{self as apimachinery, PatchBounds};

use super::PatchError;
use crate::metrics::Limit;

/// Most operations one patch may hold (kube-apiserver's
/// `maxJSONPatchOperations`); more is 413.
pub const MAX_OPERATIONS: usize = PatchBounds::KUBERNETES.max_operations;

/// Most bytes the `copy` operations of one patch may add, each copied value
/// counted at its compact JSON size (kube-apiserver's default
/// `JSONPatchMaxCopyBytes`, 3 MiB); more is 422.
pub const MAX_COPY_BYTES: usize = PatchBounds::KUBERNETES.max_copy_bytes;

/// Deepest nesting of arrays and objects an operation may produce. Far
/// deeper than any real object, and shallow enough that the server's
/// recursive code (serialization, comparison, drop) stays far from the
/// stack limit and the result still parses as JSON (128 levels) inside a
/// list or watch event. `copy` can otherwise double the depth per
/// operation.
pub const MAX_DEPTH: usize = PatchBounds::KUBERNETES.max_depth;

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
    apimachinery::json_patch(target, patch, PatchBounds::KUBERNETES).map_err(refusal)
}

fn refusal(e: apimachinery::PatchError) -> Refusal {
    use apimachinery::PatchError as E;
    let message = e.to_string();
    match e {
        E::TooManyOperations { .. } => (
            PatchError::TooLarge(message),
            Some(Limit::JsonPatchOperations),
        ),
        E::TestFailed { .. } => (PatchError::TestFailed(message), None),
        E::CopyLimit { .. } => (
            PatchError::Invalid(message),
            Some(Limit::JsonPatchCopyBytes),
        ),
        E::TooDeep { .. } => (PatchError::Invalid(message), Some(Limit::JsonPatchDepth)),
        E::MoveLimit { .. } => (PatchError::Invalid(message), Some(Limit::JsonPatchMoveWalk)),
        E::ShiftLimit { .. } => (
            PatchError::Invalid(message),
            Some(Limit::JsonPatchArrayShift),
        ),
        _ => (PatchError::Invalid(message), None),
    }
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

    #[test]
    fn applies_and_leaves_the_target_untouched_on_failure() {
        assert_eq!(
            ok(
                json!({"foo":["bar","baz"]}),
                json!([{"op":"add","path":"/foo/1","value":"qux"}])
            ),
            json!({"foo":["bar","qux","baz"]})
        );
        let target = json!({"a":1});
        assert!(json_patch(&target, &json!([{"op":"remove","path":"/missing"}])).is_err());
        assert_eq!(target, json!({"a":1}));
    }

    #[test]
    fn a_failed_test_is_test_failed_and_names_index_and_path() {
        let e = err(
            json!({"baz":"qux"}),
            json!([{"op":"test","path":"/baz","value":"bar"}]),
        );
        assert_eq!(
            e,
            PatchError::TestFailed(
                "json patch operation 0 (test) failed at path \"/baz\": expected \"bar\", found \"qux\""
                    .into()
            )
        );
    }

    #[test]
    fn malformed_and_inapplicable_patches_are_invalid() {
        for patch in [
            json!({"op":"add"}),
            json!([{"op":"frobnicate","path":"/a"}]),
            json!([{"op":"add","path":"a","value":1}]),
            json!([{"op":"add","path":"/baz/bat","value":"qux"}]),
            json!([{"op":"copy","from":"/x","path":"/c"}]),
            json!([{"op":"move","from":"/a","path":"/a/b"}]),
            json!([{"op":"test","path":"/metadata/finalizers","value":null}]),
        ] {
            assert!(
                matches!(err(json!({"a":1}), patch.clone()), PatchError::Invalid(_)),
                "{patch}"
            );
        }
        let e = err(
            json!({"a":1}),
            json!([{"op":"add","path":"/b","value":2},{"op":"move","from":"/x","path":"/y"}]),
        );
        assert!(
            matches!(&e, PatchError::Invalid(m) if m.starts_with("json patch operation 1 (move) failed at path \"/y\"")),
            "{e:?}"
        );
    }

    /// kube-runtime's `finalizer()` adds the first finalizer with a `test`
    /// against null.
    #[test]
    fn kube_runtime_finalizer_sequence() {
        let added = ok(
            json!({"metadata":{"name":"w"}}),
            json!([
                {"op":"test","path":"/metadata/finalizers","value":null},
                {"op":"add","path":"/metadata/finalizers","value":["example.com/cleanup"]}
            ]),
        );
        assert_eq!(
            added,
            json!({"metadata":{"name":"w","finalizers":["example.com/cleanup"]}})
        );
    }

    fn bomb(copies: usize) -> Value {
        let mut ops = vec![json!({"op": "add", "path": "/x", "value": [0]})];
        ops.extend((0..copies).map(|_| json!({"op": "copy", "from": "/x", "path": "/x/-"})));
        Value::Array(ops)
    }

    #[test]
    fn refusals_name_the_limit_they_ran_into() {
        let refusal = |patch: Value| json_patch_bounded(&json!({}), &patch).unwrap_err();
        let (e, limit) = refusal(bomb(30));
        assert_eq!(limit, Some(Limit::JsonPatchCopyBytes));
        assert!(
            matches!(&e, PatchError::Invalid(m) if m.contains("Unable to complete the copy") && m.contains("3145728")),
            "{e:?}"
        );
        let ops: Vec<Value> = (0..=MAX_OPERATIONS)
            .map(|_| json!({"op": "test", "path": "", "value": {}}))
            .collect();
        assert_eq!(
            refusal(Value::Array(ops)),
            (
                PatchError::TooLarge(
                    "The allowed maximum operations in a JSON patch is 10000, got 10001".into()
                ),
                Some(Limit::JsonPatchOperations)
            )
        );
        let mut ops = vec![json!({"op": "add", "path": "/x", "value": {}})];
        for i in 0..12 {
            ops.push(json!({"op": "copy", "from": "/x", "path": "/x".repeat((1 << i) + 1)}));
        }
        let (e, limit) = refusal(Value::Array(ops));
        assert_eq!(limit, Some(Limit::JsonPatchDepth));
        assert!(
            matches!(&e, PatchError::Invalid(m) if m.contains("exceeding the limit 100")),
            "{e:?}"
        );
        assert_eq!(refusal(json!([{"op": "remove", "path": "/nope"}])).1, None);
        assert_eq!(
            refusal(json!([{"op": "test", "path": "", "value": 1}])).1,
            None
        );
    }

    #[test]
    fn the_bounds_are_kube_apiserver_s() {
        assert_eq!(
            (MAX_OPERATIONS, MAX_COPY_BYTES, MAX_DEPTH),
            (10_000, 3 * 1024 * 1024, 100)
        );
    }
}
