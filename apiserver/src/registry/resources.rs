//! The resource registry: which group/version/resource triples are served,
//! with the scope, names and subresources discovery advertises. Built-in kinds
//! are fixed; CRDs add and remove entries at run time.

use std::sync::Arc;

use serde_json::Value;

/// Where objects of a resource are stored, independent of the served version
/// (every version of a CRD, and core/events.k8s.io Events, share one store).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct GroupResource {
    pub(crate) group: String,
    pub(crate) resource: String,
}

impl GroupResource {
    pub(crate) fn new(group: &str, resource: &str) -> Self {
        GroupResource {
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }
}

/// How a served version presents stored objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum View {
    /// Stored shape; only `apiVersion` is rewritten to the served version.
    Plain,
    /// `events.k8s.io/v1` Event over a store of core v1 Events.
    EventsV1,
}

/// JSON paths of a scale subresource (`.spec.replicas` style).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ScalePaths {
    pub(crate) spec_replicas: String,
    pub(crate) status_replicas: String,
    pub(crate) label_selector: Option<String>,
}

/// One served resource at one group/version.
#[derive(Clone, Debug)]
pub(crate) struct ResourceInfo {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) plural: String,
    pub(crate) singular: String,
    pub(crate) kind: String,
    pub(crate) namespaced: bool,
    pub(crate) short_names: Vec<String>,
    pub(crate) categories: Vec<String>,
    /// Has a `/status` subresource (status writes are separated from spec).
    pub(crate) status: bool,
    pub(crate) scale: Option<ScalePaths>,
    /// `metadata.generation` is maintained.
    pub(crate) generation: bool,
    /// Built-in kinds accept strategic merge patch; custom resources do not.
    pub(crate) builtin: bool,
    /// DELETE answers with the object instead of a Success status.
    pub(crate) delete_returns_object: bool,
    /// A review resource (access reviews, whoami): only `create`, which
    /// answers at once and stores nothing.
    pub(crate) review: bool,
    /// Serves the TokenRequest subresource `NAME/token` (service accounts).
    pub(crate) token_request: bool,
    pub(crate) storage: GroupResource,
    /// apiVersion objects are stored with (the CRD storage version; `v1`
    /// for both Event APIs).
    pub(crate) storage_api_version: String,
    pub(crate) view: View,
    /// The CRD's `openAPIV3Schema` for this version, if any.
    pub(crate) schema: Option<Value>,
    /// The CRD's `additionalPrinterColumns` for this version, if any.
    pub(crate) printer_columns: Option<Vec<Value>>,
}

impl ResourceInfo {
    /// `apps/v1`, or `v1` for the core group.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `ConfigMapList`.
    pub(crate) fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// The verbs this resource supports.
    pub(crate) fn verbs(&self) -> Vec<&'static str> {
        if self.review {
            return vec!["create"];
        }
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }
}

/// A builder for the built-in table below, to keep it one line per kind.
struct B {
    info: ResourceInfo,
}

impl B {
    fn new(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> B {
        B {
            info: ResourceInfo {
                group: group.into(),
                version: version.into(),
                plural: plural.into(),
                singular: kind.to_lowercase(),
                kind: kind.into(),
                namespaced,
                short_names: vec![],
                categories: vec![],
                status: false,
                scale: None,
                generation: false,
                builtin: true,
                delete_returns_object: false,
                review: false,
                token_request: false,
                storage: GroupResource::new(group, plural),
                storage_api_version: if group.is_empty() {
                    version.to_string()
                } else {
                    format!("{group}/{version}")
                },
                view: View::Plain,
                schema: None,
                printer_columns: None,
            },
        }
    }
    fn short(mut self, s: &[&str]) -> B {
        self.info.short_names = s.iter().map(|s| s.to_string()).collect();
        self
    }
    fn all(mut self) -> B {
        self.info.categories = vec!["all".into()];
        self
    }
    fn cats(mut self, c: &[&str]) -> B {
        self.info.categories = c.iter().map(|s| s.to_string()).collect();
        self
    }
    fn status(mut self) -> B {
        self.info.status = true;
        self
    }
    fn scale(mut self, selector: Option<&str>) -> B {
        self.info.scale = Some(ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: selector.map(str::to_string),
        });
        self
    }
    fn generation(mut self) -> B {
        self.info.generation = true;
        self
    }
    fn returns_object(mut self) -> B {
        self.info.delete_returns_object = true;
        self
    }
    fn review(mut self) -> B {
        self.info.review = true;
        self
    }
    fn token_request(mut self) -> B {
        self.info.token_request = true;
        self
    }
    fn done(self) -> ResourceInfo {
        self.info
    }
}

