//! The APIs that answer questions instead of storing objects, all answered
//! from the same authenticator and authorizer the requests themselves go
//! through:
//!
//! - `authorization.k8s.io/v1`: SelfSubjectAccessReview (`kubectl auth
//!   can-i`), SubjectAccessReview, LocalSubjectAccessReview and
//!   SelfSubjectRulesReview (`kubectl auth can-i --list`);
//! - `authentication.k8s.io/v1`: SelfSubjectReview (`kubectl auth whoami`)
//!   and TokenReview;
//! - the TokenRequest subresource `serviceaccounts/NAME/token` (`kubectl
//!   create token`), which issues service-account tokens.

use serde_json::{Value, json};

use super::Auth;
use super::identity::UserInfo;
use super::mode::Authorization;
use super::rbac::{Attributes, PolicyRule, Resolver};
use super::sa_token::{self, BoundObject, Claims};
use crate::error::{ApiError, Cause};
use crate::metrics::{Limit, Metrics};
use crate::registry::resources::{GroupResource, ResourceInfo};
use crate::values::go_quote;

/// Most audiences a TokenRequest or TokenReview may name.
const MAX_AUDIENCES: usize = 100;
/// Longest audience accepted.
const MAX_AUDIENCE_BYTES: usize = 1024;
/// Most groups (and extra values) a SubjectAccessReview may name.
const MAX_REVIEW_GROUPS: usize = 1000;

fn invalid_cause(field: &str, value: &str, message: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {value}: {message}"),
        field: field.into(),
    }
}

fn str_field<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or("")
}

/// A present, non-null object field.
fn object_field<'a>(v: &'a Value, field: &str) -> Option<&'a Value> {
    v.get(field).filter(|f| !f.is_null())
}

/// A list of strings, bounded in count and size, or a 400 naming it.
/// A list of strings at `v[field]`, at most `max` of them; a longer one is
/// refused and counted under `limit`.
fn string_list(
    v: &Value,
    field: &str,
    max: usize,
    (metrics, limit): (&Metrics, Limit),
) -> Result<Vec<String>, ApiError> {
    let Some(list) = object_field(v, field) else {
        return Ok(Vec::new());
    };
    let items = list
        .as_array()
        .ok_or_else(|| ApiError::BadRequest(format!("{field} must be a list of strings")))?;
    if items.len() > max {
        metrics.exceeded(limit);
        return Err(ApiError::BadRequest(format!(
            "{field} has {} items; at most {max} are accepted",
            items.len()
        )));
    }
    items
        .iter()
        .map(|i| {
            i.as_str()
                .map(str::to_string)
                .ok_or_else(|| ApiError::BadRequest(format!("{field} must be a list of strings")))
        })
        .collect()
}

