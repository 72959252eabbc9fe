//! The DNS example end to end (`examples/dns`, `plugins/dns`): an operator
//! of records at an HTTP DNS provider outside the cluster, driven with
//! kubectl. Its token lives in a Kubernetes Secret the host reads; the
//! plugin only ever writes `${secret:dns-token}`.

use std::time::Duration;

use wasmctrl_cluster_tests::Cluster;
use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::dns_provider::DnsProvider;
use wasmctrl_testkit::eventually;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/dns");
const LIMIT: Duration = Duration::from_secs(60);
const ZONE: &str = "example.com";

/// The example's config, pointed at `component` and at
/// `provider`, resynced every second (so drift is repaired within the
/// test's patience rather than the plugin's five minutes).
fn config(provider: &DnsProvider, component: &str) -> String {
    std::fs::read_to_string(format!("{EXAMPLE}/config.yaml"))
        .unwrap()
        .replace("../../target/wasm32-wasip2/release/dns.wasm", component)
        .replace("127.0.0.1:8053", &format!("127.0.0.1:{}", provider.port()))
        .replace("127.0.0.1:9090", "127.0.0.1:0")
        .replace(
            "    reconcileTimeout: 10s\n",
            "    reconcileTimeout: 10s\n    resyncPeriod: 1s\n",
        )
}

fn record(value: &str) -> serde_json::Value {
    serde_json::json!({"type": "A", "value": value, "ttl": 300})
}

/// `generation observedGeneration Ready.status Ready.reason` of `www`.
fn ready(cluster: &Cluster) -> String {
    let query = "jsonpath={.metadata.generation} {.status.observedGeneration} {.status.conditions[?(@.type==\"Ready\")].status} {.status.conditions[?(@.type==\"Ready\")].reason}";
    let out = cluster.kubectl_raw(&["get", "dnsrecord", "www", "-o", query]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Sets `www`'s `spec.value` with kubectl.
fn set_value(cluster: &Cluster, value: &str) {
    let patch = format!(r#"{{"spec":{{"value":"{value}"}}}}"#);
    cluster.kubectl(&["patch", "dnsrecord", "www", "--type=merge", "-p", &patch]);
}

async fn remote_is(provider: &DnsProvider, value: &str, what: &str) {
    eventually(what, LIMIT, || {
        let held = provider.record(ZONE, "www") == Some(record(value));
        async move { held }
    })
    .await;
}

/// The same acceptance for every language: the operator in Rust, Python
/// and TypeScript must be indistinguishable from outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_dns_operator_syncs_repairs_rotates_backs_off_and_cleans_up() {
    dns_acceptance(artifacts::DNS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_dns_operator_syncs_repairs_rotates_backs_off_and_cleans_up() {
    dns_acceptance(artifacts::DNS_PY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_dns_operator_syncs_repairs_rotates_backs_off_and_cleans_up() {
    dns_acceptance(artifacts::DNS_TS).await;
}

async fn dns_acceptance(component: &str) {
    let cluster = Cluster::start().await;
    cluster.kubectl(&["apply", "-f", &format!("{EXAMPLE}/crd.yaml")]);
    cluster.kubectl(&[
        "wait",
        "--for",
        "condition=established",
        "--timeout=30s",
        "crd/dnsrecords.demo.wasmctrl.dev",
    ]);
    cluster.kubectl(&[
        "create",
        "secret",
        "generic",
        "dns-provider",
        "--from-literal=token=t0ken-1",
    ]);
    let provider = DnsProvider::start("t0ken-1").await;
    let host = cluster.host(&config(&provider, component)).await;

    // Created: the record is put at the provider with the Secret's token.
    cluster.kubectl(&["apply", "-f", &format!("{EXAMPLE}/dnsrecord.yaml")]);
    remote_is(&provider, "192.0.2.10", "the record at the provider").await;
    eventually("Ready=True for the generation", LIMIT, || {
        let fields: Vec<String> = ready(&cluster)
            .split_whitespace()
            .map(String::from)
            .collect();
        let ok = fields.len() == 4 && fields[0] == fields[1] && fields[2] == "True";
        async move { ok }
    })
    .await;
    assert_eq!(
        provider.last_authorization().as_deref(),
        Some("Bearer t0ken-1")
    );

    // Updated.
    set_value(&cluster, "192.0.2.20");
    remote_is(&provider, "192.0.2.20", "the updated record").await;

    // Drift made at the provider is put back on the next resync.
    provider.set_record(ZONE, "www", record("203.0.113.9"));
    remote_is(&provider, "192.0.2.20", "the drifted record repaired").await;

    // Rotation: the provider takes only the new token; once the Secret
    // holds it, the next request carries it, with no restart or swap.
    provider.set_token("t0ken-2");
    cluster.kubectl(&[
        "patch",
        "secret",
        "dns-provider",
        "--type=merge",
        "-p",
        // base64 of "t0ken-2".
        r#"{"data":{"token":"dDBrZW4tMg=="}}"#,
    ]);
    set_value(&cluster, "192.0.2.30");
    remote_is(
        &provider,
        "192.0.2.30",
        "the record written with the new token",
    )
    .await;
    assert_eq!(
        provider.last_authorization().as_deref(),
        Some("Bearer t0ken-2")
    );

    // The provider down: Ready=False naming it, the key backs off, and
    // converges once the provider is back.
    provider.set_down(true);
    set_value(&cluster, "192.0.2.40");
    eventually("Ready=False with ProviderError", LIMIT, || {
        let down = ready(&cluster).ends_with(" False ProviderError");
        async move { down }
    })
    .await;
    provider.set_down(false);
    remote_is(
        &provider,
        "192.0.2.40",
        "the record once the provider is back",
    )
    .await;
    eventually("Ready=True again", LIMIT, || {
        let up = ready(&cluster).contains(" True ");
        async move { up }
    })
    .await;

    // The plugin's entry is on /plugins, its value nowhere there.
    let shown = host.plugin("dns").await.expect("the dns plugin");
    assert_eq!(shown["secrets"][0]["name"], "dns-token", "{shown}");
    assert_eq!(shown["secrets"][0]["secretKeyRef"]["name"], "dns-provider");
    assert!(!shown.to_string().contains("t0ken"), "{shown}");

    // Deleted: the finalizer removes the remote record first.
    cluster.kubectl(&["delete", "dnsrecord", "www", "--wait=false"]);
    eventually("the remote record deleted", LIMIT, || {
        let gone = provider.record(ZONE, "www").is_none();
        async move { gone }
    })
    .await;
    eventually("the DNSRecord gone", LIMIT, || {
        let out = cluster.kubectl_raw(&["get", "dnsrecord", "www"]);
        let gone = String::from_utf8_lossy(&out.stderr).contains("NotFound");
        async move { gone }
    })
    .await;
    host.stop().await.unwrap();
}
