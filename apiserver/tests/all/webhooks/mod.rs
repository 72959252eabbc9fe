//! Admission webhooks as kube-apiserver calls them: the configurations,
//! what reviews carry, denials, patches, warnings, failure policies, dry
//! runs, selectors, subresources, deletes and retries, seen through
//! kubectl and raw requests. Every webhook is [`server::WebhookServer`],
//! an HTTPS server in the test; nothing sleeps: a test waits only on a
//! response or on the reviews a webhook received.

mod controllers;
mod hostile;
mod server;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};
use server::{Reply, WebhookServer, allow, deny, patch};

use crate::common::{Harness, metrics_text};

const VALIDATING: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
const MUTATING: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

/// One rule: `ops` on `resources` of the core group and apps, v1.
fn rule(ops: &[&str], resources: &[&str]) -> Value {
    json!([{"operations": ops, "apiGroups": ["", "apps"], "apiVersions": ["v1"], "resources": resources}])
}

/// A webhook `name` calling `path` of `server` under `rules`.
fn hook(name: &str, server: &WebhookServer, path: &str, rules: Value) -> Value {
    json!({
        "name": name,
        "clientConfig": {"url": server.url(path), "caBundle": server.ca_bundle()},
        "rules": rules,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    })
}

/// `hook` with `extra`'s fields set too.
fn with(mut hook: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().unwrap() {
        hook[k] = v.clone();
    }
    hook
}

/// A mutating webhook on configmap creates with `reinvocationPolicy`.
fn reinvoked(server: &WebhookServer, name: &str, path: &str, policy: &str) -> Value {
    with(
        hook(name, server, path, rule(&["CREATE"], &["configmaps"])),
        json!({"reinvocationPolicy": policy}),
    )
}

/// Creates the configuration `name` at `collection` holding `webhooks`.
async fn configure(h: &Harness, collection: &str, name: &str, webhooks: Vec<Value>) -> Value {
    let (code, body) = h
        .raw(
            "POST",
            collection,
            Some("application/json"),
            &json!({"metadata": {"name": name}, "webhooks": webhooks}).to_string(),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    body
}

fn configmap(name: &str, labels: Value) -> String {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"a": "1"}})
        .to_string()
}

/// kubectl with `stdin`, off the runtime's workers (the webhook answers
/// on them): (success, stdout, stderr).
async fn kubectl(h: &Harness, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let out = tokio::task::block_in_place(|| crate::kubectl::kubectl_stdin(h, args, stdin));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_denials_warnings_and_the_configurations() {
    let h = Harness::start().await;
    let hooks = WebhookServer::start(|call| {
        let labels = &call.request["object"]["metadata"]["labels"];
        if labels["forbidden"] == "yes" {
            deny("configmaps marked forbidden are not admitted")
        } else {
            Reply::Respond(json!({"allowed": true, "warnings": ["this configmap is watched"]}))
        }
    })
    .await;
    configure(
        &h,
        VALIDATING,
        "guard",
        vec![hook(
            "guard.example.com",
            &hooks,
            "/validate",
            rule(&["CREATE"], &["configmaps"]),
        )],
    )
    .await;

    let (ok, _, err) = kubectl(
        &h,
        &["create", "-f", "-"],
        Some(&configmap("bad", json!({"forbidden": "yes"}))),
    )
    .await;
    assert!(!ok);
    assert_eq!(
        err.trim(),
        "Error from server (Forbidden): error when creating \"STDIN\": admission webhook \"guard.example.com\" denied the request: configmaps marked forbidden are not admitted"
    );
    let (ok, out, err) = kubectl(
        &h,
        &["create", "-f", "-"],
        Some(&configmap("good", json!({}))),
    )
    .await;
    assert!(ok, "{err}");
    assert!(out.contains("configmap/good created"), "{out}");
    assert!(err.contains("Warning: this configmap is watched"), "{err}");

    // Served, listed and shown with upstream's defaults.
    let (ok, out, err) = kubectl(&h, &["get", "validatingwebhookconfigurations"], None).await;
    assert!(
        ok && out.contains("guard") && out.contains("WEBHOOKS"),
        "{out}{err}"
    );
    let (ok, yaml, _) = kubectl(
        &h,
        &[
            "get",
            "validatingwebhookconfiguration",
            "guard",
            "-o",
            "yaml",
        ],
        None,
    )
    .await;
    assert!(ok);
    for line in [
        "failurePolicy: Fail",
        "matchPolicy: Equivalent",
        "timeoutSeconds: 10",
        "namespaceSelector: {}",
        "objectSelector: {}",
        "scope: '*'",
    ] {
        assert!(yaml.contains(line), "{line} missing in\n{yaml}");
    }
    let calls = hooks.calls("/validate");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].query, "timeout=10s");

    // matchConditions (CEL) are stored but not evaluated, and kubectl says so.
    let conditional = with(
        hook(
            "cel.example.com",
            &hooks,
            "/cel",
            rule(&["CREATE"], &["secrets"]),
        ),
        json!({"matchConditions": [{"name": "not-admin", "expression": "request.userInfo.username != 'x'"}]}),
    );
    let config = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "cel"},
        "webhooks": [conditional],
    });
    let (ok, _, err) = kubectl(&h, &["create", "-f", "-"], Some(&config.to_string())).await;
    assert!(ok, "{err}");
    assert!(
        err.contains(
            "Warning: webhook \"cel.example.com\": matchConditions are not evaluated by this server"
        ),
        "{err}"
    );
}