/// Answers a review resource (`info.review`); `namespace` is the URL's.
pub(crate) fn answer(
    auth: &Auth,
    info: &ResourceInfo,
    user: &UserInfo,
    namespace: Option<&str>,
    mut body: Value,
) -> Result<Value, ApiError> {
    let status = match info.kind.as_str() {
        "SelfSubjectAccessReview" => {
            let attrs = access_attributes(info, &body["spec"])?;
            access_status(auth, user, &attrs)
        }
        "SubjectAccessReview" | "LocalSubjectAccessReview" => {
            let local = info.kind == "LocalSubjectAccessReview";
            if local {
                // As for any namespaced create: the URL's namespace fills
                // an empty metadata.namespace and must equal a given one.
                let ns = namespace.unwrap_or("");
                if ns.is_empty() {
                    return Err(ApiError::BadRequest(
                        "namespace is required on this type: ".into(),
                    ));
                }
                match str_field(&body["metadata"], "namespace") {
                    "" => {
                        crate::values::metadata_mut(&mut body)
                            .insert("namespace".into(), json!(ns));
                    }
                    given if given != ns => {
                        return Err(ApiError::BadRequest(
                            "the namespace of the provided object does not match the namespace sent on the request"
                                .into(),
                        ));
                    }
                    _ => {}
                }
            }
            let spec = &body["spec"];
            let mut causes = Vec::new();
            let subject = UserInfo {
                name: str_field(spec, "user").to_string(),
                uid: str_field(spec, "uid").to_string(),
                groups: string_list(
                    spec,
                    "groups",
                    MAX_REVIEW_GROUPS,
                    (&auth.objects.metrics, Limit::ReviewLists),
                )?,
                extra: extra(spec, &auth.objects.metrics)?,
            };
            match access_attributes(info, spec) {
                Err(ApiError::Invalid { causes: c, .. }) => causes.extend(c),
                Err(e) => return Err(e),
                Ok(_) => {}
            }
            if subject.name.is_empty() && subject.groups.is_empty() {
                causes.push(invalid_cause(
                    "spec.user",
                    "\"\"",
                    "at least one of user or group must be specified",
                ));
            }
            if local {
                local_review_causes(&body, &mut causes);
            }
            if !causes.is_empty() {
                return Err(ApiError::invalid(&info.group, &info.kind, "", causes));
            }
            let attrs = access_attributes(info, spec)?;
            access_status(auth, &subject, &attrs)
        }
        "SelfSubjectRulesReview" => {
            let ns = str_field(&body["spec"], "namespace");
            if ns.is_empty() {
                return Err(ApiError::BadRequest("no namespace on request".into()));
            }
            let status = rules_status(auth, user, ns);
            // Upstream answers with a new object: the status alone.
            body = json!({"metadata": {"creationTimestamp": null}, "spec": {}});
            status
        }
        "SelfSubjectReview" => {
            body["metadata"] = json!({"creationTimestamp": crate::values::now_rfc3339()});
            json!({"userInfo": user.to_json()})
        }
        "TokenReview" => token_review(auth, &body["spec"])?,
        other => return Err(ApiError::Internal(format!("no review answers {other}"))),
    };
    body["apiVersion"] = json!(info.api_version());
    body["kind"] = json!(info.kind);
    if !body["metadata"].is_object() {
        body["metadata"] = json!({"creationTimestamp": null});
    }
    body["status"] = status;
    Ok(body)
}

/// `spec.extra` of a SubjectAccessReview: key → list of values.
fn extra(
    spec: &Value,
    metrics: &Metrics,
) -> Result<std::collections::BTreeMap<String, Vec<String>>, ApiError> {
    let mut out = std::collections::BTreeMap::new();
    let Some(map) = object_field(spec, "extra") else {
        return Ok(out);
    };
    let map = map
        .as_object()
        .ok_or_else(|| ApiError::BadRequest("spec.extra must be a map of string lists".into()))?;
    if map.len() > MAX_REVIEW_GROUPS {
        metrics.exceeded(Limit::ReviewLists);
        return Err(ApiError::BadRequest(format!(
            "spec.extra has {} keys; at most {MAX_REVIEW_GROUPS} are accepted",
            map.len()
        )));
    }
    for (k, v) in map {
        let values = v.as_array().ok_or_else(|| {
            ApiError::BadRequest("spec.extra must be a map of string lists".into())
        })?;
        // The key is the client's: it is named only by its length.
        if values.len() > MAX_REVIEW_GROUPS {
            metrics.exceeded(Limit::ReviewLists);
            return Err(ApiError::BadRequest(format!(
                "spec.extra has a key ({} bytes) with {} values; at most {MAX_REVIEW_GROUPS} are accepted",
                k.len(),
                values.len()
            )));
        }
        let values = values
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                ApiError::BadRequest("spec.extra must be a map of string lists".into())
            })?;
        out.insert(k.clone(), values);
    }
    Ok(out)
}

/// The metadata and attributes a LocalSubjectAccessReview may carry.
fn local_review_causes(body: &Value, causes: &mut Vec<Cause>) {
    if object_field(&body["spec"], "nonResourceAttributes").is_some() {
        causes.push(invalid_cause(
            "spec.nonResourceAttributes",
            "{...}",
            "disallowed on this kind of request",
        ));
    }
    if let Some(ra) = object_field(&body["spec"], "resourceAttributes") {
        let (spec_ns, meta_ns) = (
            str_field(ra, "namespace"),
            str_field(&body["metadata"], "namespace"),
        );
        if spec_ns != meta_ns {
            causes.push(invalid_cause(
                "spec.resourceAttributes.namespace",
                &go_quote(spec_ns),
                "must match metadata.namespace",
            ));
        }
    }
}

