//! Authorization with `Authorization::Rbac`, driven through kube-rs and the
//! real kubectl: service accounts get exactly what their roles grant (and
//! upstream's exact 403 otherwise), tokens come from the TokenRequest API
//! (`kubectl create token`), `kubectl auth can-i` (with and without
//! `--list`) and the access reviews tell the truth, binding changes apply
//! to the next request, the admin stays all-powerful, and
//! `Authorization::AlwaysAllow` behaves as before.

use std::process::{Command, Output};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use serde_json::{Value, json};
use wasmctrl_apiserver::{ApiServer, Authorization, Config};
use wasmctrl_testkit::client::client_for;

use crate::common::{Harness, raw};

mod aggregation;
mod apply;
mod escalation;

const NS: &str = "team";
const OTHER: &str = "other";
const SA: &str = "bot";
const SA_USER: &str = "system:serviceaccount:team:bot";
const HOUR: Duration = Duration::from_secs(3600);

async fn rbac_server() -> Harness {
    Harness::start_with(Config {
        authorization: Authorization::Rbac,
        ..Default::default()
    })
    .await
}

/// Creates the namespaces `team` and `other` and the service account
/// `team/bot`; returns a client authenticated as it.
async fn fixture(h: &Harness) -> kube::Client {
    let admin = h.client().await;
    for ns in [NS, OTHER] {
        let body: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        Api::<Namespace>::all(admin.clone())
            .create(&PostParams::default(), &body)
            .await
            .unwrap();
    }
    create_sa(&admin, NS, SA).await;
    client_for(
        &h.server
            .kubeconfig_for_service_account(NS, SA, HOUR)
            .unwrap(),
    )
    .await
}

async fn create_sa(admin: &kube::Client, ns: &str, name: &str) -> ServiceAccount {
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap()
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str], names: &[&str]) -> Value {
    let mut r = json!({"apiGroups": groups, "resources": resources, "verbs": verbs});
    if !names.is_empty() {
        r["resourceNames"] = json!(names);
    }
    r
}

/// POSTs an RBAC object as the admin; `ns` None for cluster-scoped kinds.
async fn create_rbac(h: &Harness, ns: Option<&str>, plural: &str, obj: Value) {
    let path = match ns {
        Some(ns) => format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/{plural}"),
        None => format!("/apis/rbac.authorization.k8s.io/v1/{plural}"),
    };
    let (code, body) = h
        .raw("POST", &path, Some("application/json"), &obj.to_string())
        .await;
    assert_eq!(code, 201, "creating {plural}: {body}");
}

async fn delete_rbac(h: &Harness, ns: Option<&str>, plural: &str, name: &str) {
    let path = match ns {
        Some(ns) => format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/{plural}/{name}"),
        None => format!("/apis/rbac.authorization.k8s.io/v1/{plural}/{name}"),
    };
    let (code, body) = h.raw("DELETE", &path, None, "").await;
    assert_eq!(code, 200, "deleting {plural}/{name}: {body}");
}

async fn role(h: &Harness, ns: &str, name: &str, rules: Vec<Value>) {
    let obj = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name}, "rules": rules});
    create_rbac(h, Some(ns), "roles", obj).await;
}

async fn cluster_role(h: &Harness, name: &str, rules: Vec<Value>) {
    let obj = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name}, "rules": rules});
    create_rbac(h, None, "clusterroles", obj).await;
}

/// A RoleBinding in `ns` (or a ClusterRoleBinding when `ns` is None).
async fn bind(h: &Harness, ns: Option<&str>, name: &str, role: (&str, &str), subjects: Vec<Value>) {
    let kind = if ns.is_some() {
        "RoleBinding"
    } else {
        "ClusterRoleBinding"
    };
    let obj = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role.0, "name": role.1},
        "subjects": subjects});
    let plural = if ns.is_some() {
        "rolebindings"
    } else {
        "clusterrolebindings"
    };
    create_rbac(h, ns, plural, obj).await;
}

fn sa_subject(ns: Option<&str>, name: &str) -> Value {
    match ns {
        Some(ns) => json!({"kind": "ServiceAccount", "name": name, "namespace": ns}),
        None => json!({"kind": "ServiceAccount", "name": name}),
    }
}

fn subject(kind: &str, name: &str) -> Value {
    json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name})
}

/// The message of a 403 Forbidden (asserting that is what it was).
fn forbidden<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> String {
    match r {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"), "{s:?}");
            s.message.clone()
        }
        other => panic!("expected 403 Forbidden, got {other:?}"),
    }
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