#[tokio::test]
async fn bad_configurations_are_refused_naming_the_field() {
    let h = Harness::start().await;
    let hooks = WebhookServer::start(|_| allow()).await;
    let bad = with(
        hook("short.name", &hooks, "/x", rule(&["CREATE"], &["pods"])),
        json!({"timeoutSeconds": 31, "sideEffects": "Some", "clientConfig": {"url": "http://127.0.0.1/x"}}),
    );
    let (code, status) = h
        .raw(
            "POST",
            MUTATING,
            Some("application/json"),
            &json!({"metadata": {"name": "bad"}, "webhooks": [bad]}).to_string(),
        )
        .await;
    assert_eq!(code, 422, "{status}");
    let fields: Vec<&str> = status["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    for f in [
        "webhooks[0].name",
        "webhooks[0].timeoutSeconds",
        "webhooks[0].sideEffects",
        "webhooks[0].clientConfig.url",
    ] {
        assert!(fields.contains(&f), "{f} in {status}");
    }
    // Nothing stored means nothing called.
    let (code, _) = h
        .raw("POST", CONFIGMAPS, None, &configmap("c", json!({})))
        .await;
    assert_eq!(code, 201);
}

#[tokio::test]
async fn a_mutation_is_stored_and_validating_webhooks_see_it() {
    let h = Harness::start().await;
    let hooks = WebhookServer::start(|call| match call.path.as_str() {
        "/mutate" => {
            patch(json!([{"op": "add", "path": "/metadata/labels/stamped", "value": "by-webhook"}]))
        }
        _ if call.request["object"]["metadata"]["labels"]["stamped"] == "by-webhook" => allow(),
        _ => deny("not stamped"),
    })
    .await;
    configure(
        &h,
        MUTATING,
        "stamp",
        vec![hook(
            "stamp.example.com",
            &hooks,
            "/mutate",
            rule(&["CREATE"], &["configmaps"]),
        )],
    )
    .await;
    configure(
        &h,
        VALIDATING,
        "check",
        vec![hook(
            "check.example.com",
            &hooks,
            "/validate",
            rule(&["CREATE"], &["configmaps"]),
        )],
    )
    .await;

    let (code, created) = h
        .raw(
            "POST",
            CONFIGMAPS,
            None,
            &configmap("m", json!({"app": "x"})),
        )
        .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["metadata"]["labels"]["stamped"], "by-webhook");
    let (_, stored) = h.raw("GET", &format!("{CONFIGMAPS}/m"), None, "").await;
    assert_eq!(
        stored["metadata"]["labels"],
        json!({"app": "x", "stamped": "by-webhook"})
    );
    let (code, _) = h
        .raw(
            "POST",
            &format!("{CONFIGMAPS}?fieldManager=tool&fieldValidation=Warn"),
            None,
            &configmap("n", json!({})),
        )
        .await;
    assert_eq!(code, 201);
    assert_eq!(
        hooks.calls("/mutate")[1].request["options"],
        json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1",
               "fieldManager": "tool", "fieldValidation": "Warn"})
    );

    // What the reviews carried, as upstream fills them.
    let mutate = &hooks.calls("/mutate")[0].request;
    assert_eq!(mutate["operation"], "CREATE");
    assert_eq!(
        mutate["kind"],
        json!({"group": "", "version": "v1", "kind": "ConfigMap"})
    );
    assert_eq!(
        mutate["resource"],
        json!({"group": "", "version": "v1", "resource": "configmaps"})
    );
    assert_eq!(mutate["requestKind"], mutate["kind"]);
    assert_eq!(
        (mutate["name"].as_str(), mutate["namespace"].as_str()),
        (Some("m"), Some("default"))
    );
    assert_eq!(mutate["userInfo"]["username"], "wasmctrl-admin");
    assert!(
        mutate["userInfo"]["groups"]
            .as_array()
            .unwrap()
            .contains(&json!("system:masters"))
    );
    assert_eq!(mutate["options"]["kind"], "CreateOptions");
    assert_eq!(mutate["options"]["apiVersion"], "meta.k8s.io/v1");
    // Options are what the query said: the manager named after the
    // User-Agent is not one of them.
    assert!(
        mutate["options"].get("fieldManager").is_none(),
        "{}",
        mutate["options"]
    );
    assert_eq!(mutate["dryRun"], false);
    assert_eq!(mutate["oldObject"], Value::Null);
    assert!(mutate["object"]["metadata"].get("uid").is_none());
    let validate = &hooks.calls("/validate")[0].request;
    // Validating webhooks see the object as it will be stored.
    assert!(validate["object"]["metadata"]["uid"].is_string());
    assert_ne!(validate["uid"], mutate["uid"]);
}

