//! Least-privilege RBAC for a host config (`wasmctrl rbac`), and the check
//! at start that the API server's authorization allows every plugin's
//! grant.
//!
//! # What the host needs, and nothing more
//! - **Every plugin's grant** (`permissions`): its calls are checked against
//!   it, so RBAC must allow all of it. A rule's namespace scope is the
//!   intersection of the plugin's `namespaces` and the rule's; a scoped rule
//!   becomes a Role (+ RoleBinding) in each of its namespaces, an unscoped
//!   one a ClusterRole (+ ClusterRoleBinding). A rule whose intersection is
//!   empty allows nothing and is left out. Status writes are granted as
//!   `<plural>/status`, as RBAC names them. A `patch` on a resource also
//!   gets `create`: `patch` lets a plugin apply (server-side apply), which
//!   creates an object that does not exist, and Kubernetes authorizes that
//!   create as `create`.
//! - **The informers** list and watch every kind of a plugin's `for`, `owns`
//!   and `watches`. The host refuses a plugin unless its grant allows list
//!   and watch on each of them in every namespace it watches, so the
//!   grant's rules, which name plural resources, already cover the
//!   informers: no component has to be loaded and no discovery run, and
//!   `wasmctrl rbac` works offline from the config alone.
//! - **Events** (`events.k8s.io` `create` and `patch`, where the plugin
//!   reconciles: its `namespaces`, or cluster-wide): the host records
//!   terminal errors as events on the reconciled object, and its recorder
//!   (kube-runtime's) patches an event it repeats within minutes; a plugin's
//!   own events go through the same recorder. The host writes no core
//!   (`""` group) events, so none are granted. A cluster-scoped object's
//!   events go to `default`: a plugin limited to `namespaces` that
//!   reconciles a cluster-scoped kind must add that Role itself.
//! - **Leases** in `leaderElection.namespace`: with leader election, `get`
//!   and `update` on the one Lease `leaseName`; with sharding, on
//!   `<leaseName>-members` and `<leaseName>-shard-<i>`. `create` cannot be
//!   limited to names (the name is not known when a create is authorized),
//!   so, as Kubernetes' own `system:kube-controller-manager` role does, it is
//!   a separate rule on `leases` without `resourceNames`.
//! - **Secrets used by reference** (a plugin's `secrets` with
//!   `secretKeyRef`): `get`, `list` and `watch` limited by `resourceNames`
//!   to the named Secrets, in their namespaces. The host watches each with
//!   a `metadata.name` field selector, which `resourceNames` allows.
//! - **Webhook configurations** (`webhook` with `register`, the default):
//!   `get`, `patch` and `delete` on `admissionregistration.k8s.io`
//!   `validatingwebhookconfigurations` and `mutatingwebhookconfigurations`
//!   limited by `resourceNames` to each config plugin's `wasmctrl-<plugin>`.
//!   The host writes them with server-side apply, which creates one that
//!   does not exist yet; Kubernetes authorizes that as a `create` of the
//!   name in the URL, so `create` is limited by `resourceNames` too.
//!   Plugins defined as objects are not registered this way. With
//!   `webhook.caSecret`, `get` and `update` on that Secret by name.
//!
//! - **WasmReconcilers** (`pluginsFrom`): `list` and `watch` on
//!   `wasmctrl.dev` `wasmreconcilers`, `patch` on their status, `get` on
//!   Secrets in `pluginsFrom.namespace` (pull secrets), and all of
//!   `maxGrant` (an object's plugin may be granted up to it, in namespaces
//!   only the object names) with events cluster-wide. Where `maxGrant`
//!   lets a plugin `get` Secrets in `pluginsFrom.namespace`, an object may
//!   use them by reference, so the host also lists and watches Secrets
//!   there.
//!
//! Discovery and the access reviews of the start-up check are allowed to
//! every authenticated identity by Kubernetes' bootstrap roles
//! (`system:discovery`, `system:basic-user`), so they are not generated.
//!
//! Verbs another rule of the same or a wider scope already allows (a `*`
//! verb or resource, a ClusterRole over a Role) are dropped, and rules with
//! the same group, verbs and names are merged: the output is minimal and
//! deterministic.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{Api, ObjectMeta, PostParams};

use crate::config::{HostConfig, PluginConfig};
use crate::control::shard::ShardCoordinator;
use crate::meta::syntax;
use crate::sandbox::hostapi::PermissionRule;

