//! ClusterRoles with an `aggregationRule` take the rules of the roles their
//! selectors match, as upstream's aggregation controller writes them, and
//! only an identity that may `escalate` writes such a role: through kube-rs
//! and the real kubectl.

use std::time::Duration;

use k8s_openapi::api::rbac::v1::ClusterRole;
use wasmctrl_testkit::eventually;

use super::*;

const LABEL: &str = "rbac.example.com/aggregate-to-monitoring";
const WAIT: Duration = Duration::from_secs(30);

fn labelled(name: &str, rules: Vec<Value>) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {LABEL: "true"}}, "rules": rules})
}

fn aggregated(name: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {LABEL: "true"}}]}})
}

/// The rules the aggregated role `name` holds once they are `want`.
async fn rules_become(admin: &kube::Client, name: &str, want: Vec<Value>) {
    let roles = Api::<ClusterRole>::all(admin.clone());
    let want: Vec<k8s_openapi::api::rbac::v1::PolicyRule> =
        serde_json::from_value(Value::Array(want)).unwrap();
    eventually(&format!("{name}'s aggregated rules"), WAIT, || {
        let roles = roles.clone();
        let want = want.clone();
        async move { roles.get(name).await.unwrap().rules.unwrap_or_default() == want }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_aggregated_cluster_role_holds_the_rules_its_selectors_match() {
    let h = rbac_server().await;
    let bot = fixture(&h).await;
    let admin = h.client().await;
    let pods = rule(&[""], &["pods"], &["get", "list"], &[]);
    let secrets = rule(&[""], &["secrets"], &["get"], &[]);
    create_rbac(&h, None, "clusterroles", aggregated("monitoring")).await;
    create_rbac(
        &h,
        None,
        "clusterroles",
        labelled("pod-reader", vec![pods.clone()]),
    )
    .await;
    bind(
        &h,
        None,
        "bot-monitors",
        ("ClusterRole", "monitoring"),
        vec![sa_subject(Some(NS), SA)],
    )
    .await;
    rules_become(&admin, "monitoring", vec![pods.clone()]).await;
    let as_bot = ["--as", SA_USER];
    let can_i = |verb: &'static str, what: &'static str| {
        let h = &h;
        async move {
            let mut args = vec!["auth", "can-i", verb, what, "-n", OTHER];
            args.extend(as_bot);
            tokio::task::block_in_place(|| kubectl(h, &args))
                .stdout
                .starts_with(b"yes")
        }
    };
    assert!(can_i("list", "pods").await);
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(bot.clone(), OTHER)
        .list(&ListParams::default())
        .await
        .expect("the bot lists pods through the aggregated role");
    assert!(!can_i("get", "secrets").await);

    // A second labelled role adds its rules; taking its label off takes
    // them away again, as does deleting the first.
    create_rbac(
        &h,
        None,
        "clusterroles",
        labelled("secret-peek", vec![secrets.clone(), pods.clone()]),
    )
    .await;
    rules_become(&admin, "monitoring", vec![pods.clone(), secrets.clone()]).await;
    assert!(can_i("get", "secrets").await);
    kubectl_ok(
        &h,
        &["label", "clusterrole", "secret-peek", &format!("{LABEL}-")],
    )
    .await;
    rules_become(&admin, "monitoring", vec![pods.clone()]).await;
    assert!(!can_i("get", "secrets").await);
    delete_rbac(&h, None, "clusterroles", "pod-reader").await;
    rules_become(&admin, "monitoring", Vec::new()).await;
    assert!(!can_i("list", "pods").await);

    // What kubectl shows is what the controller wrote.
    kubectl_ok(
        &h,
        &[
            "label",
            "clusterrole",
            "secret-peek",
            &format!("{LABEL}=true"),
        ],
    )
    .await;
    rules_become(&admin, "monitoring", vec![secrets.clone(), pods.clone()]).await;
    let shown: Value = serde_json::from_str(
        &kubectl_ok(
            &h,
            &[
                "get",
                "clusterrole",
                "monitoring",
                "-o",
                "json",
                "--show-managed-fields",
            ],
        )
        .await,
    )
    .unwrap();
    assert_eq!(shown["rules"], json!([secrets, pods]));
    let managers: Vec<&str> = shown["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(
        managers.contains(&"clusterrole-aggregation-controller"),
        "{managers:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn only_an_identity_that_may_escalate_writes_an_aggregated_role_or_relabels_one_it_does_not_hold()
 {
    let h = rbac_server().await;
    let bot = fixture(&h).await;
    let admin = h.client().await;
    let rbac = "rbac.authorization.k8s.io";
    // The bot writes ClusterRoles and reads pods; it may not escalate.
    cluster_role(
        &h,
        "role-writer",
        vec![
            rule(
                &[rbac],
                &["clusterroles"],
                &["get", "create", "update", "patch"],
                &[],
            ),
            rule(&[""], &["pods"], &["get", "list"], &[]),
        ],
    )
    .await;
    bind(
        &h,
        None,
        "bot-writes-roles",
        ("ClusterRole", "role-writer"),
        vec![sa_subject(Some(NS), SA)],
    )
    .await;
    let roles = Api::<ClusterRole>::all(bot.clone());
    let pp = PostParams::default();

    let grab: ClusterRole = serde_json::from_value(aggregated("grab")).unwrap();
    let refused = forbidden(roles.create(&pp, &grab).await);
    assert_eq!(
        refused,
        "clusterroles.rbac.authorization.k8s.io \"grab\" is forbidden: must have cluster-admin privileges to use the aggregationRule"
    );

    // A role it holds it may label; one it does not hold it may not, since
    // the label would hand that role's rules to the aggregated role.
    create_rbac(&h, None, "clusterroles", aggregated("monitoring")).await;
    cluster_role(
        &h,
        "pod-reader",
        vec![rule(&[""], &["pods"], &["get"], &[])],
    )
    .await;
    cluster_role(
        &h,
        "secret-reader",
        vec![rule(&[""], &["secrets"], &["get"], &[])],
    )
    .await;
    let label = json!({"metadata": {"labels": {LABEL: "true"}}});
    roles
        .patch("pod-reader", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    let refused = forbidden(
        roles
            .patch(
                "secret-reader",
                &PatchParams::default(),
                &Patch::Merge(&label),
            )
            .await,
    );
    assert!(
        refused.contains("is attempting to grant RBAC permissions not currently held")
            && refused.contains(r#"Resources:["secrets"]"#),
        "{refused}"
    );
    // Nor may it turn the aggregated role into a plain one it keeps.
    let plain = json!({"aggregationRule": null});
    let refused = forbidden(
        roles
            .patch("monitoring", &PatchParams::default(), &Patch::Merge(&plain))
            .await,
    );
    assert!(
        refused.ends_with("must have cluster-admin privileges to use the aggregationRule"),
        "{refused}"
    );
    rules_become(
        &admin,
        "monitoring",
        vec![rule(&[""], &["pods"], &["get"], &[])],
    )
    .await;

    // With `escalate`, it may.
    cluster_role(
        &h,
        "escalator",
        vec![rule(&[rbac], &["clusterroles"], &["escalate"], &[])],
    )
    .await;
    bind(
        &h,
        None,
        "bot-escalates",
        ("ClusterRole", "escalator"),
        vec![sa_subject(Some(NS), SA)],
    )
    .await;
    roles
        .create(&pp, &grab)
        .await
        .expect("an identity that may escalate writes an aggregated role");
}

/// Upstream's user-facing roles are there from the start, each the union
/// of the roles labelled for it: `view` in `edit` in `admin`. An admin of
/// a namespace may hand out `view` there, and nothing it does not hold.
#[tokio::test(flavor = "multi_thread")]
async fn view_edit_and_admin_nest_as_upstream_and_bind_in_a_namespace() {
    let h = rbac_server().await;
    let _bot = fixture(&h).await;
    let bot = format!("{NS}:{SA}");
    let can_i = |verb: &'static str, what: &'static str, ns: &'static str| {
        let h = &h;
        async move {
            let args = ["auth", "can-i", verb, what, "-n", ns, "--as", SA_USER];
            tokio::task::block_in_place(|| kubectl(h, &args))
                .stdout
                .starts_with(b"yes")
        }
    };
    let bind_as = |role: &'static str| {
        let h = &h;
        let bot = bot.clone();
        async move {
            let name = format!("bot-{role}");
            let args = [
                "create",
                "rolebinding",
                &name,
                "--clusterrole",
                role,
                "--serviceaccount",
                &bot,
                "-n",
                NS,
            ];
            kubectl_ok(h, &args).await;
        }
    };

    bind_as("view").await;
    assert!(can_i("list", "configmaps", NS).await);
    assert!(can_i("watch", "deployments.apps", NS).await);
    assert!(!can_i("get", "secrets", NS).await, "view reads no secrets");
    assert!(!can_i("create", "configmaps", NS).await);
    assert!(!can_i("list", "configmaps", OTHER).await);

    bind_as("edit").await;
    assert!(can_i("create", "configmaps", NS).await);
    assert!(can_i("get", "secrets", NS).await);
    assert!(!can_i("create", "roles.rbac.authorization.k8s.io", NS).await);

    bind_as("admin").await;
    assert!(can_i("create", "roles.rbac.authorization.k8s.io", NS).await);
    assert!(!can_i("create", "roles.rbac.authorization.k8s.io", OTHER).await);
    // It holds every rule of `view` in its namespace, so it may grant it
    // there; `cluster-admin` it may not.
    kubectl_ok(
        &h,
        &[
            "create",
            "rolebinding",
            "alice-views",
            "--clusterrole",
            "view",
            "--user",
            "alice",
            "-n",
            NS,
            "--as",
            SA_USER,
        ],
    )
    .await;
    let refused = kubectl_err(
        &h,
        &[
            "create",
            "rolebinding",
            "alice-rules",
            "--clusterrole",
            "cluster-admin",
            "--user",
            "alice",
            "-n",
            NS,
            "--as",
            SA_USER,
        ],
    )
    .await;
    assert!(
        refused.contains("is attempting to grant RBAC permissions not currently held"),
        "{refused}"
    );
}
