//! `admissionregistration.k8s.io/v1` ValidatingWebhookConfiguration and
//! MutatingWebhookConfiguration: the defaults and checks a write gets
//! ([`prepare`], in `checks`, with upstream's field errors), and the
//! parsed form the chain calls ([`parse`]).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use base64::Engine;
use serde_json::Value;
use wasmctrl_apimachinery::selector::{LabelSelector, SelectorBounds};

mod checks;

pub(crate) use checks::prepare;

/// Most webhooks one configuration may hold; a write with more is refused
/// (422), so what one configuration adds to every request is bounded.
pub(crate) const MAX_WEBHOOKS_PER_CONFIGURATION: usize = 64;
/// `timeoutSeconds` when unset, as upstream.
pub(crate) const DEFAULT_TIMEOUT_SECONDS: i64 = 10;
/// The range of `timeoutSeconds`, as upstream.
pub(crate) const TIMEOUT_SECONDS: std::ops::RangeInclusive<i64> = 1..=30;
/// The API group both configuration kinds are served in.
pub(crate) const GROUP: &str = "admissionregistration.k8s.io";

/// Which of the two configuration kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum ConfigKind {
    Mutating,
    Validating,
}

impl ConfigKind {
    /// The kind a served resource stores, if it is one of the two.
    pub(crate) fn of(group: &str, plural: &str) -> Option<ConfigKind> {
        match (group, plural) {
            (GROUP, "mutatingwebhookconfigurations") => Some(ConfigKind::Mutating),
            (GROUP, "validatingwebhookconfigurations") => Some(ConfigKind::Validating),
            _ => None,
        }
    }

