//! `deploy/`, the kustomize base that runs the host in a cluster: it
//! renders, its RBAC is what `wasmctrl rbac` generates for its config, and a
//! server-side dry run of the whole base is accepted.

use std::path::Path;

use serde::Deserialize;

use wasmctrl::ops::rbac::RbacOptions;
use wasmctrl_cluster_tests::Cluster;

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy");

fn objects(yaml: &str) -> Vec<serde_json::Value> {
    serde_norway::Deserializer::from_str(yaml)
        .map(|doc| serde_json::Value::deserialize(doc).expect("YAML documents"))
        .collect()
}

#[test]
fn the_rbac_of_deploy_is_what_wasmctrl_rbac_generates_for_its_config() {
    let config = wasmctrl::config::HostConfig::load(&Path::new(DEPLOY).join("wasmctrl.yaml"))
        .expect("deploy/wasmctrl.yaml is a valid config");
    let generated = wasmctrl::ops::rbac::generate(&config)
        .to_yaml(&RbacOptions {
            namespace: "wasmctrl-system".into(),
            service_account: "wasmctrl".into(),
        })
        .unwrap();
    let committed = std::fs::read_to_string(Path::new(DEPLOY).join("rbac.yaml")).unwrap();
    let body = committed
        .lines()
        .skip_while(|l| l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(
        body.trim(),
        generated.trim(),
        "deploy/rbac.yaml is stale: regenerate it with `wasmctrl rbac --config deploy/wasmctrl.yaml > deploy/rbac.yaml`"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_renders_and_a_server_side_dry_run_accepts_it() {
    let cluster = Cluster::start().await;
    let rendered = cluster.kubectl(&["kustomize", DEPLOY]);
    let objects = objects(&rendered);
    let kinds: std::collections::BTreeSet<String> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_string())
        .collect();
    for kind in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
        "Secret",
        "PodDisruptionBudget",
    ] {
        assert!(kinds.contains(kind), "{kind} missing from {kinds:?}");
    }

    // The Deployment as the issue asks for it.
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 2);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "wasmctrl");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    for bound in ["requests", "limits"] {
        for resource in ["cpu", "memory"] {
            assert!(
                container["resources"][bound][resource].is_string(),
                "{bound}.{resource}"
            );
        }
    }
    let cache = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "cache")
        .unwrap();
    assert!(cache["emptyDir"].is_object(), "{cache}");
    // The config's cacheDir is on that volume (the root filesystem is
    // read-only), in a directory below its root, which any user may write.
    let configmap = objects.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
    let host_config = configmap["data"]["wasmctrl.yaml"].as_str().unwrap();
    assert!(
        host_config.contains("cacheDir: /var/cache/wasmctrl/host"),
        "{host_config}"
    );
    let mounts = container["volumeMounts"].as_array().unwrap();
    assert!(
        mounts
            .iter()
            .any(|m| m["name"] == "cache" && m["mountPath"] == "/var/cache/wasmctrl"),
        "{mounts:?}"
    );
    assert!(
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["configMap"]["name"] == configmap["metadata"]["name"]),
        "the generated ConfigMap (with its hash suffix) is mounted"
    );
    // The webhook server: its port, the Service the API server calls, and
    // the config that names both and the shared CA's Secret.
    let webhook = objects
        .iter()
        .find(|o| o["kind"] == "Service" && o["metadata"]["name"] == "wasmctrl-webhook")
        .unwrap();
    assert_eq!(webhook["spec"]["ports"][0]["targetPort"], "webhook");
    assert!(
        container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "webhook" && p["containerPort"] == 9443)
    );
    assert!(
        host_config.contains("service: { namespace: wasmctrl-system, name: wasmctrl-webhook }")
            && host_config
                .contains("caSecret: { namespace: wasmctrl-system, name: wasmctrl-webhook-ca }"),
        "{host_config}"
    );
    let service = objects
        .iter()
        .find(|o| o["kind"] == "Service" && o["metadata"]["name"] == "wasmctrl-metrics")
        .unwrap();
    assert_eq!(service["spec"]["ports"][0]["name"], "metrics");
    assert_eq!(
        service["metadata"]["annotations"]["prometheus.io/scrape"],
        "true"
    );

    // A server-side dry run: every object is accepted (and validated
    // against the served schemas), nothing is stored. As in any cluster,
    // the namespaced objects of a dry run need their namespace to exist:
    // the dry-run Namespace is not stored.
    cluster.kubectl(&["create", "namespace", "wasmctrl-system"]);
    let out = cluster.kubectl(&["apply", "--dry-run=server", "-k", DEPLOY]);
    for created in [
        "serviceaccount/wasmctrl created (server dry run)",
        "role.rbac.authorization.k8s.io/wasmctrl:wasmctrl-system:wasmctrl created (server dry run)",
        "rolebinding.rbac.authorization.k8s.io/wasmctrl:wasmctrl-system:wasmctrl created (server dry run)",
        "clusterrole.rbac.authorization.k8s.io/wasmctrl:wasmctrl-system:wasmctrl created (server dry run)",
        "clusterrolebinding.rbac.authorization.k8s.io/wasmctrl:wasmctrl-system:wasmctrl created (server dry run)",
        "service/wasmctrl-metrics created (server dry run)",
        "service/wasmctrl-webhook created (server dry run)",
        "secret/wasmctrl-webhook-ca created (server dry run)",
        "deployment.apps/wasmctrl created (server dry run)",
        "poddisruptionbudget.policy/wasmctrl created (server dry run)",
    ] {
        assert!(out.contains(created), "{created:?} in {out}");
    }
    assert!(out.contains("configmap/wasmctrl-config-"), "{out}");
    assert!(
        cluster
            .kubectl_raw(&["get", "deployment", "wasmctrl", "-n", "wasmctrl-system"])
            .status
            .code()
            != Some(0),
        "a dry run stores nothing"
    );
}