#[tokio::test]
async fn every_patch_type_and_update_is_admitted_with_the_old_object() {
    let h = Harness::start().await;
    let hooks = WebhookServer::start(|call| {
        let count = call.request["oldObject"]["metadata"]["annotations"]["updates"]
            .as_str()
            .and_then(|c| c.parse::<u32>().ok())
            .unwrap_or(0);
        patch(json!([{"op": "add", "path": "/metadata/annotations", "value": {"updates": (count + 1).to_string()}}]))
    })
    .await;
    let (code, _) = h
        .raw("POST", CONFIGMAPS, None, &configmap("p", json!({})))
        .await;
    assert_eq!(code, 201);
    configure(
        &h,
        MUTATING,
        "count",
        vec![hook(
            "count.example.com",
            &hooks,
            "/count",
            rule(&["UPDATE"], &["configmaps"]),
        )],
    )
    .await;
    let path = format!("{CONFIGMAPS}/p");
    let writes = [
        ("PATCH", "application/merge-patch+json", json!({"data": {"b": "2"}}).to_string()),
        ("PATCH", "application/json-patch+json", json!([{"op": "add", "path": "/data/c", "value": "3"}]).to_string()),
        ("PATCH", "application/strategic-merge-patch+json", json!({"data": {"d": "4"}}).to_string()),
        (
            "PATCH",
            "application/apply-patch+yaml",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p"}, "data": {"e": "5"}}).to_string(),
        ),
        ("PUT", "application/json", configmap("p", json!({"after": "put"}))),
    ];
    for (i, (method, ct, body)) in writes.iter().enumerate() {
        let uri = if ct.contains("apply") {
            format!("{path}?fieldManager=t")
        } else {
            path.clone()
        };
        let (code, obj) = h.raw(method, &uri, Some(ct), body).await;
        assert_eq!(code, 200, "{ct}: {obj}");
        assert_eq!(
            obj["metadata"]["annotations"]["updates"],
            (i + 1).to_string(),
            "{ct}"
        );
    }
    let calls = hooks.calls("/count");
    assert_eq!(calls.len(), writes.len());
    for c in &calls {
        assert_eq!(c.request["operation"], "UPDATE");
        assert_eq!(c.request["oldObject"]["metadata"]["name"], "p");
        assert_eq!(c.request["options"]["kind"], "UpdateOptions");
    }
    assert_eq!(calls[1].request["oldObject"]["data"]["b"], "2");
}

#[tokio::test]
async fn if_needed_reinvokes_a_webhook_after_a_later_mutation() {
    let h = Harness::start().await;
    let hooks = WebhookServer::start(|call| match call.path.as_str() {
        "/later" => patch(json!([{"op": "add", "path": "/metadata/labels/later", "value": "yes"}])),
        _ => allow(),
    })
    .await;
    let mutating = |name: &str, path: &str, policy: &str| reinvoked(&hooks, name, path, policy);
    // Configurations run by name: "a-first" before "b-later".
    configure(
        &h,
        MUTATING,
        "a-first",
        vec![
            mutating("again.example.com", "/again", "IfNeeded"),
            mutating("once.example.com", "/once", "Never"),
        ],
    )
    .await;
    configure(
        &h,
        MUTATING,
        "b-later",
        vec![mutating("later.example.com", "/later", "IfNeeded")],
    )
    .await;
    let (code, _) = h
        .raw("POST", CONFIGMAPS, None, &configmap("r", json!({})))
        .await;
    assert_eq!(code, 201);
    let again = hooks.calls("/again");
    assert_eq!(
        again.len(),
        2,
        "reinvoked once after /later changed the object"
    );
    assert!(
        again[0].request["object"]["metadata"]["labels"]
            .get("later")
            .is_none()
    );
    assert_eq!(
        again[1].request["object"]["metadata"]["labels"]["later"],
        "yes"
    );
    assert_eq!(hooks.calls("/once").len(), 1);
    // The webhook that changed the object is not reinvoked for its own change.
    assert_eq!(hooks.calls("/later").len(), 1);
}

/// In the second round a reinvoked webhook's change marks the webhooks
/// called since the last change, as upstream's reinvocation context does:
/// those after it in that round are called once more.
#[tokio::test]
async fn a_change_in_the_second_round_reinvokes_the_webhooks_after_it() {
    let h = Harness::start().await;
    let bumps = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = bumps.clone();
    let hooks = WebhookServer::start(move |call| match call.path.as_str() {
        "/bump" => {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            patch(json!([{"op": "add", "path": format!("/metadata/labels/bump-{n}"), "value": "yes"}]))
        }
        "/once" => patch(json!([{"op": "add", "path": "/metadata/labels/once", "value": "yes"}])),
        _ => allow(),
    })
    .await;
    let mutating = |name: &str, path: &str, policy: &str| reinvoked(&hooks, name, path, policy);
    configure(
        &h,
        MUTATING,
        "a",
        vec![mutating("bump.example.com", "/bump", "IfNeeded")],
    )
    .await;
    configure(
        &h,
        MUTATING,
        "b",
        vec![mutating("once.example.com", "/once", "Never")],
    )
    .await;
    configure(
        &h,
        MUTATING,
        "c",
        vec![mutating("watch.example.com", "/watch", "IfNeeded")],
    )
    .await;
    let (code, body) = h
        .raw("POST", CONFIGMAPS, None, &configmap("r", json!({})))
        .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(hooks.calls("/bump").len(), 2);
    assert_eq!(hooks.calls("/once").len(), 1);
    let watched = hooks.calls("/watch");
    assert_eq!(
        watched.len(),
        2,
        "called again after /bump changed the object in round two"
    );
    assert_eq!(
        watched[1].request["object"]["metadata"]["labels"]["bump-2"],
        "yes"
    );
}