/// A raw request with extra headers through `client`: status and JSON.
async fn raw_with(
    client: &kube::Client,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (u16, Value) {
    let mut b = http::Request::builder().method(method).uri(path);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    if body.is_some() {
        let ct = if method == "PATCH" {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        b = b.header("content-type", ct);
    }
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let resp = client
        .send(b.body(bytes).unwrap().map(kube::client::Body::from))
        .await
        .expect("response");
    let status = resp.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .expect("body")
        .to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// kubectl with the harness's kubeconfig and `args`.
fn kubectl(h: &Harness, args: &[&str]) -> Output {
    wasmctrl_testkit::kubectl::output(&h.kubeconfig_path(), args)
}

async fn kubectl_ok(h: &Harness, args: &[&str]) -> String {
    let out = tokio::task::block_in_place(|| kubectl(h, args));
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn kubectl_err(h: &Harness, args: &[&str]) -> String {
    let out = tokio::task::block_in_place(|| kubectl(h, args));
    assert!(
        !out.status.success(),
        "kubectl {args:?} unexpectedly succeeded"
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The objects the `worker` role is about: configmap `c1` in both
/// namespaces, secrets `allowed` and `hidden`, deployment `d`.
async fn worker_objects(h: &Harness) {
    let admin = h.client().await;
    for ns in [NS, OTHER] {
        Api::<ConfigMap>::namespaced(admin.clone(), ns)
            .create(&PostParams::default(), &cm("c1"))
            .await
            .unwrap();
    }
    for name in ["allowed", "hidden"] {
        let s: Secret =
            serde_json::from_value(json!({"metadata": {"name": name}, "stringData": {"p": "s"}}))
                .unwrap();
        Api::<Secret>::namespaced(admin.clone(), NS)
            .create(&PostParams::default(), &s)
            .await
            .unwrap();
    }
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "d"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    }))
    .unwrap();
    Api::<Deployment>::namespaced(admin, NS)
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
}

/// Role `worker` in `team`, bound to `bot` (the subject's namespace left
/// to default to the binding's): configmaps read and create, one secret by
/// name, deployment status, every resource's scale read.
async fn worker_role(h: &Harness) {
    role(
        h,
        NS,
        "worker",
        vec![
            rule(
                &[""],
                &["configmaps"],
                &["get", "list", "watch", "create"],
                &[],
            ),
            rule(&[""], &["secrets"], &["get"], &["allowed"]),
            rule(&["apps"], &["deployments/status"], &["get", "patch"], &[]),
            rule(&["apps"], &["*/scale"], &["get"], &[]),
        ],
    )
    .await;
    bind(
        h,
        Some(NS),
        "worker",
        ("Role", "worker"),
        vec![sa_subject(None, SA)],
    )
    .await;
}

#[tokio::test]
async fn a_role_grants_exactly_its_rules_and_refuses_the_rest_as_upstream() {
    let h = rbac_server().await;
    let bot = fixture(&h).await;
    worker_objects(&h).await;
    worker_role(&h).await;

    // Verbs on a resource.
    let cms = Api::<ConfigMap>::namespaced(bot.clone(), NS);
    let names: Vec<String> = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(names, ["c1"]);
    cms.get("c1").await.unwrap();
    cms.create(&PostParams::default(), &cm("c2")).await.unwrap();
    assert_eq!(
        forbidden(cms.delete("c1", &DeleteParams::default()).await),
        format!(
            "configmaps \"c1\" is forbidden: User \"{SA_USER}\" cannot delete resource \"configmaps\" in API group \"\" in the namespace \"team\""
        )
    );
    assert_eq!(
        forbidden(
            cms.patch(
                "c1",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"k": "x"}}))
            )
            .await
        ),
        format!(
            "configmaps \"c1\" is forbidden: User \"{SA_USER}\" cannot patch resource \"configmaps\" in API group \"\" in the namespace \"team\""
        )
    );
    assert_eq!(
        forbidden(
            cms.delete_collection(&DeleteParams::default(), &ListParams::default())
                .await
        ),
        format!(
            "configmaps is forbidden: User \"{SA_USER}\" cannot deletecollection resource \"configmaps\" in API group \"\" in the namespace \"team\""
        )
    );

    // Namespace scope: a Role grants nothing elsewhere, nor cluster-wide.
    assert_eq!(
        forbidden(
            Api::<ConfigMap>::namespaced(bot.clone(), OTHER)
                .list(&ListParams::default())
                .await
        ),
        format!(
            "configmaps is forbidden: User \"{SA_USER}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"other\""
        )
    );
    assert_eq!(
        forbidden(
            Api::<ConfigMap>::all(bot.clone())
                .list(&ListParams::default())
                .await
        ),
        format!(
            "configmaps is forbidden: User \"{SA_USER}\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope"
        )
    );

    // resourceNames: that object only, and never a list.
    let secrets = Api::<Secret>::namespaced(bot.clone(), NS);
    secrets.get("allowed").await.unwrap();
    assert_eq!(
        forbidden(secrets.get("hidden").await),
        format!(
            "secrets \"hidden\" is forbidden: User \"{SA_USER}\" cannot get resource \"secrets\" in API group \"\" in the namespace \"team\""
        )
    );
    forbidden(secrets.list(&ListParams::default()).await);

    // Subresources: deployments/status is not deployments; */scale is any
    // resource's scale.
    let deploys = Api::<Deployment>::namespaced(bot.clone(), NS);
    deploys.get_status("d").await.unwrap();
    deploys
        .patch_status(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(
        forbidden(deploys.get("d").await),
        format!(
            "deployments.apps \"d\" is forbidden: User \"{SA_USER}\" cannot get resource \"deployments\" in API group \"apps\" in the namespace \"team\""
        )
    );
    let scale = deploys.get_scale("d").await.unwrap();
    assert_eq!(
        forbidden(
            deploys
                .replace_scale("d", &PostParams::default(), &scale)
                .await
        ),
        format!(
            "deployments.apps \"d\" is forbidden: User \"{SA_USER}\" cannot update resource \"deployments/scale\" in API group \"apps\" in the namespace \"team\""
        )
    );

    // Cluster-scoped resources, and a namespace (upstream's attributes
    // put a namespace in its own namespace).
    let namespaces = Api::<Namespace>::all(bot.clone());
    assert_eq!(
        forbidden(namespaces.list(&ListParams::default()).await),
        format!(
            "namespaces is forbidden: User \"{SA_USER}\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope"
        )
    );
    assert_eq!(
        forbidden(namespaces.get(NS).await),
        format!(
            "namespaces \"team\" is forbidden: User \"{SA_USER}\" cannot get resource \"namespaces\" in API group \"\" in the namespace \"team\""
        )
    );

    // The whole Status, as upstream renders it.
    let (code, status) = raw(
        &bot,
        "GET",
        "/apis/apps/v1/namespaces/team/deployments/d",
        None,
        b"",
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(
        status,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("deployments.apps \"d\" is forbidden: User \"{SA_USER}\" cannot get resource \"deployments\" in API group \"apps\" in the namespace \"team\""),
            "reason": "Forbidden", "details": {"name": "d", "group": "apps", "kind": "deployments"},
            "code": 403})
    );

    // Non-resource paths: discovery and /version through the bootstrap
    // roles; anything else is refused before routing (403, not 404).
    for path in [
        "/version",
        "/api",
        "/api/v1",
        "/apis",
        "/apis/apps/v1",
        "/openapi/v3",
        "/healthz",
    ] {
        let (code, _) = raw(&bot, "GET", path, None, b"").await;
        assert_eq!(code, 200, "{path}");
    }
    let (code, status) = raw(&bot, "GET", "/logs", None, b"").await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        format!("forbidden: User \"{SA_USER}\" cannot get path \"/logs\"")
    );
    assert_eq!(status["details"], json!({}));
    assert_eq!(h.raw("GET", "/logs", None, "").await.0, 404);
}

#[tokio::test]
async fn cluster_roles_are_namespaced_by_role_bindings_and_cluster_wide_by_cluster_role_bindings() {
    let h = rbac_server().await;
    let bot = fixture(&h).await;
    worker_objects(&h).await;
    cluster_role(
        &h,
        "cm-reader",
        vec![rule(&[""], &["configmaps"], &["get", "list"], &[])],
    )
    .await;
    bind(
        &h,
        Some(NS),
        "cm-reader",
        ("ClusterRole", "cm-reader"),
        vec![sa_subject(Some(NS), SA)],
    )
    .await;
    let list = |ns: Option<&str>| {
        let api = match ns {
            Some(ns) => Api::<ConfigMap>::namespaced(bot.clone(), ns),
            None => Api::<ConfigMap>::all(bot.clone()),
        };
        async move { api.list(&ListParams::default()).await }
    };
    list(Some(NS)).await.unwrap();
    forbidden(list(Some(OTHER)).await);
    forbidden(list(None).await);

    bind(
        &h,
        None,
        "cm-reader",
        ("ClusterRole", "cm-reader"),
        vec![sa_subject(Some(NS), SA)],
    )
    .await;
    list(Some(OTHER)).await.unwrap();
    assert_eq!(list(None).await.unwrap().items.len(), 2);

    // A ClusterRoleBinding's ServiceAccount subject must name its
    // namespace: one without it is refused, as upstream.
    cluster_role(
        &h,
        "ns-reader",
        vec![rule(&[""], &["namespaces"], &["list"], &[])],
    )
    .await;
    let no_ns = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "ns-reader-no-ns"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "ns-reader"},
        "subjects": [sa_subject(None, SA)]});
    let (code, body) = h
        .raw(
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            Some("application/json"),
            &no_ns.to_string(),
        )
        .await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body["message"]
            == r#"ClusterRoleBinding.rbac.authorization.k8s.io "ns-reader-no-ns" is invalid: subjects[0].namespace: Required value"#,
        "{body}"
    );
    let namespaces = Api::<Namespace>::all(bot.clone());
    forbidden(namespaces.list(&ListParams::default()).await);
    // Group subjects: every service account of the namespace.
    bind(
        &h,
        None,
        "ns-reader",
        ("ClusterRole", "ns-reader"),
        vec![subject("Group", "system:serviceaccounts:team")],
    )
    .await;
    namespaces.list(&ListParams::default()).await.unwrap();

    // User subjects, and `*` resources of one group (subresources too).
    cluster_role(
        &h,
        "apps-reader",
        vec![rule(&["apps"], &["*"], &["get"], &[])],
    )
    .await;
    bind(
        &h,
        None,
        "apps-reader",
        ("ClusterRole", "apps-reader"),
        vec![subject("User", SA_USER)],
    )
    .await;
    let deploys = Api::<Deployment>::namespaced(bot.clone(), NS);
    deploys.get("d").await.unwrap();
    deploys.get_status("d").await.unwrap();
    forbidden(deploys.list(&ListParams::default()).await);
    forbidden(
        Api::<Secret>::namespaced(bot.clone(), NS)
            .get("allowed")
            .await,
    );
}

