//! Admission webhooks: validate and default objects before the API server
//! stores them, in the spirit of controller-runtime's `CustomValidator`
//! and `CustomDefaulter`.
//!
//! A plugin implements [`Validator`] and/or [`Defaulter`] for one kind and
//! names them in [`export_reconciler!`](crate::export_reconciler):
//!
//! ```no_run
//! # use wasmctrl_sdk::k8s_openapi::api::core::v1::ConfigMap;
//! # use wasmctrl_sdk::{Action, Context, Error, Metadata, ObjectKey, Reconciler, Resource};
//! use wasmctrl_sdk::admission::{AdmissionRequest, Denied, Defaulter, FieldErrors, Validator, Warnings};
//! # struct Hello;
//! # impl Reconciler for Hello {
//! #     fn metadata() -> Metadata { Metadata::new("hello", "0.1.0", ConfigMap::gvk()) }
//! #     fn reconcile(_: ObjectKey, _: &Context) -> Result<Action, Error> { Ok(Action::done()) }
//! # }
//! struct HelloAdmission;
//!
//! impl Validator for HelloAdmission {
//!     type Kind = ConfigMap;
//!
//!     fn validate_create(cm: &ConfigMap, _: &AdmissionRequest) -> Result<Warnings, Denied> {
//!         let mut errors = FieldErrors::new();
//!         if cm.data.as_ref().is_some_and(|d| d.len() > 10) {
//!             errors.invalid("data", cm.data.as_ref().map_or(0, |d| d.len()), "at most 10 keys");
//!         }
//!         errors.into_result(cm)?;
//!         Ok(Warnings::new())
//!     }
//! }
//!
//! impl Defaulter for HelloAdmission {
//!     type Kind = ConfigMap;
//!
//!     fn default(cm: &mut ConfigMap, _: &AdmissionRequest) -> Result<(), Denied> {
//!         cm.data.get_or_insert_with(Default::default);
//!         Ok(())
//!     }
//! }
//!
//! wasmctrl_sdk::export_reconciler!(Hello, validator: HelloAdmission, defaulter: HelloAdmission);
//! ```
//!
//! The host serves each as a webhook (`/validate/<plugin>`, `/mutate/<plugin>`)
//! for the rules of [`Validator::webhook`] / [`Defaulter::webhook`], which
//! must stay within the plugin's permissions: reviewing an object is
//! reading it. During a review the host API is read-only; a write is
//! refused as `forbidden`. A defaulter returns the whole object; the host
//! computes the patch the API server applies, and refuses a change of the
//! object's name, namespace, uid, kind or apiVersion.

use std::fmt;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::Resource;
use crate::bindings::wasmctrl::reconciler::types as wit;

/// An operation a webhook reviews.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    /// The name admissionregistration.k8s.io/v1 uses (`CREATE`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "CREATE" => Operation::Create,
            "UPDATE" => Operation::Update,
            "DELETE" => Operation::Delete,
            "CONNECT" => Operation::Connect,
            _ => return None,
        })
    }
}

/// Which objects a webhook reviews, and how the API server treats it.
/// Built from [`Webhook::for_kind`]; the SDK sets whether it validates or
/// mutates.
#[derive(Debug, Clone)]
pub struct Webhook {
    rules: Vec<wit::WebhookRule>,
    ignore_failures: bool,
    timeout_seconds: u32,
    namespace_selector: Option<String>,
    object_selector: Option<String>,
}

impl Webhook {
    /// Reviews `operations` on `K` (any version of its group is matched
    /// only as `K`'s own version).
    pub fn for_kind<K: Resource>(operations: &[Operation]) -> Self {
        Self {
            rules: Vec::new(),
            ignore_failures: false,
            timeout_seconds: 0,
            namespace_selector: None,
            object_selector: None,
        }
        .rule(K::group(), K::version(), &[K::plural()], operations)
    }

