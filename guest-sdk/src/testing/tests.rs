//! The fake API server's own behaviour: selectors and patches as
//! kube-apiserver reads them, and the timestamps it writes.

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;
use wasmctrl_apimachinery::time;

use super::FakeCluster;
use crate::{Api, ApiError, Patch, PatchOp, Resource};

fn configmap(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
}

fn names(list: Result<Vec<ConfigMap>, ApiError>) -> Vec<String> {
    list.unwrap().iter().map(|c| c.name().to_string()).collect()
}

#[test]
fn lists_take_the_set_based_selector_grammar() {
    let _cluster = FakeCluster::new();
    let api = Api::<ConfigMap>::namespaced("ns");
    for (name, labels) in [
        ("web", json!({"app": "web", "tier": "front"})),
        ("db", json!({"app": "db", "tier": "back"})),
        ("cron", json!({"app": "cron"})),
    ] {
        api.create(&configmap(name, labels)).unwrap();
    }
    let by = |selector: &str| names(api.list_by_labels(selector));
    assert_eq!(by("app in (web, db)"), ["db", "web"]);
    assert_eq!(by("tier notin (back)"), ["cron", "web"]);
    assert_eq!(by("!tier"), ["cron"]);
    assert_eq!(by("tier,app!=db"), ["web"]);
    assert_eq!(by("app==cron"), ["cron"]);
    assert_eq!(by(""), ["cron", "db", "web"]);
}

#[test]
fn a_selector_that_does_not_parse_is_invalid_even_with_nothing_to_match() {
    let _cluster = FakeCluster::new();
    let api = Api::<ConfigMap>::namespaced("empty");
    for bad in ["app in web", "a b", "app=we b", "Bad Key", "app in ()"] {
        match api.list_by_labels(bad) {
            Err(ApiError::Invalid(m)) => assert!(
                m.starts_with(&format!(
                    "label selector {bad:?}: unable to parse requirement: "
                )),
                "{m}"
            ),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    // The host's bound: 64 requirements.
    let many = vec!["a"; 65].join(",");
    assert!(matches!(
        api.list_by_labels(&many),
        Err(ApiError::Invalid(_))
    ));
    assert!(api.list_by_labels(&vec!["a"; 64].join(",")).is_ok());
}

#[test]
fn json_patches_take_every_operation_and_name_the_one_that_failed() {
    let _cluster = FakeCluster::new();
    let api = Api::<ConfigMap>::namespaced("ns");
    api.create(&configmap("c", json!({"app": "web"}))).unwrap();
    let moved = api
        .patch(
            "c",
            &Patch::Json(json!([
                {"op": "copy", "from": "/metadata/labels/app", "path": "/metadata/labels/was"},
                {"op": "move", "from": "/metadata/labels/app", "path": "/metadata/labels/now"},
                {"op": "test", "path": "/metadata/labels/gone", "value": null}
            ])),
        )
        .unwrap();
    let labels = moved.metadata.labels.unwrap();
    assert_eq!(labels.get("was").map(String::as_str), Some("web"));
    assert_eq!(labels.get("now").map(String::as_str), Some("web"));
    assert!(!labels.contains_key("app"));

    let failed = api.patch(
        "c",
        &Patch::Json(vec![
            PatchOp::add("/data", json!({})),
            PatchOp::test("/metadata/labels/now", "db"),
        ]),
    );
    assert_eq!(
        failed.unwrap_err(),
        ApiError::Invalid(
            "json patch operation 1 (test) failed at path \"/metadata/labels/now\": expected \"db\", found \"web\"".into()
        )
    );
    assert_eq!(
        api.get("c").unwrap().data,
        None,
        "a failed patch changes nothing"
    );
    let missing = api.patch("c", &Patch::Json(vec![PatchOp::remove("/data/x")]));
    assert!(
        matches!(&missing, Err(ApiError::Invalid(m)) if m.starts_with("json patch operation 0 (remove) failed at path \"/data/x\"")),
        "{missing:?}"
    );
}

#[test]
fn timestamps_are_kubernetes_seconds() {
    let _cluster = FakeCluster::new();
    let api = Api::<ConfigMap>::namespaced("ns");
    let created = api.create(&configmap("c", json!({}))).unwrap();
    let stamp = serde_json::to_value(created.metadata.creation_timestamp)
        .unwrap()
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(stamp.len(), "2026-12-05T00:00:00Z".len(), "{stamp}");
    assert!(time::parse(&stamp).is_ok(), "{stamp}");
}

#[test]
fn a_fake_cluster_answers_canned_requests_once_and_records_them() {
    let cluster = FakeCluster::new();
    cluster.answer_http("GET", "https://api.example.com/x", 200, br#"{"a": 1}"#);
    let answer = crate::http::get("https://api.example.com/x").unwrap();
    assert_eq!(answer.status, 200);
    assert_eq!(answer.json::<serde_json::Value>().unwrap()["a"], 1);
    let again = crate::http::get("https://api.example.com/x").unwrap_err();
    assert!(again.to_string().contains("no canned answer"), "{again}");
    assert_eq!(cluster.http_requests().len(), 2);
    assert_eq!(cluster.http_requests()[0].method, "GET");
}
