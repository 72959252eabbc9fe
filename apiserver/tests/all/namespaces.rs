//! A namespace's life as Kubernetes defines it: the namespace controller's
//! `kubernetes` finalizer in its `spec.finalizers` holds it while its
//! contents go, and the `finalize` subresource is how that list is
//! written, by the controller or by an administrator letting a stuck
//! namespace go.

use std::time::Duration;

use serde_json::{Value, json};
use wasmctrl_testkit::eventually;

use crate::common::Harness;

const LIMIT: Duration = Duration::from_secs(10);
const HOLD: &str = "example.com/hold";

async fn create_namespace(h: &Harness, name: &str, finalizers: &[&str]) {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "finalizers": finalizers}});
    let (code, body) = h
        .raw("POST", "/api/v1/namespaces", None, &ns.to_string())
        .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["spec"]["finalizers"], json!(["kubernetes"]), "{body}");
}

/// A ConfigMap in `ns` that finalizer [`HOLD`] keeps once it is deleted.
async fn held_configmap(h: &Harness, ns: &str) {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "held", "finalizers": [HOLD]}});
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let (code, body) = h.raw("POST", &path, None, &cm.to_string()).await;
    assert_eq!(code, 201, "{body}");
}

async fn get_namespace(h: &Harness, name: &str) -> (u16, Value) {
    h.raw("GET", &format!("/api/v1/namespaces/{name}"), None, "")
        .await
}

/// Deletes `name` and waits until its content is marked for deletion.
async fn terminate(h: &Harness, name: &str) {
    let (code, body) = h
        .raw("DELETE", &format!("/api/v1/namespaces/{name}"), None, "")
        .await;
    assert_eq!(code, 200, "{body}");
    let path = format!("/api/v1/namespaces/{name}/configmaps/held");
    eventually("the held content marked for deletion", LIMIT, || async {
        let (_, cm) = h.raw("GET", &path, None, "").await;
        cm["metadata"]["deletionTimestamp"].is_string()
    })
    .await;
}

async fn finalize(h: &Harness, name: &str, method: &str, finalizers: Value) -> (u16, Value) {
    let (_, mut ns) = get_namespace(h, name).await;
    ns["spec"]["finalizers"] = finalizers;
    let path = format!("/api/v1/namespaces/{name}/finalize");
    h.raw(method, &path, None, &ns.to_string()).await
}

/// Taking its last metadata finalizer off a terminating namespace does not
/// delete it while the namespace controller's finalizer still waits for
/// its contents; it goes once they have.
#[tokio::test]
async fn a_terminating_namespace_waits_for_its_contents_whatever_its_metadata_finalizers() {
    let h = Harness::start().await;
    create_namespace(&h, "held", &["example.com/ns-hold"]).await;
    held_configmap(&h, "held").await;
    terminate(&h, "held").await;
    let patch = json!({"metadata": {"finalizers": null}}).to_string();
    let (code, body) = h
        .raw(
            "PATCH",
            "/api/v1/namespaces/held",
            Some("application/merge-patch+json"),
            &patch,
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let (code, ns) = get_namespace(&h, "held").await;
    assert_eq!(code, 200, "gone while its content stays: {ns}");
    assert_eq!(ns["status"]["phase"], "Terminating");
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]), "{ns}");

    let (code, body) = h
        .raw(
            "PATCH",
            "/api/v1/namespaces/held/configmaps/held",
            Some("application/merge-patch+json"),
            &patch,
        )
        .await;
    assert_eq!(code, 200, "{body}");
    eventually("the namespace gone", LIMIT, || async {
        get_namespace(&h, "held").await.0 == 404
    })
    .await;
}

