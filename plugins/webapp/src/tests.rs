//! The operator's behaviour, natively, against the SDK's fake API server
//! (`cargo test -p webapp`): the same story as the acceptance test in a
//! cluster (`cluster-tests/cluster/webapp.rs`), with every call held to the
//! plugin's declared permissions.

use std::time::Duration;

use wasmctrl_sdk::k8s_openapi::api::apps::v1::Deployment;
use wasmctrl_sdk::k8s_openapi::api::core::v1::{ConfigMap, Service};
use wasmctrl_sdk::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use wasmctrl_sdk::serde_json::json;
use wasmctrl_sdk::testing::FakeCluster;
use wasmctrl_sdk::{Action, Api, ObjectKey, Patch, Resource, conditions};

use super::*;

const NS: &str = "default";
const URL: &str = "http://hello.default.svc.cluster.local:80";

fn key() -> ObjectKey {
    ObjectKey::namespaced(NS, "hello")
}

fn webapps() -> Api<WebApp> {
    Api::namespaced(NS)
}

fn deployments() -> Api<Deployment> {
    Api::namespaced(NS)
}

fn registry() -> Option<BTreeMap<String, String>> {
    Api::<ConfigMap>::namespaced(NS)
        .get_opt(REGISTRY)
        .unwrap()
        .map(|cm| cm.data.unwrap_or_default())
}

fn reconcile(cluster: &FakeCluster) -> Action {
    cluster.reconcile::<WebAppReconciler>(&key()).unwrap()
}

fn create_hello() {
    let spec = WebAppSpec {
        image: "nginx:1.27".into(),
        replicas: 2,
        port: 80,
    };
    webapps().create(&WebApp::new("hello", spec)).unwrap();
}

fn set_ready_replicas(n: i32) {
    deployments()
        .patch_status(
            "hello",
            &Patch::Merge(json!({"status": {"replicas": n, "readyReplicas": n}})),
        )
        .unwrap();
}

fn ready(app: &WebApp) -> (String, String) {
    let status = app.status.as_ref().expect("a status");
    let c = conditions::get(&status.conditions, "Ready").expect("a Ready condition");
    (c.status.clone(), c.reason.clone())
}

#[test]
fn a_webapp_becomes_an_owned_deployment_and_service() {
    let cluster = FakeCluster::new();
    create_hello();

    assert_eq!(reconcile(&cluster), Action::requeue_after(POLL));

    let app = webapps().get("hello").unwrap();
    let owner = app.controller_owner_ref().unwrap();
    let d = deployments().get("hello").unwrap();
    assert_eq!(d.spec.replicas, Some(2));
    let pod = d.spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.containers[0].image.as_deref(), Some("nginx:1.27"));
    assert_eq!(d.metadata.owner_references, Some(vec![owner.clone()]));
    assert_eq!(owner.controller, Some(true));
    assert_eq!(owner.block_owner_deletion, Some(true));
    assert_eq!(
        d.spec.selector.match_labels,
        d.spec.template.metadata.as_ref().unwrap().labels
    );

    let svc = Api::<Service>::namespaced(NS).get("hello").unwrap();
    assert_eq!(svc.metadata.owner_references, Some(vec![owner]));
    let port = &svc.spec.as_ref().unwrap().ports.as_ref().unwrap()[0];
    assert_eq!(port.port, 80);
    assert_eq!(port.target_port, Some(IntOrString::String("http".into())));

    assert_eq!(app.meta().finalizers, Some(vec![FINALIZER.to_string()]));
    assert_eq!(app.status.as_ref().unwrap().observed_generation, Some(1));
    assert_eq!(ready(&app), ("False".into(), "Progressing".into()));
    assert_eq!(registry(), None, "not listed until ready");
    let events = cluster.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].body["reason"], "Progressing");
}

