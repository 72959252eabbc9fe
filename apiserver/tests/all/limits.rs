//! Limits on what one request may cost: JSON patch copy amplification and
//! operation count, body and object size, YAML alias expansion. The memory
//! bound is measured on the `wasmctrl-apiserver` binary in its own process.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Harness, Spawned, limit_count, raw};

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const MIB: u64 = 1024 * 1024;

/// The attacker's patch: add `[0]`, then copy the array into itself.
fn copy_bomb(copies: usize) -> String {
    let mut ops = vec![json!({"op": "add", "path": "/x", "value": [0]})];
    ops.extend((0..copies).map(|_| json!({"op": "copy", "from": "/x", "path": "/x/-"})));
    Value::Array(ops).to_string()
}

#[tokio::test]
async fn json_patch_copy_bomb_is_refused_fast_in_bounded_memory() {
    let server = Spawned::start(&[]).await;
    let client = server.client().await;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "target"}});
    let (code, _) = raw(&client, "POST", CMS, None, cm.to_string().as_bytes()).await;
    assert_eq!(code, 201);
    let idle_peak = server.peak_rss();

    for copies in [23, 30] {
        let started = Instant::now();
        let (code, status) = raw(
            &client,
            "PATCH",
            &format!("{CMS}/target"),
            Some("application/json-patch+json"),
            copy_bomb(copies).as_bytes(),
        )
        .await;
        let took = started.elapsed();
        eprintln!("copy bomb: {copies} copies refused with {code} after {took:?}");
        assert_eq!(code, 422, "{copies} copies: {status}");
        assert_eq!(status["reason"], "Invalid");
        let message = status["message"].as_str().unwrap();
        assert!(
            message.contains("Unable to complete the copy") && message.contains("3145728"),
            "the status names the limit: {message}"
        );
        // A generous bound for a debug build on a loaded machine (about
        // 0.5 s alone); before the limit this patch ran 9 s and took
        // 1.3 GiB, or was OOM-killed.
        assert!(
            took < Duration::from_secs(5),
            "{copies} copies refused after {took:?}"
        );
    }
    let peak = server.peak_rss();
    eprintln!(
        "copy bomb: idle peak {} KiB, peak after {} KiB",
        idle_peak / 1024,
        peak / 1024
    );
    assert!(
        peak.saturating_sub(idle_peak) < 100 * MIB,
        "peak grew by {} MiB",
        (peak - idle_peak) / MIB
    );

    // Nothing was stored, and the server still answers.
    let (code, obj) = raw(&client, "GET", &format!("{CMS}/target"), None, b"").await;
    assert_eq!(code, 200);
    assert!(obj.get("x").is_none());
    // Both refusals are counted, as the binary's /metrics shows.
    let metrics = crate::common::metrics_text(&client).await;
    assert_eq!(limit_count(&metrics, "jsonPatchCopyBytes"), 2, "{metrics}");
}

