//! One AdmissionReview: read the API server's request, run the plugin's
//! `validate` or `mutate` under the webhook's deadline, and answer with
//! its verdict, its failure policy, or its monitor mode.
//!
//! # What the answer guarantees
//! - The review's `uid` is echoed, and nothing the guest returned reaches
//!   the API server unchecked: the verdict's bounds are the sandbox's
//!   ([`crate::sandbox::admission`]); a mutation may not change the
//!   object's name, namespace, uid, kind or apiVersion, and the host, not
//!   the guest, writes the JSONPatch.
//! - A failed review (trap, deadline, refused verdict or mutation) answers
//!   by the webhook's `failurePolicy`: `Fail` denies with a message saying
//!   why, `Ignore` allows with a warning saying why.
//! - In monitor mode every request is allowed unchanged; what the plugin
//!   would have done is an audit annotation, a log line and a metric.

use std::sync::LazyLock;
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::{Reviewer, patch};
use crate::config::AdmissionMode;
use crate::control::metrics::{Metrics, WebhookDecisionLabels};
use crate::sandbox::admission::{
    FailurePolicy, MAX_PATCHED_BYTES, Review, ReviewError, Verdict, Webhook, WebhookKind,
};

/// The largest AdmissionReview body read: kube-apiserver's own request
/// ceiling (3 MiB) for the object and again for the old object, with room
/// for the rest of the review.
pub const MAX_REVIEW_BYTES: usize = 7 << 20;
/// The share of the webhook's `timeoutSeconds` kept back from the guest,
/// so that a guest that runs to its deadline is still answered for (by
/// its failure policy, with the host's message) before the API server
/// gives up: a tenth, at least this much.
const MIN_MARGIN: Duration = Duration::from_millis(250);
/// Fields of the object a mutation may not change.
/// The longest review uid read (kube-apiserver sends a UUID, 36 bytes).
const MAX_UID_BYTES: usize = 128;
/// Mutations compared at once, process-wide: each holds the reviewed
/// object and the mutated one as trees (up to about 18 times their text
/// each), and the comparison is CPU-bound work, so more than one per CPU
/// would only queue with more memory held.
static TREES: LazyLock<Semaphore> =
    LazyLock::new(|| Semaphore::new(std::thread::available_parallelism().map_or(1, |n| n.get())));
const IMMUTABLE: [&str; 5] = [
    "/apiVersion",
    "/kind",
    "/metadata/name",
    "/metadata/namespace",
    "/metadata/uid",
];

/// Why a review could not be answered at all (HTTP 4xx to the caller).
#[derive(Debug, thiserror::Error)]
pub enum BadReview {
    #[error("the body is not an AdmissionReview v1: {0}")]
    NotAReview(String),
    #[error("no plugin named {0:?} serves webhooks here")]
    UnknownPlugin(String),
    #[error("plugin {plugin:?} serves no {kind} webhook")]
    NoWebhook { plugin: String, kind: &'static str },
}

#[derive(Deserialize)]
struct ReviewBody<'a> {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    #[serde(borrow)]
    request: &'a RawValue,
}

#[derive(Debug, Deserialize)]
struct RequestHead<'a> {
    uid: String,
    /// Its text: a tree is built only when a mutation is to be compared
    /// with it.
    #[serde(borrow, default)]
    object: Option<&'a RawValue>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    kind: KindRef,
}

/// The reviewed object's kind, for a denial's `details` (kubectl names
/// the object from them: `The WebApp "web" is invalid`).
#[derive(Debug, Default, Deserialize)]
struct KindRef {
    #[serde(default)]
    group: String,
    #[serde(default)]
    kind: String,
}

/// What a plugin's review produced, before the mode and policy apply.
enum Outcome {
    /// The verdict, with the JSONPatch of its mutation (if any).
    Verdict(Verdict, Option<Value>),
    Failed(String),
}

