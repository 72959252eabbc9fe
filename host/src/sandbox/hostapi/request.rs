//! The one model of a call a guest makes through the `kube` interface:
//! what it addresses (kind, namespace, name or list selector) and the
//! operation with its body.
//!
//! The same value is served by the host API, noted by skip, compared by
//! shadow runs, and written to and read from transcripts: its serde form
//! is a transcript's `request` (see [`crate::ops::transcript`]). Bodies
//! stay the guest's text ([`Body`]): nothing on the way to the API server
//! parses or copies them.

use std::ops::Deref;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use super::body;
use super::error::ApiError;
use crate::meta::kind::Gvk;

/// Objects larger than this are refused in both directions.
pub const MAX_PAYLOAD: usize = 4 << 20;

/// Deepest nesting of a body a transcript embeds as JSON. A transcript
/// line holds a body up to six levels down and is read back with
/// serde_json's depth limit ([`body::MAX_NESTING`]); a deeper body is
/// written as a string, so every line the recorder writes can be read.
const MAX_EMBEDDED_NESTING: usize = body::MAX_NESTING - 8;

/// An object or patch body as the guest wrote it.
///
/// Serialized (in a transcript) as the JSON it is, embedded as written,
/// or as a JSON string holding the text when it is not JSON (or nests
/// deeper than a transcript reader parses). Deserialized, a string stands
/// for its text and any other value for its JSON text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Body(String);

impl Body {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }

    /// The body as one JSON value, borrowed: None when it is not JSON or
    /// nests deeper than a transcript embeds.
    fn as_json(&self) -> Option<&RawValue> {
        if !body::nests_within(&self.0, MAX_EMBEDDED_NESTING) {
            return None;
        }
        serde_json::from_str::<&RawValue>(&self.0).ok()
    }

    /// The `metadata.name` an object body names, read without building
    /// the rest; None when it names none or is not a JSON object.
    pub fn object_name(&self) -> Option<String> {
        #[derive(Deserialize)]
        struct Named {
            metadata: Option<Meta>,
        }
        #[derive(Deserialize)]
        struct Meta {
            name: Option<String>,
        }
        serde_json::from_str::<Named>(&self.0)
            .ok()
            .and_then(|n| n.metadata?.name)
    }
}

impl Deref for Body {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<String> for Body {
    fn from(text: String) -> Self {
        Body(text)
    }
}

impl From<&str> for Body {
    fn from(text: &str) -> Self {
        Body(text.to_string())
    }
}

impl Serialize for Body {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.as_json() {
            Some(json) => json.serialize(s),
            None => s.serialize_str(&self.0),
        }
    }
}

impl<'de> Deserialize<'de> for Body {
    /// Through a `Value`: a transcript's request sits in an internally
    /// tagged enum, whose fields serde buffers before they reach here, and
    /// a raw value cannot be read from that buffer.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Body(match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(text) => text,
            json => json.to_string(),
        }))
    }
}

/// One call a guest makes through the `kube` interface.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "verb", rename_all = "kebab-case")]
pub enum KubeRequest {
    Get {
        kind: Gvk,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        name: String,
    },
    #[serde(rename_all = "camelCase")]
    List {
        kind: Gvk,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label_selector: Option<String>,
    },
    Create {
        kind: Gvk,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        object: Body,
    },
    Replace {
        kind: Gvk,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        name: String,
        object: Body,
    },
    Patch {
        kind: Gvk,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        name: String,
        patch: ObjectPatch,
    },
    ReplaceStatus {
        kind: Gvk,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        name: String,
        object: Body,
    },
    PatchStatus {
        kind: Gvk,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        name: String,
        patch: ObjectPatch,
    },
    Delete {
        kind: Gvk,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        name: String,
    },
    RecordEvent {
        event: Event,
    },
}

/// A patch (the WIT `object-patch`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum ObjectPatch {
    /// JSON merge patch (RFC 7386).
    Merge { body: Body },
    /// JSON patch (RFC 6902).
    Json { body: Body },
    /// Server-side apply of the object `body` as `field_manager` (empty:
    /// the host names the plugin), forcing conflicts when `force`.
    #[serde(rename_all = "camelCase")]
    Apply {
        body: Body,
        field_manager: String,
        force: bool,
    },
}

impl ObjectPatch {
    pub fn merge(body: impl Into<Body>) -> Self {
        ObjectPatch::Merge { body: body.into() }
    }

    pub fn json(body: impl Into<Body>) -> Self {
        ObjectPatch::Json { body: body.into() }
    }

