//! What a guest sends for a write, checked without building it: an
//! object's text, whose kind and namespace are read as raw slices, and a
//! JSON patch, whose shape is read with every `value` skipped. Both go to
//! the API server as the guest wrote them. A `Value` tree of a body made
//! of millions of tiny values costs about 16 times its text; reading it
//! this way costs a few allocations per top-level member.

use std::fmt;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use wasmctrl_apimachinery::json;

use super::answer::members_of;

/// Why a guest's object is not sent.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum BadBody {
    #[error("object is not a JSON object")]
    NotAnObject,
    #[error("the object names {0} more than once")]
    Twice(&'static str),
    #[error("the object's {0} is not a string")]
    NotAString(&'static str),
    #[error("the object names {0} but not {1}: name both or neither")]
    Half(&'static str, &'static str),
}

/// The members of a guest's object that the host checks before a write.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) api_version: Option<String>,
    pub(crate) kind: Option<String>,
    pub(crate) namespace: Option<String>,
}

/// A guest's object for a write, read without building it: one JSON
/// object whose `apiVersion`, `kind` and `metadata.namespace` are each
/// named at most once, as strings, and `apiVersion` and `kind` both or
/// neither.
pub(crate) fn identity(text: &str) -> Result<Identity, BadBody> {
    let top = members_of(text).ok_or(BadBody::NotAnObject)?;
    let mut id = Identity::default();
    let string = |raw: &RawValue, name: &'static str| -> Result<String, BadBody> {
        serde_json::from_str::<String>(raw.get()).map_err(|_| BadBody::NotAString(name))
    };
    let mut metadata_seen = false;
    for (k, v) in &top {
        match k.0.as_ref() {
            "apiVersion" if id.api_version.is_some() => return Err(BadBody::Twice("apiVersion")),
            "apiVersion" => id.api_version = Some(string(v, "apiVersion")?),
            "kind" if id.kind.is_some() => return Err(BadBody::Twice("kind")),
            "kind" => id.kind = Some(string(v, "kind")?),
            "metadata" if metadata_seen => return Err(BadBody::Twice("metadata")),
            "metadata" => {
                metadata_seen = true;
                for (k, v) in members_of(v.get()).into_iter().flatten() {
                    if k.0 == "namespace" {
                        if id.namespace.is_some() {
                            return Err(BadBody::Twice("metadata.namespace"));
                        }
                        id.namespace = Some(string(v, "metadata.namespace")?);
                    }
                }
            }
            _ => {}
        }
    }
    match (&id.api_version, &id.kind) {
        (Some(_), None) => Err(BadBody::Half("apiVersion", "kind")),
        (None, Some(_)) => Err(BadBody::Half("kind", "apiVersion")),
        _ => Ok(id),
    }
}

