//! Which webhooks a request calls, as upstream decides it: a rule's
//! operations, API groups, versions, resources (`x`, `*`, `x/y`, `x/*`,
//! `*/y`, `*/*`) and scope; then the namespace selector (the labels of the
//! object's namespace) and the object selector (the labels of the object
//! or of the old object).

use serde_json::Value;

use super::config::{MatchPolicy, Rule, Scope, Webhook};
use super::{Attributes, Gvk, Gvr, Lookup};
use crate::error::ApiError;

/// How one webhook is called for a request: the kind and resource the
/// object is presented as (the request's, or an equivalent version's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invocation {
    pub(crate) kind: Gvk,
    pub(crate) resource: Gvr,
}

fn exact_or_wildcard(items: &[String], requested: &str) -> bool {
    items.iter().any(|i| i == "*" || i == requested)
}

/// Whether `rule` covers a request of `attrs` against `resource` (the
/// requested one, or an equivalent version of it).
pub(crate) fn rule_matches(rule: &Rule, attrs: &Attributes<'_>, resource: &Gvr) -> bool {
    let is_namespace =
        resource.group.is_empty() && resource.version == "v1" && resource.resource == "namespaces";
    let scope = match rule.scope {
        Scope::All => true,
        Scope::Namespaced => !is_namespace && !attrs.namespace.is_empty(),
        Scope::Cluster => is_namespace || attrs.namespace.is_empty(),
    };
    scope
        && rule
            .operations
            .iter()
            .any(|o| o == "*" || o == attrs.operation.as_str())
        && exact_or_wildcard(&rule.api_groups, &resource.group)
        && exact_or_wildcard(&rule.api_versions, &resource.version)
        && rule.resources.iter().any(|entry| {
            let (res, sub) = entry.split_once('/').unwrap_or((entry, ""));
            (res == "*" || res == resource.resource) && (sub == "*" || sub == attrs.subresource)
        })
}

/// How `hook` is called for `attrs`, if one of its rules matches.
///
/// `matchPolicy: Equivalent` also matches the other served versions of the
/// requested resource (`attrs.equivalent_versions`), presenting the object
/// in that version. Versions of one resource here differ only in their
/// `apiVersion` (built-in kinds have one version each; a CRD's versions
/// share one schema-less conversion), so where a resource has a single
/// version Equivalent is Exact.
pub(crate) fn invocation(hook: &Webhook, attrs: &Attributes<'_>) -> Option<Invocation> {
    if hook
        .rules
        .iter()
        .any(|r| rule_matches(r, attrs, &attrs.resource))
    {
        return Some(Invocation {
            kind: attrs.kind.clone(),
            resource: attrs.resource.clone(),
        });
    }
    if hook.match_policy != MatchPolicy::Equivalent {
        return None;
    }
    for rule in &hook.rules {
        for version in attrs.equivalent_versions {
            let resource = Gvr {
                version: version.clone(),
                ..attrs.resource.clone()
            };
            if rule_matches(rule, attrs, &resource) {
                // A subresource's own kind (a Scale) has no other version.
                let kind = if attrs.kind.group == attrs.resource.group {
                    Gvk {
                        version: version.clone(),
                        ..attrs.kind.clone()
                    }
                } else {
                    attrs.kind.clone()
                };
                return Some(Invocation { kind, resource });
            }
        }
    }
    None
}

fn labels_of(obj: Option<&Value>) -> Option<&Value> {
    obj.map(|o| o.pointer("/metadata/labels").unwrap_or(&Value::Null))
}

