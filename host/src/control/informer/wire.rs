//! An object as the informer's watcher reads it off the wire: its compact
//! JSON, written in the same pass that parses it, with the few metadata
//! fields the cache keeps picked out on the way.
//!
//! Why not `DynamicObject`: reading a list page into `serde_json::Value`
//! trees allocates every key and value of every object, and the cache then
//! encodes each tree back to JSON and drops it. At a million objects that
//! parse, re-encode and free was most of the host's initial list
//! (docs/BENCHMARKS.md, `scale`). A [`WireObject`] allocates only its JSON
//! and the header's strings, and keeps the members as the server ordered
//! them.
//!
//! The JSON is written through serde's data model, so it is read the same
//! way whether the watcher's JSON parser hands the object over directly (a
//! list's items, a watch event whose `type` comes first) or buffered (a
//! watch event whose `object` comes first).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use kube::api::{ApiResource, ObjectMeta};
use kube::core::{DynamicResourceScope, Resource};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::object::{CacheObjectError, CachedObject, Owner};

/// One object read off the wire. Its metadata holds only the name,
/// namespace, uid, resourceVersion and labels; the rest is in its JSON.
#[derive(Clone, Debug, Default)]
pub struct WireObject {
    meta: ObjectMeta,
    /// The whole object as compact JSON (valid UTF-8).
    json: Vec<u8>,
    /// Where `metadata.managedFields` is in `json`: its member, with the
    /// comma before it unless it is the first member.
    managed_fields: Option<Range<usize>>,
    owners: Vec<Owner>,
}

/// What to remove from an object's JSON to drop the member at `member` (as
/// [`WireObject::managed_fields`] marks it): the member, and the comma that
/// joined it to the next member when it was the first.
fn member_span(json: &[u8], member: Range<usize>) -> Range<usize> {
    if json[member.start] != b',' && json.get(member.end) == Some(&b',') {
        member.start..member.end + 1
    } else {
        member
    }
}

impl CachedObject {
    /// The cached form of an object read off the wire, without
    /// `metadata.managedFields` when `strip_managed_fields`.
    pub(super) fn from_wire(
        wire: WireObject,
        strip_managed_fields: bool,
    ) -> Result<Self, CacheObjectError> {
        let WireObject {
            meta,
            json,
            managed_fields,
            owners,
        } = wire;
        let cut = match managed_fields {
            Some(member) if strip_managed_fields => member_span(&json, member),
            _ => 0..0,
        };
        let json = std::str::from_utf8(&json).map_err(|_| CacheObjectError::NotUtf8)?;
        Self::from_parts([&json[..cut.start], &json[cut.end..]], meta, owners)
    }

    /// The cached form of the object `json` encodes, as it is (its
    /// managedFields kept).
    pub fn from_json(json: &str) -> Result<Self, CacheObjectError> {
        Self::from_wire(serde_json::from_str(json)?, false)
    }
}

impl Resource for WireObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

impl<'de> serde::Deserialize<'de> for WireObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ObjectVisitor)
    }
}

/// The members of an object that are read as well as copied.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    Other,
    Metadata,
    Name,
    Namespace,
    Uid,
    ResourceVersion,
    Labels,
    OwnerReferences,
    ManagedFields,
    ApiVersion,
    Kind,
    Controller,
}

fn any_field(_: &str) -> Field {
    Field::Other
}

fn top_field(key: &str) -> Field {
    match key {
        "metadata" => Field::Metadata,
        _ => Field::Other,
    }
}

fn metadata_field(key: &str) -> Field {
    match key {
        "name" => Field::Name,
        "namespace" => Field::Namespace,
        "uid" => Field::Uid,
        "resourceVersion" => Field::ResourceVersion,
        "labels" => Field::Labels,
        "ownerReferences" => Field::OwnerReferences,
        "managedFields" => Field::ManagedFields,
        _ => Field::Other,
    }
}

fn owner_field(key: &str) -> Field {
    match key {
        "apiVersion" => Field::ApiVersion,
        "kind" => Field::Kind,
        "name" => Field::Name,
        "controller" => Field::Controller,
        _ => Field::Other,
    }
}

/// Writes a scalar as serde_json writes it.
fn scalar<T: serde::Serialize + ?Sized, E: de::Error>(out: &mut Vec<u8>, v: &T) -> Result<(), E> {
    serde_json::to_writer(out, v).map_err(E::custom)
}