    /// The patch (for apply, the object) as the guest wrote it.
    pub fn body(&self) -> &Body {
        match self {
            ObjectPatch::Merge { body }
            | ObjectPatch::Json { body }
            | ObjectPatch::Apply { body, .. } => body,
        }
    }

    /// `merge`, `json` or `apply`.
    pub fn type_name(&self) -> &'static str {
        match self {
            ObjectPatch::Merge { .. } => "merge",
            ObjectPatch::Json { .. } => "json",
            ObjectPatch::Apply { .. } => "apply",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum EventType {
    Normal,
    Warning,
}

impl<'de> Deserialize<'de> for EventType {
    /// `Warning`, or any other string for `Normal`, as the API server
    /// treats an event's type.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(if name == "Warning" {
            EventType::Warning
        } else {
            EventType::Normal
        })
    }
}

/// An event about an object (events.k8s.io/v1 semantics).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub regarding_kind: Gvk,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regarding_namespace: Option<String>,
    pub regarding_name: String,
    #[serde(rename = "type")]
    pub type_: EventType,
    pub reason: String,
    pub action: String,
    pub note: String,
}

/// What a call is about, borrowed from its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Address<'a> {
    pub kind: &'a Gvk,
    pub namespace: Option<&'a str>,
    /// The object's name: None for a list, and for a create (its body
    /// names the object).
    pub name: Option<&'a str>,
    /// A list's label selector.
    pub label_selector: Option<&'a str>,
}

impl KubeRequest {
    /// The Kubernetes verb this call needs permission for.
    pub fn verb(&self) -> &'static str {
        match self {
            KubeRequest::Get { .. } => "get",
            KubeRequest::List { .. } => "list",
            KubeRequest::Create { .. } | KubeRequest::RecordEvent { .. } => "create",
            KubeRequest::Replace { .. } | KubeRequest::ReplaceStatus { .. } => "update",
            KubeRequest::Patch { .. } | KubeRequest::PatchStatus { .. } => "patch",
            KubeRequest::Delete { .. } => "delete",
        }
    }

    /// The operation as the WIT names it (and a transcript's `verb`):
    /// `get`, `list`, `create`, `replace`, `patch`, `replace-status`,
    /// `patch-status`, `delete` or `record-event`.
    pub fn operation(&self) -> &'static str {
        match self {
            KubeRequest::Get { .. } => "get",
            KubeRequest::List { .. } => "list",
            KubeRequest::Create { .. } => "create",
            KubeRequest::Replace { .. } => "replace",
            KubeRequest::Patch { .. } => "patch",
            KubeRequest::ReplaceStatus { .. } => "replace-status",
            KubeRequest::PatchStatus { .. } => "patch-status",
            KubeRequest::Delete { .. } => "delete",
            KubeRequest::RecordEvent { .. } => "record-event",
        }
    }

    /// Whether the call only reads (`get` or `list`).
    pub fn is_read(&self) -> bool {
        matches!(self, KubeRequest::Get { .. } | KubeRequest::List { .. })
    }

    /// Whether the call writes the status subresource.
    pub fn is_status(&self) -> bool {
        matches!(
            self,
            KubeRequest::ReplaceStatus { .. } | KubeRequest::PatchStatus { .. }
        )
    }

    /// What the call is about; for an event, the object it regards.
    pub fn address(&self) -> Address<'_> {
        match self {
            KubeRequest::Get {
                kind,
                namespace,
                name,
            }
            | KubeRequest::Replace {
                kind,
                namespace,
                name,
                ..
            }
            | KubeRequest::Patch {
                kind,
                namespace,
                name,
                ..
            }
            | KubeRequest::ReplaceStatus {
                kind,
                namespace,
                name,
                ..
            }
            | KubeRequest::PatchStatus {
                kind,
                namespace,
                name,
                ..
            }
            | KubeRequest::Delete {
                kind,
                namespace,
                name,
            } => Address {
                kind,
                namespace: namespace.as_deref(),
                name: Some(name),
                label_selector: None,
            },
            KubeRequest::Create {
                kind, namespace, ..
            } => Address {
                kind,
                namespace: namespace.as_deref(),
                name: None,
                label_selector: None,
            },
            KubeRequest::List {
                kind,
                namespace,
                label_selector,
            } => Address {
                kind,
                namespace: namespace.as_deref(),
                name: None,
                label_selector: label_selector.as_deref(),
            },
            KubeRequest::RecordEvent { event } => Address {
                kind: &event.regarding_kind,
                namespace: event.regarding_namespace.as_deref(),
                name: Some(&event.regarding_name),
                label_selector: None,
            },
        }
    }

    /// The object or patch body the guest sends, if the call has one.
    pub fn payload(&self) -> Option<&Body> {
        match self {
            KubeRequest::Create { object, .. }
            | KubeRequest::Replace { object, .. }
            | KubeRequest::ReplaceStatus { object, .. } => Some(object),
            KubeRequest::Patch { patch, .. } | KubeRequest::PatchStatus { patch, .. } => {
                Some(patch.body())
            }
            KubeRequest::Get { .. }
            | KubeRequest::List { .. }
            | KubeRequest::Delete { .. }
            | KubeRequest::RecordEvent { .. } => None,
        }
    }

    /// Refuses a call whose body is past [`MAX_PAYLOAD`] bytes: the one
    /// bound checked before anything reads the body.
    pub fn check_payload(&self) -> Result<(), ApiError> {
        self.payload().map_or(Ok(()), |b| check_size(b))
    }

    /// Refuses a call whose body nests arrays and objects deeper than
    /// the API server parses ([`body::MAX_NESTING`]), before anything
    /// else reads it.
    pub fn check_nesting(&self) -> Result<(), ApiError> {
        self.payload()
            .map_or(Ok(()), |b| body::check_nesting(b))
            .map_err(|e| ApiError::Invalid(e.to_string()))
    }
}

