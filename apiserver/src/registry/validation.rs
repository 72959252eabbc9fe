//! Object metadata validation with the real server's messages (422 causes).

use serde_json::Value;

use crate::error::Cause;
use crate::values::go_quote;

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

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

fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain.
pub(crate) fn is_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_label)
}

fn invalid(field: &str, value: &str, msg: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {}: {msg}", go_quote(value)),
        field: field.into(),
    }
}

/// Validates the namespace an object is created in: an RFC 1123 label.
pub(crate) fn validate_namespace(ns: &str) -> Vec<Cause> {
    validate_name(ns, NameRule::Label, "metadata.namespace")
}

/// Validates a name (`field` is where it came from, e.g. `metadata.name`).
pub(crate) fn validate_name(name: &str, rule: NameRule, field: &str) -> Vec<Cause> {
    let mut out = Vec::new();
    match rule {
        NameRule::Subdomain => {
            if name.len() > 253 {
                out.push(invalid(field, name, "must be no more than 253 characters"));
            } else if !is_subdomain(name) {
                out.push(invalid(field, name, DNS1123_SUBDOMAIN_MSG));
            }
        }
        NameRule::Label => {
            if name.len() > 63 {
                out.push(invalid(field, name, "must be no more than 63 characters"));
            } else if !is_label(name) {
                out.push(invalid(field, name, DNS1123_LABEL_MSG));
            }
        }
        NameRule::Dns1035 => {
            if name.len() > 63 {
                out.push(invalid(field, name, "must be no more than 63 characters"));
            } else if !is_label(name) || !name.starts_with(|c: char| c.is_ascii_lowercase()) {
                out.push(invalid(field, name, DNS1035_LABEL_MSG));
            }
        }
        NameRule::Path => {
            if name == "." || name == ".." {
                out.push(invalid(field, name, &format!("may not be '{name}'")));
            }
            for bad in ["/", "%"] {
                if name.contains(bad) {
                    out.push(invalid(field, name, &format!("may not contain '{bad}'")));
                }
            }
            if name.chars().any(char::is_control) {
                out.push(invalid(field, name, "may not contain control characters"));
            }
        }
    }
    out
}

fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix
        && !is_subdomain(p)
    {
        return false;
    }
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

fn is_label_value(s: &str) -> bool {
    s.is_empty()
        || (s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

/// Validates labels and annotations keys/values and basic metadata types.
pub(crate) fn validate_metadata(obj: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let md = &obj["metadata"];
    if let Some(labels) = md.get("labels") {
        match labels.as_object() {
            Some(map) => {
                for (k, v) in map {
                    if !is_qualified_name(k) {
                        out.push(invalid("metadata.labels", k, "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"));
                    }
                    match v.as_str() {
                        Some(s) if is_label_value(s) => {}
                        _ => out.push(invalid(
                            "metadata.labels",
                            &v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()),
                            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
                        )),
                    }
                }
            }
            None if labels.is_null() => {}
            None => out.push(invalid(
                "metadata.labels",
                &labels.to_string(),
                "must be a map",
            )),
        }
    }
    if let Some(ann) = md.get("annotations") {
        match ann.as_object() {
            Some(map) => {
                for (k, v) in map {
                    if !is_qualified_name(k) {
                        out.push(invalid("metadata.annotations", k, "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
                    }
                    if !v.is_string() {
                        out.push(invalid("metadata.annotations", k, "values must be strings"));
                    }
                }
            }
            None if ann.is_null() => {}
            None => out.push(invalid(
                "metadata.annotations",
                &ann.to_string(),
                "must be a map",
            )),
        }
    }
    if let Some(f) = md.get("finalizers")
        && !f.is_null()
    {
        match f.as_array() {
            Some(list) => {
                for v in list {
                    match v.as_str() {
                        Some(s) if is_qualified_name(s) => {}
                        _ => out.push(invalid(
                            "metadata.finalizers",
                            &v.to_string(),
                            "must be a qualified name",
                        )),
                    }
                }
            }
            None => out.push(invalid(
                "metadata.finalizers",
                &f.to_string(),
                "must be a list",
            )),
        }
    }
    out
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
    fn labels_and_finalizers() {
        let ok = json!({"metadata": {"labels": {"app.kubernetes.io/name": "x", "e": ""}, "finalizers": ["example.com/f"]}});
        assert!(validate_metadata(&ok).is_empty());
        let bad = json!({"metadata": {"labels": {"a b": "x", "k": "-v"}}});
        assert_eq!(validate_metadata(&bad).len(), 2);
    }
}