#[tokio::test]
async fn a_webhook_that_never_answers_fails_closed_or_open_by_policy() {
    let h = Harness::start().await;
    let hooks = WebhookServer::start(|_| Reply::Hang).await;
    let hanging = |name: &str, policy: &str, resource: &str| {
        with(
            hook(name, &hooks, "/hang", rule(&["CREATE"], &[resource])),
            json!({"timeoutSeconds": 1, "failurePolicy": policy}),
        )
    };
    configure(
        &h,
        VALIDATING,
        "hanging",
        vec![
            hanging("closed.example.com", "Fail", "configmaps"),
            hanging("open.example.com", "Ignore", "secrets"),
        ],
    )
    .await;
    let (code, status) = h
        .raw("POST", CONFIGMAPS, None, &configmap("t", json!({})))
        .await;
    assert_eq!(code, 500, "{status}");
    assert_eq!(status["reason"], "InternalError");
    assert_eq!(
        status["message"],
        format!(
            "Internal error occurred: failed calling webhook \"closed.example.com\": failed to call webhook: Post \"{}?timeout=1s\": context deadline exceeded",
            hooks.url("/hang")
        )
    );
    let secret =
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}).to_string();
    let (code, body) = h
        .raw("POST", "/api/v1/namespaces/default/secrets", None, &secret)
        .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(hooks.calls("/hang").len(), 2);
    let metrics = metrics_text(&h.client().await).await;
    assert!(
        metrics.contains("apiserver_admission_webhook_fail_open_count_total{name=\"open.example.com\",type=\"validating\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("apiserver_admission_webhook_rejection_count_total{name=\"closed.example.com\",operation=\"CREATE\",rejection_code=\"503\",error_type=\"calling_webhook_error\",type=\"validating\"} 1"),
        "{metrics}"
    );
}

/// A write has its `?timeout=` (as `kubectl --request-timeout` sends it),
/// at most the server's 60 s: a webhook is given no more than what is
/// left, and when it runs out the write is a 504 whatever the webhook's
/// failure policy, as upstream's, and nothing is stored.
#[tokio::test]
async fn a_write_ends_at_its_own_timeout_whatever_the_webhooks_allow() {
    let h = Harness::start().await;
    let hooks = WebhookServer::start(|_| Reply::Hang).await;
    configure(
        &h,
        VALIDATING,
        "slow",
        vec![with(
            hook(
                "slow.example.com",
                &hooks,
                "/hang",
                rule(&["CREATE"], &["configmaps"]),
            ),
            json!({"timeoutSeconds": 30, "failurePolicy": "Ignore"}),
        )],
    )
    .await;
    let once = h.client_without_retries().await;
    let (code, status) = crate::common::raw(
        &once,
        "POST",
        &format!("{CONFIGMAPS}?timeout=1s"),
        None,
        configmap("late", json!({})).as_bytes(),
    )
    .await;
    assert_eq!(code, 504, "{status}");
    assert_eq!(status["reason"], "Timeout");
    assert_eq!(
        status["message"],
        "Timeout: request did not complete within requested timeout - context deadline exceeded"
    );
    let calls = hooks.calls("/hang");
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].query, "timeout=1s",
        "the time left, not the webhook's 30 s"
    );
    assert_eq!(
        h.raw("GET", &format!("{CONFIGMAPS}/late"), None, "")
            .await
            .0,
        404
    );
    let (code, status) = h
        .raw(
            "POST",
            &format!("{CONFIGMAPS}?timeout=soon"),
            None,
            &configmap("late", json!({})),
        )
        .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "invalid timeout specified in the request URL - time: invalid duration \"soon\""
    );
}

/// A webhook answering an HTTP error instead of a review is a call
/// failure worded as client-go words a Status error: no URL before it.
#[tokio::test]
async fn an_http_error_from_a_webhook_reads_as_upstream_s() {
    let h = Harness::start().await;
    let hooks = WebhookServer::start(|_| Reply::Status(500, "boom")).await;
    configure(
        &h,
        VALIDATING,
        "broken",
        vec![hook(
            "broken.example.com",
            &hooks,
            "/",
            rule(&["CREATE"], &["configmaps"]),
        )],
    )
    .await;
    let (code, status) = h
        .raw("POST", CONFIGMAPS, None, &configmap("a", json!({})))
        .await;
    assert_eq!(code, 500, "{status}");
    assert_eq!(
        status["message"],
        "Internal error occurred: failed calling webhook \"broken.example.com\": failed to call webhook: an error on the server (\"boom\") has prevented the request from succeeding"
    );
}