    /// The `type` label of upstream's admission metrics.
    pub(crate) fn metric_type(self) -> &'static str {
        match self {
            ConfigKind::Mutating => "admit",
            ConfigKind::Validating => "validating",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailurePolicy {
    Fail,
    Ignore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MatchPolicy {
    Exact,
    Equivalent,
}

/// `sideEffects`. v1 accepts only `None` and `NoneOnDryRun` on create;
/// `Some` and `Unknown` survive only in a configuration that already had
/// them, as upstream's update rule allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SideEffects {
    None,
    NoneOnDryRun,
    Some,
    Unknown,
}

impl SideEffects {
    /// Whether a dry-run request may call the webhook.
    pub(crate) fn dry_run_safe(self) -> bool {
        matches!(self, SideEffects::None | SideEffects::NoneOnDryRun)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reinvocation {
    Never,
    IfNeeded,
}

/// A rule's `scope`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    All,
    Cluster,
    Namespaced,
}

/// One `rules[]` entry (`RuleWithOperations`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    pub(crate) operations: Vec<String>,
    pub(crate) api_groups: Vec<String>,
    pub(crate) api_versions: Vec<String>,
    /// `x`, `*`, `x/y`, `x/*`, `*/y` or `*/*`.
    pub(crate) resources: Vec<String>,
    pub(crate) scope: Scope,
}

/// Where a webhook is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `clientConfig.url` (https, no user information, query or fragment).
    Url(url::Url),
    /// `clientConfig.service`.
    Service {
        namespace: String,
        name: String,
        /// Empty, or starting with `/`.
        path: String,
        port: u16,
    },
}

/// One webhook of a stored configuration, ready to be matched and called.
#[derive(Debug)]
pub(crate) struct Webhook {
    pub(crate) name: String,
    pub(crate) kind: ConfigKind,
    pub(crate) rules: Vec<Rule>,
    pub(crate) failure_policy: FailurePolicy,
    pub(crate) match_policy: MatchPolicy,
    pub(crate) side_effects: SideEffects,
    pub(crate) timeout: Duration,
    pub(crate) reinvocation: Reinvocation,
    /// Empty (`{}`) matches everything.
    pub(crate) namespace_selector: LabelSelector,
    pub(crate) object_selector: LabelSelector,
    pub(crate) endpoint: Endpoint,
    /// `clientConfig.caBundle`, decoded: the PEM certificates that are the
    /// only roots the call trusts, when not empty.
    pub(crate) ca_bundle: Option<Vec<u8>>,
    /// The TLS client for `ca_bundle`, built on the first call.
    pub(crate) tls: OnceLock<Result<Arc<rustls::ClientConfig>, String>>,
}

/// The names of the webhooks of `obj` with `matchConditions`, which this
/// server does not evaluate (CEL).
pub(crate) fn with_match_conditions(obj: &Value) -> Vec<String> {
    obj["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|h| {
            h["matchConditions"]
                .as_array()
                .is_some_and(|c| !c.is_empty())
        })
        .map(|h| h["name"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The bytes a `caBundle` carries (base64, as the JSON of Go's `[]byte`).
/// What they hold is read only when the webhook is called, as upstream
/// does: a bundle that holds no certificate fails the call, under the
/// webhook's failure policy, not the configuration's write (cert-manager's
/// CA injector fills in a placeholder bundle later).
pub(crate) fn decode_ca_bundle(text: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("illegal base64 data: {e}"))
}

/// The webhooks of a stored (already prepared) configuration, in order. An entry that does not read is left out
/// rather than guessed at.
pub(crate) fn parse(kind: ConfigKind, obj: &Value) -> Vec<Arc<Webhook>> {
    obj["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| parse_webhook(kind, h))
        .map(Arc::new)
        .collect()
}

fn string_list(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

fn parse_webhook(kind: ConfigKind, h: &Value) -> Option<Webhook> {
    let rules = h["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| Rule {
            operations: string_list(&r["operations"]),
            api_groups: string_list(&r["apiGroups"]),
            api_versions: string_list(&r["apiVersions"]),
            resources: string_list(&r["resources"]),
            scope: match r["scope"].as_str() {
                Some("Cluster") => Scope::Cluster,
                Some("Namespaced") => Scope::Namespaced,
                _ => Scope::All,
            },
        })
        .collect();
    let cc = &h["clientConfig"];
    let endpoint = match (cc["url"].as_str(), cc.get("service")) {
        (Some(u), _) => Endpoint::Url(url::Url::parse(u).ok()?),
        (None, Some(s)) => Endpoint::Service {
            namespace: s["namespace"].as_str()?.to_string(),
            name: s["name"].as_str()?.to_string(),
            path: s["path"].as_str().unwrap_or("").to_string(),
            port: u16::try_from(s["port"].as_i64().unwrap_or(443)).ok()?,
        },
        (None, None) => return None,
    };
    let selector = |key: &str| {
        LabelSelector::from_object(&h[key], SelectorBounds::UNLIMITED).unwrap_or_default()
    };
    Some(Webhook {
        name: h["name"].as_str()?.to_string(),
        kind,
        rules,
        failure_policy: match h["failurePolicy"].as_str() {
            Some("Ignore") => FailurePolicy::Ignore,
            _ => FailurePolicy::Fail,
        },
        match_policy: match h["matchPolicy"].as_str() {
            Some("Exact") => MatchPolicy::Exact,
            _ => MatchPolicy::Equivalent,
        },
        side_effects: match h["sideEffects"].as_str() {
            Some("None") => SideEffects::None,
            Some("NoneOnDryRun") => SideEffects::NoneOnDryRun,
            Some("Some") => SideEffects::Some,
            _ => SideEffects::Unknown,
        },
        timeout: Duration::from_secs(
            h["timeoutSeconds"]
                .as_u64()
                .unwrap_or(DEFAULT_TIMEOUT_SECONDS as u64),
        ),
        reinvocation: match h["reinvocationPolicy"].as_str() {
            Some("IfNeeded") => Reinvocation::IfNeeded,
            _ => Reinvocation::Never,
        },
        namespace_selector: selector("namespaceSelector"),
        object_selector: selector("objectSelector"),
        endpoint,
        ca_bundle: cc["caBundle"]
            .as_str()
            .and_then(|c| decode_ca_bundle(c).ok())
            .filter(|pem| !pem.is_empty()),
        tls: OnceLock::new(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn side_effects_stay_allowed_only_where_they_already_were() {
        let mut legacy = json!({
            "name": "legacy.example.com",
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://127.0.0.1:8443/validate"},
        });
        legacy["sideEffects"] = json!("Some");
        let old = json!({"webhooks": [legacy.clone()]});
        let mut obj = json!({"webhooks": [legacy]});
        assert!(prepare(ConfigKind::Validating, &mut obj, Some(&old)).is_empty());
        let parsed = parse(ConfigKind::Validating, &obj);
        assert_eq!(parsed[0].side_effects, SideEffects::Some);
        assert!(!parsed[0].side_effects.dry_run_safe());
    }
}
