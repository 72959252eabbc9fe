//! The order webhooks run in and what their answers do, as upstream's
//! mutating and validating dispatchers: mutating webhooks one after
//! another, each patch applied before the next is asked, and a second
//! round for `reinvocationPolicy: IfNeeded`; validating webhooks all at
//! once, the first refusal (in configuration order) answering the request.
//! A call that fails is ignored under `failurePolicy: Ignore` (and counted
//! as failing open) and a 500 under `Fail`; a denial, a dry run a webhook
//! cannot take, and a patch that cannot apply always stop the request.

use std::collections::BTreeSet;
use std::time::Instant;

use serde_json::{Value, json};

use super::client::{self, CallError};
use super::config::{ConfigKind, FailurePolicy, Reinvocation, Webhook};
use super::matching::{self, Invocation};
use super::review::{self, Verdict};
use super::{Attributes, Configs, Gvk, Lookup, MAX_WEBHOOKS_PER_REQUEST, Sink, Webhooks};
use crate::error::ApiError;
use crate::metrics::{Limit, WebhookErrorType};
use crate::values::go_quote;

/// How one call went wrong.
#[derive(Debug, thiserror::Error)]
enum HookError {
    /// The webhook could not be asked, or its answer is not one: what
    /// `failurePolicy` decides about.
    #[error("failed calling webhook {}: {reason}", go_quote(.name))]
    Calling { name: String, reason: String },
    /// The webhook denied the request.
    #[error("{0}")]
    Rejected(ApiError),
    /// The server itself refused, before or after the call; never ignored.
    #[error("{0}")]
    Refused(ApiError),
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(format!("Internal error occurred: {e}"))
}

/// `obj` as `gvk`'s version presents it: versions of one resource here
/// differ only in `apiVersion`.
fn in_version(obj: &Value, gvk: &Gvk) -> Value {
    let mut out = obj.clone();
    if let Some(m) = out.as_object_mut() {
        let api_version = if gvk.group.is_empty() {
            gvk.version.clone()
        } else {
            format!("{}/{}", gvk.group, gvk.version)
        };
        m.insert("apiVersion".into(), json!(api_version));
    }
    out
}

/// The refusal of a request matching more webhooks of one kind than
/// [`MAX_WEBHOOKS_PER_REQUEST`].
fn too_many(webhooks: &Webhooks, kind: &str) -> ApiError {
    webhooks.metrics.exceeded(Limit::AdmissionWebhooks);
    internal(format!(
        "more than {MAX_WEBHOOKS_PER_REQUEST} {kind} admission webhooks match this request, the most one request may call"
    ))
}

impl Webhooks {
    /// Runs the mutating webhooks that match `attrs` on `object` (absent
    /// for a delete), which each applied patch changes in place.
    pub(crate) async fn mutate(
        &self,
        configs: &Configs,
        attrs: &Attributes<'_>,
        mut object: Option<&mut Value>,
        old: Option<&Value>,
        env: &dyn Lookup,
        sink: &dyn Sink,
    ) -> Result<(), ApiError> {
        // Webhooks that asked to be reinvoked and ran before some later
        // webhook changed the object: the second round calls them again.
        // The second round keeps the same books, as upstream's does: a
        // reinvoked webhook that changes the object again marks those
        // called since the last change, and the ones after it in this
        // round are called once more.
        let mut reinvocable = BTreeSet::new();
        let mut reinvoke = BTreeSet::new();
        let mut called = 0;
        for round in 0..2 {
            for (index, hook) in configs.mutating.iter().enumerate() {
                if round == 1 && !reinvoke.contains(&index) {
                    continue;
                }
                let Some(invocation) = matching::invocation(hook, attrs) else {
                    continue;
                };
                if !matching::selected(hook, attrs, object.as_deref(), old, env)? {
                    continue;
                }
                if round == 0 {
                    called += 1;
                    if called > MAX_WEBHOOKS_PER_REQUEST {
                        return Err(too_many(self, "mutating"));
                    }
                }
                let started = Instant::now();
                let result = self
                    .mutate_one(
                        hook,
                        &invocation,
                        attrs,
                        object.as_deref_mut(),
                        old,
                        env,
                        sink,
                    )
                    .await;
                let changed = self
                    .settle(hook, attrs, started, result, (round, index), sink)?
                    .unwrap_or(false);
                if changed {
                    reinvoke.append(&mut reinvocable);
                }
                if hook.reinvocation == Reinvocation::IfNeeded {
                    reinvocable.insert(index);
                }
            }
            if reinvoke.is_empty() {
                break;
            }
        }
        Ok(())
    }

