//! A plugin's permission grant: verb × group/resource × namespace.

use std::fmt;

use serde::Deserialize;

use crate::meta::syntax;

/// Allows `verbs` on `resources` of API `group` ("" is core), optionally
/// only in `namespaces`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PermissionRule {
    #[serde(default)]
    pub group: String,
    pub resources: Vec<String>,
    pub verbs: Vec<String>,
    #[serde(default)]
    pub namespaces: Option<Vec<String>>,
}

/// The verbs a rule may name (`*`: every verb).
pub const VERBS: [&str; 8] = [
    "get", "list", "watch", "create", "update", "patch", "delete", "*",
];

/// Why a rule cannot be granted: the field at fault (`verbs`, `group`,
/// `namespaces`; None: the rule as a whole) and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleProblem {
    pub field: Option<&'static str>,
    pub message: String,
}

/// The most resources, verbs or namespaces one rule names.
pub const MAX_RULE_LIST: usize = 64;

impl PermissionRule {
    /// Checks that the rule names only [`VERBS`], at least one resource and
    /// one verb, and a group (or `*`) and namespaces that are valid names:
    /// anything else could never match a request, or match one by accident.
    pub fn check(&self) -> Result<(), RuleProblem> {
        let problem = |field, message: String| RuleProblem { field, message };
        // Grants are compared access by access (resource × verb ×
        // namespace), so their lists are bounded like everything else.
        for (field, len) in [
            ("resources", self.resources.len()),
            ("verbs", self.verbs.len()),
            ("namespaces", self.namespaces.as_ref().map_or(0, Vec::len)),
        ] {
            if len > MAX_RULE_LIST {
                return Err(problem(
                    Some(field),
                    format!("names {len} entries; a rule names at most {MAX_RULE_LIST}"),
                ));
            }
        }
        if let Some(verb) = self.verbs.iter().find(|v| !VERBS.contains(&v.as_str())) {
            return Err(problem(
                Some("verbs"),
                format!(
                    "unknown verb {verb:?} (expected one of {})",
                    VERBS.join(", ")
                ),
            ));
        }
        if self.resources.is_empty() || self.verbs.is_empty() {
            return Err(problem(
                None,
                "needs at least one resource and one verb".into(),
            ));
        }
        if self.group != "*" {
            syntax::group(&self.group).map_err(|e| problem(Some("group"), e.message))?;
        }
        for ns in self.namespaces.iter().flatten() {
            syntax::namespace(ns).map_err(|e| problem(Some("namespaces"), e.message))?;
        }
        Ok(())
    }
}

impl fmt::Display for PermissionRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        write!(
            f,
            "{} on {}/{}",
            self.verbs.join(","),
            group,
            self.resources.join(",")
        )
    }
}

/// What the host config allows one plugin to do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grant {
    rules: Vec<PermissionRule>,
    /// The plugin's namespace scope (None: all namespaces).
    namespaces: Option<Vec<String>>,
}

/// One access a call (or a plugin's metadata) needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access<'a> {
    pub verb: &'a str,
    pub group: &'a str,
    /// The plural, with `/status` for status writes.
    pub resource: &'a str,
    /// None for cluster-scoped objects and all-namespace lists.
    pub namespace: Option<&'a str>,
}

impl fmt::Display for Access<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            self.group
        };
        write!(f, "{} {}/{}", self.verb, group, self.resource)?;
        match self.namespace {
            Some(ns) => write!(f, " in namespace {ns:?}"),
            None => write!(f, " cluster-wide"),
        }
    }
}

fn matches(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

impl Grant {
    pub fn new(rules: Vec<PermissionRule>, namespaces: Option<Vec<String>>) -> Self {
        Self { rules, namespaces }
    }

    /// Whether `access` is allowed. A namespaced call must be inside the
    /// plugin's namespace scope and the rule's namespaces; an all-namespace
    /// call needs a rule without namespaces and a plugin without scope.
    pub fn allows(&self, access: &Access<'_>) -> bool {
        let in_scope = |allowed: &Option<Vec<String>>| match (allowed, access.namespace) {
            (None, _) => true,
            (Some(list), Some(ns)) => list.iter().any(|n| n == ns),
            (Some(_), None) => false,
        };
        in_scope(&self.namespaces)
            && self.rules.iter().any(|r| {
                (r.group == access.group || r.group == "*")
                    && matches(&r.resources, access.resource)
                    && matches(&r.verbs, access.verb)
                    && in_scope(&r.namespaces)
            })
    }

    /// Whether the grant covers `verb` on `group/resource` in some namespace
    /// (used to check a plugin's declared permissions at load time).
    pub fn covers(&self, verb: &str, group: &str, resource: &str) -> bool {
        self.rules.iter().any(|r| {
            (r.group == group || r.group == "*")
                && matches(&r.resources, resource)
                && matches(&r.verbs, verb)
        })
    }
}

#[cfg(test)]
impl PermissionRule {
    /// A rule from string slices (tests of the grant and of the ceilings
    /// objects are held to); `ns: None` is every namespace.
    pub(crate) fn of(
        group: &str,
        resources: &[&str],
        verbs: &[&str],
        ns: Option<&[&str]>,
    ) -> PermissionRule {
        PermissionRule {
            group: group.into(),
            resources: resources.iter().map(|s| s.to_string()).collect(),
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            namespaces: ns.map(|n| n.iter().map(|s| s.to_string()).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access<'a>(
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        ns: Option<&'a str>,
    ) -> Access<'a> {
        Access {
            verb,
            group,
            resource,
            namespace: ns,
        }
    }

    #[test]
    fn verb_group_resource_and_namespace_must_all_match() {
        let g = Grant::new(
            vec![
                PermissionRule::of("apps", &["deployments"], &["get", "patch"], None),
                PermissionRule::of("", &["configmaps"], &["*"], Some(&["default"])),
            ],
            None,
        );
        assert!(g.allows(&access("get", "apps", "deployments", Some("x"))));
        assert!(!g.allows(&access("delete", "apps", "deployments", Some("x"))));
        assert!(!g.allows(&access("get", "", "deployments", Some("x"))));
        assert!(!g.allows(&access("get", "apps", "deployments/status", Some("x"))));
        assert!(g.allows(&access("delete", "", "configmaps", Some("default"))));
        assert!(!g.allows(&access("delete", "", "configmaps", Some("other"))));
        assert!(!g.allows(&access("list", "", "configmaps", None)));
    }

    #[test]
    fn the_plugin_scope_limits_every_rule() {
        let g = Grant::new(
            vec![PermissionRule::of("", &["secrets"], &["get"], None)],
            Some(vec!["team-a".into()]),
        );
        assert!(g.allows(&access("get", "", "secrets", Some("team-a"))));
        assert!(!g.allows(&access("get", "", "secrets", Some("team-b"))));
        assert!(!g.allows(&access("get", "", "secrets", None)));
        assert!(g.covers("get", "", "secrets"));
        assert!(!g.covers("list", "", "secrets"));
    }
}
