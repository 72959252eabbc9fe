//! Admission reviews in the sandbox: the webhooks a plugin declares (its
//! `webhooks` export) and the verdicts its `validate` and `mutate` exports
//! return, as host-owned types checked on the way in, and one review run
//! as a call of the plugin under a deadline, with a read-only host API.
//!
//! Everything a guest returns here reaches the API server and its client
//! (messages, warnings, annotations, a mutated object), so every string,
//! list and size is bounded before it leaves the sandbox; a verdict past a
//! bound is a failed review, which the webhook's failure policy answers.

use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::call::{self, Export, Returned};
pub use super::guest::Review;
use super::hostapi::{ApiError, KubeApi, KubeResponse, Layer, Layered, Next};
use super::plugin::Plugin;
pub use super::webhooks::{
    DEFAULT_TIMEOUT_SECONDS, FailurePolicy, MAX_RULE_ITEMS, MAX_RULES, MAX_TIMEOUT_SECONDS,
    Webhook, WebhookKind, WebhookRule,
};
use crate::control::metrics::{CallKind, CallUsage};
use crate::control::reconcile::ReconcileError;
use crate::meta::syntax as validate;
use crate::sandbox::wit::wasmctrl::reconciler::types;

/// Bytes of a verdict's message, and of each cause's message.
pub const MAX_MESSAGE_BYTES: usize = 4 << 10;
/// Field causes of one denial.
pub const MAX_CAUSES: usize = 64;
/// Warnings of one verdict, and bytes of each (kube-apiserver truncates
/// longer ones; the host refuses them, so the guest's author sees why).
pub const MAX_WARNINGS: usize = 16;
pub const MAX_WARNING_BYTES: usize = 512;
/// Audit annotations of one verdict, and bytes of each value.
pub const MAX_ANNOTATIONS: usize = 16;
pub const MAX_ANNOTATION_BYTES: usize = 1 << 10;
/// Bytes of a mutated object: kube-apiserver's own ceiling on a request
/// body, so whatever the host admits the API server could have been sent.
pub const MAX_PATCHED_BYTES: usize = 3 << 20;

/// A field a denial is about (an `Invalid` status cause).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldCause {
    pub field: String,
    pub reason: String,
    pub message: String,
}

/// What a review answered, checked against the bounds above.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    /// The HTTP status of a denial: 403 by default, 422 with causes.
    pub code: u16,
    pub message: String,
    pub causes: Vec<FieldCause>,
    pub warnings: Vec<String>,
    pub audit_annotations: Vec<(String, String)>,
    /// `mutate`: the object as it should be admitted (None: unchanged).
    pub patched: Option<String>,
}

/// Why a review produced no verdict.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    /// The guest trapped, ran out of time, or could not be run.
    #[error("{0}")]
    Failed(String),
    /// The guest's verdict broke a bound; the payload names it.
    #[error("the plugin's verdict was refused: {0}")]
    Refused(String),
}

