//! API errors rendered as `metav1.Status`, the only error shape Kubernetes
//! clients understand (kube-rs maps `reason`/`code`, kubectl prints `message`,
//! the Python client raises `ApiException(status=code)`).

use serde_json::{Value, json};

use crate::values::go_quote;

/// The most causes one Invalid status lists.
pub(crate) const MAX_CAUSES: usize = 100;
/// The most bytes of one cause's message.
pub(crate) const MAX_CAUSE_MESSAGE: usize = 1024;

/// Causes as a write's checks find them: the first [`MAX_CAUSES`] kept
/// (each message cut to [`MAX_CAUSE_MESSAGE`]), the rest only counted, so
/// that a body of a million bad finalizers costs a hundred messages.
#[derive(Debug, Default)]
pub(crate) struct Causes {
    kept: Vec<Cause>,
    omitted: usize,
}

impl Causes {
    /// Adds the cause `make` builds, if there is room for it (else only
    /// counts it, without building it).
    pub(crate) fn add(&mut self, make: impl FnOnce() -> Cause) {
        if self.kept.len() < MAX_CAUSES {
            let mut cause = make();
            crate::values::cut_message(&mut cause.message, MAX_CAUSE_MESSAGE);
            self.kept.push(cause);
        } else {
            self.omitted += 1;
        }
    }

    /// The kept causes, and one more counting the others.
    pub(crate) fn into_vec(self) -> Vec<Cause> {
        let mut causes = self.kept;
        if self.omitted > 0 {
            causes.push(Cause {
                reason: "FieldValueInvalid".into(),
                message: format!(
                    "and {} more errors (at most {MAX_CAUSES} are listed)",
                    self.omitted
                ),
                field: String::new(),
            });
        }
        causes
    }
}

impl std::ops::Deref for Causes {
    type Target = [Cause];

    /// The kept causes.
    fn deref(&self) -> &[Cause] {
        &self.kept
    }
}

/// A single `details.causes[]` entry of a 422 Invalid (or SSA 409) status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cause {
    /// Machine-readable reason, e.g. `FieldValueInvalid`, `FieldValueRequired`.
    pub(crate) reason: String,
    /// Human-readable message for this field.
    pub(crate) message: String,
    /// JSON-path-like field, e.g. `metadata.name`.
    pub(crate) field: String,
}

/// Causes worded as upstream's `field.ErrorList` words them.
impl Cause {
    /// `FieldValueRequired`: "Required value", then `: detail` if any.
    pub(crate) fn required(field: &str, detail: &str) -> Cause {
        let message = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        Cause {
            reason: "FieldValueRequired".into(),
            message,
            field: field.into(),
        }
    }

    /// `FieldValueInvalid`, the value as the message shows it (`shown`:
    /// quoted for a string, Go's `%#v` for a struct or list).
    pub(crate) fn invalid(field: &str, shown: &str, detail: &str) -> Cause {
        Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {shown}: {detail}"),
            field: field.into(),
        }
    }

    /// `FieldValueNotSupported`, naming the values that are.
    pub(crate) fn not_supported(field: &str, value: &str, supported: &[&str]) -> Cause {
        let supported: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
        Cause {
            reason: "FieldValueNotSupported".into(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                go_quote(value),
                supported.join(", ")
            ),
            field: field.into(),
        }
    }

    /// `FieldValueForbidden`: "Forbidden: detail".
    pub(crate) fn forbidden(field: &str, detail: &str) -> Cause {
        Cause {
            reason: "FieldValueForbidden".into(),
            message: format!("Forbidden: {detail}"),
            field: field.into(),
        }
    }
}