/// The built-in kinds served from an empty server.
pub(crate) fn builtins() -> Vec<ResourceInfo> {
    let mut v = vec![
        B::new("", "v1", "namespaces", "Namespace", false)
            .short(&["ns"])
            .status()
            .returns_object()
            .done(),
        B::new("", "v1", "configmaps", "ConfigMap", true)
            .short(&["cm"])
            .done(),
        B::new("", "v1", "secrets", "Secret", true).done(),
        B::new("", "v1", "services", "Service", true)
            .short(&["svc"])
            .all()
            .status()
            .returns_object()
            .done(),
        B::new("", "v1", "serviceaccounts", "ServiceAccount", true)
            .short(&["sa"])
            .token_request()
            .done(),
        B::new("", "v1", "pods", "Pod", true)
            .short(&["po"])
            .all()
            .status()
            .returns_object()
            .done(),
        B::new("", "v1", "events", "Event", true)
            .short(&["ev"])
            .done(),
        B::new("", "v1", "endpoints", "Endpoints", true)
            .short(&["ep"])
            .done(),
        B::new(
            "discovery.k8s.io",
            "v1",
            "endpointslices",
            "EndpointSlice",
            true,
        )
        .done(),
        B::new("apps", "v1", "deployments", "Deployment", true)
            .short(&["deploy"])
            .all()
            .status()
            .scale(None)
            .generation()
            .done(),
        B::new("apps", "v1", "statefulsets", "StatefulSet", true)
            .short(&["sts"])
            .all()
            .status()
            .scale(None)
            .generation()
            .done(),
        B::new("apps", "v1", "daemonsets", "DaemonSet", true)
            .short(&["ds"])
            .all()
            .status()
            .generation()
            .done(),
        B::new("apps", "v1", "replicasets", "ReplicaSet", true)
            .short(&["rs"])
            .all()
            .status()
            .scale(None)
            .generation()
            .done(),
        B::new("batch", "v1", "jobs", "Job", true)
            .all()
            .status()
            .generation()
            .done(),
        B::new("batch", "v1", "cronjobs", "CronJob", true)
            .short(&["cj"])
            .all()
            .status()
            .generation()
            .done(),
        B::new("coordination.k8s.io", "v1", "leases", "Lease", true).done(),
        B::new("networking.k8s.io", "v1", "ingresses", "Ingress", true)
            .short(&["ing"])
            .status()
            .generation()
            .done(),
        B::new(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
        )
        .short(&["pdb"])
        .status()
        .generation()
        .done(),
        B::new("rbac.authorization.k8s.io", "v1", "roles", "Role", true).done(),
        B::new(
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
        )
        .done(),
        B::new(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterroles",
            "ClusterRole",
            false,
        )
        .done(),
        B::new(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
        )
        .done(),
        B::new(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            false,
        )
        .cats(&["api-extensions"])
        .generation()
        .done(),
        B::new(
            "admissionregistration.k8s.io",
            "v1",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            false,
        )
        .cats(&["api-extensions"])
        .generation()
        .done(),
        B::new(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
        )
        .short(&["crd", "crds"])
        .cats(&["api-extensions"])
        .status()
        .generation()
        .returns_object()
        .done(),
    ];
    // Access and identity reviews (`kubectl auth can-i|whoami`), answered
    // by the server's authenticator and authorizer (module `reviews`).
    for (group, plural, kind, namespaced) in [
        (
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            "SelfSubjectAccessReview",
            false,
        ),
        (
            "authorization.k8s.io",
            "selfsubjectrulesreviews",
            "SelfSubjectRulesReview",
            false,
        ),
        (
            "authorization.k8s.io",
            "subjectaccessreviews",
            "SubjectAccessReview",
            false,
        ),
        (
            "authorization.k8s.io",
            "localsubjectaccessreviews",
            "LocalSubjectAccessReview",
            true,
        ),
        (
            "authentication.k8s.io",
            "selfsubjectreviews",
            "SelfSubjectReview",
            false,
        ),
        (
            "authentication.k8s.io",
            "tokenreviews",
            "TokenReview",
            false,
        ),
    ] {
        v.push(
            B::new(group, "v1", plural, kind, namespaced)
                .review()
                .done(),
        );
    }
    let mut ev = B::new("events.k8s.io", "v1", "events", "Event", true)
        .short(&["ev"])
        .done();
    ev.storage = GroupResource::new("", "events");
    ev.storage_api_version = "v1".into();
    ev.view = View::EventsV1;
    v.push(ev);
    v
}

/// All served resources, by group then version (preferred version first).
#[derive(Debug, Clone)]
pub(crate) struct Registry {
    /// group → ordered versions → resources (in insertion order).
    groups: Vec<GroupEntry>,
}

/// One API group with its versions in preference order.
#[derive(Debug, Clone)]
pub(crate) struct GroupEntry {
    pub(crate) name: String,
    pub(crate) versions: Vec<(String, Vec<Arc<ResourceInfo>>)>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// A registry holding the built-in kinds.
    pub(crate) fn new() -> Self {
        let mut r = Registry { groups: Vec::new() };
        for info in builtins() {
            r.insert(info);
        }
        r
    }