/// Copies any JSON value to `out`.
struct Copy<'o>(&'o mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for Copy<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Copy<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.0
            .extend_from_slice(if v { b"true" as &[u8] } else { b"false" });
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        scalar(self.0, &v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        scalar(self.0, &v)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        scalar(self.0, &v)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        scalar(self.0, v)
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.0.extend_from_slice(b"null");
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        self.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let out = self.0;
        out.push(b'[');
        let mut first = true;
        while seq
            .next_element_seed(Element {
                out: &mut *out,
                first,
            })?
            .is_some()
        {
            first = false;
        }
        out.push(b']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let out = self.0;
        out.push(b'{');
        let mut first = true;
        while map
            .next_key_seed(Key {
                out: &mut *out,
                first,
                field: any_field,
            })?
            .is_some()
        {
            first = false;
            map.next_value_seed(Copy(&mut *out))?;
        }
        out.push(b'}');
        Ok(())
    }
}

/// An array's element, after a comma unless it is the first.
struct Element<'o> {
    out: &'o mut Vec<u8>,
    first: bool,
}

impl<'de> DeserializeSeed<'de> for Element<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if !self.first {
            self.out.push(b',');
        }
        Copy(self.out).deserialize(d)
    }
}

/// A member's key and colon, after a comma unless it is the first; says
/// which member it is by `field`.
struct Key<'o> {
    out: &'o mut Vec<u8>,
    first: bool,
    field: fn(&str) -> Field,
}

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = Field;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Field, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = Field;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Field, E> {
        if !self.first {
            self.out.push(b',');
        }
        scalar(self.out, v)?;
        self.out.push(b':');
        Ok((self.field)(v))
    }
}

/// Copies a string (or null) and keeps it.
struct Text<'o>(&'o mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for Text<'_> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Text<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        scalar(self.0, v)?;
        Ok(Some(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        scalar(self.0, &v)?;
        Ok(Some(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.0.extend_from_slice(b"null");
        Ok(None)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.deserialize(d)
    }
}

/// The top level: everything copied, `metadata` read as well.
struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = WireObject;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WireObject, A::Error> {
        let mut wire = WireObject::default();
        wire.json.push(b'{');
        let mut first = true;
        let mut metadata = false;
        while let Some(field) = map.next_key_seed(Key {
            out: &mut wire.json,
            first,
            field: top_field,
        })? {
            first = false;
            if field == Field::Metadata {
                if std::mem::replace(&mut metadata, true) {
                    return Err(de::Error::duplicate_field("metadata"));
                }
                map.next_value_seed(Metadata(&mut wire))?;
            } else {
                map.next_value_seed(Copy(&mut wire.json))?;
            }
        }
        wire.json.push(b'}');
        Ok(wire)
    }
}

/// `metadata`: copied, with the header's fields read.
struct Metadata<'w>(&'w mut WireObject);

impl<'de> DeserializeSeed<'de> for Metadata<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Metadata<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object's metadata")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let wire = self.0;
        wire.json.push(b'{');
        let mut first = true;
        loop {
            let start = wire.json.len();
            let Some(field) = map.next_key_seed(Key {
                out: &mut wire.json,
                first,
                field: metadata_field,
            })?
            else {
                break;
            };
            first = false;
            let meta = &mut wire.meta;
            let out = &mut wire.json;
            match field {
                Field::Name => meta.name = map.next_value_seed(Text(out))?,
                Field::Namespace => meta.namespace = map.next_value_seed(Text(out))?,
                Field::Uid => meta.uid = map.next_value_seed(Text(out))?,
                Field::ResourceVersion => {
                    meta.resource_version = map.next_value_seed(Text(out))?;
                }
                Field::Labels => meta.labels = map.next_value_seed(Labels(out))?,
                Field::OwnerReferences => wire.owners = map.next_value_seed(Owners(out))?,
                Field::ManagedFields => {
                    map.next_value_seed(Copy(out))?;
                    wire.managed_fields = Some(start..out.len());
                }
                _ => map.next_value_seed(Copy(out))?,
            }
        }
        wire.json.push(b'}');
        Ok(())
    }
}

