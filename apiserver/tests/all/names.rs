//! Names and namespaces are validated for every kind before anything is
//! stored: a name with a control character, NUL or `/` is a 422 with
//! upstream's causes, and the data directory stays loadable.

use serde_json::{Value, json};

use crate::common::Harness;

fn bodies(name: &str) -> Vec<(&'static str, Value)> {
    vec![
        (
            "/api/v1/namespaces/default/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": name}, "rules": []}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": name},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
                   "subjects": []}),
        ),
    ]
}

async fn names_stored(h: &Harness) -> Vec<String> {
    let mut out = Vec::new();
    for (path, _) in bodies("x") {
        let (code, list) = h.raw("GET", path, None, "").await;
        assert_eq!(code, 200);
        for item in list["items"].as_array().unwrap() {
            out.push(item["metadata"]["name"].as_str().unwrap().to_string());
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn bad_names_are_refused_for_every_kind_and_restarts_still_load() {
    let data = tempfile::tempdir().unwrap();
    let config = wasmctrl_apiserver::Config {
        data_dir: Some(data.path().to_path_buf()),
        ..Default::default()
    };
    let h = Harness::start_with(config.clone()).await;
    for bad in [
        "a\u{0}b",
        "a\nb",
        "tab\there",
        "bell\u{7}",
        "a/b",
        "x\u{0}/\u{0}y",
    ] {
        for (path, body) in bodies(bad) {
            let (code, status) = h.raw("POST", path, None, &body.to_string()).await;
            assert_eq!(code, 422, "{bad:?} at {path}: {status}");
            assert_eq!(status["reason"], "Invalid");
            let cause = &status["details"]["causes"][0];
            assert_eq!(cause["field"], "metadata.name", "{status}");
            assert_eq!(cause["reason"], "FieldValueInvalid");
            let message = status["message"].as_str().unwrap();
            assert!(
                !message.chars().any(|c| c.is_control()),
                "control characters are escaped in {message:?}"
            );
        }
    }
    // generateName ends up validated the same way.
    let generated = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                           "metadata": {"generateName": "evil\u{0}"}, "rules": []});
    let (code, _) = h
        .raw(
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            None,
            &generated.to_string(),
        )
        .await;
    assert_eq!(code, 422);
    // Server-side apply creating an object validates the URL's name too.
    let apply =
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "rules": []});
    let (code, status) = h
        .raw(
            "PATCH",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/bad%00name?fieldManager=t",
            Some("application/apply-patch+yaml"),
            &apply.to_string(),
        )
        .await;
    assert_eq!(code, 422, "{status}");
    // RBAC names are path segments: ':' is fine, as upstream.
    for (path, body) in bodies("system:ok") {
        if path.contains("configmaps") {
            continue;
        }
        let (code, status) = h.raw("POST", path, None, &body.to_string()).await;
        assert_eq!(code, 201, "{status}");
    }
    // Namespaces are RFC 1123 labels.
    let (code, status) = h
        .raw(
            "POST",
            "/api/v1/namespaces/Bad_NS/configmaps",
            None,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ok"}})
                .to_string(),
        )
        .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(
        status["details"]["causes"][0]["field"],
        "metadata.namespace"
    );
    // Six bad names for three kinds, the generated name and the applied one;
    // the bad namespace counted apart.
    assert_eq!(h.server.limit_exceeded("name"), 6 * 3 + 2);
    assert_eq!(h.server.limit_exceeded("namespace"), 1);

    let before = names_stored(&h).await;
    assert_eq!(before, ["system:ok", "system:ok"]);
    h.server.shutdown().await;
    let h = Harness::start_with(config).await;
    assert_eq!(names_stored(&h).await, before, "the data directory loads");
}
