use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::*;

fn config(text: &str) -> HostConfig {
    HostConfig::parse(Path::new("wasmctrl.yaml"), text, PathBuf::from("/"))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn rule(group: &str, resources: &[&str], verbs: &[&str], names: Option<&[&str]>) -> PolicyRule {
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(strings(resources)),
        resource_names: names.map(strings),
        verbs: strings(verbs),
        non_resource_urls: None,
    }
}

const HEADER: &str = "apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\n";

#[test]
fn the_union_of_the_grants_events_and_the_leader_lease() {
    let c = config(&format!(
        "{HEADER}leaderElection: {{ enabled: true, namespace: ops, leaseName: ctl }}
plugins:
  - name: a
    path: a.wasm
    permissions:
      - {{ group: apps, resources: [deployments], verbs: [list, watch, patch] }}
      - {{ group: \"\", resources: [configmaps], verbs: [get], namespaces: [x] }}
  - name: b
    path: b.wasm
    namespaces: [x, y]
    permissions:
      - {{ group: apps, resources: [deployments], verbs: [get, list] }}
      - {{ group: \"\", resources: [configmaps], verbs: [create], namespaces: [y, z] }}
"
    ));
    let rbac = generate(&c);
    // A patch of a resource may be an apply that creates it.
    assert_eq!(
        rbac.cluster,
        vec![
            rule(
                "apps",
                &["deployments"],
                &["list", "watch", "create", "patch"],
                None
            ),
            rule("events.k8s.io", &["events"], &["create", "patch"], None),
        ]
    );
    // b's deployments `list` is already cluster-wide (a's); its `get` is not.
    // b's configmaps rule applies only where b reconciles: y (not z).
    // b's events are covered by a's cluster-wide ones.
    assert_eq!(
        rbac.namespaced.get("x").unwrap(),
        &vec![
            rule("", &["configmaps"], &["get"], None),
            rule("apps", &["deployments"], &["get"], None),
        ]
    );
    assert_eq!(
        rbac.namespaced.get("y").unwrap(),
        &vec![
            rule("", &["configmaps"], &["create"], None),
            rule("apps", &["deployments"], &["get"], None),
        ]
    );
    assert_eq!(
        rbac.namespaced.get("ops").unwrap(),
        &vec![
            rule("coordination.k8s.io", &["leases"], &["create"], None),
            rule(
                "coordination.k8s.io",
                &["leases"],
                &["get", "update"],
                Some(&["ctl"])
            ),
        ]
    );
    assert_eq!(rbac.namespaced.len(), 3, "{:?}", rbac.namespaced.keys());
}

#[test]
fn sharding_names_every_shard_lease_and_the_members_lease() {
    let c = config(&format!(
        "{HEADER}leaderElection: {{ enabled: true }}
sharding: {{ shards: 3 }}
plugins: []
"
    ));
    let rbac = generate(&c);
    assert!(rbac.cluster.is_empty());
    assert_eq!(
        rbac.namespaced.get("default").unwrap()[1],
        rule(
            "coordination.k8s.io",
            &["leases"],
            &["get", "update"],
            Some(&[
                "wasmctrl-members",
                "wasmctrl-shard-0",
                "wasmctrl-shard-1",
                "wasmctrl-shard-2"
            ])
        )
    );
}

#[test]
fn wildcards_absorb_narrower_rules_and_status_stays_a_subresource() {
    let c = config(&format!(
        "{HEADER}plugins:
  - name: a
    path: a.wasm
    permissions:
      - {{ group: demo.dev, resources: [\"*\"], verbs: [get] }}
      - {{ group: demo.dev, resources: [things, things/status], verbs: [get, patch] }}
"
    ));
    assert_eq!(
        generate(&c).cluster,
        vec![
            rule("demo.dev", &["things"], &["create", "patch"], None),
            rule("demo.dev", &["*"], &["get"], None),
            // A status patch never creates.
            rule("demo.dev", &["things/status"], &["patch"], None),
            rule("events.k8s.io", &["events"], &["create", "patch"], None),
        ]
    );
}

#[test]
fn the_objects_bind_the_service_account_and_bad_names_are_refused() {
    let c = config(&format!(
        "{HEADER}plugins:
  - name: a
    path: a.wasm
    namespaces: [x]
    permissions:
      - {{ group: \"\", resources: [pods], verbs: [get] }}
"
    ));
    let options = RbacOptions {
        namespace: "wasmctrl-system".into(),
        service_account: "wasmctrl".into(),
    };
    let yaml = generate(&c).to_yaml(&options).unwrap();
    let docs: Vec<serde_json::Value> = serde_norway::Deserializer::from_str(&yaml)
        .map(|d| serde_json::Value::deserialize(d).unwrap())
        .collect();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["Role", "RoleBinding"], "no ClusterRole is needed");
    assert_eq!(docs[0]["metadata"]["namespace"], "x");
    assert_eq!(
        docs[0]["metadata"]["name"],
        "wasmctrl:wasmctrl-system:wasmctrl"
    );
    assert_eq!(
        docs[1]["subjects"][0],
        serde_json::json!({"kind": "ServiceAccount", "name": "wasmctrl", "namespace": "wasmctrl-system"})
    );
    assert_eq!(docs[1]["roleRef"]["kind"], "Role");

    let bad = RbacOptions {
        namespace: "Not_A_Namespace".into(),
        ..options.clone()
    };
    assert!(matches!(
        generate(&c).to_yaml(&bad),
        Err(RbacError::Namespace(_))
    ));
    let bad = RbacOptions {
        service_account: "a/b".into(),
        ..options
    };
    assert!(matches!(
        generate(&c).to_yaml(&bad),
        Err(RbacError::ServiceAccount(_))
    ));
}

#[test]
fn every_verb_resource_and_namespace_of_a_rule_is_one_access() {
    let c = config(&format!(
        "{HEADER}plugins:
  - name: a
    path: a.wasm
    namespaces: [x, y]
    permissions:
      - {{ group: apps, resources: [deployments, deployments/status], verbs: [get, patch], namespaces: [y, z] }}
"
    ));
    let plugin = &c.plugins[0];
    let all = accesses(plugin, &plugin.permissions[0]);
    // get and patch of each, and the create an apply of deployments needs.
    assert_eq!(all.len(), 5, "only y: {all:?}");
    assert!(all.iter().all(|(ns, _, _)| ns.as_deref() == Some("y")));
    assert!(all.contains(&(Some("y".into()), "deployments".into(), "create".into())));
    assert!(
        !all.iter()
            .any(|(_, r, v)| r == "deployments/status" && v == "create")
    );
}

#[test]
fn following_wasmreconcilers_adds_their_objects_pull_secrets_and_the_max_grant() {
    let c = config(&format!(
        "{HEADER}pluginsFrom: {{ kind: WasmReconciler, namespace: plugins }}
maxGrant:
  - {{ group: \"\", resources: [configmaps], verbs: [get, patch], namespaces: [apps] }}
plugins: []
"
    ));
    let rbac = generate(&c);
    assert_eq!(
        rbac.cluster,
        vec![
            rule("events.k8s.io", &["events"], &["create", "patch"], None),
            rule(
                "wasmctrl.dev",
                &["wasmreconcilers"],
                &["list", "watch"],
                None
            ),
            rule(
                "wasmctrl.dev",
                &["wasmreconcilers/status"],
                &["patch"],
                None
            ),
        ]
    );
    assert_eq!(
        rbac.namespaced.get("plugins").unwrap(),
        &vec![rule("", &["secrets"], &["get"], None)]
    );
    assert_eq!(
        rbac.namespaced.get("apps").unwrap(),
        &vec![rule("", &["configmaps"], &["get", "create", "patch"], None)]
    );
}

#[test]
fn secrets_used_by_reference_are_read_and_watched_by_name_only() {
    let c = config(&format!(
        "{HEADER}plugins:
  - name: dns
    path: dns.wasm
    outbound: [{{ url: \"https://api.dns.example\" }}]
    secrets:
      - {{ name: token, secretKeyRef: {{ namespace: ops, name: dns-provider, key: token }}, hosts: [\"https://api.dns.example\"] }}
      - {{ name: other, secretKeyRef: {{ namespace: ops, name: second, key: k }}, hosts: [\"https://api.dns.example\"] }}
      - {{ name: again, secretKeyRef: {{ namespace: ops, name: dns-provider, key: other }}, hosts: [\"https://api.dns.example\"] }}
      - {{ name: local, env: TOKEN, hosts: [\"https://api.dns.example\"] }}
"
    ));
    let rbac = generate(&c);
    let ops = rbac.namespaced.get("ops").unwrap();
    assert!(
        ops.contains(&rule(
            "",
            &["secrets"],
            &["get", "list", "watch"],
            Some(&["dns-provider", "second"])
        )),
        "{ops:?}"
    );
    // Nothing reads Secrets anywhere else, or by a wider rule.
    let wide = |r: &PolicyRule| {
        r.resources
            .as_ref()
            .unwrap()
            .contains(&"secrets".to_string())
            && r.resource_names.is_none()
    };
    assert!(!rbac.cluster.iter().any(wide), "{:?}", rbac.cluster);
    assert!(!rbac.namespaced.values().flatten().any(wide), "{rbac:?}");
}

#[test]
fn registered_webhooks_add_their_configurations_by_name_and_nothing_else() {
    let plugins = "plugins:
  - name: a
    path: a.wasm
  - name: b
    path: b.wasm
";
    let with = generate(&config(&format!(
        "{HEADER}webhook: {{ bind: \"127.0.0.1:9443\" }}\n{plugins}"
    )));
    let names: &[&str] = &["wasmctrl-a", "wasmctrl-b"];
    assert!(
        with.cluster.contains(&rule(
            "admissionregistration.k8s.io",
            &[
                "mutatingwebhookconfigurations",
                "validatingwebhookconfigurations"
            ],
            &["get", "create", "patch", "delete"],
            Some(names)
        )),
        "{:?}",
        with.cluster
    );
    let without = generate(&config(&format!(
        "{HEADER}webhook: {{ bind: \"127.0.0.1:9443\", register: false }}\n{plugins}"
    )));
    assert!(
        without
            .cluster
            .iter()
            .all(|r| r.api_groups.as_deref()
                != Some(&["admissionregistration.k8s.io".to_string()][..])),
        "{:?}",
        without.cluster
    );
}
