//! The `admission.k8s.io/v1` AdmissionReview a webhook receives, and what
//! its answer may say: upstream's `CreateV1AdmissionReview` and
//! `VerifyAdmissionResponse`, and the status a denial becomes
//! (`ToStatusErr`).

use base64::Engine;
use serde::{Serialize, Serializer};
use serde_json::Value;

use super::matching::Invocation;
use super::{Attributes, Caller};
use crate::error::ApiError;
use crate::values::{escape_controls, go_quote};

const API_VERSION: &str = "admission.k8s.io/v1";
/// Values (keys included) an answer may hold, and how deep it may nest,
/// before it is parsed. Not an upstream check: upstream decodes into typed
/// structs, which skip what they do not know without building it; here the
/// answer becomes a tree, which costs many times its text (an honest answer
/// holds a few dozen values, its patch one string).
pub(crate) const MAX_ANSWER_VALUES: usize = 10_000;
const MAX_ANSWER_DEPTH: usize = 64;
/// The most of a denial's `status.message` kept (it is returned to the
/// client and logged). Not an upstream check.
pub(crate) const MAX_STATUS_MESSAGE: usize = 4 << 10;
/// The most of any other text of an answer an error or a denial quotes (a
/// uid, a kind, a reason, a value of the wrong type): each is returned to
/// the client and logged on every call. Not an upstream check.
const MAX_QUOTED: usize = 1 << 10;
/// The most a mutating webhook's patch may hold once decoded: 3 MiB, what
/// a client's own patch body may. Not an upstream check: the answer is a
/// string here, and its decoded operations would otherwise become a tree
/// of up to 12 MiB of text without the answer's bound on values.
pub(crate) const MAX_PATCH_BYTES: usize = 3 << 20;
/// Audit annotations one answer may add, and the most of each value; the
/// others are dropped (counted as `webhookAnnotations`). Not upstream
/// bounds: each is kept for the whole request, beside every other
/// webhook's.
pub(crate) const MAX_AUDIT_ANNOTATIONS: usize = 32;
const MAX_ANNOTATION_VALUE: usize = 1 << 10;
const KIND: &str = "AdmissionReview";

impl Serialize for Caller {
    /// `authentication.k8s.io/v1` `UserInfo`, empty fields left out as
    /// upstream's `omitempty` leaves them.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("username", &self.username)?;
        if !self.uid.is_empty() {
            m.serialize_entry("uid", &self.uid)?;
        }
        if !self.groups.is_empty() {
            m.serialize_entry("groups", &self.groups)?;
        }
        if !self.extra.is_empty() {
            m.serialize_entry("extra", &self.extra)?;
        }
        m.end()
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Review<'a> {
    api_version: &'static str,
    kind: &'static str,
    request: Request<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Request<'a> {
    uid: &'a str,
    kind: &'a super::Gvk,
    resource: &'a super::Gvr,
    #[serde(skip_serializing_if = "str::is_empty")]
    sub_resource: &'a str,
    request_kind: &'a super::Gvk,
    request_resource: &'a super::Gvr,
    #[serde(skip_serializing_if = "str::is_empty")]
    request_sub_resource: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    namespace: &'a str,
    operation: &'static str,
    user_info: &'a Caller,
    /// `null` when there is none (a delete's object, a create's old one),
    /// as upstream's empty `RawExtension` serializes.
    object: Option<&'a Value>,
    old_object: Option<&'a Value>,
    dry_run: bool,
    options: &'a Value,
}

/// The JSON body of the review `uid` of `attrs`, presenting the objects as
/// `invocation` says (they are already in its version).
pub(crate) fn request_body(
    uid: &str,
    attrs: &Attributes<'_>,
    invocation: &Invocation,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Vec<u8> {
    let review = Review {
        api_version: API_VERSION,
        kind: KIND,
        request: Request {
            uid,
            kind: &invocation.kind,
            resource: &invocation.resource,
            sub_resource: attrs.subresource,
            request_kind: &attrs.kind,
            request_resource: &attrs.resource,
            request_sub_resource: attrs.subresource,
            name: attrs.name,
            namespace: attrs.namespace,
            operation: attrs.operation.as_str(),
            user_info: attrs.caller,
            object,
            old_object: old,
            dry_run: attrs.dry_run,
            options: &attrs.options,
        },
    };
    // Values and strings always serialize.
    serde_json::to_vec(&review).unwrap_or_default()
}

/// What a webhook answered, once checked.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    pub(crate) allowed: bool,
    /// `response.status`, what a denial reports.
    pub(crate) status: Option<Value>,
    /// The JSON patch operations of a mutating webhook's `response.patch`.
    pub(crate) patch: Option<Value>,
    pub(crate) warnings: Vec<String>,
    pub(crate) audit_annotations: Vec<(String, String)>,
    /// Audit annotations the answer gave that were not kept.
    pub(crate) dropped_annotations: usize,
}

