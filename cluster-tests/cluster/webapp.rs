//! The example operator in a cluster, as the quick start runs it: kubectl
//! applies the CRD and a WebApp; the webapp component reconciles it through
//! the host against the embedded API server.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use wasmctrl::ops::manager::{Manager, ManagerOptions};
use wasmctrl_cluster_tests::{Cluster, QUICKSTART, quickstart_config};
use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::{admin::http_get, eventually, host::RunningHost};

fn webapps(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "demo.wasmctrl.dev".into(),
        version: "v1alpha1".into(),
        api_version: "demo.wasmctrl.dev/v1alpha1".into(),
        kind: "WebApp".into(),
        plural: "webapps".into(),
    };
    Api::namespaced_with(client.clone(), "default", &ar)
}

fn ready_condition(webapp: &DynamicObject) -> Option<String> {
    webapp.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["status"].as_str())
        .map(str::to_string)
}

/// The same acceptance for every language: the operator built in Rust,
/// Python and TypeScript must be indistinguishable from outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_webapp_operator_converges_heals_and_cleans_up() {
    webapp_acceptance(artifacts::WEBAPP).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_webapp_operator_converges_heals_and_cleans_up() {
    webapp_acceptance(artifacts::WEBAPP_PY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_webapp_operator_converges_heals_and_cleans_up() {
    webapp_acceptance(artifacts::WEBAPP_TS).await;
}

async fn webapp_acceptance(component: &str) {
    let cluster = Cluster::start().await;
    cluster.apply_webapp_crd();
    let host = RunningHost::start(quickstart_config(component), cluster.client.clone(), None).await;
    converges_heals_and_cleans_up(&cluster, host).await;
}

/// The acceptance proper, against a `host` running the quick start's
/// plugin (with whatever credentials it was given), observed and driven as
/// the cluster's admin: a WebApp converges, heals and is cleaned up.
pub(crate) async fn converges_heals_and_cleans_up(cluster: &Cluster, host: RunningHost) {
    let admin = host.admin;

    cluster.kubectl(&["apply", "-f", &format!("{QUICKSTART}/webapp.yaml")]);
    let client = cluster.client.clone();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let webapps = webapps(&client);
    const LIMIT: Duration = Duration::from_secs(60);

    // Deployment + Service owned by the WebApp, replicas 2, Ready=False.
    let deployment = eventually("the Deployment", LIMIT, || async {
        deployments.get("hello").await.ok()
    })
    .await;
    let owner = &deployment.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("WebApp", "hello", Some(true))
    );
    let spec = &deployment.spec;
    assert_eq!(spec.replicas, Some(2));
    let image = spec.template.spec.as_ref().unwrap().containers[0]
        .image
        .clone();
    assert_eq!(image.as_deref(), Some("nginx:1.27"));
    let service = eventually("the Service", LIMIT, || async {
        services.get("hello").await.ok()
    })
    .await;
    assert_eq!(service.metadata.owner_references.unwrap()[0].name, "hello");
    eventually("Ready=False", LIMIT, || async {
        let w = webapps.get("hello").await.ok()?;
        (ready_condition(&w)? == "False").then_some(())
    })
    .await;

    // The Deployment becomes ready → Ready=True and the registry entry.
    let status =
        serde_json::json!({"status": {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2}});
    deployments
        .patch_status("hello", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    eventually("Ready=True", LIMIT, || async {
        let w = webapps.get("hello").await.ok()?;
        (ready_condition(&w)? == "True").then_some(())
    })
    .await;
    let registry = eventually("the registry entry", LIMIT, || async {
        configmaps
            .get("webapp-registry")
            .await
            .ok()?
            .data?
            .get("hello")
            .cloned()
    })
    .await;
    assert!(registry.contains("hello.default.svc"), "{registry}");

    // Editing spec.replicas → the Deployment follows.
    cluster.kubectl(&[
        "patch",
        "webapp",
        "hello",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"replicas":3}}"#,
    ]);
    eventually("replicas 3", LIMIT, || async {
        let d = deployments.get("hello").await.ok()?;
        (d.spec.replicas == Some(3)).then_some(())
    })
    .await;

    // Deleting the Deployment → it is put back.
    let uid = deployments.get("hello").await.unwrap().metadata.uid;
    cluster.kubectl(&["delete", "deployment", "hello", "--wait=false"]);
    eventually("the Deployment recreated", LIMIT, || async {
        let d = deployments.get("hello").await.ok()?;
        (d.metadata.uid != uid && d.metadata.deletion_timestamp.is_none()).then_some(())
    })
    .await;

    // Deleting the WebApp → entry removed, WebApp gone, Deployment collected.
    cluster.kubectl(&["delete", "webapp", "hello", "--wait=false"]);
    eventually("the WebApp gone", LIMIT, || async {
        webapps.get_opt("hello").await.ok()?.is_none().then_some(())
    })
    .await;
    let entries = configmaps
        .get("webapp-registry")
        .await
        .unwrap()
        .data
        .unwrap_or_default();
    assert!(!entries.contains_key("hello"), "{entries:?}");
    eventually("the Deployment garbage-collected", LIMIT, || async {
        deployments
            .get_opt("hello")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;

    // Metrics and plugin status after the run.
    let (_, metrics) = http_get(admin, "/metrics").await;
    for name in [
        "workqueue_depth",
        "workqueue_adds_total",
        "workqueue_queue_duration_seconds",
        "workqueue_work_duration_seconds",
        "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds",
        "controller_runtime_reconcile_total",
        "controller_runtime_reconcile_time_seconds",
        "controller_runtime_max_concurrent_reconciles",
        "controller_runtime_active_workers",
        "wasmctrl_plugin_reloads_total",
        "wasmctrl_hostapi_calls_total",
        "wasmctrl_plugin_instantiate_seconds",
    ] {
        assert!(metrics.contains(name), "{name} missing from /metrics");
    }
    for nonzero in [
        r#"workqueue_adds_total{name="webapp"}"#,
        r#"controller_runtime_reconcile_total{controller="webapp",result="#,
        r#"wasmctrl_hostapi_calls_total{plugin="webapp",verb="patch""#,
    ] {
        let line = metrics
            .lines()
            .find(|l| l.starts_with(nonzero))
            .unwrap_or_else(|| panic!("{nonzero} in {metrics}"));
        assert!(!line.ends_with(" 0"), "{line}");
    }
    let (_, plugins) = http_get(admin, "/plugins").await;
    let plugins: serde_json::Value = serde_json::from_str(&plugins).unwrap();
    assert_eq!(plugins[0]["name"], "webapp");
    assert!(
        plugins[0]["digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );

    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_asking_for_more_than_its_grant_does_not_load() {
    let cluster = Cluster::start().await;
    cluster.kubectl(&["apply", "-f", &format!("{QUICKSTART}/crd.yaml")]);
    let mut config = quickstart_config(artifacts::WEBAPP);
    // Take away one permission the plugin's metadata asks for.
    config.plugins[0].permissions.retain(|r| r.group != "apps");
    let manager = Manager::start(
        config,
        cluster.client.clone(),
        ManagerOptions {
            admin_bind: Some("127.0.0.1:0".parse().unwrap()),
            ..ManagerOptions::default()
        },
    )
    .await
    .expect("the host itself starts");
    let failures = manager.loaded().await;
    let message = failures
        .first()
        .expect("the plugin is refused")
        .error
        .clone();
    assert!(
        message.contains("webapp") && message.contains("does not grant"),
        "{message}"
    );
    assert!(message.contains("apps/deployments"), "{message}");
}
