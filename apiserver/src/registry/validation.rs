//! Object metadata validation with the real server's messages (422 causes).
//! The rules and their messages are `wasmctrl_apimachinery::names`', the
//! same `k8s.io/apimachinery` helpers kube-apiserver validates with.

use serde_json::Value;
use wasmctrl_apimachinery::names::{self, NameError};

use crate::error::{Cause, Causes};
use crate::values::go_quote;

/// Which name rule a kind uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameRule {
    /// Most kinds: RFC 1123 subdomain, ≤ 253.
    Subdomain,
    /// Namespaces: RFC 1123 label, ≤ 63.
    Label,
    /// Services: RFC 1035 label, ≤ 63.
    Dns1035,
    /// RBAC kinds: a path segment (not `.`/`..`, no `/` or `%`), as
    /// upstream; control characters (NUL included) are refused too, which
    /// upstream allows, because they corrupt terminals, logs and keys.
    Path,
}

/// The name rule of a built-in kind.
pub(crate) fn name_rule(group: &str, kind: &str) -> NameRule {
    match (group, kind) {
        ("", "Namespace") => NameRule::Label,
        ("", "Service") => NameRule::Dns1035,
        ("rbac.authorization.k8s.io", _) => NameRule::Path,
        _ => NameRule::Subdomain,
    }
}

fn invalid(field: &str, value: &str, msg: &str) -> Cause {
    Cause::invalid(field, &go_quote(value), msg)
}

/// Adds the cause `rule` gives `value`, if it breaks the rule.
fn check(out: &mut Causes, field: &str, value: &str, rule: fn(&str) -> Result<(), NameError>) {
    if let Err(e) = rule(value) {
        out.add(|| invalid(field, value, &e.to_string()));
    }
}

/// Validates the namespace an object is created in: an RFC 1123 label.
pub(crate) fn validate_namespace(ns: &str) -> Vec<Cause> {
    validate_name(ns, NameRule::Label, "metadata.namespace")
}

/// Validates a name (`field` is where it came from, e.g. `metadata.name`).
pub(crate) fn validate_name(name: &str, rule: NameRule, field: &str) -> Vec<Cause> {
    let mut out = Causes::default();
    match rule {
        NameRule::Subdomain => check(&mut out, field, name, names::dns1123_subdomain),
        NameRule::Label => check(&mut out, field, name, names::dns1123_label),
        NameRule::Dns1035 => check(&mut out, field, name, names::dns1035_label),
        NameRule::Path => {
            if name == "." || name == ".." {
                out.add(|| invalid(field, name, &format!("may not be '{name}'")));
            }
            for bad in ["/", "%"] {
                if name.contains(bad) {
                    out.add(|| invalid(field, name, &format!("may not contain '{bad}'")));
                }
            }
            if name.chars().any(char::is_control) {
                out.add(|| invalid(field, name, "may not contain control characters"));
            }
        }
    }
    out.into_vec()
}

/// Validates labels and annotations keys/values and basic metadata types,
/// as upstream's `ValidateObjectMeta`: label keys are qualified names and
/// values label values, annotation keys are qualified names once
/// lowercased, finalizers are qualified names.
pub(crate) fn validate_metadata(obj: &Value) -> Vec<Cause> {
    // A 3 MiB body holds hundreds of thousands of labels or finalizers:
    // each is checked, a hundred causes are written.
    let mut out = Causes::default();
    let md = &obj["metadata"];
    if let Some(labels) = md.get("labels") {
        match labels.as_object() {
            Some(map) => {
                for (k, v) in map {
                    check(&mut out, "metadata.labels", k, names::qualified_name);
                    match v.as_str() {
                        Some(s) => check(&mut out, "metadata.labels", s, names::label_value),
                        None => out.add(|| {
                            invalid(
                                "metadata.labels",
                                &v.to_string(),
                                &NameError::LabelValue.to_string(),
                            )
                        }),
                    }
                }
            }
            None if labels.is_null() => {}
            None => out.add(|| invalid("metadata.labels", &labels.to_string(), "must be a map")),
        }
    }
    if let Some(ann) = md.get("annotations") {
        match ann.as_object() {
            Some(map) => {
                for (k, v) in map {
                    if let Err(e) = names::qualified_name(&k.to_lowercase()) {
                        out.add(|| invalid("metadata.annotations", k, &e.to_string()));
                    }
                    if !v.is_string() {
                        out.add(|| invalid("metadata.annotations", k, "values must be strings"));
                    }
                }
            }
            None if ann.is_null() => {}
            None => out.add(|| invalid("metadata.annotations", &ann.to_string(), "must be a map")),
        }
    }
    if let Some(f) = md.get("finalizers")
        && !f.is_null()
    {
        match f.as_array() {
            Some(list) => {
                for v in list {
                    match v.as_str() {
                        Some(s) => check(&mut out, "metadata.finalizers", s, names::qualified_name),
                        None => out.add(|| {
                            invalid(
                                "metadata.finalizers",
                                &v.to_string(),
                                "must be a qualified name",
                            )
                        }),
                    }
                }
            }
            None => out.add(|| invalid("metadata.finalizers", &f.to_string(), "must be a list")),
        }
    }
    out.into_vec()
}