#[tokio::test]
async fn patch_operations_bodies_and_objects_are_bounded() {
    let h = Harness::start().await;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p"}});
    assert_eq!(h.raw("POST", CMS, None, &cm.to_string()).await.0, 201);

    // kube-apiserver's 10 000 operations, as its 413.
    let ops: Vec<Value> = (0..10_001)
        .map(|_| json!({"op": "test", "path": "/metadata/name", "value": "p"}))
        .collect();
    let (code, status) = h
        .raw(
            "PATCH",
            &format!("{CMS}/p"),
            Some("application/json-patch+json"),
            &Value::Array(ops).to_string(),
        )
        .await;
    assert_eq!(code, 413, "{status}");
    assert_eq!(status["reason"], "RequestEntityTooLarge");
    assert_eq!(
        status["message"],
        "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
    );
    assert_eq!(h.server.limit_exceeded("jsonPatchOperations"), 1);

    // Bodies over 3 MiB.
    let big = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
                     "data": {"a": "x".repeat(3 * 1024 * 1024)}});
    let (code, status) = h.raw("POST", CMS, None, &big.to_string()).await;
    assert_eq!(code, 413, "{status}");
    assert_eq!(
        status["message"],
        "Request entity too large: limit is 3145728"
    );
    assert_eq!(h.server.limit_exceeded("requestBody"), 1);

    // Copies under the copy limit cannot grow an object past 3 MiB either.
    let one_mib = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "grow"},
                         "data": {"a": "x".repeat(1024 * 1024)}});
    assert_eq!(h.raw("POST", CMS, None, &one_mib.to_string()).await.0, 201);
    let copies = json!([
        {"op": "copy", "from": "/data/a", "path": "/data/b"},
        {"op": "copy", "from": "/data/a", "path": "/data/c"},
    ]);
    let (code, status) = h
        .raw(
            "PATCH",
            &format!("{CMS}/grow"),
            Some("application/json-patch+json"),
            &copies.to_string(),
        )
        .await;
    assert_eq!(code, 413, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("more than the limit 3145728"),
        "{status}"
    );
    let (_, grow) = h.raw("GET", &format!("{CMS}/grow"), None, "").await;
    assert!(grow["data"].get("b").is_none(), "nothing was stored");
    assert_eq!(h.server.limit_exceeded("objectSize"), 1);
    assert_eq!(h.server.limit_exceeded("jsonPatchCopyBytes"), 0);

    // A deep copy chain is refused before it can nest 100 levels.
    let mut ops = vec![json!({"op": "add", "path": "/x", "value": {}})];
    for i in 0..12 {
        ops.push(json!({"op": "copy", "from": "/x", "path": "/x".repeat((1 << i) + 1)}));
    }
    let (code, status) = h
        .raw(
            "PATCH",
            &format!("{CMS}/p"),
            Some("application/json-patch+json"),
            &Value::Array(ops).to_string(),
        )
        .await;
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("exceeding the limit 100")
    );
    assert_eq!(h.server.limit_exceeded("jsonPatchDepth"), 1);
    // Each refusal was counted under its own limit only.
    assert_eq!(h.server.limit_exceeded("jsonPatchOperations"), 1);
    assert_eq!(h.server.limit_exceeded("requestBody"), 1);
    assert_eq!(h.server.limit_exceeded("objectSize"), 1);
}

#[tokio::test]
async fn yaml_aliases_cannot_expand_a_body() {
    let h = Harness::start().await;
    // Ten levels of ten aliases: 10^10 strings from a few hundred bytes.
    let mut doc = String::from(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: laughs\nl0: &l0 [lol,lol,lol,lol,lol,lol,lol,lol,lol,lol]\n",
    );
    for i in 1..10 {
        let refs = vec![format!("*l{}", i - 1); 10].join(",");
        doc.push_str(&format!("l{i}: &l{i} [{refs}]\n"));
    }
    let started = Instant::now();
    let (code, status) = h
        .raw(
            "PATCH",
            &format!("{CMS}/laughs?fieldManager=t"),
            Some("application/apply-patch+yaml"),
            &doc,
        )
        .await;
    assert_eq!(code, 400, "{status}");
    assert!(
        status["message"].as_str().unwrap().contains("expands"),
        "{status}"
    );
    assert_eq!(h.server.limit_exceeded("yamlExpansion"), 1);
    let (code, _) = h.raw("POST", CMS, Some("application/yaml"), &doc).await;
    assert_eq!(code, 400);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(h.server.limit_exceeded("yamlExpansion"), 2);
    assert_eq!(h.server.limit_exceeded("yamlDepth"), 0);
}

/// JSON and YAML bodies nest at most 128 levels (serde_json's and
/// serde_norway's limit), and path segments must be UTF-8: each is a 400,
/// counted under its limit.
/// An object the body parser takes (under 128 levels) but that would nest
/// past what clients, and this server on restart, read back once its
/// managedFields are added is refused, and nothing is stored.
#[tokio::test]
async fn an_object_nested_too_deep_to_read_back_is_refused() {
    let h = Harness::start().await;
    let nested = |n: usize| format!("{}1{}", "{\"a\":".repeat(n), "}".repeat(n));
    let body = |name: &str, n: usize| {
        format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}},"x":{}}}"#,
            nested(n)
        )
    };
    let (code, status) = h.raw("POST", CMS, None, &body("deep", 124)).await;
    assert_eq!(code, 400, "{status}");
    assert!(
        status["message"].as_str().unwrap().contains("levels deep"),
        "{status}"
    );
    assert_eq!(h.server.limit_exceeded("objectDepth"), 1);
    assert_eq!(h.raw("GET", &format!("{CMS}/deep"), None, "").await.0, 404);

    // Within the bound, it reads back whole, as kube-rs parses it.
    let (code, status) = h.raw("POST", CMS, None, &body("fine", 60)).await;
    assert_eq!(code, 201, "{status}");
    let (code, read) = h.raw("GET", &format!("{CMS}/fine"), None, "").await;
    assert_eq!(code, 200);
    assert_eq!(read["metadata"]["name"], "fine");
}