#[tokio::test]
async fn binding_and_role_changes_apply_to_the_next_request() {
    let h = rbac_server().await;
    let bot = fixture(&h).await;
    let cms = Api::<ConfigMap>::namespaced(bot.clone(), NS);
    let denied = format!(
        "configmaps is forbidden: User \"{SA_USER}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"team\""
    );
    assert_eq!(forbidden(cms.list(&ListParams::default()).await), denied);

    // A binding to a Role that does not exist yet grants nothing; the
    // denial says why, as upstream's does.
    bind(
        &h,
        Some(NS),
        "reader",
        ("Role", "reader"),
        vec![sa_subject(None, SA)],
    )
    .await;
    assert_eq!(
        forbidden(cms.list(&ListParams::default()).await),
        format!("{denied}: RBAC: role.rbac.authorization.k8s.io \"reader\" not found")
    );
    role(
        &h,
        NS,
        "reader",
        vec![rule(&[""], &["configmaps"], &["list"], &[])],
    )
    .await;
    cms.list(&ListParams::default()).await.unwrap();

    // Changing the role's rules.
    let (code, body) = h
        .raw(
            "PATCH",
            "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles/reader",
            Some("application/merge-patch+json"),
            &json!({"rules": [rule(&[""], &["configmaps"], &["get"], &[])]}).to_string(),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(forbidden(cms.list(&ListParams::default()).await), denied);
    let (code, _) = h
        .raw(
            "PATCH",
            "/apis/rbac.authorization.k8s.io/v1/namespaces/team/roles/reader",
            Some("application/merge-patch+json"),
            &json!({"rules": [rule(&[""], &["configmaps"], &["list"], &[])]}).to_string(),
        )
        .await;
    assert_eq!(code, 200);
    cms.list(&ListParams::default()).await.unwrap();

    // Deleting the binding.
    delete_rbac(&h, Some(NS), "rolebindings", "reader").await;
    assert_eq!(forbidden(cms.list(&ListParams::default()).await), denied);

    // A ClusterRoleBinding to a missing ClusterRole, on a cluster-scoped
    // request.
    bind(
        &h,
        None,
        "ghost",
        ("ClusterRole", "ghost"),
        vec![sa_subject(Some(NS), SA)],
    )
    .await;
    assert_eq!(
        forbidden(
            Api::<Namespace>::all(bot.clone())
                .list(&ListParams::default())
                .await
        ),
        format!(
            "namespaces is forbidden: User \"{SA_USER}\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io \"ghost\" not found"
        )
    );
}

#[tokio::test]
async fn service_account_watches_what_it_may_watch() {
    let h = rbac_server().await;
    let bot = fixture(&h).await;
    let admin = h.client().await;
    role(
        &h,
        NS,
        "watcher",
        vec![rule(&[""], &["configmaps"], &["list", "watch"], &[])],
    )
    .await;
    bind(
        &h,
        Some(NS),
        "watcher",
        ("Role", "watcher"),
        vec![sa_subject(None, SA)],
    )
    .await;
    // In `other`, one configmap by name: a watch pinned to it with a field
    // selector is allowed, as upstream (the name comes from the selector).
    role(
        &h,
        OTHER,
        "one",
        vec![rule(&[""], &["configmaps"], &["list", "watch"], &["one"])],
    )
    .await;
    bind(
        &h,
        Some(OTHER),
        "one",
        ("Role", "one"),
        vec![sa_subject(Some(NS), SA)],
    )
    .await;

    let seen = |api: Api<ConfigMap>, cfg: kube::runtime::watcher::Config, want: &'static str| {
        let mut stream = kube::runtime::watcher(api, cfg)
            .default_backoff()
            .applied_objects()
            .boxed();
        tokio::spawn(async move {
            while let Some(cm) = stream.try_next().await.expect("watch stream") {
                if cm.metadata.name.as_deref() == Some(want) {
                    return;
                }
            }
            panic!("watch ended before {want} was seen");
        })
    };
    let team = seen(
        Api::namespaced(bot.clone(), NS),
        kube::runtime::watcher::Config::default(),
        "fresh",
    );
    let other = seen(
        Api::namespaced(bot.clone(), OTHER),
        kube::runtime::watcher::Config::default().fields("metadata.name=one"),
        "one",
    );
    Api::<ConfigMap>::namespaced(admin.clone(), NS)
        .create(&PostParams::default(), &cm("fresh"))
        .await
        .unwrap();
    Api::<ConfigMap>::namespaced(admin.clone(), OTHER)
        .create(&PostParams::default(), &cm("one"))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), team)
        .await
        .expect("the team watch sees the new configmap")
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), other)
        .await
        .expect("the pinned watch sees its configmap")
        .unwrap();

    // Without the selector the watch names no object: refused.
    let (code, status) = raw(
        &bot,
        "GET",
        "/api/v1/namespaces/other/configmaps?watch=true",
        None,
        b"",
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        format!(
            "configmaps is forbidden: User \"{SA_USER}\" cannot watch resource \"configmaps\" in API group \"\" in the namespace \"other\""
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_token_issues_tokens_that_act_as_the_service_account() {
    let h = rbac_server().await;
    fixture(&h).await;
    worker_objects(&h).await;
    worker_role(&h).await;

    let token = kubectl_ok(&h, &["create", "token", SA, "-n", NS]).await;
    let token = token.trim();
    let as_bot = format!("--token={token}");
    let got = kubectl_ok(&h, &[&as_bot, "get", "configmaps", "-n", NS, "-o", "name"]).await;
    assert_eq!(got.trim(), "configmap/c1");
    let err = kubectl_err(&h, &[&as_bot, "get", "configmaps", "-n", OTHER]).await;
    assert!(
        err.contains(&format!(
            "Error from server (Forbidden): configmaps is forbidden: User \"{SA_USER}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"other\""
        )),
        "{err}"
    );
    let whoami = kubectl_ok(&h, &[&as_bot, "auth", "whoami"]).await;
    assert!(whoami.contains(SA_USER), "{whoami}");
    assert!(
        whoami
            .contains("[system:serviceaccounts system:serviceaccounts:team system:authenticated]"),
        "{whoami}"
    );

    // The server's validation, as kubectl reports it.
    let err = kubectl_err(&h, &["create", "token", SA, "-n", NS, "--duration=5m"]).await;
    assert!(
        err.contains("TokenRequest.authentication.k8s.io \"bot\" is invalid: spec.expirationSeconds: Invalid value: 300: may not specify a duration less than 10 minutes"),
        "{err}"
    );
    let err = kubectl_err(&h, &["create", "token", "nobody", "-n", NS]).await;
    assert!(
        err.contains("serviceaccounts \"nobody\" not found"),
        "{err}"
    );
    let err = kubectl_err(
        &h,
        &[
            "create",
            "token",
            SA,
            "-n",
            NS,
            "--bound-object-kind=Pod",
            "--bound-object-name=gone",
        ],
    )
    .await;
    assert!(err.contains("pods \"gone\" not found"), "{err}");

    // Minting tokens is itself authorized (create serviceaccounts/token).
    let err = kubectl_err(&h, &[&as_bot, "create", "token", SA, "-n", NS]).await;
    assert!(
        err.contains(&format!(
            "serviceaccounts \"bot\" is forbidden: User \"{SA_USER}\" cannot create resource \"serviceaccounts/token\" in API group \"\" in the namespace \"team\""
        )),
        "{err}"
    );
}

/// One row of the truth table: what `kubectl auth can-i` is asked, the
/// request that answers it for real, and the expected answer.
struct Case {
    can_i: &'static [&'static str],
    method: &'static str,
    path: &'static str,
    body: Option<Value>,
    allowed: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_tells_the_truth() {
    let h = rbac_server().await;
    let bot = fixture(&h).await;
    worker_objects(&h).await;
    worker_role(&h).await;
    let scale = h
        .raw(
            "GET",
            "/apis/apps/v1/namespaces/team/deployments/d/scale",
            None,
            "",
        )
        .await
        .1;
    let cases = [
        Case {
            can_i: &["get", "configmaps/c1", "-n", NS],
            method: "GET",
            path: "/api/v1/namespaces/team/configmaps/c1",
            body: None,
            allowed: true,
        },
        Case {
            can_i: &["list", "configmaps", "-n", NS],
            method: "GET",
            path: "/api/v1/namespaces/team/configmaps",
            body: None,
            allowed: true,
        },
        Case {
            can_i: &["create", "configmaps", "-n", NS],
            method: "POST",
            path: "/api/v1/namespaces/team/configmaps?dryRun=All",
            body: Some(json!({"metadata": {"name": "new"}})),
            allowed: true,
        },
        Case {
            can_i: &["delete", "configmaps/c1", "-n", NS],
            method: "DELETE",
            path: "/api/v1/namespaces/team/configmaps/c1?dryRun=All",
            body: None,
            allowed: false,
        },
        Case {
            can_i: &["list", "configmaps", "-n", OTHER],
            method: "GET",
            path: "/api/v1/namespaces/other/configmaps",
            body: None,
            allowed: false,
        },
        Case {
            can_i: &["list", "configmaps", "--all-namespaces"],
            method: "GET",
            path: "/api/v1/configmaps",
            body: None,
            allowed: false,
        },
        Case {
            can_i: &["get", "secrets/allowed", "-n", NS],
            method: "GET",
            path: "/api/v1/namespaces/team/secrets/allowed",
            body: None,
            allowed: true,
        },
        Case {
            can_i: &["get", "secrets/hidden", "-n", NS],
            method: "GET",
            path: "/api/v1/namespaces/team/secrets/hidden",
            body: None,
            allowed: false,
        },
        Case {
            can_i: &["list", "secrets", "-n", NS],
            method: "GET",
            path: "/api/v1/namespaces/team/secrets",
            body: None,
            allowed: false,
        },
        Case {
            can_i: &["get", "deployments.apps/d", "-n", NS],
            method: "GET",
            path: "/apis/apps/v1/namespaces/team/deployments/d",
            body: None,
            allowed: false,
        },
        Case {
            can_i: &[
                "patch",
                "deployments.apps/d",
                "--subresource=status",
                "-n",
                NS,
            ],
            method: "PATCH",
            path: "/apis/apps/v1/namespaces/team/deployments/d/status?dryRun=All",
            body: Some(json!({})),
            allowed: true,
        },
        Case {
            can_i: &["get", "deployments.apps/d", "--subresource=scale", "-n", NS],
            method: "GET",
            path: "/apis/apps/v1/namespaces/team/deployments/d/scale",
            body: None,
            allowed: true,
        },
        Case {
            can_i: &[
                "update",
                "deployments.apps/d",
                "--subresource=scale",
                "-n",
                NS,
            ],
            method: "PUT",
            path: "/apis/apps/v1/namespaces/team/deployments/d/scale?dryRun=All",
            body: Some(scale),
            allowed: false,
        },
        Case {
            can_i: &["list", "namespaces"],
            method: "GET",
            path: "/api/v1/namespaces",
            body: None,
            allowed: false,
        },
        Case {
            can_i: &["get", "/version"],
            method: "GET",
            path: "/version",
            body: None,
            allowed: true,
        },
        Case {
            can_i: &["get", "/logs"],
            method: "GET",
            path: "/logs",
            body: None,
            allowed: false,
        },
    ];
    for case in cases {
        let mut args = vec!["auth", "can-i"];
        args.extend_from_slice(case.can_i);
        let as_arg = format!("--as={SA_USER}");
        args.push(&as_arg);
        let out = tokio::task::block_in_place(|| kubectl(&h, &args));
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
        // kubectl exits 1 for "no".
        assert_eq!(out.status.success(), answer == "yes", "{args:?}: {out:?}");
        let (code, body) = raw_with(&bot, case.method, case.path, &[], case.body).await;
        let truth = code != 403;
        assert_eq!(
            (answer.as_str(), truth),
            (if case.allowed { "yes" } else { "no" }, case.allowed),
            "can-i {:?} answered {answer}; {} {} answered {code} {body}",
            case.can_i,
            case.method,
            case.path
        );
    }

    // --list: the rules of the namespace, plus discovery's.
    let as_arg = format!("--as={SA_USER}");
    let list = kubectl_ok(&h, &["auth", "can-i", "--list", "-n", NS, &as_arg]).await;
    let rows: Vec<Vec<String>> = list
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    let has = |row: &[&str]| rows.iter().any(|r| r == row);
    assert!(
        has(&["configmaps", "[]", "[]", "[get", "list", "watch", "create]"]),
        "{list}"
    );
    assert!(has(&["secrets", "[]", "[allowed]", "[get]"]), "{list}");
    assert!(
        has(&["deployments.apps/status", "[]", "[]", "[get", "patch]"]),
        "{list}"
    );
    assert!(has(&["*.apps/scale", "[]", "[]", "[get]"]), "{list}");
    assert!(
        has(&[
            "selfsubjectaccessreviews.authorization.k8s.io",
            "[]",
            "[]",
            "[create]"
        ]),
        "{list}"
    );
    assert!(has(&["[/version]", "[]", "[get]"]), "{list}");
    assert!(has(&["[/apis/*]", "[]", "[get]"]), "{list}");
    assert!(!list.contains("namespaces"), "{list}");
    let elsewhere = kubectl_ok(&h, &["auth", "can-i", "--list", "-n", OTHER, &as_arg]).await;
    assert!(!elsewhere.contains("configmaps"), "{elsewhere}");
    assert!(elsewhere.contains("[/version]"), "{elsewhere}");

    // The admin, without impersonation, may do anything.
    assert_eq!(
        kubectl_ok(&h, &["auth", "can-i", "delete", "nodes"])
            .await
            .trim(),
        "yes"
    );
    let admin_list = kubectl_ok(&h, &["auth", "can-i", "--list"]).await;
    assert!(
        admin_list
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["*.*", "[]", "[]", "[*]"]),
        "{admin_list}"
    );
}

#[tokio::test]
async fn access_reviews_answer_from_the_same_evaluator() {
    let h = rbac_server().await;
    let bot = fixture(&h).await;
    let admin = h.client().await;
    worker_objects(&h).await;
    worker_role(&h).await;
    let sar = |spec: Value| json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec});
    let post = |client: kube::Client, path: &'static str, body: Value| async move {
        raw(
            &client,
            "POST",
            path,
            Some("application/json"),
            body.to_string().as_bytes(),
        )
        .await
    };
    const SARS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

    let (code, r) = post(
        admin.clone(),
        SARS,
        sar(json!({"user": SA_USER, "groups": ["system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"],
            "resourceAttributes": {"namespace": NS, "verb": "get", "resource": "configmaps", "name": "c1"}})),
    )
    .await;
    assert_eq!(code, 201, "{r}");
    assert_eq!(
        r["status"],
        json!({"allowed": true, "reason": "RBAC: allowed by RoleBinding \"worker/team\" of Role \"worker\" to ServiceAccount \"bot/team\""})
    );
    let (_, r) = post(
        admin.clone(),
        SARS,
        sar(json!({"user": SA_USER, "resourceAttributes": {"namespace": NS, "verb": "delete", "resource": "configmaps"}})),
    )
    .await;
    assert_eq!(r["status"], json!({"allowed": false}));
    // The groups a SubjectAccessReview names are all the subject has.
    let (_, r) = post(
        admin.clone(),
        SARS,
        sar(json!({"user": "someone", "nonResourceAttributes": {"path": "/version", "verb": "get"}})),
    )
    .await;
    assert_eq!(r["status"]["allowed"], false);
    let (_, r) = post(
        admin.clone(),
        SARS,
        sar(json!({"user": "someone", "groups": ["system:authenticated"], "nonResourceAttributes": {"path": "/version", "verb": "get"}})),
    )
    .await;
    assert_eq!(
        r["status"],
        json!({"allowed": true, "reason": "RBAC: allowed by ClusterRoleBinding \"system:discovery\" of ClusterRole \"system:discovery\" to Group \"system:authenticated\""})
    );
    let (_, r) = post(
        admin.clone(),
        SARS,
        sar(json!({"groups": ["system:masters"], "resourceAttributes": {"verb": "delete", "resource": "nodes"}})),
    )
    .await;
    assert_eq!(r["status"], json!({"allowed": true}));

    // Validation, as upstream words it.
    let (code, r) = post(
        admin.clone(),
        SARS,
        sar(json!({"resourceAttributes": {"verb": "get", "resource": "pods"}})),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        r["message"],
        "SubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.user: Invalid value: \"\": at least one of user or group must be specified"
    );
    let (code, r) = post(admin.clone(), SARS, sar(json!({"user": "u"}))).await;
    assert_eq!(code, 422);
    assert!(
        r["message"].as_str().unwrap().ends_with(
            "exactly one of nonResourceAttributes or resourceAttributes must be specified"
        ),
        "{r}"
    );

    // Bounded: at most 1000 groups.
    let groups: Vec<String> = (0..1001).map(|i| format!("g{i}")).collect();
    let (code, r) = post(
        admin.clone(),
        SARS,
        sar(json!({"groups": groups, "resourceAttributes": {"verb": "get", "resource": "pods"}})),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        r["message"],
        "groups has 1001 items; at most 1000 are accepted"
    );
    assert_eq!(h.server.limit_exceeded("reviewLists"), 1);

    // Asking about others is itself authorized.
    let (code, r) = post(
        bot.clone(),
        SARS,
        sar(json!({"user": "u", "resourceAttributes": {"verb": "get", "resource": "pods"}})),
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(
        r["message"],
        format!(
            "subjectaccessreviews.authorization.k8s.io is forbidden: User \"{SA_USER}\" cannot create resource \"subjectaccessreviews\" in API group \"authorization.k8s.io\" at the cluster scope"
        )
    );

    // LocalSubjectAccessReview: the URL's namespace, nowhere else.
    let lsar = |ns: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "LocalSubjectAccessReview",
            "spec": {"user": SA_USER, "resourceAttributes": {"namespace": ns, "verb": "list", "resource": "configmaps"}}})
    };
    let (code, r) = post(
        admin.clone(),
        "/apis/authorization.k8s.io/v1/namespaces/team/localsubjectaccessreviews",
        lsar(NS),
    )
    .await;
    assert_eq!(code, 201, "{r}");
    assert_eq!(r["status"]["allowed"], true);
    assert_eq!(r["metadata"]["namespace"], NS);
    let (code, r) = post(
        admin.clone(),
        "/apis/authorization.k8s.io/v1/namespaces/team/localsubjectaccessreviews",
        lsar(OTHER),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        r["message"],
        "LocalSubjectAccessReview.authorization.k8s.io \"\" is invalid: spec.resourceAttributes.namespace: Invalid value: \"other\": must match metadata.namespace"
    );

    // SelfSubjectAccessReview with the service account's own token.
    let ssar = |verb: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"namespace": NS, "verb": verb, "resource": "configmaps"}}})
    };
    const SSARS: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    assert_eq!(
        post(bot.clone(), SSARS, ssar("create")).await.1["status"]["allowed"],
        true
    );
    assert_eq!(
        post(bot.clone(), SSARS, ssar("delete")).await.1["status"]["allowed"],
        false
    );

    // SelfSubjectRulesReview: the namespace's rules; an unresolvable
    // binding makes the answer incomplete.
    const SSRRS: &str = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
    let ssrr = |ns: &str| json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": ns}});
    let (code, r) = post(bot.clone(), SSRRS, ssrr(NS)).await;
    assert_eq!(code, 201, "{r}");
    let rules = r["status"]["resourceRules"].as_array().unwrap();
    assert!(rules.contains(&json!({"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["allowed"]})), "{r}");
    assert_eq!(r["status"]["incomplete"], false);
    let (_, r) = post(bot.clone(), SSRRS, ssrr(OTHER)).await;
    assert!(
        !r["status"]["resourceRules"]
            .to_string()
            .contains("configmaps"),
        "{r}"
    );
    bind(
        &h,
        Some(NS),
        "broken",
        ("Role", "missing"),
        vec![sa_subject(None, SA)],
    )
    .await;
    let (_, r) = post(bot.clone(), SSRRS, ssrr(NS)).await;
    assert_eq!(r["status"]["incomplete"], true);
    assert_eq!(
        r["status"]["evaluationError"],
        "role.rbac.authorization.k8s.io \"missing\" not found"
    );
    let (code, r) = post(bot.clone(), SSRRS, ssrr("")).await;
    assert_eq!(
        (code, r["message"].as_str()),
        (400, Some("no namespace on request"))
    );

    // SelfSubjectReview: the token's identity with the account's uid.
    let sa = Api::<ServiceAccount>::namespaced(admin.clone(), NS)
        .get(SA)
        .await
        .unwrap();
    let (_, r) = post(
        bot.clone(),
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
    )
    .await;
    let info = &r["status"]["userInfo"];
    assert_eq!(info["username"], SA_USER);
    assert_eq!(info["uid"], json!(sa.metadata.uid));
    assert_eq!(
        info["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:team",
            "system:authenticated"
        ])
    );
}

#[tokio::test]
async fn the_admin_stays_all_powerful_and_impersonates_as_upstream() {
    let h = rbac_server().await;
    let bot = fixture(&h).await;
    let admin = h.client().await;
    worker_objects(&h).await;

    // system:masters needs no binding: deleting cluster-admin's changes
    // nothing for the admin.
    delete_rbac(&h, None, "clusterrolebindings", "cluster-admin").await;
    Api::<Namespace>::all(admin.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    Api::<Secret>::namespaced(admin.clone(), NS)
        .delete("hidden", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(
        h.raw("GET", "/api/v1/namespaces/team/pods/nope", None, "")
            .await
            .0,
        404
    );

    // Impersonating the service account: its permissions, its 403.
    let as_bot = [("Impersonate-User", SA_USER)];
    let (code, r) = raw_with(
        &admin,
        "GET",
        "/api/v1/namespaces/team/configmaps",
        &as_bot,
        None,
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(
        r["message"],
        format!(
            "configmaps is forbidden: User \"{SA_USER}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"team\""
        )
    );
    let (_, r) = raw_with(
        &admin,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        &as_bot,
        Some(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})),
    )
    .await;
    assert_eq!(
        r["status"]["userInfo"],
        json!({"username": SA_USER, "groups": ["system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"]})
    );
    // Impersonating groups: the given groups (plus system:authenticated).
    let masters = [
        ("Impersonate-User", "alice"),
        ("Impersonate-Group", "system:masters"),
    ];
    let (code, _) = raw_with(&admin, "GET", "/api/v1/namespaces", &masters, None).await;
    assert_eq!(code, 200);
    let (code, r) = raw_with(
        &admin,
        "GET",
        "/api/v1/namespaces",
        &[("Impersonate-Group", "g")],
        None,
    )
    .await;
    assert_eq!(code, 500, "{r}");
    // Bounded: at most 64 impersonation headers.
    let names: Vec<String> = (0..65).map(|i| format!("g{i}")).collect();
    let mut many = vec![("Impersonate-User", "alice")];
    many.extend(names.iter().map(|g| ("Impersonate-Group", g.as_str())));
    let (code, r) = raw_with(&admin, "GET", "/version", &many, None).await;
    assert_eq!(code, 400);
    assert_eq!(
        r["message"],
        "too many impersonation headers: 66 (limit 64)"
    );
    assert_eq!(h.server.limit_exceeded("impersonationHeaders"), 1);

    // Others need the impersonate verb.
    let as_alice = [("Impersonate-User", "alice")];
    let (code, r) = raw_with(&bot, "GET", "/version", &as_alice, None).await;
    assert_eq!(code, 403);
    assert_eq!(
        r["message"],
        format!(
            "users \"alice\" is forbidden: User \"{SA_USER}\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        )
    );
    cluster_role(
        &h,
        "impersonate-alice",
        vec![rule(&[""], &["users"], &["impersonate"], &["alice"])],
    )
    .await;
    bind(
        &h,
        None,
        "impersonate-alice",
        ("ClusterRole", "impersonate-alice"),
        vec![sa_subject(Some(NS), SA)],
    )
    .await;
    let (code, r) = raw_with(
        &bot,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        &as_alice,
        Some(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})),
    )
    .await;
    assert_eq!(code, 201, "{r}");
    assert_eq!(
        r["status"]["userInfo"],
        json!({"username": "alice", "groups": ["system:authenticated"]})
    );
    let (code, r) = raw_with(
        &bot,
        "GET",
        "/version",
        &[
            ("Impersonate-User", "alice"),
            ("Impersonate-Group", "system:masters"),
        ],
        None,
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(
        r["message"],
        format!(
            "groups \"system:masters\" is forbidden: User \"{SA_USER}\" cannot impersonate resource \"groups\" in API group \"\" at the cluster scope"
        )
    );
}

#[tokio::test]
async fn tokens_live_only_as_long_as_their_service_account_and_bound_object() {
    let h = rbac_server().await;
    let bot = fixture(&h).await;
    let admin = h.client().await;
    let sas = Api::<ServiceAccount>::namespaced(admin.clone(), NS);
    let whoami = |client: kube::Client| async move {
        raw(
            &client,
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            Some("application/json"),
            br#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#,
        )
        .await
        .0
    };
    assert_eq!(whoami(bot.clone()).await, 201);

    // TokenRequest defaults, as upstream's.
    let tr: TokenRequest = serde_json::from_value(json!({"spec": {}})).unwrap();
    let issued = sas
        .create_token_request(SA, &PostParams::default(), &tr)
        .await
        .unwrap();
    let spec = issued.spec.unwrap();
    assert_eq!(spec.expiration_seconds, Some(3600));
    assert_eq!(
        spec.audiences.unwrap(),
        ["https://kubernetes.default.svc.cluster.local"]
    );
    let status = issued.status.unwrap();
    let expires = status.expiration_timestamp.unwrap().0.as_second();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        (now + 3590..=now + 3610).contains(&expires),
        "{expires} vs {now}"
    );
    let requested = client_for(&kubeconfig_with_token(&h, status.token.as_deref().unwrap())).await;
    assert_eq!(whoami(requested.clone()).await, 201);

    // Another audience: valid for it (TokenReview says so), not here.
    let tr: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": ["vault"], "expirationSeconds": 600}}))
            .unwrap();
    let vault = sas
        .create_token_request(SA, &PostParams::default(), &tr)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
        .unwrap();
    assert_eq!(
        whoami(client_for(&kubeconfig_with_token(&h, &vault)).await).await,
        401
    );
    let review = |token: &str, audiences: Value| {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token, "audiences": audiences}})
    };
    let (code, r) = h
        .raw(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            Some("application/json"),
            &review(&vault, json!(["vault"])).to_string(),
        )
        .await;
    assert_eq!(code, 201);
    assert_eq!(r["status"]["authenticated"], true);
    assert_eq!(r["status"]["user"]["username"], SA_USER);
    assert_eq!(r["status"]["audiences"], json!(["vault"]));
    let (_, r) = h
        .raw(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            Some("application/json"),
            &review(&vault, json!(null)).to_string(),
        )
        .await;
    assert_eq!(r["status"]["authenticated"], json!(null));
    assert!(
        r["status"]["error"].as_str().unwrap().contains("audiences"),
        "{r}"
    );

    // Bounded: at most 100 audiences.
    let audiences: Vec<String> = (0..101).map(|i| format!("a{i}")).collect();
    let tr: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": audiences}})).unwrap();
    match sas
        .create_token_request(SA, &PostParams::default(), &tr)
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(
            (s.code, s.message.as_str()),
            (400, "audiences has 101 items; at most 100 are accepted")
        ),
        other => panic!("expected 400, got {other:?}"),
    }
    assert_eq!(h.server.limit_exceeded("tokenAudiences"), 1);

    // Bound to a pod: valid while the pod exists.
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(admin.clone(), NS);
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"serviceAccountName": SA, "containers": [{"name": "c", "image": "x"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let tr: TokenRequest = serde_json::from_value(
        json!({"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p"}}}),
    )
    .unwrap();
    let bound = sas
        .create_token_request(SA, &PostParams::default(), &tr)
        .await
        .unwrap()
        .status
        .unwrap()
        .token
        .unwrap();
    let bound = client_for(&kubeconfig_with_token(&h, &bound)).await;
    assert_eq!(whoami(bound.clone()).await, 201);
    pods.delete("p", &DeleteParams::default()).await.unwrap();
    assert_eq!(whoami(bound).await, 401);
    // A pod of another account cannot carry this account's token.
    let other_pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "q"}, "spec": {"containers": [{"name": "c", "image": "x"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &other_pod)
        .await
        .unwrap();
    let tr: TokenRequest = serde_json::from_value(
        json!({"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "q"}}}),
    )
    .unwrap();
    match sas
        .create_token_request(SA, &PostParams::default(), &tr)
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 400);
            assert_eq!(
                s.message,
                "cannot bind token for serviceaccount \"bot\" to pod running with serviceaccount \"default\""
            );
        }
        other => panic!("expected 400, got {other:?}"),
    }

    // Deleting the service account revokes its tokens, and a new account
    // of the same name (another uid) does not revive them.
    sas.delete(SA, &DeleteParams::default()).await.unwrap();
    assert_eq!(whoami(bot.clone()).await, 401);
    assert_eq!(whoami(requested.clone()).await, 401);
    create_sa(&admin, NS, SA).await;
    assert_eq!(whoami(bot).await, 401);
    let fresh = client_for(
        &h.server
            .kubeconfig_for_service_account(NS, SA, HOUR)
            .unwrap(),
    )
    .await;
    assert_eq!(whoami(fresh).await, 201);

    // The library call validates as the API does.
    let err = h
        .server
        .kubeconfig_for_service_account(NS, "nobody", HOUR)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "issuing a token for service account team/nobody: serviceaccounts \"nobody\" not found"
    );
    assert!(
        h.server
            .kubeconfig_for_service_account(NS, SA, Duration::from_secs(60))
            .unwrap_err()
            .to_string()
            .contains("may not specify a duration less than 10 minutes")
    );
}