/// An error the API answers with; every variant maps to one metav1.Status.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum ApiError {
    /// 404 for an object (`details` names it) or for an unknown path.
    #[error("{message}")]
    NotFound {
        message: String,
        name: Option<String>,
        group: String,
        kind: String,
    },
    /// 409 AlreadyExists on create.
    #[error("{message}")]
    AlreadyExists {
        message: String,
        name: String,
        group: String,
        kind: String,
    },
    /// 409 Conflict: stale resourceVersion, failed precondition, SSA conflict.
    #[error("{message}")]
    Conflict {
        message: String,
        name: String,
        group: String,
        kind: String,
        causes: Vec<Cause>,
    },
    /// 422 Invalid with per-field causes.
    #[error("{message}")]
    Invalid {
        message: String,
        name: String,
        group: String,
        kind: String,
        causes: Vec<Cause>,
    },
    /// 400 BadRequest.
    #[error("{0}")]
    BadRequest(String),
    /// 401 Unauthorized.
    #[error("Unauthorized")]
    Unauthorized,
    /// 403 Forbidden (e.g. creating in a terminating namespace).
    #[error("{message}")]
    Forbidden {
        message: String,
        name: String,
        group: String,
        kind: String,
    },
    /// 405 MethodNotAllowed.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// 415 UnsupportedMediaType.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 410 Expired (too old resourceVersion, stale continue token).
    #[error("{0}")]
    Expired(String),
    /// 500 InternalError.
    #[error("{0}")]
    Internal(String),
    /// 413 RequestEntityTooLarge; worded as the real server words it.
    #[error("Request entity too large: {0}")]
    RequestEntityTooLarge(String),
    /// 504 Timeout: the request did not complete in the allotted time.
    #[error("Timeout: {0}")]
    Timeout(String),
    /// A status someone else chose, answered as given: an admission
    /// webhook's denial (its code, reason and details, upstream's message).
    #[error("{message}")]
    Status {
        /// 400–599.
        code: u16,
        /// Empty when the webhook gave none (left out of the status).
        reason: String,
        message: String,
        /// `details`, when the webhook sent an object.
        details: Option<Value>,
    },
}

impl ApiError {
    /// 404 for a named object of `plural` in `group`.
    pub(crate) fn not_found(group: &str, plural: &str, name: &str) -> Self {
        let qualified = qualified(group, plural);
        ApiError::NotFound {
            message: format!("{qualified} {} not found", go_quote(name)),
            name: Some(name.to_string()),
            group: group.to_string(),
            kind: plural.to_string(),
        }
    }

    /// 404 for a path the server does not serve.
    pub(crate) fn no_route() -> Self {
        ApiError::NotFound {
            message: "the server could not find the requested resource".into(),
            name: None,
            group: String::new(),
            kind: String::new(),
        }
    }

    /// 409 AlreadyExists.
    pub(crate) fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        ApiError::AlreadyExists {
            message: format!(
                "{} {} already exists",
                qualified(group, plural),
                go_quote(name)
            ),
            name: name.to_string(),
            group: group.to_string(),
            kind: plural.to_string(),
        }
    }

    /// 504: the request's deadline passed before it was done, as
    /// upstream's handlers answer on a done context.
    pub(crate) fn request_timeout() -> Self {
        ApiError::Timeout(
            "request did not complete within requested timeout - context deadline exceeded".into(),
        )
    }

    /// 409 Conflict for a stale resourceVersion, worded as the real server does
    /// because some clients match on it.
    pub(crate) fn stale(group: &str, plural: &str, name: &str) -> Self {
        Self::conflict(
            group,
            plural,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 Conflict with a custom reason text.
    pub(crate) fn conflict(group: &str, plural: &str, name: &str, why: &str) -> Self {
        ApiError::Conflict {
            message: format!(
                "Operation cannot be fulfilled on {} {}: {why}",
                qualified(group, plural),
                go_quote(name)
            ),
            name: name.to_string(),
            group: group.to_string(),
            kind: plural.to_string(),
            causes: Vec::new(),
        }
    }

    /// 409 for a write whose uid precondition (`wanted`) is not the
    /// stored object's (`found`): it was deleted and recreated meanwhile.
    pub(crate) fn uid_precondition(
        group: &str,
        plural: &str,
        name: &str,
        wanted: &str,
        found: &str,
    ) -> Self {
        Self::conflict(
            group,
            plural,
            name,
            &format!(
                "Precondition failed: UID in precondition: {wanted}, UID in object meta: {found}"
            ),
        )
    }

    /// 422 Invalid; `kind` is the object's Kind (the real server words the
    /// message with the Kind, e.g. `ConfigMap "x" is invalid: ...`). At
    /// most [`MAX_CAUSES`] causes are listed (the rest counted in one
    /// more), each message cut to [`MAX_CAUSE_MESSAGE`] bytes.
    pub(crate) fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        // A list one check already cut (a hundred and its count) passes;
        // lists of several checks together are cut again.
        let causes = if causes.len() > MAX_CAUSES + 1 {
            let mut kept = Causes::default();
            for c in causes {
                kept.add(|| c);
            }
            kept.into_vec()
        } else {
            causes
                .into_iter()
                .map(|mut c| {
                    crate::values::cut_message(&mut c.message, MAX_CAUSE_MESSAGE);
                    c
                })
                .collect()
        };
        let summary = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        let summary = if causes.len() > 1 {
            format!("[{summary}]")
        } else {
            summary
        };
        ApiError::Invalid {
            message: format!(
                "{} {} is invalid: {summary}",
                qualified(group, kind),
                go_quote(name)
            ),
            name: name.to_string(),
            group: group.to_string(),
            kind: kind.to_string(),
            causes,
        }
    }

    /// HTTP status code of this error.
    pub(crate) fn code(&self) -> u16 {
        match self {
            ApiError::NotFound { .. } => 404,
            ApiError::AlreadyExists { .. } | ApiError::Conflict { .. } => 409,
            ApiError::Invalid { .. } => 422,
            ApiError::BadRequest(_) => 400,
            ApiError::Unauthorized => 401,
            ApiError::Forbidden { .. } => 403,
            ApiError::MethodNotAllowed(_) => 405,
            ApiError::UnsupportedMediaType(_) => 415,
            ApiError::Expired(_) => 410,
            ApiError::Internal(_) => 500,
            ApiError::RequestEntityTooLarge(_) => 413,
            ApiError::Timeout(_) => 504,
            ApiError::Status { code, .. } => *code,
        }
    }

    /// metav1.Status `reason`.
    pub(crate) fn reason(&self) -> &str {
        match self {
            ApiError::NotFound { .. } => "NotFound",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } => "Conflict",
            ApiError::Invalid { .. } => "Invalid",
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::Unauthorized => "Unauthorized",
            ApiError::Forbidden { .. } => "Forbidden",
            ApiError::MethodNotAllowed(_) => "MethodNotAllowed",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::Expired(_) => "Expired",
            ApiError::Internal(_) => "InternalError",
            ApiError::RequestEntityTooLarge(_) => "RequestEntityTooLarge",
            ApiError::Timeout(_) => "Timeout",
            ApiError::Status { reason, .. } => reason,
        }
    }

    /// The full metav1.Status object.
    pub(crate) fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        });
        let details = match self {
            ApiError::NotFound {
                name, group, kind, ..
            } => {
                if kind.is_empty() {
                    None
                } else {
                    Some(details(name.as_deref(), group, kind, &[]))
                }
            }
            ApiError::AlreadyExists {
                name, group, kind, ..
            }
            | ApiError::Forbidden {
                name, group, kind, ..
            } => Some(details(Some(name), group, kind, &[])),
            ApiError::Conflict {
                name,
                group,
                kind,
                causes,
                ..
            }
            | ApiError::Invalid {
                name,
                group,
                kind,
                causes,
                ..
            } => Some(details(Some(name), group, kind, causes)),
            ApiError::Status { details, .. } => details.clone(),
            _ => None,
        };
        if let Some(d) = details {
            status["details"] = d;
        }
        // Upstream's `omitempty`.
        if self.reason().is_empty()
            && let Some(m) = status.as_object_mut()
        {
            m.remove("reason");
        }
        status
    }
}