/// `PUT namespaces/{name}/finalize` writes `spec.finalizers` and nothing
/// else: a finalizer of another controller holds the namespace after the
/// namespace controller let its own go, and emptying the list lets a
/// namespace its contents hold go at once, as on a cluster. Only PUT is
/// served; the names are checked as upstream checks them.
#[tokio::test]
async fn the_finalize_subresource_writes_a_namespace_s_spec_finalizers() {
    let h = Harness::start().await;
    create_namespace(&h, "custom", &[]).await;
    let (code, ns) = finalize(&h, "custom", "PUT", json!(["kubernetes", HOLD])).await;
    assert_eq!(code, 200, "{ns}");
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes", HOLD]));
    assert_eq!(ns["status"]["phase"], "Active");
    // A main-resource update leaves them as they are.
    let mut changed = ns.clone();
    changed["spec"]["finalizers"] = json!([]);
    changed["metadata"]["labels"] = json!({"team": "a"});
    let (code, ns) = h
        .raw(
            "PUT",
            "/api/v1/namespaces/custom",
            None,
            &changed.to_string(),
        )
        .await;
    assert_eq!(code, 200, "{ns}");
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes", HOLD]));
    assert_eq!(ns["metadata"]["labels"]["team"], "a");

    // The namespace controller takes out its own finalizer only.
    let (code, body) = h.raw("DELETE", "/api/v1/namespaces/custom", None, "").await;
    assert_eq!(code, 200, "{body}");
    eventually("the controller's finalizer gone", LIMIT, || async {
        get_namespace(&h, "custom").await.1["spec"]["finalizers"] == json!([HOLD])
    })
    .await;
    let (code, ns) = get_namespace(&h, "custom").await;
    assert_eq!((code, &ns["status"]["phase"]), (200, &json!("Terminating")));
    let (code, gone) = finalize(&h, "custom", "PUT", json!([])).await;
    assert_eq!(code, 200, "{gone}");
    assert_eq!(get_namespace(&h, "custom").await.0, 404);

    // A namespace its contents hold, let go by hand.
    create_namespace(&h, "stuck", &[]).await;
    held_configmap(&h, "stuck").await;
    terminate(&h, "stuck").await;
    let (code, status) = finalize(&h, "stuck", "PATCH", json!([])).await;
    assert_eq!(code, 405, "{status}");
    // Deleting it again is refused while its finalizers hold it.
    let (code, status) = h.raw("DELETE", "/api/v1/namespaces/stuck", None, "").await;
    assert_eq!(code, 409, "{status}");
    assert_eq!(
        status["message"],
        "Operation cannot be fulfilled on namespaces \"stuck\": The system is ensuring all content is removed from this namespace.  Upon completion, this namespace will automatically be purged by the system."
    );
    let (code, status) = finalize(&h, "stuck", "PUT", json!(["hold"])).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["details"]["causes"][0]["field"], "spec.finalizers[0]",
        "{status}"
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("name is neither a standard finalizer name nor is it fully qualified"),
        "{status}"
    );
    assert_eq!(get_namespace(&h, "stuck").await.0, 200);
    let (code, body) = finalize(&h, "stuck", "PUT", json!([])).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(get_namespace(&h, "stuck").await.0, 404);
}

/// `PUT namespaces/{name}/status` writes the status, as a controller
/// reporting conditions does, and keeps the spec; its phase must follow
/// the namespace's deletion, as upstream checks it.
#[tokio::test]
async fn the_status_subresource_writes_a_namespace_s_status_and_checks_its_phase() {
    let h = Harness::start().await;
    create_namespace(&h, "reported", &[]).await;
    let (_, mut ns) = get_namespace(&h, "reported").await;
    ns["status"]["conditions"] = json!([{"type": "Example", "status": "True",
        "lastTransitionTime": "2026-12-07T00:00:00Z", "reason": "Tested", "message": "set"}]);
    ns["spec"]["finalizers"] = json!([]);
    let path = "/api/v1/namespaces/reported/status";
    let (code, written) = h.raw("PUT", path, None, &ns.to_string()).await;
    assert_eq!(code, 200, "{written}");
    assert_eq!(written["status"]["conditions"][0]["type"], "Example");
    assert_eq!(written["status"]["phase"], "Active");
    assert_eq!(written["spec"]["finalizers"], json!(["kubernetes"]));
    let (_, stored) = get_namespace(&h, "reported").await;
    assert_eq!(stored["status"]["conditions"][0]["reason"], "Tested");

    let mut wrong = stored.clone();
    wrong["status"]["phase"] = json!("Terminating");
    let (code, status) = h.raw("PUT", path, None, &wrong.to_string()).await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["details"]["causes"][0]["field"], "status.Phase");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("may only be 'Active' if `deletionTimestamp` is empty"),
        "{status}"
    );
}