impl Verdict {
    fn from_wit(r: types::AdmissionResponse, review: Review) -> Result<Self, String> {
        let bounded = |what: &str, text: &str, max: usize| {
            if text.len() > max {
                Err(format!(
                    "{what} is {} bytes; at most {max} are allowed",
                    text.len()
                ))
            } else {
                Ok(())
            }
        };
        // A denial's texts are printed by kubectl as they are: an escape
        // sequence in one would reach the terminal of whoever was denied.
        let printable = |what: &str, text: &str| {
            if validate::is_plain_text(text) {
                Ok(())
            } else {
                Err(format!(
                    "{what} holds a control character other than newline and tab"
                ))
            }
        };
        bounded("message", &r.message, MAX_MESSAGE_BYTES)?;
        printable("message", &r.message)?;
        if r.causes.len() > MAX_CAUSES {
            return Err(format!("{} causes; at most {MAX_CAUSES}", r.causes.len()));
        }
        for c in &r.causes {
            bounded("a cause's field", &c.field, 256)?;
            bounded("a cause's reason", &c.reason, 64)?;
            bounded("a cause's message", &c.message, MAX_MESSAGE_BYTES)?;
            printable("a cause's field", &c.field)?;
            printable("a cause's reason", &c.reason)?;
            printable("a cause's message", &c.message)?;
        }
        if r.warnings.len() > MAX_WARNINGS {
            return Err(format!(
                "{} warnings; at most {MAX_WARNINGS}",
                r.warnings.len()
            ));
        }
        for w in &r.warnings {
            bounded("a warning", w, MAX_WARNING_BYTES)?;
            // A warning travels in an HTTP header.
            if w.chars().any(char::is_control) {
                return Err("a warning holds a control character".into());
            }
        }
        if r.audit_annotations.len() > MAX_ANNOTATIONS {
            return Err(format!(
                "{} audit annotations; at most {MAX_ANNOTATIONS}",
                r.audit_annotations.len()
            ));
        }
        for (k, v) in &r.audit_annotations {
            // The API server files it as `<webhook>/<key>`, which must be
            // a qualified name: a key with a prefix of its own is dropped
            // there, so it is refused here, where the author sees why.
            if k.contains('/') {
                return Err(format!(
                    "audit annotation key {}: holds a '/'; the API server prefixes it with the webhook's name, so a key is a name alone (at most 63 letters, digits, '-', '_' or '.')",
                    validate::quoted(k)
                ));
            }
            validate::label_key(k).map_err(|e| format!("audit annotation key: {e}"))?;
            bounded("an audit annotation", v, MAX_ANNOTATION_BYTES)?;
        }
        if let Some(p) = &r.patched {
            if review == Review::Validate {
                return Err("`validate` returned a patched object; only `mutate` may".into());
            }
            bounded("the patched object", p, MAX_PATCHED_BYTES)?;
        }
        let code = match r.code {
            0 if r.causes.is_empty() => 403,
            0 => 422,
            c @ 400..=599 => c,
            c => return Err(format!("code {c} is not an HTTP error status (400–599)")),
        };
        Ok(Self {
            allowed: r.allowed,
            code,
            message: r.message,
            causes: r
                .causes
                .into_iter()
                .map(|c| FieldCause {
                    field: c.field,
                    reason: if c.reason.is_empty() {
                        "FieldValueInvalid".into()
                    } else {
                        c.reason
                    },
                    message: c.message,
                })
                .collect(),
            warnings: r.warnings,
            audit_annotations: r.audit_annotations,
            patched: r.patched,
        })
    }
}

/// The host API during a review: reads pass, every write is refused.
/// A webhook answers whether a change may happen; making changes of its
/// own while the API server waits would let it write what its own
/// review cannot see through, so it may not.
pub struct ReadOnly {
    review: Review,
}

impl Layer for ReadOnly {
    fn call<'a>(&'a self, next: Next<'a>) -> BoxFuture<'a, Result<KubeResponse, ApiError>> {
        if next.request.is_read() {
            return next.pass();
        }
        let refusal = ApiError::Forbidden(format!(
            "{} {}: the host API is read-only during an admission review ({}); write from `reconcile` instead",
            next.request.verb(),
            next.request.address().kind.kind,
            match self.review {
                Review::Validate => "validate",
                Review::Mutate => "mutate",
            }
        ));
        Box::pin(async move { Err(refusal) })
    }
}

impl Plugin {
    /// The webhooks the plugin serves (empty when it serves none).
    pub fn webhooks(&self) -> &[Webhook] {
        &self.metadata().webhooks
    }

