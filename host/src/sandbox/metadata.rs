//! What a plugin says about itself (its `metadata` export), as host-owned
//! types, checked on the way in: every kind is Kubernetes syntax, every
//! string and list is bounded.

use crate::meta::kind::Gvk;
use crate::meta::syntax as validate;
use crate::sandbox::outbound::OutboundRule;
use crate::sandbox::webhooks::Webhook;
use crate::sandbox::wit::wasmctrl::reconciler::types;

/// How an object of a watched kind maps to keys of the reconciled kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchMapping {
    /// Through the object's ownerReferences to the reconciled kind.
    Owner,
    /// To the reconciled object of the same namespace and name.
    SameName,
    /// To the reconciled object (same namespace) named by this label's value.
    Label(String),
}

/// Another kind whose changes enqueue keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    pub kind: Gvk,
    pub mapping: WatchMapping,
}

/// An access the plugin needs: each verb on each resource of the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permission {
    pub group: String,
    pub resources: Vec<String>,
    pub verbs: Vec<String>,
}

/// A plugin's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginMetadata {
    pub name: String,
    pub version: String,
    /// The kind whose keys the plugin reconciles.
    pub for_: Gvk,
    /// Kinds it creates and controls.
    pub owns: Vec<Gvk>,
    /// Other kinds whose changes enqueue keys.
    pub watches: Vec<Watch>,
    /// Everything the plugin will call.
    pub permissions: Vec<Permission>,
    /// The destinations outside the cluster it calls (its `outbound`
    /// export; empty without one).
    pub outbound: Vec<OutboundRule>,
    /// The admission webhooks it serves (its `webhooks` export; empty
    /// without one).
    pub webhooks: Vec<Webhook>,
}

impl PluginMetadata {
    /// Every kind the plugin's informers watch: `for`, `owns`, `watches`.
    pub fn watched_kinds(&self) -> impl Iterator<Item = &Gvk> {
        std::iter::once(&self.for_)
            .chain(&self.owns)
            .chain(self.watches.iter().map(|w| &w.kind))
    }
}

/// Kinds a plugin may own or watch, and permission rules it may declare.
const MAX_KINDS: usize = 32;
const MAX_PERMISSIONS: usize = 64;
/// Resources or verbs in one permission.
const MAX_ITEMS: usize = 64;

impl PluginMetadata {
    /// The metadata, outbound declaration and webhooks a component
    /// returned, checked: each declared rule must parse as a grant's rule
    /// does.
    pub(crate) fn from_wit(
        m: types::PluginMetadata,
        outbound: Vec<types::OutboundRule>,
        webhooks: Vec<types::Webhook>,
    ) -> Result<Self, String> {
        if outbound.len() > MAX_PERMISSIONS {
            return Err(format!(
                "{} outbound rules declared; at most {MAX_PERMISSIONS} are allowed",
                outbound.len()
            ));
        }
        let outbound = outbound
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let rule = OutboundRule {
                    url: r.url,
                    methods: r.methods,
                    private: false,
                };
                rule.target()
                    .map_err(|e| format!("outbound[{i}]: {e}"))
                    .map(|_| rule)
            })
            .collect::<Result<Vec<_>, String>>()?;
        let mut metadata = Self::try_from(m)?;
        metadata.outbound = outbound;
        metadata.webhooks = Webhook::from_wit(webhooks)?;
        Ok(metadata)
    }
}

impl TryFrom<types::PluginMetadata> for PluginMetadata {
    type Error = String;

    fn try_from(m: types::PluginMetadata) -> Result<Self, String> {
        let err = |what: &str, e: validate::Invalid| format!("{what}: {e}");
        validate::printable("name", &m.name, 253).map_err(|e| err("name", e))?;
        validate::printable("version", &m.version, 128).map_err(|e| err("version", e))?;
        if m.owns.len() > MAX_KINDS || m.watches.len() > MAX_KINDS {
            return Err(format!(
                "owns ({}) and watches ({}) may name at most {MAX_KINDS} kinds each",
                m.owns.len(),
                m.watches.len()
            ));
        }
        if m.permissions.len() > MAX_PERMISSIONS {
            return Err(format!(
                "{} permissions declared; at most {MAX_PERMISSIONS} are allowed",
                m.permissions.len()
            ));
        }
        let kind = |what: &str, g: types::Gvk| -> Result<Gvk, String> {
            let g = Gvk {
                group: g.group,
                version: g.version,
                kind: g.kind,
            };
            validate::gvk(&g).map_err(|e| err(what, e))?;
            Ok(g)
        };
        let for_ = kind("for", m.for_)?;
        let owns = m
            .owns
            .into_iter()
            .map(|g| kind("owns", g))
            .collect::<Result<_, _>>()?;
        let watches = m
            .watches
            .into_iter()
            .map(|w| {
                let mapping = match w.mapping {
                    types::WatchMapping::Owner => WatchMapping::Owner,
                    types::WatchMapping::SameName => WatchMapping::SameName,
                    types::WatchMapping::Label(l) => {
                        validate::label_key(&l).map_err(|e| err("watches label", e))?;
                        WatchMapping::Label(l)
                    }
                };
                Ok(Watch {
                    kind: kind("watches", w.kind)?,
                    mapping,
                })
            })
            .collect::<Result<_, String>>()?;
        let permissions = m
            .permissions
            .into_iter()
            .map(|p| {
                validate::group(&p.group).map_err(|e| err("permissions", e))?;
                if p.resources.len() > MAX_ITEMS || p.verbs.len() > MAX_ITEMS {
                    return Err(format!(
                        "permissions: at most {MAX_ITEMS} resources and verbs per rule"
                    ));
                }
                for r in &p.resources {
                    validate::printable("resource", r, 253).map_err(|e| err("permissions", e))?;
                }
                for v in &p.verbs {
                    validate::printable("verb", v, 32).map_err(|e| err("permissions", e))?;
                }
                Ok(Permission {
                    group: p.group,
                    resources: p.resources,
                    verbs: p.verbs,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(PluginMetadata {
            name: m.name,
            version: m.version,
            for_,
            owns,
            watches,
            permissions,
            outbound: Vec::new(),
            webhooks: Vec::new(),
        })
    }
}