    /// Calls one mutating webhook and applies its patch: whether the
    /// object changed.
    #[allow(clippy::too_many_arguments)]
    async fn mutate_one(
        &self,
        hook: &Webhook,
        invocation: &Invocation,
        attrs: &Attributes<'_>,
        object: Option<&mut Value>,
        old: Option<&Value>,
        env: &dyn Lookup,
        sink: &dyn Sink,
    ) -> Result<bool, HookError> {
        // Another version's view is a copy; the requested one is sent as is.
        let converted = invocation.kind != attrs.kind;
        let sent = converted
            .then(|| object.as_deref().map(|o| in_version(o, &invocation.kind)))
            .flatten();
        let old_sent = converted
            .then(|| old.map(|o| in_version(o, &invocation.kind)))
            .flatten();
        let (sent_ref, old_ref) = if converted {
            (sent.as_ref(), old_sent.as_ref())
        } else {
            (object.as_deref(), old)
        };
        let verdict = self
            .call(hook, invocation, attrs, sent_ref, old_ref, env, sink)
            .await?;
        let Some(ops) = verdict
            .patch
            .filter(|p| p.as_array().is_some_and(|a| !a.is_empty()))
        else {
            return Ok(false);
        };
        let Some(target) = object else {
            return Err(HookError::Refused(internal(format!(
                "admission webhook {} attempted to modify the object, which is not supported for this operation",
                go_quote(&hook.name)
            ))));
        };
        let base = match &sent {
            Some(s) => s,
            None => &*target,
        };
        let mut patched = crate::patch::json_patch_bounded(base, &ops).map_err(|(e, limit)| {
            self.metrics.exceeded_if(limit);
            HookError::Refused(internal(e))
        })?;
        // Checked here, not only when the object is stored: the webhooks
        // after this one, and each validating webhook, are sent it.
        let bytes = crate::values::json_len(&patched);
        let max = self.max_object_bytes;
        if bytes > max {
            self.metrics.exceeded(Limit::ObjectSize);
            return Err(HookError::Refused(ApiError::RequestEntityTooLarge(
                format!(
                    "admission webhook {} made the object {bytes} bytes as JSON, more than the limit {max}",
                    go_quote(&hook.name)
                ),
            )));
        }
        let changed = patched != *base;
        if converted {
            patched = in_version(&patched, &attrs.kind);
        }
        *target = patched;
        Ok(changed)
    }

    /// Runs the validating webhooks that match `attrs`, all at once.
    pub(crate) async fn validate(
        &self,
        configs: &Configs,
        attrs: &Attributes<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
        env: &dyn Lookup,
        sink: &dyn Sink,
    ) -> Result<(), ApiError> {
        let mut chosen = Vec::new();
        for hook in &configs.validating {
            let Some(invocation) = matching::invocation(hook, attrs) else {
                continue;
            };
            if matching::selected(hook, attrs, object, old, env)? {
                chosen.push((hook, invocation));
            }
        }
        if chosen.len() > MAX_WEBHOOKS_PER_REQUEST {
            return Err(too_many(self, "validating"));
        }
        let calls = chosen
            .iter()
            .enumerate()
            .map(|(index, (hook, invocation))| async move {
                let started = Instant::now();
                let converted = invocation.kind != attrs.kind;
                let sent = converted
                    .then(|| object.map(|o| in_version(o, &invocation.kind)))
                    .flatten();
                let old_sent = converted
                    .then(|| old.map(|o| in_version(o, &invocation.kind)))
                    .flatten();
                let (sent_ref, old_ref) = if converted {
                    (sent.as_ref(), old_sent.as_ref())
                } else {
                    (object, old)
                };
                let result = self
                    .call(hook, invocation, attrs, sent_ref, old_ref, env, sink)
                    .await
                    .map(|_| ());
                self.settle(hook, attrs, started, result, (0, index), sink)
            });
        for result in futures::future::join_all(calls).await {
            result?;
        }
        Ok(())
    }