    /// Runs one admission review: the plugin's `validate` or `mutate`
    /// export with `request` (an AdmissionReview v1 `request`, JSON), in an
    /// instance from its strategy, under `timeout` and `cancel`, with reads
    /// of the plugin's grant and no writes. Never panics and never leaves
    /// the guest running. The call's cost is recorded in the plugin's
    /// metrics, with the `kind` label of its export.
    pub async fn review(
        &self,
        review: Review,
        request: String,
        timeout: Duration,
        cancel: CancellationToken,
    ) -> (Result<Verdict, ReviewError>, CallUsage) {
        let mut context = call::context(0, timeout, cancel);
        let read_only: std::sync::Arc<dyn KubeApi> =
            std::sync::Arc::new(Layered::new(ReadOnly { review }, self.kube().clone()));
        context.kube = Some(read_only);
        context.reviewing = true;
        let report = self
            .sandbox
            .call(Export::Review(review, request), context)
            .await;
        let kind = match review {
            Review::Validate => CallKind::Validate,
            Review::Mutate => CallKind::Mutate,
        };
        self.observe(kind, &report.usage);
        let metrics = self.sandbox.runtime.metrics();
        let result = match report.result {
            Ok(Returned::Review(response)) => {
                Verdict::from_wit(response, review).map_err(|message| {
                    metrics.count_limit(self.name(), "admissionVerdict");
                    ReviewError::Refused(message)
                })
            }
            Ok(_) => unreachable!("a review returns a verdict"),
            Err(failure) => Err(ReviewError::Failed(
                ReconcileError::from(failure).to_string(),
            )),
        };
        (result, report.usage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response() -> types::AdmissionResponse {
        types::AdmissionResponse {
            allowed: false,
            code: 0,
            message: "no".into(),
            causes: vec![],
            warnings: vec![],
            audit_annotations: vec![],
            patched: None,
        }
    }

    #[test]
    fn a_verdict_past_a_bound_is_refused_naming_the_bound() {
        let refused = |change: fn(&mut types::AdmissionResponse), review| {
            let mut r = response();
            change(&mut r);
            Verdict::from_wit(r, review).unwrap_err()
        };
        assert!(
            refused(
                |r| r.message = "x".repeat(MAX_MESSAGE_BYTES + 1),
                Review::Validate
            )
            .contains("message is 4097 bytes")
        );
        assert!(
            refused(|r| r.warnings = vec!["w".into(); 17], Review::Validate)
                .contains("17 warnings")
        );
        assert!(
            refused(
                |r| r.warnings = vec!["a\r\nSet-Cookie: x".into()],
                Review::Validate
            )
            .contains("control character")
        );
        assert!(
            refused(
                |r| r.message = "denied \u{1b}]0;owned\u{7}".into(),
                Review::Validate
            )
            .contains("message holds a control character")
        );
        assert!(
            refused(
                |r| r.causes = vec![types::FieldCause {
                    field: "spec".into(),
                    reason: String::new(),
                    message: "bad\u{9b}2J".into(),
                }],
                Review::Validate
            )
            .contains("a cause's message holds a control character")
        );
        let mut multiline = response();
        multiline.message = "first line\n\tsecond".into();
        assert!(Verdict::from_wit(multiline, Review::Validate).is_ok());
        assert!(
            refused(|r| r.patched = Some("{}".into()), Review::Validate).contains("only `mutate`")
        );
        assert!(
            refused(
                |r| r.patched = Some("x".repeat(MAX_PATCHED_BYTES + 1)),
                Review::Mutate
            )
            .contains("the patched object is")
        );
        assert!(refused(|r| r.code = 200, Review::Validate).contains("code 200"));
        assert!(
            refused(
                |r| r.audit_annotations = vec![("example.com/reason".into(), "x".into())],
                Review::Validate
            )
            .contains("audit annotation key \"example.com/reason\": holds a '/'")
        );
        let mut keyed = response();
        keyed.audit_annotations = vec![("reason".into(), "x".into())];
        assert!(Verdict::from_wit(keyed, Review::Validate).is_ok());
        let v = Verdict::from_wit(response(), Review::Validate).unwrap();
        assert_eq!(v.code, 403);
        let mut r = response();
        r.causes = vec![types::FieldCause {
            field: "spec.replicas".into(),
            reason: String::new(),
            message: "too many".into(),
        }];
        let v = Verdict::from_wit(r, Review::Validate).unwrap();
        assert_eq!(
            (v.code, v.causes[0].reason.as_str()),
            (422, "FieldValueInvalid")
        );
    }
}