/// Answers one AdmissionReview `body` for `plugin`'s webhook of `kind`,
/// within `timeout` (the API server's `?timeout=`, capped by the webhook's
/// own `timeoutSeconds`). The answer is an AdmissionReview v1 response.
pub async fn answer(
    plugin: &dyn Reviewer,
    mode: AdmissionMode,
    kind: WebhookKind,
    body: &[u8],
    timeout: Option<Duration>,
    metrics: &Metrics,
) -> Result<Value, BadReview> {
    let (request, head) = read(body)?;
    let webhook = plugin
        .webhooks()
        .iter()
        .find(|w| w.kind == kind)
        .ok_or_else(|| BadReview::NoWebhook {
            plugin: plugin.name().to_string(),
            kind: kind_name(kind),
        })?;
    let budget = budget(webhook, timeout);
    let result = plugin
        .review(kind.review(), request.get().to_string(), budget)
        .await;
    let outcome = match result {
        Ok(verdict) => match mutation(kind, head.object, &verdict).await {
            Ok(patch) => Outcome::Verdict(verdict, patch),
            Err(refused) => {
                metrics.count_limit(plugin.name(), "admissionMutation");
                Outcome::Failed(refused)
            }
        },
        Err(ReviewError::Failed(m)) => Outcome::Failed(m),
        Err(e @ ReviewError::Refused(_)) => Outcome::Failed(e.to_string()),
    };
    let response = respond(plugin.name(), webhook, mode, kind, &head, outcome, metrics);
    Ok(json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    }))
}

/// The review's `request`, as sent, and the parts the host reads of it.
fn read(body: &[u8]) -> Result<(&RawValue, RequestHead<'_>), BadReview> {
    let review: ReviewBody<'_> =
        serde_json::from_slice(body).map_err(|e| BadReview::NotAReview(e.to_string()))?;
    if review.api_version != "admission.k8s.io/v1" || review.kind != "AdmissionReview" {
        return Err(BadReview::NotAReview(format!(
            "apiVersion {:?} kind {:?}; this server speaks admission.k8s.io/v1 AdmissionReview",
            review.api_version, review.kind
        )));
    }
    let head: RequestHead = serde_json::from_str(review.request.get())
        .map_err(|e| BadReview::NotAReview(format!("request: {e}")))?;
    // The uid is echoed and logged: kube-apiserver sends a UUID.
    if head.uid.len() > MAX_UID_BYTES || head.uid.chars().any(char::is_control) {
        return Err(BadReview::NotAReview(format!(
            "request.uid is {} bytes{}; a uid is at most {MAX_UID_BYTES} bytes without control characters",
            head.uid.len(),
            if head.uid.chars().any(char::is_control) {
                " with control characters"
            } else {
                ""
            }
        )));
    }
    Ok((review.request, head))
}

fn kind_name(kind: WebhookKind) -> &'static str {
    match kind {
        WebhookKind::Validating => "validating",
        WebhookKind::Mutating => "mutating",
    }
}

fn export_name(kind: WebhookKind) -> &'static str {
    match kind.review() {
        Review::Validate => "validate",
        Review::Mutate => "mutate",
    }
}

/// The guest's deadline: the API server's timeout (or the webhook's own)
/// less the margin.
fn budget(webhook: &Webhook, asked: Option<Duration>) -> Duration {
    let declared = Duration::from_secs(u64::from(webhook.timeout_seconds));
    let timeout = asked.map_or(declared, |a| a.min(declared));
    timeout.saturating_sub((timeout / 10).max(MIN_MARGIN))
}

/// The JSONPatch (RFC 6902) from the request's object to the verdict's
/// patched object, or None when it changes nothing; refused when it is
/// not JSON, changes a field no mutation may change, or passes a bound
/// (the reviewed object's size, the patch's).
async fn mutation(
    kind: WebhookKind,
    object: Option<&RawValue>,
    verdict: &Verdict,
) -> Result<Option<Value>, String> {
    let Some(patched) = verdict.patched.as_deref() else {
        return Ok(None);
    };
    if kind != WebhookKind::Mutating || !verdict.allowed {
        return Ok(None);
    }
    let object = object.map_or("null", RawValue::get);
    if object.len() > MAX_PATCHED_BYTES {
        return Err(format!(
            "the reviewed object is {} bytes; a mutation is compared only with an object of at most {MAX_PATCHED_BYTES} bytes (what the API server accepts as a body)",
            object.len()
        ));
    }
    let _permit = TREES.acquire().await.map_err(|e| e.to_string())?;
    let object: Value = serde_json::from_str(object)
        .map_err(|e| format!("the reviewed object is not JSON: {e}"))?;
    let patched: Value = serde_json::from_str(patched)
        .map_err(|e| format!("the patched object is not JSON: {e}"))?;
    if !patched.is_object() {
        return Err("the patched object is not a JSON object".into());
    }
    for field in IMMUTABLE {
        if object.pointer(field) != patched.pointer(field) {
            return Err(format!(
                "the mutation changes {}, which no mutating webhook may change",
                field.trim_start_matches('/').replace('/', ".")
            ));
        }
    }
    let operations = patch::diff(&object, &patched).map_err(|e| e.to_string())?;
    Ok((!operations.is_empty()).then_some(Value::Array(operations)))
}

