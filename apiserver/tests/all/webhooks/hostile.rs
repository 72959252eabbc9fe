//! Webhooks whose answers try to cost the server more than an answer
//! may: patches past a client's patch bound, objects grown past the
//! stored limit, denials and annotations without end, control characters
//! for the client's terminal.

use serde_json::{Value, json};

use super::server::{Reply, WebhookServer, patch};
use super::{
    CONFIGMAPS, MUTATING, VALIDATING, configmap, configure, hook,
    last_configmap_create_annotations, rule,
};
use crate::common::Harness;

/// A mutating webhook on ConfigMap creates, answering `reply`.
async fn mutating(
    h: &Harness,
    name: &str,
    reply: impl Fn() -> Reply + Send + Sync + 'static,
) -> WebhookServer {
    let hooks = WebhookServer::start(move |_| reply()).await;
    configure(
        h,
        MUTATING,
        name,
        vec![hook(
            &format!("{name}.example.com"),
            &hooks,
            "/",
            rule(&["CREATE"], &["configmaps"]),
        )],
    )
    .await;
    hooks
}

async fn create(h: &Harness, name: &str) -> (u16, Value) {
    h.raw("POST", CONFIGMAPS, None, &configmap(name, json!({})))
        .await
}

#[tokio::test]
async fn a_patch_past_a_clients_patch_bound_is_a_call_failure() {
    let h = Harness::start().await;
    let big = "x".repeat(3 * 1024 * 1024);
    let _hooks = mutating(&h, "huge", move || {
        patch(json!([{"op": "add", "path": "/data/big", "value": big}]))
    })
    .await;
    let (code, status) = create(&h, "a").await;
    assert_eq!(code, 500, "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("received undecodable patch in webhook response")
            && message.contains("more than 3145728; it is not read"),
        "{message}"
    );
    assert_eq!(h.server.limit_exceeded("webhookResponse"), 1);
}

#[tokio::test]
async fn webhooks_growing_the_object_past_its_limit_are_refused_by_name() {
    let h = Harness::start().await;
    let mut hooks = Vec::new();
    for name in ["first", "second"] {
        let value = "y".repeat(2 * 1024 * 1024);
        let path = format!("/data/{name}");
        hooks.push(
            mutating(&h, name, move || {
                patch(json!([{"op": "add", "path": path, "value": value}]))
            })
            .await,
        );
    }
    let (code, status) = create(&h, "a").await;
    assert_eq!(code, 413, "{status}");
    assert_eq!(status["reason"], "RequestEntityTooLarge");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "Request entity too large: admission webhook \"second.example.com\" made the object "
        ) && message.ends_with("bytes as JSON, more than the limit 3145728"),
        "{message}"
    );
    assert_eq!(h.server.limit_exceeded("objectSize"), 1);
}

#[tokio::test]
async fn a_denial_is_bounded_and_its_control_characters_escaped() {
    let h = Harness::start().await;
    let causes: Vec<Value> = (0..1000)
        .map(|i| json!({"reason": "FieldValueInvalid", "message": format!("bad {i}\u{1b}[2J"), "field": "x".repeat(10_000)}))
        .collect();
    let hooks = WebhookServer::start(move |_| {
        Reply::Respond(json!({
            "allowed": false,
            "status": {
                "code": 422,
                "reason": "r".repeat(100_000),
                "message": "no\u{1b}]0;owned\u{7} here\nsecond line\u{9b}31m",
                "details": {"name": "n".repeat(100_000), "causes": causes.clone(), "extra": "x".repeat(100_000)},
            },
        }))
    })
    .await;
    configure(
        &h,
        VALIDATING,
        "loud",
        vec![hook(
            "loud.example.com",
            &hooks,
            "/",
            rule(&["CREATE"], &["configmaps"]),
        )],
    )
    .await;
    let (code, status) = create(&h, "a").await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["message"],
        "admission webhook \"loud.example.com\" denied the request: no\\x1b]0;owned\\x07 here\nsecond line\\u009b31m"
    );
    let reason = status["reason"].as_str().unwrap();
    assert!(
        reason.len() < 1200 && reason.ends_with("more bytes not shown)"),
        "{}",
        reason.len()
    );
    let details = &status["details"];
    assert!(details["name"].as_str().unwrap().len() < 1200);
    assert!(details.get("extra").is_none(), "{details}");
    let causes = details["causes"].as_array().unwrap();
    assert_eq!(
        causes.len(),
        101,
        "the first hundred, and one counting the rest"
    );
    assert_eq!(causes[0]["message"], "bad 0\\x1b[2J");
    assert!(causes[0]["field"].as_str().unwrap().len() < 1200);
    assert!(!status.to_string().contains('\u{1b}'));
}

