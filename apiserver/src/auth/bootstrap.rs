//! The RBAC objects a server starts with, as upstream's bootstrap policy
//! defines them: what every authenticated identity needs (discovery,
//! self-reviews), `cluster-admin` for `system:masters`, and the
//! user-facing `view`, `edit` and `admin` roles. Created when missing
//! (`ApiServer`'s seeding), so a user who deletes one gets it back on
//! restart, as upstream reconciles its policy.

use serde_json::{Value, json};

use super::identity;
use super::rbac::GROUP;

/// Label and annotation upstream puts on the roles it bootstraps.
const BOOTSTRAP_LABEL: (&str, &str) = ("kubernetes.io/bootstrapping", "rbac-defaults");
const AUTOUPDATE_ANNOTATION: (&str, &str) = ("rbac.authorization.kubernetes.io/autoupdate", "true");

/// The default ClusterRoles and ClusterRoleBindings a server with RBAC
/// starts with, as upstream's bootstrap policy defines them (only those an
/// API server without nodes and controllers needs):
///
/// | ClusterRole | Grants | Bound to |
/// |---|---|---|
/// | `cluster-admin` | everything | group `system:masters` |
/// | `system:discovery` | `get` on `/api`, `/apis` (and below), `/openapi/*`, `/version`, `/healthz`, `/livez`, `/readyz` | group `system:authenticated` |
/// | `system:basic-user` | `create` selfsubjectaccessreviews, selfsubjectrulesreviews, selfsubjectreviews | group `system:authenticated` |
/// | `system:public-info-viewer` | `get` on `/version`, `/healthz`, `/livez`, `/readyz` | groups `system:authenticated`, `system:unauthenticated` |
/// | `view`, `edit`, `admin` | the user-facing roles, for a RoleBinding in a namespace: aggregated from the ClusterRoles labelled `rbac.authorization.k8s.io/aggregate-to-view` (`-edit`, `-admin`), `view` ⊂ `edit` ⊂ `admin` | nobody |
/// | `system:aggregate-to-view`, `-edit`, `-admin` | what upstream gives those roles over the kinds this server serves | nobody |
///
/// Returned as `(resource, object)` pairs, roles first.
pub(crate) fn policy() -> Vec<(&'static str, Value)> {
    let meta = |name: &str| {
        json!({
            "name": name,
            "labels": {BOOTSTRAP_LABEL.0: BOOTSTRAP_LABEL.1},
            "annotations": {AUTOUPDATE_ANNOTATION.0: AUTOUPDATE_ANNOTATION.1},
        })
    };
    let role = |name: &str, rules: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": meta(name), "rules": rules})
    };
    let binding = |name: &str, groups: &[&str]| {
        let subjects: Vec<Value> = groups
            .iter()
            .map(|g| json!({"apiGroup": GROUP, "kind": "Group", "name": g}))
            .collect();
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": meta(name),
            "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": name},
            "subjects": subjects})
    };
    vec![
        (
            "clusterroles",
            role(
                "cluster-admin",
                json!([
                    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                    {"nonResourceURLs": ["*"], "verbs": ["*"]},
                ]),
            ),
        ),
        (
            "clusterroles",
            role(
                "system:discovery",
                json!([{"nonResourceURLs": [
                    "/livez", "/readyz", "/healthz", "/version", "/version/",
                    "/openapi", "/openapi/*", "/api", "/api/*", "/apis", "/apis/*",
                ], "verbs": ["get"]}]),
            ),
        ),
        (
            "clusterroles",
            role(
                "system:basic-user",
                json!([
                    {"apiGroups": ["authorization.k8s.io"],
                     "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                     "verbs": ["create"]},
                    {"apiGroups": ["authentication.k8s.io"],
                     "resources": ["selfsubjectreviews"], "verbs": ["create"]},
                ]),
            ),
        ),
        (
            "clusterroles",
            role(
                "system:public-info-viewer",
                json!([{"nonResourceURLs": ["/livez", "/readyz", "/healthz", "/version", "/version/"],
                    "verbs": ["get"]}]),
            ),
        ),
        ("clusterroles", aggregated("admin", "admin", &[])),
        (
            "clusterroles",
            aggregated("edit", "edit", &[AGGREGATE_TO_ADMIN]),
        ),
        (
            "clusterroles",
            aggregated("view", "view", &[AGGREGATE_TO_EDIT]),
        ),
        (
            "clusterroles",
            aggregate_to("admin", AGGREGATE_TO_ADMIN, admin_rules()),
        ),
        (
            "clusterroles",
            aggregate_to("edit", AGGREGATE_TO_EDIT, edit_rules()),
        ),
        (
            "clusterroles",
            aggregate_to("view", AGGREGATE_TO_VIEW, view_rules()),
        ),
        (
            "clusterrolebindings",
            binding("cluster-admin", &[identity::SYSTEM_MASTERS]),
        ),
        (
            "clusterrolebindings",
            binding("system:discovery", &[identity::ALL_AUTHENTICATED]),
        ),
        (
            "clusterrolebindings",
            binding("system:basic-user", &[identity::ALL_AUTHENTICATED]),
        ),
        (
            "clusterrolebindings",
            binding(
                "system:public-info-viewer",
                &[identity::ALL_AUTHENTICATED, identity::ALL_UNAUTHENTICATED],
            ),
        ),
    ]
}

const AGGREGATE_TO_ADMIN: (&str, &str) = ("rbac.authorization.k8s.io/aggregate-to-admin", "true");
const AGGREGATE_TO_EDIT: (&str, &str) = ("rbac.authorization.k8s.io/aggregate-to-edit", "true");
const AGGREGATE_TO_VIEW: (&str, &str) = ("rbac.authorization.k8s.io/aggregate-to-view", "true");

