//! Wire-level details clients depend on: authentication, version,
//! discovery negotiation, OpenAPI, watch resume and 410 Expired.

use std::time::Duration;

use futures::{AsyncBufReadExt, TryStreamExt};
use serde_json::{Value, json};

use crate::common::Harness;

async fn get_with_accept(h: &Harness, path: &str, accept: &str) -> (String, Value) {
    let client = h.client().await;
    let req = http::Request::get(path)
        .header("accept", accept)
        .body(Vec::new())
        .unwrap();
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap();
    let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    (ct, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn token_is_required() {
    let h = Harness::start().await;
    let ca = reqwest_like_get(&h, None).await;
    assert_eq!(ca, 401);
    assert_eq!(reqwest_like_get(&h, Some("wrong")).await, 401);
    assert_eq!(reqwest_like_get(&h, Some(h.server.token())).await, 200);
    assert_eq!(h.server.limit_exceeded("tokenSize"), 0);
    // Longer than any token the server issues: refused before it is parsed.
    let huge = "a.".repeat(10_000);
    assert_eq!(reqwest_like_get(&h, Some(&huge)).await, 401);
    assert_eq!(h.server.limit_exceeded("tokenSize"), 1);
    let mode = std::fs::metadata(h.kubeconfig_path()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(mode.permissions().mode() & 0o777, 0o600);
}

/// GET /version over TLS with an optional token, without kube's auth layer.
async fn reqwest_like_get(h: &Harness, token: Option<&str>) -> u16 {
    let mut kc = kube::config::Kubeconfig::from_yaml(&h.server.kubeconfig()).unwrap();
    match token {
        Some(t) => kc.auth_infos[0].auth_info.as_mut().unwrap().token = Some(t.to_string().into()),
        None => kc.auth_infos[0].auth_info.as_mut().unwrap().token = None,
    }
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(cfg).unwrap();
    let req = http::Request::get("/version").body(Vec::new()).unwrap();
    client
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn version_and_discovery_negotiation() {
    let h = Harness::start().await;
    let (_, v) = h.raw("GET", "/version?timeout=5s", None, "").await;
    assert_eq!(v["minor"], "32");
    let kubectl_accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
    let (ct, doc) = get_with_accept(&h, "/apis", kubectl_accept).await;
    assert_eq!(
        ct,
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    assert_eq!(doc["kind"], "APIGroupDiscoveryList");
    assert_eq!(doc["apiVersion"], "apidiscovery.k8s.io/v2");
    let (ct, doc) = get_with_accept(
        &h,
        "/api",
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
    )
    .await;
    assert_eq!(
        ct,
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
    );
    assert_eq!(doc["items"][0]["metadata"]["name"], "");
    let (ct, doc) = get_with_accept(&h, "/api", "application/json").await;
    assert_eq!(ct, "application/json");
    assert_eq!(doc["kind"], "APIVersions");
    let (_, doc) = h.raw("GET", "/apis/apps/v1", None, "").await;
    let names: Vec<&str> = doc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"deployments/status") && names.contains(&"deployments/scale"));
    let (_, root) = h.raw("GET", "/openapi/v3", None, "").await;
    let url = root["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, gv) = h.raw("GET", &url, None, "").await;
    assert_eq!(code, 200);
    let p = &gv["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
    assert_eq!(p["x-kubernetes-group-version-kind"]["kind"], "ConfigMap");
}

async fn watch_lines(h: &Harness, path: &str, n: usize) -> Vec<Value> {
    let client = h.client().await;
    let req = http::Request::get(path).body(Vec::new()).unwrap();
    let stream = client.request_stream(req).await.unwrap();
    let mut lines = stream.lines();
    let mut out = Vec::new();
    while out.len() < n {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.try_next())
            .await
            .expect("watch line in time")
            .unwrap();
        match line {
            Some(l) => out.push(serde_json::from_str(&l).unwrap()),
            None => break,
        }
    }
    out
}

#[tokio::test]
async fn watch_resume_expiry_and_initial_events() {
    let h = Harness::start().await;
    let create = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}).to_string()
    };
    let (_, a) = h
        .raw(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            None,
            &create("a"),
        )
        .await;
    let rv_a = a["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    h.raw(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        None,
        &create("b"),
    )
    .await;
    // Resume after a: only b.
    let ev = watch_lines(
        &h,
        &format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv_a}"),
        1,
    )
    .await;
    assert_eq!(ev[0]["type"], "ADDED");
    assert_eq!(ev[0]["object"]["metadata"]["name"], "b");
    // Streaming list: ADDED for both, then the initial-events-end bookmark.
    let ev = watch_lines(
        &h,
        "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion=",
        3,
    )
    .await;
    assert_eq!(ev[2]["type"], "BOOKMARK");
    assert_eq!(
        ev[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    // sendInitialEvents without NotOlderThan is invalid.
    let (code, _) = h
        .raw(
            "GET",
            "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true",
            None,
            "",
        )
        .await;
    assert_eq!(code, 422);
    // Past the history window: 200 with an ERROR 410 event.
    h.server.expire_watches();
    let ev = watch_lines(
        &h,
        &format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv_a}"),
        1,
    )
    .await;
    assert_eq!(ev[0]["type"], "ERROR");
    assert_eq!(ev[0]["object"]["code"], 410);
    assert_eq!(ev[0]["object"]["reason"], "Expired");
    assert_eq!(h.server.limit_exceeded("watchExpired"), 1);
    // Field selector on a watch, with timeoutSeconds closing the stream.
    let ev = watch_lines(&h, "/api/v1/namespaces/default/configmaps?watch=true&fieldSelector=metadata.name%3Da&timeoutSeconds=1", 5).await;
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0]["object"]["metadata"]["name"], "a");
    // With bookmarks, the timeout ends with one at the current version.
    let ev = watch_lines(
        &h,
        &format!("/api/v1/namespaces/default/configmaps?watch=true&allowWatchBookmarks=true&resourceVersion={}&timeoutSeconds=1", h.server.resource_version()),
        5,
    )
    .await;
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0]["type"], "BOOKMARK");
    assert_eq!(
        ev[0]["object"]["metadata"]["resourceVersion"],
        h.server.resource_version().to_string()
    );
}

/// An object that leaves a selective watch's selector reaches it as
/// DELETED with its state as it last matched, at the change's
/// resourceVersion, as upstream's cacher sends it.
#[tokio::test]
async fn an_object_leaving_a_selector_is_deleted_as_it_last_matched() {
    let h = Harness::start().await;
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "sel", "labels": {"a": "1"}}, "data": {"v": "before"}});
    let (_, created) = h
        .raw(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            None,
            &body.to_string(),
        )
        .await;
    let from = created["metadata"]["resourceVersion"].as_str().unwrap();
    let patch = json!({"metadata": {"labels": {"a": "2"}}, "data": {"v": "after"}});
    let (code, patched) = h
        .raw(
            "PATCH",
            "/api/v1/namespaces/default/configmaps/sel",
            Some("application/merge-patch+json"),
            &patch.to_string(),
        )
        .await;
    assert_eq!(code, 200, "{patched}");
    let events = watch_lines(
        &h,
        &format!("/api/v1/namespaces/default/configmaps?watch=true&labelSelector=a%3D1&resourceVersion={from}"),
        1,
    )
    .await;
    assert_eq!(events[0]["type"], "DELETED");
    let object = &events[0]["object"];
    assert_eq!(object["metadata"]["labels"]["a"], "1");
    assert_eq!(object["data"]["v"], "before");
    assert_eq!(
        object["metadata"]["resourceVersion"],
        patched["metadata"]["resourceVersion"]
    );
}