#[test]
fn ready_replicas_make_it_ready_and_listed() {
    let cluster = FakeCluster::new();
    create_hello();
    reconcile(&cluster);
    set_ready_replicas(1);
    assert_eq!(reconcile(&cluster), Action::requeue_after(POLL));
    assert_eq!(
        ready(&webapps().get("hello").unwrap()).0,
        "False",
        "1/2 is not ready"
    );

    set_ready_replicas(2);
    assert_eq!(reconcile(&cluster), Action::done());
    let app = webapps().get("hello").unwrap();
    assert_eq!(ready(&app), ("True".into(), "Available".into()));
    assert_eq!(
        registry(),
        Some(BTreeMap::from([("hello".into(), URL.into())]))
    );
    assert_eq!(cluster.events().last().unwrap().body["reason"], "Available");

    // Converged: another reconcile only re-applies (no-ops), writes no status,
    // no registry entry and no event.
    cluster.clear_calls();
    assert_eq!(reconcile(&cluster), Action::done());
    let verbs: Vec<_> = cluster.calls().iter().map(|c| c.verb).collect();
    assert_eq!(verbs, ["get", "patch", "patch", "get"]);
    assert_eq!(
        webapps().get("hello").unwrap().meta().resource_version,
        app.meta().resource_version
    );
}

#[test]
fn the_registry_keeps_other_entries() {
    let cluster = FakeCluster::new();
    let mut other = ConfigMap::default();
    other.metadata.name = Some(REGISTRY.into());
    other.data = Some(BTreeMap::from([("other".into(), "http://other".into())]));
    Api::<ConfigMap>::namespaced(NS).create(&other).unwrap();
    create_hello();
    reconcile(&cluster);
    set_ready_replicas(2);
    reconcile(&cluster);
    assert_eq!(
        registry(),
        Some(BTreeMap::from([
            ("hello".into(), URL.into()),
            ("other".into(), "http://other".into())
        ]))
    );
}

#[test]
fn the_deployment_follows_the_spec() {
    let cluster = FakeCluster::new();
    create_hello();
    reconcile(&cluster);
    set_ready_replicas(2);
    reconcile(&cluster);

    webapps()
        .patch(
            "hello",
            &Patch::Merge(json!({"spec": {"replicas": 3, "image": "nginx:1.28"}})),
        )
        .unwrap();
    assert_eq!(reconcile(&cluster), Action::requeue_after(POLL));
    let d = deployments().get("hello").unwrap();
    assert_eq!(d.spec.replicas, Some(3));
    let pod = d.spec.template.spec.unwrap();
    assert_eq!(pod.containers[0].image.as_deref(), Some("nginx:1.28"));
    let app = webapps().get("hello").unwrap();
    assert_eq!(app.status.as_ref().unwrap().observed_generation, Some(2));
    assert_eq!(ready(&app), ("False".into(), "Progressing".into()));
    let condition = conditions::get(&app.status.as_ref().unwrap().conditions, "Ready").unwrap();
    assert_eq!(condition.observed_generation, Some(2));
    assert_eq!(
        registry(),
        Some(BTreeMap::new()),
        "unlisted while not ready"
    );
}

#[test]
fn a_deleted_or_edited_deployment_is_put_back() {
    let cluster = FakeCluster::new();
    create_hello();
    reconcile(&cluster);

    deployments()
        .patch("hello", &Patch::Merge(json!({"spec": {"replicas": 7}})))
        .unwrap();
    reconcile(&cluster);
    assert_eq!(deployments().get("hello").unwrap().spec.replicas, Some(2));

    assert!(deployments().delete("hello").unwrap());
    assert!(deployments().get_opt("hello").unwrap().is_none());
    reconcile(&cluster);
    assert_eq!(deployments().get("hello").unwrap().spec.replicas, Some(2));
}