fn reason(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "",
    }
}

/// The AdmissionReview `response` for `outcome`, under `mode` and the
/// webhook's failure policy; counts and logs the decision.
fn respond(
    plugin: &str,
    webhook: &Webhook,
    mode: AdmissionMode,
    kind: WebhookKind,
    head: &RequestHead,
    outcome: Outcome,
    metrics: &Metrics,
) -> Value {
    let count = |decision: &str| {
        metrics
            .webhook_decisions
            .get_or_create(&WebhookDecisionLabels {
                plugin: plugin.into(),
                kind: export_name(kind).into(),
                decision: decision.into(),
                mode: mode.as_str().into(),
            })
            .inc();
    };
    let mut response = json!({"uid": head.uid, "allowed": true});
    match outcome {
        Outcome::Failed(why) => {
            count("failed");
            // The message travels in a status, an annotation and a
            // `Warning` header: one line, bounded.
            let message = format!(
                "plugin {plugin:?} could not {}: {}",
                export_name(kind),
                one_line(&why)
            );
            tracing::warn!(plugin, export = export_name(kind), uid = %head.uid, failure_policy = webhook.failure_policy.as_str(), "admission review failed: {why}");
            match (mode, webhook.failure_policy) {
                (AdmissionMode::Monitor, _) => {
                    response["auditAnnotations"] =
                        json!({"monitor": format!("would fail: {message}")});
                }
                (AdmissionMode::Protect, FailurePolicy::Fail) => {
                    response["allowed"] = json!(false);
                    response["status"] = json!({
                        "code": 500,
                        "reason": "InternalError",
                        "message": message,
                    });
                }
                (AdmissionMode::Protect, FailurePolicy::Ignore) => {
                    response["warnings"] =
                        json!([format!("{message} (failurePolicy Ignore: allowed)")]);
                }
            }
        }
        Outcome::Verdict(v, patch) => {
            count(if v.allowed { "allowed" } else { "denied" });
            let annotations: serde_json::Map<String, Value> = v
                .audit_annotations
                .iter()
                .map(|(k, val)| (k.clone(), json!(val)))
                .collect();
            match mode {
                AdmissionMode::Monitor => {
                    let mut annotations = annotations;
                    if !v.allowed {
                        tracing::info!(plugin, uid = %head.uid, "monitor mode: would deny: {}", v.message);
                        annotations.insert(
                            "monitor".into(),
                            json!(format!("would deny: {}", v.message)),
                        );
                    } else if patch.is_some() {
                        annotations.insert("monitor".into(), json!("would mutate"));
                    }
                    if !annotations.is_empty() {
                        response["auditAnnotations"] = Value::Object(annotations);
                    }
                }
                AdmissionMode::Protect => {
                    if !v.allowed {
                        let causes: Vec<Value> = v
                            .causes
                            .iter()
                            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                            .collect();
                        response["allowed"] = json!(false);
                        response["status"] = json!({
                            "code": v.code,
                            "reason": reason(v.code),
                            "message": v.message,
                        });
                        if !causes.is_empty() {
                            response["status"]["details"] = json!({
                                "name": head.name,
                                "group": head.kind.group,
                                "kind": head.kind.kind,
                                "causes": causes,
                            });
                        }
                    }
                    if !v.warnings.is_empty() {
                        response["warnings"] = json!(v.warnings);
                    }
                    if !annotations.is_empty() {
                        response["auditAnnotations"] = Value::Object(annotations);
                    }
                    if let Some(patch) = patch {
                        let text = patch.to_string();
                        response["patchType"] = json!("JSONPatch");
                        response["patch"] =
                            json!(base64::engine::general_purpose::STANDARD.encode(text));
                    }
                }
            }
        }
    }
    response
}