/// The harness's kubeconfig with another bearer token.
fn kubeconfig_with_token(h: &Harness, token: &str) -> String {
    let admin_token = h.server.token().to_string();
    h.server.kubeconfig().replace(&admin_token, token)
}

#[tokio::test]
async fn tokens_and_bootstrap_roles_survive_a_restart_with_a_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let server = ApiServer::start(Config {
        data_dir: Some(dir.path().to_path_buf()),
        authorization: Authorization::Rbac,
        ..Default::default()
    })
    .await
    .unwrap();
    let admin = client_for(&server.kubeconfig()).await;
    create_sa(&admin, "default", "keeper").await;
    create_sa(&admin, "default", "goner").await;
    let keeper = server
        .kubeconfig_for_service_account("default", "keeper", HOUR)
        .unwrap();
    let goner = server
        .kubeconfig_for_service_account("default", "goner", HOUR)
        .unwrap();
    // A user who deleted a bootstrap binding gets it back on restart, as
    // upstream reconciles its bootstrap policy.
    let (code, _) = raw(
        &admin,
        "DELETE",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/system:discovery",
        None,
        b"",
    )
    .await;
    assert_eq!(code, 200);
    let config = server.config();
    assert_eq!(config.authorization, Authorization::Rbac);
    server.shutdown().await;

    let server = ApiServer::start(config.clone()).await.unwrap();
    let admin = client_for(&server.kubeconfig()).await;
    let (code, _) = raw(
        &admin,
        "GET",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/system:discovery",
        None,
        b"",
    )
    .await;
    assert_eq!(code, 200, "the bootstrap binding is back");
    Api::<ServiceAccount>::namespaced(admin.clone(), "default")
        .delete("goner", &DeleteParams::default())
        .await
        .unwrap();
    let version = |kubeconfig: String| async move {
        raw(&client_for(&kubeconfig).await, "GET", "/version", None, b"")
            .await
            .0
    };
    assert_eq!(version(keeper.clone()).await, 200);
    assert_eq!(version(goner.clone()).await, 401);
    server.shutdown().await;

    // Without the data directory the signing key is new: old tokens fail.
    let mut memory = config;
    memory.data_dir = None;
    let server = ApiServer::start(memory).await.unwrap();
    assert_eq!(version(keeper).await, 401);
    server.shutdown().await;
}

