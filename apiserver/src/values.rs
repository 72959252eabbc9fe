//! Values the server computes and reads: Kubernetes timestamps, random
//! names and tokens, Go-style quoting, JSON sizes and metadata/path access.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};
use wasmctrl_apimachinery::time;

/// Seconds-precision RFC 3339 UTC timestamp (`metav1.Time`), e.g.
/// `2025-01-02T03:04:05Z`.
pub(crate) fn now_rfc3339() -> String {
    time::format_seconds(SystemTime::now())
}

/// RFC 3339 UTC timestamp of a Unix time in seconds.
pub(crate) fn format_unix(secs: i64) -> String {
    let since_epoch = Duration::from_secs(secs.unsigned_abs());
    time::format_seconds(if secs < 0 {
        UNIX_EPOCH.checked_sub(since_epoch).unwrap_or(UNIX_EPOCH)
    } else {
        UNIX_EPOCH.checked_add(since_epoch).unwrap_or(UNIX_EPOCH)
    })
}

/// `value` quoted as Go's `%q` quotes it (the real server's messages use
/// it): control characters never reach a client's terminal raw.
pub(crate) fn go_quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => push_escaped(&mut out, c),
        }
    }
    out.push('"');
    out
}

/// `text` another party wrote, shown unquoted (a webhook's denial) but with
/// its control characters other than newline and tab escaped as
/// [`go_quote`] escapes them, so that none reaches a terminal raw.
pub(crate) fn escape_controls(text: &str) -> String {
    if !text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            c => push_escaped(&mut out, c),
        }
    }
    out
}

/// `c`, or its escape if it is a control character.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if (c as u32) < 0x20 || c == '\u{7f}' => {
            out.push_str(&format!("\\x{:02x}", c as u32));
        }
        c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
        c => out.push(c),
    }
}

/// Alphabet the real server uses for `generateName` suffixes (no vowels, so
/// generated names never spell words).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `text` cut to at most `max` bytes on a character boundary, ending in
/// how many bytes were left out (a message another party wrote, returned
/// and logged). Not an upstream behaviour.
pub(crate) fn cut_message(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let dropped = text.len() - end;
    text.truncate(end);
    text.push_str(&format!("… ({dropped} more bytes not shown)"));
}

/// Five random characters for a `generateName` suffix.
pub(crate) fn random_suffix() -> String {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes[..5]
        .iter()
        .map(|b| NAME_ALPHABET[*b as usize % NAME_ALPHABET.len()] as char)
        .collect()
}

/// A random 256-bit token in hex.
pub(crate) fn random_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// The size of `value` as compact JSON, counted without building it.
pub(crate) fn json_len(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, value);
    c.0
}

/// Whether `value` nests arrays and objects more than `levels` deep (a
/// scalar is 0 levels, `{}` one), walked without recursion.
pub(crate) fn deeper_than(value: &Value, levels: usize) -> bool {
    let mut stack = vec![(value, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        if depth + 1 > levels {
            return true;
        }
        stack.extend(children.map(|c| (c, depth + 1)));
    }
    false
}

/// `obj.metadata` as a mutable map, creating it (and replacing a non-object)
/// when needed.
pub(crate) fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let map = obj.as_object_mut().expect("object");
    let md = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !md.is_object() {
        *md = Value::Object(Map::new());
    }
    md.as_object_mut().expect("object")
}

/// `metadata.<field>` as a string, if present.
pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// Value at a dotted path such as `.spec.replicas` (leading dot optional).
pub(crate) fn get_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for seg in path.trim_start_matches('.').split('.') {
        if seg.is_empty() {
            continue;
        }
        cur = cur.get(seg)?;
    }
    Some(cur)
}

/// Sets the value at a dotted path, creating intermediate objects.
pub(crate) fn set_path(obj: &mut Value, path: &str, value: Value) {
    let segs: Vec<&str> = path
        .trim_start_matches('.')
        .split('.')
        .filter(|s| !s.is_empty())
        .collect();
    let mut cur = obj;
    for (i, seg) in segs.iter().enumerate() {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let map = cur.as_object_mut().expect("object");
        if i + 1 == segs.len() {
            map.insert((*seg).to_string(), value);
            return;
        }
        cur = map
            .entry((*seg).to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_unix_times() {
        assert_eq!(format_unix(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_unix(1_735_787_045), "2025-01-02T03:04:05Z");
        assert_eq!(format_unix(-1), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn suffix_uses_the_alphabet() {
        let s = random_suffix();
        assert_eq!(s.len(), 5);
        assert!(s.bytes().all(|b| NAME_ALPHABET.contains(&b)));
    }

    #[test]
    fn paths_round_trip() {
        let mut v = serde_json::json!({});
        set_path(&mut v, ".spec.replicas", serde_json::json!(3));
        assert_eq!(get_path(&v, ".spec.replicas"), Some(&serde_json::json!(3)));
        assert_eq!(get_path(&v, "spec.nothing"), None);
    }
}