    /// Asks one webhook: its checked answer, or why there is none or it
    /// says no. Its warnings and audit annotations go to `sink` either way.
    #[allow(clippy::too_many_arguments)]
    async fn call(
        &self,
        hook: &Webhook,
        invocation: &Invocation,
        attrs: &Attributes<'_>,
        object: Option<&Value>,
        old: Option<&Value>,
        env: &dyn Lookup,
        sink: &dyn Sink,
    ) -> Result<Verdict, HookError> {
        if attrs.dry_run && !hook.side_effects.dry_run_safe() {
            return Err(HookError::Refused(ApiError::BadRequest(format!(
                "admission webhook {} does not support dry run",
                go_quote(&hook.name)
            ))));
        }
        let calling = |reason: String| HookError::Calling {
            name: hook.name.clone(),
            reason,
        };
        let tls = hook
            .tls
            .get_or_init(|| {
                client::tls_config(hook.ca_bundle.as_deref(), self.client_identity.get())
            })
            .clone()
            .map_err(|e| calling(format!("could not get REST client: {e}")))?;
        let uid = uuid::Uuid::new_v4().to_string();
        let body = review::request_body(&uid, attrs, invocation, object, old);
        // No webhook is given longer than its request has left.
        let timeout = match attrs.deadline {
            Some(deadline) => hook
                .timeout
                .min(deadline.saturating_duration_since(tokio::time::Instant::now())),
            None => hook.timeout,
        };
        let dest = client::destination(&hook.endpoint, timeout, |ns, name, port| {
            env.service_address(ns, name, port)
        });
        let answer = client::post(&dest, tls, body, timeout).await.map_err(|e| {
            if matches!(e, CallError::TooLarge) {
                self.metrics.exceeded(Limit::WebhookResponse);
            }
            match e {
                // The request's own deadline, not the webhook's: the
                // request has timed out, whatever the failure policy
                // (upstream's write then fails on its done context).
                CallError::Deadline
                    if attrs
                        .deadline
                        .is_some_and(|d| tokio::time::Instant::now() >= d) =>
                {
                    HookError::Refused(ApiError::request_timeout())
                }
                // client-go reads the answer of a non-2xx status into
                // a Status error: no URL error wraps it.
                CallError::Status(_) => calling(format!("failed to call webhook: {e}")),
                e => calling(format!(
                    "failed to call webhook: Post {}: {e}",
                    go_quote(&dest.shown)
                )),
            }
        })?;
        let verdict =
            review::verify(&uid, hook.kind == ConfigKind::Mutating, &answer).map_err(|e| {
                if matches!(
                    e,
                    review::BadResponse::Shape(_) | review::BadResponse::PatchSize(_)
                ) {
                    self.metrics.exceeded(Limit::WebhookResponse);
                }
                match e {
                    review::BadResponse::NotJsonPatch(_) => HookError::Refused(internal(e)),
                    e => calling(format!("{}: {e}", e.context())),
                }
            })?;
        let mut dropped = verdict.dropped_annotations;
        for (key, value) in &verdict.audit_annotations {
            if !sink.annotate(format!("{}/{key}", hook.name), value.clone()) {
                dropped += 1;
            }
        }
        if dropped > 0 {
            self.metrics.exceeded(Limit::WebhookAnnotations);
            tracing::debug!(webhook = %hook.name, dropped, "audit annotations dropped");
        }
        for warning in &verdict.warnings {
            sink.warn(warning.clone());
        }
        if !verdict.allowed {
            return Err(HookError::Rejected(review::denial(
                &hook.name,
                verdict.status.as_ref(),
            )));
        }
        Ok(verdict)
    }

