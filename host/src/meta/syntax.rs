//! Kubernetes syntax for every string a guest (or a config) hands the host,
//! checked before any use: in a URL, a grant check, a discovery request, a
//! cache key or a metric label. A string that fails is refused as
//! `invalid`, never sent.
//!
//! # Names cannot reach another path
//! kube-rs pastes namespaces and names into request paths unescaped, so a
//! name like `web/status` or a namespace with `/` and `?` would address a
//! subresource or a resource the grant never named. Names are therefore
//! limited to the characters Kubernetes names use — letters, digits and
//! `-._:@+=~` — which leaves nothing a URL treats specially.
//!
//! The rules Kubernetes defines (DNS-1123 labels and subdomains, DNS-1035
//! labels, qualified names) are checked by `wasmctrl_apimachinery::names`,
//! as the API server and the guest SDK check them; this module adds the
//! host's own (object names, kinds, printable text) and refuses in the
//! host's words, naming the field.

use std::fmt;

use wasmctrl_apimachinery::names::{self, NameError};

/// What was wrong with a string (the message names the field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub field: &'static str,
    pub message: String,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for Invalid {}

fn invalid(field: &'static str, value: &str, rule: &str) -> Invalid {
    Invalid {
        field,
        message: format!("{} {rule}", quoted(value)),
    }
}

/// `"value"`, cut to 64 characters (a refusal must not echo a megabyte).
pub(crate) fn quoted(value: &str) -> String {
    if value.chars().count() <= 64 {
        format!("{value:?}")
    } else {
        let head: String = value.chars().take(64).collect();
        format!("{head:?}… ({} bytes)", value.len())
    }
}

/// `check`'s verdict on `value`, refused in the host's words: `rule`
/// describes what `field` must be.
fn checked(
    field: &'static str,
    value: &str,
    check: fn(&str) -> Result<(), NameError>,
    rule: &str,
) -> Result<(), Invalid> {
    check(value).map_err(|_| invalid(field, value, rule))
}

/// A DNS-1123 subdomain: dot-separated lowercase labels, at most 253
/// (API groups, most object names).
pub fn dns_subdomain(field: &'static str, value: &str) -> Result<(), Invalid> {
    checked(
        field,
        value,
        names::dns1123_subdomain,
        "is not a DNS-1123 subdomain (dot-separated lowercase labels, at most 253 characters)",
    )
}

/// A namespace: a DNS-1123 label (lowercase alphanumerics and `-`, at most
/// 63, starting and ending alphanumeric).
pub fn namespace(value: &str) -> Result<(), Invalid> {
    checked(
        "namespace",
        value,
        names::dns1123_label,
        "is not a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters, starting and ending with a letter or digit)",
    )
}

/// An object name: 1–253 characters from `A-Za-z0-9-._:@+=~`, not `.` or
/// `..` (the union of what Kubernetes allows per kind, minus anything a URL
/// path treats specially).
pub fn object_name(field: &'static str, value: &str) -> Result<(), Invalid> {
    let ok = !value.is_empty()
        && value.len() <= 253
        && value != "."
        && value != ".."
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:@+=~".contains(&b));
    ok.then_some(()).ok_or_else(|| {
        invalid(
            field,
            value,
            "is not a valid object name (1-253 characters: letters, digits and -._:@+=~; not '.' or '..'; no '/', '?', '%' or control characters)",
        )
    })
}

/// An API group: "" (core) or a DNS-1123 subdomain.
pub fn group(value: &str) -> Result<(), Invalid> {
    if value.is_empty() {
        return Ok(());
    }
    dns_subdomain("group", value)
}

/// An API version: a DNS-1035 label (`v1`, `v1beta2`, a CRD's version).
pub fn version(value: &str) -> Result<(), Invalid> {
    checked(
        "version",
        value,
        names::dns1035_label,
        "is not an API version (a DNS-1035 label such as v1 or v1beta1)",
    )
}

/// A kind: a letter, then letters and digits, at most 63 (`Deployment`).
pub fn kind(value: &str) -> Result<(), Invalid> {
    let b = value.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphabetic()
        && b.iter().all(u8::is_ascii_alphanumeric);
    ok.then_some(()).ok_or_else(|| {
        invalid(
            "kind",
            value,
            "is not a kind (a letter, then letters and digits, at most 63 characters)",
        )
    })
}

/// A group/version/kind.
pub fn gvk(g: &crate::meta::kind::Gvk) -> Result<(), Invalid> {
    group(&g.group)?;
    version(&g.version)?;
    kind(&g.kind)
}

/// A field manager of server-side apply: at most 128 printable ASCII
/// characters (Kubernetes' limit).
pub fn field_manager(value: &str) -> Result<(), Invalid> {
    printable("fieldManager", value, 128)
}