#[cfg(feature = "testing")]
#[tokio::test]
async fn named_users_are_subject_to_rbac() {
    let h = rbac_server().await;
    fixture(&h).await;
    let alice = client_for(&h.server.kubeconfig_for_user("alice")).await;
    let cms = Api::<ConfigMap>::namespaced(alice, NS);
    assert_eq!(
        forbidden(cms.list(&ListParams::default()).await),
        "configmaps is forbidden: User \"alice\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"team\""
    );
    role(
        &h,
        NS,
        "reader",
        vec![rule(&[""], &["configmaps"], &["list"], &[])],
    )
    .await;
    bind(
        &h,
        Some(NS),
        "alice",
        ("Role", "reader"),
        vec![subject("User", "alice")],
    )
    .await;
    cms.list(&ListParams::default()).await.unwrap();
    // The write audit records refused writes too, under the token's user.
    forbidden(cms.create(&PostParams::default(), &cm("nope")).await);
    let records = h.server.audit().records();
    let last = records.last().unwrap();
    assert_eq!(
        (last.user.as_str(), last.verb.as_str(), last.code),
        ("alice", "create", 403)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_allow_is_unchanged() {
    let h = Harness::start().await;
    assert_eq!(h.server.authorization(), Authorization::AlwaysAllow);
    let bot = fixture(&h).await;
    // No bootstrap roles, and a service account may do anything.
    let admin = h.client().await;
    let (_, roles) = raw(
        &admin,
        "GET",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        None,
        b"",
    )
    .await;
    assert_eq!(roles["items"], json!([]));
    Api::<Namespace>::all(bot.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    Api::<ConfigMap>::namespaced(bot.clone(), OTHER)
        .create(&PostParams::default(), &cm("x"))
        .await
        .unwrap();
    let as_arg = format!("--as={SA_USER}");
    assert_eq!(
        kubectl_ok(&h, &["auth", "can-i", "delete", "nodes", &as_arg])
            .await
            .trim(),
        "yes"
    );
    let list = kubectl_ok(&h, &["auth", "can-i", "--list", &as_arg]).await;
    assert!(
        list.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["*.*", "[]", "[]", "[*]"]),
        "{list}"
    );
    let whoami = kubectl_ok(&h, &["auth", "whoami"]).await;
    assert!(
        whoami.contains("wasmctrl-admin") && whoami.contains("system:masters"),
        "{whoami}"
    );
    // Tokens still authenticate as the account, and impersonation works.
    let whoami = kubectl_ok(&h, &["auth", "whoami", &as_arg]).await;
    assert!(whoami.contains(SA_USER), "{whoami}");
}

#[tokio::test]
async fn the_binary_takes_an_authorization_flag() {
    let spawned = crate::common::Spawned::start(&["--authorization", "rbac"]).await;
    // The kubeconfig is written once the server serves, bootstrap included.
    let (_, roles) = raw(
        &spawned.client().await,
        "GET",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        None,
        b"",
    )
    .await;
    let names: Vec<&str> = roles["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "admin",
            "cluster-admin",
            "edit",
            "system:aggregate-to-admin",
            "system:aggregate-to-edit",
            "system:aggregate-to-view",
            "system:basic-user",
            "system:discovery",
            "system:public-info-viewer",
            "view"
        ]
    );
    let out = Command::new(env!("CARGO_BIN_EXE_wasmctrl-apiserver"))
        .args(["--authorization", "abac"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown authorization mode \"abac\" (expected always-allow or rbac)"),
        "{err}"
    );
}

/// A CRD may not define a built-in resource: it would take over its
/// storage, and deleting it would delete every object of that resource
/// (every ClusterRoleBinding, every CRD).
#[tokio::test]
async fn a_crd_of_a_built_in_resource_is_refused_and_the_built_ins_stay() {
    let h = rbac_server().await;
    let admin = h.client().await;
    for (group, plural, kind, scope) in [
        (
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "ClusterRoleBinding",
            "Cluster",
        ),
        (
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            "Cluster",
        ),
        (
            "apps.example.com",
            "deployments",
            "Deployment",
            "Namespaced",
        ),
    ] {
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {"group": group, "scope": scope,
                "names": {"plural": plural, "kind": kind},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
        let (code, r) = raw(
            &admin,
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            Some("application/json"),
            crd.to_string().as_bytes(),
        )
        .await;
        let builtin = group != "apps.example.com";
        if builtin {
            assert_eq!(code, 422, "{r}");
            assert!(
                r["message"]
                    .as_str()
                    .unwrap()
                    .contains("is a built-in resource"),
                "{r}"
            );
        } else {
            assert_eq!(
                code, 201,
                "a plural of a built-in in another group is free: {r}"
            );
        }
    }
    let (code, r) = raw(
        &admin,
        "GET",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/system:basic-user",
        None,
        b"",
    )
    .await;
    assert_eq!(code, 200, "{r}");
}

/// Whoever may create Roles and RoleBindings in a namespace cannot make
/// everyone's authorization there costly: a role is read once per
/// decision however many bindings name it, a rules review lists at most
/// 10,000 rules, and a denial names at most 20 unresolved roles.
#[tokio::test]
async fn many_bindings_and_rules_keep_decisions_and_reviews_bounded() {
    let h = rbac_server().await;
    let bot = fixture(&h).await;
    let rules: Vec<Value> = (0..10_001)
        .map(|i| rule(&[""], &["configmaps"], &["get"], &[&format!("cm-{i}")]))
        .collect();
    role(&h, NS, "big", rules).await;
    for i in 0..3 {
        bind(
            &h,
            Some(NS),
            &format!("big-{i}"),
            ("Role", "big"),
            vec![sa_subject(None, SA)],
        )
        .await;
    }
    for i in 0..30 {
        bind(
            &h,
            Some(NS),
            &format!("missing-{i}"),
            ("Role", &format!("missing-{i}")),
            vec![sa_subject(None, SA)],
        )
        .await;
    }
    let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": NS}});
    let (code, r) = raw(
        &bot,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        Some("application/json"),
        review.to_string().as_bytes(),
    )
    .await;
    assert_eq!(code, 201, "{r}");
    let listed = r["status"]["resourceRules"].as_array().unwrap().len();
    assert!(listed <= 10_000, "{listed}");
    assert_eq!(r["status"]["incomplete"], true);
    let error = r["status"]["evaluationError"].as_str().unwrap();
    assert!(error.contains("the list is cut"), "{error}");

    let denied = forbidden(
        Api::<Secret>::namespaced(bot.clone(), NS)
            .get("anything")
            .await,
    );
    assert!(denied.contains("and 10 more]"), "{denied}");
    assert!(denied.len() < 4096, "{} bytes", denied.len());
}

/// A namespaced CRD in `example.com` whose plural is `plural`.
fn crd_named(plural: &str, kind: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.com")},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": plural, "kind": kind},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})
}

