//! The in-process controllers' writes as admission webhooks see them on
//! a real cluster: the garbage collector's and the namespace controller's
//! deletes and updates come as their service accounts', and a refusal
//! keeps the object until the webhook allows the write, when it is tried
//! again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use super::server::{WebhookServer, allow, deny};
use super::{CONFIGMAPS, VALIDATING, configmap, configure, hook, rule};
use crate::common::Harness;

/// Creates ConfigMap `name` in the default namespace with `labels`, its
/// one ownerReference `reference`.
async fn create_dependent(h: &Harness, name: &str, labels: Value, reference: Value) {
    let mut dependent: Value = serde_json::from_str(&configmap(name, labels)).unwrap();
    dependent["metadata"]["ownerReferences"] = json!([reference]);
    let (code, body) = h
        .raw("POST", CONFIGMAPS, None, &dependent.to_string())
        .await;
    assert_eq!(code, 201, "{body}");
}

/// Deletes ConfigMap `name` of the default namespace in the foreground.
async fn delete_in_the_foreground(h: &Harness, name: &str) {
    let foreground =
        r#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground"}"#;
    let (code, body) = h
        .raw("DELETE", &format!("{CONFIGMAPS}/{name}"), None, foreground)
        .await;
    assert_eq!(code, 200, "{body}");
}

/// A webhook server that denies the reviews `refused` picks, saying
/// `why`, until the switch it returns is set; it allows everything else.
async fn refusing_until_allowed(
    refused: impl Fn(&Value) -> bool + Send + Sync + 'static,
    why: &'static str,
) -> (WebhookServer, Arc<AtomicBool>) {
    let allowing = Arc::new(AtomicBool::new(false));
    let seen = allowing.clone();
    let hooks = WebhookServer::start(move |call| {
        if refused(&call.request) && !seen.load(Ordering::SeqCst) {
            deny(why)
        } else {
            allow()
        }
    })
    .await;
    (hooks, allowing)
}