#[tokio::test]
async fn an_unreachable_url_and_a_wrong_ca_bundle_are_call_failures() {
    let h = Harness::start().await;
    let hooks = WebhookServer::start(|_| allow()).await;
    // A port nothing listens on any more.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed_addr = closed.local_addr().unwrap();
    drop(closed);
    let unreachable = |name: &str, policy: &str, resource: &str| {
        let mut hk = hook(name, &hooks, "/", rule(&["CREATE"], &[resource]));
        hk["clientConfig"]["url"] = json!(format!("https://{closed_addr}/admit"));
        with(hk, json!({"failurePolicy": policy}))
    };
    configure(
        &h,
        VALIDATING,
        "unreachable",
        vec![
            unreachable("closed.example.com", "Fail", "configmaps"),
            unreachable("open.example.com", "Ignore", "secrets"),
        ],
    )
    .await;
    let (code, status) = h
        .raw("POST", CONFIGMAPS, None, &configmap("u", json!({})))
        .await;
    assert_eq!(code, 500);
    assert_eq!(
        status["message"],
        format!(
            "Internal error occurred: failed calling webhook \"closed.example.com\": failed to call webhook: Post \"https://{closed_addr}/admit?timeout=10s\": dial tcp {closed_addr}: connect: connection refused"
        )
    );
    let secret =
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}).to_string();
    let (code, _) = h
        .raw("POST", "/api/v1/namespaces/default/secrets", None, &secret)
        .await;
    assert_eq!(code, 201);

    // A caBundle of another CA: the certificate does not verify.
    let (other_ca, _) = server::certificates();
    let mut wrong = hook(
        "wrong-ca.example.com",
        &hooks,
        "/ca",
        rule(&["CREATE"], &["serviceaccounts"]),
    );
    wrong["clientConfig"]["caBundle"] = json!(base64_of(&other_ca));
    configure(&h, VALIDATING, "wrong-ca", vec![wrong]).await;
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"}})
        .to_string();
    let (code, status) = h
        .raw(
            "POST",
            "/api/v1/namespaces/default/serviceaccounts",
            None,
            &sa,
        )
        .await;
    assert_eq!(code, 500);
    let message = status["message"].as_str().unwrap();
    assert!(
        message.ends_with(
            "tls: failed to verify certificate: x509: certificate signed by unknown authority"
        ),
        "{message}"
    );
    assert!(hooks.calls("/ca").is_empty());

    // A placeholder bundle (what cert-manager's CA injector later fills
    // in) is stored as upstream stores it; the call fails by policy.
    let mut placeholder = hook(
        "placeholder.example.com",
        &hooks,
        "/placeholder",
        rule(&["CREATE"], &["endpoints"]),
    );
    placeholder["clientConfig"]["caBundle"] = json!("Cg==");
    configure(&h, VALIDATING, "placeholder", vec![placeholder]).await;
    let endpoints =
        json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "e"}}).to_string();
    let (code, status) = h
        .raw(
            "POST",
            "/api/v1/namespaces/default/endpoints",
            None,
            &endpoints,
        )
        .await;
    assert_eq!(code, 500, "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains(
            "failed calling webhook \"placeholder.example.com\": could not get REST client: unable to load root certificates: unable to parse bytes as PEM block"
        ),
        "{message}"
    );
    // An empty bundle trusts the system's roots, as upstream's does.
    let mut empty = hook(
        "empty.example.com",
        &hooks,
        "/empty",
        rule(&["CREATE"], &["events"]),
    );
    empty["clientConfig"]["caBundle"] = json!("");
    configure(&h, VALIDATING, "empty", vec![empty]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_requiring_a_client_certificate_gets_one_the_servers_ca_signed() {
    let h = Harness::start().await;
    let hooks =
        WebhookServer::start_requiring_client_certificate(h.server.ca_pem(), |_| allow()).await;
    configure(
        &h,
        VALIDATING,
        "mtls",
        vec![hook(
            "mtls.example.com",
            &hooks,
            "/",
            rule(&["CREATE"], &["configmaps"]),
        )],
    )
    .await;
    let (code, body) = h
        .raw("POST", CONFIGMAPS, None, &configmap("m", json!({})))
        .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(hooks.calls("/").len(), 1);

    // A webhook server trusting another CA refuses the server's certificate.
    let (other_ca, _) = server::certificates();
    let picky = WebhookServer::start_requiring_client_certificate(&other_ca, |_| allow()).await;
    configure(
        &h,
        VALIDATING,
        "picky",
        vec![hook(
            "picky.example.com",
            &picky,
            "/",
            rule(&["CREATE"], &["secrets"]),
        )],
    )
    .await;
    let secret =
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}).to_string();
    let (code, status) = h
        .raw("POST", "/api/v1/namespaces/default/secrets", None, &secret)
        .await;
    assert_eq!(code, 500, "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message
            .starts_with("Internal error occurred: failed calling webhook \"picky.example.com\""),
        "{message}"
    );
    assert!(picky.calls("/").is_empty());
}

#[tokio::test]
async fn an_answer_past_its_bound_is_a_call_failure() {
    let h = Harness::start().await;
    // 16 MiB of padding and the rest: one byte past what the server reads.
    let padding = "x".repeat(16 * 1024 * 1024);
    let hooks = WebhookServer::start(move |_| {
        Reply::Respond(json!({"allowed": true, "padding": padding.clone()}))
    })
    .await;
    configure(
        &h,
        VALIDATING,
        "big",
        vec![hook(
            "big.example.com",
            &hooks,
            "/big",
            rule(&["CREATE"], &["configmaps"]),
        )],
    )
    .await;
    let (code, status) = h
        .raw("POST", CONFIGMAPS, None, &configmap("b", json!({})))
        .await;
    assert_eq!(code, 500);
    assert_eq!(
        status["message"],
        format!(
            "Internal error occurred: failed calling webhook \"big.example.com\": failed to call webhook: Post \"{}?timeout=10s\": the response body exceeds the limit of 16777216 bytes",
            hooks.url("/big")
        )
    );
    assert_eq!(h.server.limit_exceeded("webhookResponse"), 1);
}

fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_calls_webhooks_and_stores_nothing() {
    let h = Harness::start().await;
    let hooks = WebhookServer::start(|_| {
        patch(json!([{"op": "add", "path": "/data/added", "value": "yes"}]))
    })
    .await;
    configure(
        &h,
        MUTATING,
        "dry",
        vec![hook(
            "dry.example.com",
            &hooks,
            "/dry",
            rule(&["CREATE"], &["configmaps"]),
        )],
    )
    .await;
    let (code, obj) = h
        .raw(
            "POST",
            &format!("{CONFIGMAPS}?dryRun=All"),
            None,
            &configmap("d", json!({})),
        )
        .await;
    assert_eq!(code, 201, "{obj}");
    assert_eq!(obj["data"]["added"], "yes");
    let (code, _) = h.raw("GET", &format!("{CONFIGMAPS}/d"), None, "").await;
    assert_eq!(code, 404);
    let call = &hooks.calls("/dry")[0].request;
    assert_eq!(call["dryRun"], true);
    assert_eq!(call["options"]["dryRun"], json!(["All"]));
    // kubectl's --dry-run=server is the same request.
    let (ok, out, err) = kubectl(
        &h,
        &[
            "create",
            "-f",
            "-",
            "--dry-run=server",
            "-o",
            "jsonpath={.data.added}",
        ],
        Some(&configmap("k", json!({}))),
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out, "yes");
    assert_eq!(hooks.calls("/dry").len(), 2);
}

#[tokio::test]
async fn namespace_and_object_selectors_choose_what_a_webhook_sees() {
    let h = Harness::start().await;
    let hooks = WebhookServer::start(|call| deny(&format!("{} is guarded", call.path))).await;
    for (ns, env) in [("prod", "prod"), ("dev", "dev")] {
        let body = json!({"metadata": {"name": ns, "labels": {"env": env}}}).to_string();
        assert_eq!(
            h.raw("POST", "/api/v1/namespaces", None, &body).await.0,
            201
        );
    }
    configure(
        &h,
        VALIDATING,
        "selectors",
        vec![
            with(
                hook("prod.example.com", &hooks, "/prod", rule(&["CREATE"], &["configmaps"])),
                json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}}),
            ),
            with(
                hook("marked.example.com", &hooks, "/marked", rule(&["CREATE"], &["secrets"])),
                json!({"objectSelector": {"matchExpressions": [{"key": "guarded", "operator": "Exists"}]}}),
            ),
        ],
    )
    .await;
    let h = &h;
    let create = |ns: &str, resource: &str, labels: Value| {
        let body = json!({"metadata": {"name": "x", "labels": labels}}).to_string();
        let path = format!("/api/v1/namespaces/{ns}/{resource}");
        async move { h.raw("POST", &path, None, &body).await }
    };
    let (code, status) = create("prod", "configmaps", json!({})).await;
    assert_eq!(
        (code, status["message"].as_str()),
        (
            403,
            Some("admission webhook \"prod.example.com\" denied the request: /prod is guarded")
        )
    );
    assert_eq!(create("dev", "configmaps", json!({})).await.0, 201);
    assert_eq!(
        create("dev", "secrets", json!({"guarded": "1"})).await.0,
        403
    );
    assert_eq!(create("dev", "secrets", json!({})).await.0, 201);
    assert_eq!(hooks.calls("/prod").len(), 1);
    assert_eq!(hooks.calls("/marked").len(), 1);
}

#[tokio::test]
async fn a_rule_on_a_subresource_sees_status_and_scale_writes() {
    let h = Harness::start().await;
    let hooks =
        WebhookServer::start(|call| deny(&format!("no writes to {}", call.request["subResource"])))
            .await;
    let deploy = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
    });
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    assert_eq!(
        h.raw("POST", deployments, None, &deploy.to_string())
            .await
            .0,
        201
    );
    configure(
        &h,
        VALIDATING,
        "subresources",
        vec![hook(
            "sub.example.com",
            &hooks,
            "/sub",
            rule(&["UPDATE"], &["deployments/status", "deployments/scale"]),
        )],
    )
    .await;
    // The main resource is not covered.
    let merge = Some("application/merge-patch+json");
    let (code, _) = h
        .raw(
            "PATCH",
            &format!("{deployments}/web"),
            merge,
            r#"{"metadata":{"labels":{"a":"b"}}}"#,
        )
        .await;
    assert_eq!(code, 200);
    let (code, status) = h
        .raw(
            "PATCH",
            &format!("{deployments}/web/status"),
            merge,
            r#"{"status":{"replicas":1}}"#,
        )
        .await;
    assert_eq!(
        (code, status["message"].as_str()),
        (
            403,
            Some(
                "admission webhook \"sub.example.com\" denied the request: no writes to \"status\""
            )
        )
    );
    let (code, _) = h
        .raw(
            "PATCH",
            &format!("{deployments}/web/scale"),
            merge,
            r#"{"spec":{"replicas":3}}"#,
        )
        .await;
    assert_eq!(code, 403);
    let calls = hooks.calls("/sub");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].request["kind"]["kind"], "Deployment");
    assert_eq!(
        calls[1].request["kind"],
        json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
    );
    assert_eq!(calls[1].request["resource"]["resource"], "deployments");
    assert_eq!(calls[1].request["object"]["spec"]["replicas"], 3);
    assert_eq!(calls[1].request["oldObject"]["spec"]["replicas"], 1);
}

