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

use std::fmt;

use serde::Deserialize;
use serde::de::{MapAccess, Visitor};
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
        return match serde_json::from_str::<serde::de::IgnoredAny>(&text) {
            Ok(_) => Ok(text),
            Err(_) => Err(not_an_object()),
        };
    }
    let Ok(top) = serde_json::from_str::<Members<'_>>(&text) else {
        return Err(not_an_object());
    };
    // Each `metadata` member that is an object holding managedFields (a
    // duplicate key is cut alike: whichever one a parser keeps).
    let cut: Vec<Option<Members<'_>>> = top
        .0
        .iter()
        .map(|(k, v)| {
            (k == "metadata")
                .then(|| serde_json::from_str::<Members<'_>>(v.get()).ok())
                .flatten()
                .filter(|m| m.0.iter().any(|(k, _)| k == "managedFields"))
        })
        .collect();
    if cut.iter().all(Option::is_none) {
        return Ok(text);
    }
    let mut out = String::with_capacity(text.len());
    out.push('{');
    for (i, ((k, v), metadata)) in top.0.iter().zip(&cut).enumerate() {
        member(&mut out, i, k);
        match metadata {
            None => out.push_str(v.get()),
            Some(m) => {
                out.push('{');
                let kept = m.0.iter().filter(|(k, _)| k != "managedFields");
                for (i, (k, v)) in kept.enumerate() {
                    member(&mut out, i, k);
                    out.push_str(v.get());
                }
                out.push('}');
            }
        }
    }
    out.push('}');
    Ok(out)
}

/// Writes the `i`th member's separator and key, up to its value.
fn member(out: &mut String, i: usize, key: &str) {
    if i > 0 {
        out.push(',');
    }
    // A string always serialises.
    out.push_str(&serde_json::to_string(key).unwrap_or_default());
    out.push(':');
}

/// A JSON object's members in order, each value as its raw text.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Members<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Members<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((k, v)) = map.next_entry::<String, &'de RawValue>()? {
                    members.push((k, v));
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
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
