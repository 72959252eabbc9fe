//! The manager with the misbehave test plugin: permissions, metrics, admin
//! endpoints and graceful shutdown.

use std::time::Duration;

use wasmctrl_plugin_artifacts as artifacts;

use wasmctrl_cluster_tests::Cluster;
use wasmctrl_testkit::{
    admin::{http_get, metric_line},
    eventually,
    host::RunningHost,
};

const LIMIT: Duration = Duration::from_secs(30);

fn config(permissions: &str, extra: &str) -> String {
    format!(
        r#"
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
shutdownTimeout: 10s
plugins:
  - name: misbehave
    path: {path}
    maxConcurrentReconciles: 2
    reconcileTimeout: 5s
    namespaces: [default]
    permissions: {permissions}
{extra}"#,
        path = artifacts::MISBEHAVE
    )
}

async fn start(cluster: &Cluster, text: &str) -> RunningHost {
    cluster.host(text).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_outside_the_grant_is_forbidden_and_counted() {
    let cluster = Cluster::start().await;
    let running = start(
        &cluster,
        &config("[{ resources: [configmaps], verbs: [list, watch] }]", ""),
    )
    .await;
    // The `kube` key makes the plugin get its own ConfigMap.
    cluster.kubectl(&["create", "configmap", "kube", "-n", "default"]);
    let line = eventually("a forbidden call in the metrics", Duration::from_secs(30), || {
        metric_line(
            running.admin,
            r#"wasmctrl_hostapi_calls_total{plugin="misbehave",verb="get",resource="configmaps",code="forbidden"}"#,
        )
    })
    .await;
    assert!(line.ends_with(" 1"), "{line}");
    // Forbidden is permanent for the SDK: a terminal error, not retried.
    eventually("the terminal error", Duration::from_secs(30), || {
        metric_line(
            running.admin,
            r#"controller_runtime_terminal_reconcile_errors_total{controller="misbehave",version="stable"} 1"#,
        )
    })
    .await;
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_call_reaches_the_api_server() {
    let cluster = Cluster::start().await;
    let grant = "[{ group: \"\", resources: [configmaps], verbs: [get, list, watch] }]";
    let running = start(&cluster, &config(grant, "")).await;
    cluster.kubectl(&["create", "configmap", "kube", "-n", "default"]);
    eventually("a successful call in the metrics", Duration::from_secs(30), || {
        metric_line(
            running.admin,
            r#"wasmctrl_hostapi_calls_total{plugin="misbehave",verb="get",resource="configmaps",code="ok"}"#,
        )
    })
    .await;
    eventually("a successful reconcile", Duration::from_secs(30), || {
        metric_line(
            running.admin,
            r#"controller_runtime_reconcile_total{controller="misbehave",result="success",version="stable"}"#,
        )
    })
    .await;
    let (status, plugins) = http_get(running.admin, "/plugins").await;
    assert_eq!(status, 200);
    let plugins: serde_json::Value = serde_json::from_str(&plugins).unwrap();
    assert_eq!(plugins[0]["name"], "misbehave");
    assert_eq!(plugins[0]["state"], "running");
    assert!(
        plugins[0]["digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_a_slow_reconcile_and_leaves_nothing_in_processing() {
    let cluster = Cluster::start().await;
    let running = start(
        &cluster,
        &config("[{ resources: [configmaps], verbs: [list, watch] }]", ""),
    )
    .await;
    cluster.kubectl(&["create", "configmap", "slow-1500", "-n", "default"]);
    eventually(
        "the slow reconcile to start",
        Duration::from_secs(30),
        || async { (running.queue("misbehave").processing_len() == 1).then_some(()) },
    )
    .await;
    let (queue, metrics) = (running.queue("misbehave"), running.metrics.clone());
    running.stop().await.unwrap();
    assert_eq!(queue.processing_len(), 0);
    // It finished its work instead of being cancelled.
    let text = metrics.encode();
    assert!(
        text.contains(
            r#"controller_runtime_reconcile_total{controller="misbehave",result="success",version="stable"} 1"#
        ),
        "{text}"
    );
    assert!(!text.contains(r#"result="error""#), "{text}");
}

/// Leadership lost in the middle of a hot swap's handover: the new version
/// serves while the old one finishes a long reconcile, another holder
/// takes the Lease, and the host ends at once as a lost leader. The old
/// version's reconcile is cancelled with the rest, rather than left to run
/// out its time on a host that no longer leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_lost_during_a_swap_s_handover_cancels_the_old_version_s_reconcile() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{Api, Patch, PatchParams};
    use wasmctrl::ops::manager::ManagerError;
    use wasmctrl_testkit::admin::http;

    let cluster = Cluster::start().await;
    let text = config(
        "[{ resources: [configmaps], verbs: [list, watch] }]",
        "leaderElection: { enabled: true, leaseName: handover, leaseDuration: 2s, renewDeadline: 1500ms, retryPeriod: 200ms }",
    )
    .replace("shutdownTimeout: 10s", "shutdownTimeout: 300s")
    .replace("reconcileTimeout: 5s", "reconcileTimeout: 300s");
    let running = start(&cluster, &text).await;
    cluster.kubectl(&["create", "configmap", "slow-240000", "-n", "default"]);
    let queue = running.queue("misbehave");
    eventually("the slow reconcile to start", LIMIT, || async {
        (queue.processing_len() == 1).then_some(())
    })
    .await;
    let (code, body) = http(running.admin, "POST", "/plugins/misbehave/reload", &[]).await;
    assert_eq!(code, 200, "{body}");
    eventually("the second version serves", LIMIT, || async {
        running
            .plugin("misbehave")
            .await
            .is_some_and(|p| p["generation"] == 2)
            .then_some(())
    })
    .await;
    assert_eq!(
        queue.processing_len(),
        1,
        "the first version still runs the slow key"
    );

    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "default");
    let taken =
        serde_json::json!({"spec": {"holderIdentity": "thief", "leaseDurationSeconds": 3600}});
    leases
        .patch("handover", &PatchParams::default(), &Patch::Merge(&taken))
        .await
        .unwrap();
    let metrics = running.metrics.clone();
    let ended = tokio::time::timeout(LIMIT, running.ended())
        .await
        .expect("a lost leader ends");
    assert!(
        matches!(ended, Err(ManagerError::LeadershipLost)),
        "{ended:?}"
    );
    eventually("the first version's reconcile cancelled", LIMIT, || async {
        metrics
            .encode()
            .lines()
            .any(|l| {
                l.starts_with("controller_runtime_reconcile_total{")
                    && l.contains(r#"controller="misbehave""#)
                    && l.contains(r#"result="error""#)
            })
            .then_some(())
    })
    .await;
    let text = metrics.encode();
    let reconciles: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("controller_runtime_reconcile_total{"))
        .collect();
    assert_eq!(
        reconciles,
        [
            r#"controller_runtime_reconcile_total{controller="misbehave",result="error",version="stable"} 1"#
        ],
        "the slow reconcile ran to its end"
    );
    assert_eq!(queue.processing_len(), 0);
}