/// `namespaces/NS/status/NAME` (and `.../finalize/NAME`) is namespace NS's
/// subresource with a trailing part, as upstream's RequestInfoFactory reads
/// it, never object NAME of a resource whose plural is `status` or
/// `finalize`: a service account allowed `*/status` reaches no such object
/// through them, and an access review with the attributes upstream reads
/// from each path answers exactly as the request was decided.
#[tokio::test]
async fn a_path_is_served_as_what_authorization_read_it_as() {
    let h = rbac_server().await;
    let bot = fixture(&h).await;
    let admin = h.client().await;
    for (plural, kind) in [("status", "Stat"), ("finalize", "Fin")] {
        let (code, r) = raw(
            &admin,
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            Some("application/json"),
            crd_named(plural, kind).to_string().as_bytes(),
        )
        .await;
        assert_eq!(code, 201, "{r}");
    }
    role(
        &h,
        NS,
        "status-only",
        vec![rule(
            &["*"],
            &["*/status"],
            &["get", "patch", "update"],
            &[],
        )],
    )
    .await;
    bind(
        &h,
        Some(NS),
        "status-only",
        ("Role", "status-only"),
        vec![sa_subject(None, SA)],
    )
    .await;
    let ssar = |attrs: Value| {
        let bot = bot.clone();
        async move {
            let body = json!({"apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes": attrs}});
            let (code, r) = raw(
                &bot,
                "POST",
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                Some("application/json"),
                body.to_string().as_bytes(),
            )
            .await;
            assert_eq!(code, 201, "{r}");
            r["status"]["allowed"].as_bool().unwrap()
        }
    };

    for (plural, kind) in [("status", "Stat"), ("finalize", "Fin")] {
        let path = format!("/apis/example.com/v1/namespaces/{NS}/{plural}/obj");
        // Whatever the admin's apply does, the service account must not
        // reach what it wrote.
        let apply = json!({"apiVersion": "example.com/v1", "kind": kind,
            "metadata": {"name": "obj", "namespace": NS}, "spec": {"secret": "s"}});
        let (admin_apply, _) = raw(
            &admin,
            "PATCH",
            &format!("{path}?fieldManager=admin"),
            Some("application/apply-patch+yaml"),
            apply.to_string().as_bytes(),
        )
        .await;
        // Upstream: namespace `team`'s `status`/`finalize` subresource, in
        // API group example.com, with a trailing part nothing serves.
        let as_read = json!({"namespace": NS, "group": "example.com", "resource": "namespaces",
            "subresource": plural, "name": NS});
        for (method, verb, body) in [
            ("GET", "get", None),
            (
                "PATCH",
                "patch",
                Some(json!({"spec": {"secret": "stolen"}})),
            ),
        ] {
            let (code, r) = raw_with(&bot, method, &path, &[], body).await;
            let mut attrs = as_read.clone();
            attrs["verb"] = json!(verb);
            let allowed = ssar(attrs).await;
            if plural == "status" {
                // Authorized as the namespace's status, which group
                // example.com does not serve.
                assert_eq!((code, allowed), (404, true), "{method} {path}: {r}");
                assert_eq!(r["reason"], "NotFound", "{r}");
            } else {
                assert_eq!((code, allowed), (403, false), "{method} {path}: {r}");
                assert_eq!(
                    r["message"],
                    format!(
                        "namespaces.example.com \"{NS}\" is forbidden: User \"{SA_USER}\" cannot {verb} resource \"namespaces/finalize\" in API group \"example.com\" in the namespace \"{NS}\""
                    )
                );
            }
            // Never the object: `*/status` does not grant the resource.
            let mut attrs = json!({"namespace": NS, "group": "example.com", "resource": plural,
                "name": "obj"});
            attrs["verb"] = json!(verb);
            assert!(!ssar(attrs).await);
        }
        // The admin is routed the same way: such a path creates nothing.
        assert_eq!(admin_apply, 404);
        let (code, r) = raw(&admin, "GET", &path, None, b"").await;
        assert_eq!(code, 404, "{r}");
        let (code, r) = raw(
            &admin,
            "GET",
            &format!("/apis/example.com/v1/{plural}"),
            None,
            b"",
        )
        .await;
        assert_eq!((code, &r["items"]), (200, &json!([])), "{r}");

        // The core-group path: the namespace's subresource, plus a part.
        let core = format!("/api/v1/namespaces/{NS}/{plural}/obj");
        let (code, r) = raw_with(&bot, "GET", &core, &[], None).await;
        let attrs = json!({"namespace": NS, "verb": "get", "resource": "namespaces",
            "subresource": plural, "name": NS});
        let allowed = ssar(attrs).await;
        let want = if plural == "status" {
            (404, true)
        } else {
            (403, false)
        };
        assert_eq!((code, allowed), want, "GET {core}: {r}");
    }

    // The namespace's own status still answers to `namespaces/status`,
    // and only for the namespace the role is in.
    let (code, r) = raw_with(
        &bot,
        "GET",
        &format!("/api/v1/namespaces/{NS}/status"),
        &[],
        None,
    )
    .await;
    assert_eq!((code, r["kind"].as_str()), (200, Some("Namespace")), "{r}");
    assert_eq!(r["metadata"]["name"], NS);
    let (code, r) = raw_with(
        &bot,
        "PATCH",
        &format!("/api/v1/namespaces/{NS}/status"),
        &[],
        Some(json!({"status": {"phase": "Active"}})),
    )
    .await;
    assert_eq!(code, 200, "{r}");
    let (code, r) = raw_with(
        &bot,
        "GET",
        &format!("/api/v1/namespaces/{OTHER}/status"),
        &[],
        None,
    )
    .await;
    assert_eq!(code, 403, "{r}");
    assert!(
        ssar(json!({"namespace": NS, "verb": "get", "resource": "namespaces", "subresource": "status", "name": NS})).await
    );
    assert!(
        !ssar(json!({"namespace": OTHER, "verb": "get", "resource": "namespaces", "subresource": "status", "name": OTHER})).await
    );
    // Bound cluster-wide, `namespaces/status` reaches every namespace's
    // status and nothing in API group example.com.
    cluster_role(
        &h,
        "ns-status",
        vec![rule(&[""], &["namespaces/status"], &["get"], &[])],
    )
    .await;
    bind(
        &h,
        None,
        "ns-status",
        ("ClusterRole", "ns-status"),
        vec![sa_subject(Some(NS), SA)],
    )
    .await;
    let (code, r) = raw_with(
        &bot,
        "GET",
        &format!("/api/v1/namespaces/{OTHER}/status"),
        &[],
        None,
    )
    .await;
    assert_eq!((code, &r["metadata"]["name"]), (200, &json!(OTHER)), "{r}");
    let (code, r) = raw_with(
        &bot,
        "GET",
        &format!("/apis/example.com/v1/namespaces/{OTHER}/status/obj"),
        &[],
        None,
    )
    .await;
    assert_eq!(code, 403, "{r}");
}

