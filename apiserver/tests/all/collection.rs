//! The garbage collector's foreground deletions as Kubernetes defines
//! them: an owner waits only for dependents whose references block it,
//! from its own namespace; a dependent written while it waits goes too; an
//! ownership cycle ends.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;
use wasmctrl_testkit::eventually;

use crate::common::Harness;

const HOLD: &str = "example.com/hold";
const LIMIT: Duration = Duration::from_secs(10);

fn owner_ref(owner: &ConfigMap, blocks: bool) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: owner.name_any(),
        uid: owner.uid().expect("a stored object has a uid"),
        block_owner_deletion: Some(blocks),
        controller: None,
    }
}

/// A ConfigMap held by a finalizer, owned through `owners`.
fn held(name: &str, owners: Vec<OwnerReference>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            owner_references: Some(owners),
            finalizers: Some(vec![HOLD.into()]),
            ..Default::default()
        },
        ..Default::default()
    }
}

async fn create_held(api: &Api<ConfigMap>, name: &str, owners: Vec<OwnerReference>) {
    api.create(&PostParams::default(), &held(name, owners))
        .await
        .unwrap();
}

fn plain(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

async fn release(api: &Api<ConfigMap>, name: &str) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
}

async fn gone(api: &Api<ConfigMap>, name: &str) {
    eventually(&format!("{name} gone"), LIMIT, || async move {
        api.get_opt(name).await.unwrap().is_none()
    })
    .await;
}

async fn marked(api: &Api<ConfigMap>, name: &str) {
    eventually(
        &format!("{name} marked for deletion"),
        LIMIT,
        || async move {
            api.get(name)
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_some()
        },
    )
    .await;
}

async fn namespace(client: &kube::Client, name: &str) -> Api<ConfigMap> {
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
    )
    .await
    .unwrap();
    Api::namespaced(client.clone(), name)
}

#[tokio::test]
async fn a_foreground_deletion_waits_only_for_blocking_dependents_of_its_namespace() {
    let h = Harness::start().await;
    let client = h.client().await;
    let api = namespace(&client, "fg").await;
    let elsewhere = namespace(&client, "elsewhere").await;
    let owner = api
        .create(&PostParams::default(), &plain("owner"))
        .await
        .unwrap();
    for (name, blocks) in [("blocking", true), ("not-blocking", false)] {
        create_held(&api, name, vec![owner_ref(&owner, blocks)]).await;
    }
    // A reference from another namespace is invalid: it holds nothing.
    create_held(&elsewhere, "foreign", vec![owner_ref(&owner, true)]).await;

    api.delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    marked(&api, "blocking").await;
    marked(&api, "not-blocking").await;
    assert!(
        api.get_opt("owner").await.unwrap().is_some(),
        "the owner waits for its blocking dependent"
    );
    release(&api, "blocking").await;
    gone(&api, "owner").await;
    assert!(
        api.get_opt("not-blocking").await.unwrap().is_some(),
        "a dependent that does not block is deleted, not waited for"
    );
    assert!(
        elsewhere.get_opt("foreign").await.unwrap().is_some(),
        "the owner went while the object of another namespace naming it stayed"
    );
}

#[tokio::test]
async fn a_dependent_written_while_its_owner_waits_goes_and_an_unblocked_one_frees_it() {
    let h = Harness::start().await;
    let client = h.client().await;
    let api = namespace(&client, "late").await;
    let owner = api
        .create(&PostParams::default(), &plain("owner"))
        .await
        .unwrap();
    create_held(&api, "first", vec![owner_ref(&owner, true)]).await;
    api.delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    marked(&api, "first").await;

    create_held(&api, "late", vec![owner_ref(&owner, true)]).await;
    marked(&api, "late").await;

    // Both stay (their finalizer), but stop blocking: the owner goes.
    for name in ["first", "late"] {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"ownerReferences": [owner_ref(&owner, false)]}})),
        )
        .await
        .unwrap();
    }
    gone(&api, "owner").await;
    for name in ["first", "late"] {
        release(&api, name).await;
        gone(&api, name).await;
    }
}

#[tokio::test]
async fn an_ownership_cycle_deleted_in_the_foreground_ends() {
    let h = Harness::start().await;
    let client = h.client().await;
    let api = namespace(&client, "cycle").await;
    let a = api
        .create(&PostParams::default(), &plain("a"))
        .await
        .unwrap();
    let b = api
        .create(&PostParams::default(), &plain("b"))
        .await
        .unwrap();
    for (name, owner) in [("a", &b), ("b", &a)] {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"ownerReferences": [owner_ref(owner, true)]}})),
        )
        .await
        .unwrap();
    }
    api.delete("a", &DeleteParams::foreground()).await.unwrap();
    gone(&api, "a").await;
    gone(&api, "b").await;
}