/// The text to send for `text`, an object [`identity`] read as `id`: the
/// guest's own, moved, or with `apiVersion` and `kind` put first when it
/// names neither.
pub(crate) fn with_kind(text: String, id: &Identity, api_version: &str, kind: &str) -> String {
    if id.kind.is_some() {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 64);
    out.push_str(r#"{"apiVersion":"#);
    out.push_str(&serde_json::to_string(api_version).unwrap_or_default());
    out.push_str(r#","kind":"#);
    out.push_str(&serde_json::to_string(kind).unwrap_or_default());
    let rest = text.trim_start()[1..].trim_start();
    if !rest.starts_with('}') {
        out.push(',');
    }
    out.push_str(rest);
    out
}

/// Deepest nesting of arrays and objects a body may have: what the API
/// server parses (serde_json's recursion limit). Skipping a value the way
/// the checks here do has no depth limit of its own, so a deeper body
/// would be sent only to be refused there.
pub const MAX_NESTING: usize = 128;

/// Why a body is refused for its nesting.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the body nests arrays and objects more than {MAX_NESTING} levels deep")]
pub(crate) struct TooDeep;

/// Refuses `text` if its arrays and objects nest deeper than
/// [`MAX_NESTING`]. Whether it is JSON at all is the other checks' business.
pub(crate) fn check_nesting(text: &str) -> Result<(), TooDeep> {
    if nests_within(text, MAX_NESTING) {
        Ok(())
    } else {
        Err(TooDeep)
    }
}

/// Whether the arrays and objects of `text` nest at most `max` deep: one
/// pass over the bytes, brackets inside strings not counted.
pub(crate) fn nests_within(text: &str, max: usize) -> bool {
    json::check_shape(text.as_bytes(), max, usize::MAX).is_ok()
}

/// Most operations of one JSON patch: the API server's own bound
/// (kube-apiserver's `maxJSONPatchOperations`).
pub(crate) const MAX_PATCH_OPERATIONS: usize = 10_000;

/// Why a JSON patch is not sent.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum BadPatch {
    #[error("patch is not valid JSON: {0}")]
    NotJson(String),
    #[error("not a JSON patch: {0}")]
    NotAPatch(String),
}

/// Checks that `text` is an RFC 6902 JSON patch — an array of at most
/// [`MAX_PATCH_OPERATIONS`] operations, each an object with a known `op`,
/// a string `path`, a string `from` for `move` and `copy` and a `value`
/// for `add`, `replace` and `test` — without building any `value`.
pub(crate) fn json_patch_shape(text: &str) -> Result<(), BadPatch> {
    let mut d = serde_json::Deserializer::from_str(text);
    let shaped = Operations.deserialize(&mut d).and_then(|()| d.end());
    shaped.map_err(|e| {
        let message = e.to_string();
        if e.is_syntax() || e.is_eof() {
            BadPatch::NotJson(message)
        } else {
            BadPatch::NotAPatch(message)
        }
    })
}

struct Operations;

impl<'de> DeserializeSeed<'de> for Operations {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Operations {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of JSON patch operations")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut n = 0;
        while seq.next_element::<Operation>()?.is_some() {
            n += 1;
            if n > MAX_PATCH_OPERATIONS {
                return Err(serde::de::Error::custom(format!(
                    "more than {MAX_PATCH_OPERATIONS} operations"
                )));
            }
        }
        Ok(())
    }
}

/// One operation's shape; its `value` is skipped, never built.
struct Operation;

impl<'de> Deserialize<'de> for Operation {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(Operation)
    }
}

impl<'de> Visitor<'de> for Operation {
    type Value = Operation;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON patch operation (an object with op and path)")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Operation, A::Error> {
        use serde::de::Error;
        let (mut op, mut path, mut from, mut value) = (None::<String>, false, false, false);
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "op" if op.is_some() => return Err(A::Error::duplicate_field("op")),
                "op" => op = Some(map.next_value()?),
                "path" if path => return Err(A::Error::duplicate_field("path")),
                "path" => {
                    map.next_value::<std::borrow::Cow<'de, str>>()?;
                    path = true;
                }
                "from" if from => return Err(A::Error::duplicate_field("from")),
                "from" => {
                    map.next_value::<std::borrow::Cow<'de, str>>()?;
                    from = true;
                }
                "value" if value => return Err(A::Error::duplicate_field("value")),
                "value" => {
                    map.next_value::<IgnoredAny>()?;
                    value = true;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let op = op.ok_or_else(|| A::Error::missing_field("op"))?;
        if !path {
            return Err(A::Error::missing_field("path"));
        }
        match op.as_str() {
            "remove" => {}
            "add" | "replace" | "test" if !value => return Err(A::Error::missing_field("value")),
            "move" | "copy" if !from => return Err(A::Error::missing_field("from")),
            "add" | "replace" | "test" | "move" | "copy" => {}
            other => {
                return Err(A::Error::unknown_variant(
                    other,
                    &["add", "remove", "replace", "move", "copy", "test"],
                ));
            }
        }
        Ok(Operation)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn write_body(
        text: &str,
        api_version: &str,
        kind: &str,
    ) -> Result<(Identity, String), BadBody> {
        let id = identity(text)?;
        let body = with_kind(text.to_owned(), &id, api_version, kind);
        Ok((id, body))
    }

    #[test]
    fn a_write_body_is_the_guest_s_text_with_the_kind_put_in_when_it_names_none() {
        let text = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"},"data":{"k":"v"}}"#;
        let (id, body) = write_body(text, "v1", "ConfigMap").unwrap();
        assert_eq!(body, text);
        assert_eq!(id.namespace.as_deref(), Some("ns"));
        let (id, body) =
            write_body(r#" { "metadata" : {"name":"a"} } "#, "v1", "ConfigMap").unwrap();
        assert_eq!(id, Identity::default());
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})
        );
        let (_, body) = write_body("{}", "v1", "ConfigMap").unwrap();
        assert_eq!(body, r#"{"apiVersion":"v1","kind":"ConfigMap"}"#);
    }

