//! Upstream's RBAC escalation check (`ConfirmNoEscalation` and the
//! policy-based storage of roles and bindings): an identity RBAC authorizes
//! may write a Role or ClusterRole only with rules it holds itself, unless
//! it may `escalate` it, and a RoleBinding or ClusterRoleBinding only to a
//! role whose rules it holds, unless it may `bind` that role. Without it,
//! anyone allowed to write RBAC objects could grant itself (or anyone)
//! anything.
//!
//! What the author holds is read when the request is authorized (its rules
//! in the object's namespace, cluster-wide ones included), and checked
//! against the object as it would be stored, after patches and mutating
//! webhooks. An update that leaves the rules, `roleRef`, `subjects`,
//! `aggregationRule` and labels as they were grants nothing new and is not
//! checked (upstream exempts only the garbage collector's fields). A
//! ClusterRole with an `aggregationRule` takes its rules from the roles its
//! selectors match, so writing one, or removing one, needs `escalate` or
//! holding everything, as upstream.

use std::sync::Arc;

use serde_json::Value;

use super::Auth;
use super::identity::UserInfo;
use super::mode::Authorization;
use super::rbac::{Attributes, GROUP, PolicyRule, Resolver, role_rules};
use crate::error::{ApiError, qualified};
use crate::metrics::{Limit, Metrics};
use crate::registry::storage::Store;
use crate::registry::writes::{GrantCheck, aggregation_rule};
use crate::values::go_quote;

/// Permissions (verb × group × resource × name, or verb × URL) of the rules
/// one write grants that the check compares one by one; a write granting
/// more, by an author who may not `escalate` or `bind`, is refused.
pub(crate) const MAX_GRANTED_PERMISSIONS: usize = 10_000;

/// Permissions a refusal lists; it counts the rest.
const MAX_LISTED: usize = 20;

/// What an author of RBAC objects holds, as its write's check needs it.
#[derive(Debug)]
pub(crate) struct Escalation {
    user: UserInfo,
    metrics: Arc<Metrics>,
    /// The rules that apply to the author in the object's namespace
    /// (cluster-wide ones included), and errors met resolving them.
    held: Vec<PolicyRule>,
    errors: Vec<String>,
}

impl Auth {
    /// The check of what `user`'s writes of RBAC objects in `namespace`
    /// (empty: cluster scope) grant; None where no check applies (the
    /// admin, `AlwaysAllow`).
    pub(crate) fn escalation(&self, user: &UserInfo, namespace: &str) -> Option<Escalation> {
        if user.is_superuser() || self.authorization != Authorization::Rbac {
            return None;
        }
        let generation = self.objects.rbac_generation();
        let (held, errors) =
            Resolver::new(&self.objects.store, &self.rbac, generation).rules_for(user, namespace);
        Some(Escalation {
            user: user.clone(),
            metrics: self.objects.metrics.clone(),
            held,
            errors,
        })
    }
}

impl Escalation {
    /// Whether one of the author's rules allows `verb` on role `resource`
    /// (`roles` or `clusterroles`) named `name` in `namespace`.
    fn may(&self, verb: &str, resource: &str, namespace: &str, name: &str) -> bool {
        let a = Attributes::resource(verb, GROUP, resource, "", namespace, name);
        self.held.iter().any(|r| r.allows(&a))
    }

    /// Whether the author holds upstream's "full authority": every verb on
    /// every resource of every group, and every verb on every URL.
    fn holds_everything(&self) -> bool {
        let star = || vec!["*".to_string()];
        let everything = [
            PolicyRule {
                verbs: star(),
                api_groups: star(),
                resources: star(),
                ..PolicyRule::default()
            },
            PolicyRule {
                verbs: star(),
                non_resource_urls: star(),
                ..PolicyRule::default()
            },
        ];
        everything
            .iter()
            .all(|p| self.held.iter().any(|h| covers(h, p)))
    }