/// A body of hundreds of thousands of bad finalizers is checked whole
/// and answered with a hundred causes and a count of the rest, not a
/// message per finalizer.
#[tokio::test]
async fn an_invalid_object_lists_a_hundred_causes_and_counts_the_rest() {
    let h = Harness::start().await;
    let bad = vec!["-"; 300_000];
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "many", "finalizers": bad}});
    let (code, status) = h.raw("POST", CMS, None, &body.to_string()).await;
    assert_eq!(code, 422);
    let causes = status["details"]["causes"].as_array().unwrap();
    assert_eq!(causes.len(), 101, "a hundred and the count");
    assert_eq!(
        causes[100]["message"],
        "and 299900 more errors (at most 100 are listed)"
    );
    assert!(
        status.to_string().len() < 64 << 10,
        "{} bytes",
        status.to_string().len()
    );
}

/// A CRD whose defaults hold items whose own defaults apply in turn would
/// make a body of `{}` gigabytes big: the defaults added are counted as
/// they are added, and the write is refused past an object's bound.
#[tokio::test]
async fn schema_defaults_that_multiply_are_refused_past_an_objects_bound() {
    let h = Harness::start().await;
    let empties = vec![json!({}); 3000];
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "bombs.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "bombs", "kind": "Bomb"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "a": {"type": "array", "default": empties,
                            "items": {"type": "object", "properties": {
                                "b": {"type": "array", "default": empties,
                                    "items": {"type": "object"}}}}}}}}}}}]}});
    let (code, r) = h
        .raw(
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            None,
            &crd.to_string(),
        )
        .await;
    assert_eq!(code, 201, "{r}");
    let path = "/apis/example.com/v1/namespaces/default/bombs";
    let body = json!({"apiVersion": "example.com/v1", "kind": "Bomb",
        "metadata": {"name": "b"}, "spec": {}});
    let (code, status) = wasmctrl_testkit::eventually(
        "the CRD served",
        std::time::Duration::from_secs(10),
        || async {
            let (code, status) = h.raw("POST", path, None, &body.to_string()).await;
            (code != 404).then_some((code, status))
        },
    )
    .await;
    assert_eq!(code, 413, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("defaults add more than"),
        "{status}"
    );
}

#[tokio::test]
async fn nesting_and_path_segments_are_bounded() {
    let h = Harness::start().await;
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let body = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"deep"}},"x":{}}}"#,
        deep(200)
    );
    let (code, status) = h.raw("POST", CMS, None, &body).await;
    assert_eq!(code, 400, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("recursion limit exceeded"),
        "{status}"
    );
    assert_eq!(h.server.limit_exceeded("jsonDepth"), 1);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p"}});
    assert_eq!(h.raw("POST", CMS, None, &cm.to_string()).await.0, 201);
    let patch = format!(r#"{{"x":{}}}"#, deep(200));
    let (code, _) = h
        .raw(
            "PATCH",
            &format!("{CMS}/p"),
            Some("application/merge-patch+json"),
            &patch,
        )
        .await;
    assert_eq!(code, 400);
    assert_eq!(h.server.limit_exceeded("jsonDepth"), 2);

    let yaml = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: deep\nx: {}\n",
        deep(200)
    );
    let (code, status) = h.raw("POST", CMS, Some("application/yaml"), &yaml).await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(h.server.limit_exceeded("yamlDepth"), 1);
    assert_eq!(h.server.limit_exceeded("yamlExpansion"), 0);

    let (code, status) = h
        .raw("GET", "/api/v1/namespaces/%FF/configmaps", None, "")
        .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(h.server.limit_exceeded("pathSegment"), 1);
    // Malformed bodies that are not too deep count as no limit.
    let (code, _) = h.raw("POST", CMS, None, "{not json").await;
    assert_eq!(code, 400);
    assert_eq!(h.server.limit_exceeded("jsonDepth"), 2);
}

