//! `wasmctrl rbac` as a user runs it: YAML on stdout for `kubectl apply -f -`,
//! a clear error for a bad ServiceAccount name.

use crate::binary::wasmctrl;

const QUICKSTART: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../examples/quickstart/wasmctrl.yaml"
);

fn rbac(args: &[&str]) -> std::process::Output {
    wasmctrl()
        .arg("rbac")
        .args(args)
        .output()
        .expect("wasmctrl runs")
}

#[test]
fn wasmctrl_rbac_prints_the_roles_of_the_quick_start() {
    let out = rbac(&[
        "--config",
        QUICKSTART,
        "--namespace",
        "ops",
        "--service-account",
        "ctl",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout).unwrap();
    // The quick start reconciles cluster-wide without leader election and
    // registers its webhooks: one ClusterRole with the grant, events and
    // its webhook configurations by name, bound to ops/ctl.
    let docs: Vec<serde_json::Value> = yaml
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_norway::from_str(d).unwrap())
        .collect();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ClusterRole", "ClusterRoleBinding"], "{yaml}");
    assert_eq!(docs[0]["metadata"]["name"], "wasmctrl:ops:ctl");
    assert_eq!(
        docs[0]["rules"],
        serde_json::json!([
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]},
            {"apiGroups": [""], "resources": ["services"], "verbs": ["list", "watch", "create", "patch"]},
            {
                "apiGroups": ["admissionregistration.k8s.io"],
                "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
                "resourceNames": ["wasmctrl-webapp"],
                "verbs": ["get", "create", "patch", "delete"],
            },
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch", "create", "patch"]},
            {"apiGroups": ["demo.wasmctrl.dev"], "resources": ["webapps"], "verbs": ["get", "list", "watch", "create", "patch"]},
            {"apiGroups": ["demo.wasmctrl.dev"], "resources": ["webapps/status"], "verbs": ["patch"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        ]),
        "{yaml}"
    );
    assert_eq!(
        docs[1]["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "ctl", "namespace": "ops"}])
    );
}

#[test]
fn wasmctrl_rbac_refuses_a_bad_service_account_name() {
    let out = rbac(&["--config", QUICKSTART, "--service-account", "Not/Valid"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--service-account"), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing half-printed");
}