/// A TokenRequest is admitted as upstream admits it: mutating webhooks
/// see it as sent (its lifetime defaulted) and may change it, validating
/// ones see it completed (audiences, name and namespace) and may refuse
/// it, and no token is issued for a refused request.
#[tokio::test]
async fn a_token_request_is_admitted_before_its_token_is_issued() {
    let h = Harness::start().await;
    let hooks = WebhookServer::start(|call| match call.path.as_str() {
        "/longer" => patch(json!([
            {"op": "replace", "path": "/spec/expirationSeconds", "value": 7200}
        ])),
        _ => {
            let audiences = &call.request["object"]["spec"]["audiences"];
            if audiences
                .as_array()
                .is_some_and(|a| a.contains(&json!("vault")))
            {
                deny("no tokens for vault")
            } else {
                allow()
            }
        }
    })
    .await;
    let accounts = "/api/v1/namespaces/default/serviceaccounts";
    let (code, body) = h
        .raw("POST", accounts, None, r#"{"metadata":{"name":"robot"}}"#)
        .await;
    assert_eq!(code, 201, "{body}");
    let token_rule = rule(&["CREATE"], &["serviceaccounts/token"]);
    configure(
        &h,
        MUTATING,
        "longer",
        vec![hook(
            "longer.example.com",
            &hooks,
            "/longer",
            token_rule.clone(),
        )],
    )
    .await;
    configure(
        &h,
        VALIDATING,
        "audiences",
        vec![hook(
            "audiences.example.com",
            &hooks,
            "/audiences",
            token_rule,
        )],
    )
    .await;
    let token = format!("{accounts}/robot/token");
    let (code, answer) = h
        .raw("POST", &token, None, r#"{"spec":{"audiences":["vault"]}}"#)
        .await;
    assert_eq!(
        (code, answer["message"].as_str()),
        (
            403,
            Some(
                "admission webhook \"audiences.example.com\" denied the request: no tokens for vault"
            )
        ),
        "{answer}"
    );
    let (code, answer) = h.raw("POST", &token, None, "{}").await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["spec"]["expirationSeconds"], 7200, "{answer}");
    assert!(
        answer["status"]["token"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
    );

    let mutated = hooks.calls("/longer");
    assert_eq!(mutated.len(), 2);
    let review = &mutated[1].request;
    assert_eq!(
        review["kind"],
        json!({"group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest"})
    );
    assert_eq!(review["resource"]["resource"], "serviceaccounts");
    assert_eq!(review["subResource"], "token");
    assert_eq!(review["operation"], "CREATE");
    assert_eq!(review["name"], "robot");
    assert_eq!(review["object"]["spec"]["expirationSeconds"], 3600);
    let validated = hooks.calls("/audiences");
    assert_eq!(validated.len(), 2, "the refused request was validated too");
    let seen = &validated[1].request["object"];
    assert_eq!(seen["spec"]["expirationSeconds"], 7200, "{seen}");
    assert!(
        seen["spec"]["audiences"]
            .as_array()
            .is_some_and(|a| !a.is_empty()),
        "validating webhooks see the audiences defaulted: {seen}"
    );
    assert_eq!(seen["metadata"]["name"], "robot");
    assert_eq!(seen["metadata"]["namespace"], "default");
    assert!(seen.get("status").is_none(), "{seen}");
}

#[tokio::test]
async fn a_delete_sends_the_old_object_and_no_object() {
    let h = Harness::start().await;
    let hooks = WebhookServer::start(|call| {
        if call.request["oldObject"]["metadata"]["labels"]["keep"] == "yes" {
            deny("kept")
        } else {
            allow()
        }
    })
    .await;
    for (name, labels) in [("keep", json!({"keep": "yes"})), ("drop", json!({}))] {
        assert_eq!(
            h.raw("POST", CONFIGMAPS, None, &configmap(name, labels))
                .await
                .0,
            201
        );
    }
    configure(
        &h,
        VALIDATING,
        "deletes",
        vec![hook(
            "deletes.example.com",
            &hooks,
            "/delete",
            rule(&["DELETE"], &["configmaps"]),
        )],
    )
    .await;
    let (code, _) = h
        .raw("DELETE", &format!("{CONFIGMAPS}/keep"), None, "")
        .await;
    assert_eq!(code, 403);
    assert_eq!(
        h.raw("GET", &format!("{CONFIGMAPS}/keep"), None, "")
            .await
            .0,
        200
    );
    let (code, _) = h
        .raw(
            "DELETE",
            &format!("{CONFIGMAPS}/drop?propagationPolicy=Foreground"),
            None,
            "",
        )
        .await;
    assert_eq!(code, 200);
    let calls = hooks.calls("/delete");
    assert_eq!(calls.len(), 2);
    let drop = &calls[1].request;
    assert_eq!(drop["operation"], "DELETE");
    assert_eq!(drop["object"], Value::Null);
    assert_eq!(drop["oldObject"]["data"]["a"], "1");
    assert_eq!(drop["options"]["kind"], "DeleteOptions");
    assert_eq!(drop["options"]["propagationPolicy"], "Foreground");
}

#[tokio::test]
async fn an_answer_for_another_uid_is_a_call_failure() {
    let h = Harness::start().await;
    let hooks = WebhookServer::start(|_| {
        Reply::Respond(json!({"uid": "not-the-request", "allowed": true}))
    })
    .await;
    configure(
        &h,
        VALIDATING,
        "uid",
        vec![hook(
            "uid.example.com",
            &hooks,
            "/uid",
            rule(&["CREATE"], &["configmaps"]),
        )],
    )
    .await;
    let (code, status) = h
        .raw("POST", CONFIGMAPS, None, &configmap("u", json!({})))
        .await;
    assert_eq!(code, 500);
    let uid = hooks.calls("/uid")[0].request["uid"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        status["message"],
        format!(
            "Internal error occurred: failed calling webhook \"uid.example.com\": received invalid webhook response: expected response.uid=\"{uid}\", got \"not-the-request\""
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_commit_is_admitted_again() {
    let h = Harness::start().await;
    assert_eq!(
        h.raw("POST", CONFIGMAPS, None, &configmap("race", json!({})))
            .await
            .0,
        201
    );
    let client = h.client().await;
    let raced = Arc::new(AtomicBool::new(false));
    // On the first update it sees, the webhook itself changes the object
    // before answering, so the update it admitted no longer commits.
    let hooks = WebhookServer::start_async(move |call| {
        let (client, raced) = (client.clone(), raced.clone());
        Box::pin(async move {
            if call.request["object"]["data"]["outer"] == "1" && !raced.swap(true, Ordering::SeqCst)
            {
                let (code, _) = crate::common::raw(
                    &client,
                    "PATCH",
                    &format!("{CONFIGMAPS}/race"),
                    Some("application/merge-patch+json"),
                    br#"{"data":{"inner":"1"}}"#,
                )
                .await;
                assert_eq!(code, 200);
            }
            allow()
        })
    })
    .await;
    configure(
        &h,
        VALIDATING,
        "race",
        vec![hook(
            "race.example.com",
            &hooks,
            "/race",
            rule(&["UPDATE"], &["configmaps"]),
        )],
    )
    .await;
    let (code, obj) = h
        .raw(
            "PATCH",
            &format!("{CONFIGMAPS}/race"),
            Some("application/merge-patch+json"),
            r#"{"data":{"outer":"1"}}"#,
        )
        .await;
    assert_eq!(code, 200, "{obj}");
    assert_eq!(
        (obj["data"]["inner"].as_str(), obj["data"]["outer"].as_str()),
        (Some("1"), Some("1"))
    );
    // The outer update, the inner one, then the outer update again against
    // the object as the inner one left it.
    let calls = hooks.calls("/race");
    assert_eq!(calls.len(), 3);
    assert!(calls[0].request["oldObject"]["data"].get("inner").is_none());
    assert_eq!(calls[2].request["oldObject"]["data"]["inner"], "1");
    assert_eq!(calls[2].request["object"]["data"]["outer"], "1");
}

#[tokio::test]
async fn a_service_is_reached_at_its_cluster_ip_with_its_dns_name() {
    let h = Harness::start().await;
    let hooks = WebhookServer::start(|_| deny("from the service")).await;
    assert_eq!(
        h.raw(
            "POST",
            "/api/v1/namespaces",
            None,
            r#"{"metadata":{"name":"hooks"}}"#
        )
        .await
        .0,
        201
    );
    let port = hooks.addr.port();
    let svc = json!({"metadata": {"name": "hook"}, "spec": {"clusterIP": "127.0.0.1", "ports": [{"port": port}]}});
    assert_eq!(
        h.raw(
            "POST",
            "/api/v1/namespaces/hooks/services",
            None,
            &svc.to_string()
        )
        .await
        .0,
        201
    );
    let mut hk = hook(
        "svc.example.com",
        &hooks,
        "/",
        rule(&["CREATE"], &["configmaps"]),
    );
    hk["clientConfig"] = json!({"service": {"namespace": "hooks", "name": "hook", "port": port, "path": "/svc"}, "caBundle": hooks.ca_bundle()});
    configure(&h, VALIDATING, "service", vec![hk]).await;
    let (code, status) = h
        .raw("POST", CONFIGMAPS, None, &configmap("s", json!({})))
        .await;
    assert_eq!(
        (code, status["message"].as_str()),
        (
            403,
            Some("admission webhook \"svc.example.com\" denied the request: from the service")
        )
    );
    assert_eq!(hooks.await_calls("/svc", 1).await[0].query, "timeout=10s");
    // Without the Service, the call fails naming it.
    assert_eq!(
        h.raw("DELETE", "/api/v1/namespaces/hooks/services/hook", None, "")
            .await
            .0,
        200
    );
    let (code, status) = h
        .raw("POST", CONFIGMAPS, None, &configmap("t", json!({})))
        .await;
    assert_eq!(code, 500);
    assert_eq!(
        status["message"],
        format!(
            "Internal error occurred: failed calling webhook \"svc.example.com\": failed to call webhook: Post \"https://hook.hooks.svc:{port}/svc?timeout=10s\": service \"hook\" not found"
        )
    );
}

#[cfg(feature = "testing")]
#[tokio::test]
async fn audit_annotations_reach_the_audit() {
    let h = Harness::start().await;
    let hooks = WebhookServer::start(|_| {
        Reply::Respond(json!({"allowed": true, "auditAnnotations": {"decision": "fine"}}))
    })
    .await;
    configure(
        &h,
        VALIDATING,
        "audit",
        vec![hook(
            "audit.example.com",
            &hooks,
            "/audit",
            rule(&["CREATE"], &["configmaps"]),
        )],
    )
    .await;
    assert_eq!(
        h.raw("POST", CONFIGMAPS, None, &configmap("a", json!({})))
            .await
            .0,
        201
    );
    assert_eq!(
        last_configmap_create_annotations(&h),
        vec![("audit.example.com/decision".to_string(), "fine".to_string())]
    );
}

/// The audit annotations of the last ConfigMap create audited.
fn last_configmap_create_annotations(h: &Harness) -> Vec<(String, String)> {
    h.server
        .audit()
        .records()
        .into_iter()
        .rev()
        .find(|r| r.resource == "configmaps" && r.verb == "create")
        .expect("a ConfigMap create audited")
        .annotations
}