/// The JSON depth limit holds on the `scale` subresource's own body
/// reader, for merge and JSON patches alike.
#[tokio::test]
async fn a_scale_patch_is_held_to_the_json_depth_limit() {
    let h = Harness::start().await;
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
        },
    });
    let (code, status) = h
        .raw("POST", deployments, None, &deployment.to_string())
        .await;
    assert_eq!(code, 201, "{status}");
    let scale = format!("{deployments}/d/scale");
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    for (content_type, patch) in [
        (
            "application/merge-patch+json",
            format!(r#"{{"spec":{{"replicas":2,"x":{}}}}}"#, deep(200)),
        ),
        (
            "application/json-patch+json",
            format!(
                r#"[{{"op":"replace","path":"/spec/replicas","value":{}}}]"#,
                deep(200)
            ),
        ),
    ] {
        let (code, status) = h.raw("PATCH", &scale, Some(content_type), &patch).await;
        assert_eq!(code, 400, "{content_type}: {status}");
        assert!(
            status["message"]
                .as_str()
                .unwrap()
                .contains("recursion limit exceeded"),
            "{status}"
        );
    }
    assert_eq!(h.server.limit_exceeded("jsonDepth"), 2);
    // Nothing was written; a patch within the limit still is.
    let (code, status) = h
        .raw(
            "PATCH",
            &scale,
            Some("application/merge-patch+json"),
            r#"{"spec":{"replicas":3}}"#,
        )
        .await;
    assert_eq!(
        (code, &status["spec"]["replicas"]),
        (200, &json!(3)),
        "{status}"
    );
}

/// Audiences of a TokenRequest and of a TokenReview are each at most
/// 1 KiB, and a SubjectAccessReview's extra key at most 1 000 values:
/// refused with 400 naming the bound, and counted.
#[tokio::test]
async fn token_audiences_and_review_extra_values_are_bounded() {
    let h = Harness::start().await;
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"}});
    let (code, status) = h
        .raw(
            "POST",
            "/api/v1/namespaces/default/serviceaccounts",
            None,
            &sa.to_string(),
        )
        .await;
    assert_eq!(code, 201, "{status}");
    let long = "a".repeat(1025);
    let request = |audience: &str| {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": [audience]}})
        .to_string()
    };
    let token_request = "/api/v1/namespaces/default/serviceaccounts/sa/token";
    let (code, status) = h.raw("POST", token_request, None, &request(&long)).await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "an audience of 1025 bytes exceeds the limit of 1024"
    );
    assert_eq!(h.server.limit_exceeded("tokenAudiences"), 1);
    let (code, status) = h
        .raw("POST", token_request, None, &request(&long[..1024]))
        .await;
    assert_eq!(code, 201, "{status}");
    let token = status["status"]["token"].as_str().unwrap().to_string();

    // Audiences within their bounds that would make a token the server
    // refuses to read: refused when asked, not minted.
    let many: Vec<String> = (0..100)
        .map(|i| format!("{i:04}{}", "b".repeat(1000)))
        .collect();
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": many}});
    let (code, status) = h.raw("POST", token_request, None, &body.to_string()).await;
    assert_eq!(code, 400, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("more than the 16384"),
        "{status}"
    );

    let review = |audience: &str| {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token, "audiences": [audience]}})
        .to_string()
    };
    let token_reviews = "/apis/authentication.k8s.io/v1/tokenreviews";
    let (code, status) = h.raw("POST", token_reviews, None, &review(&long)).await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "an audience of 1025 bytes exceeds the limit of 1024"
    );
    assert_eq!(h.server.limit_exceeded("tokenAudiences"), 2);
    let (code, status) = h
        .raw("POST", token_reviews, None, &review(&long[..1024]))
        .await;
    assert_eq!(code, 201, "{status}");
    assert_eq!(status["status"]["authenticated"], true, "{status}");

    let access_review = |values: usize| {
        let values: Vec<String> = (0..values).map(|i| format!("v{i}")).collect();
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": "u", "extra": {"k": values},
                "resourceAttributes": {"verb": "get", "resource": "pods"}}})
        .to_string()
    };
    let access_reviews = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let (code, status) = h
        .raw("POST", access_reviews, None, &access_review(1001))
        .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "spec.extra has a key (1 bytes) with 1001 values; at most 1000 are accepted"
    );
    assert_eq!(h.server.limit_exceeded("reviewLists"), 1);
    let (code, status) = h
        .raw("POST", access_reviews, None, &access_review(1000))
        .await;
    assert_eq!(code, 201, "{status}");
    assert_eq!(h.server.limit_exceeded("reviewLists"), 1);
}