/// The group of WasmReconciler objects (`pluginsFrom`).
const PLUGINS_GROUP: &str = "wasmctrl.dev";

/// Whom the RBAC is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RbacOptions {
    /// The namespace of the host's ServiceAccount.
    pub namespace: String,
    /// The host's ServiceAccount.
    pub service_account: String,
}

/// Why RBAC could not be generated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RbacError {
    #[error("--namespace: {0}")]
    Namespace(String),
    #[error("--service-account: {0}")]
    ServiceAccount(String),
}

/// Where a rule applies.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Scope {
    Cluster,
    Namespace(String),
}

/// One (group, resource, names) with the verbs allowed on it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Target {
    group: String,
    resource: String,
    /// None: every object of the resource.
    names: Option<BTreeSet<String>>,
}

/// The RBAC a host config needs: cluster-wide rules and per-namespace rules.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rbac {
    /// Rules of the ClusterRole (empty: none is needed).
    pub cluster: Vec<PolicyRule>,
    /// Rules of the Role in each namespace.
    pub namespaced: BTreeMap<String, Vec<PolicyRule>>,
}

/// The RBAC `config`'s host needs (see the module docs).
pub fn generate(config: &HostConfig) -> Rbac {
    let mut wanted: BTreeMap<Scope, BTreeMap<Target, BTreeSet<String>>> = BTreeMap::new();
    let mut add =
        |scope: &Scope, group: &str, resource: &str, names: Option<&[String]>, verbs: &[&str]| {
            let target = Target {
                group: group.to_string(),
                resource: resource.to_string(),
                names: names.map(|n| n.iter().cloned().collect()),
            };
            let set = wanted
                .entry(scope.clone())
                .or_default()
                .entry(target)
                .or_default();
            set.extend(verbs.iter().map(|v| v.to_string()));
        };
    for plugin in &config.plugins {
        for rule in &plugin.permissions {
            add_rule(&mut add, plugin.namespaces.as_deref(), rule);
        }
        for scope in scopes(plugin.namespaces.as_deref(), None) {
            add(
                &scope,
                "events.k8s.io",
                "events",
                None,
                &["create", "patch"],
            );
        }
    }
    if config.webhook.as_ref().is_some_and(|w| w.register) && !config.plugins.is_empty() {
        let names: Vec<String> = config
            .plugins
            .iter()
            .map(|p| crate::ops::webhook::configuration_name(&p.name))
            .collect();
        for resource in [
            "validatingwebhookconfigurations",
            "mutatingwebhookconfigurations",
        ] {
            add(
                &Scope::Cluster,
                "admissionregistration.k8s.io",
                resource,
                Some(&names),
                &["get", "create", "patch", "delete"],
            );
        }
    }
    if let Some(s) = config.webhook.as_ref().and_then(|w| w.ca_secret.as_ref()) {
        add(
            &Scope::Namespace(s.namespace.clone()),
            "",
            "secrets",
            Some(std::slice::from_ref(&s.name)),
            &["get", "update"],
        );
    }
    // The Secrets plugins use by reference: the host reads and watches
    // each by name (a watch pinned to it by a field selector, which
    // `resourceNames` allows), never the namespace's other Secrets.
    let mut secrets: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for r in config
        .plugins
        .iter()
        .flat_map(|p| &p.secrets)
        .filter_map(|s| s.secret_key_ref.as_ref())
    {
        let names = secrets.entry(&r.namespace).or_default();
        if !names.contains(&r.name) {
            names.push(r.name.clone());
        }
    }
    for (namespace, names) in &secrets {
        add(
            &Scope::Namespace(namespace.to_string()),
            "",
            "secrets",
            Some(names),
            &["get", "list", "watch"],
        );
    }
    if let Some(from) = &config.plugins_from {
        // Following WasmReconcilers (cluster-scoped): their informer, their
        // status, and their pull Secrets in `pluginsFrom.namespace`.
        add(
            &Scope::Cluster,
            PLUGINS_GROUP,
            "wasmreconcilers",
            None,
            &["list", "watch"],
        );
        add(
            &Scope::Cluster,
            PLUGINS_GROUP,
            "wasmreconcilers/status",
            None,
            &["patch"],
        );
        add(
            &Scope::Namespace(from.namespace.clone()),
            "",
            "secrets",
            None,
            &["get"],
        );
        // An object may use Secrets of its namespace that `maxGrant` lets
        // a plugin get; their names are the objects' to choose, so the
        // host watches them in the namespace.
        let secret_reads = config.max_grant.iter().flatten().any(|rule| {
            rule.group.is_empty()
                && rule.resources.iter().any(|r| r == "secrets" || r == "*")
                && rule.verbs.iter().any(|v| v == "get" || v == "*")
                && rule
                    .namespaces
                    .as_ref()
                    .is_none_or(|ns| ns.contains(&from.namespace))
        });
        if secret_reads {
            add(
                &Scope::Namespace(from.namespace.clone()),
                "",
                "secrets",
                None,
                &["list", "watch"],
            );
        }
        // An object's plugin may be granted up to `maxGrant`, in whatever
        // namespaces the object names: the host needs all of it.
        for rule in config.max_grant.iter().flatten() {
            add_rule(&mut add, None, rule);
        }
        if config.max_grant.as_ref().is_some_and(|r| !r.is_empty()) {
            add(
                &Scope::Cluster,
                "events.k8s.io",
                "events",
                None,
                &["create", "patch"],
            );
        }
    }
    let le = &config.leader_election;
    let leases: Vec<String> = match &config.sharding {
        Some(s) => std::iter::once(ShardCoordinator::members_lease(&le.lease_name))
            .chain((0..s.shards).map(|i| ShardCoordinator::shard_lease(&le.lease_name, i)))
            .collect(),
        None if le.enabled => vec![le.lease_name.clone()],
        None => Vec::new(),
    };
    if !leases.is_empty() {
        let scope = Scope::Namespace(le.namespace.clone());
        add(&scope, "coordination.k8s.io", "leases", None, &["create"]);
        add(
            &scope,
            "coordination.k8s.io",
            "leases",
            Some(&leases),
            &["get", "update"],
        );
    }
    minimise(wanted)
}

