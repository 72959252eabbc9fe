//! The admission webhooks a plugin declares (its `webhooks` export), as
//! host-owned types checked on the way in: at most one of each kind, every
//! rule within its bounds and of Kubernetes syntax. What a review runs and
//! answers is in `admission`.

use crate::meta::selector::LabelSelector;
use crate::meta::syntax as validate;
use crate::sandbox::guest::Review;
use crate::sandbox::wit::wasmctrl::reconciler::types;

/// Rules in one webhook, and operations, groups, versions or resources in
/// one rule.
pub const MAX_RULES: usize = 16;
pub const MAX_RULE_ITEMS: usize = 32;
/// The default and the range of a webhook's `timeoutSeconds`, as
/// admissionregistration.k8s.io/v1 has them.
pub const DEFAULT_TIMEOUT_SECONDS: u32 = 10;
pub const MAX_TIMEOUT_SECONDS: u32 = 30;
/// Which export a webhook calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookKind {
    Validating,
    Mutating,
}

impl WebhookKind {
    /// The review a webhook of this kind makes.
    pub fn review(self) -> Review {
        match self {
            WebhookKind::Validating => Review::Validate,
            WebhookKind::Mutating => Review::Mutate,
        }
    }
}

/// What the API server does when a review fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    Fail,
    Ignore,
}

impl FailurePolicy {
    /// The name admissionregistration.k8s.io/v1 uses.
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        }
    }
}

/// One rule: what operations on which resources the webhook reviews.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookRule {
    pub operations: Vec<String>,
    pub groups: Vec<String>,
    pub versions: Vec<String>,
    /// Plural names, `name/subresource`, `*` or `*/*`.
    pub resources: Vec<String>,
    /// `*`, `Cluster` or `Namespaced`.
    pub scope: &'static str,
}

/// A webhook a plugin serves, as its `webhooks` export declared it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    pub kind: WebhookKind,
    pub rules: Vec<WebhookRule>,
    pub failure_policy: FailurePolicy,
    pub timeout_seconds: u32,
    pub namespace_selector: Option<LabelSelector>,
    pub object_selector: Option<LabelSelector>,
}

const OPERATIONS: [&str; 5] = ["CREATE", "UPDATE", "DELETE", "CONNECT", "*"];