/// `metadata.labels`: a map of strings, or null.
struct Labels<'o>(&'o mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for Labels<'_> {
    type Value = Option<BTreeMap<String, String>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Labels<'_> {
    type Value = Option<BTreeMap<String, String>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of label values")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.0.extend_from_slice(b"null");
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let out = self.0;
        out.push(b'{');
        let mut labels = BTreeMap::new();
        let mut first = true;
        while let Some(key) = map.next_key::<String>()? {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            scalar(out, &key)?;
            out.push(b':');
            let value = map
                .next_value_seed(Text(&mut *out))?
                .ok_or_else(|| de::Error::custom(format!("label {key:?} has no value")))?;
            labels.insert(key, value);
        }
        out.push(b'}');
        Ok(Some(labels))
    }
}

/// `metadata.ownerReferences`: copied, with each owner's apiVersion, kind,
/// name and controller flag read.
struct Owners<'o>(&'o mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for Owners<'_> {
    type Value = Vec<Owner>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Owners<'_> {
    type Value = Vec<Owner>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of owner references")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.0.extend_from_slice(b"null");
        Ok(Vec::new())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let out = self.0;
        out.push(b'[');
        let mut owners = Vec::new();
        while let Some(owner) = seq.next_element_seed(OwnerSeed {
            out: &mut *out,
            first: owners.is_empty(),
        })? {
            owners.push(owner);
        }
        out.push(b']');
        Ok(owners)
    }
}

/// One owner reference, after a comma unless it is the first.
struct OwnerSeed<'o> {
    out: &'o mut Vec<u8>,
    first: bool,
}