    /// Ok when the author holds every permission of `granted`; else the
    /// 403 for `resource` `name`, listing what it does not hold.
    fn confirm(&self, granted: &[PolicyRule], resource: &str, name: &str) -> Result<(), ApiError> {
        let permissions = breakdown(granted).map_err(|n| {
            self.metrics.exceeded(Limit::GrantedPermissions);
            self.refused(
                resource,
                name,
                format!(
                    "the rules grant {n} or more permissions (verb, group, resource and name each), more than the {MAX_GRANTED_PERMISSIONS} the check compares; only an identity that may escalate or bind may write them"
                ),
            )
        })?;
        let missing: Vec<&PolicyRule> = permissions
            .iter()
            .filter(|p| !self.held.iter().any(|h| covers(h, p)))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let mut listed: Vec<String> = missing
            .iter()
            .take(MAX_LISTED)
            .map(|p| compact(p))
            .collect();
        if missing.len() > MAX_LISTED {
            listed.push(format!("and {} more", missing.len() - MAX_LISTED));
        }
        let groups: Vec<String> = self.user.groups.iter().map(|g| go_quote(g)).collect();
        let mut message = format!(
            "user {} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
            go_quote(&self.user.name),
            groups.join(" "),
            listed.join("\n")
        );
        if !self.errors.is_empty() {
            message.push_str(&format!("; resolution errors: [{}]", self.errors.join(" ")));
        }
        Err(self.refused(resource, name, message))
    }

    fn refused(&self, resource: &str, name: &str, why: String) -> ApiError {
        let what = qualified(GROUP, resource);
        ApiError::Forbidden {
            message: format!("{what} {} is forbidden: {why}", go_quote(name)),
            name: name.to_string(),
            group: GROUP.to_string(),
            kind: resource.to_string(),
        }
    }
}

impl GrantCheck for Escalation {
    fn check(
        &self,
        store: &Store,
        resource: &str,
        namespace: &str,
        name: &str,
        old: Option<&Value>,
        new: &Value,
    ) -> Result<(), ApiError> {
        match resource {
            "roles" | "clusterroles" => {
                // As upstream, a create is authorized for no name in
                // particular: `escalate` limited by resourceNames does not
                // cover it.
                let named = if old.is_none() { "" } else { name };
                if self.may("escalate", resource, namespace, named) {
                    return Ok(());
                }
                let granted: Vec<PolicyRule> = new
                    .get("rules")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().map(PolicyRule::from_json).collect())
                    .unwrap_or_default();
                self.confirm(&granted, resource, name)?;
                // An aggregated role takes the rules of whatever roles its
                // selectors match, so, as upstream, writing one (or turning
                // one back into a plain role) needs holding everything.
                if resource == "clusterroles"
                    && (aggregation_rule(new).is_some() || old.and_then(aggregation_rule).is_some())
                    && !self.holds_everything()
                {
                    return Err(self.refused(
                        resource,
                        name,
                        "must have cluster-admin privileges to use the aggregationRule".into(),
                    ));
                }
                Ok(())
            }
            "rolebindings" | "clusterrolebindings" => {
                let role = &new["roleRef"];
                let kind = role["kind"].as_str().unwrap_or_default();
                let role_name = role["name"].as_str().unwrap_or_default();
                let role_resource = match kind {
                    "Role" => "roles",
                    "ClusterRole" => "clusterroles",
                    _ => "",
                };
                if !role_resource.is_empty()
                    && self.may("bind", role_resource, namespace, role_name)
                {
                    return Ok(());
                }
                let granted = role_rules(store, kind, namespace, role_name)
                    .map_err(|why| self.refused(resource, name, why))?;
                self.confirm(&granted, resource, name)
            }
            _ => Ok(()),
        }
    }
}