impl Webhook {
    /// The webhooks a component declared, checked: at most one of each
    /// kind, every rule within its bounds and of Kubernetes syntax.
    pub(crate) fn from_wit(webhooks: Vec<types::Webhook>) -> Result<Vec<Self>, String> {
        if webhooks.len() > 2 {
            return Err(format!(
                "{} webhooks declared; a plugin serves at most one validating and one mutating webhook",
                webhooks.len()
            ));
        }
        let webhooks = webhooks
            .into_iter()
            .enumerate()
            .map(|(i, w)| Self::one(w).map_err(|e| format!("webhooks[{i}]: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        if webhooks.len() == 2 && webhooks[0].kind == webhooks[1].kind {
            return Err("two webhooks of the same kind declared; merge their rules".into());
        }
        Ok(webhooks)
    }

    fn one(w: types::Webhook) -> Result<Self, String> {
        if w.rules.is_empty() || w.rules.len() > MAX_RULES {
            return Err(format!(
                "{} rules; a webhook has 1 to {MAX_RULES}",
                w.rules.len()
            ));
        }
        let rules = w
            .rules
            .into_iter()
            .enumerate()
            .map(|(i, r)| rule(r).map_err(|e| format!("rules[{i}]: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        let timeout_seconds = match w.timeout_seconds {
            0 => DEFAULT_TIMEOUT_SECONDS,
            t if t <= MAX_TIMEOUT_SECONDS => t,
            t => {
                return Err(format!(
                    "timeoutSeconds {t} is outside 1–{MAX_TIMEOUT_SECONDS}"
                ));
            }
        };
        let selector = |what: &str, s: Option<String>| match s.as_deref().map(str::trim) {
            None | Some("") => Ok(None),
            Some(text) => LabelSelector::parse(text)
                .map(Some)
                .map_err(|e| format!("{what}: {e}")),
        };
        Ok(Self {
            kind: match w.kind {
                types::WebhookKind::Validating => WebhookKind::Validating,
                types::WebhookKind::Mutating => WebhookKind::Mutating,
            },
            rules,
            failure_policy: match w.failure_policy {
                types::FailurePolicy::Fail => FailurePolicy::Fail,
                types::FailurePolicy::Ignore => FailurePolicy::Ignore,
            },
            timeout_seconds,
            namespace_selector: selector("namespaceSelector", w.namespace_selector)?,
            object_selector: selector("objectSelector", w.object_selector)?,
        })
    }
}

fn rule(r: types::WebhookRule) -> Result<WebhookRule, String> {
    for (what, items) in [
        ("operations", &r.operations),
        ("groups", &r.groups),
        ("versions", &r.versions),
        ("resources", &r.resources),
    ] {
        if items.is_empty() || items.len() > MAX_RULE_ITEMS {
            return Err(format!(
                "{what}: {} items; a rule names 1 to {MAX_RULE_ITEMS}",
                items.len()
            ));
        }
    }
    for op in &r.operations {
        if !OPERATIONS.contains(&op.as_str()) {
            return Err(format!(
                "operations: {} is not one of {}",
                validate::quoted(op),
                OPERATIONS.join(", ")
            ));
        }
    }
    for g in &r.groups {
        if g != "*" {
            validate::group(g).map_err(|e| format!("groups: {e}"))?;
        }
    }
    for v in &r.versions {
        if v != "*" {
            validate::version(v).map_err(|e| format!("versions: {e}"))?;
        }
    }
    for resource in &r.resources {
        let mut parts = resource.splitn(2, '/');
        for part in parts.by_ref() {
            if part != "*" {
                validate::printable("resources", part, 253)
                    .map_err(|e| format!("resources: {e}"))?;
                if !part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
                {
                    return Err(format!(
                        "resources: {} is not a resource name (lower-case plural, `name/subresource` or `*`)",
                        validate::quoted(resource)
                    ));
                }
            }
        }
    }
    Ok(WebhookRule {
        operations: r.operations,
        groups: r.groups,
        versions: r.versions,
        resources: r.resources,
        scope: match r.scope {
            types::RuleScope::Any => "*",
            types::RuleScope::Cluster => "Cluster",
            types::RuleScope::Namespaced => "Namespaced",
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn webhook() -> types::Webhook {
        types::Webhook {
            kind: types::WebhookKind::Validating,
            rules: vec![types::WebhookRule {
                operations: vec!["CREATE".into(), "UPDATE".into()],
                groups: vec!["example.com".into()],
                versions: vec!["v1".into()],
                resources: vec!["webapps".into(), "webapps/status".into()],
                scope: types::RuleScope::Namespaced,
            }],
            failure_policy: types::FailurePolicy::Fail,
            timeout_seconds: 0,
            namespace_selector: Some("env in (prod)".into()),
            object_selector: None,
        }
    }

    #[test]
    fn a_declared_webhook_is_checked_and_defaulted() {
        let w = Webhook::from_wit(vec![webhook()]).unwrap();
        assert_eq!(w[0].timeout_seconds, DEFAULT_TIMEOUT_SECONDS);
        assert_eq!(w[0].rules[0].scope, "Namespaced");
        assert!(w[0].namespace_selector.is_some());
        let refused = |change: fn(&mut types::Webhook)| {
            let mut w = webhook();
            change(&mut w);
            Webhook::from_wit(vec![w]).unwrap_err()
        };
        assert!(refused(|w| w.timeout_seconds = 31).contains("timeoutSeconds 31"));
        assert!(refused(|w| w.rules[0].operations = vec!["PATCH".into()]).contains("PATCH"));
        assert!(refused(|w| w.rules[0].resources = vec!["Web Apps".into()]).contains("resources"));
        assert!(refused(|w| w.rules.clear()).contains("0 rules"));
        assert!(refused(|w| w.object_selector = Some("a in".into())).contains("objectSelector"));
        let twice = Webhook::from_wit(vec![webhook(), webhook()]).unwrap_err();
        assert!(twice.contains("same kind"), "{twice}");
    }
}