    #[test]
    fn a_write_body_names_its_kind_and_namespace_once_as_strings() {
        for (text, refused) in [
            (
                r#"{"kind":"A","kind":"B","apiVersion":"v1"}"#,
                BadBody::Twice("kind"),
            ),
            (
                r#"{"metadata":{"namespace":"a","namespace":"b"}}"#,
                BadBody::Twice("metadata.namespace"),
            ),
            (
                r#"{"metadata":{},"metadata":{"namespace":"b"}}"#,
                BadBody::Twice("metadata"),
            ),
            (
                r#"{"kind":1,"apiVersion":"v1"}"#,
                BadBody::NotAString("kind"),
            ),
            (
                r#"{"kind":"ConfigMap"}"#,
                BadBody::Half("kind", "apiVersion"),
            ),
            (r#"[1]"#, BadBody::NotAnObject),
            (r#"{"a":1} x"#, BadBody::NotAnObject),
        ] {
            assert_eq!(
                write_body(text, "v1", "ConfigMap").unwrap_err(),
                refused,
                "{text}"
            );
        }
    }

    #[test]
    fn a_write_body_of_a_million_tiny_values_is_read_without_a_tree() {
        // 2 MiB of `0,` is a million values: as a tree, ~16 times the text.
        let text = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","data":[{}0]}}"#,
            "0,".repeat(1 << 20)
        );
        let (_, body) = write_body(&text, "v1", "ConfigMap").unwrap();
        assert_eq!(body.len(), text.len());
    }

    #[test]
    fn nesting_past_the_bound_is_refused_and_brackets_in_strings_do_not_count() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        check_nesting(&nested(MAX_NESTING)).unwrap();
        assert_eq!(check_nesting(&nested(MAX_NESTING + 1)), Err(TooDeep));
        let objects = format!(
            "{}1{}",
            r#"{"a":"#.repeat(MAX_NESTING + 1),
            "}".repeat(MAX_NESTING + 1)
        );
        assert_eq!(check_nesting(&objects), Err(TooDeep));
        let quoted = format!(r#"{{"a":"{}\"{}"}}"#, "[".repeat(1000), "{".repeat(1000));
        check_nesting(&quoted).unwrap();
        check_nesting(&format!("[{}]", nested(10).repeat(1000))).unwrap();
    }

    #[test]
    fn a_json_patch_is_read_for_its_shape_only() {
        json_patch_shape(r#"[{"op":"add","path":"/a","value":{"b":[1,2]}},{"op":"remove","path":"/c"},{"op":"copy","from":"/a","path":"/d"}]"#).unwrap();
        json_patch_shape("[]").unwrap();
        for (text, refused) in [
            (r#"[{"op":"add""#, "patch is not valid JSON"),
            (r#"[] x"#, "patch is not valid JSON"),
            (r#"{"op":"add"}"#, "not a JSON patch"),
            (r#"[{"op":"jump","path":"/a"}]"#, "not a JSON patch"),
            (r#"[{"op":"add","path":"/a"}]"#, "not a JSON patch"),
            (r#"[{"op":"move","path":"/a"}]"#, "not a JSON patch"),
            (r#"[{"path":"/a"}]"#, "not a JSON patch"),
            (r#"[{"op":"remove","path":1}]"#, "not a JSON patch"),
            (
                r#"[{"op":"remove","op":"add","path":"/a","value":1}]"#,
                "not a JSON patch",
            ),
        ] {
            let e = json_patch_shape(text).unwrap_err().to_string();
            assert!(e.starts_with(refused), "{text}: {e}");
        }
        let many = format!(
            "[{}]",
            vec![r#"{"op":"remove","path":"/a"}"#; MAX_PATCH_OPERATIONS + 1].join(",")
        );
        let e = json_patch_shape(&many).unwrap_err().to_string();
        assert!(e.contains("more than 10000 operations"), "{e}");
    }

    #[test]
    fn a_json_patch_of_a_million_tiny_values_is_read_without_a_tree() {
        let text = format!(
            r#"[{{"op":"add","path":"/a","value":[{}0]}}]"#,
            "0,".repeat(1 << 20)
        );
        json_patch_shape(&text).unwrap();
    }
}