/// A field name of two megabytes over eighty thousand fields: the
/// managedFields of a write are built by walking the object once, so
/// neither the name nor the path to it is copied (or compared) again for
/// each field below it. Before, each field's insertion copied the whole
/// path: 160 GB of copies for this 3 MiB body.
#[tokio::test]
async fn a_long_field_name_over_many_fields_costs_the_objects_size() {
    let h = Harness::start().await;
    let long = "k".repeat(2 << 20);
    let fields: serde_json::Map<String, Value> =
        (0..80_000).map(|i| (format!("a{i}"), json!(0))).collect();
    let body = json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "wide"},
        "x": {long: fields},
    })
    .to_string();
    let started = Instant::now();
    let (code, status) = h
        .raw("POST", &format!("{CMS}?dryRun=All"), None, &body)
        .await;
    let took = started.elapsed();
    eprintln!("a 2 MiB field name over 80,000 fields: {code} after {took:?}");
    assert!(code == 201 || code == 413, "{code}: {status}");
    // A generous bound for a debug build on a loaded machine (about half
    // a second alone); before, it took 7.5 s in a debug build here.
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
}

/// An apply that conflicts on thousands of fields lists the first hundred
/// (each path at most 1 KiB) and counts the rest, in the message and in
/// the Status's causes.
#[tokio::test]
async fn an_apply_conflicting_on_many_fields_lists_a_hundred() {
    let h = Harness::start().await;
    let data = |v: &str| -> serde_json::Map<String, Value> {
        (0..3000).map(|i| (format!("k{i}"), json!(v))).collect()
    };
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owned"}, "data": data("a")});
    let (code, status) = h
        .raw(
            "POST",
            &format!("{CMS}?fieldManager=first"),
            None,
            &cm.to_string(),
        )
        .await;
    assert_eq!(code, 201, "{status}");
    let mut applied = cm.clone();
    applied["data"] = Value::Object(data("b"));
    let (code, status) = h
        .raw(
            "PATCH",
            &format!("{CMS}/owned?fieldManager=second"),
            Some("application/apply-patch+yaml"),
            &applied.to_string(),
        )
        .await;
    assert_eq!(code, 409, "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with("Apply failed with 3000 conflicts")
            && message.ends_with("and 2900 more"),
        "{}",
        &message[..message.len().min(300)]
    );
    let causes = status["details"]["causes"].as_array().unwrap();
    assert!(causes.len() <= 101, "{} causes", causes.len());
}

/// A field manager's name is stored with every field set it owns, so it is
/// at most 128 bytes of printable characters, as upstream: a write naming
/// a longer one is refused with 422 naming `fieldManager`.
#[tokio::test]
async fn a_field_managers_name_is_at_most_128_bytes() {
    let h = Harness::start().await;
    let cm = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}).to_string()
    };
    let (code, status) = h
        .raw(
            "POST",
            &format!("{CMS}?fieldManager={}", "m".repeat(128)),
            None,
            &cm("fits"),
        )
        .await;
    assert_eq!(code, 201, "{status}");
    for (method, path, ct) in [
        ("POST", CMS.to_string(), None),
        (
            "PATCH",
            format!("{CMS}/fits"),
            Some("application/apply-patch+yaml"),
        ),
    ] {
        let (code, status) = h
            .raw(
                method,
                &format!("{path}?fieldManager={}", "m".repeat(129)),
                ct,
                &cm("fits"),
            )
            .await;
        assert_eq!(code, 422, "{method}: {status}");
        assert_eq!(
            status["details"]["causes"][0]["field"], "fieldManager",
            "{status}"
        );
        assert!(
            status["message"].as_str().unwrap().contains("128 bytes"),
            "{status}"
        );
    }
}
