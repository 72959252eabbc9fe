//! The reconciler against the SDK's fake API server (`cargo test`): every
//! call is held to the permissions its metadata declares.

use wasmctrl_sdk::testing::FakeCluster;
use wasmctrl_sdk::{Action, Api, ObjectKey, conditions};

use super::*;

fn sample() -> {{Kind}} {
    {{Kind}}::new(
        "sample",
        {{Kind}}Spec {
{{spec_sample}}        },
    )
}

#[test]
fn a_new_object_becomes_ready_and_is_released_on_delete() {
    let cluster = FakeCluster::new();
    let api = Api::<{{Kind}}>::namespaced("default");
    let key = ObjectKey::namespaced("default", "sample");
    api.create(&sample()).unwrap();

    assert_eq!(cluster.reconcile::<{{Reconciler}}>(&key), Ok(Action::done()));
    let object = api.get("sample").unwrap();
    assert_eq!(object.metadata.finalizers, Some(vec![FINALIZER.to_string()]));
    let status = object.status.clone().unwrap();
    assert_eq!(status.observed_generation, object.metadata.generation);
    let ready = conditions::get(&status.conditions, "Ready").unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(ready.observed_generation, object.metadata.generation);
{{test_owned}}
    // Nothing changed: the second reconcile leaves the status alone.
    cluster.clear_calls();
    assert_eq!(cluster.reconcile::<{{Reconciler}}>(&key), Ok(Action::done()));
    let calls = cluster.calls();
    assert!(calls.iter().all(|c| c.verb != "patch-status"), "{calls:?}");

    // Deleted: the finalizer runs, is removed, and the object goes away.
    api.delete("sample").unwrap();
    assert_eq!(cluster.reconcile::<{{Reconciler}}>(&key), Ok(Action::done()));
    assert!(api.get_opt("sample").unwrap().is_none());
    assert_eq!(cluster.reconcile::<{{Reconciler}}>(&key), Ok(Action::done()));

    assert!(cluster.unused_permissions::<{{Reconciler}}>().is_empty());
}