/// Whether the selectors of `hook` select this request: the namespace
/// selector against the labels of the object's namespace (everything for
/// cluster-scoped objects other than Namespaces; a Namespace being created
/// or updated is judged by its own new labels), and the object selector
/// against the object's labels or the old object's (either will do). A
/// namespace that does not exist is a 404, as upstream answers it.
pub(crate) fn selected(
    hook: &Webhook,
    attrs: &Attributes<'_>,
    object: Option<&Value>,
    old: Option<&Value>,
    env: &dyn Lookup,
) -> Result<bool, ApiError> {
    if !hook.namespace_selector.is_empty() {
        let is_namespace =
            attrs.resource.group.is_empty() && attrs.resource.resource == "namespaces";
        let own = is_namespace
            && attrs.subresource.is_empty()
            && matches!(
                attrs.operation,
                super::Operation::Create | super::Operation::Update
            );
        let matches = if own {
            hook.namespace_selector
                .matches_json(labels_of(object).unwrap_or(&Value::Null))
        } else if attrs.namespace.is_empty() && !is_namespace {
            true
        } else {
            let labels = env
                .namespace_labels(attrs.namespace)
                .ok_or_else(|| ApiError::not_found("", "namespaces", attrs.namespace))?;
            hook.namespace_selector.matches_json(&labels)
        };
        if !matches {
            return Ok(false);
        }
    }
    if hook.object_selector.is_empty() {
        return Ok(true);
    }
    Ok([object, old]
        .into_iter()
        .filter_map(labels_of)
        .any(|labels| hook.object_selector.matches_json(labels)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::config::{ConfigKind, parse};
    use super::super::{Caller, Operation};
    use super::*;

    fn rule(ops: &[&str], resources: &[&str], scope: Scope) -> Rule {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect();
        Rule {
            operations: s(ops),
            api_groups: s(&["apps", ""]),
            api_versions: s(&["v1"]),
            resources: s(resources),
            scope,
        }
    }

    #[derive(Clone, Copy)]
    struct Request {
        op: Operation,
        group: &'static str,
        version: &'static str,
        resource: &'static str,
        sub: &'static str,
        ns: &'static str,
    }

    fn with_attrs<R>(r: &Request, versions: &[String], f: impl FnOnce(&Attributes<'_>) -> R) -> R {
        let caller = Caller::default();
        let attrs = Attributes {
            operation: r.op,
            kind: Gvk {
                group: r.group.into(),
                version: r.version.into(),
                kind: "K".into(),
            },
            resource: Gvr {
                group: r.group.into(),
                version: r.version.into(),
                resource: r.resource.into(),
            },
            subresource: r.sub,
            name: "n",
            namespace: r.ns,
            dry_run: false,
            options: Value::Null,
            caller: &caller,
            equivalent_versions: versions,
            deadline: None,
        };
        f(&attrs)
    }

    fn req(op: Operation, resource: &'static str, sub: &'static str, ns: &'static str) -> Request {
        let group = if resource == "deployments" {
            "apps"
        } else {
            ""
        };
        Request {
            op,
            group,
            version: "v1",
            resource,
            sub,
            ns,
        }
    }

    fn matches(rule: &Rule, r: &Request) -> bool {
        with_attrs(r, &[], |a| rule_matches(rule, a, &a.resource))
    }

    #[test]
    fn resources_and_subresources_match_as_upstream() {
        use Operation::*;
        let main = req(Update, "deployments", "", "ns");
        let status = req(Update, "deployments", "status", "ns");
        let scale = req(Update, "deployments", "scale", "ns");
        let pods = req(Update, "pods", "", "ns");
        let cases: [(&[&str], [bool; 4]); 7] = [
            (&["*"], [true, false, false, true]),
            (&["*/*"], [true, true, true, true]),
            (&["deployments"], [true, false, false, false]),
            (&["deployments/*"], [true, true, true, false]),
            (&["*/status"], [false, true, false, false]),
            (&["deployments/status"], [false, true, false, false]),
            (
                &["deployments", "deployments/scale"],
                [true, false, true, false],
            ),
        ];
        for (resources, want) in cases {
            let r = rule(&["*"], resources, Scope::All);
            let got = [&main, &status, &scale, &pods].map(|q| matches(&r, q));
            assert_eq!(got, want, "{resources:?}");
        }
    }

    #[test]
    fn operations_groups_versions_and_scope() {
        use Operation::*;
        let create = rule(&["CREATE"], &["*"], Scope::All);
        assert!(matches(&create, &req(Create, "pods", "", "ns")));
        assert!(!matches(&create, &req(Delete, "pods", "", "ns")));
        let mut other_group = rule(&["*"], &["*"], Scope::All);
        other_group.api_groups = vec!["batch".into()];
        assert!(!matches(&other_group, &req(Create, "pods", "", "ns")));
        let mut other_version = rule(&["*"], &["*"], Scope::All);
        other_version.api_versions = vec!["v2".into()];
        assert!(!matches(&other_version, &req(Create, "pods", "", "ns")));
        let namespaced = rule(&["*"], &["*"], Scope::Namespaced);
        let cluster = rule(&["*"], &["*"], Scope::Cluster);
        let pod = req(Create, "pods", "", "ns");
        let namespace = req(Create, "namespaces", "", "ns");
        let cluster_object = req(Create, "clusterroles", "", "");
        assert!(matches(&namespaced, &pod) && !matches(&cluster, &pod));
        assert!(!matches(&namespaced, &namespace) && matches(&cluster, &namespace));
        assert!(!matches(&namespaced, &cluster_object) && matches(&cluster, &cluster_object));
    }

    fn webhook(extra: Value) -> Webhook {
        let mut h = json!({
            "name": "w.example.com",
            "rules": [{"operations": ["*"], "apiGroups": ["example.com"], "apiVersions": ["v1"], "resources": ["things"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://127.0.0.1/"},
        });
        for (k, v) in extra.as_object().unwrap() {
            h[k] = v.clone();
        }
        let mut parsed = parse(ConfigKind::Validating, &json!({"webhooks": [h]}));
        std::sync::Arc::try_unwrap(parsed.remove(0)).unwrap()
    }

    #[test]
    fn equivalent_matches_another_version_of_the_resource_exact_does_not() {
        // The request is for v2; the webhook's rule names only v1.
        let at_v2 = Request {
            op: Operation::Create,
            group: "example.com",
            version: "v2",
            resource: "things",
            sub: "",
            ns: "ns",
        };
        let versions = vec!["v1".to_string()];
        let call = |hook: &Webhook| with_attrs(&at_v2, &versions, |a| invocation(hook, a));
        let equivalent = call(&webhook(json!({})));
        assert_eq!(
            equivalent.map(|i| (i.kind.version, i.resource.version)),
            Some(("v1".to_string(), "v1".to_string()))
        );
        assert_eq!(call(&webhook(json!({"matchPolicy": "Exact"}))), None);
        // Without other versions, Equivalent is Exact.
        assert_eq!(
            with_attrs(&at_v2, &[], |a| invocation(&webhook(json!({})), a)),
            None
        );
    }

    struct Namespaces;

    impl Lookup for Namespaces {
        fn namespace_labels(&self, name: &str) -> Option<Value> {
            match name {
                "prod" => Some(json!({"env": "prod"})),
                "dev" => Some(json!({"env": "dev"})),
                _ => None,
            }
        }
        fn service_address(
            &self,
            _: &str,
            _: &str,
            _: u16,
        ) -> Result<std::net::SocketAddr, String> {
            Err("no services here".into())
        }
    }

    fn select(
        hook: &Webhook,
        r: &Request,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<bool, ApiError> {
        with_attrs(r, &[], |a| selected(hook, a, obj, old, &Namespaces))
    }

    #[test]
    fn namespace_selector_reads_the_namespace_s_labels() {
        use Operation::*;
        let hook = webhook(json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}}));
        assert!(select(&hook, &req(Create, "pods", "", "prod"), None, None).unwrap());
        assert!(!select(&hook, &req(Create, "pods", "", "dev"), None, None).unwrap());
        let missing = select(&hook, &req(Create, "pods", "", "gone"), None, None).unwrap_err();
        assert_eq!(missing.code(), 404);
        // Cluster-scoped objects other than Namespaces are always selected.
        assert!(select(&hook, &req(Create, "clusterroles", "", ""), None, None).unwrap());
        // A Namespace being written is judged by its own new labels; being
        // deleted, by the stored namespace's.
        let labelled = json!({"metadata": {"labels": {"env": "prod"}}});
        assert!(
            select(
                &hook,
                &req(Create, "namespaces", "", "new"),
                Some(&labelled),
                None
            )
            .unwrap()
        );
        assert!(
            !select(
                &hook,
                &req(Update, "namespaces", "", "prod"),
                Some(&json!({})),
                None
            )
            .unwrap()
        );
        assert!(select(&hook, &req(Delete, "namespaces", "", "prod"), None, None).unwrap());
    }

    #[test]
    fn object_selector_takes_the_object_or_the_old_object() {
        use Operation::*;
        let hook = webhook(
            json!({"objectSelector": {"matchExpressions": [{"key": "admit", "operator": "Exists"}]}}),
        );
        let with = json!({"metadata": {"labels": {"admit": "yes"}}});
        let without = json!({"metadata": {}});
        let r = req(Update, "pods", "", "dev");
        assert!(select(&hook, &r, Some(&with), Some(&without)).unwrap());
        assert!(select(&hook, &r, Some(&without), Some(&with)).unwrap());
        assert!(!select(&hook, &r, Some(&without), Some(&without)).unwrap());
        assert!(select(&hook, &req(Delete, "pods", "", "dev"), None, Some(&with)).unwrap());
        assert!(!select(&hook, &req(Delete, "pods", "", "dev"), None, None).unwrap());
    }
}