/// Adds with `add` what `rule` grants, in the namespaces both
/// `plugin_namespaces` (None: any) and the rule allow.
fn add_rule(
    add: &mut impl FnMut(&Scope, &str, &str, Option<&[String]>, &[&str]),
    plugin_namespaces: Option<&[String]>,
    rule: &PermissionRule,
) {
    for scope in scopes(plugin_namespaces, rule.namespaces.as_deref()) {
        for resource in &rule.resources {
            add(
                &scope,
                &rule.group,
                resource,
                None,
                &applying(rule, resource),
            );
        }
    }
}

/// The verbs `rule` grants on `resource`, with `create` beside a `patch` of
/// a resource (not a subresource): a plugin's apply of an absent object
/// creates it.
fn applying<'r>(rule: &'r PermissionRule, resource: &str) -> Vec<&'r str> {
    let mut verbs: Vec<&str> = rule.verbs.iter().map(String::as_str).collect();
    if !resource.contains('/') && verbs.contains(&"patch") && !verbs.contains(&"create") {
        verbs.push("create");
    }
    verbs
}

/// The scopes a rule applies in: the intersection of the plugin's and the
/// rule's namespaces (both None: cluster-wide; empty: nowhere).
fn scopes(plugin: Option<&[String]>, rule: Option<&[String]>) -> Vec<Scope> {
    let namespaces: BTreeSet<&String> = match (plugin, rule) {
        (None, None) => return vec![Scope::Cluster],
        (Some(list), None) | (None, Some(list)) => list.iter().collect(),
        (Some(a), Some(b)) => a.iter().filter(|n| b.contains(n)).collect(),
    };
    namespaces
        .into_iter()
        .map(|n| Scope::Namespace(n.clone()))
        .collect()
}

/// Whether an RBAC resource entry `rule` matches `resource` (upstream's
/// matching: `*`, exact, or `*/sub` for any resource's subresource).
fn resource_covers(rule: &str, resource: &str) -> bool {
    rule == "*"
        || rule == resource
        || rule
            .strip_prefix("*/")
            .is_some_and(|sub| resource.split_once('/').is_some_and(|(_, s)| s == sub))
}

