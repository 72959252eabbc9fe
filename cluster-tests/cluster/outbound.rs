//! Outbound HTTP with a shadow candidate: the candidate's requests that
//! the stable version made are answered with the stable version's answers,
//! so the outside world is asked once per reconcile, not twice.

use std::time::Duration;

use kube::api::{Api, PostParams};
use wasmctrl_cluster_tests::{Cluster, configmap};
use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::admin::{http_get, metric_value};
use wasmctrl_testkit::dns_provider::DnsProvider;
use wasmctrl_testkit::eventually;

const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_candidate_gets_the_stable_versions_answers_instead_of_asking_again() {
    let cluster = Cluster::start().await;
    let provider = DnsProvider::start("t0ken").await;
    let url = format!("{}/zones/example.com/records/www", provider.endpoint());
    let settings = format!(
        "{{ cases: {{ ok: {{ url: \"{url}\", headers: [[authorization, \"Bearer t0ken\"]], expect: 404 }} }} }}"
    );
    let config = format!(
        r#"apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
plugins:
  - name: outbound
    path: {component}
    namespaces: [default]
    permissions:
      - {{ group: "", resources: [configmaps], verbs: [get, list, watch] }}
    outbound:
      - {{ url: "{endpoint}" }}
    settings: {settings}
    candidate:
      path: {component}
      mode: shadow
      settings: {settings}
"#,
        component = artifacts::OUTBOUND,
        endpoint = provider.endpoint(),
    );
    let host = cluster.host(&config).await;
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(cluster.client.clone(), "default");
    configmaps
        .create(&PostParams::default(), &configmap("ok"))
        .await
        .unwrap();
    let report = eventually("a shadow run", LIMIT, || async {
        let (status, body) = http_get(host.admin, "/plugins/outbound/shadow").await;
        let r: serde_json::Value = serde_json::from_str(&body).ok()?;
        (status == 200 && r["runs"].as_u64()? >= 1).then_some(r)
    })
    .await;
    assert_eq!(report["divergent"].as_u64(), Some(0), "{report}");
    let sent = |version: &'static str| {
        let series = format!(
            "wasmctrl_plugin_http_requests_total{{plugin=\"outbound\",version=\"{version}\""
        );
        async move { metric_value(host.admin, &series).await.unwrap_or(0.0) }
    };
    assert!(
        sent("stable").await >= 1.0,
        "the stable version asked the provider"
    );
    assert_eq!(sent("candidate").await, 0.0, "the candidate asked again");
    // Both counts settle on the same number (the stable version may run
    // the key again meanwhile).
    eventually(
        "only the stable version's requests at the provider",
        LIMIT,
        || async { f64::from(provider.requests()) == sent("stable").await },
    )
    .await;
}
