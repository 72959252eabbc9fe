//! Outbound HTTP across a plugin's versions: a shadow candidate's requests
//! that the stable version made are answered with the stable version's
//! answers, so the outside world is asked once per reconcile, not twice;
//! and the versions a swap leaves running side by side share one
//! connection ceiling.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{Api, PostParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wasmctrl_cluster_tests::{Cluster, configmap};
use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::admin::{http, http_get, metric_reaches, metric_value};
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

/// A loopback server that counts requests by path: `/trickle` answers
/// a megabyte one byte every 100 ms (holding its connection as long as
/// the client reads), anything else `200 ok`.
async fn trickle_server() -> (SocketAddr, Arc<Mutex<HashMap<String, u32>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let seen = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                let path = text.split_whitespace().nth(1).unwrap_or("").to_string();
                *seen.lock().unwrap().entry(path.clone()).or_default() += 1;
                if path != "/trickle" {
                    let ok = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";
                    let _ = conn.write_all(ok.as_bytes()).await;
                    return;
                }
                let head = "HTTP/1.1 200 OK\r\ncontent-length: 1048576\r\n\r\n";
                if conn.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let mut tick = tokio::time::interval(Duration::from_millis(100));
                loop {
                    tick.tick().await;
                    if conn.write_all(b".").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, hits)
}

/// A hot swap leaves the old version finishing its reconcile beside the
/// new one: the connection the old one holds counts against the new one's
/// `limits.httpConnections`, so a plugin never holds its ceiling once per
/// version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_side_by_side_share_the_plugin_s_connection_ceiling() {
    let cluster = Cluster::start().await;
    let (server, hits) = trickle_server().await;
    let config = format!(
        r#"apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
plugins:
  - name: outbound
    path: {component}
    namespaces: [default]
    maxConcurrentReconciles: 2
    reconcileTimeout: 60s
    permissions:
      - {{ group: "", resources: [configmaps], verbs: [get, list, watch] }}
    outbound:
      - {{ url: "http://{server}" }}
    limits: {{ httpConnections: 1 }}
    settings:
      cases:
        trickle: {{ url: "http://{server}/trickle" }}
        ok: {{ url: "http://{server}/ok" }}
"#,
        component = artifacts::OUTBOUND,
    );
    let host = cluster.host(&config).await;
    let hit = |path: &str| hits.lock().unwrap().get(path).copied().unwrap_or(0);
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(cluster.client.clone(), "default");
    configmaps
        .create(&PostParams::default(), &configmap("trickle"))
        .await
        .unwrap();
    eventually(
        "the first version holds its one connection",
        LIMIT,
        || async { hit("/trickle") == 1 },
    )
    .await;
    let (code, body) = http(host.admin, "POST", "/plugins/outbound/reload", &[]).await;
    assert_eq!(code, 200, "{body}");
    eventually("the second version runs", LIMIT, || async {
        host.plugin("outbound")
            .await
            .is_some_and(|p| p["generation"] == 2)
    })
    .await;
    configmaps
        .create(&PostParams::default(), &configmap("ok"))
        .await
        .unwrap();
    let denied = "wasmctrl_plugin_http_denied_total{plugin=\"outbound\",reason=\"connections\"}";
    metric_reaches(
        "the second version's request refused at the shared ceiling",
        LIMIT,
        host.admin,
        denied,
        1.0,
    )
    .await;
    assert_eq!(hit("/ok"), 0, "a request past the ceiling was sent");
    assert_eq!(hit("/trickle"), 1);
}