#[test]
fn deleting_the_webapp_unlists_it_then_lets_it_go() {
    let cluster = FakeCluster::new();
    create_hello();
    reconcile(&cluster);
    set_ready_replicas(2);
    reconcile(&cluster);
    assert!(registry().unwrap().contains_key("hello"));

    webapps().delete("hello").unwrap();
    assert!(
        webapps().get("hello").unwrap().is_deleting(),
        "held by the finalizer"
    );
    assert_eq!(reconcile(&cluster), Action::done());

    assert_eq!(registry(), Some(BTreeMap::new()));
    assert!(webapps().get_opt("hello").unwrap().is_none());
    assert!(
        deployments().get_opt("hello").unwrap().is_none(),
        "garbage-collected"
    );
    assert!(
        Api::<Service>::namespaced(NS)
            .get_opt("hello")
            .unwrap()
            .is_none()
    );

    // The key comes once more (the deletion event): nothing to do.
    cluster.clear_calls();
    assert_eq!(reconcile(&cluster), Action::done());
    assert_eq!(cluster.calls().len(), 1);
}

#[test]
fn deletion_before_it_was_ever_ready_ignores_a_missing_registry() {
    let cluster = FakeCluster::new();
    create_hello();
    reconcile(&cluster);
    webapps().delete("hello").unwrap();
    assert_eq!(reconcile(&cluster), Action::done());
    assert!(webapps().get_opt("hello").unwrap().is_none());
    assert_eq!(registry(), None);
}

#[test]
fn a_lost_finalizer_race_is_retried() {
    let cluster = FakeCluster::new();
    create_hello();
    cluster.fail_next("patch", wasmctrl_sdk::ApiError::Conflict("stale".into()));
    let err = cluster.reconcile::<WebAppReconciler>(&key()).unwrap_err();
    assert!(!err.is_permanent(), "{err}");
    assert_eq!(
        reconcile(&cluster),
        Action::requeue_after(Duration::from_secs(5))
    );
}

#[test]
fn the_declared_permissions_are_exactly_the_ones_used() {
    let cluster = FakeCluster::new();
    create_hello();
    cluster.clear_calls();
    // The whole life of a WebApp, with every call checked against the
    // metadata (a call outside it would fail the reconcile).
    reconcile(&cluster);
    set_ready_replicas(2);
    reconcile(&cluster);
    webapps().delete("hello").unwrap();
    reconcile(&cluster);
    // Also: the registry created concurrently by someone else.
    create_hello();
    reconcile(&cluster);
    set_ready_replicas(2);
    Api::<ConfigMap>::namespaced(NS).delete(REGISTRY).unwrap();
    cluster.fail_next(
        "create",
        wasmctrl_sdk::ApiError::AlreadyExists("raced".into()),
    );
    let _ = cluster.reconcile::<WebAppReconciler>(&key());

    assert_eq!(cluster.unused_permissions::<WebAppReconciler>(), []);
    assert!(cluster.permissions_used().len() >= 8);
}

#[test]
fn a_missing_webapp_needs_nothing() {
    let cluster = FakeCluster::new();
    assert_eq!(reconcile(&cluster), Action::done());
    let calls = cluster.calls();
    assert_eq!((calls.len(), calls[0].verb), (1, "get"));
}

/// A reconcile the host recorded (`record:` in the acceptance in a cluster):
/// the Deployment already had 2/2 replicas ready and the registry did not
/// exist. Seeded from it, the reconcile does natively what it did then.
#[test]
fn a_recorded_reconcile_runs_again_against_the_world_it_saw() {
    let (cluster, key) =
        FakeCluster::from_transcript(include_str!("testdata/recorded.jsonl")).unwrap();
    assert_eq!(key, ObjectKey::namespaced(NS, "hello"));
    let action = cluster.reconcile::<WebAppReconciler>(&key).unwrap();
    assert_eq!(action, Action::done(), "as recorded");
    assert_eq!(registry().unwrap()["hello"], URL);
    let app = webapps().get("hello").unwrap();
    assert_eq!(ready(&app), ("True".into(), "Available".into()));
    let events: Vec<_> = cluster
        .events()
        .into_iter()
        .map(|e| e.body["reason"].clone())
        .collect();
    assert_eq!(events, vec![json!("Available")]);
}
