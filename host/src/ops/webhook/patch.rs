//! The JSONPatch (RFC 6902) of a mutation: the operations that turn the
//! reviewed object into the one the guest returned, within bounds.
//!
//! Written here rather than taken from `json_patch::diff`, which has no
//! ceiling: every changed leaf is an operation carrying its whole path, so
//! an object nested deep under long keys, ending in a long array whose
//! elements all change, makes a patch of operations × path bytes (hundreds
//! of gigabytes from a 3 MiB object). This one counts as it goes and stops
//! at the first bound.
//!
//! The operations are those `json_patch::diff` writes: a member only in the
//! old object is removed, one only in the new is added, a value of another
//! type or a different scalar is replaced, objects and arrays are walked
//! (arrays by index, surplus elements removed from the end or appended).

use serde_json::{Map, Value, json};

/// The most operations a mutation's patch may have (kube-apiserver's own
/// ceiling on a JSON patch).
pub const MAX_OPERATIONS: usize = 10_000;
/// The most bytes the operations' paths may take in all.
pub const MAX_PATH_BYTES: usize = 1 << 20;

/// A mutation whose patch would pass a bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchTooLarge {
    #[error("the mutation's JSONPatch would have more than {MAX_OPERATIONS} operations")]
    Operations,
    #[error("the mutation's JSONPatch paths would take more than {MAX_PATH_BYTES} bytes in all")]
    Paths,
}

/// The operations that turn `from` into `to`; empty when they are equal.
pub fn diff(from: &Value, to: &Value) -> Result<Vec<Value>, PatchTooLarge> {
    let mut d = Diff::default();
    d.walk(&mut String::new(), from, to)?;
    Ok(d.operations)
}

#[derive(Default)]
struct Diff {
    operations: Vec<Value>,
    path_bytes: usize,
}

impl Diff {
    fn walk(&mut self, path: &mut String, from: &Value, to: &Value) -> Result<(), PatchTooLarge> {
        match (from, to) {
            (Value::Object(a), Value::Object(b)) => self.objects(path, a, b),
            (Value::Array(a), Value::Array(b)) => self.arrays(path, a, b),
            _ if from == to => Ok(()),
            _ => self.push("replace", path, Some(to)),
        }
    }

    fn objects(
        &mut self,
        path: &mut String,
        a: &Map<String, Value>,
        b: &Map<String, Value>,
    ) -> Result<(), PatchTooLarge> {
        for (key, old) in a {
            let len = path.len();
            push_token(path, key);
            match b.get(key) {
                Some(new) => self.walk(path, old, new)?,
                None => self.push("remove", path, None)?,
            }
            path.truncate(len);
        }
        for (key, new) in b {
            if !a.contains_key(key) {
                let len = path.len();
                push_token(path, key);
                self.push("add", path, Some(new))?;
                path.truncate(len);
            }
        }
        Ok(())
    }

    fn arrays(&mut self, path: &mut String, a: &[Value], b: &[Value]) -> Result<(), PatchTooLarge> {
        let common = a.len().min(b.len());
        let at = |path: &mut String, i: usize| {
            let len = path.len();
            path.push('/');
            path.push_str(&i.to_string());
            len
        };
        for i in 0..common {
            let len = at(path, i);
            self.walk(path, &a[i], &b[i])?;
            path.truncate(len);
        }
        // From the end, so each index is still the element's own.
        for i in (common..a.len()).rev() {
            let len = at(path, i);
            self.push("remove", path, None)?;
            path.truncate(len);
        }
        for (i, new) in b.iter().enumerate().skip(common) {
            let len = at(path, i);
            self.push("add", path, Some(new))?;
            path.truncate(len);
        }
        Ok(())
    }

    fn push(&mut self, op: &str, path: &str, value: Option<&Value>) -> Result<(), PatchTooLarge> {
        if self.operations.len() == MAX_OPERATIONS {
            return Err(PatchTooLarge::Operations);
        }
        self.path_bytes += path.len();
        if self.path_bytes > MAX_PATH_BYTES {
            return Err(PatchTooLarge::Paths);
        }
        self.operations.push(match value {
            Some(v) => json!({"op": op, "path": path, "value": v}),
            None => json!({"op": op, "path": path}),
        });
        Ok(())
    }
}

/// Appends `/` and `key` as a JSON pointer token (RFC 6901: `~` is `~0`,
/// `/` is `~1`).
fn push_token(path: &mut String, key: &str) {
    path.push('/');
    for c in key.chars() {
        match c {
            '~' => path.push_str("~0"),
            '/' => path.push_str("~1"),
            c => path.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Applies `ops` to `doc` with the json-patch crate (the reference).
    fn apply(doc: &Value, ops: &[Value]) -> Value {
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops.to_vec())).unwrap();
        let mut out = doc.clone();
        json_patch::patch(&mut out, &patch).unwrap();
        out
    }

    #[test]
    fn the_patch_turns_the_old_object_into_the_new_one() {
        let cases = [
            (json!({"a": 1}), json!({"a": 1})),
            (json!({"a": 1, "b": 2}), json!({"a": 2, "c": [1, 2]})),
            (
                json!({"m": {"x/y": 1, "t~": 2, "keep": [1, {"z": 0}, 3, 4]}}),
                json!({"m": {"x/y": 3, "keep": [1, {"z": 1, "w": null}], "new": {}}}),
            ),
            (json!({"s": [1]}), json!({"s": [1, 2, 3]})),
            (json!({"s": [1, 2, 3]}), json!({"s": "now a string"})),
            (json!({"n": 1.0}), json!({"n": 1})),
        ];
        for (from, to) in cases {
            let ops = diff(&from, &to).unwrap();
            assert_eq!(apply(&from, &ops), to, "{from} → {to}: {ops:?}");
            assert_eq!(ops.is_empty(), from == to);
        }
        let ops = diff(&json!({"a/b": {"c~d": 1}}), &json!({"a/b": {"c~d": 2}})).unwrap();
        assert_eq!(
            ops,
            vec![json!({"op": "replace", "path": "/a~1b/c~0d", "value": 2})]
        );
    }

    #[test]
    fn a_patch_past_its_bounds_is_refused_before_it_is_built() {
        // One operation per element: one past the ceiling.
        let from = json!({"a": vec![0; MAX_OPERATIONS + 1]});
        let to = json!({"a": vec![1; MAX_OPERATIONS + 1]});
        assert_eq!(diff(&from, &to), Err(PatchTooLarge::Operations));
        let to_ok = json!({"a": vec![1; MAX_OPERATIONS]});
        let from_ok = json!({"a": vec![0; MAX_OPERATIONS]});
        assert_eq!(diff(&from_ok, &to_ok).unwrap().len(), MAX_OPERATIONS);

        // Few operations under one long path: the paths' bytes are the bound.
        let key = "k".repeat(8 << 10);
        let nest = |leaf: Value| {
            let mut v = leaf;
            for _ in 0..100 {
                v = json!({ key.clone(): v });
            }
            v
        };
        let from = nest(json!(vec![0; 200]));
        let to = nest(json!(vec![1; 200]));
        let refused = diff(&from, &to).unwrap_err();
        assert_eq!(refused, PatchTooLarge::Paths);
        assert!(refused.to_string().contains("1048576 bytes"), "{refused}");
    }
}