    /// Also reviews `operations` on `resources` of `group`/`version`
    /// (plural names, `name/subresource`, or `*`).
    pub fn rule(
        mut self,
        group: &str,
        version: &str,
        resources: &[&str],
        operations: &[Operation],
    ) -> Self {
        self.rules.push(wit::WebhookRule {
            operations: operations.iter().map(|o| o.as_str().into()).collect(),
            groups: vec![group.into()],
            versions: vec![version.into()],
            resources: resources.iter().map(|r| r.to_string()).collect(),
            scope: wit::RuleScope::Any,
        });
        self
    }

    /// Allow requests (with a warning) when the plugin cannot answer:
    /// failurePolicy `Ignore`. The default, `Fail`, denies them.
    pub fn ignore_failures(mut self) -> Self {
        self.ignore_failures = true;
        self
    }

    /// The API server's budget for one review, 1–30 s (default 10).
    pub fn timeout_seconds(mut self, seconds: u32) -> Self {
        self.timeout_seconds = seconds;
        self
    }

    /// Only objects in namespaces whose labels match `selector`
    /// (`env in (prod)`).
    pub fn namespace_selector(mut self, selector: &str) -> Self {
        self.namespace_selector = Some(selector.into());
        self
    }

    /// Only objects whose labels (or whose old object's labels) match
    /// `selector`.
    pub fn object_selector(mut self, selector: &str) -> Self {
        self.object_selector = Some(selector.into());
        self
    }

    fn into_wit(self, kind: wit::WebhookKind) -> wit::Webhook {
        wit::Webhook {
            kind,
            rules: self.rules,
            failure_policy: if self.ignore_failures {
                wit::FailurePolicy::Ignore
            } else {
                wit::FailurePolicy::Fail
            },
            timeout_seconds: self.timeout_seconds,
            namespace_selector: self.namespace_selector,
            object_selector: self.object_selector,
        }
    }
}

/// Who made the request under review.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub username: String,
    pub groups: Vec<String>,
}

/// The request under review (AdmissionReview v1's `request`). The objects
/// it carries reach a [`Validator`] or [`Defaulter`] typed, as arguments.
#[derive(Debug, Clone)]
pub struct AdmissionRequest {
    pub uid: String,
    pub operation: Operation,
    /// The object's name ("" for a create with `generateName`).
    pub name: String,
    pub namespace: Option<String>,
    /// `status`, `scale`, … for a request on a subresource.
    pub sub_resource: Option<String>,
    pub user: UserInfo,
    /// True when nothing will be stored (`--dry-run=server`).
    pub dry_run: bool,
}

/// An AdmissionReview v1 `request` as sent, its objects read as `O`: the
/// typed kind for a validation (one parse, no tree), a JSON value for a
/// mutation (whose unknown fields must be kept).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", bound = "O: DeserializeOwned")]
struct Wire<O> {
    #[serde(default)]
    uid: String,
    #[serde(default)]
    operation: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    user_info: WireUser,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    object: Option<O>,
    #[serde(default)]
    old_object: Option<O>,
}

#[derive(Default, serde::Deserialize)]
struct WireUser {
    #[serde(default)]
    username: String,
    #[serde(default)]
    groups: Vec<String>,
}

/// The request and its objects, read from the review's JSON.
type Read<O> = (AdmissionRequest, Option<O>, Option<O>);

fn read<O: DeserializeOwned>(request: &str) -> Result<Read<O>, Denied> {
    let w: Wire<O> = serde_json::from_str(request)
        .map_err(|e| Denied::bad_request(format!("cannot read the admission request: {e}")))?;
    let operation = Operation::parse(&w.operation)
        .ok_or_else(|| Denied::bad_request(format!("unknown operation {:?}", w.operation)))?;
    let request = AdmissionRequest {
        uid: w.uid,
        operation,
        name: w.name,
        namespace: w.namespace.filter(|n| !n.is_empty()),
        sub_resource: w.sub_resource.filter(|s| !s.is_empty()),
        user: UserInfo {
            username: w.user_info.username,
            groups: w.user_info.groups,
        },
        dry_run: w.dry_run,
    };
    Ok((request, w.object, w.old_object))
}

impl AdmissionRequest {
    /// Reads an AdmissionReview v1 `request` (its objects are not kept).
    pub fn from_json(request: &str) -> Result<Self, Denied> {
        read::<serde::de::IgnoredAny>(request).map(|(r, _, _)| r)
    }

