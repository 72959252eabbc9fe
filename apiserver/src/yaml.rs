//! Bounded YAML decoding for request bodies (`application/yaml` creates and
//! updates, `application/apply-patch+yaml`).
//!
//! YAML aliases let a few bytes stand for an arbitrarily large document
//! ("billion laughs"); serde_norway bounds how often aliases are followed,
//! not what they expand to. Here every decoded value and every string byte
//! is counted, and decoding stops once the document outgrows its own text:
//! an alias-free document never does, so aliases can never make a body cost
//! more memory than sending the expanded document would. (kubectl, kube-rs
//! and client-go send JSON, a YAML subset without aliases.)

use std::cell::Cell;

use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::metrics::Limit;

/// Slack for tiny documents (an empty body decodes to `null`).
const SLACK: usize = 64;

/// What one document may expand to: values and string bytes, each at most
/// the length of its text.
struct Budget {
    values: Cell<usize>,
    bytes: Cell<usize>,
    /// Set once either ran out, so the refusal is told apart from other
    /// errors without reading messages (which may quote the client's keys).
    exhausted: Cell<bool>,
}

impl Budget {
    fn value<E: serde::de::Error>(&self) -> Result<(), E> {
        self.take(&self.values, 1)
    }

    fn string<E: serde::de::Error>(&self, s: &str) -> Result<(), E> {
        self.take(&self.bytes, s.len())
    }

    fn take<E: serde::de::Error>(&self, cell: &Cell<usize>, n: usize) -> Result<(), E> {
        match cell.get().checked_sub(n) {
            Some(left) => {
                cell.set(left);
                Ok(())
            }
            None => {
                self.exhausted.set(true);
                Err(E::custom(
                    "the document expands (through aliases) to more than its own size",
                ))
            }
        }
    }
}

/// A document that could not be decoded, and the limit it ran into if
/// that is why.
#[derive(Debug)]
pub(crate) struct YamlError {
    pub(crate) error: serde_norway::Error,
    pub(crate) limit: Option<Limit>,
}

impl std::fmt::Display for YamlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

/// Decodes one YAML document into JSON values, refusing documents whose
/// aliases expand them beyond the size of their text.
pub(crate) fn from_slice(bytes: &[u8]) -> Result<Value, YamlError> {
    let budget = Budget {
        values: Cell::new(bytes.len() + SLACK),
        bytes: Cell::new(bytes.len() + SLACK),
        exhausted: Cell::new(false),
    };
    Seed(&budget)
        .deserialize(serde_norway::Deserializer::from_slice(bytes))
        .map_err(|error| {
            // serde_norway's own two limits have no error kind to match,
            // only these messages; they start the text, never after a
            // client-chosen path.
            let text = error.to_string();
            let limit = if budget.exhausted.get() || text.starts_with("repetition limit exceeded") {
                Some(Limit::YamlExpansion)
            } else if text.starts_with("recursion limit exceeded") {
                Some(Limit::YamlDepth)
            } else {
                None
            };
            YamlError { error, limit }
        })
}

/// Deserializes one value, charging it to the budget.
#[derive(Clone, Copy)]
struct Seed<'b>(&'b Budget);

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON-compatible YAML value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.0.value()?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.0.value()?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.0.value()?;
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        self.0.value()?;
        // JSON has no NaN or infinity; serde_json maps them to null too.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.0.value()?;
        self.0.string(v)?;
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        self.0.value()?;
        self.0.string(&v)?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.0.value()?;
        Ok(Value::Null)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.0.value()?;
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.0.value()?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.0.string(&key)?;
            let value = map.next_value_seed(self)?;
            if out.insert(key, value).is_some() {
                return Err(A::Error::custom("duplicate mapping key"));
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decodes_plain_documents() {
        let v = from_slice(b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: '1'\n  b: [1, 2.5, true, null, ~]\n").unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
                   "data": {"a": "1", "b": [1, 2.5, true, null, null]}})
        );
        assert_eq!(from_slice(b"").unwrap(), Value::Null);
        assert_eq!(from_slice(br#"{"a": [1]}"#).unwrap(), json!({"a": [1]}));
        // Small anchors that do not outgrow the text are fine.
        assert_eq!(
            from_slice(b"a: &x [1]\nb: *x\n").unwrap(),
            json!({"a": [1], "b": [1]})
        );
    }

    #[test]
    fn refuses_documents_that_aliases_expand() {
        let mut doc = String::from("a: &a [\"");
        doc.push_str(&"x".repeat(1000));
        doc.push_str("\"]\nb: [");
        doc.push_str(&vec!["*a"; 200].join(","));
        doc.push_str("]\n");
        let e = from_slice(doc.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("expands"), "{e}");
        assert_eq!(e.limit, Some(Limit::YamlExpansion));
        // The classic: ten levels of ten aliases each.
        let mut laughs = String::from("l0: &l0 [lol,lol,lol,lol,lol,lol,lol,lol,lol,lol]\n");
        for i in 1..10 {
            let refs = vec![format!("*l{}", i - 1); 10].join(",");
            laughs.push_str(&format!("l{i}: &l{i} [{refs}]\n"));
        }
        let e = from_slice(laughs.as_bytes()).unwrap_err();
        assert_eq!(e.limit, Some(Limit::YamlExpansion), "{e}");
    }

    #[test]
    fn refuses_deep_nesting_as_the_depth_limit() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let e = from_slice(deep.as_bytes()).unwrap_err();
        assert_eq!(e.limit, Some(Limit::YamlDepth), "{e}");
        let fine = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(from_slice(fine.as_bytes()).is_ok());
        // A client's key quoting the message is not the limit.
        let e =
            from_slice(b"recursion limit exceeded: 1\nrecursion limit exceeded: 2\n").unwrap_err();
        assert_eq!(e.limit, None, "{e}");
    }

    #[test]
    fn refuses_duplicate_keys_and_bad_keys() {
        for doc in [&b"a: 1\na: 2\n"[..], b"? [1]\n: x\n"] {
            let e = from_slice(doc).unwrap_err();
            assert_eq!(e.limit, None, "{e}");
        }
    }
}
