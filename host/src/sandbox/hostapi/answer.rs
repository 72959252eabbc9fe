//! An API server's single-object answer as the guest receives it: the
//! server's own JSON text, checked to be one JSON object without building
//! it, and — when the host drops managedFields (`cache.stripManagedFields`)
//! — without `metadata.managedFields`, so that no object a guest reads,
//! from the cache or from the server, carries them.
//!
//! Dropping them splices the text: the top-level members and those of
//! `metadata` are read as raw JSON slices (one pass, no tree), and every
//! member but `managedFields` is written back as the server wrote it, in
//! its order.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// Why an answer is not handed to the guest.
#[derive(Debug, thiserror::Error)]
#[error("the API server answered with something other than a JSON object ({bytes} bytes)")]
pub(crate) struct NotAnObject {
    bytes: usize,
}

/// `text` for the guest: one JSON object (else [`NotAnObject`]), without
/// `metadata.managedFields` when `strip` is set.
pub(crate) fn object_answer(text: String, strip: bool) -> Result<String, NotAnObject> {
    let not_an_object = || NotAnObject { bytes: text.len() };
    if !text.trim_start().starts_with('{') {
        return Err(not_an_object());
    }
    if !strip {
        return match serde_json::from_str::<IgnoredAny>(&text) {
            Ok(_) => Ok(text),
            Err(_) => Err(not_an_object()),
        };
    }
    // One pass reads the top-level members as raw text and `metadata`'s
    // members too, so the bulk of an answer (managedFields) is scanned once.
    let Ok(Top(top)) = serde_json::from_str::<Top<'_>>(&text) else {
        return Err(not_an_object());
    };
    let holds_managed_fields = |m: &Members<'_>| m.iter().any(|(k, _)| k.0 == "managedFields");
    let mut cut = false;
    let mut unread = false;
    for (_, value) in &top {
        match value {
            TopValue::Metadata(Some(m)) => cut |= holds_managed_fields(m),
            TopValue::Metadata(None) => unread = true,
            TopValue::Raw(_) => {}
        }
    }
    if !cut {
        return Ok(text);
    }
    if unread {
        // `metadata` named twice, once not as an object: read again keeping
        // each member's text (rare enough not to matter).
        return Ok(cut_slowly(&text).unwrap_or(text));
    }
    let pieces = top.iter().map(|(k, v)| {
        let piece = match v {
            TopValue::Raw(raw) => Piece::Raw(raw.get()),
            TopValue::Metadata(m) => Piece::Cut(m.as_deref().unwrap_or_default()),
        };
        (k, piece)
    });
    Ok(splice(text.len(), pieces))
}

/// [`object_answer`]'s cut of an object whose top-level members are each
/// kept as text; `None` if `text` is not an object.
fn cut_slowly(text: &str) -> Option<String> {
    let top = members_of(text)?;
    let metadata: Vec<Option<Members<'_>>> = top
        .iter()
        .map(|(k, v)| (k.0 == "metadata").then(|| members_of(v.get())).flatten())
        .collect();
    let pieces = top.iter().zip(&metadata).map(|((k, v), m)| {
        let piece = match m {
            Some(m) => Piece::Cut(m),
            None => Piece::Raw(v.get()),
        };
        (k, piece)
    });
    Some(splice(text.len(), pieces))
}

/// A top-level member's value as the output is made of it.
enum Piece<'t> {
    /// Written as the server wrote it.
    Raw(&'t str),
    /// An object written member by member, less `managedFields`.
    Cut(&'t [(Key<'t>, &'t RawValue)]),
}

/// An object of `pieces`, in their order.
fn splice<'t>(capacity: usize, pieces: impl Iterator<Item = (&'t Key<'t>, Piece<'t>)>) -> String {
    let mut out = String::with_capacity(capacity);
    out.push('{');
    for (i, (k, piece)) in pieces.enumerate() {
        member(&mut out, i, k);
        match piece {
            Piece::Raw(raw) => out.push_str(raw),
            Piece::Cut(members) => {
                out.push('{');
                let kept = members.iter().filter(|(k, _)| k.0 != "managedFields");
                for (i, (k, v)) in kept.enumerate() {
                    member(&mut out, i, k);
                    out.push_str(v.get());
                }
                out.push('}');
            }
        }
    }
    out.push('}');
    out
}

/// Writes the `i`th member's separator and key, up to its value.
fn member(out: &mut String, i: usize, key: &Key<'_>) {
    if i > 0 {
        out.push(',');
    }
    match &key.0 {
        // Borrowed means the server wrote it without escapes: as it was.
        Cow::Borrowed(k) => {
            out.push('"');
            out.push_str(k);
            out.push('"');
        }
        // A string always serialises.
        Cow::Owned(k) => out.push_str(&serde_json::to_string(k).unwrap_or_default()),
    }
    out.push(':');
}

/// A member's key: borrowed from the text unless it holds escapes.
pub(super) struct Key<'t>(pub(super) Cow<'t, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// A JSON object's members in order, each value as its raw text.
pub(super) type Members<'t> = Vec<(Key<'t>, &'t RawValue)>;

/// Reads an object's members, with `value` reading each member's value.
fn read_members<'de, A: MapAccess<'de>, T>(
    mut map: A,
    mut value: impl FnMut(&Key<'de>, &mut A) -> Result<T, A::Error>,
) -> Result<Vec<(Key<'de>, T)>, A::Error> {
    let mut members = Vec::with_capacity(map.size_hint().unwrap_or(16));
    while let Some(k) = map.next_key::<Key<'de>>()? {
        let v = value(&k, &mut map)?;
        members.push((k, v));
    }
    Ok(members)
}