    /// The review's context: its deadline (the webhook's `timeoutSeconds`
    /// less the host's margin), cancellation and the plugin's settings.
    pub fn context(&self) -> crate::Context {
        crate::Context::current()
    }
}

/// Warnings shown to the client, allowed or not (at most 16, each at most
/// 512 bytes, no control characters: the host refuses more).
pub type Warnings = Vec<String>;

/// A field a denial is about.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cause {
    field: String,
    reason: String,
    message: String,
}

/// A denied request: the status the API server answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    code: u16,
    message: String,
    causes: Vec<Cause>,
}

impl Denied {
    /// Denied with 403 Forbidden: `admission webhook "…" denied the
    /// request: MESSAGE`.
    pub fn new(message: impl Into<String>) -> Self {
        Self::with_code(403, message)
    }

    /// Denied with another HTTP error status (400–599).
    pub fn with_code(code: u16, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            causes: Vec::new(),
        }
    }

    fn bad_request(message: String) -> Self {
        Self::with_code(400, message)
    }

    pub fn code(&self) -> u16 {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// The fields the denial is about, as `(field, message)`.
    pub fn causes(&self) -> Vec<(String, String)> {
        self.causes
            .iter()
            .map(|c| (c.field.clone(), c.message.clone()))
            .collect()
    }

    #[cfg(all(any(test, feature = "testing"), not(target_arch = "wasm32")))]
    pub(crate) fn from_wit(r: wit::AdmissionResponse) -> Self {
        Self {
            code: r.code,
            message: r.message,
            causes: r
                .causes
                .into_iter()
                .map(|c| Cause {
                    field: c.field,
                    reason: c.reason,
                    message: c.message,
                })
                .collect(),
        }
    }

    fn into_wit(self, warnings: Warnings) -> wit::AdmissionResponse {
        wit::AdmissionResponse {
            allowed: false,
            code: self.code,
            message: self.message,
            causes: self
                .causes
                .into_iter()
                .map(|c| wit::FieldCause {
                    field: c.field,
                    reason: c.reason,
                    message: c.message,
                })
                .collect(),
            warnings,
            audit_annotations: Vec::new(),
            patched: None,
        }
    }
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Denied {}

/// A failed read of the cluster during a review denies the request with
/// 500, as controller-runtime's webhooks answer an error.
impl From<crate::Error> for Denied {
    fn from(e: crate::Error) -> Self {
        Self::with_code(500, e.message())
    }
}

impl From<crate::ApiError> for Denied {
    fn from(e: crate::ApiError) -> Self {
        Self::from(crate::Error::from(e))
    }
}

/// Field errors, rendered as the API server renders its own validation:
/// `WebApp.example.com "web" is invalid: spec.replicas: Invalid value: 51:
/// must be between 0 and 50` (status 422, reason Invalid, one cause per
/// field).
#[derive(Debug, Clone, Default)]
pub struct FieldErrors {
    causes: Vec<Cause>,
}

impl FieldErrors {
    pub fn new() -> Self {
        Self::default()
    }

    fn push(&mut self, field: &str, reason: &str, message: String) {
        self.causes.push(Cause {
            field: field.into(),
            reason: reason.into(),
            message,
        });
    }

    /// `field` has a value that is not allowed.
    pub fn invalid(&mut self, field: &str, value: impl serde::Serialize, detail: &str) {
        let value = serde_json::to_string(&value).unwrap_or_default();
        self.push(
            field,
            "FieldValueInvalid",
            format!("Invalid value: {value}: {detail}"),
        );
    }

    /// `field` must be set.
    pub fn required(&mut self, field: &str, detail: &str) {
        let message = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        self.push(field, "FieldValueRequired", message);
    }

    /// `field` may not be set (or changed) here.
    pub fn forbidden(&mut self, field: &str, detail: &str) {
        self.push(field, "FieldValueForbidden", format!("Forbidden: {detail}"));
    }

    /// `field` holds a value outside `supported`.
    pub fn not_supported(&mut self, field: &str, value: &str, supported: &[&str]) {
        let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        self.push(
            field,
            "FieldValueNotSupported",
            format!(
                "Unsupported value: {value:?}: supported values: {}",
                supported.join(", ")
            ),
        );
    }

    pub fn is_empty(&self) -> bool {
        self.causes.is_empty()
    }

    /// Ok when there are no errors; otherwise the denial of `object`, as
    /// the API server's `Invalid` status.
    pub fn into_result<K: Resource>(self, object: &K) -> Result<(), Denied> {
        if self.causes.is_empty() {
            return Ok(());
        }
        let kind = match K::group() {
            "" => K::kind().to_string(),
            group => format!("{}.{group}", K::kind()),
        };
        let errors: Vec<String> = self
            .causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let errors = match errors.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        Err(Denied {
            code: 422,
            message: format!("{kind} {:?} is invalid: {errors}", object.name()),
            causes: self.causes,
        })
    }
}

/// Validates objects of one kind (a validating webhook).
pub trait Validator {
    type Kind: Resource;

    /// Which requests to review; default: creates and updates of `Kind`.
    fn webhook() -> Webhook {
        Webhook::for_kind::<Self::Kind>(&[Operation::Create, Operation::Update])
    }

    fn validate_create(object: &Self::Kind, request: &AdmissionRequest)
    -> Result<Warnings, Denied>;

    /// Default: the new object is validated as on create.
    fn validate_update(
        old: &Self::Kind,
        new: &Self::Kind,
        request: &AdmissionRequest,
    ) -> Result<Warnings, Denied> {
        let _ = old;
        Self::validate_create(new, request)
    }

    /// Default: allowed (reviewed only if [`Validator::webhook`] names
    /// DELETE).
    fn validate_delete(
        object: &Self::Kind,
        request: &AdmissionRequest,
    ) -> Result<Warnings, Denied> {
        let _ = (object, request);
        Ok(Warnings::new())
    }
}

/// Sets defaults on objects of one kind (a mutating webhook).
pub trait Defaulter {
    type Kind: Resource;

    /// Which requests to review; default: creates and updates of `Kind`.
    fn webhook() -> Webhook {
        Webhook::for_kind::<Self::Kind>(&[Operation::Create, Operation::Update])
    }

    /// Changes `object` as it should be admitted; a denial refuses it.
    fn default(object: &mut Self::Kind, request: &AdmissionRequest) -> Result<(), Denied>;
}

fn decode<K: DeserializeOwned>(object: &Value, what: &str) -> Result<K, Denied> {
    K::deserialize(object).map_err(|e| Denied::bad_request(format!("cannot read the {what}: {e}")))
}

fn allowed(warnings: Warnings, patched: Option<String>) -> wit::AdmissionResponse {
    wit::AdmissionResponse {
        allowed: true,
        code: 0,
        message: String::new(),
        causes: Vec::new(),
        warnings,
        audit_annotations: Vec::new(),
        patched,
    }
}

/// What [`Validator`] answers to one request.
#[doc(hidden)]
pub fn validate<V: Validator>(request: &str) -> wit::AdmissionResponse {
    let run = || -> Result<Warnings, Denied> {
        let (request, object, old) = read::<V::Kind>(request)?;
        let present = |o: Option<V::Kind>, what: &str| {
            o.ok_or_else(|| Denied::bad_request(format!("the request has no {what}")))
        };
        match request.operation {
            Operation::Create | Operation::Connect => {
                V::validate_create(&present(object, "object")?, &request)
            }
            Operation::Update => V::validate_update(
                &present(old, "old object")?,
                &present(object, "object")?,
                &request,
            ),
            Operation::Delete => V::validate_delete(&present(old, "old object")?, &request),
        }
    };
    match run() {
        Ok(warnings) => allowed(warnings, None),
        Err(denied) => denied.into_wit(Vec::new()),
    }
}

/// What [`Defaulter`] answers to one request: the object as `Kind` sees
/// it after the defaulter ran, so defaults `Kind` declares itself (serde
/// defaults) are admitted too. Fields `Kind` does not know are kept as the
/// request had them; only a field `Kind` reads and the defaulter removed is
/// removed.
#[doc(hidden)]
pub fn mutate<D: Defaulter>(request: &str) -> wit::AdmissionResponse {
    let run = || -> Result<Option<String>, Denied> {
        let (request, raw, _) = read::<Value>(request)?;
        let Some(raw) = raw.filter(|o| !o.is_null()) else {
            return Ok(None);
        };
        let write = |o: &D::Kind| {
            serde_json::to_value(o)
                .map_err(|e| Denied::with_code(500, format!("cannot write the object: {e}")))
        };
        let mut object: D::Kind = decode(&raw, "object")?;
        let typed = write(&object)?;
        D::default(&mut object, &request)?;
        let change = merge_diff(&raw, &typed, &write(&object)?);
        if change.as_object().is_some_and(|c| c.is_empty()) {
            return Ok(None);
        }
        let mut patched = raw;
        wasmctrl_apimachinery::patch::merge_patch(&mut patched, &change);
        Ok(Some(patched.to_string()))
    };
    match run() {
        Ok(patched) => allowed(Vec::new(), patched),
        Err(denied) => denied.into_wit(Vec::new()),
    }
}

/// The JSON merge patch (RFC 7386) that turns `raw` into `after`, except
/// that a member of `raw` missing from `after` is removed only where `read`
/// (what the typed object read of `raw`) had it: a member the type never
/// read was not removed by anyone. Arrays and scalars are replaced whole.
fn merge_diff(raw: &Value, read: &Value, after: &Value) -> Value {
    match (raw, after) {
        (Value::Object(r), Value::Object(a)) => {
            let mut patch = serde_json::Map::new();
            for (k, av) in a {
                match r.get(k) {
                    Some(rv) if rv == av => {}
                    Some(rv @ Value::Object(_)) if av.is_object() => {
                        let d = merge_diff(rv, read.get(k).unwrap_or(&Value::Null), av);
                        if d.as_object().is_none_or(|d| !d.is_empty()) {
                            patch.insert(k.clone(), d);
                        }
                    }
                    _ => {
                        patch.insert(k.clone(), av.clone());
                    }
                }
            }
            for k in r.keys() {
                if !a.contains_key(k) && read.get(k).is_some() {
                    patch.insert(k.clone(), Value::Null);
                }
            }
            Value::Object(patch)
        }
        _ => after.clone(),
    }
}

/// The webhook declarations of the plugin's validator and defaulter.
#[doc(hidden)]
pub fn validating<V: Validator>() -> wit::Webhook {
    V::webhook().into_wit(wit::WebhookKind::Validating)
}

#[doc(hidden)]
pub fn mutating<D: Defaulter>() -> wit::Webhook {
    D::webhook().into_wit(wit::WebhookKind::Mutating)
}

/// The answer of an export the plugin serves no webhook for: the host
/// calls it only for a declared webhook, so this is a host's mistake.
#[doc(hidden)]
pub fn not_served(export: &str) -> wit::AdmissionResponse {
    Denied::with_code(
        500,
        format!("this plugin declares no webhook that `{export}` answers"),
    )
    .into_wit(Vec::new())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_defaulter_changes_what_it_changed_and_keeps_what_its_type_never_read() {
        let raw =
            json!({"a": 1, "b": {"c": 2, "d": 3, "x": 0}, "e": [1], "gone": true, "unknown": 7});
        let read = json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1], "gone": true, "dflt": 1});
        let after = json!({"a": 1, "b": {"c": 5, "d": 3}, "e": [1, 2], "new": "x", "dflt": 1});
        let diff = merge_diff(&raw, &read, &after);
        assert_eq!(
            diff,
            json!({"b": {"c": 5}, "e": [1, 2], "new": "x", "gone": null, "dflt": 1})
        );
        let mut patched = raw.clone();
        wasmctrl_apimachinery::patch::merge_patch(&mut patched, &diff);
        assert_eq!(
            patched,
            json!({"a": 1, "b": {"c": 5, "d": 3, "x": 0}, "e": [1, 2], "new": "x", "unknown": 7, "dflt": 1})
        );
    }
}
