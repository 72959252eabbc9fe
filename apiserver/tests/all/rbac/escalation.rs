//! Writes of roles and bindings by identities RBAC authorizes grant only
//! what their authors hold, unless they may `escalate` a role or `bind`
//! one, as upstream: through kube-rs and the real kubectl.

use k8s_openapi::api::rbac::v1::{Role, RoleBinding};

use super::*;

fn role_object(name: &str, rules: Vec<Value>) -> Role {
    serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules})).unwrap()
}

fn binding_object(name: &str, role: (&str, &str), subjects: Vec<Value>) -> RoleBinding {
    serde_json::from_value(json!({"metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role.0, "name": role.1},
        "subjects": subjects}))
    .unwrap()
}

const NOT_HELD: &str = "is attempting to grant RBAC permissions not currently held";

#[tokio::test(flavor = "multi_thread")]
async fn roles_and_bindings_grant_only_what_their_author_holds_unless_it_may_escalate_or_bind() {
    let h = rbac_server().await;
    let bot = fixture(&h).await;
    // The bot manages roles and bindings in its namespace and reads its
    // ConfigMaps; nothing else.
    let rbac = "rbac.authorization.k8s.io";
    role(
        &h,
        NS,
        "rbac-manager",
        vec![
            rule(
                &[rbac],
                &["roles", "rolebindings"],
                &["get", "create", "update", "patch"],
                &[],
            ),
            rule(&[""], &["configmaps"], &["get", "list"], &[]),
        ],
    )
    .await;
    bind(
        &h,
        Some(NS),
        "bot-manages",
        ("Role", "rbac-manager"),
        vec![sa_subject(Some(NS), SA)],
    )
    .await;
    let roles = Api::<Role>::namespaced(bot.clone(), NS);
    let bindings = Api::<RoleBinding>::namespaced(bot.clone(), NS);
    let pp = PostParams::default();

    // What it holds, it may grant.
    let readers = role_object("readers", vec![rule(&[""], &["configmaps"], &["get"], &[])]);
    roles.create(&pp, &readers).await.unwrap();
    let friend = subject("User", "friend");
    bindings
        .create(
            &pp,
            &binding_object("read", ("Role", "readers"), vec![friend.clone()]),
        )
        .await
        .unwrap();

    // What it does not hold, it may not: in a new role, by a patch of its
    // own, or by binding a role that holds more.
    let thief = role_object("thief", vec![rule(&[""], &["secrets"], &["get"], &[])]);
    let refused = forbidden(roles.create(&pp, &thief).await);
    assert_eq!(
        refused,
        format!(
            "roles.rbac.authorization.k8s.io \"thief\" is forbidden: user \"{SA_USER}\" (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:team\" \"system:authenticated\"]) {NOT_HELD}:\n{{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}}"
        )
    );
    let more = json!({"rules": [rule(&[""], &["configmaps"], &["get", "delete"], &[])]});
    let refused = forbidden(
        roles
            .patch("readers", &PatchParams::default(), &Patch::Merge(&more))
            .await,
    );
    assert!(
        refused.contains(NOT_HELD) && refused.contains(r#"Verbs:["delete"]"#),
        "{refused}"
    );
    let grab = binding_object(
        "grab",
        ("ClusterRole", "cluster-admin"),
        vec![sa_subject(Some(NS), SA)],
    );
    let refused = forbidden(bindings.create(&pp, &grab).await);
    assert!(
        refused.starts_with("rolebindings.rbac.authorization.k8s.io \"grab\" is forbidden")
            && refused.contains(NOT_HELD),
        "{refused}"
    );
    // Adding a subject to a binding of a role it holds is granting what
    // it holds.
    let moved = json!({"subjects": [friend, sa_subject(Some(NS), SA)]});
    bindings
        .patch("read", &PatchParams::default(), &Patch::Merge(&moved))
        .await
        .unwrap();
    let missing = binding_object("gone", ("Role", "no-such-role"), Vec::new());
    let refused = forbidden(bindings.create(&pp, &missing).await);
    assert!(
        refused.contains("role.rbac.authorization.k8s.io \"no-such-role\" not found"),
        "{refused}"
    );

    // kubectl shows the refusal, listing what is not held.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("bot.kubeconfig");
    std::fs::write(
        &kubeconfig,
        h.server
            .kubeconfig_for_service_account(NS, SA, HOUR)
            .unwrap(),
    )
    .unwrap();
    let out = tokio::task::block_in_place(|| {
        wasmctrl_testkit::kubectl::output(
            &kubeconfig,
            &[
                "create",
                "rolebinding",
                "admin-me",
                "--clusterrole=cluster-admin",
                "--serviceaccount=team:bot",
                "-n",
                NS,
            ],
        )
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("rolebindings.rbac.authorization.k8s.io \"admin-me\" is forbidden")
            && stderr.contains(NOT_HELD)
            && stderr.contains(r#"{APIGroups:["*"], Resources:["*"], Verbs:["*"]}"#),
        "{stderr}"
    );

    // `bind` on one ClusterRole lets it bind that role, and only that one.
    cluster_role(
        &h,
        "secret-reader",
        vec![rule(&[""], &["secrets"], &["get"], &[])],
    )
    .await;
    cluster_role(
        &h,
        "secret-writer",
        vec![rule(&[""], &["secrets"], &["update"], &[])],
    )
    .await;
    role(
        &h,
        NS,
        "binder",
        vec![rule(
            &[rbac],
            &["clusterroles"],
            &["bind"],
            &["secret-reader"],
        )],
    )
    .await;
    bind(
        &h,
        Some(NS),
        "bot-binds",
        ("Role", "binder"),
        vec![sa_subject(Some(NS), SA)],
    )
    .await;
    bindings
        .create(
            &pp,
            &binding_object(
                "peek",
                ("ClusterRole", "secret-reader"),
                vec![subject("User", "friend")],
            ),
        )
        .await
        .unwrap();
    let refused = forbidden(
        bindings
            .create(
                &pp,
                &binding_object(
                    "write",
                    ("ClusterRole", "secret-writer"),
                    vec![subject("User", "friend")],
                ),
            )
            .await,
    );
    assert!(refused.contains(NOT_HELD), "{refused}");

    // `escalate` on roles lets it write any role.
    role(
        &h,
        NS,
        "escalator",
        vec![rule(&[rbac], &["roles"], &["escalate"], &[])],
    )
    .await;
    bind(
        &h,
        Some(NS),
        "bot-escalates",
        ("Role", "escalator"),
        vec![sa_subject(Some(NS), SA)],
    )
    .await;
    roles.create(&pp, &thief).await.unwrap();

    // The admin is not checked.
    let admin = Api::<RoleBinding>::namespaced(h.client().await, NS);
    admin
        .create(
            &pp,
            &binding_object(
                "by-admin",
                ("ClusterRole", "cluster-admin"),
                vec![subject("User", "friend")],
            ),
        )
        .await
        .unwrap();
}

/// Bindings and roles are validated as upstream validates them, with its
/// messages through kubectl: a binding's kinds must exist, its `roleRef`
/// never changes, and a rule must be able to match something.
#[tokio::test(flavor = "multi_thread")]
async fn rbac_objects_are_validated_as_upstream() {
    let h = rbac_server().await;
    fixture(&h).await;
    let dir = tempfile::tempdir().unwrap();
    let apply = |name: &str, yaml: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, yaml).unwrap();
        path.to_str().unwrap().to_string()
    };
    let typo = apply(
        "typo.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: typo, namespace: team}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Clusterrole, name: view}\nsubjects: [{kind: user, name: jane}]\n",
    );
    let stderr = kubectl_err(&h, &["apply", "-f", &typo]).await;
    assert!(
        stderr.contains(r#"The RoleBinding "typo" is invalid"#)
            && stderr.contains(r#"roleRef.kind: Unsupported value: "Clusterrole": supported values: "Role", "ClusterRole""#)
            && stderr.contains(r#"subjects[0].kind: Unsupported value: "user""#),
        "{stderr}"
    );

    // kubectl's own binding names its groups; one without them is
    // defaulted, as upstream.
    kubectl_ok(
        &h,
        &[
            "create",
            "rolebinding",
            "readers",
            "--clusterrole=view",
            "--user=jane",
            "-n",
            NS,
        ],
    )
    .await;
    let plain = apply(
        "plain.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: plain, namespace: team}\nroleRef: {kind: Role, name: worker}\nsubjects: [{kind: Group, name: devs}]\n",
    );
    kubectl_ok(&h, &["apply", "-f", &plain]).await;
    let stored: Value = serde_json::from_str(
        &kubectl_ok(&h, &["get", "rolebinding", "plain", "-n", NS, "-o", "json"]).await,
    )
    .unwrap();
    assert_eq!(stored["roleRef"]["apiGroup"], "rbac.authorization.k8s.io");
    assert_eq!(
        stored["subjects"][0]["apiGroup"],
        "rbac.authorization.k8s.io"
    );

    let stderr = kubectl_err(
        &h,
        &[
            "patch",
            "rolebinding",
            "readers",
            "-n",
            NS,
            "--type",
            "merge",
            "-p",
            r#"{"roleRef": {"name": "edit"}}"#,
        ],
    )
    .await;
    assert!(
        stderr.contains(r#"roleRef: Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", Name:"edit"}: cannot change roleRef"#),
        "{stderr}"
    );

    let urls = apply(
        "urls.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: urls, namespace: team}\nrules: [{nonResourceURLs: [/healthz], verbs: [get]}]\n",
    );
    let stderr = kubectl_err(&h, &["apply", "-f", &urls]).await;
    assert!(
        stderr.contains(r#"rules[0].nonResourceURLs: Invalid value: []string{"/healthz"}: namespaced rules cannot apply to non-resource URLs"#),
        "{stderr}"
    );
}