/// Printable ASCII without control characters, at most `max` bytes.
pub fn printable(field: &'static str, value: &str, max: usize) -> Result<(), Invalid> {
    let ok = value.len() <= max && value.bytes().all(|b| (0x20..0x7f).contains(&b));
    ok.then_some(()).ok_or_else(|| {
        invalid(
            field,
            value,
            &format!("must be at most {max} printable ASCII characters"),
        )
    })
}

/// Whether `value` holds no control characters other than newline and
/// tab: text a terminal shows as it is.
pub fn is_plain_text(value: &str) -> bool {
    value
        .chars()
        .all(|c| !c.is_control() || c == '\n' || c == '\t')
}

/// Text without control characters other than newline and tab, at most
/// `max` bytes (an event's note).
pub fn text(field: &'static str, value: &str, max: usize) -> Result<(), Invalid> {
    let ok = value.len() <= max && is_plain_text(value);
    ok.then_some(()).ok_or_else(|| {
        invalid(
            field,
            value,
            &format!("must be at most {max} bytes of text without control characters"),
        )
    })
}

/// A label key: a qualified name, that is an optional DNS-subdomain prefix
/// and `/`, then a name of at most 63 characters (alphanumerics, `-`, `_`,
/// `.`, starting and ending alphanumeric).
pub fn label_key(value: &str) -> Result<(), Invalid> {
    checked(
        "label key",
        value,
        names::qualified_name,
        "is not a label key (an optional DNS prefix and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_address_another_path() {
        for bad in [
            "",
            ".",
            "..",
            "web/status",
            "web/scale",
            "../secrets",
            "a?b=c",
            "a%2Fb",
            "a#b",
            "a b",
            "a\0b",
            "a\nb",
            "é",
        ] {
            assert!(object_name("name", bad).is_err(), "{bad:?} accepted");
        }
        for good in ["web", "web-1.example", "system:controller:x", "a_b", "A.B"] {
            assert!(object_name("name", good).is_ok(), "{good:?} refused");
        }
        assert!(object_name("name", &"a".repeat(254)).is_err());
    }

    #[test]
    fn namespaces_groups_versions_kinds() {
        assert!(namespace("default").is_ok());
        for bad in ["", "Default", "a/b", "a?", "-a", "a-", &"a".repeat(64)] {
            assert!(namespace(bad).is_err(), "{bad:?}");
        }
        assert!(group("").is_ok() && group("apps").is_ok() && group("demo.wasmctrl.dev").is_ok());
        assert!(group("apps/v1").is_err() && group("Apps").is_err() && group("a..b").is_err());
        assert!(version("v1").is_ok() && version("v1beta1").is_ok());
        assert!(version("").is_err() && version("1").is_err() && version("v1 ").is_err());
        assert!(kind("Deployment").is_ok() && kind("V1Thing").is_ok());
        assert!(kind("").is_err() && kind("Deploy/ment").is_err() && kind("1A").is_err());
    }

    #[test]
    fn refusals_name_the_field_and_do_not_echo_megabytes() {
        let e = object_name("name", &"x/".repeat(1 << 20)).unwrap_err();
        assert_eq!(e.field, "name");
        assert!(e.to_string().len() < 400, "{}", e.to_string().len());
    }

    #[test]
    fn label_keys() {
        assert!(label_key("app").is_ok() && label_key("app.kubernetes.io/name").is_ok());
        assert!(label_key("").is_err() && label_key("a/b/c").is_err() && label_key("-a").is_err());
    }

    mod properties {
        use proptest::prelude::*;

        use super::super::*;

        /// What a URL path or query would treat specially.
        fn url_safe(s: &str) -> bool {
            !s.bytes()
                .any(|b| b"/?#%&= \t\r\n\0\\".contains(&b) || !(0x20..0x7f).contains(&b))
        }

        // Bounded for CI (256 cases each); PROPTEST_CASES=100000 for a long run.
        proptest! {
            #[test]
            fn accepted_names_are_safe_in_a_path(s in "\\PC{0,40}|[a-z0-9./%?#-]{0,20}") {
                if object_name("name", &s).is_ok() {
                    prop_assert!(!s.is_empty() && s.len() <= 253 && s != "." && s != "..");
                    prop_assert!(!s.contains('/') && !s.contains('?') && !s.contains('%') && !s.contains('#'));
                }
                if namespace(&s).is_ok() {
                    prop_assert!(url_safe(&s) && !s.contains('.'));
                }
                if group(&s).is_ok() && !s.is_empty() {
                    prop_assert!(url_safe(&s));
                }
                if version(&s).is_ok() || kind(&s).is_ok() {
                    prop_assert!(url_safe(&s));
                }
            }
        }
    }
}