/// `GET /metrics` is a non-resource URL as on kube-apiserver: the admin
/// (system:masters) reads it; a service account needs a ClusterRole rule
/// `get` on nonResourceURL `/metrics`, and is refused with upstream's 403
/// without one.
#[tokio::test]
async fn metrics_are_served_to_the_admin_and_to_whom_rbac_grants_them() {
    let h = rbac_server().await;
    let bot = fixture(&h).await;
    let admin = h.client().await;

    // Run into one limit, so the family has something to show.
    let (code, _) = h
        .raw("GET", "/api/v1/namespaces/%FF/configmaps", None, "")
        .await;
    assert_eq!(code, 400);

    let text = crate::common::metrics_text(&admin).await;
    assert!(
        text.contains("# TYPE wasmctrl_apiserver_limit_exceeded counter"),
        "{text}"
    );
    assert_eq!(crate::common::limit_count(&text, "pathSegment"), 1);
    assert_eq!(crate::common::limit_count(&text, "requestBody"), 0);
    assert!(
        text.contains("wasmctrl_apiserver_requests_total{verb=\"get\",code=\"400\"} 1"),
        "{text}"
    );

    let (code, status) = raw(&bot, "GET", "/metrics", None, b"").await;
    assert_eq!(code, 403, "{status}");
    assert_eq!(
        status["message"],
        format!("forbidden: User \"{SA_USER}\" cannot get path \"/metrics\"")
    );

    cluster_role(
        &h,
        "metrics-reader",
        vec![json!({"nonResourceURLs": ["/metrics"], "verbs": ["get"]})],
    )
    .await;
    bind(
        &h,
        None,
        "bot-reads-metrics",
        ("ClusterRole", "metrics-reader"),
        vec![sa_subject(Some(NS), SA)],
    )
    .await;
    let text = crate::common::metrics_text(&bot).await;
    assert_eq!(crate::common::limit_count(&text, "pathSegment"), 1);
    // The rule grants `get` on that path only.
    let (code, _) = raw(&bot, "POST", "/metrics", None, b"").await;
    assert_eq!(code, 403);
    let (code, _) = raw(&bot, "GET", "/metrics/slis", None, b"").await;
    assert_eq!(code, 403);
}
