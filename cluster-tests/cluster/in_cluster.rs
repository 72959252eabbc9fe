//! The in-cluster path: the host runs as a ServiceAccount holding only the
//! RBAC `wasmctrl rbac` generates, against the embedded API server with RBAC
//! enforced, as it would in a real cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::rbac::v1::PolicyRule;
use wasmctrl::config::HostConfig;
use wasmctrl::ops::rbac::{Rbac, RbacOptions};
use wasmctrl::sandbox::hostapi::PermissionRule;
use wasmctrl_apiserver::{Authorization, Config};
use wasmctrl_cluster_tests::{Cluster, quickstart_config};
use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::{client::client_for, eventually, host::RunningHost};

use crate::webapp::converges_heals_and_cleans_up;

const NAMESPACE: &str = "wasmctrl-system";
const SERVICE_ACCOUNT: &str = "wasmctrl";

/// The quick start's config as `deploy/` runs it: leader election on, its
/// Lease beside the host's ServiceAccount.
fn in_cluster_config() -> HostConfig {
    let mut config = quickstart_config(artifacts::WEBAPP);
    config.leader_election.enabled = true;
    config.leader_election.namespace = NAMESPACE.into();
    config
}

/// An RBAC-enforcing cluster with the CRD, the host's namespace and
/// ServiceAccount, and the generated RBAC applied with kubectl.
async fn cluster_with_generated_rbac(config: &HostConfig) -> (Cluster, Rbac) {
    let cluster = Cluster::start_with(Config {
        authorization: Authorization::Rbac,
        ..Config::default()
    })
    .await;
    cluster.apply_webapp_crd();
    cluster.kubectl(&["create", "namespace", NAMESPACE]);
    cluster.kubectl(&["create", "serviceaccount", SERVICE_ACCOUNT, "-n", NAMESPACE]);
    let rbac = wasmctrl::ops::rbac::generate(config);
    let yaml = rbac
        .to_yaml(&RbacOptions {
            namespace: NAMESPACE.into(),
            service_account: SERVICE_ACCOUNT.into(),
        })
        .unwrap();
    let file = cluster.file("rbac.yaml", &yaml);
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    (cluster, rbac)
}

/// A kube client authenticated as the host's ServiceAccount (a token as
/// `kubectl create token` issues).
async fn service_account_client(cluster: &Cluster) -> kube::Client {
    let kubeconfig = cluster
        .server()
        .kubeconfig_for_service_account(NAMESPACE, SERVICE_ACCOUNT, Duration::from_secs(3600))
        .unwrap();
    let path = cluster.file("sa-kubeconfig", &kubeconfig);
    client_for(&path).await
}

/// (resource as `kubectl auth can-i --list` names it, resourceNames) →
/// verbs.
type Access = BTreeMap<(String, BTreeSet<String>), BTreeSet<String>>;

/// The accesses `rules` allow, keyed as `kubectl auth can-i --list` prints
/// them (`plural.group/subresource`, core without a group).
fn accesses(rules: &[PolicyRule]) -> Access {
    let mut out = Access::new();
    for rule in rules {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                let shown = match (group.as_str(), resource.split_once('/')) {
                    ("", _) => resource.clone(),
                    (g, Some((plural, sub))) => format!("{plural}.{g}/{sub}"),
                    (g, None) => format!("{resource}.{g}"),
                };
                let names: BTreeSet<String> =
                    rule.resource_names.iter().flatten().cloned().collect();
                out.entry((shown, names))
                    .or_default()
                    .extend(rule.verbs.iter().cloned());
            }
        }
    }
    out
}

/// The resource rows of `kubectl auth can-i --list` output (non-resource
/// URL rows and the header left out).
fn listed(output: &str) -> Access {
    let mut out = Access::new();
    for line in output.lines().skip(1) {
        if line.trim_start().starts_with('[') {
            continue; // a non-resource URL (discovery), every identity's
        }
        let (resource, rest) = line.split_once(char::is_whitespace).unwrap();
        let groups: Vec<&str> = rest
            .split('[')
            .skip(1)
            .map(|g| g.split(']').next().unwrap())
            .collect();
        assert_eq!(groups.len(), 3, "a row of --list: {line:?}");
        let words =
            |g: &str| -> BTreeSet<String> { g.split_whitespace().map(str::to_string).collect() };
        out.entry((resource.to_string(), words(groups[1])))
            .or_default()
            .extend(words(groups[2]));
    }
    out
}

