//! A server-side apply of an absent object creates it, so it is authorized
//! as a `create` besides the `patch` its request is, as upstream.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn an_apply_that_creates_needs_create_as_well_as_patch() {
    let h = rbac_server().await;
    let bot = fixture(&h).await;
    // May patch (and read) ConfigMap "new" only: not create it.
    role(
        &h,
        NS,
        "patcher",
        vec![rule(&[""], &["configmaps"], &["get", "patch"], &["new"])],
    )
    .await;
    bind(
        &h,
        Some(NS),
        "bot-patches",
        ("Role", "patcher"),
        vec![sa_subject(Some(NS), SA)],
    )
    .await;
    let configmaps = Api::<ConfigMap>::namespaced(bot.clone(), NS);
    let apply = PatchParams::apply("bot");
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new"}, "data": {"k": "v"}});
    let refused = forbidden(configmaps.patch("new", &apply, &Patch::Apply(&body)).await);
    assert_eq!(
        refused,
        format!(
            "configmaps \"new\" is forbidden: User \"{SA_USER}\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"{NS}\""
        )
    );
    let admin = Api::<ConfigMap>::namespaced(h.client().await, NS);
    assert!(
        admin.get_opt("new").await.unwrap().is_none(),
        "nothing was created"
    );

    // With `create`, the apply creates it; once it exists, `patch` is all
    // an apply needs.
    role(
        &h,
        NS,
        "creator",
        vec![rule(&[""], &["configmaps"], &["create"], &[])],
    )
    .await;
    bind(
        &h,
        Some(NS),
        "bot-creates",
        ("Role", "creator"),
        vec![sa_subject(Some(NS), SA)],
    )
    .await;
    configmaps
        .patch("new", &apply, &Patch::Apply(&body))
        .await
        .unwrap();
    delete_rbac(&h, Some(NS), "rolebindings", "bot-creates").await;
    let changed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new"}, "data": {"k": "w"}});
    let cm = configmaps
        .patch("new", &apply, &Patch::Apply(&changed))
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["k"], "w");
}