/// The top-level object: `metadata`'s members read in the same pass.
struct Top<'t>(Vec<(Key<'t>, TopValue<'t>)>);

enum TopValue<'t> {
    Raw(&'t RawValue),
    /// `metadata`'s members; `None` when it is not an object.
    Metadata(Option<Members<'t>>),
}

impl<'de> Deserialize<'de> for Top<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Top<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                read_members(map, |k, map| {
                    if k.0 == "metadata" {
                        map.next_value_seed(MembersIfObject).map(TopValue::Metadata)
                    } else {
                        map.next_value().map(TopValue::Raw)
                    }
                })
                .map(Top)
            }
        }
        d.deserialize_map(V)
    }
}

/// The members of `text` if it is one JSON object; `None` if it is any
/// other JSON value or not JSON.
pub(super) fn members_of(text: &str) -> Option<Members<'_>> {
    let mut d = serde_json::Deserializer::from_str(text);
    let members = MembersIfObject.deserialize(&mut d).ok()?;
    d.end().ok()?;
    members
}

/// Reads a value's members if it is an object, else nothing (the value is
/// still read, to check it): `metadata` in [`Top`]'s pass, and every
/// object [`cut_slowly`] reads.
struct MembersIfObject;

impl<'de> DeserializeSeed<'de> for MembersIfObject {
    type Value = Option<Members<'de>>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MembersIfObject {
    type Value = Option<Members<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        read_members(map, |_, map| map.next_value()).map(Some)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn managed_fields_are_cut_and_everything_else_is_the_servers_text() {
        let text = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","managedFields":[{"manager":"m","fieldsV1":{"f:data":{}}}],"labels":{"x":"1"}},"data":{"k":"v \u00e9"}}"#;
        assert_eq!(
            object_answer(text.into(), true).unwrap(),
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","labels":{"x":"1"}},"data":{"k":"v \u00e9"}}"#
        );
        assert_eq!(object_answer(text.into(), false).unwrap(), text);
        // Nothing to cut: the text itself.
        let plain = r#" {"metadata": {"name": "a"}, "spec": 1}"#;
        assert_eq!(object_answer(plain.into(), true).unwrap(), plain);
        let no_metadata = r#"{"kind":"Status","metadata":[1]}"#;
        assert_eq!(
            object_answer(no_metadata.into(), true).unwrap(),
            no_metadata
        );
    }

    #[test]
    fn metadata_named_twice_or_with_escapes_is_cut_as_a_parser_reads_it() {
        // Escaped keys are compared unescaped, and written back escaped.
        let escaped = r#"{"metad\u0061ta":{"managed\u0046ields":[1],"n\"a":"\u00e9"},"k":1}"#;
        let answer = object_answer(escaped.into(), true).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&answer).unwrap(),
            json!({"metadata": {"n\"a": "é"}, "k": 1})
        );
        // Twice, once not an object: whichever one a parser keeps is cut.
        for text in [
            r#"{"metadata":[{"managedFields":1}],"metadata":{"managedFields":[2],"name":"a"}}"#,
            r#"{"metadata":{"managedFields":[2],"name":"a"},"x":{},"metadata":null}"#,
        ] {
            let answer = object_answer(text.into(), true).unwrap();
            assert!(!answer.contains("[2]"), "{text} -> {answer}");
            assert!(answer.contains(r#"{"name":"a"}"#), "{text} -> {answer}");
            serde_json::from_str::<Value>(&answer).unwrap();
        }
        // Once, not an object: nothing to cut.
        let text = r#"{"metadata":"managedFields"}"#;
        assert_eq!(object_answer(text.into(), true).unwrap(), text);
    }

    #[test]
    fn anything_but_one_json_object_is_refused_either_way() {
        for strip in [false, true] {
            for bad in [
                "[1,2]",
                "\"text\"",
                "{\"a\":",
                "{} trailing",
                "",
                "{\"a\":1,}",
            ] {
                let e = object_answer(bad.into(), strip).unwrap_err();
                assert!(
                    e.to_string().contains("other than a JSON object"),
                    "{bad:?}: {e}"
                );
            }
        }
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-z\"\\\\é\u{1}]{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("managedFields".to_string()),
                        Just("metadata".to_string()),
                        "[a-z\"é]{1,6}"
                    ],
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// The answer is the object with metadata.managedFields removed
        /// (and nothing else), whatever the object holds.
        #[test]
        fn the_answer_is_the_object_less_its_managed_fields(
            metadata in value(),
            rest in prop::collection::btree_map("[a-z\"é]{1,6}", value(), 0..4),
            managed in value(),
        ) {
            let mut object = serde_json::Map::new();
            object.extend(rest);
            let mut metadata = metadata;
            if let Value::Object(m) = &mut metadata {
                m.insert("managedFields".into(), managed);
            }
            object.insert("metadata".into(), metadata);
            let object = Value::Object(object);
            let answer = object_answer(object.to_string(), true).unwrap();
            let mut expected = object.clone();
            if let Some(m) = expected["metadata"].as_object_mut() {
                m.remove("managedFields");
            }
            prop_assert_eq!(serde_json::from_str::<Value>(&answer).unwrap(), expected);
            prop_assert_eq!(object_answer(object.to_string(), false).unwrap(), object.to_string());
        }
    }

    #[test]
    fn a_pretty_printed_answer_is_cut_too() {
        let object = json!({"metadata": {"name": "a", "managedFields": [{"manager": "m"}]}, "spec": {"x": [1, 2]}});
        let answer = object_answer(serde_json::to_string_pretty(&object).unwrap(), true).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&answer).unwrap(),
            json!({"metadata": {"name": "a"}, "spec": {"x": [1, 2]}})
        );
    }
}