#[tokio::test]
async fn audit_annotations_are_bounded_per_answer_and_per_request() {
    let h = Harness::start().await;
    let hooks = WebhookServer::start(|_| {
        let mut annotations = serde_json::Map::new();
        for i in 0..40 {
            annotations.insert(format!("note-{i:02}"), json!("v".repeat(4096)));
        }
        annotations.insert("not/a-name".into(), json!("x"));
        Reply::Respond(json!({"allowed": true, "auditAnnotations": annotations}))
    })
    .await;
    let webhooks = (0..9)
        .map(|i| {
            hook(
                &format!("note-{i}.example.com"),
                &hooks,
                "/",
                rule(&["CREATE"], &["configmaps"]),
            )
        })
        .collect();
    configure(&h, VALIDATING, "notes", webhooks).await;
    assert_eq!(create(&h, "a").await.0, 201);
    let annotations = last_configmap_create_annotations(&h);
    assert_eq!(
        annotations.len(),
        256,
        "32 of each of 9 answers, at most 256"
    );
    for (key, value) in &annotations {
        assert!(
            key.contains(".example.com/note-") && !key.ends_with("a-name"),
            "{key}"
        );
        assert!(
            value.len() < 1100 && value.ends_with("more bytes not shown)"),
            "{}",
            value.len()
        );
    }
    assert!(h.server.limit_exceeded("webhookAnnotations") >= 9);
}

/// A well-formed answer whose patch is base64 of something other than a
/// JSON patch fails the request with an internal error, as upstream's
/// does, even under `failurePolicy: Ignore`: it is not a call failure.
#[tokio::test]
async fn a_patch_that_is_not_a_json_patch_fails_the_request_whatever_the_policy() {
    use base64::Engine as _;
    let h = Harness::start().await;
    let hooks = WebhookServer::start(|_| {
        Reply::Respond(json!({
            "allowed": true,
            "patchType": "JSONPatch",
            "patch": base64::engine::general_purpose::STANDARD.encode(r#"{"x":1}"#),
        }))
    })
    .await;
    let mut ignored = hook(
        "odd.example.com",
        &hooks,
        "/",
        rule(&["CREATE"], &["configmaps"]),
    );
    ignored["failurePolicy"] = json!("Ignore");
    configure(&h, MUTATING, "odd", vec![ignored]).await;
    let (code, status) = create(&h, "a").await;
    assert_eq!(code, 500, "{status}");
    let message = status["message"].as_str().unwrap();
    assert_eq!(
        message,
        "Internal error occurred: a JSON patch must be a list of operations"
    );
    assert_eq!(
        h.raw("GET", &format!("{CONFIGMAPS}/a"), None, "").await.0,
        404
    );
}

/// What mutating webhooks leave of an update is held to upstream's checks
/// that follow the mutation: a `uid` other than the stored one is an
/// immutable field changed (422), a `resourceVersion` other than the
/// stored one a conflict (409). Neither is dropped in silence, by a PUT or
/// a patch.
#[tokio::test]
async fn an_update_whose_uid_or_resource_version_a_webhook_rewrites_is_refused() {
    const UID: &str = "00000000-0000-0000-0000-000000000000";
    let h = Harness::start().await;
    assert_eq!(create(&h, "a").await.0, 201);
    let hooks = WebhookServer::start(|call| {
        match call.request["object"]["metadata"]["labels"]["case"].as_str() {
            Some("uid") => patch(json!([{"op": "add", "path": "/metadata/uid", "value": UID}])),
            Some("rv") => {
                patch(json!([{"op": "add", "path": "/metadata/resourceVersion", "value": "1"}]))
            }
            _ => patch(json!([])),
        }
    })
    .await;
    configure(
        &h,
        MUTATING,
        "rewrite",
        vec![hook(
            "rewrite.example.com",
            &hooks,
            "/",
            rule(&["UPDATE"], &["configmaps"]),
        )],
    )
    .await;
    let path = format!("{CONFIGMAPS}/a");
    let (_, stored) = h.raw("GET", &path, None, "").await;
    for case in ["uid", "rv"] {
        let mut put = stored.clone();
        put["metadata"]["labels"] = json!({"case": case});
        let by_put = h.raw("PUT", &path, None, &put.to_string()).await;
        let merge = json!({"metadata": {"labels": {"case": case}}}).to_string();
        let by_patch = h
            .raw("PATCH", &path, Some("application/merge-patch+json"), &merge)
            .await;
        for (code, status) in [by_put, by_patch] {
            if case == "uid" {
                assert_eq!(code, 422, "{status}");
                assert_eq!(
                    status["message"],
                    format!(
                        "ConfigMap \"a\" is invalid: metadata.uid: Invalid value: \"{UID}\": field is immutable"
                    )
                );
            } else {
                assert_eq!(code, 409, "{status}");
                assert_eq!(status["reason"], "Conflict");
            }
        }
    }
    assert_eq!(hooks.calls("/").len(), 4);
    let (_, after) = h.raw("GET", &path, None, "").await;
    assert_eq!(after, stored, "nothing was written");
}