    fn insert(&mut self, info: ResourceInfo) {
        let info = Arc::new(info);
        let g = match self.groups.iter_mut().position(|g| g.name == info.group) {
            Some(i) => &mut self.groups[i],
            None => {
                self.groups.push(GroupEntry {
                    name: info.group.clone(),
                    versions: Vec::new(),
                });
                self.groups.last_mut().expect("just pushed")
            }
        };
        match g.versions.iter_mut().find(|(v, _)| *v == info.version) {
            Some((_, list)) => {
                list.retain(|r| r.plural != info.plural);
                list.push(info);
            }
            None => g.versions.push((info.version.clone(), vec![info])),
        }
    }

    /// Replaces every served version of the custom resource `storage` with
    /// `infos` (already in preference order); an empty list removes it.
    pub(crate) fn set_custom(&mut self, storage: &GroupResource, infos: Vec<ResourceInfo>) {
        for g in &mut self.groups {
            if g.name != storage.group {
                continue;
            }
            for (_, list) in &mut g.versions {
                list.retain(|r| r.storage != *storage || r.builtin);
            }
            g.versions.retain(|(_, list)| !list.is_empty());
        }
        self.groups.retain(|g| !g.versions.is_empty());
        for info in infos {
            self.insert(info);
        }
        // Keep the group's versions in Kubernetes priority order so the first
        // is the preferred one (kube-rs takes the first in aggregated discovery).
        if let Some(g) = self.groups.iter_mut().find(|g| g.name == storage.group) {
            g.versions.sort_by(|a, b| compare_versions(&a.0, &b.0));
        }
    }

    /// Groups in serving order.
    pub(crate) fn groups(&self) -> &[GroupEntry] {
        &self.groups
    }

    /// The resource served at `group/version/plural`.
    pub(crate) fn find(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<Arc<ResourceInfo>> {
        self.groups
            .iter()
            .find(|g| g.name == group)?
            .versions
            .iter()
            .find(|(v, _)| v == version)?
            .1
            .iter()
            .find(|r| r.plural == plural)
            .cloned()
    }

    /// Resources of one group/version, if served.
    pub(crate) fn resources(&self, group: &str, version: &str) -> Option<&[Arc<ResourceInfo>]> {
        self.groups
            .iter()
            .find(|g| g.name == group)?
            .versions
            .iter()
            .find(|(v, _)| v == version)
            .map(|(_, l)| l.as_slice())
    }

    /// The preferred served info of a store (used to render objects for GC
    /// and watch bookkeeping).
    pub(crate) fn by_storage(&self, storage: &GroupResource) -> Option<Arc<ResourceInfo>> {
        let mut fallback = None;
        for g in &self.groups {
            for (_, list) in &g.versions {
                for r in list {
                    if r.storage == *storage {
                        if r.view == View::Plain {
                            return Some(r.clone());
                        }
                        fallback.get_or_insert_with(|| r.clone());
                    }
                }
            }
        }
        fallback
    }
}

/// Kubernetes version priority: GA > beta > alpha, higher numbers first,
/// anything non-conforming last in lexical order.
pub(crate) fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    fn key(v: &str) -> (u8, u64, u64, String) {
        let Some(rest) = v.strip_prefix('v') else {
            return (3, 0, 0, v.to_string());
        };
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        let Ok(major) = digits.parse::<u64>() else {
            return (3, 0, 0, v.to_string());
        };
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return (0, u64::MAX - major, 0, String::new());
        }
        for (rank, word) in [(1u8, "beta"), (2u8, "alpha")] {
            if let Some(n) = tail.strip_prefix(word)
                && let Ok(minor) = n.parse::<u64>()
            {
                return (rank, u64::MAX - major, u64::MAX - minor, String::new());
            }
        }
        (3, 0, 0, v.to_string())
    }
    key(a).cmp(&key(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_priority() {
        let mut v = vec!["v1alpha1", "v1", "v2beta1", "v2", "foo", "v1beta2"];
        v.sort_by(|a, b| compare_versions(a, b));
        assert_eq!(v, vec!["v2", "v1", "v2beta1", "v1beta2", "v1alpha1", "foo"]);
    }

    #[test]
    fn finds_builtins_and_shared_event_store() {
        let r = Registry::new();
        let d = r.find("apps", "v1", "deployments").unwrap();
        assert!(d.status && d.scale.is_some() && d.namespaced);
        let e = r.find("events.k8s.io", "v1", "events").unwrap();
        assert_eq!(e.storage, GroupResource::new("", "events"));
        assert_eq!(
            r.by_storage(&GroupResource::new("", "events"))
                .unwrap()
                .group,
            ""
        );
    }
}
