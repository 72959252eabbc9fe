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
use wasmctrl_apiserver::ApiServer;
use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::admin::http_get;
use wasmctrl_testkit::client::client_for;
use wasmctrl_testkit::eventually;

use crate::binary::Run;

const LIMIT: Duration = Duration::from_secs(60);

/// A name server on `address`:53 that counts the queries it gets and
/// answers none.
fn silent_name_server(address: &str) -> Arc<AtomicUsize> {
    let socket = UdpSocket::bind((address, 53)).unwrap_or_else(|e| {
        panic!("binding {address}:53 (the suite runs as root, as .ci/run does): {e}")
    });
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

/// `wasmctrl run` whose resolver asks only a silent name server.
struct SilentDns {
    run: Run,
    /// The queries the name server got.
    queries: Arc<AtomicUsize>,
    configmaps: Api<ConfigMap>,
    _server: ApiServer,
    _dir: tempfile::TempDir,
}

impl SilentDns {
    /// The outbound test plugin, its reconciles one second long and its
    /// connections one, sending keys `first` and `second` to
    /// `silent.test`, which a name server on `address` never answers; the
    /// resolver waits for it as resolv.conf's `options` say.
    async fn start(address: &str, options: &str) -> Self {
        let queries = silent_name_server(address);
        let (server, dir, kubeconfig) = crate::binary::api_server().await;
        let resolv_conf = dir.path().join("resolv.conf");
        std::fs::write(
            &resolv_conf,
            format!("nameserver {address}\noptions {options}\n"),
        )
        .unwrap();
        let config = dir.path().join("wasmctrl.yaml");
        std::fs::write(
            &config,
            format!(
                r#"apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
admin: {{ bind: "127.0.0.1:0" }}
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
        let configmaps = Api::namespaced(client_for(&kubeconfig).await, "default");
        SilentDns {
            run,
            queries,
            configmaps,
            _server: server,
            _dir: dir,
        }
    }

    async fn create(&self, name: &str) {
        let cm: ConfigMap =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
        self.configmaps
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
    }

    /// Creates `first` and waits until its reconcile failed at the
    /// deadline while its lookup still runs.
    async fn abandon_a_lookup(&self) {
        self.create("first").await;
        eventually(
            "the reconcile failed at its deadline while its lookup goes on",
            LIMIT,
            || async {
                let [in_flight, failed] = scrape(&self.run, [IN_FLIGHT, FAILED]).await;
                (in_flight == 1.0 && failed >= 1.0).then_some(())
            },
        )
        .await;
        assert!(
            self.queries.load(Ordering::SeqCst) >= 1,
            "the resolver never asked the name server"
        );
    }
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
    // Eight seconds: long beside the deadline, short enough to see it end.
    let dns = SilentDns::start("127.0.0.77", "timeout:8 attempts:1").await;
    dns.abandon_a_lookup().await;
    dns.create("second").await;
    eventually(
        "a request refused for the connection the lookup holds",
        LIMIT,
        || async {
            let [in_flight, refused] = scrape(&dns.run, [IN_FLIGHT, NO_CONNECTION]).await;
            (in_flight == 1.0 && refused >= 1.0).then_some(())
        },
    )
    .await;
    eventually(
        "the slot given back once the resolver gives up",
        LIMIT,
        || async {
            let [in_flight] = scrape(&dns.run, [IN_FLIGHT]).await;
            (in_flight == 0.0).then_some(())
        },
    )
    .await;
}

/// A lookup that cannot be cancelled does not hold the process either: on
/// SIGTERM the host drains and exits while the resolver still waits for
/// the name server (glibc's longest: five tries of 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_does_not_wait_for_a_lookup_the_resolver_still_holds() {
    let mut dns = SilentDns::start("127.0.0.78", "timeout:30 attempts:5").await;
    dns.abandon_a_lookup().await;
    dns.run.process.signal("TERM");
    let status = dns.run.process.exited(LIMIT).await;
    assert!(status.success(), "{status:?}");
}