/// Whether `by` (verbs `by_verbs`) allows `verb` on `target`.
fn covers(by: &Target, by_verbs: &BTreeSet<String>, target: &Target, verb: &str) -> bool {
    (by_verbs.contains("*") || by_verbs.contains(verb))
        && (by.group == "*" || by.group == target.group)
        && resource_covers(&by.resource, &target.resource)
        && match (&by.names, &target.names) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(a), Some(b)) => b.is_subset(a),
        }
}

/// Drops what wider rules already allow, then merges into PolicyRules.
fn minimise(wanted: BTreeMap<Scope, BTreeMap<Target, BTreeSet<String>>>) -> Rbac {
    let empty = BTreeMap::new();
    let cluster = wanted.get(&Scope::Cluster).unwrap_or(&empty);
    let mut rbac = Rbac::default();
    for (scope, targets) in &wanted {
        let mut kept: BTreeMap<Target, BTreeSet<String>> = BTreeMap::new();
        for (target, verbs) in targets {
            let verbs: BTreeSet<String> = if verbs.contains("*") {
                ["*".to_string()].into()
            } else {
                verbs.clone()
            };
            let remaining: BTreeSet<String> = verbs
                .into_iter()
                .filter(|verb| {
                    let wider = |(other, other_verbs): (&Target, &BTreeSet<String>)| {
                        other != target && covers(other, other_verbs, target, verb)
                    };
                    let in_cluster = *scope != Scope::Cluster
                        && cluster.iter().any(|(t, v)| covers(t, v, target, verb));
                    !(in_cluster || targets.iter().any(wider))
                })
                .collect();
            if !remaining.is_empty() {
                kept.insert(target.clone(), remaining);
            }
        }
        let rules = merge(kept);
        if rules.is_empty() {
            continue;
        }
        match scope {
            Scope::Cluster => rbac.cluster = rules,
            Scope::Namespace(ns) => {
                rbac.namespaced.insert(ns.clone(), rules);
            }
        }
    }
    rbac
}

/// One PolicyRule per (group, verbs, names), resources sorted.
fn merge(targets: BTreeMap<Target, BTreeSet<String>>) -> Vec<PolicyRule> {
    type Key = (String, Vec<String>, Option<Vec<String>>);
    let mut grouped: BTreeMap<Key, BTreeSet<String>> = BTreeMap::new();
    for (target, verbs) in targets {
        let key = (
            target.group,
            order_verbs(verbs),
            target.names.map(|n| n.into_iter().collect()),
        );
        grouped.entry(key).or_default().insert(target.resource);
    }
    grouped
        .into_iter()
        .map(|((group, verbs, names), resources)| PolicyRule {
            api_groups: Some(vec![group]),
            resources: Some(resources.into_iter().collect()),
            resource_names: names,
            verbs,
            non_resource_urls: None,
        })
        .collect()
}

/// Verbs in Kubernetes' usual order (get list watch create update patch
/// delete), others after.
fn order_verbs(verbs: BTreeSet<String>) -> Vec<String> {
    const ORDER: [&str; 8] = [
        "*", "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    let mut v: Vec<String> = verbs.into_iter().collect();
    v.sort_by_key(|verb| {
        (
            ORDER.iter().position(|o| o == verb).unwrap_or(ORDER.len()),
            verb.clone(),
        )
    });
    v
}

impl Rbac {
    /// The name of every generated object: `wasmctrl:<namespace>:<sa>`
    /// (ClusterRoles are cluster-wide, so the name says whose they are).
    pub fn object_name(options: &RbacOptions) -> String {
        format!("wasmctrl:{}:{}", options.namespace, options.service_account)
    }

    /// The ClusterRole, ClusterRoleBinding, and a Role and RoleBinding per
    /// namespace, binding them to the ServiceAccount, as JSON objects.
    pub fn objects(&self, options: &RbacOptions) -> Result<Vec<serde_json::Value>, RbacError> {
        syntax::namespace(&options.namespace).map_err(|e| RbacError::Namespace(e.message))?;
        syntax::dns_subdomain("service account", &options.service_account)
            .map_err(|e| RbacError::ServiceAccount(e.message))?;
        let name = Self::object_name(options);
        let meta = |namespace: Option<&str>| ObjectMeta {
            name: Some(name.clone()),
            namespace: namespace.map(str::to_string),
            labels: Some([("app.kubernetes.io/name".to_string(), "wasmctrl".to_string())].into()),
            ..ObjectMeta::default()
        };
        let subjects = Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: options.service_account.clone(),
            namespace: Some(options.namespace.clone()),
            api_group: None,
        }]);
        let role_ref = |kind: &str| RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: kind.into(),
            name: name.clone(),
        };
        let json =
            |v: Result<serde_json::Value, serde_json::Error>| v.expect("RBAC objects serialize");
        let mut out = Vec::new();
        if !self.cluster.is_empty() {
            out.push(json(serde_json::to_value(ClusterRole {
                metadata: meta(None),
                rules: Some(self.cluster.clone()),
                aggregation_rule: None,
            })));
            out.push(json(serde_json::to_value(ClusterRoleBinding {
                metadata: meta(None),
                role_ref: role_ref("ClusterRole"),
                subjects: subjects.clone(),
            })));
        }
        for (ns, rules) in &self.namespaced {
            out.push(json(serde_json::to_value(Role {
                metadata: meta(Some(ns)),
                rules: Some(rules.clone()),
            })));
            out.push(json(serde_json::to_value(RoleBinding {
                metadata: meta(Some(ns)),
                role_ref: role_ref("Role"),
                subjects: subjects.clone(),
            })));
        }
        Ok(out)
    }

    /// The objects as a multi-document YAML stream for `kubectl apply -f -`.
    pub fn to_yaml(&self, options: &RbacOptions) -> Result<String, RbacError> {
        let mut out = String::new();
        for object in self.objects(options)? {
            out.push_str("---\n");
            out.push_str(&serde_norway::to_string(&object).expect("JSON values are YAML"));
        }
        Ok(out)
    }
}