/// The garbage collector and the namespace controller delete as clients
/// do on a real cluster: a webhook sees their deletes, as their service
/// accounts, and a refusal keeps the object (the namespace stays
/// terminating, its conditions saying why) until the webhook allows it,
/// when the delete is tried again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controllers_deletes_are_admitted_and_tried_again_once_allowed() {
    let h = Harness::start().await;
    let (hooks, allowing) = refusing_until_allowed(
        |review| review["oldObject"]["metadata"]["labels"]["protect"] == "yes",
        "protected",
    )
    .await;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "doomed"}});
    assert_eq!(
        h.raw("POST", "/api/v1/namespaces", None, &ns.to_string())
            .await
            .0,
        201
    );
    let in_doomed = "/api/v1/namespaces/doomed/configmaps";
    for (name, labels) in [("kept", json!({"protect": "yes"})), ("free", json!({}))] {
        let (code, body) = h
            .raw("POST", in_doomed, None, &configmap(name, labels))
            .await;
        assert_eq!(code, 201, "{body}");
    }
    let (_, owner) = h
        .raw("POST", CONFIGMAPS, None, &configmap("owner", json!({})))
        .await;
    let reference = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
        "uid": owner["metadata"]["uid"]});
    create_dependent(&h, "dependent", json!({"protect": "yes"}), reference).await;
    configure(
        &h,
        VALIDATING,
        "protect",
        vec![hook(
            "protect.example.com",
            &hooks,
            "/delete",
            rule(&["DELETE"], &["configmaps"]),
        )],
    )
    .await;

    assert_eq!(
        h.raw("DELETE", "/api/v1/namespaces/doomed", None, "")
            .await
            .0,
        200
    );
    assert_eq!(
        h.raw("DELETE", &format!("{CONFIGMAPS}/owner"), None, "")
            .await
            .0,
        200
    );
    // The owner's delete, then the controllers': the two protected
    // configmaps and the free one.
    let calls = hooks.await_calls("/delete", 4).await;
    let by = |name: &str| {
        calls
            .iter()
            .find(|c| c.request["name"] == name)
            .map(|c| c.request["userInfo"]["username"].clone())
            .unwrap_or_else(|| panic!("no review of {name}"))
    };
    assert_eq!(
        by("kept"),
        "system:serviceaccount:kube-system:namespace-controller"
    );
    assert_eq!(
        by("dependent"),
        "system:serviceaccount:kube-system:generic-garbage-collector"
    );
    let exists = |path: String| {
        let h = &h;
        async move { h.raw("GET", &path, None, "").await.0 == 200 }
    };
    wasmctrl_testkit::eventually(
        "the unprotected configmap deleted",
        std::time::Duration::from_secs(30),
        || async { !exists(format!("{in_doomed}/free")).await },
    )
    .await;
    assert!(exists(format!("{in_doomed}/kept")).await);
    assert!(exists(format!("{CONFIGMAPS}/dependent")).await);
    let condition = |namespace: &Value, kind: &str| {
        namespace["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == kind).cloned())
            .unwrap_or(Value::Null)
    };
    // The conditions are written once the pass over the contents ends.
    let namespace = wasmctrl_testkit::eventually(
        "the namespace's conditions",
        std::time::Duration::from_secs(30),
        || async {
            let (_, namespace) = h.raw("GET", "/api/v1/namespaces/doomed", None, "").await;
            (!condition(&namespace, "NamespaceDeletionContentFailure").is_null())
                .then_some(namespace)
        },
    )
    .await;
    assert_eq!(namespace["status"]["phase"], "Terminating", "{namespace}");
    let failure = condition(&namespace, "NamespaceDeletionContentFailure");
    assert_eq!(failure["status"], "True", "{namespace}");
    assert_eq!(failure["reason"], "ContentDeletionFailed");
    assert_eq!(
        failure["message"],
        "Failed to delete all resource types, 1 remaining: admission webhook \"protect.example.com\" denied the request: protected"
    );
    let remaining = condition(&namespace, "NamespaceContentRemaining");
    assert_eq!(remaining["status"], "True", "{namespace}");
    assert_eq!(
        remaining["message"],
        "Some resources are remaining: configmaps has 1 resource instances"
    );
    assert_eq!(
        condition(&namespace, "NamespaceFinalizersRemaining")["status"],
        "False"
    );

    // Both refused again on the next try, then let through.
    hooks.await_calls("/delete", 6).await;
    allowing.store(true, Ordering::SeqCst);
    wasmctrl_testkit::eventually(
        "the namespace and the dependent gone",
        std::time::Duration::from_secs(60),
        || async {
            !exists("/api/v1/namespaces/doomed".into()).await
                && !exists(format!("{CONFIGMAPS}/dependent")).await
        },
    )
    .await;
}

