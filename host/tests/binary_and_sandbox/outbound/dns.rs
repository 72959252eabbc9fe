//! A name server that never answers, reached through the host's real
//! resolver (glibc's `getaddrinfo`, with the machine's nsswitch): the
//! `wasmctrl run` process starts in a mount namespace of its own whose
//! `/etc/resolv.conf` names a UDP socket of this test that takes every
//! query and answers none.

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::admin::http_get;
use wasmctrl_testkit::client::client_for;
use wasmctrl_testkit::eventually;

use crate::binary::Run;

const LIMIT: Duration = Duration::from_secs(60);

/// How long the resolver waits for the silent server: long beside the
/// reconcile's one-second deadline, short enough for the test to see the
/// lookup end.
const RESOLVER_TIMEOUT_SECS: u32 = 8;

/// A name server on 127.0.0.77:53 that counts the queries it gets and
/// answers none.
fn silent_name_server() -> Arc<AtomicUsize> {
    let socket = UdpSocket::bind("127.0.0.77:53")
        .expect("binding 127.0.0.77:53 (the suite runs as root, as .ci/run does)");
    let queries = Arc::new(AtomicUsize::new(0));
    let counted = queries.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while socket.recv_from(&mut buf).is_ok() {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    queries
}

/// The values of the `/metrics` lines starting with each of `needles`
/// (0 where there is none), read from one scrape.
async fn scrape<const N: usize>(run: &Run, needles: [&str; N]) -> [f64; N] {
    let (_, body) = http_get(run.admin, "/metrics").await;
    needles.map(|needle| {
        body.lines()
            .filter(|l| l.starts_with(needle))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    })
}

const IN_FLIGHT: &str = "wasmctrl_outbound_lookups_in_flight ";
const FAILED: &str = r#"controller_runtime_reconcile_total{controller="outbound",result="error""#;
const NO_CONNECTION: &str =
    r#"wasmctrl_plugin_http_denied_total{plugin="outbound",reason="connections"}"#;

/// A lookup the name server never answers cannot hold its reconcile past
/// the deadline: the reconcile fails at one second while the lookup goes
/// on in its thread, counted in `wasmctrl_outbound_lookups_in_flight`, and
/// holding the plugin's one connection, so the plugin's next request is
/// refused rather than started beside it. The slot comes back when the
/// resolver gives up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_server_that_never_answers_holds_a_lookup_slot_not_the_reconcile() {
    let queries = silent_name_server();
    let server = wasmctrl_apiserver::ApiServer::start(wasmctrl_apiserver::Config::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let resolv_conf = dir.path().join("resolv.conf");
    std::fs::write(
        &resolv_conf,
        format!("nameserver 127.0.0.77\noptions timeout:{RESOLVER_TIMEOUT_SECS} attempts:1\n"),
    )
    .unwrap();
    let config = dir.path().join("wasmctrl.yaml");
    std::fs::write(
        &config,
        format!(
            r#"apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
plugins:
  - name: outbound
    path: {component}
    namespaces: [default]
    maxConcurrentReconciles: 2
    reconcileTimeout: 1s
    permissions:
      - {{ group: "", resources: [configmaps], verbs: [get, list, watch] }}
    outbound:
      - {{ url: "http://silent.test:8080", private: true }}
    limits: {{ httpConnections: 1 }}
    settings:
      cases:
        first: {{ url: "http://silent.test:8080/first" }}
        second: {{ url: "http://silent.test:8080/second" }}
"#,
            component = artifacts::OUTBOUND,
        ),
    )
    .unwrap();
    let run = Run::start_with_resolv_conf(&config, &kubeconfig, &resolv_conf).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client_for(&kubeconfig).await, "default");
    let create = |name: &str| {
        let cm: ConfigMap =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
        let configmaps = configmaps.clone();
        async move {
            configmaps
                .create(&PostParams::default(), &cm)
                .await
                .unwrap()
        }
    };

    create("first").await;
    eventually(
        "the reconcile failed at its deadline while its lookup goes on",
        LIMIT,
        || async {
            let [in_flight, failed] = scrape(&run, [IN_FLIGHT, FAILED]).await;
            (in_flight == 1.0 && failed >= 1.0).then_some(())
        },
    )
    .await;
    assert!(
        queries.load(Ordering::SeqCst) >= 1,
        "the resolver never asked the name server"
    );

    create("second").await;
    eventually(
        "a request refused for the connection the lookup holds",
        LIMIT,
        || async {
            let [in_flight, refused] = scrape(&run, [IN_FLIGHT, NO_CONNECTION]).await;
            (in_flight == 1.0 && refused >= 1.0).then_some(())
        },
    )
    .await;

    eventually(
        "the slot given back once the resolver gives up",
        LIMIT,
        || async {
            let [in_flight] = scrape(&run, [IN_FLIGHT]).await;
            (in_flight == 0.0).then_some(())
        },
    )
    .await;
}