/// `metav1.StatusDetails`; empty fields are left out, as upstream's
/// `omitempty` does.
fn details(name: Option<&str>, group: &str, kind: &str, causes: &[Cause]) -> Value {
    let mut d = json!({});
    if let Some(name) = name.filter(|n| !n.is_empty()) {
        d["name"] = json!(name);
    }
    if !kind.is_empty() {
        d["kind"] = json!(kind);
    }
    if !group.is_empty() {
        d["group"] = json!(group);
    }
    if !causes.is_empty() {
        d["causes"] = causes_json(causes);
    }
    d
}

/// `causes` as `metav1.StatusDetails.causes`.
pub(crate) fn causes_json(causes: &[Cause]) -> Value {
    causes
        .iter()
        .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
        .collect()
}

/// `configmaps` for core, `deployments.apps` otherwise, as the server words it.
pub(crate) fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_status_matches_the_real_shape() {
        let s = ApiError::not_found("", "configmaps", "nope").to_status();
        assert_eq!(s["message"], "configmaps \"nope\" not found");
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["code"], 404);
        assert_eq!(s["details"]["kind"], "configmaps");
        assert!(s["details"].get("group").is_none());
        let s = ApiError::not_found("apps", "deployments", "d").to_status();
        assert_eq!(s["message"], "deployments.apps \"d\" not found");
        assert_eq!(s["details"]["group"], "apps");
    }

    #[test]
    fn invalid_message_names_the_kind() {
        let e = ApiError::invalid(
            "",
            "ConfigMap",
            "Bad",
            vec![Cause {
                reason: "FieldValueInvalid".into(),
                message: "Invalid value: \"Bad\"".into(),
                field: "metadata.name".into(),
            }],
        );
        assert_eq!(
            e.to_string(),
            "ConfigMap \"Bad\" is invalid: metadata.name: Invalid value: \"Bad\""
        );
        let e = ApiError::invalid("apps", "Deployment", "x", vec![]);
        assert!(
            e.to_string()
                .starts_with("Deployment.apps \"x\" is invalid")
        );
    }
}
