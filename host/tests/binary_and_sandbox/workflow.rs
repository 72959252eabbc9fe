//! The cluster workflow of the README ("In a cluster: plugins from a registry"), through the binaries a
//! user runs: `wasmctrl push` to a registry, `wasmctrl dev` with
//! `pluginsFrom` (it serves the WasmReconciler CRD), `kubectl apply` of a
//! WasmReconciler, `kubectl get wasmreconcilers`, then an edit and a
//! delete with kubectl.

use std::time::{Duration, Instant};

use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::admin::http_get;
use wasmctrl_testkit::host::file_digest;
use wasmctrl_testkit::registry::{Registry, empty_docker_config};
use wasmctrl_testkit::{eventually, kubectl};

use crate::binary::{Dev, wasmctrl};

const LIMIT: Duration = Duration::from_secs(60);

impl Dev {
    /// kubectl's stdout; panics (with its output) if it fails.
    fn kubectl_ok(&self, args: &[&str]) -> String {
        kubectl::run(&self.kubeconfig, args)
    }

    /// Waits until `kubectl get wasmreconcilers` has a row for `name`
    /// passing `check`, and returns the table.
    async fn table_where(&self, what: &str, name: &str, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + LIMIT;
        loop {
            let table = self.kubectl_ok(&["get", "wasmreconcilers"]);
            let row = table
                .lines()
                .find(|l| l.split_whitespace().next() == Some(name));
            if row.is_some_and(&check) {
                return table;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; last table:\n{table}\nlog:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The plugins the admin API lists, by name.
    async fn plugin_names(&self) -> Vec<String> {
        let (_, body) = http_get(self.admin, "/plugins").await;
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["name"].as_str().map(str::to_string))
            .collect()
    }
}

/// Runs `wasmctrl ARGS…` to its end; its stdout (panics unless it
/// succeeds).
fn run_wasmctrl(args: &[&str]) -> String {
    let out = wasmctrl()
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .expect("wasmctrl runs");
    assert!(
        out.status.success(),
        "wasmctrl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wasmreconciler(reference: &str) -> String {
    format!(
        r#"apiVersion: wasmctrl.dev/v1alpha1
kind: WasmReconciler
metadata:
  name: stamp
spec:
  source: {{ oci: "{reference}", insecure: true }}
  namespaces: [default]
  permissions:
    - {{ group: "", resources: [configmaps], verbs: [get, list, watch, patch] }}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_then_kubectl_apply_a_wasmreconciler_to_wasmctrl_dev_then_get_edit_and_delete_it() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let docker = empty_docker_config();
    let docker = docker.to_str().unwrap();
    let (v1, v2) = (
        registry.reference("plugins/stamp:1.0.0"),
        registry.reference("plugins/stamp:2.0.0"),
    );
    for (component, reference) in [(artifacts::STAMP_V1, &v1), (artifacts::STAMP_V2, &v2)] {
        let pushed = run_wasmctrl(&[
            "push",
            component,
            reference,
            "--insecure",
            "--docker-config",
            docker,
        ]);
        assert!(pushed.trim().starts_with("sha256:"), "{pushed}");
    }

    let config = dir.path().join("host.yaml");
    std::fs::write(
        &config,
        r#"apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
shutdownTimeout: 5s
pluginsFrom: { kind: WasmReconciler, allowHosts: ["127.0.0.1"] }   # the test's registry
maxGrant:
  - { group: "", resources: [configmaps], verbs: [get, list, watch, patch], namespaces: [default] }
"#,
    )
    .unwrap();
    let dev = Dev::start(
        &["--config".as_ref(), config.as_os_str()],
        dir.path().join("kubeconfig"),
    )
    .await;
    assert!(
        dev.printed
            .iter()
            .any(|l| l.contains("applied the WasmReconciler CRD")),
        "dev says it serves the CRD: {:?}",
        dev.printed
    );
    dev.kubectl_ok(&["create", "configmap", "demo"]);

    let manifest = dir.path().join("stamp.yaml");
    std::fs::write(&manifest, wasmreconciler(&v1)).unwrap();
    dev.kubectl_ok(&["apply", "-f", manifest.to_str().unwrap()]);
    let v1_digest = file_digest(artifacts::STAMP_V1);
    let table = dev
        .table_where("v1 ready", "stamp", |row| {
            row.contains("1.0.0") && row.contains(&v1_digest) && row.contains("True")
        })
        .await;
    let header = table.lines().next().unwrap_or_default();
    for column in ["NAME", "VERSION", "DIGEST", "READY"] {
        assert!(header.contains(column), "{table}");
    }
    let stamp = || {
        dev.kubectl_ok(&[
            "get",
            "configmap",
            "demo",
            "-o",
            r"jsonpath={.metadata.labels.wasmctrl\.dev/stamp}",
        ])
    };
    eventually("demo stamped v1", LIMIT, || async {
        (stamp() == "v1").then_some(())
    })
    .await;

    // An edit of the object swaps the plugin.
    std::fs::write(&manifest, wasmreconciler(&v2)).unwrap();
    dev.kubectl_ok(&["apply", "-f", manifest.to_str().unwrap()]);
    let v2_digest = file_digest(artifacts::STAMP_V2);
    dev.table_where("v2 ready", "stamp", |row| {
        row.contains("2.0.0") && row.contains(&v2_digest) && row.contains("True")
    })
    .await;
    eventually("demo stamped v2", LIMIT, || async {
        (stamp() == "v2").then_some(())
    })
    .await;

    // A delete stops it.
    dev.kubectl_ok(&["delete", "-f", manifest.to_str().unwrap()]);
    eventually("the plugin stopped", LIMIT, || async {
        dev.plugin_names().await.is_empty().then_some(())
    })
    .await;
}
