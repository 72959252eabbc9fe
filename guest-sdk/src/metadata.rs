use std::fmt;

use crate::bindings::wasmctrl::reconciler::types as wit;

/// The key of the object a reconcile is asked for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    /// None for cluster-scoped objects.
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectKey {
    /// The key of a namespaced object.
    pub fn namespaced(namespace: &str, name: &str) -> Self {
        Self {
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    /// The key of a cluster-scoped object.
    pub fn cluster(name: &str) -> Self {
        Self {
            namespace: None,
            name: name.into(),
        }
    }

    /// The namespace, or a permanent error for a key without one (a
    /// namespaced kind's reconciler can only get such a key by mistake).
    pub fn require_namespace(&self) -> Result<&str, crate::Error> {
        self.namespace
            .as_deref()
            .ok_or_else(|| crate::Error::permanent(format!("key {self} has no namespace")))
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// A Kubernetes group/version/kind; the core group is "".
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Gvk {
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl Gvk {
    /// `Gvk::new("apps", "v1", "Deployment")`; typed resources have
    /// `Deployment::gvk()` (see [`Resource`](crate::Resource)).
    pub fn new(group: &str, version: &str, kind: &str) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        }
    }

    pub(crate) fn into_wit(self) -> wit::Gvk {
        wit::Gvk {
            group: self.group,
            version: self.version,
            kind: self.kind,
        }
    }
}

/// How a watched object maps to the key of the reconciled object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchMapping {
    /// Through its ownerReferences to the reconciled kind.
    Owner,
    /// To the reconciled object with the same namespace and name.
    SameName,
    /// To the reconciled object (same namespace) named by this label's value.
    Label(String),
}

/// What a plugin reconciles, watches and needs permission for.
///
/// Built with chained calls:
/// `Metadata::new("webapp", "0.1.0", gvk).owns(deployments).permission("apps", &["deployments"], &["get", "patch"])`.
#[derive(Debug, Clone)]
pub struct Metadata {
    name: String,
    version: String,
    reconciles: Gvk,
    owns: Vec<Gvk>,
    watches: Vec<(Gvk, WatchMapping)>,
    permissions: Vec<(String, Vec<String>, Vec<String>)>,
    outbound: Vec<(String, Vec<String>)>,
}

impl Metadata {
    /// A plugin named `name`, at `version`, reconciling objects of kind `reconciles`.
    pub fn new(name: &str, version: &str, reconciles: Gvk) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            reconciles,
            owns: Vec::new(),
            watches: Vec::new(),
            permissions: Vec::new(),
            outbound: Vec::new(),
        }
    }

    /// Objects of this kind controlled by a reconciled object enqueue their owner.
    pub fn owns(mut self, kind: Gvk) -> Self {
        self.owns.push(kind);
        self
    }

    /// Objects of this kind enqueue the key `mapping` names.
    pub fn watches(mut self, kind: Gvk, mapping: WatchMapping) -> Self {
        self.watches.push((kind, mapping));
        self
    }

    /// The plugin needs `verbs` on `resources` of API `group` ("" is core).
    /// The host refuses to load a plugin asking for more than its grant.
    pub fn permission(mut self, group: &str, resources: &[&str], verbs: &[&str]) -> Self {
        self.permissions.push((
            group.into(),
            resources.iter().map(|r| r.to_string()).collect(),
            verbs.iter().map(|v| v.to_string()).collect(),
        ));
        self
    }

    /// The plugin calls `url` (`scheme://host[:port][/path-prefix]`,
    /// `*.example.com` for its subdomains) outside the cluster with
    /// `methods` (empty: any), through [`crate::http`]. The host refuses to
    /// load a plugin declaring more than its `outbound` grant.
    pub fn outbound(mut self, url: &str, methods: &[&str]) -> Self {
        self.outbound
            .push((url.into(), methods.iter().map(|m| m.to_string()).collect()));
        self
    }

    /// The declared outbound destinations, as the `outbound` export
    /// returns them.
    pub(crate) fn outbound_wit(&self) -> Vec<wit::OutboundRule> {
        self.outbound
            .iter()
            .map(|(url, methods)| wit::OutboundRule {
                url: url.clone(),
                methods: methods.clone(),
            })
            .collect()
    }

    pub(crate) fn into_wit(self) -> wit::PluginMetadata {
        wit::PluginMetadata {
            name: self.name,
            version: self.version,
            for_: self.reconciles.into_wit(),
            owns: self.owns.into_iter().map(Gvk::into_wit).collect(),
            watches: self
                .watches
                .into_iter()
                .map(|(kind, mapping)| wit::Watch {
                    kind: kind.into_wit(),
                    mapping: match mapping {
                        WatchMapping::Owner => wit::WatchMapping::Owner,
                        WatchMapping::SameName => wit::WatchMapping::SameName,
                        WatchMapping::Label(l) => wit::WatchMapping::Label(l),
                    },
                })
                .collect(),
            permissions: self
                .permissions
                .into_iter()
                .map(|(group, resources, verbs)| wit::Permission {
                    group,
                    resources,
                    verbs,
                })
                .collect(),
        }
    }
}