/// What every authenticated identity may do (Kubernetes' `system:basic-user`).
fn basic_user() -> Access {
    [
        "selfsubjectaccessreviews.authorization.k8s.io",
        "selfsubjectrulesreviews.authorization.k8s.io",
        "selfsubjectreviews.authentication.k8s.io",
    ]
    .iter()
    .map(|r| {
        (
            (r.to_string(), BTreeSet::new()),
            ["create".to_string()].into(),
        )
    })
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webapp_operator_runs_as_its_service_account_with_only_the_generated_rbac() {
    let config = in_cluster_config();
    let (cluster, rbac) = cluster_with_generated_rbac(&config).await;
    let client = service_account_client(&cluster).await;

    // Sufficient: the whole acceptance passes as the ServiceAccount.
    let host = RunningHost::start(config.clone(), client.clone(), None).await;
    let status = host.plugin("webapp").await.unwrap();
    assert!(
        status.get("rbac_denied").is_none(),
        "the generated RBAC allows the whole grant: {status}"
    );
    converges_heals_and_cleans_up(&cluster, host).await;

    // Minimal: `auth can-i --list` shows exactly the generated rules (and
    // what every authenticated identity may do), in each namespace.
    let user = format!("--as=system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}");
    for namespace in ["default", NAMESPACE, "kube-system"] {
        let mut expected = accesses(&rbac.cluster);
        for (key, verbs) in accesses(rbac.namespaced.get(namespace).map_or(&[], Vec::as_slice)) {
            expected.entry(key).or_default().extend(verbs);
        }
        let mut shown =
            listed(&cluster.kubectl(&["auth", "can-i", "--list", "-n", namespace, &user]));
        for (key, verbs) in basic_user() {
            assert_eq!(shown.remove(&key), Some(verbs), "{key:?} in {namespace}");
        }
        assert_eq!(shown, expected, "can-i --list in {namespace}");
    }
    // Spot checks through single answers.
    let can = |args: &[&str]| {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        all.push(&user);
        let out = cluster.kubectl_raw(&all);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(can(&["patch", "deployments.apps", "-n", "default"]), "yes");
    assert_eq!(can(&["delete", "deployments.apps", "-n", "default"]), "no");
    assert_eq!(can(&["get", "secrets", "-n", "default"]), "no");
    assert_eq!(
        can(&[
            "update",
            "leases.coordination.k8s.io/wasmctrl",
            "-n",
            NAMESPACE
        ]),
        "yes"
    );
    assert_eq!(
        can(&[
            "update",
            "leases.coordination.k8s.io/other",
            "-n",
            NAMESPACE
        ]),
        "no"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_wider_than_rbac_allows_is_reported_at_start() {
    let config = in_cluster_config();
    let (cluster, _) = cluster_with_generated_rbac(&config).await;
    let client = service_account_client(&cluster).await;

    // The grant gains rules the plugin does not use (so it still loads) and
    // the applied RBAC lacks.
    let mut wider = config.clone();
    wider.plugins[0].permissions.push(PermissionRule {
        group: String::new(),
        resources: vec!["secrets".into()],
        verbs: vec!["get".into(), "list".into()],
        namespaces: None,
    });
    wider.plugins[0].permissions.push(PermissionRule {
        group: "apps".into(),
        resources: vec!["deployments/scale".into()],
        verbs: vec!["update".into()],
        namespaces: Some(vec!["default".into()]),
    });
    let host = RunningHost::start(wider, client, None).await;
    // Ready is not leading: the plugin is `standby` until this host holds
    // the lease, which a loaded machine may take a moment to get.
    let status = eventually("the host to lead", Duration::from_secs(60), || async {
        host.plugin("webapp")
            .await
            .filter(|s| s["state"] != "standby")
    })
    .await;
    assert_eq!(
        status["rbac_denied"],
        serde_json::json!([
            "get core/secrets cluster-wide",
            "list core/secrets cluster-wide",
            "update apps/deployments/scale in namespace default",
        ]),
        "{status}"
    );
    assert_eq!(status["state"], "running", "what RBAC allows keeps working");
    host.stop().await.unwrap();
}
