//! One cached object: its JSON, and the few metadata fields the host reads
//! on every event without parsing the JSON.
//!
//! Why not a `DynamicObject`: a `serde_json::Value` tree plus a full
//! `ObjectMeta` costs ~8× the object's JSON (every key its own `String`,
//! every map its own nodes, ~40 optional metadata fields inline), ~6 KB per
//! object of the benchmark CRD against ~0.7 KB of JSON. The guest wants
//! JSON anyway, so a cached read hands it these bytes as they are; the
//! rare host reader that wants a tree parses it ([`CachedObject::parse`]).

use kube::api::ObjectMeta;
use serde::de::DeserializeOwned;

/// An ownerReference, as much of it as maps events to keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// `group/version`, or `version` for the core group.
    pub api_version: Box<str>,
    pub kind: Box<str>,
    pub name: Box<str>,
    /// Whether this reference is the object's managing controller.
    pub controller: bool,
}

impl Owner {
    /// The API group of the owner (`""` for the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map(|(g, _)| g)
            .unwrap_or("")
    }
}

/// A cached object: immutable, shared by the store and every event that
/// announces it.
///
/// Its JSON and its name, namespace, uid and resourceVersion are one
/// allocation (`text`, cut at the offsets), not five: at a million objects
/// each allocation's own overhead was ~30 bytes per object.
#[derive(PartialEq, Eq)]
pub struct CachedObject {
    /// The JSON, then the name, namespace, uid and resourceVersion.
    text: Box<str>,
    json_end: usize,
    name_end: usize,
    namespace_end: usize,
    uid_end: usize,
    /// Which of namespace, uid and resourceVersion the object has.
    present: u8,
    labels: Box<[(Box<str>, Box<str>)]>,
    owners: Box<[Owner]>,
}

const HAS_NAMESPACE: u8 = 1;
const HAS_UID: u8 = 2;
const HAS_RESOURCE_VERSION: u8 = 4;

impl std::fmt::Debug for CachedObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedObject")
            .field("name", &self.name())
            .field("namespace", &self.namespace())
            .field("uid", &self.uid())
            .field("resource_version", &self.resource_version())
            .field("labels", &self.labels)
            .field("owners", &self.owners)
            .field("json", &self.json())
            .finish()
    }
}

/// Why an object cannot be cached.
#[derive(Debug, thiserror::Error)]
pub enum CacheObjectError {
    #[error("the object has no metadata.name")]
    NoName,
    #[error("the object is not a JSON object: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the object's JSON is not UTF-8")]
    NotUtf8,
}

impl CachedObject {
    /// A cached object of the JSON `json` (its pieces, joined), and the
    /// header `meta` (name, namespace, uid, resourceVersion and labels;
    /// nothing else of it is read) and `owners` read from it.
    pub(super) fn from_parts(
        json: [&str; 2],
        meta: ObjectMeta,
        owners: Vec<Owner>,
    ) -> Result<Self, CacheObjectError> {
        let name = meta.name.ok_or(CacheObjectError::NoName)?;
        let labels = meta
            .labels
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
            .collect();
        // Each part with the flag that says it is there (a name always is).
        let parts = [
            (Some(name.as_str()), 0),
            (meta.namespace.as_deref(), HAS_NAMESPACE),
            (meta.uid.as_deref(), HAS_UID),
            (meta.resource_version.as_deref(), HAS_RESOURCE_VERSION),
        ];
        // Sized exactly: the object stays cached, and a grown or shrunk
        // allocation leaves holes between a million of them.
        let mut text = String::with_capacity(
            json.iter().map(|j| j.len()).sum::<usize>()
                + parts
                    .iter()
                    .filter_map(|(p, _)| p.map(str::len))
                    .sum::<usize>(),
        );
        json.iter().for_each(|j| text.push_str(j));
        let json_end = text.len();
        let mut ends = [0; 4];
        let mut present = 0;
        for (end, (part, flag)) in ends.iter_mut().zip(parts) {
            if let Some(part) = part {
                text.push_str(part);
                present |= flag;
            }
            *end = text.len();
        }
        Ok(Self {
            text: text.into_boxed_str(),
            json_end,
            name_end: ends[0],
            namespace_end: ends[1],
            uid_end: ends[2],
            present,
            labels,
            owners: owners.into_boxed_slice(),
        })
    }

