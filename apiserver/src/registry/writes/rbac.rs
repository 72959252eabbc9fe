//! What kube-apiserver defaults and validates in Roles, ClusterRoles,
//! RoleBindings and ClusterRoleBindings (`pkg/apis/rbac/v1/defaults.go`,
//! `pkg/apis/rbac/validation`), with its messages: a binding whose
//! `roleRef` or subject names a kind that does not exist, or a rule that
//! can never match, is refused when written instead of stored to grant
//! nothing, and a binding's `roleRef` never changes.

use serde_json::Value;
use wasmctrl_apimachinery::names;

use super::super::resources::ResourceInfo;
use crate::error::{Cause, Causes};
use crate::values::go_quote;

/// The RBAC API group.
pub(crate) const GROUP: &str = "rbac.authorization.k8s.io";

/// The fields of a role or binding that decide what it grants: an update
/// that leaves them as they were grants nothing new.
pub(super) const GRANTING_FIELDS: [&str; 4] = ["rules", "roleRef", "subjects", "aggregationRule"];

/// A ClusterRole's `aggregationRule`, if it has one (a null one is none).
pub(crate) fn aggregation_rule(role: &Value) -> Option<&Value> {
    role.get("aggregationRule").filter(|rule| !rule.is_null())
}

/// Upstream's defaults: a binding's `roleRef.apiGroup`, and the
/// `apiGroup` of a `User` or `Group` subject.
pub(super) fn default(info: &ResourceInfo, obj: &mut Value) {
    if info.group != GROUP || !info.kind.ends_with("Binding") {
        return;
    }
    if let Some(role) = obj.get_mut("roleRef").and_then(Value::as_object_mut)
        && role
            .get("apiGroup")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        role.insert("apiGroup".into(), GROUP.into());
    }
    for subject in obj
        .get_mut("subjects")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
    {
        let unset = subject
            .get("apiGroup")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        let kind = subject.get("kind").and_then(Value::as_str);
        if unset && matches!(kind, Some("User" | "Group")) {
            subject.insert("apiGroup".into(), GROUP.into());
        }
    }
}

/// The causes `obj`, an RBAC object of `info`'s kind as it would be
/// stored, is refused for; `old` is the object an update replaces.
///
/// An update that leaves the rules, `roleRef`, subjects and
/// `aggregationRule` as they were (after defaults) is not checked: it
/// grants nothing new, and an object stored before these checks (in a
/// data directory) can still have its labels or finalizers changed, the
/// garbage collector's among them.
pub(super) fn validate(info: &ResourceInfo, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut out = Causes::default();
    if info.group != GROUP {
        return Vec::new();
    }
    let old = old.map(|old| {
        let mut old = old.clone();
        default(info, &mut old);
        old
    });
    if let Some(old) = &old
        && GRANTING_FIELDS.iter().all(|f| old.get(f) == obj.get(f))
    {
        return Vec::new();
    }
    let old = old.as_ref();
    match info.kind.as_str() {
        "Role" => rules(&mut out, obj, true),
        "ClusterRole" => {
            rules(&mut out, obj, false);
            aggregation(&mut out, obj);
        }
        "RoleBinding" => binding(&mut out, obj, old, true),
        "ClusterRoleBinding" => binding(&mut out, obj, old, false),
        _ => {}
    }
    out.into_vec()
}

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or_default()
}

