//! An enveloped protobuf body decoded to its JSON form, message by message
//! through the tables.

use base64::Engine;
use serde_json::{Map, Value, json};

use super::schema::Kind::*;
use super::schema::{Schema, schema_for};
use super::wire::{ProtobufError, Reader, string};

/// A map entry message: key = 1, value = 2 (a string, bytes, or a
/// Quantity message wrapping its string at 1).
fn map_entry(
    b: &[u8],
    bytes_value: bool,
    quantity: bool,
) -> Result<(String, Value), ProtobufError> {
    let mut r = Reader { buf: b };
    let (mut k, mut v) = (String::new(), json!(""));
    while let Some((field, wire)) = r.key()? {
        match (field, wire) {
            (1, 2) => k = string(r.bytes()?)?,
            (2, 2) if quantity => {
                let mut q = Reader { buf: r.bytes()? };
                while let Some((f, w)) = q.key()? {
                    match (f, w) {
                        (1, 2) => v = json!(string(q.bytes()?)?),
                        (_, w) => q.skip(w)?,
                    }
                }
            }
            (2, 2) if bytes_value => {
                v = json!(base64::engine::general_purpose::STANDARD.encode(r.bytes()?))
            }
            (2, 2) => v = json!(string(r.bytes()?)?),
            (_, w) => r.skip(w)?,
        }
    }
    Ok((k, v))
}

/// A `map<string, ExtraValue>` entry: key = 1, value = 2 (repeated
/// strings at 1).
fn string_list_entry(b: &[u8]) -> Result<(String, Value), ProtobufError> {
    let mut r = Reader { buf: b };
    let (mut k, mut items) = (String::new(), Vec::new());
    while let Some((field, wire)) = r.key()? {
        match (field, wire) {
            (1, 2) => k = string(r.bytes()?)?,
            (2, 2) => {
                let mut v = Reader { buf: r.bytes()? };
                while let Some((f, w)) = v.key()? {
                    match (f, w) {
                        (1, 2) => items.push(json!(string(v.bytes()?)?)),
                        (_, w) => v.skip(w)?,
                    }
                }
            }
            (_, w) => r.skip(w)?,
        }
    }
    Ok((k, Value::Array(items)))
}

fn int_or_string(b: &[u8]) -> Result<Value, ProtobufError> {
    let mut r = Reader { buf: b };
    let (mut is_str, mut i, mut st) = (false, 0i64, String::new());
    while let Some((field, wire)) = r.key()? {
        match (field, wire) {
            (1, 0) => is_str = r.varint()? == 1,
            (2, 0) => i = r.varint()? as i64,
            (3, 2) => st = string(r.bytes()?)?,
            (_, w) => r.skip(w)?,
        }
    }
    Ok(if is_str { json!(st) } else { json!(i) })
}

/// A `metav1.Time`; the zero time (always sent for non-pointer fields such
/// as `creationTimestamp`) is JSON null, so it is dropped.
fn time(b: &[u8]) -> Result<Option<Value>, ProtobufError> {
    let mut r = Reader { buf: b };
    let mut secs = 0i64;
    while let Some((field, wire)) = r.key()? {
        match (field, wire) {
            (1, 0) => secs = r.varint()? as i64,
            (_, w) => r.skip(w)?,
        }
    }
    Ok((secs != 0).then(|| json!(crate::values::format_unix(secs))))
}

