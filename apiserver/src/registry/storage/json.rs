//! Objects as the store holds them: compact JSON, parsed on use.
//!
//! A `serde_json::Value` tree costs about ten times its JSON: every map is
//! a `BTreeMap` whose first node holds room for eleven entries, so each
//! small map of an object (metadata, spec, status, every level of
//! `managedFields`) costs ~600 bytes however few keys it has. At a million
//! objects the trees took ~7.8 GB for 665 MiB of JSON. The store keeps
//! each object's JSON instead, shared by its table entry, its event in the
//! watch history, watchers and lists (which copy the bytes as they are),
//! and parses it for the readers that need a tree: GET, writes, selectors.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

/// An object's compact JSON (cheap to clone: the bytes are shared).
pub(crate) type Json = Bytes;

/// `value` as stored.
pub(crate) fn encode(value: &Value) -> Json {
    // Serializing a `Value` cannot fail: its keys are strings. A boxed
    // slice holds no spare capacity (a `Vec` grown by doubling does, and
    // `Bytes` would keep it).
    Bytes::from(
        serde_json::to_vec(value)
            .unwrap_or_default()
            .into_boxed_slice(),
    )
}

/// The object `json` holds. The store wrote it from a `Value`, so it parses;
/// a failure would be a bug, answered with `null` rather than a panic.
pub(crate) fn decode(json: &[u8]) -> Value {
    serde_json::from_slice(json).unwrap_or(Value::Null)
}

/// [`decode`], shared.
pub(crate) fn decode_arc(json: &[u8]) -> Arc<Value> {
    Arc::new(decode(json))
}