/// A user-facing role (`admin`, `edit`, `view`): no rules of its own, the
/// union of the ClusterRoles labelled `…/aggregate-to-<to>`, itself
/// carrying `labels` (so `view` aggregates into `edit`).
fn aggregated(name: &str, to: &str, labels: &[(&str, &str)]) -> Value {
    let mut all = serde_json::Map::new();
    all.insert(BOOTSTRAP_LABEL.0.to_owned(), json!(BOOTSTRAP_LABEL.1));
    for (key, value) in labels {
        all.insert((*key).to_owned(), json!(value));
    }
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name, "labels": all,
            "annotations": {AUTOUPDATE_ANNOTATION.0: AUTOUPDATE_ANNOTATION.1}},
        "aggregationRule": {"clusterRoleSelectors": [
            {"matchLabels": {format!("rbac.authorization.k8s.io/aggregate-to-{to}"): "true"}}]},
        "rules": []})
}

/// `system:aggregate-to-<to>`: the rules upstream gives a user-facing role.
fn aggregate_to(to: &str, label: (&str, &str), rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": format!("system:aggregate-to-{to}"),
            "labels": {BOOTSTRAP_LABEL.0: BOOTSTRAP_LABEL.1, label.0: label.1},
            "annotations": {AUTOUPDATE_ANNOTATION.0: AUTOUPDATE_ANNOTATION.1}},
        "rules": rules})
}

const READ: [&str; 3] = ["get", "list", "watch"];
const WRITE: [&str; 5] = ["create", "delete", "deletecollection", "patch", "update"];

/// Upstream's `system:aggregate-to-view`, less the `extensions` group this
/// server does not serve. No Secrets: reading them would let a viewer act
/// as any service account of the namespace.
fn view_rules() -> Value {
    json!([
        {"apiGroups": [""], "verbs": READ, "resources": [
            "configmaps", "endpoints", "persistentvolumeclaims",
            "persistentvolumeclaims/status", "pods", "replicationcontrollers",
            "replicationcontrollers/scale", "serviceaccounts", "services",
            "services/status"]},
        {"apiGroups": [""], "verbs": READ, "resources": [
            "bindings", "events", "limitranges", "namespaces/status", "pods/log",
            "pods/status", "replicationcontrollers/status", "resourcequotas",
            "resourcequotas/status"]},
        {"apiGroups": [""], "verbs": READ, "resources": ["namespaces"]},
        {"apiGroups": ["discovery.k8s.io"], "verbs": READ, "resources": ["endpointslices"]},
        {"apiGroups": ["apps"], "verbs": READ, "resources": [
            "controllerrevisions", "daemonsets", "daemonsets/status", "deployments",
            "deployments/scale", "deployments/status", "replicasets", "replicasets/scale",
            "replicasets/status", "statefulsets", "statefulsets/scale",
            "statefulsets/status"]},
        {"apiGroups": ["autoscaling"], "verbs": READ, "resources": [
            "horizontalpodautoscalers", "horizontalpodautoscalers/status"]},
        {"apiGroups": ["batch"], "verbs": READ, "resources": [
            "cronjobs", "cronjobs/status", "jobs", "jobs/status"]},
        {"apiGroups": ["policy"], "verbs": READ, "resources": [
            "poddisruptionbudgets", "poddisruptionbudgets/status"]},
        {"apiGroups": ["networking.k8s.io"], "verbs": READ, "resources": [
            "ingresses", "ingresses/status", "networkpolicies"]},
    ])
}

/// Upstream's `system:aggregate-to-edit`, less the `extensions` group.
fn edit_rules() -> Value {
    json!([
        {"apiGroups": [""], "verbs": READ, "resources": [
            "pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets",
            "services/proxy"]},
        {"apiGroups": [""], "verbs": ["impersonate"], "resources": ["serviceaccounts"]},
        {"apiGroups": [""], "verbs": WRITE, "resources": [
            "pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"]},
        {"apiGroups": [""], "verbs": ["create"], "resources": ["pods/eviction"]},
        {"apiGroups": [""], "verbs": WRITE, "resources": [
            "configmaps", "events", "persistentvolumeclaims", "replicationcontrollers",
            "replicationcontrollers/scale", "secrets", "serviceaccounts", "services",
            "services/proxy"]},
        {"apiGroups": [""], "verbs": ["create"], "resources": ["serviceaccounts/token"]},
        {"apiGroups": ["apps"], "verbs": WRITE, "resources": [
            "daemonsets", "deployments", "deployments/rollback", "deployments/scale",
            "replicasets", "replicasets/scale", "statefulsets", "statefulsets/scale"]},
        {"apiGroups": ["autoscaling"], "verbs": WRITE, "resources": ["horizontalpodautoscalers"]},
        {"apiGroups": ["batch"], "verbs": WRITE, "resources": ["cronjobs", "jobs"]},
        {"apiGroups": ["policy"], "verbs": WRITE, "resources": ["poddisruptionbudgets"]},
        {"apiGroups": ["networking.k8s.io"], "verbs": WRITE, "resources": [
            "ingresses", "networkpolicies"]},
    ])
}

/// Upstream's `system:aggregate-to-admin`: access reviews in the
/// namespace, and its Roles and RoleBindings.
fn admin_rules() -> Value {
    json!([
        {"apiGroups": ["authorization.k8s.io"], "verbs": ["create"],
         "resources": ["localsubjectaccessreviews"]},
        {"apiGroups": ["rbac.authorization.k8s.io"],
         "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
         "resources": ["rolebindings", "roles"]},
    ])
}