/// Validates the phase a namespace's status is written with (upstream's
/// `ValidateNamespaceStatusUpdate`): `Active` unless it is being deleted,
/// then `Terminating`.
pub(crate) fn validate_namespace_phase(obj: &Value, deleting: bool) -> Vec<Cause> {
    let phase = obj["status"]["phase"].as_str().unwrap_or("");
    let (want, why) = if deleting {
        (
            "Terminating",
            "may only be 'Terminating' if `deletionTimestamp` is not empty",
        )
    } else {
        (
            "Active",
            "may only be 'Active' if `deletionTimestamp` is empty",
        )
    };
    if phase == want {
        return Vec::new();
    }
    vec![invalid("status.Phase", phase, why)]
}

/// The finalizers upstream names without a domain (`IsStandardFinalizerName`).
const STANDARD_FINALIZERS: [&str; 3] = ["kubernetes", "orphan", "foregroundDeletion"];

/// Validates a namespace's `spec.finalizers` as the `finalize` subresource
/// writes them (upstream's `ValidateNamespaceFinalizeUpdate`): qualified
/// names, and fully qualified (with a `/`) unless standard.
pub(crate) fn validate_namespace_finalizers(obj: &Value) -> Vec<Cause> {
    let mut out = Causes::default();
    let list = &obj["spec"]["finalizers"];
    if list.is_null() {
        return out.into_vec();
    }
    let Some(list) = list.as_array() else {
        out.add(|| invalid("spec.finalizers", &list.to_string(), "must be a list"));
        return out.into_vec();
    };
    for (i, v) in list.iter().enumerate() {
        let field = format!("spec.finalizers[{i}]");
        let Some(name) = v.as_str() else {
            out.add(|| invalid(&field, &v.to_string(), "must be a qualified name"));
            continue;
        };
        check(&mut out, &field, name, names::qualified_name);
        if !name.contains('/') && !STANDARD_FINALIZERS.contains(&name) {
            out.add(|| {
                invalid(
                    &field,
                    name,
                    "name is neither a standard finalizer name nor is it fully qualified",
                )
            });
        }
    }
    out.into_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names() {
        assert!(validate_name("a-b.c", NameRule::Subdomain, "metadata.name").is_empty());
        assert!(!validate_name("Bad_Name", NameRule::Subdomain, "metadata.name").is_empty());
        assert!(!validate_name("a.b", NameRule::Label, "metadata.name").is_empty());
        assert!(!validate_name("1abc", NameRule::Dns1035, "metadata.name").is_empty());
        assert!(validate_name("system:admin", NameRule::Path, "metadata.name").is_empty());
        for bad in ["a/b", "a%2f", "..", "a\0b", "a\nb", "a\u{7f}"] {
            let causes = validate_name(bad, NameRule::Path, "metadata.name");
            assert!(!causes.is_empty(), "{bad:?} accepted");
            assert!(!causes[0].message.contains('\0'), "{}", causes[0].message);
        }
        assert_eq!(
            validate_name("a\0b", NameRule::Path, "metadata.name")[0].message,
            "Invalid value: \"a\\x00b\": may not contain control characters"
        );
        assert!(!validate_namespace("Bad_NS").is_empty());
        assert!(validate_namespace("kube-system").is_empty());
        assert!(!validate_name(&"a".repeat(254), NameRule::Subdomain, "metadata.name").is_empty());
    }

    #[test]
    fn a_namespace_s_phase_follows_its_deletion() {
        let active = json!({"status": {"phase": "Active"}});
        let terminating = json!({"status": {"phase": "Terminating"}});
        assert!(validate_namespace_phase(&active, false).is_empty());
        assert!(validate_namespace_phase(&terminating, true).is_empty());
        let causes = validate_namespace_phase(&terminating, false);
        assert_eq!(causes[0].field, "status.Phase");
        assert!(
            causes[0].message.contains("may only be 'Active'"),
            "{causes:?}"
        );
        assert_eq!(validate_namespace_phase(&json!({}), true).len(), 1);
    }

    #[test]
    fn a_namespace_s_finalizers_are_standard_or_fully_qualified() {
        let ok = json!({"spec": {"finalizers": ["kubernetes", "example.com/hold"]}});
        assert!(validate_namespace_finalizers(&ok).is_empty());
        assert!(validate_namespace_finalizers(&json!({"spec": {}})).is_empty());
        let bad = json!({"spec": {"finalizers": ["kubernetes", "hold", "a/b/c", 3]}});
        let causes = validate_namespace_finalizers(&bad);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.finalizers[1]",
                "spec.finalizers[2]",
                "spec.finalizers[3]"
            ]
        );
        assert!(
            causes[0]
                .message
                .contains("neither a standard finalizer name"),
            "{causes:?}"
        );
    }

    #[test]
    fn labels_and_finalizers() {
        let ok = json!({"metadata": {"labels": {"app.kubernetes.io/name": "x", "e": ""}, "finalizers": ["example.com/f"]}});
        assert!(validate_metadata(&ok).is_empty());
        let bad = json!({"metadata": {"labels": {"a b": "x", "k": "-v"}}});
        assert_eq!(validate_metadata(&bad).len(), 2);
    }

    /// The messages are upstream's, naming the part of the rule broken.
    #[test]
    fn messages_are_upstream_s() {
        assert_eq!(
            validate_name(&"a".repeat(254), NameRule::Subdomain, "metadata.name")[0].message,
            format!(
                "Invalid value: \"{}\": must be no more than 253 characters",
                "a".repeat(254)
            )
        );
        assert!(
            validate_name("Web", NameRule::Label, "metadata.name")[0]
                .message
                .starts_with("Invalid value: \"Web\": a lowercase RFC 1123 label must consist of")
        );
        assert!(
            validate_name("1abc", NameRule::Dns1035, "metadata.name")[0]
                .message
                .starts_with("Invalid value: \"1abc\": a DNS-1035 label must consist of")
        );
        let labels = json!({"metadata": {"labels": {"Example.com/a": "x", &"k".repeat(64): "v"}}});
        let messages: Vec<String> = validate_metadata(&labels)
            .into_iter()
            .map(|c| c.message)
            .collect();
        assert!(
            messages[0].starts_with(
                "Invalid value: \"Example.com/a\": prefix part a lowercase RFC 1123 subdomain"
            ),
            "{messages:?}"
        );
        assert!(
            messages[1].ends_with(": name part must be no more than 63 characters"),
            "{messages:?}"
        );
    }

    /// Annotation keys are checked lowercased, as upstream does.
    #[test]
    fn annotation_keys_may_have_capitals() {
        let ok = json!({"metadata": {"annotations": {"Example.com/Note": "x"}}});
        assert!(validate_metadata(&ok).is_empty());
        let bad = json!({"metadata": {"annotations": {"a b": "x"}, "finalizers": ["a/b/c"]}});
        let causes = validate_metadata(&bad);
        assert_eq!(causes.len(), 2);
        assert_eq!(causes[1].field, "metadata.finalizers");
        assert!(
            causes[1]
                .message
                .starts_with("Invalid value: \"a/b/c\": a qualified name must consist of")
        );
    }
}