/// The object's `apiVersion`, without parsing the rest when it comes first
/// (as it does in what [`encode`] writes: a `Value`'s keys are in order).
pub(crate) fn api_version(json: &[u8]) -> Option<String> {
    const PREFIX: &[u8] = b"{\"apiVersion\":\"";
    if let Some(rest) = json.strip_prefix(PREFIX)
        && let Some(end) = rest.iter().position(|&b| b == b'"' || b == b'\\')
        && rest[end] == b'"'
    {
        return std::str::from_utf8(&rest[..end]).ok().map(str::to_string);
    }
    decode(json)
        .get("apiVersion")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// Whether `json` nests arrays and objects more than `levels` deep (as
/// `values::deeper_than` says of its tree), read off the bytes: brackets
/// inside strings do not count.
pub(crate) fn nests_deeper_than(json: &[u8], levels: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in json {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > levels {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// The `metadata.resourceVersion` of an object's JSON, reading the rest
/// only to check that it is a JSON object; Err: why it is not one.
pub(crate) fn resource_version(json: &[u8]) -> Result<Option<String>, serde_json::Error> {
    #[derive(serde::Deserialize)]
    struct Object {
        #[serde(default)]
        metadata: Option<Metadata>,
    }
    #[derive(serde::Deserialize)]
    struct Metadata {
        // Any JSON: only a string is a resourceVersion, as `meta_str` reads.
        #[serde(default, rename = "resourceVersion")]
        resource_version: Option<Value>,
    }
    let object: Object = serde_json::from_slice(json)?;
    Ok(object
        .metadata
        .and_then(|m| m.resource_version)
        .and_then(|v| v.as_str().map(str::to_string)))
}

/// Whether `needle` occurs in `json`: a cheap test before a parse.
pub(crate) fn mentions(json: &[u8], needle: &[u8]) -> bool {
    json.windows(needle.len()).any(|w| w == needle)
}

/// An object's `metadata.uid` and the owners its ownerReferences name.
pub(crate) type Index = (Option<String>, Vec<OwnerRef>);

/// One ownerReference as the garbage collector needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OwnerRef {
    pub(crate) uid: String,
    /// `blockOwnerDeletion: true`: a foreground deletion of the owner
    /// waits for this dependent.
    pub(crate) blocks: bool,
}

/// The object's [`Index`], read without building the tree (the store's
/// indexes, under its lock).
pub(crate) fn uid_and_owners(json: &[u8]) -> Index {
    #[derive(serde::Deserialize)]
    struct Object {
        #[serde(default)]
        metadata: Option<Metadata>,
    }
    #[derive(serde::Deserialize)]
    struct Metadata {
        #[serde(default)]
        uid: Option<String>,
        #[serde(default, rename = "ownerReferences")]
        owners: Option<Vec<Owner>>,
    }
    #[derive(serde::Deserialize)]
    struct Owner {
        #[serde(default)]
        uid: Option<String>,
        #[serde(default, rename = "blockOwnerDeletion")]
        blocks: Option<bool>,
    }
    let Ok(Object {
        metadata: Some(meta),
    }) = serde_json::from_slice::<Object>(json)
    else {
        return (None, Vec::new());
    };
    // One entry per owner, blocking if any of its references blocks, so
    // that the store's index adds and removes an object's owners alike.
    // Sorted, as a 3 MiB object's tens of thousands of references are not
    // compared pairwise under the store's lock.
    let mut owners: Vec<OwnerRef> = meta
        .owners
        .unwrap_or_default()
        .into_iter()
        .filter_map(|o| {
            Some(OwnerRef {
                uid: o.uid?,
                blocks: o.blocks == Some(true),
            })
        })
        .collect();
    owners.sort_by(|a, b| a.uid.cmp(&b.uid));
    owners.dedup_by(|later, kept| {
        let same = later.uid == kept.uid;
        if same {
            kept.blocks |= later.blocks;
        }
        same
    });
    (meta.uid, owners)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_api_version_is_read_from_the_front_or_by_parsing() {
        let stored = encode(&json!({"kind": "Pod", "apiVersion": "v1", "metadata": {}}));
        assert!(stored.starts_with(b"{\"apiVersion\""));
        assert_eq!(api_version(&stored).as_deref(), Some("v1"));
        let escaped = br#"{"apiVersion":"a\/b","kind":"X"}"#;
        assert_eq!(api_version(escaped).as_deref(), Some("a/b"));
        let later = br#"{"kind":"X","apiVersion":"g/v1"}"#;
        assert_eq!(api_version(later).as_deref(), Some("g/v1"));
        assert_eq!(api_version(br#"{"kind":"X"}"#), None);
    }

    #[test]
    fn the_uid_and_owners_are_read_from_the_json() {
        let obj = encode(&json!({
            "metadata": {"uid": "u1", "ownerReferences": [
                {"uid": "o1", "name": "a"},
                {"name": "no-uid"},
                {"uid": "o2", "name": "b", "blockOwnerDeletion": true},
                {"uid": "o1", "name": "a-again", "blockOwnerDeletion": true},
            ]},
            "spec": {"deep": [1, {"x": null}]},
        }));
        let owner = |uid: &str, blocks| OwnerRef {
            uid: uid.to_string(),
            blocks,
        };
        assert_eq!(
            uid_and_owners(&obj),
            (
                Some("u1".to_string()),
                vec![owner("o1", true), owner("o2", true)]
            )
        );
        assert_eq!(uid_and_owners(b"{}"), (None, Vec::new()));
    }

    #[test]
    fn what_is_encoded_decodes_to_the_same_value() {
        let v = json!({"apiVersion": "v1", "metadata": {"name": "a", "labels": {"x": "y"}}, "data": {"k": "é"}});
        assert_eq!(decode(&encode(&v)), v);
    }

    #[test]
    fn nesting_read_off_the_bytes_is_the_trees() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let cases = [
            json!({}),
            json!({"a": [1, {"b": []}]}),
            json!({"s": "[[[[{{{{ \\\" ]]"}),
            serde_json::from_str::<Value>(&deep(3)).unwrap(),
            serde_json::from_str::<Value>(&deep(4)).unwrap(),
        ];
        for v in &cases {
            let bytes = serde_json::to_vec(v).unwrap();
            for levels in 0..6 {
                assert_eq!(
                    nests_deeper_than(&bytes, levels),
                    crate::values::deeper_than(v, levels),
                    "{v} at {levels}"
                );
            }
        }
    }

    #[test]
    fn a_resource_version_is_read_and_anything_but_an_object_refused() {
        let rv = |s: &str| resource_version(s.as_bytes()).map_err(|e| e.to_string());
        assert_eq!(
            rv(
                r#"{"apiVersion":"v1","metadata":{"name":"a","resourceVersion":"42"},"data":{"k":[{"x":1}]}}"#
            ),
            Ok(Some("42".into()))
        );
        assert_eq!(rv(r#"{"kind":"X"}"#), Ok(None));
        assert!(rv("[1]").is_err());
        assert!(rv(r#"{"metadata":{"name":"a"}"#).is_err(), "truncated");
    }
}