/// Why an answer is not one, in upstream's words.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BadResponse {
    /// The body is not an AdmissionReview at all; upstream fails this
    /// while decoding, before it checks anything.
    #[error("{0}")]
    Undecodable(String),
    #[error("webhook response was absent")]
    Absent,
    #[error("expected response.uid={}, got {}", go_quote(.expected), go_quote(.got))]
    Uid { expected: String, got: String },
    #[error("expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {0}")]
    Kind(String),
    #[error("webhook returned response.patch but not response.patchType")]
    PatchWithoutType,
    #[error("webhook returned response.patchType but not response.patch")]
    TypeWithoutPatch,
    #[error("webhook returned invalid response.patchType of {}", go_quote(.0))]
    EmptyPatchType(String),
    #[error("validating webhook may not return response.patch")]
    ValidatingPatch,
    #[error("validating webhook may not return response.patchType")]
    ValidatingPatchType,
    /// Not an upstream check: a patch that does not decode, or of a type
    /// other than JSONPatch.
    #[error("{0}")]
    Patch(String),
    /// Not an upstream check: an answer past [`MAX_ANSWER_VALUES`] or
    /// nested too deep.
    #[error("the answer {0}; it is not read")]
    Shape(&'static str),
    /// Not an upstream check: a patch past [`MAX_PATCH_BYTES`] decoded.
    #[error("the patch is {0} bytes decoded, more than {MAX_PATCH_BYTES}; it is not read")]
    PatchSize(usize),
    /// A well-formed answer whose patch is not a JSON patch: upstream
    /// fails the request with an internal error here, whatever the
    /// webhook's failure policy.
    #[error("{0}")]
    NotJsonPatch(String),
}

impl BadResponse {
    /// How upstream introduces the error after `failed calling webhook`.
    pub(crate) fn context(&self) -> &'static str {
        match self {
            BadResponse::Undecodable(_) => "failed to call webhook",
            BadResponse::Patch(_) | BadResponse::PatchSize(_) => {
                "received undecodable patch in webhook response"
            }
            _ => "received invalid webhook response",
        }
    }
}

fn undecodable(e: impl std::fmt::Display) -> BadResponse {
    BadResponse::Undecodable(e.to_string())
}

/// Reads and checks the answer to review `uid`; `mutating` says whether
/// the webhook may patch.
pub(crate) fn verify(uid: &str, mutating: bool, body: &[u8]) -> Result<Verdict, BadResponse> {
    use wasmctrl_apimachinery::json::{Exceeded, check_shape};
    check_shape(body, MAX_ANSWER_DEPTH, MAX_ANSWER_VALUES).map_err(|e| {
        BadResponse::Shape(match e {
            Exceeded::Depth => "nests deeper than 64 levels",
            Exceeded::Values => "holds more than 10000 values",
        })
    })?;
    let review: Value = serde_json::from_slice(body).map_err(undecodable)?;
    if !review.is_object() {
        return Err(undecodable("the answer is not a JSON object"));
    }
    let Some(response) = review.get("response").filter(|r| !r.is_null()) else {
        return Err(BadResponse::Absent);
    };
    let got = response.get("uid").and_then(Value::as_str).unwrap_or("");
    if got != uid {
        return Err(BadResponse::Uid {
            expected: uid.to_string(),
            got: cut(got, MAX_QUOTED),
        });
    }
    let av = review["apiVersion"].as_str().unwrap_or("");
    let kind = review["kind"].as_str().unwrap_or("");
    if (av, kind) != (API_VERSION, KIND) {
        let (group, version) = av.rsplit_once('/').unwrap_or(("", av));
        return Err(BadResponse::Kind(cut(
            &format!("{group}/{version}, Kind={kind}"),
            MAX_QUOTED,
        )));
    }
    let allowed = match &response["allowed"] {
        Value::Bool(b) => *b,
        Value::Null => false,
        other => {
            return Err(undecodable(format!(
                "response.allowed is not a boolean: {}",
                shown(other)
            )));
        }
    };
    let patch_text = match &response["patch"] {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::String(s) => Some(s.as_str()),
        other => {
            return Err(undecodable(format!(
                "response.patch is not a string: {}",
                shown(other)
            )));
        }
    };
    let patch_type = match &response["patchType"] {
        Value::Null => None,
        Value::String(s) => Some(s.as_str()),
        other => {
            return Err(undecodable(format!(
                "response.patchType is not a string: {}",
                shown(other)
            )));
        }
    };
    let mut patch = None;
    if mutating {
        match (patch_text, patch_type) {
            (Some(_), None) => return Err(BadResponse::PatchWithoutType),
            (None, Some(_)) => return Err(BadResponse::TypeWithoutPatch),
            (Some(_), Some("")) => return Err(BadResponse::EmptyPatchType(String::new())),
            (Some(text), Some("JSONPatch")) => patch = Some(decode_patch(text)?),
            (Some(_), Some(other)) => {
                return Err(BadResponse::Patch(format!(
                    "unsupported patch type {}",
                    go_quote(&cut(other, MAX_QUOTED))
                )));
            }
            (None, None) => {}
        }
    } else if patch_text.is_some() {
        return Err(BadResponse::ValidatingPatch);
    } else if patch_type.is_some() {
        return Err(BadResponse::ValidatingPatchType);
    }
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    let (audit_annotations, dropped_annotations) = annotations(&response["auditAnnotations"]);
    Ok(Verdict {
        allowed,
        status: response.get("status").and_then(status),
        patch,
        warnings: strings(&response["warnings"]),
        audit_annotations,
        dropped_annotations,
    })
}

