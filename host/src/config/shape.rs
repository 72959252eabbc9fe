//! Sections of a config read only from mappings. serde's derive also reads
//! a struct from a sequence, field by field in order, so `limits: []`
//! would silently be every default and `limits: [1, 2]` its first two
//! fields. A field whose type is a section is read through one of these,
//! and a sequence there is refused as "invalid type: sequence, expected a
//! mapping", at the field's path.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor, value::MapAccessDeserializer};
use serde::{Deserialize, Deserializer};

/// A section `T`, from a mapping only.
pub(super) fn mapping<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    d.deserialize_map(Mapping(PhantomData))
}

/// An optional section: absent or null is None.
pub(super) fn optional_mapping<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    d.deserialize_option(Optional(Mapping(PhantomData)))
}

/// A list of sections, each from a mapping.
pub(super) fn mappings<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    d.deserialize_seq(Mappings(PhantomData))
}

/// An optional list of sections: absent or null is None.
pub(super) fn optional_mappings<'de, D, T>(d: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    d.deserialize_option(Optional(Mappings(PhantomData)))
}

struct Mapping<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for Mapping<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map))
    }
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for Mapping<T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_map(self)
    }
}

struct Mappings<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for Mappings<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of mappings")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        // No size hint is trusted: the list grows as its items are read.
        let mut out = Vec::new();
        while let Some(item) = seq.next_element_seed(Mapping(PhantomData))? {
            out.push(item);
        }
        Ok(out)
    }
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for Mappings<T> {
    type Value = Vec<T>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<T>, D::Error> {
        d.deserialize_seq(self)
    }
}

/// `inner`, or None for an absent or null value.
struct Optional<S>(S);

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for Optional<S> {
    type Value = Option<S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping, a list of mappings or null")
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(d).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    struct Section {
        a: u32,
        b: u32,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        #[serde(default, deserialize_with = "mapping")]
        one: Section,
        #[serde(default, deserialize_with = "optional_mapping")]
        maybe: Option<Section>,
        #[serde(default, deserialize_with = "mappings")]
        many: Vec<Section>,
        #[serde(default, deserialize_with = "optional_mappings")]
        maybe_many: Option<Vec<Section>>,
    }

    fn read(json: serde_json::Value) -> Result<Outer, String> {
        serde_path_to_error::deserialize(json).map_err(|e| format!("{}: {}", e.path(), e.inner()))
    }

    #[test]
    fn sections_are_read_from_mappings_and_a_sequence_is_refused_at_its_path() {
        let o = read(serde_json::json!({
            "one": {"a": 1},
            "maybe": {"b": 2},
            "many": [{"a": 3}, {}],
            "maybe_many": [{"b": 4}],
        }))
        .unwrap();
        assert_eq!(o.one, Section { a: 1, b: 0 });
        assert_eq!(o.maybe, Some(Section { a: 0, b: 2 }));
        assert_eq!(o.many, vec![Section { a: 3, b: 0 }, Section::default()]);
        assert_eq!(o.maybe_many, Some(vec![Section { a: 0, b: 4 }]));
        let o = read(serde_json::json!({"maybe": null, "maybe_many": null})).unwrap();
        assert_eq!((o.maybe, o.maybe_many), (None, None));
        for (json, expected) in [
            (
                serde_json::json!({"one": []}),
                "one: invalid type: sequence, expected a mapping",
            ),
            (
                serde_json::json!({"one": [1, 2]}),
                "one: invalid type: sequence, expected a mapping",
            ),
            (
                serde_json::json!({"maybe": [1]}),
                "maybe: invalid type: sequence, expected a mapping",
            ),
            (
                serde_json::json!({"many": [[1]]}),
                "many[0]: invalid type: sequence, expected a mapping",
            ),
            (
                serde_json::json!({"maybe_many": {"a": 1}}),
                "maybe_many: invalid type: map, expected a list of mappings",
            ),
            (
                serde_json::json!({"one": {"c": 1}}),
                "one.c: unknown field `c`, expected `a` or `b`",
            ),
        ] {
            assert_eq!(read(json).unwrap_err(), expected);
        }
    }
}
