//! Malformed and mismatched requests get the real server's statuses and
//! store nothing.

use serde_json::json;

use crate::common::Harness;

const CMS: &str = "/api/v1/namespaces/default/configmaps";

async fn count(h: &Harness) -> usize {
    let (_, list) = h.raw("GET", CMS, None, "").await;
    list["items"].as_array().unwrap().len()
}

#[tokio::test]
async fn bad_requests_store_nothing() {
    let h = Harness::start().await;
    let (code, s) = h
        .raw("POST", CMS, Some("application/json"), "{not json")
        .await;
    assert_eq!(code, 400);
    assert_eq!(s["kind"], "Status");
    assert_eq!(s["reason"], "BadRequest");

    let secret =
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}).to_string();
    let (code, _) = h.raw("POST", CMS, None, &secret).await;
    assert_eq!(code, 400, "wrong kind for the URL");
    let apps = json!({"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
        .to_string();
    let (code, _) = h.raw("POST", CMS, None, &apps).await;
    assert_eq!(code, 400, "wrong apiVersion for the URL");

    let bad = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}})
        .to_string();
    let (code, s) = h.raw("POST", CMS, None, &bad).await;
    assert_eq!(code, 422);
    assert_eq!(s["reason"], "Invalid");
    assert_eq!(s["details"]["causes"][0]["field"], "metadata.name");
    let noname = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}).to_string();
    let (code, _) = h.raw("POST", CMS, None, &noname).await;
    assert_eq!(code, 422);
    let badlabel = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ok", "labels": {"a": "-x"}}}).to_string();
    let (code, _) = h.raw("POST", CMS, None, &badlabel).await;
    assert_eq!(code, 422);
    let wrong_ns = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ok", "namespace": "kube-system"}}).to_string();
    let (code, _) = h.raw("POST", CMS, None, &wrong_ns).await;
    assert_eq!(code, 400);

    let (code, s) = h
        .raw("GET", "/api/v1/namespaces/default/widgets", None, "")
        .await;
    assert_eq!(code, 404);
    assert_eq!(
        s["message"],
        "the server could not find the requested resource"
    );
    let (code, _) = h
        .raw("GET", "/apis/nope.example.com/v1/things", None, "")
        .await;
    assert_eq!(code, 404);
    let (code, s) = h.raw("GET", &format!("{CMS}/missing"), None, "").await;
    assert_eq!(code, 404);
    assert_eq!(s["details"]["name"], "missing");
    let (code, _) = h
        .raw("GET", &format!("{CMS}?labelSelector=a%20b"), None, "")
        .await;
    assert_eq!(code, 400);
    let (code, s) = h
        .raw("GET", &format!("{CMS}?fieldSelector=spec.x%3D1"), None, "")
        .await;
    assert_eq!(code, 400);
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("field label not supported")
    );

    // Patches: unknown type 415, malformed 400, missing object 404.
    let ok =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p"}}).to_string();
    assert_eq!(h.raw("POST", CMS, None, &ok).await.0, 201);
    let (code, _) = h
        .raw(
            "PATCH",
            &format!("{CMS}/p"),
            Some("application/xml"),
            "<x/>",
        )
        .await;
    assert_eq!(code, 415);
    let (code, _) = h
        .raw(
            "PATCH",
            &format!("{CMS}/p"),
            Some("application/merge-patch+json"),
            "{",
        )
        .await;
    assert_eq!(code, 400);
    let (code, _) = h
        .raw(
            "PATCH",
            &format!("{CMS}/nope"),
            Some("application/merge-patch+json"),
            "{}",
        )
        .await;
    assert_eq!(code, 404);
    let (code, _) = h
        .raw(
            "PATCH",
            &format!("{CMS}/p"),
            Some("application/json-patch+json"),
            r#"[{"op":"test","path":"/data/x","value":"y"}]"#,
        )
        .await;
    assert_eq!(code, 422);
    let (code, _) = h
        .raw(
            "PUT",
            &format!("{CMS}/p"),
            None,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}})
                .to_string(),
        )
        .await;
    assert_eq!(code, 400, "name mismatch on PUT");
    let (code, _) = h
        .raw("DELETE", &format!("{CMS}/p?dryRun=All"), None, "")
        .await;
    assert_eq!(code, 200);
    assert_eq!(count(&h).await, 1, "only the valid object was stored");
    // Only the invalid name ran into a limit: a missing name is a required
    // field, and malformed JSON is not too deep.
    assert_eq!(h.server.limit_exceeded("name"), 1);
    for limit in [
        "namespace",
        "jsonDepth",
        "requestBody",
        "jsonPatchOperations",
    ] {
        assert_eq!(h.server.limit_exceeded(limit), 0, "{limit}");
    }
}

/// Across namespaces a namespaced resource is only listed and watched, as
/// upstream serves it: a create or a collection delete there is a 405 that
/// touches nothing, in any namespace.
#[tokio::test]
async fn a_namespaced_collection_is_not_written_across_namespaces() {
    let h = Harness::start().await;
    let cm =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kept"}}).to_string();
    let (code, _) = h.raw("POST", CMS, None, &cm).await;
    assert_eq!(code, 201);
    let (code, s) = h.raw("DELETE", "/api/v1/configmaps", None, "").await;
    assert_eq!(code, 405, "{s}");
    assert_eq!(s["reason"], "MethodNotAllowed");
    assert_eq!(
        s["message"],
        "the server does not allow this method on the requested resource (DELETE)"
    );
    let (code, _) = h.raw("POST", "/api/v1/configmaps", None, &cm).await;
    assert_eq!(code, 405);
    assert_eq!(count(&h).await, 1);
    // Named, the namespace's collection is deleted.
    let (code, _) = h.raw("DELETE", CMS, None, "").await;
    assert_eq!(code, 200);
    assert_eq!(count(&h).await, 0);
}