/// `rules` as single permissions (upstream's `BreakdownRule`): one rule
/// per verb, group, resource and name, or per verb and non-resource URL;
/// `Err(n)` once there are more than [`MAX_GRANTED_PERMISSIONS`].
fn breakdown(rules: &[PolicyRule]) -> Result<Vec<PolicyRule>, usize> {
    let mut out = Vec::new();
    let one = |verb: &str| vec![verb.to_string()];
    for rule in rules {
        let names: Vec<Option<&String>> = if rule.resource_names.is_empty() {
            vec![None]
        } else {
            rule.resource_names.iter().map(Some).collect()
        };
        // Saturating: each list may hold hundreds of thousands of entries.
        let resource_count = [rule.resources.len(), rule.verbs.len(), names.len()]
            .iter()
            .fold(rule.api_groups.len(), |n, m| n.saturating_mul(*m));
        let url_count = rule
            .non_resource_urls
            .len()
            .saturating_mul(rule.verbs.len());
        let total = out
            .len()
            .saturating_add(resource_count)
            .saturating_add(url_count);
        if total > MAX_GRANTED_PERMISSIONS {
            return Err(total);
        }
        // A list left empty (no verb, say) grants nothing: the others,
        // however long, are not walked.
        if resource_count > 0 {
            for group in &rule.api_groups {
                for resource in &rule.resources {
                    for verb in &rule.verbs {
                        for name in &names {
                            out.push(PolicyRule {
                                verbs: one(verb),
                                api_groups: vec![group.clone()],
                                resources: vec![resource.clone()],
                                resource_names: name.map(|n| vec![n.clone()]).unwrap_or_default(),
                                non_resource_urls: Vec::new(),
                            });
                        }
                    }
                }
            }
        }
        if url_count > 0 {
            for url in &rule.non_resource_urls {
                for verb in &rule.verbs {
                    out.push(PolicyRule {
                        verbs: one(verb),
                        non_resource_urls: vec![url.clone()],
                        ..PolicyRule::default()
                    });
                }
            }
        }
    }
    Ok(out)
}

/// Whether rule `held` covers the single permission `p` (upstream's
/// `ruleCovers`).
fn covers(held: &PolicyRule, p: &PolicyRule) -> bool {
    let all = |set: &[String], star: &str, wanted: &[String]| {
        set.iter().any(|s| s == star) || wanted.iter().all(|w| set.contains(w))
    };
    let names = if p.resource_names.is_empty() {
        held.resource_names.is_empty()
    } else {
        held.resource_names.is_empty()
            || p.resource_names
                .iter()
                .all(|n| held.resource_names.contains(n))
    };
    all(&held.verbs, "*", &p.verbs)
        && all(&held.api_groups, "*", &p.api_groups)
        && resources_cover(&held.resources, &p.resources)
        && names
        && p.non_resource_urls.iter().all(|url| {
            held.non_resource_urls
                .iter()
                .any(|h| h == url || (h.ends_with('*') && url.starts_with(h.trim_end_matches('*'))))
        })
}

/// Upstream's `resourceCoversAll`: `*`, the resource itself, or for a
/// subresource `*/sub`.
fn resources_cover(held: &[String], wanted: &[String]) -> bool {
    if held.iter().any(|h| h == "*") {
        return true;
    }
    wanted.iter().all(|w| {
        held.contains(w)
            || w.split_once('/')
                .is_some_and(|(_, sub)| held.contains(&format!("*/{sub}")))
    })
}