impl<'de> DeserializeSeed<'de> for OwnerSeed<'_> {
    type Value = Owner;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Owner, D::Error> {
        if !self.first {
            self.out.push(b',');
        }
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for OwnerSeed<'_> {
    type Value = Owner;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an owner reference")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Owner, A::Error> {
        let out = self.out;
        out.push(b'{');
        let (mut api_version, mut kind, mut name, mut controller) = (None, None, None, false);
        let mut first = true;
        while let Some(field) = map.next_key_seed(Key {
            out: &mut *out,
            first,
            field: owner_field,
        })? {
            first = false;
            match field {
                Field::ApiVersion => api_version = map.next_value_seed(Text(&mut *out))?,
                Field::Kind => kind = map.next_value_seed(Text(&mut *out))?,
                Field::Name => name = map.next_value_seed(Text(&mut *out))?,
                Field::Controller => {
                    let flag: Option<bool> = map.next_value()?;
                    scalar(out, &flag)?;
                    controller = flag == Some(true);
                }
                _ => map.next_value_seed(Copy(&mut *out))?,
            }
        }
        out.push(b'}');
        let required = |v: Option<String>, field| v.ok_or_else(|| de::Error::missing_field(field));
        Ok(Owner {
            api_version: required(api_version, "apiVersion")?.into_boxed_str(),
            kind: required(kind, "kind")?.into_boxed_str(),
            name: required(name, "name")?.into_boxed_str(),
            controller,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::WatchEvent;
    use kube::core::ObjectList;
    use serde_json::{Value, json};

    fn object() -> Value {
        json!({
            "apiVersion": "demo.wasmctrl.dev/v1",
            "kind": "WebApp",
            "metadata": {
                "name": "web",
                "namespace": "team-a",
                "uid": "u-1",
                "resourceVersion": "42",
                "labels": {"app": "web", "tier": "\"front\" \u{e9}"},
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "x", "controller": true},
                    {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "y", "controller": null}
                ],
                "creationTimestamp": null
            },
            "spec": {
                "replicas": 3, "ratio": 0.25, "offset": -7, "big": 18446744073709551615u64,
                "on": true, "off": false, "none": null,
                "list": [[], {}, [1, "two", {"three": 3}]],
                "text": "line\nbreak\ttab \\ slash / \u{1F600}"
            }
        })
    }

    fn wire(text: &str) -> WireObject {
        serde_json::from_str(text).unwrap()
    }

    fn text(w: &WireObject) -> &str {
        std::str::from_utf8(&w.json).unwrap()
    }

    #[test]
    fn the_json_is_the_object_compactly_and_the_header_is_read_on_the_way() {
        let original = object();
        let w = wire(&serde_json::to_string_pretty(&original).unwrap());
        assert_eq!(serde_json::from_str::<Value>(text(&w)).unwrap(), original);
        assert_eq!(text(&w), serde_json::to_string(&original).unwrap());
        assert_eq!(w.meta.name.as_deref(), Some("web"));
        assert_eq!(w.meta.namespace.as_deref(), Some("team-a"));
        assert_eq!(w.meta.uid.as_deref(), Some("u-1"));
        assert_eq!(w.meta.resource_version.as_deref(), Some("42"));
        assert_eq!(w.meta.labels.as_ref().unwrap()["tier"], "\"front\" \u{e9}");
        let owners: Vec<_> = w
            .owners
            .iter()
            .map(|o| (&*o.api_version, &*o.kind, &*o.name, o.controller))
            .collect();
        assert_eq!(
            owners,
            [
                ("v1", "ConfigMap", "c", true),
                ("apps/v1", "Deployment", "d", false)
            ]
        );
    }

    #[test]
    fn managed_fields_are_cut_wherever_they_stand_in_metadata() {
        for (text, cut) in [
            (
                r#"{"metadata":{"managedFields":[{"m":1}],"name":"a","uid":"u"}}"#,
                r#"{"metadata":{"name":"a","uid":"u"}}"#,
            ),
            (
                r#"{"metadata":{"name":"a","managedFields":[{"m":1}],"uid":"u"}}"#,
                r#"{"metadata":{"name":"a","uid":"u"}}"#,
            ),
            (
                r#"{"metadata":{"name":"a","uid":"u","managedFields":[{"m":1}]}}"#,
                r#"{"metadata":{"name":"a","uid":"u"}}"#,
            ),
            (
                r#"{"metadata":{"managedFields":[{"m":1}]},"spec":{"managedFields":2}}"#,
                r#"{"metadata":{},"spec":{"managedFields":2}}"#,
            ),
        ] {
            let mut w = wire(text);
            let member = w.managed_fields.clone().expect("managedFields marked");
            w.json.drain(member_span(&w.json, member));
            assert_eq!(String::from_utf8(w.json).unwrap(), cut);
        }
        let w = wire(r#"{"metadata":{"name":"a"},"spec":{"managedFields":1}}"#);
        assert_eq!(w.managed_fields, None, "only metadata's member is marked");
    }

    #[test]
    fn list_items_and_watch_events_are_read_whichever_member_comes_first() {
        let original = object();
        let list: ObjectList<WireObject> = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "9"},
            "items": [original]
        }))
        .unwrap();
        assert_eq!(text(&list.items[0]), original.to_string());
        // A watch event is read straight off the parser when its type comes
        // first, and buffered when its object does.
        for line in [
            format!(r#"{{"type":"MODIFIED","object":{original}}}"#),
            format!(r#"{{"object":{original},"type":"MODIFIED"}}"#),
        ] {
            let WatchEvent::Modified(w) =
                serde_json::from_str::<WatchEvent<WireObject>>(&line).unwrap()
            else {
                panic!("not a modification: {line}")
            };
            assert_eq!(text(&w), original.to_string(), "{line}");
            assert_eq!(w.meta.resource_version.as_deref(), Some("42"));
            assert_eq!(w.owners.len(), 2);
            assert!(w.managed_fields.is_some());
        }
    }

    #[test]
    fn malformed_metadata_is_refused_with_what_is_wrong() {
        for (text, says) in [
            (
                r#"{"metadata":{"name":"a"},"metadata":{"name":"b"}}"#,
                "duplicate field `metadata`",
            ),
            (r#"{"metadata":null}"#, "an object's metadata"),
            (r#"{"metadata":{"name":7}}"#, "a string"),
            (
                r#"{"metadata":{"labels":{"a":null}}}"#,
                "label \"a\" has no value",
            ),
            (
                r#"{"metadata":{"ownerReferences":[{"apiVersion":"v1","name":"n"}]}}"#,
                "missing field `kind`",
            ),
            (r#"[1]"#, "a Kubernetes object"),
        ] {
            let e = serde_json::from_str::<WireObject>(text)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn nesting_past_the_parsers_limit_is_refused_not_followed() {
        let deep = format!(
            r#"{{"metadata":{{"name":"a"}},"spec":{}1{}}}"#,
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        let e = serde_json::from_str::<WireObject>(&deep)
            .unwrap_err()
            .to_string();
        assert!(e.contains("recursion limit exceeded"), "{e}");
    }
}