/// `text`, at most `max` bytes of it (see [`crate::values::cut_message`]).
fn cut(text: &str, max: usize) -> String {
    let mut text = text.to_string();
    crate::values::cut_message(&mut text, max);
    text
}

/// A value of the wrong type, as an error quotes it: at most
/// [`MAX_QUOTED`] of its JSON.
fn shown(value: &Value) -> String {
    cut(&value.to_string(), MAX_QUOTED)
}

/// The audit annotations an answer adds: those whose key is a qualified
/// name's name part (upstream refuses others when it records them) and
/// whose value is a string, at most [`MAX_AUDIT_ANNOTATIONS`], each value
/// cut to [`MAX_ANNOTATION_VALUE`]; and how many were dropped.
fn annotations(given: &Value) -> (Vec<(String, String)>, usize) {
    let Some(given) = given.as_object() else {
        return (Vec::new(), 0);
    };
    let mut kept = Vec::new();
    for (key, value) in given {
        let Some(value) = value.as_str() else {
            continue;
        };
        let named = !key.contains('/') && wasmctrl_apimachinery::names::qualified_name(key).is_ok();
        if named && kept.len() < MAX_AUDIT_ANNOTATIONS {
            kept.push((key.clone(), cut(value, MAX_ANNOTATION_VALUE)));
        }
    }
    let dropped = given.len() - kept.len();
    (kept, dropped)
}

/// A denial's `status` as it is kept: its message cut to
/// [`MAX_STATUS_MESSAGE`], its reason and the names in its details to
/// [`MAX_QUOTED`], and its causes as a write's own (the first 100, each
/// cut to 1 KiB); the control characters of its message, reason and causes
/// (newline and tab aside) escaped, since kubectl prints them as they are.
/// Anything else it says is not passed on.
fn status(given: &Value) -> Option<Value> {
    let given = given.as_object()?;
    let text = |key: &str, max: usize| {
        given
            .get(key)
            .and_then(Value::as_str)
            .map(|s| Value::String(escape_controls(&cut(s, max))))
    };
    let mut kept = serde_json::Map::new();
    for (key, max) in [("message", MAX_STATUS_MESSAGE), ("reason", MAX_QUOTED)] {
        if let Some(v) = text(key, max) {
            kept.insert(key.into(), v);
        }
    }
    if let Some(code) = given.get("code").filter(|c| c.is_number()) {
        kept.insert("code".into(), code.clone());
    }
    if let Some(details) = given.get("details").and_then(Value::as_object) {
        kept.insert("details".into(), status_details(details));
    }
    Some(Value::Object(kept))
}