/// The collector's updates are admitted as upstream's collector's patches
/// are: taking an orphaned dependent's ownerReference out, and removing an
/// owner's `orphan` or `foregroundDeletion` finalizer, are UPDATEs by its
/// service account. A refusal keeps the reference and the finalizer (the
/// owner stays) until the webhook allows them, when they are tried again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_collector_s_updates_are_admitted_and_tried_again_once_allowed() {
    let h = Harness::start().await;
    let (hooks, allowing) = refusing_until_allowed(
        |review| {
            review["userInfo"]["username"]
                == "system:serviceaccount:kube-system:generic-garbage-collector"
        },
        "hold on",
    )
    .await;
    for (owner_name, dependent_name) in [("owner", "dependent"), ("leader", "follower")] {
        let (_, owner) = h
            .raw("POST", CONFIGMAPS, None, &configmap(owner_name, json!({})))
            .await;
        let reference = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": owner_name,
            "uid": owner["metadata"]["uid"], "blockOwnerDeletion": true});
        create_dependent(&h, dependent_name, json!({}), reference).await;
    }
    configure(
        &h,
        VALIDATING,
        "hold",
        vec![hook(
            "hold.example.com",
            &hooks,
            "/update",
            rule(&["UPDATE"], &["configmaps"]),
        )],
    )
    .await;
    let orphan = r#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Orphan"}"#;
    let (code, body) = h
        .raw("DELETE", &format!("{CONFIGMAPS}/owner"), None, orphan)
        .await;
    assert_eq!(code, 200, "{body}");
    // Refused once, then again at the retry: nothing changed meanwhile.
    let calls = hooks.await_calls("/update", 2).await;
    let review = &calls[0].request;
    assert_eq!(review["operation"], "UPDATE");
    assert_eq!(review["name"], "dependent");
    assert!(review["oldObject"]["metadata"]["ownerReferences"].is_array());
    assert!(
        review["object"]["metadata"]["ownerReferences"].is_null(),
        "{review}"
    );
    let get = |name: &'static str| {
        let h = &h;
        async move {
            h.raw("GET", &format!("{CONFIGMAPS}/{name}"), None, "")
                .await
        }
    };
    let (code, kept) = get("owner").await;
    assert_eq!(code, 200);
    assert_eq!(kept["metadata"]["finalizers"], json!(["orphan"]), "{kept}");
    let (_, held) = get("dependent").await;
    assert!(held["metadata"]["ownerReferences"].is_array(), "{held}");

    // In the foreground the collector deletes the dependent in the
    // foreground too: the `foregroundDeletion` finalizer that holds it is
    // then the collector's to remove, and refused, so both stay.
    delete_in_the_foreground(&h, "leader").await;
    wasmctrl_testkit::eventually(
        "the follower's finalizer refused",
        std::time::Duration::from_secs(30),
        || async {
            hooks.calls("/update").iter().any(|c| {
                c.request["name"] == "follower"
                    && c.request["oldObject"]["metadata"]["finalizers"]
                        == json!(["foregroundDeletion"])
            })
        },
    )
    .await;
    let (code, follower) = get("follower").await;
    assert_eq!(code, 200);
    assert!(
        follower["metadata"]["deletionTimestamp"].is_string(),
        "{follower}"
    );
    let (code, leader) = get("leader").await;
    assert_eq!(code, 200);
    assert_eq!(
        leader["metadata"]["finalizers"],
        json!(["foregroundDeletion"]),
        "{leader}"
    );

    allowing.store(true, Ordering::SeqCst);
    wasmctrl_testkit::eventually(
        "both owners and the follower gone, the orphan kept without its reference",
        std::time::Duration::from_secs(60),
        || async {
            let (owner, _) = get("owner").await;
            let (leader, _) = get("leader").await;
            let (follower, _) = get("follower").await;
            let (_, dependent) = get("dependent").await;
            owner == 404
                && leader == 404
                && follower == 404
                && dependent["metadata"]["ownerReferences"].is_null()
        },
    )
    .await;
    // The owner's finalizer went by an UPDATE of the owner, admitted too.
    let owner_updates: Vec<_> = hooks
        .calls("/update")
        .into_iter()
        .filter(|c| c.request["name"] == "owner")
        .collect();
    assert!(!owner_updates.is_empty());
    assert_eq!(
        owner_updates[0].request["oldObject"]["metadata"]["finalizers"],
        json!(["orphan"])
    );
}