/// The first line of `text`, its control characters dropped, cut to 512
/// bytes on a character boundary.
fn one_line(text: &str) -> String {
    let line: String = text
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    match line.char_indices().find(|(i, _)| *i > 512) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line,
    }
}

/// The API server's `?timeout=` (a Go duration as it writes it: `10s`).
/// How long the server waits for a review's body: the API server's
/// `?timeout=` (at most the 30 s a webhook may take), else the 10 s it
/// defaults to. A caller that sends its headers and then trickles, or
/// stops, is answered 408 and holds its connection no longer.
pub fn body_patience(timeout: Option<Duration>) -> Duration {
    timeout.map_or(Duration::from_secs(10), |t| t.min(Duration::from_secs(30)))
}

/// The API server's `?timeout=` of a review, if it sent one.
pub fn parse_timeout(query: Option<&str>) -> Option<Duration> {
    let value = query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("timeout="))?;
    crate::config::parse_duration(value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::admission::WebhookRule;

    fn webhook(kind: WebhookKind, policy: FailurePolicy) -> Webhook {
        Webhook {
            kind,
            rules: vec![WebhookRule {
                operations: vec!["CREATE".into()],
                groups: vec!["".into()],
                versions: vec!["v1".into()],
                resources: vec!["configmaps".into()],
                scope: "*",
            }],
            failure_policy: policy,
            timeout_seconds: 10,
            namespace_selector: None,
            object_selector: None,
        }
    }

    fn verdict(allowed: bool, patched: Option<Value>) -> Verdict {
        Verdict {
            allowed,
            code: 403,
            message: if allowed { String::new() } else { "no".into() },
            causes: vec![],
            warnings: vec![],
            audit_annotations: vec![],
            patched: patched.map(|p| p.to_string()),
        }
    }

    fn head() -> RequestHead<'static> {
        RequestHead {
            name: "a".into(),
            kind: KindRef::default(),
            uid: "u-1".into(),
            object: None,
        }
    }

    #[tokio::test]
    async fn a_mutation_is_a_patch_the_host_writes_and_may_not_rename_the_object() {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}});
        let text = serde_json::value::to_raw_value(&object).unwrap();
        let mut labelled = object.clone();
        labelled["metadata"]["labels"] = json!({"x": "y"});
        let patch = mutation(
            WebhookKind::Mutating,
            Some(&text),
            &verdict(true, Some(labelled)),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(
            patch,
            json!([{"op": "add", "path": "/metadata/labels", "value": {"x": "y"}}])
        );
        for (field, value) in [("name", "b"), ("namespace", "other"), ("uid", "u")] {
            let mut renamed = object.clone();
            renamed["metadata"][field] = json!(value);
            let e = mutation(
                WebhookKind::Mutating,
                Some(&text),
                &verdict(true, Some(renamed)),
            )
            .await
            .unwrap_err();
            assert!(e.contains(&format!("metadata.{field}")), "{e}");
        }
        assert_eq!(
            mutation(
                WebhookKind::Mutating,
                Some(&text),
                &verdict(true, Some(object.clone()))
            )
            .await,
            Ok(None)
        );
    }

    #[tokio::test]
    async fn a_mutation_is_refused_past_the_reviewed_objects_bound_or_the_patchs() {
        let metadata = json!({"name": "a", "namespace": "ns"});
        let big = json!({"metadata": metadata, "data": {"x": "y".repeat(MAX_PATCHED_BYTES)}});
        let text = serde_json::value::to_raw_value(&big).unwrap();
        let e = mutation(
            WebhookKind::Mutating,
            Some(&text),
            &verdict(true, Some(json!({"metadata": metadata}))),
        )
        .await
        .unwrap_err();
        assert!(
            e.contains("the reviewed object is") && e.contains("at most 3145728 bytes"),
            "{e}"
        );

        // Every element of a long array changed: one operation each.
        let many = patch::MAX_OPERATIONS + 1;
        let object = json!({"metadata": metadata, "a": vec![0; many]});
        let text = serde_json::value::to_raw_value(&object).unwrap();
        let flipped = json!({"metadata": metadata, "a": vec![1; many]});
        let e = mutation(
            WebhookKind::Mutating,
            Some(&text),
            &verdict(true, Some(flipped)),
        )
        .await
        .unwrap_err();
        assert!(e.contains("more than 10000 operations"), "{e}");
    }

    #[test]
    fn a_failure_denies_under_fail_allows_with_a_warning_under_ignore_and_monitor_only_notes() {
        let metrics = Metrics::new();
        let failed = |mode, policy| {
            respond(
                "p",
                &webhook(WebhookKind::Validating, policy),
                mode,
                WebhookKind::Validating,
                &head(),
                Outcome::Failed("guest trapped (deadline)\nwasm backtrace:\n  0: f".into()),
                &metrics,
            )
        };
        let fail = failed(AdmissionMode::Protect, FailurePolicy::Fail);
        assert_eq!(fail["allowed"], false);
        assert_eq!(fail["uid"], "u-1");
        assert!(
            fail["status"]["message"]
                .as_str()
                .unwrap()
                .contains("deadline")
        );
        let ignore = failed(AdmissionMode::Protect, FailurePolicy::Ignore);
        assert_eq!(ignore["allowed"], true);
        assert!(
            ignore["warnings"][0]
                .as_str()
                .unwrap()
                .contains("failurePolicy Ignore")
        );
        assert!(!ignore["warnings"][0].as_str().unwrap().contains('\n'));
        let monitor = failed(AdmissionMode::Monitor, FailurePolicy::Fail);
        assert_eq!(monitor["allowed"], true);
        assert!(
            monitor["auditAnnotations"]["monitor"]
                .as_str()
                .unwrap()
                .starts_with("would fail")
        );

        let denied = respond(
            "p",
            &webhook(WebhookKind::Validating, FailurePolicy::Fail),
            AdmissionMode::Monitor,
            WebhookKind::Validating,
            &head(),
            Outcome::Verdict(verdict(false, None), None),
            &metrics,
        );
        assert_eq!(denied["allowed"], true);
        assert_eq!(denied["auditAnnotations"]["monitor"], "would deny: no");
        assert!(metrics.encode().contains(
            "wasmctrl_webhook_decisions_total{plugin=\"p\",kind=\"validate\",decision=\"denied\",mode=\"monitor\"} 1"
        ));
    }

    #[test]
    fn a_body_that_is_not_an_admission_review_v1_is_refused_naming_why() {
        let refused = |body: &str| read(body.as_bytes()).unwrap_err().to_string();
        assert!(refused("{").contains("not an AdmissionReview v1"));
        assert!(
            refused(
                r#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}"#
            )
            .contains("v1beta1")
        );
        assert!(
            refused(
                r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}"#
            )
            .contains("missing field `uid`")
        );
        let body = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":{"a":1}}}"#;
        let (request, head) = read(body).unwrap();
        assert_eq!(
            (head.uid.as_str(), head.object.map(RawValue::get)),
            ("u", Some(r#"{"a":1}"#))
        );
        let long = format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"{}"}}}}"#,
            "u".repeat(MAX_UID_BYTES + 1)
        );
        assert!(
            refused(&long).contains("request.uid is 129 bytes"),
            "{}",
            refused(&long)
        );
        assert!(
            refused(r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"a\nb"}}"#)
                .contains("control characters")
        );
        assert_eq!(request.get(), r#"{"uid":"u","object":{"a":1}}"#);
    }

    #[test]
    fn the_guest_gets_the_api_servers_timeout_less_a_margin() {
        let w = webhook(WebhookKind::Validating, FailurePolicy::Fail);
        assert_eq!(budget(&w, None), Duration::from_secs(9));
        assert_eq!(
            budget(&w, Some(Duration::from_secs(1))),
            Duration::from_millis(750)
        );
        assert_eq!(
            budget(&w, Some(Duration::from_secs(60))),
            Duration::from_secs(9)
        );
        assert_eq!(
            parse_timeout(Some("timeout=2s")),
            Some(Duration::from_secs(2))
        );
        assert_eq!(parse_timeout(Some("x=1")), None);
    }
}