fn message(schema: &'static Schema, b: &[u8]) -> Result<Value, ProtobufError> {
    let mut r = Reader { buf: b };
    let mut out = Map::new();
    while let Some((field, wire)) = r.key()? {
        let Some((_, name, kind)) = schema.fields.iter().find(|(n, ..)| *n == field) else {
            // Unmodelled fields are accepted only at their zero value (which
            // gogo-protobuf sends for every non-pointer field); anything
            // else would be silently lost.
            let zero = match wire {
                0 => r.varint()? == 0,
                2 => r.bytes()?.is_empty(),
                _ => false,
            };
            if zero {
                continue;
            }
            return Err(ProtobufError::UnknownField {
                message: schema.name,
                field,
            });
        };
        let name = (*name).to_string();
        match (*kind, wire) {
            (Str, 2) => {
                let v = string(r.bytes()?)?;
                if !v.is_empty() {
                    out.insert(name, json!(v));
                }
            }
            (Int, 0) => {
                let v = r.varint()? as i64;
                if v != 0 {
                    out.insert(name, json!(v));
                }
            }
            (Bool, 0) => {
                if r.varint()? != 0 {
                    out.insert(name, json!(true));
                }
            }
            (OptInt, 0) => {
                out.insert(name, json!(r.varint()? as i64));
            }
            (OptBool, 0) => {
                out.insert(name, json!(r.varint()? != 0));
            }
            (Time, 2) => {
                if let Some(t) = time(r.bytes()?)? {
                    out.insert(name, t);
                }
            }
            (Msg(s), 2) => {
                out.insert(name, message(s, r.bytes()?)?);
            }
            (MapStr | MapBytes, 2) => {
                let (k, v) = map_entry(r.bytes()?, matches!(kind, MapBytes), false)?;
                out.entry(name)
                    .or_insert_with(|| Value::Object(Map::new()))
                    .as_object_mut()
                    .ok_or(ProtobufError::Malformed)?
                    .insert(k, v);
            }
            (MapQuantity, 2) => {
                let (k, q) = map_entry(r.bytes()?, false, true)?;
                out.entry(name)
                    .or_insert_with(|| Value::Object(Map::new()))
                    .as_object_mut()
                    .ok_or(ProtobufError::Malformed)?
                    .insert(k, q);
            }
            (MapStrList, 2) => {
                let (k, list) = string_list_entry(r.bytes()?)?;
                out.entry(name)
                    .or_insert_with(|| Value::Object(Map::new()))
                    .as_object_mut()
                    .ok_or(ProtobufError::Malformed)?
                    .insert(k, list);
            }
            (IntOrStr, 2) => {
                out.insert(name, int_or_string(r.bytes()?)?);
            }
            (RepStr, 2) => {
                let s = string(r.bytes()?)?;
                push(&mut out, name, json!(s))?;
            }
            (RepMsg(s), 2) => {
                let v = message(s, r.bytes()?)?;
                push(&mut out, name, v)?;
            }
            _ => return Err(ProtobufError::Malformed),
        }
    }
    Ok(Value::Object(out))
}

fn push(out: &mut Map<String, Value>, name: String, v: Value) -> Result<(), ProtobufError> {
    out.entry(name)
        .or_insert_with(|| Value::Array(Vec::new()))
        .as_array_mut()
        .ok_or(ProtobufError::Malformed)?
        .push(v);
    Ok(())
}

/// Decodes an enveloped protobuf object into its JSON form.
pub(crate) fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let rest = body
        .strip_prefix(b"k8s\0")
        .ok_or(ProtobufError::NoEnvelope)?;
    let mut r = Reader { buf: rest };
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    while let Some((field, wire)) = r.key()? {
        match (field, wire) {
            (1, 2) => {
                let mut tm = Reader { buf: r.bytes()? };
                while let Some((f, w)) = tm.key()? {
                    match (f, w) {
                        (1, 2) => api_version = string(tm.bytes()?)?,
                        (2, 2) => kind = string(tm.bytes()?)?,
                        (_, w) => tm.skip(w)?,
                    }
                }
            }
            (2, 2) => raw = r.bytes()?,
            (_, w) => r.skip(w)?,
        }
    }
    let schema = schema_for(&api_version, &kind)
        .ok_or_else(|| ProtobufError::UnsupportedKind(format!("{api_version} {kind}")))?;
    let mut obj = message(schema, raw)?;
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(n: u64, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![((n << 3) | 2) as u8, payload.len() as u8];
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn decodes_a_configmap_like_kubectl_sends() {
        let meta = [field(1, b"c1"), field(3, b"default")].concat();
        let entry = [field(1, b"a"), field(2, b"b")].concat();
        let raw = [field(1, &meta), field(2, &entry)].concat();
        let tm = [field(1, b"v1"), field(2, b"ConfigMap")].concat();
        let body = [b"k8s\0".to_vec(), field(1, &tm), field(2, &raw)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c1", "namespace": "default"}, "data": {"a": "b"}})
        );
    }

    #[test]
    fn rejects_unknown_kinds_and_garbage() {
        let tm = [field(1, b"policy/v1"), field(2, b"PodDisruptionBudget")].concat();
        let body = [b"k8s\0".to_vec(), field(1, &tm)].concat();
        assert!(matches!(
            decode(&body),
            Err(ProtobufError::UnsupportedKind(_))
        ));
        assert_eq!(decode(b"{}"), Err(ProtobufError::NoEnvelope));
        assert_eq!(decode(b"k8s\0\x0a\x05ab"), Err(ProtobufError::Malformed));
    }
}