    pub fn name(&self) -> &str {
        &self.text[self.json_end..self.name_end]
    }

    /// None for a cluster-scoped object.
    pub fn namespace(&self) -> Option<&str> {
        (self.present & HAS_NAMESPACE != 0).then(|| &self.text[self.name_end..self.namespace_end])
    }

    pub fn uid(&self) -> Option<&str> {
        (self.present & HAS_UID != 0).then(|| &self.text[self.namespace_end..self.uid_end])
    }

    pub fn resource_version(&self) -> Option<&str> {
        (self.present & HAS_RESOURCE_VERSION != 0).then(|| &self.text[self.uid_end..])
    }

    /// The value of label `key`, if set.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| &**v)
    }

    /// Every label, in key order.
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.labels.iter().map(|(k, v)| (&**k, &**v))
    }

    pub fn owner_references(&self) -> &[Owner] {
        &self.owners
    }

    /// The whole object as compact JSON.
    pub fn json(&self) -> &str {
        &self.text[..self.json_end]
    }

    /// The object parsed into `T` (a `DynamicObject`, a typed resource, a
    /// `serde_json::Value`).
    pub fn parse<T: DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_str(self.json())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cached(value: serde_json::Value) -> CachedObject {
        CachedObject::from_json(&value.to_string()).unwrap()
    }

    #[test]
    fn the_header_is_read_from_the_object_and_the_json_keeps_all_of_it() {
        let o = cached(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "a", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
                "labels": {"b": "2", "a": "1"},
                "ownerReferences": [
                    {"apiVersion": "demo.wasmctrl.dev/v1", "kind": "WebApp", "name": "w", "uid": "x", "controller": true},
                    {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "y"}
                ]
            },
            "data": {"k": "v"}
        }));
        assert_eq!(o.name(), "a");
        assert_eq!(o.namespace(), Some("ns"));
        assert_eq!(o.uid(), Some("u-1"));
        assert_eq!(o.resource_version(), Some("7"));
        assert_eq!(o.label("b"), Some("2"));
        assert_eq!(o.label("c"), None);
        assert_eq!(o.labels().collect::<Vec<_>>(), [("a", "1"), ("b", "2")]);
        let owners = o.owner_references();
        assert_eq!(
            (owners[0].group(), owners[0].controller),
            ("demo.wasmctrl.dev", true)
        );
        assert_eq!((owners[1].group(), owners[1].controller), ("", false));
        let back: serde_json::Value = o.parse().unwrap();
        assert_eq!(back["data"]["k"], "v");
        assert_eq!(back["metadata"]["ownerReferences"][1]["name"], "p");
        assert!(!o.json().contains('\n'), "compact JSON");
    }

    #[test]
    fn absent_header_fields_stay_absent_and_present_ones_keep_their_bounds() {
        let o = cached(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}));
        assert_eq!(
            (o.name(), o.namespace(), o.uid(), o.resource_version()),
            ("n", None, None, None)
        );
        let o = cached(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "nd", "uid": "", "resourceVersion": "12"}
        }));
        assert_eq!(
            (o.name(), o.namespace(), o.uid(), o.resource_version()),
            ("nd", None, Some(""), Some("12"))
        );
        assert!(o.json().ends_with('}'), "{}", o.json());
    }

    #[test]
    fn an_object_without_a_name_is_refused() {
        let o = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}});
        assert!(matches!(
            CachedObject::from_json(&o.to_string()),
            Err(CacheObjectError::NoName)
        ));
    }
}