/// The namespace controller lets an emptied namespace go as upstream's
/// does: an UPDATE of `namespaces/finalize` by its service account that
/// takes `kubernetes` out of `spec.finalizers`. A refusal keeps the
/// namespace terminating until the webhook allows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_namespace_controller_s_finalize_is_admitted_and_tried_again_once_allowed() {
    let h = Harness::start().await;
    let (hooks, allowing) = refusing_until_allowed(|_| true, "not yet").await;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "leaving"}});
    let (code, body) = h
        .raw("POST", "/api/v1/namespaces", None, &ns.to_string())
        .await;
    assert_eq!(code, 201, "{body}");
    configure(
        &h,
        VALIDATING,
        "finalize",
        vec![hook(
            "finalize.example.com",
            &hooks,
            "/finalize",
            rule(&["UPDATE"], &["namespaces/finalize"]),
        )],
    )
    .await;
    let (code, body) = h
        .raw("DELETE", "/api/v1/namespaces/leaving", None, "")
        .await;
    assert_eq!(code, 200, "{body}");
    // Refused once, then again at the retry.
    let calls = hooks.await_calls("/finalize", 2).await;
    let review = &calls[0].request;
    assert_eq!(review["operation"], "UPDATE");
    assert_eq!(review["subResource"], "finalize");
    assert_eq!(
        review["userInfo"]["username"],
        "system:serviceaccount:kube-system:namespace-controller"
    );
    assert_eq!(
        review["oldObject"]["spec"]["finalizers"],
        json!(["kubernetes"])
    );
    assert!(review["object"]["spec"]["finalizers"].is_null(), "{review}");
    let get = || h.raw("GET", "/api/v1/namespaces/leaving", None, "");
    let (code, kept) = get().await;
    assert_eq!(code, 200);
    assert_eq!(kept["status"]["phase"], "Terminating");
    assert_eq!(kept["spec"]["finalizers"], json!(["kubernetes"]), "{kept}");

    allowing.store(true, Ordering::SeqCst);
    wasmctrl_testkit::eventually(
        "the namespace gone",
        std::time::Duration::from_secs(60),
        || async { get().await.0 == 404 },
    )
    .await;
}

/// An ownership cycle deleted in the foreground ends as upstream's
/// collector ends it, by an UPDATE that lets a waiting dependent's
/// references stop blocking (`blockOwnerDeletion: false`): a webhook sees
/// it, and its refusal keeps the cycle until it is allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_collector_s_unblocking_of_a_cycle_is_admitted_and_tried_again_once_allowed() {
    let h = Harness::start().await;
    let unblocks = |review: &Value| {
        review["oldObject"]["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] == true
            && review["object"]["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] == false
    };
    let (hooks, allowing) = refusing_until_allowed(unblocks, "the cycle stays").await;
    let mut uids = Vec::new();
    for name in ["a", "b"] {
        let (_, made) = h
            .raw("POST", CONFIGMAPS, None, &configmap(name, json!({})))
            .await;
        uids.push(made["metadata"]["uid"].clone());
    }
    for (name, owner, uid) in [("a", "b", &uids[1]), ("b", "a", &uids[0])] {
        let refs = json!({"metadata": {"ownerReferences": [{"apiVersion": "v1",
            "kind": "ConfigMap", "name": owner, "uid": uid, "blockOwnerDeletion": true}]}});
        let (code, body) = h
            .raw(
                "PATCH",
                &format!("{CONFIGMAPS}/{name}"),
                Some("application/merge-patch+json"),
                &refs.to_string(),
            )
            .await;
        assert_eq!(code, 200, "{body}");
    }
    configure(
        &h,
        VALIDATING,
        "cycle",
        vec![hook(
            "cycle.example.com",
            &hooks,
            "/update",
            rule(&["UPDATE"], &["configmaps"]),
        )],
    )
    .await;
    delete_in_the_foreground(&h, "a").await;
    // Refused once, then again at the retry.
    wasmctrl_testkit::eventually(
        "the unblocking refused twice",
        std::time::Duration::from_secs(30),
        || async {
            hooks
                .calls("/update")
                .iter()
                .filter(|c| unblocks(&c.request))
                .count()
                >= 2
        },
    )
    .await;
    let unblocking = hooks
        .calls("/update")
        .into_iter()
        .find(|c| unblocks(&c.request))
        .unwrap();
    assert_eq!(
        unblocking.request["userInfo"]["username"],
        "system:serviceaccount:kube-system:generic-garbage-collector"
    );
    let exists = |name: &'static str| {
        let h = &h;
        async move {
            h.raw("GET", &format!("{CONFIGMAPS}/{name}"), None, "")
                .await
                .0
                == 200
        }
    };
    assert!(exists("a").await && exists("b").await, "the cycle ended");

    allowing.store(true, Ordering::SeqCst);
    wasmctrl_testkit::eventually(
        "both ends of the cycle gone",
        std::time::Duration::from_secs(60),
        || async { !exists("a").await && !exists("b").await },
    )
    .await;
}
