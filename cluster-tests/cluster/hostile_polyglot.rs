//! The hostile plugin's floods, huge error and deep JSON from interpreted
//! guests (`hostile-py`, `hostile-ts`) against the real host and API
//! server: each is held at the same ceilings as the Rust guest's, the host
//! stays healthy, and honest keys keep being reconciled.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use wasmctrl_cluster_tests::Cluster;
use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::{
    admin::{self, metric_line, metric_reaches, metric_value},
    eventually,
};

use crate::hostile::{create, reconciled_within};

/// The interpreters start slower and hold more memory than a Rust guest:
/// room for both, so that only the attacks run into a ceiling.
fn config(plugin: &str, component: &str) -> String {
    format!(
        r#"
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
shutdownTimeout: 5s
plugins:
  - name: {plugin}
    path: {component}
    maxConcurrentReconciles: 4
    reconcileTimeout: 60s
    memoryLimit: 256Mi
    maxRetries: 0
    permissions:
      - {{ group: "", resources: [configmaps], verbs: [get, list, watch, patch, create] }}
"#
    )
}

async fn reconciled(api: &Api<ConfigMap>, name: &str) {
    reconciled_within(api, name, Duration::from_secs(120)).await;
}

/// What the output flood writes at least: 64 MiB, then the lines
/// `line 0` … `line 99999`.
fn flood_bytes() -> f64 {
    let lines: usize = (0..100_000).map(|i| format!("line {i}\n").len()).sum();
    ((64 << 20) + lines) as f64
}

/// Waits until the guest's deep create and both deep patches came back
/// `invalid` (only `deep-json` makes calls that can).
async fn deep_json_refused(plugin: &str, admin: std::net::SocketAddr) {
    // Refused before the kind is resolved: under the `nesting` limit, and
    // as invalid calls of no resource.
    let nesting = format!(
        r#"wasmctrl_plugin_limit_exceeded_total{{plugin="{plugin}",limit="nesting",version="stable"}}"#
    );
    let refused = |verb: &str| {
        format!(
            r#"wasmctrl_hostapi_calls_total{{plugin="{plugin}",verb="{verb}",resource="<unresolved>",code="invalid"}}"#
        )
    };
    eventually(
        "the deep create and patches refused",
        Duration::from_secs(120),
        || async {
            let counted = metric_value(admin, &nesting).await?;
            let creates = metric_value(admin, &refused("create")).await?;
            let patches = metric_value(admin, &refused("patch")).await?;
            (counted >= 3.0 && creates >= 1.0 && patches >= 2.0).then_some(())
        },
    )
    .await;
}

/// The four attacks and ten honest keys at once, then one honest key after.
async fn contained(plugin: &str, component: &str) {
    let cluster = Cluster::start().await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    let host = cluster.host(&config(plugin, component)).await;
    for name in ["output-flood", "huge-error", "deep-json", "host-call-flood"] {
        create(&api, name).await;
    }
    for i in 0..10 {
        create(&api, &format!("honest-{i}")).await;
    }
    for i in 0..10 {
        reconciled(&api, &format!("honest-{i}")).await;
    }
    let counted = |limit: &str| {
        format!(
            r#"wasmctrl_plugin_limit_exceeded_total{{plugin="{plugin}",limit="{limit}",version="stable"}}"#
        )
    };

    // The host-call flood is stopped at its ceiling, as a limit trap.
    let host_calls = counted("hostCalls");
    eventually(
        "the host-call flood stopped at its ceiling",
        Duration::from_secs(120),
        || metric_line(host.admin, &host_calls),
    )
    .await;
    let trap = format!(
        r#"wasmctrl_plugin_traps_total{{plugin="{plugin}",reason="limit",version="stable",kind="reconcile"}}"#
    );
    eventually("the limit trap counted", Duration::from_secs(60), || {
        metric_line(host.admin, &trap)
    })
    .await;

    // The huge error is cut and the cut counted; it and the output flood
    // are counted as output in full.
    let error_cut = counted("errorMessage");
    eventually("the huge error cut", Duration::from_secs(120), || {
        metric_line(host.admin, &error_cut)
    })
    .await;
    let output = format!(
        r#"wasmctrl_plugin_output_bytes_total{{plugin="{plugin}",version="stable",kind="reconcile"}}"#
    );
    let written = flood_bytes() + (8 << 20) as f64;
    metric_reaches(
        "the output measured",
        Duration::from_secs(120),
        host.admin,
        &output,
        written,
    )
    .await;

    // Where the refusal is made is the next test's subject.
    deep_json_refused(plugin, host.admin).await;

    // The host is healthy and the plugin keeps serving.
    assert_eq!(admin::http_get(host.admin, "/healthz").await.0, 200);
    create(&api, "honest-after").await;
    reconciled(&api, "honest-after").await;
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_guest_s_floods_huge_error_and_deep_json_are_contained() {
    contained("hostile-py", artifacts::HOSTILE_PY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typescript_guest_s_floods_huge_error_and_deep_json_are_contained() {
    contained("hostile-ts", artifacts::HOSTILE_TS).await;
}

/// Deep JSON is refused in the host, so that the API server never spends a
/// parse on it: the host measures a body's nesting in one pass before
/// anything else reads it, and counts the refusal as limit `nesting`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_json_from_an_interpreted_guest_never_reaches_the_api_server() {
    for (plugin, component) in [
        ("hostile-py", artifacts::HOSTILE_PY),
        ("hostile-ts", artifacts::HOSTILE_TS),
    ] {
        let cluster = Cluster::start().await;
        let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
        // Created before the host starts, so that every write the audit
        // shows after it for this name is the guest's.
        create(&api, "deep-json").await;
        let writes_before = cluster.server().audit().records().len();
        let host = cluster.host(&config(plugin, component)).await;
        deep_json_refused(plugin, host.admin).await;
        let sent: Vec<String> = cluster.server().audit().records()[writes_before..]
            .iter()
            .filter(|w| {
                w.resource == "configmaps"
                    && w.name.as_deref().is_none_or(|n| n.starts_with("deep-json"))
            })
            .map(|w| format!("{} {:?} {}", w.verb, w.name, w.code))
            .collect();
        assert!(
            sent.is_empty(),
            "{plugin}: deep JSON reached the API server: {sent:?}"
        );
        host.stop().await.unwrap();
    }
}