/// A single permission as upstream's `CompactString` writes it:
/// `{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}`.
fn compact(p: &PolicyRule) -> String {
    let list = |l: &[String]| l.iter().map(|s| go_quote(s)).collect::<Vec<_>>().join(" ");
    let mut parts = Vec::new();
    if !p.api_groups.is_empty() {
        parts.push(format!("APIGroups:[{}]", list(&p.api_groups)));
    }
    if !p.resources.is_empty() {
        parts.push(format!("Resources:[{}]", list(&p.resources)));
    }
    if !p.resource_names.is_empty() {
        parts.push(format!("ResourceNames:[{}]", list(&p.resource_names)));
    }
    if !p.non_resource_urls.is_empty() {
        parts.push(format!("NonResourceURLs:[{}]", list(&p.non_resource_urls)));
    }
    parts.push(format!("Verbs:[{}]", list(&p.verbs)));
    format!("{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(v: Value) -> PolicyRule {
        PolicyRule::from_json(&v)
    }

    fn escalation(held: Vec<PolicyRule>) -> Escalation {
        Escalation {
            user: UserInfo::named("alice", &["team"]),
            metrics: Arc::new(Metrics::new()),
            held,
            errors: Vec::new(),
        }
    }

    #[test]
    fn coverage_is_upstreams() {
        let p = |group: &str, resource: &str, verb: &str| PolicyRule {
            verbs: vec![verb.into()],
            api_groups: vec![group.into()],
            resources: vec![resource.into()],
            ..PolicyRule::default()
        };
        let pods = rule(
            json!({"apiGroups": [""], "resources": ["pods", "*/status"], "verbs": ["get", "list"]}),
        );
        assert!(covers(&pods, &p("", "pods", "get")));
        assert!(covers(&pods, &p("", "deployments/status", "list")));
        assert!(!covers(&pods, &p("", "pods", "delete")));
        assert!(!covers(&pods, &p("apps", "pods", "get")));
        assert!(
            !covers(&pods, &p("", "*", "get")),
            "a wildcard needs a wildcard"
        );
        let named = rule(
            json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["a"]}),
        );
        let mut one = p("", "secrets", "get");
        assert!(!covers(&named, &one), "a name does not cover all names");
        one.resource_names = vec!["a".into()];
        assert!(covers(&named, &one));
        let all = rule(json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}));
        assert!(covers(&all, &p("x", "y", "z")));
        let urls = rule(json!({"nonResourceURLs": ["/logs/*"], "verbs": ["get"]}));
        let url = |u: &str| PolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: vec![u.into()],
            ..PolicyRule::default()
        };
        assert!(covers(&urls, &url("/logs/a")) && !covers(&urls, &url("/metrics")));
    }

    #[test]
    fn a_role_granting_what_its_author_lacks_is_refused_naming_it() {
        let e = escalation(vec![rule(
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}),
        )]);
        let held = [rule(
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}),
        )];
        e.confirm(&held, "roles", "r").unwrap();
        let more = [rule(
            json!({"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["get"]}),
        )];
        let refused = e.confirm(&more, "roles", "r").unwrap_err().to_string();
        assert_eq!(
            refused,
            "roles.rbac.authorization.k8s.io \"r\" is forbidden: user \"alice\" (groups=[\"team\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"
        );
    }

    #[test]
    fn more_permissions_than_the_check_compares_are_refused_and_listed_in_part() {
        let e = escalation(Vec::new());
        let verbs: Vec<String> = (0..101).map(|i| format!("v{i}")).collect();
        let resources: Vec<String> = (0..100).map(|i| format!("r{i}")).collect();
        let huge = [rule(
            json!({"apiGroups": [""], "resources": resources, "verbs": verbs}),
        )];
        let refused = e
            .confirm(&huge, "clusterroles", "big")
            .unwrap_err()
            .to_string();
        assert!(refused.contains("10100 or more permissions"), "{refused}");
        assert_eq!(e.metrics.exceeded_count("grantedPermissions"), 1);
        // No verb grants nothing, however long the other lists: nothing to
        // walk, nothing refused.
        let long: Vec<String> = (0..500_000).map(|i| i.to_string()).collect();
        let idle = [rule(
            json!({"apiGroups": long, "resources": long, "verbs": []}),
        )];
        e.confirm(&idle, "roles", "idle").unwrap();
        // Lists whose product passes what a number can hold.
        let many: Vec<String> = (0..70_000).map(|i| i.to_string()).collect();
        let vast = [rule(
            json!({"apiGroups": many, "resources": many, "verbs": many, "resourceNames": many}),
        )];
        let refused = e
            .confirm(&vast, "clusterroles", "vast")
            .unwrap_err()
            .to_string();
        assert!(refused.contains("or more permissions"), "{refused}");
        let some = [rule(
            json!({"apiGroups": [""], "resources": ["a", "b", "c", "d", "e"], "verbs": ["1", "2", "3", "4", "5"]}),
        )];
        let refused = e
            .confirm(&some, "clusterroles", "some")
            .unwrap_err()
            .to_string();
        assert!(refused.ends_with("and 5 more"), "{refused}");
        assert_eq!(refused.matches("Verbs:").count(), MAX_LISTED);
    }
}