/// A denial's `status.details`, bounded as [`status`] says.
fn status_details(given: &serde_json::Map<String, Value>) -> Value {
    let mut kept = serde_json::Map::new();
    for key in ["name", "group", "kind", "uid"] {
        if let Some(s) = given.get(key).and_then(Value::as_str) {
            kept.insert(key.into(), Value::String(cut(s, MAX_QUOTED)));
        }
    }
    if let Some(n) = given.get("retryAfterSeconds").filter(|n| n.is_u64()) {
        kept.insert("retryAfterSeconds".into(), n.clone());
    }
    if let Some(causes) = given.get("causes").and_then(Value::as_array) {
        let mut bounded = crate::error::Causes::default();
        for cause in causes {
            let part = |key: &str| {
                cause[key]
                    .as_str()
                    .map(|s| escape_controls(&cut(s, MAX_QUOTED)))
                    .unwrap_or_default()
            };
            bounded.add(|| crate::error::Cause {
                reason: part("reason"),
                message: part("message"),
                field: part("field"),
            });
        }
        kept.insert(
            "causes".into(),
            crate::error::causes_json(&bounded.into_vec()),
        );
    }
    Value::Object(kept)
}

/// A base64 JSON patch: its operations, measured before they are parsed.
fn decode_patch(text: &str) -> Result<Value, BadResponse> {
    // Four characters of base64 decode to at most three bytes.
    if text.len() / 4 * 3 > MAX_PATCH_BYTES + 3 {
        return Err(BadResponse::PatchSize(text.len() / 4 * 3));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| {
            BadResponse::Patch(format!(
                "illegal base64 data: {}",
                cut(&e.to_string(), MAX_QUOTED)
            ))
        })?;
    if bytes.len() > MAX_PATCH_BYTES {
        return Err(BadResponse::PatchSize(bytes.len()));
    }
    let ops: Value =
        serde_json::from_slice(&bytes).map_err(|e| BadResponse::NotJsonPatch(e.to_string()))?;
    if !ops.is_array() {
        return Err(BadResponse::NotJsonPatch(
            "a JSON patch must be a list of operations".into(),
        ));
    }
    Ok(ops)
}

