//! Faults the host must survive: every watch fault, API server errors,
//! slowness and restarts. After each, every object whose state changed
//! during the fault is reconciled with its final state (the `mirror` plugin
//! copies `data.value` into a label, reading from the cache), and no key is
//! left in `processing`.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use wasmctrl_apiserver::testing::Scope;
use wasmctrl_cluster_tests::{
    Cluster, QUICKSTART, mirror_converged, quickstart_config, value_and_mirror,
};
use wasmctrl_testkit::{admin, eventually, host::RunningHost};

use wasmctrl_plugin_artifacts as artifacts;

const OBJECTS: usize = 20;
const CONVERGE: Duration = Duration::from_secs(90);

fn config() -> String {
    format!(
        r#"
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
shutdownTimeout: 5s
cacheSyncTimeout: 5s
plugins:
  - name: mirror
    path: {}
    maxConcurrentReconciles: 2
    reconcileTimeout: 5s
    rateLimiter: {{ baseDelay: 5ms, maxDelay: 1s }}
    namespaces: [default]
    permissions:
      - {{ group: "", resources: [configmaps], verbs: [get, list, watch, patch] }}
"#,
        artifacts::MIRROR
    )
}

fn api(cluster: &Cluster) -> Api<ConfigMap> {
    Api::namespaced(cluster.client.clone(), "default")
}

async fn create_objects(api: &Api<ConfigMap>, value: &str) {
    for i in 0..OBJECTS {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("cm-{i}")},
            "data": {"value": value},
        }))
        .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
}

/// Sets every object's `data.value`, retrying a write the fault refused.
/// Sets every object's `data.value`, the writes side by side: under a
/// server that answers each request a second late, one after another
/// they would take a second each.
async fn set_all(api: &Api<ConfigMap>, value: &str) {
    futures::future::join_all((0..OBJECTS).map(|i| async move {
        let patch = serde_json::json!({"data": {"value": value}});
        eventually("a write the fault let through", CONVERGE, || async {
            api.patch(
                &format!("cm-{i}"),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .ok()
        })
        .await;
    }))
    .await;
}

/// Every object mirrors its final value, and the host holds no key.
async fn converged(host: &RunningHost, api: &Api<ConfigMap>, what: &str) {
    mirror_converged(host, api, what, CONVERGE, |items| {
        items.len() >= OBJECTS
            && items.iter().all(|c| {
                let (value, mirror) = value_and_mirror(c);
                value == mirror
            })
    })
    .await;
}

/// A cluster with the mirror plugin and its objects, converged on "0".
async fn setup() -> (Cluster, RunningHost, Api<ConfigMap>) {
    let cluster = Cluster::start().await;
    let api = api(&cluster);
    create_objects(&api, "0").await;
    let host = cluster.host(&config()).await;
    converged(&host, &api, "the initial values mirrored").await;
    (cluster, host, api)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_dropped_mid_stream_miss_nothing() {
    let (cluster, host, api) = setup().await;
    let faults = cluster.server().faults();
    for round in 1..=3 {
        faults.drop_watches();
        set_all(&api, &format!("drop-{round}")).await;
        faults.drop_watches();
    }
    converged(&host, &api, "every change after dropped watches").await;
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_410_gone_relists_and_misses_nothing() {
    let (cluster, host, api) = setup().await;
    let faults = cluster.server().faults();
    faults.expire_watches_for(Scope::All, Duration::from_secs(2));
    faults.drop_watches();
    set_all(&api, "expired").await;
    converged(&host, &api, "every change across 410 Gone").await;
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundreds_for_seconds_are_retried_until_they_end() {
    let (cluster, host, api) = setup().await;
    set_all(&api, "during-500s").await;
    let faults = cluster.server().faults();
    faults.fail_requests(Scope::resource("", "configmaps"), Duration::from_secs(3));
    faults.drop_watches();
    converged(&host, &api, "every change after 3 s of 500s").await;
    set_all(&api, "after-500s").await;
    converged(&host, &api, "changes after the 500s").await;
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_server_is_waited_for() {
    let (cluster, host, api) = setup().await;
    let faults = cluster.server().faults();
    faults.delay_responses(Some(Duration::from_secs(1)));
    faults.drop_watches();
    set_all(&api, "slow").await;
    // The host's own writes go through the slow server too before it is
    // fast again.
    eventually(
        "a mirror written through the slow server",
        CONVERGE,
        || async {
            let list = api.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .any(|cm| value_and_mirror(cm).1.is_some_and(|m| m == "slow"))
                .then_some(())
        },
    )
    .await;
    faults.delay_responses(None);
    converged(&host, &api, "every change through a slow server").await;
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_that_delivers_only_bookmarks_catches_up() {
    let (cluster, host, api) = setup().await;
    let faults = cluster.server().faults();
    faults.withhold_watch_events(true);
    set_all(&api, "withheld").await;
    faults.withhold_watch_events(false);
    faults.drop_watches();
    converged(&host, &api, "every withheld change").await;
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_restart_with_its_state_is_followed() {
    let data = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start_with(wasmctrl_apiserver::Config {
        data_dir: Some(data.path().to_path_buf()),
        ..wasmctrl_apiserver::Config::default()
    })
    .await;
    let api = api(&cluster);
    create_objects(&api, "0").await;
    let host = cluster.host(&config()).await;
    converged(&host, &api, "the initial values mirrored").await;
    cluster.restart().await;
    set_all(&api, "after-restart").await;
    converged(&host, &api, "changes after the restart").await;
    let state = host.plugin("mirror").await.unwrap()["state"].clone();
    assert_eq!(state, "running");
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_that_lost_its_state_is_relisted() {
    let (mut cluster, host, _) = setup().await;
    cluster.restart().await;
    // Everything is gone; the host relists (410 on resume) and serves what
    // is created now.
    let api = api(&cluster);
    create_objects(&api, "reborn").await;
    converged(&host, &api, "objects created after the state was lost").await;
    let state = host.plugin("mirror").await.unwrap()["state"].clone();
    assert_eq!(state, "running");
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_on_every_first_status_write_is_retried_and_converges() {
    let cluster = Cluster::start().await;
    cluster.server().faults().conflict_first_status_writes(true);
    cluster.apply_webapp_crd();
    let config = quickstart_config(artifacts::WEBAPP);
    let host = RunningHost::start(config, cluster.client.clone(), None).await;
    cluster.kubectl(&["apply", "-f", &format!("{QUICKSTART}/webapp.yaml")]);
    let conditions = eventually(
        "the status written despite the conflict",
        CONVERGE,
        || async {
            let out = cluster.kubectl_raw(&[
                "get",
                "webapp",
                "hello",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ]);
            let status = String::from_utf8_lossy(&out.stdout).into_owned();
            (!status.is_empty()).then_some(status)
        },
    )
    .await;
    assert_eq!(
        conditions, "False",
        "nothing runs pods here, so Ready=False"
    );
    // The conflict was answered at least once and retried through the queue.
    let retries = admin::metric_value(host.admin, r#"workqueue_retries_total{name="webapp"}"#)
        .await
        .unwrap_or(0.0);
    assert!(retries >= 1.0, "no retry after the conflict");
    host.stop().await.unwrap();
}