    /// Counts a finished call (upstream's metrics) and decides what it
    /// means for the request: its result, `None` for a failure
    /// `failurePolicy: Ignore` lets pass, or the error that ends it.
    /// `at` is (round, index), which names a fail-open audit annotation.
    fn settle<T>(
        &self,
        hook: &Webhook,
        attrs: &Attributes<'_>,
        started: Instant,
        result: Result<T, HookError>,
        at: (usize, usize),
        sink: &dyn Sink,
    ) -> Result<Option<T>, ApiError> {
        let ty = hook.kind.metric_type();
        let op = attrs.operation.as_str();
        let seconds = started.elapsed().as_secs_f64();
        let observe = |rejected| {
            self.metrics
                .webhook_admission(&hook.name, op, rejected, ty, seconds)
        };
        let err = match result {
            Ok(v) => {
                observe(false);
                return Ok(Some(v));
            }
            Err(e) => e,
        };
        match err {
            e @ HookError::Calling { .. } if hook.failure_policy == FailurePolicy::Ignore => {
                observe(false);
                self.metrics.webhook_fail_open(&hook.name, ty);
                tracing::warn!(webhook = %hook.name, error = %e, "failed calling webhook, failing open");
                let prefix = match hook.kind {
                    ConfigKind::Mutating => "failed-open.mutation.webhook.admission.k8s.io",
                    ConfigKind::Validating => "failed-open.validating.webhook.admission.k8s.io",
                };
                if !sink.annotate(
                    format!("{prefix}/round_{}_index_{}", at.0, at.1),
                    hook.name.clone(),
                ) {
                    self.metrics.exceeded(Limit::WebhookAnnotations);
                }
                Ok(None)
            }
            e @ HookError::Calling { .. } => {
                observe(true);
                // Upstream counts a failed call as the 503 it maps it to.
                self.metrics.webhook_rejection(
                    &hook.name,
                    op,
                    503,
                    WebhookErrorType::CallingWebhook,
                    ty,
                );
                tracing::warn!(webhook = %hook.name, error = %e, "failed calling webhook, failing closed");
                Err(internal(e))
            }
            HookError::Rejected(e) => {
                observe(true);
                self.metrics.webhook_rejection(
                    &hook.name,
                    op,
                    e.code(),
                    WebhookErrorType::NoError,
                    ty,
                );
                Err(e)
            }
            HookError::Refused(e) => {
                observe(true);
                self.metrics.webhook_rejection(
                    &hook.name,
                    op,
                    0,
                    WebhookErrorType::ApiserverInternal,
                    ty,
                );
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::{Arc, Mutex};

    use super::super::config::parse;
    use super::super::{Caller, Gvr, Operation};
    use super::*;
    use crate::metrics::Metrics;

    struct Env;

    impl Lookup for Env {
        fn namespace_labels(&self, _: &str) -> Option<Value> {
            Some(Value::Null)
        }
        fn service_address(&self, _: &str, name: &str, _: u16) -> Result<SocketAddr, String> {
            Err(format!("service {} not found", go_quote(name)))
        }
    }

    #[derive(Default)]
    struct Notes(Mutex<Vec<(String, String)>>);

    impl Sink for Notes {
        fn warn(&self, text: String) {
            self.0.lock().unwrap().push(("warning".into(), text));
        }
        fn annotate(&self, key: String, value: String) -> bool {
            self.0.lock().unwrap().push((key, value));
            true
        }
    }

    fn configs(kind: ConfigKind, extra: Value) -> Configs {
        let mut hook = json!({
            "name": "hook.example.com",
            "rules": [{"operations": ["*"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"service": {"namespace": "hooks", "name": "gone", "port": 443}},
            "timeoutSeconds": 1,
        });
        for (k, v) in extra.as_object().unwrap() {
            hook[k] = v.clone();
        }
        let hooks = parse(kind, &json!({"webhooks": [hook]}));
        match kind {
            ConfigKind::Mutating => Configs {
                mutating: hooks,
                ..Default::default()
            },
            ConfigKind::Validating => Configs {
                validating: hooks,
                ..Default::default()
            },
        }
    }

    fn attrs<'a>(caller: &'a Caller, dry_run: bool) -> Attributes<'a> {
        Attributes {
            operation: Operation::Create,
            kind: Gvk {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
            },
            resource: Gvr {
                group: String::new(),
                version: "v1".into(),
                resource: "configmaps".into(),
            },
            subresource: "",
            name: "c",
            namespace: "default",
            dry_run,
            options: Value::Null,
            caller,
            equivalent_versions: &[],
            deadline: None,
        }
    }

    fn webhooks() -> Webhooks {
        Webhooks::new(Arc::new(Metrics::new()), 3 << 20)
    }

    /// `w` validating an empty ConfigMap create under `configs`, with
    /// what it warns and annotates in `notes`.
    async fn validate(
        w: &Webhooks,
        configs: &Configs,
        dry_run: bool,
        notes: &Notes,
    ) -> Result<(), ApiError> {
        let caller = Caller::default();
        let attrs = attrs(&caller, dry_run);
        w.validate(configs, &attrs, Some(&json!({})), None, &Env, notes)
            .await
    }

    #[tokio::test]
    async fn a_dry_run_never_reaches_a_webhook_with_side_effects() {
        let caller = Caller::default();
        let legacy = configs(ConfigKind::Validating, json!({"sideEffects": "Some"}));
        let w = webhooks();
        let err = validate(&w, &legacy, true, &Notes::default())
            .await
            .unwrap_err();
        assert_eq!(err.code(), 400);
        assert_eq!(
            err.to_string(),
            "admission webhook \"hook.example.com\" does not support dry run"
        );
        // Ignore does not let it through: the server refused, nothing failed.
        let ignored = configs(
            ConfigKind::Mutating,
            json!({"sideEffects": "Unknown", "failurePolicy": "Ignore"}),
        );
        let err = w
            .mutate(
                &ignored,
                &attrs(&caller, true),
                Some(&mut json!({})),
                None,
                &Env,
                &Notes::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.code(), 400);
    }

    #[tokio::test]
    async fn more_webhooks_than_a_request_may_call_are_refused_before_any_call() {
        let w = webhooks();
        let one = configs(ConfigKind::Validating, json!({}));
        let many = Configs {
            validating: (0..=MAX_WEBHOOKS_PER_REQUEST)
                .map(|_| one.validating[0].clone())
                .collect(),
            ..Default::default()
        };
        let err = validate(&w, &many, false, &Notes::default())
            .await
            .unwrap_err();
        assert_eq!(err.code(), 500);
        assert!(
            err.to_string()
                .contains("more than 128 validating admission webhooks"),
            "{err}"
        );
        assert_eq!(w.metrics.exceeded_count("admissionWebhooks"), 1);
    }

    #[tokio::test]
    async fn an_unreachable_service_fails_closed_or_open_by_policy() {
        let w = webhooks();
        let fail = configs(ConfigKind::Validating, json!({}));
        let err = validate(&w, &fail, false, &Notes::default())
            .await
            .unwrap_err();
        assert_eq!(err.code(), 500);
        assert_eq!(
            err.to_string(),
            "Internal error occurred: failed calling webhook \"hook.example.com\": failed to call webhook: Post \"https://gone.hooks.svc:443/?timeout=1s\": service \"gone\" not found"
        );
        let ignore = configs(ConfigKind::Validating, json!({"failurePolicy": "Ignore"}));
        let notes = Notes::default();
        validate(&w, &ignore, false, &notes).await.unwrap();
        assert_eq!(
            *notes.0.lock().unwrap(),
            vec![(
                "failed-open.validating.webhook.admission.k8s.io/round_0_index_0".to_string(),
                "hook.example.com".to_string()
            )]
        );
        let text = w.metrics.encode();
        assert!(
            text.contains("apiserver_admission_webhook_fail_open_count_total{name=\"hook.example.com\",type=\"validating\"} 1"),
            "{text}"
        );
    }
}