/// The error a denial by webhook `name` answers with: the webhook's own
/// status, its code at least 400 and its message prefixed, as upstream's
/// `ToStatusErr` makes it.
pub(crate) fn denial(name: &str, status: Option<&Value>) -> ApiError {
    let denied = format!("admission webhook {} denied the request", go_quote(name));
    let empty = Value::Null;
    let status = status.unwrap_or(&empty);
    let text = |key: &str| status[key].as_str().filter(|s| !s.is_empty());
    let message = match (text("message"), text("reason")) {
        (Some(m), _) => format!("{denied}: {m}"),
        (None, Some(r)) => format!("{denied}: {r}"),
        (None, None) => format!("{denied} without explanation"),
    };
    // Upstream never answers a denial under 400; a code no HTTP status
    // line can carry is a server error here.
    let code = match status["code"].as_u64().unwrap_or(0) {
        c if c < 400 => 400,
        c if c > 599 => 500,
        c => c as u16,
    };
    ApiError::Status {
        code,
        reason: text("reason").unwrap_or("").to_string(),
        message,
        details: status.get("details").filter(|d| d.is_object()).cloned(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{Gvk, Gvr, Operation};
    use super::*;

    fn answer(response: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"apiVersion": API_VERSION, "kind": KIND, "response": response}))
            .unwrap()
    }

    #[test]
    fn what_an_error_quotes_of_an_answer_is_cut() {
        let long = "u".repeat(100_000);
        let wrong_uid = answer(json!({"uid": long, "allowed": true}));
        let kind = serde_json::to_vec(
            &json!({"apiVersion": long, "kind": "AdmissionReview", "response": {"uid": "u"}}),
        )
        .unwrap();
        let allowed = answer(json!({"uid": "u", "allowed": [long]}));
        let patch_type =
            answer(json!({"uid": "u", "allowed": true, "patch": "W10=", "patchType": long}));
        for (body, mutating) in [
            (wrong_uid, false),
            (kind, false),
            (allowed, false),
            (patch_type, true),
        ] {
            let e = verify("u", mutating, &body).unwrap_err().to_string();
            assert!(
                e.len() < 1200 && e.contains("more bytes not shown"),
                "{}",
                e.len()
            );
        }
    }

    #[test]
    fn an_answer_is_measured_before_it_is_parsed_and_a_long_message_cut() {
        let many = answer(json!({"uid": "u", "allowed": true, "x": vec![0; MAX_ANSWER_VALUES]}));
        let e = verify("u", false, &many).unwrap_err();
        assert!(matches!(e, BadResponse::Shape(_)), "{e}");
        assert_eq!(
            e.to_string(),
            "the answer holds more than 10000 values; it is not read"
        );
        let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
        assert!(matches!(
            verify("u", false, deep.as_bytes()),
            Err(BadResponse::Shape(_))
        ));

        let long = "é".repeat(MAX_STATUS_MESSAGE);
        let denied =
            answer(json!({"uid": "u", "allowed": false, "status": {"code": 403, "message": long}}));
        let v = verify("u", false, &denied).unwrap();
        let message = v.status.unwrap()["message"].as_str().unwrap().to_string();
        assert!(message.len() < MAX_STATUS_MESSAGE + 64, "{}", message.len());
        assert!(message.ends_with(&format!("… ({} more bytes not shown)", MAX_STATUS_MESSAGE)));
    }

    #[test]
    fn the_request_carries_what_upstream_sends() {
        let caller = Caller {
            username: "alice".into(),
            groups: vec!["system:authenticated".into()],
            ..Default::default()
        };
        let kind = Gvk {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
        };
        let resource = Gvr {
            group: "apps".into(),
            version: "v1".into(),
            resource: "deployments".into(),
        };
        let attrs = Attributes {
            operation: Operation::Update,
            kind: kind.clone(),
            resource: resource.clone(),
            subresource: "status",
            name: "web",
            namespace: "ns",
            dry_run: true,
            options: json!({"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"}),
            caller: &caller,
            equivalent_versions: &[],
            deadline: None,
        };
        let inv = Invocation { kind, resource };
        let old = json!({"metadata": {"name": "web"}});
        let body: Value =
            serde_json::from_slice(&request_body("u-1", &attrs, &inv, None, Some(&old))).unwrap();
        let r = &body["request"];
        assert_eq!(body["apiVersion"], API_VERSION);
        assert_eq!(r["uid"], "u-1");
        assert_eq!(
            r["kind"],
            json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
        assert_eq!(r["requestResource"]["resource"], "deployments");
        assert_eq!(
            (&r["subResource"], &r["requestSubResource"]),
            (&json!("status"), &json!("status"))
        );
        assert_eq!(r["operation"], "UPDATE");
        assert_eq!(
            r["userInfo"],
            json!({"username": "alice", "groups": ["system:authenticated"]})
        );
        assert_eq!(r["object"], Value::Null);
        assert!(r.get("object").is_some());
        assert_eq!(r["oldObject"], old);
        assert_eq!(r["dryRun"], true);
        assert_eq!(r["options"]["kind"], "UpdateOptions");
    }

    #[test]
    fn answers_are_checked_as_upstream_checks_them() {
        let ok = verify(
            "u",
            false,
            &answer(json!({"uid": "u", "allowed": true, "warnings": ["w"]})),
        )
        .unwrap();
        assert!(ok.allowed);
        assert_eq!(ok.warnings, vec!["w".to_string()]);
        let err = |mutating, response: Value| {
            verify("u", mutating, &answer(response))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(false, json!({"uid": "x", "allowed": true})),
            "expected response.uid=\"u\", got \"x\""
        );
        assert_eq!(
            err(
                false,
                json!({"uid": "u", "allowed": true, "patch": "W10=", "patchType": "JSONPatch"})
            ),
            "validating webhook may not return response.patch"
        );
        assert_eq!(
            err(true, json!({"uid": "u", "allowed": true, "patch": "W10="})),
            "webhook returned response.patch but not response.patchType"
        );
        let wrong_kind = serde_json::to_vec(
            &json!({"apiVersion": "v1", "kind": "Status", "response": {"uid": "u"}}),
        )
        .unwrap();
        assert_eq!(
            verify("u", false, &wrong_kind).unwrap_err().to_string(),
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got /v1, Kind=Status"
        );
        let patched = verify("u", true, &answer(json!({"uid": "u", "allowed": true, "patchType": "JSONPatch",
            "patch": base64::engine::general_purpose::STANDARD.encode(br#"[{"op":"add","path":"/x","value":1}]"#)})))
        .unwrap();
        assert_eq!(patched.patch.unwrap()[0]["op"], "add");
    }

    #[test]
    fn denials_read_as_upstream_s() {
        let e = denial(
            "v.example.com",
            Some(&json!({"code": 403, "reason": "Forbidden", "message": "no"})),
        );
        let s = e.to_status();
        assert_eq!(
            s["message"],
            "admission webhook \"v.example.com\" denied the request: no"
        );
        assert_eq!(
            (s["code"].as_u64(), s["reason"].as_str()),
            (Some(403), Some("Forbidden"))
        );
        let bare = denial("v.example.com", None).to_status();
        assert_eq!(
            bare["message"],
            "admission webhook \"v.example.com\" denied the request without explanation"
        );
        assert_eq!(bare["code"], 400);
        assert!(bare.get("reason").is_none());
    }
}