/// Access reviews asked per plugin at most (a grant of a few rules needs a
/// few dozen).
pub const MAX_REVIEWS: usize = 1024;

/// The accesses of `plugin`'s grant that the API server's authorization
/// refuses to this host, one SelfSubjectAccessReview per verb × resource ×
/// namespace of each rule (`verb group/resource in namespace …`). Err: the
/// reviews could not be asked (the caller decides what that means).
pub async fn denied(
    client: &kube::Client,
    plugin: &PluginConfig,
) -> Result<Vec<String>, kube::Error> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut denied = Vec::new();
    let mut asked = 0;
    for rule in &plugin.permissions {
        for (namespace, resource, verb) in accesses(plugin, rule) {
            if asked == MAX_REVIEWS {
                tracing::warn!(plugin = %plugin.name, "the grant needs more than {MAX_REVIEWS} access reviews; the rest is not checked at start");
                return Ok(denied);
            }
            asked += 1;
            let (resource, subresource) = match resource.split_once('/') {
                Some((r, s)) => (r.to_string(), Some(s.to_string())),
                None => (resource.clone(), None),
            };
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(rule.group.clone()),
                        resource: Some(resource.clone()),
                        subresource: subresource.clone(),
                        verb: Some(verb.clone()),
                        namespace: namespace.clone(),
                        ..ResourceAttributes::default()
                    }),
                    ..SelfSubjectAccessReviewSpec::default()
                },
                ..SelfSubjectAccessReview::default()
            };
            let answer = api.create(&PostParams::default(), &review).await?;
            if !answer.status.is_some_and(|s| s.allowed) {
                let group = if rule.group.is_empty() {
                    "core"
                } else {
                    &rule.group
                };
                let resource = match &subresource {
                    Some(s) => format!("{resource}/{s}"),
                    None => resource,
                };
                denied.push(match &namespace {
                    Some(ns) => format!("{verb} {group}/{resource} in namespace {ns}"),
                    None => format!("{verb} {group}/{resource} cluster-wide"),
                });
            }
        }
    }
    Ok(denied)
}

/// (namespace, resource, verb) of every access `rule` grants `plugin`,
/// with the `create` an apply needs beside a `patch` (as [`generate`]
/// grants it).
fn accesses(plugin: &PluginConfig, rule: &PermissionRule) -> Vec<(Option<String>, String, String)> {
    let namespaces: Vec<Option<String>> =
        scopes(plugin.namespaces.as_deref(), rule.namespaces.as_deref())
            .into_iter()
            .map(|s| match s {
                Scope::Cluster => None,
                Scope::Namespace(n) => Some(n),
            })
            .collect();
    let mut out = Vec::new();
    for ns in &namespaces {
        for resource in &rule.resources {
            for verb in applying(rule, resource) {
                out.push((ns.clone(), resource.clone(), verb.to_string()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