/// Refuses a body past [`MAX_PAYLOAD`] bytes, naming its size.
pub(crate) fn check_size(payload: &str) -> Result<(), ApiError> {
    if payload.len() > MAX_PAYLOAD {
        return Err(ApiError::Invalid(format!(
            "object of {} bytes exceeds the host's {MAX_PAYLOAD}-byte payload limit",
            payload.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn written(body: &str) -> String {
        serde_json::to_string(&Body::from(body)).unwrap()
    }

    fn read(json: &str) -> String {
        serde_json::from_str::<Body>(json).unwrap().into_string()
    }

    #[test]
    fn a_json_body_is_embedded_as_the_guest_wrote_it() {
        assert_eq!(written(r#"{"b": 1, "a": [2]}"#), r#"{"b": 1, "a": [2]}"#);
        assert_eq!(written(" [1] "), "[1]");
        // A JSON string is a JSON value too: read back, its text.
        assert_eq!(written(r#""text""#), r#""text""#);
        assert_eq!(read(r#""text""#), "text");
    }

    #[test]
    fn a_body_a_reader_would_not_parse_is_written_as_a_string() {
        assert_eq!(written("not json"), r#""not json""#);
        assert_eq!(written(r#"{"a":1} x"#), r#""{\"a\":1} x""#);
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let deep = nested(MAX_EMBEDDED_NESTING + 1);
        assert!(written(&deep).starts_with(r#""[[["#));
        let within = nested(MAX_EMBEDDED_NESTING);
        assert_eq!(written(&within), within);
        for text in ["not json", r#"{"a":1} x"#, &deep, &within] {
            assert_eq!(read(&written(text)), *text, "{text:.40}");
        }
    }

    #[test]
    fn a_recorded_body_reads_as_its_json_text() {
        assert_eq!(read(r#"{"a": {"b": [1, 2]}}"#), r#"{"a":{"b":[1,2]}}"#);
        assert_eq!(read("null"), "null");
    }

    #[test]
    fn a_request_serializes_as_a_transcript_request() {
        let patch = KubeRequest::PatchStatus {
            kind: Gvk::new("apps", "v1", "Deployment"),
            namespace: None,
            name: "web".into(),
            patch: ObjectPatch::Apply {
                body: r#"{"status":{"ready":1}}"#.into(),
                field_manager: "m".into(),
                force: true,
            },
        };
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!({"verb": "patch-status", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                   "name": "web",
                   "patch": {"type": "apply", "body": {"status": {"ready": 1}}, "fieldManager": "m", "force": true}})
        );
        let event: KubeRequest = serde_json::from_value(json!({"verb": "record-event", "event": {
            "regardingKind": {"group": "", "version": "v1", "kind": "Pod"}, "regardingName": "p",
            "type": "Info", "reason": "R", "action": "A", "note": ""}}))
        .unwrap();
        let KubeRequest::RecordEvent { event: e } = &event else {
            panic!("{event:?}")
        };
        assert_eq!(e.type_, EventType::Normal, "any type but Warning is Normal");
        assert_eq!(event.address().name, Some("p"));
        assert_eq!(event.verb(), "create");
    }
}