/// The attributes an access review's spec asks about; exactly one of
/// `resourceAttributes` and `nonResourceAttributes` (else 422).
fn access_attributes(info: &ResourceInfo, spec: &Value) -> Result<Attributes, ApiError> {
    let resource = object_field(spec, "resourceAttributes");
    let non_resource = object_field(spec, "nonResourceAttributes");
    let cause = match (resource, non_resource) {
        (Some(_), Some(_)) => Some(invalid_cause(
            "spec.nonResourceAttributes",
            "{...}",
            "cannot be specified in combination with resourceAttributes",
        )),
        (None, None) => Some(invalid_cause(
            "spec.resourceAttributes",
            "\"null\"",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
        _ => None,
    };
    if let Some(c) = cause {
        return Err(ApiError::invalid(&info.group, &info.kind, "", vec![c]));
    }
    Ok(match (resource, non_resource) {
        (Some(r), _) => Attributes::resource(
            str_field(r, "verb"),
            str_field(r, "group"),
            str_field(r, "resource"),
            str_field(r, "subresource"),
            str_field(r, "namespace"),
            str_field(r, "name"),
        ),
        (_, Some(n)) => Attributes::non_resource(str_field(n, "verb"), str_field(n, "path")),
        (None, None) => unreachable!("refused above"),
    })
}

/// `SubjectAccessReviewStatus` for `user` doing `attrs`.
fn access_status(auth: &Auth, user: &UserInfo, attrs: &Attributes) -> Value {
    let d = auth.authorize(user, attrs);
    let mut status = json!({"allowed": d.allowed});
    if !d.reason.is_empty() {
        status["reason"] = json!(d.reason);
    }
    status
}

/// `SubjectRulesReviewStatus` of `user` in `namespace`.
fn rules_status(auth: &Auth, user: &UserInfo, namespace: &str) -> Value {
    match auth.authorization {
        // AlwaysAllow lists everything for everyone, as upstream's does.
        Authorization::AlwaysAllow => {
            let all = |v: &str| vec![v.to_string()];
            super::rbac::rules_review_status(
                &[
                    PolicyRule {
                        verbs: all("*"),
                        api_groups: all("*"),
                        resources: all("*"),
                        ..Default::default()
                    },
                    PolicyRule {
                        verbs: all("*"),
                        non_resource_urls: all("*"),
                        ..Default::default()
                    },
                ],
                &[],
            )
        }
        Authorization::Rbac => {
            let generation = auth.objects.rbac_generation();
            let (rules, errors) = Resolver::new(&auth.objects.store, &auth.rbac, generation)
                .rules_for(user, namespace);
            super::rbac::rules_review_status(&rules, &errors)
        }
    }
}

/// Refuses an audience longer than [`MAX_AUDIENCE_BYTES`]: a TokenRequest
/// would sign it into a token, and a TokenReview compares it with every
/// audience a token holds.
fn check_audience_bytes(auth: &Auth, audiences: &[String]) -> Result<(), ApiError> {
    if let Some(long) = audiences.iter().find(|a| a.len() > MAX_AUDIENCE_BYTES) {
        auth.objects.metrics.exceeded(Limit::TokenAudiences);
        return Err(ApiError::BadRequest(format!(
            "an audience of {} bytes exceeds the limit of {MAX_AUDIENCE_BYTES}",
            long.len()
        )));
    }
    Ok(())
}

/// `TokenReviewStatus`: who `spec.token` authenticates as, for the
/// audiences asked about (this server's by default).
fn token_review(auth: &Auth, spec: &Value) -> Result<Value, ApiError> {
    let token = str_field(spec, "token");
    if token.is_empty() {
        return Err(ApiError::BadRequest(
            "token is required for TokenReview in authentication.k8s.io".into(),
        ));
    }
    let asked = string_list(
        spec,
        "audiences",
        MAX_AUDIENCES,
        (&auth.objects.metrics, Limit::TokenAudiences),
    )?;
    check_audience_bytes(auth, &asked)?;
    let audiences: Vec<&str> = if asked.is_empty() {
        sa_token::API_AUDIENCES.to_vec()
    } else {
        asked.iter().map(String::as_str).collect()
    };
    // The server's own tokens are not audience-bound.
    if let Some(user) = auth.authenticate_static(token) {
        return Ok(json!({"authenticated": true, "user": user.to_json(), "audiences": audiences}));
    }
    Ok(match auth.authenticate_service_account(token, &audiences) {
        Ok((user, matching)) => {
            json!({"authenticated": true, "user": user.to_json(), "audiences": matching})
        }
        Err(e) => json!({"user": {}, "error": format!("[invalid bearer token, {e}]")}),
    })
}

/// A TokenRequest's `spec.boundObjectRef`, resolved to the object's uid.
fn bound_object(
    auth: &Auth,
    namespace: &str,
    service_account: &str,
    spec: &Value,
) -> Result<Option<BoundObject>, ApiError> {
    let Some(r) = object_field(spec, "boundObjectRef") else {
        return Ok(None);
    };
    let (api_version, kind, name) = (
        str_field(r, "apiVersion"),
        str_field(r, "kind"),
        str_field(r, "name"),
    );
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let plural = match (group, kind) {
        ("", "Pod") => "pods",
        ("", "Secret") => "secrets",
        _ => {
            return Err(ApiError::BadRequest(format!(
                "cannot bind token to object of type {group}/{version}, Kind={kind}"
            )));
        }
    };
    let stored = auth
        .objects
        .store
        .get(&GroupResource::new("", plural), namespace, name)
        .ok_or_else(|| ApiError::not_found("", plural, name))?;
    if kind == "Pod" {
        let pod_sa = stored.obj["spec"]["serviceAccountName"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or("default");
        if pod_sa != service_account {
            return Err(ApiError::BadRequest(format!(
                "cannot bind token for serviceaccount {} to pod running with serviceaccount {}",
                go_quote(service_account),
                go_quote(pod_sa)
            )));
        }
    }
    let uid = crate::values::meta_str(&stored.obj, "uid")
        .unwrap_or("")
        .to_string();
    let asked_uid = str_field(r, "uid");
    if !asked_uid.is_empty() && asked_uid != uid {
        return Err(ApiError::conflict(
            "",
            kind,
            name,
            &format!(
                "the UID in the bound object reference ({asked_uid}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
            ),
        ));
    }
    Ok(Some(BoundObject {
        kind: kind.to_string(),
        name: name.to_string(),
        uid,
    }))
}

/// Validates the lifetime asked for the token of the TokenRequest `name`
/// as upstream does (10 minutes to 2^32 s).
fn check_expiration(secs: i64, name: &str) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    if secs < sa_token::MIN_EXPIRATION_SECS {
        causes.push(invalid_cause(
            "spec.expirationSeconds",
            &secs.to_string(),
            "may not specify a duration less than 10 minutes",
        ));
    }
    if secs > sa_token::MAX_EXPIRATION_SECS {
        causes.push(invalid_cause(
            "spec.expirationSeconds",
            &secs.to_string(),
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(
        "authentication.k8s.io",
        "TokenRequest",
        name,
        causes,
    ))
}

/// Issues a token for the service account `namespace/name`, valid for
/// `expiration_secs` and `audiences`, bound to `bound` if given: the token
/// and its expiry (Unix seconds).
pub(crate) fn issue_token(
    auth: &Auth,
    namespace: &str,
    name: &str,
    audiences: Vec<String>,
    expiration_secs: i64,
    bound: Option<BoundObject>,
) -> Result<(String, i64), ApiError> {
    check_expiration(expiration_secs, name)?;
    let sa = auth
        .objects
        .store
        .get(&GroupResource::new("", "serviceaccounts"), namespace, name)
        .ok_or_else(|| ApiError::not_found("", "serviceaccounts", name))?;
    let uid = crate::values::meta_str(&sa.obj, "uid")
        .unwrap_or("")
        .to_string();
    let now = super::authenticate::now_secs();
    let claims = Claims {
        namespace: namespace.to_string(),
        service_account: name.to_string(),
        service_account_uid: uid,
        audiences,
        expires: now + expiration_secs,
        id: uuid::Uuid::new_v4().to_string(),
        bound,
    };
    let token = auth.signer.issue(&claims, now);
    // A token past what the server reads back would be refused unread.
    if token.len() > super::sa_token::MAX_TOKEN_BYTES {
        return Err(ApiError::BadRequest(format!(
            "the token would be {} bytes, more than the {} a token may have; ask for fewer or shorter audiences",
            token.len(),
            super::sa_token::MAX_TOKEN_BYTES
        )));
    }
    Ok((token, claims.expires))
}

const TOKEN_REQUEST_VERSION: &str = "authentication.k8s.io/v1";

/// `POST /api/v1/namespaces/NS/serviceaccounts/NAME/token`, first step:
/// the TokenRequest `body` decoded as upstream decodes it (its kind and
/// apiVersion checked, `spec.expirationSeconds` defaulted), as mutating
/// admission webhooks see it.
pub(crate) fn decode_token_request(mut body: Value) -> Result<Value, ApiError> {
    if !body.is_object() {
        return Err(ApiError::BadRequest(
            "the object provided is unrecognized (must be of type TokenRequest)".into(),
        ));
    }
    for (field, want) in [
        ("apiVersion", TOKEN_REQUEST_VERSION),
        ("kind", "TokenRequest"),
    ] {
        let got = str_field(&body, field);
        if !got.is_empty() && got != want {
            let what = if field == "kind" {
                "kind"
            } else {
                "API version"
            };
            return Err(ApiError::BadRequest(format!(
                "the {what} in the data ({got}) does not match the expected {what} ({want})"
            )));
        }
    }
    body["apiVersion"] = json!(TOKEN_REQUEST_VERSION);
    body["kind"] = json!("TokenRequest");
    if !body["metadata"].is_object() {
        body["metadata"] = json!({"creationTimestamp": null});
    }
    if !body["spec"].is_object() {
        body["spec"] = json!({});
    }
    if object_field(&body["spec"], "expirationSeconds").is_none() {
        body["spec"]["expirationSeconds"] = json!(sa_token::DEFAULT_EXPIRATION_SECS);
    }
    Ok(body)
}

/// A TokenRequest checked and completed as upstream's storage does before
/// validating admission webhooks see it, and what its token will carry.
pub(crate) struct TokenAsk {
    request: Value,
    audiences: Vec<String>,
    expiration: i64,
    bound: Option<BoundObject>,
}

impl TokenAsk {
    /// The TokenRequest as validating admission webhooks see it.
    pub(crate) fn request(&self) -> &Value {
        &self.request
    }
}

/// Second step: the (mutated) TokenRequest for the service account
/// `namespace/name` checked (audiences, lifetime, bound object) and
/// completed (audiences defaulted, its name and namespace, no status).
pub(crate) fn prepare_token_request(
    auth: &Auth,
    namespace: &str,
    name: &str,
    body: Value,
) -> Result<TokenAsk, ApiError> {
    let mut body = decode_token_request(body)?;
    let spec = body["spec"].clone();
    // Decoding defaulted it.
    let expiration = spec["expirationSeconds"]
        .as_i64()
        .ok_or_else(|| ApiError::BadRequest("spec.expirationSeconds must be an integer".into()))?;
    let mut audiences = string_list(
        &spec,
        "audiences",
        MAX_AUDIENCES,
        (&auth.objects.metrics, Limit::TokenAudiences),
    )?;
    check_audience_bytes(auth, &audiences)?;
    if audiences.is_empty() {
        audiences = sa_token::API_AUDIENCES
            .iter()
            .map(|a| a.to_string())
            .collect();
    }
    check_expiration(expiration, name)?;
    let bound = bound_object(auth, namespace, name, &spec)?;
    body["spec"]["audiences"] = json!(audiences);
    body["spec"]["expirationSeconds"] = json!(expiration);
    for (field, value) in [("name", name), ("namespace", namespace)] {
        if str_field(&body["metadata"], field).is_empty() {
            body["metadata"][field] = json!(value);
        }
    }
    if let Some(m) = body.as_object_mut() {
        m.remove("status");
    }
    Ok(TokenAsk {
        request: body,
        audiences,
        expiration,
        bound,
    })
}

/// Last step: the token of `ask`, answered in `status.token`.
pub(crate) fn issue_token_request(
    auth: &Auth,
    namespace: &str,
    name: &str,
    ask: TokenAsk,
) -> Result<Value, ApiError> {
    let TokenAsk {
        mut request,
        audiences,
        expiration,
        bound,
    } = ask;
    let (token, expires) = issue_token(auth, namespace, name, audiences, expiration, bound)?;
    request["status"] = json!({
        "token": token,
        "expirationTimestamp": crate::values::format_unix(expires),
    });
    Ok(request)
}