/// The strings of list `field` of `v` (a non-string item as its JSON).
pub(crate) fn list(v: &Value, field: &str) -> Vec<String> {
    v.get(field)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().map_or_else(|| s.to_string(), str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A list as Go's `%#v` prints a `[]string`, as upstream's messages do.
fn go_strings(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| go_quote(s)).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// Upstream's `ValidatePolicyRule` for each of `rules`.
fn rules(out: &mut Causes, obj: &Value, namespaced: bool) {
    let Some(rules) = obj.get("rules").and_then(Value::as_array) else {
        return;
    };
    for (i, rule) in rules.iter().enumerate() {
        let path = |field: &str| format!("rules[{i}].{field}");
        if list(rule, "verbs").is_empty() {
            out.add(|| Cause::required(&path("verbs"), "verbs must contain at least one value"));
        }
        let urls = list(rule, "nonResourceURLs");
        if !urls.is_empty() {
            if namespaced {
                out.add(|| {
                    Cause::invalid(
                        &path("nonResourceURLs"),
                        &go_strings(&urls),
                        "namespaced rules cannot apply to non-resource URLs",
                    )
                });
            }
            let resourceful = ["apiGroups", "resources", "resourceNames"]
                .iter()
                .any(|f| !list(rule, f).is_empty());
            if resourceful {
                out.add(|| {
                    Cause::invalid(
                        &path("nonResourceURLs"),
                        &go_strings(&urls),
                        "rules cannot apply to both regular resources and non-resource URLs",
                    )
                });
            }
            continue;
        }
        if list(rule, "apiGroups").is_empty() {
            out.add(|| {
                Cause::required(
                    &path("apiGroups"),
                    "resource rules must supply at least one api group",
                )
            });
        }
        if list(rule, "resources").is_empty() {
            out.add(|| {
                Cause::required(
                    &path("resources"),
                    "resource rules must supply at least one resource",
                )
            });
        }
    }
}

/// An `aggregationRule` names at least one selector, each a valid one.
fn aggregation(out: &mut Causes, obj: &Value) {
    let Some(rule) = aggregation_rule(obj) else {
        return;
    };
    let selectors = rule
        .get("clusterRoleSelectors")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if selectors.is_empty() {
        out.add(|| {
            Cause::required(
                "aggregationRule.clusterRoleSelectors",
                "at least one clusterRoleSelector required if aggregationRule is non-nil",
            )
        });
    }
    for (i, selector) in selectors.iter().enumerate() {
        if crate::registry::selectors::LabelSelector::from_object(selector).is_none() {
            out.add(|| {
                Cause::invalid(
                    &format!("aggregationRule.clusterRoleSelectors[{i}]"),
                    &selector.to_string(),
                    "invalid label selector.",
                )
            });
        }
    }
}

/// The `roleRef` as Go's `%#v` prints upstream's `rbac.RoleRef`.
fn shown_role_ref(role: &Value) -> String {
    format!(
        "rbac.RoleRef{{APIGroup:{}, Kind:{}, Name:{}}}",
        go_quote(text(role, "apiGroup")),
        go_quote(text(role, "kind")),
        go_quote(text(role, "name"))
    )
}

/// Upstream's `ValidateRoleBinding`, `ValidateClusterRoleBinding` and
/// their updates' `roleRef` rule.
fn binding(out: &mut Causes, obj: &Value, old: Option<&Value>, namespaced: bool) {
    let role = obj.get("roleRef").unwrap_or(&Value::Null);
    let group = text(role, "apiGroup");
    if group != GROUP {
        out.add(|| Cause::not_supported("roleRef.apiGroup", group, &[GROUP]));
    }
    let kind = text(role, "kind");
    let kinds: &[&str] = if namespaced {
        &["Role", "ClusterRole"]
    } else {
        &["ClusterRole"]
    };
    if !kinds.contains(&kind) {
        out.add(|| Cause::not_supported("roleRef.kind", kind, kinds));
    }
    let name = text(role, "name");
    if name.is_empty() {
        out.add(|| Cause::required("roleRef.name", ""));
    } else {
        for cause in super::super::validation::validate_name(
            name,
            super::super::validation::NameRule::Path,
            "roleRef.name",
        ) {
            out.add(|| cause);
        }
    }
    let subjects = obj
        .get("subjects")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, subject) in subjects.iter().enumerate() {
        self::subject(out, subject, &format!("subjects[{i}]"), namespaced);
    }
    if let Some(old) = old {
        let old_role = old.get("roleRef").unwrap_or(&Value::Null);
        let same = ["apiGroup", "kind", "name"]
            .iter()
            .all(|f| text(role, f) == text(old_role, f));
        if !same {
            out.add(|| Cause::invalid("roleRef", &shown_role_ref(role), "cannot change roleRef"));
        }
    }
}

/// Upstream's `ValidateRoleBindingSubject`.
fn subject(out: &mut Causes, subject: &Value, path: &str, namespaced: bool) {
    let field = |f: &str| format!("{path}.{f}");
    let name = text(subject, "name");
    if name.is_empty() {
        out.add(|| Cause::required(&field("name"), ""));
    }
    let group = text(subject, "apiGroup");
    match text(subject, "kind") {
        "ServiceAccount" => {
            if let Err(e) = names::dns1123_subdomain(name)
                && !name.is_empty()
            {
                out.add(|| Cause::invalid(&field("name"), &go_quote(name), &e.to_string()));
            }
            if !group.is_empty() {
                out.add(|| Cause::not_supported(&field("apiGroup"), group, &[""]));
            }
            if !namespaced && text(subject, "namespace").is_empty() {
                out.add(|| Cause::required(&field("namespace"), ""));
            }
        }
        "User" | "Group" => {
            if group != GROUP {
                out.add(|| Cause::not_supported(&field("apiGroup"), group, &[GROUP]));
            }
        }
        other => out.add(|| {
            Cause::not_supported(&field("kind"), other, &["ServiceAccount", "User", "Group"])
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn info(kind: &str) -> std::sync::Arc<ResourceInfo> {
        crate::registry::resources::Registry::new()
            .find(GROUP, "v1", &format!("{}s", kind.to_lowercase()))
            .expect("a built-in RBAC resource")
    }

    fn messages(kind: &str, obj: Value, old: Option<Value>) -> Vec<String> {
        let info = info(kind);
        let mut obj = obj;
        default(&info, &mut obj);
        validate(&info, &obj, old.as_ref())
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn rules_that_can_never_match_are_refused_as_upstream() {
        let role = json!({"rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": []},
            {"nonResourceURLs": ["/healthz"], "verbs": ["get"]},
            {"verbs": ["get"]},
        ]});
        assert_eq!(
            messages("Role", role.clone(), None),
            [
                "rules[0].verbs: Required value: verbs must contain at least one value",
                "rules[1].nonResourceURLs: Invalid value: []string{\"/healthz\"}: namespaced rules cannot apply to non-resource URLs",
                "rules[2].apiGroups: Required value: resource rules must supply at least one api group",
                "rules[2].resources: Required value: resource rules must supply at least one resource",
            ]
        );
        // A ClusterRole may name non-resource URLs, but not with resources.
        let mixed = json!({"rules": [
            {"nonResourceURLs": ["/healthz"], "verbs": ["get"]},
            {"nonResourceURLs": ["/metrics"], "resources": ["pods"], "verbs": ["get"]},
        ]});
        assert_eq!(
            messages("ClusterRole", mixed, None),
            [
                "rules[1].nonResourceURLs: Invalid value: []string{\"/metrics\"}: rules cannot apply to both regular resources and non-resource URLs"
            ]
        );
        let empty = json!({"aggregationRule": {"clusterRoleSelectors": []}});
        assert_eq!(
            messages("ClusterRole", empty, None),
            [
                "aggregationRule.clusterRoleSelectors: Required value: at least one clusterRoleSelector required if aggregationRule is non-nil"
            ]
        );
    }

    #[test]
    fn bindings_name_real_kinds_and_keep_their_role() {
        let binding = |kind: &str, subjects: Value| json!({"roleRef": {"kind": kind, "name": "view"}, "subjects": subjects});
        // Defaults fill the groups a kubectl user leaves out.
        let good = binding(
            "ClusterRole",
            json!([{"kind": "User", "name": "jane"}, {"kind": "ServiceAccount", "name": "bot", "namespace": "team"}]),
        );
        assert!(messages("ClusterRoleBinding", good.clone(), None).is_empty());
        assert!(messages("RoleBinding", good.clone(), None).is_empty());

        let bad = binding(
            "Clusterrole",
            json!([
                {"kind": "Users", "name": "jane"},
                {"kind": "ServiceAccount", "name": "Bot_1"},
                {"kind": "Group", "apiGroup": "example.com", "name": ""},
            ]),
        );
        assert_eq!(
            messages("ClusterRoleBinding", bad, None),
            [
                "roleRef.kind: Unsupported value: \"Clusterrole\": supported values: \"ClusterRole\"",
                "subjects[0].kind: Unsupported value: \"Users\": supported values: \"ServiceAccount\", \"User\", \"Group\"",
                "subjects[1].name: Invalid value: \"Bot_1\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                "subjects[1].namespace: Required value",
                "subjects[2].name: Required value",
                "subjects[2].apiGroup: Unsupported value: \"example.com\": supported values: \"rbac.authorization.k8s.io\"",
            ]
        );

        // A binding stored before defaults, changed only in its labels, is
        // neither a roleRef change nor checked again.
        let mut relabelled = good.clone();
        relabelled["metadata"] = json!({"labels": {"team": "a"}});
        assert!(messages("RoleBinding", relabelled, Some(good.clone())).is_empty());
        let legacy = binding("Clusterrole", json!([]));
        let mut finalized = legacy.clone();
        finalized["metadata"] = json!({"finalizers": []});
        assert!(messages("RoleBinding", finalized, Some(legacy)).is_empty());

        let old = good.clone();
        let changed = binding("Role", json!([]));
        assert_eq!(
            messages("RoleBinding", changed, Some(old)),
            [
                "roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"Role\", Name:\"view\"}: cannot change roleRef"
            ]
        );
    }
}
