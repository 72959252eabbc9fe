//! The syntax of Kubernetes names, as `k8s.io/apimachinery/pkg/util/validation`
//! checks it: DNS-1123 labels (namespaces), DNS-1123 subdomains (most object
//! names, API groups, label-key prefixes), DNS-1035 labels (Services, API
//! versions), qualified names (label and annotation keys, finalizers) and
//! label values.
//!
//! Each check returns the first rule a value breaks as a [`NameError`],
//! whose `Display` is the API server's message for that rule, so a caller
//! answering like the API server only adds the field and the value
//! (`metadata.name: Invalid value: "Web": a lowercase RFC 1123 …`).
//! Lengths are checked before characters and count bytes, as upstream does.
//! A caller with its own wording matches on the variant, or only asks
//! `is_ok()`: the variants say which part of the rule failed (too long,
//! empty, wrong characters; prefix or name part of a qualified name).

/// Most bytes in a DNS-1123 label (and a DNS-1035 label).
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
/// Most bytes in a DNS-1123 subdomain.
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// Most bytes in the name part of a qualified name (after the `/`).
pub const QUALIFIED_NAME_MAX_LENGTH: usize = 63;
/// Most bytes in a label value.
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// The rule a name broke. `Display` is the message kube-apiserver gives for
/// it (without the field and value it prefixes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// Longer than `max` bytes (a label, subdomain or label value).
    #[error("must be no more than {max} characters")]
    TooLong {
        /// The limit.
        max: usize,
    },
    /// Not `[a-z0-9]([-a-z0-9]*[a-z0-9])?` (empty included).
    #[error("{DNS1123_LABEL_MSG}")]
    Dns1123Label,
    /// Not dot-separated DNS-1123 labels (empty included).
    #[error("{DNS1123_SUBDOMAIN_MSG}")]
    Dns1123Subdomain,
    /// Not `[a-z]([-a-z0-9]*[a-z0-9])?` (empty included).
    #[error("{DNS1035_LABEL_MSG}")]
    Dns1035Label,
    /// A label value that is not empty and not
    /// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`.
    #[error("{LABEL_VALUE_MSG}")]
    LabelValue,
    /// A qualified name with more than one `/`.
    #[error(
        "a qualified name {QUALIFIED_NAME_MSG} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
    )]
    QualifiedName,
    /// A qualified name with an empty prefix (`/name`).
    #[error("prefix part must be non-empty")]
    PrefixEmpty,
    /// A qualified name whose prefix is longer than a DNS-1123 subdomain.
    #[error("prefix part must be no more than {DNS1123_SUBDOMAIN_MAX_LENGTH} characters")]
    PrefixTooLong,
    /// A qualified name whose prefix is not a DNS-1123 subdomain.
    #[error("prefix part {DNS1123_SUBDOMAIN_MSG}")]
    Prefix,
    /// A qualified name with an empty name part (`""`, `example.com/`).
    #[error("name part must be non-empty")]
    NamePartEmpty,
    /// A qualified name whose name part is longer than
    /// [`QUALIFIED_NAME_MAX_LENGTH`].
    #[error("name part must be no more than {QUALIFIED_NAME_MAX_LENGTH} characters")]
    NamePartTooLong,
    /// A qualified name whose name part has other characters than
    /// alphanumerics, `-`, `_` and `.`, or does not start and end
    /// alphanumeric.
    #[error("name part {QUALIFIED_NAME_MSG}")]
    NamePart,
}

fn lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, any length.
fn is_label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            lower_alnum(first)
                && lower_alnum(last)
                && b.iter().all(|&c| lower_alnum(c) || c == b'-')
        }
        _ => false,
    }
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, any length.
fn is_name_chars(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))
        }
        _ => false,
    }
}

/// A DNS-1123 label, as namespace names are: 1 to 63 lowercase
/// alphanumerics or `-`, starting and ending alphanumeric (`my-name`,
/// `123-abc`).
///
/// # Errors
///
/// [`NameError::TooLong`] past 63 bytes, else [`NameError::Dns1123Label`].
pub fn dns1123_label(value: &str) -> Result<(), NameError> {
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        return Err(NameError::TooLong {
            max: DNS1123_LABEL_MAX_LENGTH,
        });
    }
    is_label_chars(value)
        .then_some(())
        .ok_or(NameError::Dns1123Label)
}

/// A DNS-1123 subdomain, as most object names and API groups are: at most
/// 253 bytes of dot-separated pieces, each lowercase alphanumerics or `-`,
/// starting and ending alphanumeric (`example.com`).
///
/// As upstream, the pieces have no length limit of their own (the regular
/// expression Kubernetes uses has none), so a name with a 64-byte piece is
/// valid.
///
/// # Errors
///
/// [`NameError::TooLong`] past 253 bytes, else [`NameError::Dns1123Subdomain`].
pub fn dns1123_subdomain(value: &str) -> Result<(), NameError> {
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        return Err(NameError::TooLong {
            max: DNS1123_SUBDOMAIN_MAX_LENGTH,
        });
    }
    value
        .split('.')
        .all(is_label_chars)
        .then_some(())
        .ok_or(NameError::Dns1123Subdomain)
}

/// A DNS-1035 label, as Service names and API versions are: a DNS-1123
/// label that starts with a letter (`my-name`, `v1beta1`).
///
/// # Errors
///
/// [`NameError::TooLong`] past 63 bytes, else [`NameError::Dns1035Label`].
pub fn dns1035_label(value: &str) -> Result<(), NameError> {
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        return Err(NameError::TooLong {
            max: DNS1123_LABEL_MAX_LENGTH,
        });
    }
    (is_label_chars(value) && value.as_bytes()[0].is_ascii_lowercase())
        .then_some(())
        .ok_or(NameError::Dns1035Label)
}

/// A qualified name, as label keys, annotation keys and finalizers are: an
/// optional DNS-1123 subdomain prefix and `/`, then a name part of 1 to 63
/// alphanumerics, `-`, `_` or `.`, starting and ending alphanumeric
/// (`app`, `app.kubernetes.io/name`).
///
/// # Errors
///
/// The first broken rule, in upstream's order: more than one `/`
/// ([`NameError::QualifiedName`]); the prefix empty, too long or not a
/// subdomain ([`NameError::PrefixEmpty`], [`NameError::PrefixTooLong`],
/// [`NameError::Prefix`]); the name part empty, too long or of the wrong
/// characters ([`NameError::NamePartEmpty`], [`NameError::NamePartTooLong`],
/// [`NameError::NamePart`]).
pub fn qualified_name(value: &str) -> Result<(), NameError> {
    let mut parts = value.split('/');
    let (prefix, name) = match (parts.next(), parts.next(), parts.next()) {
        (Some(name), None, _) => (None, name),
        (Some(prefix), Some(name), None) => (Some(prefix), name),
        _ => return Err(NameError::QualifiedName),
    };
    match prefix {
        Some("") => return Err(NameError::PrefixEmpty),
        Some(p) => match dns1123_subdomain(p) {
            Ok(()) => {}
            Err(NameError::TooLong { .. }) => return Err(NameError::PrefixTooLong),
            Err(_) => return Err(NameError::Prefix),
        },
        None => {}
    }
    if name.is_empty() {
        Err(NameError::NamePartEmpty)
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        Err(NameError::NamePartTooLong)
    } else if !is_name_chars(name) {
        Err(NameError::NamePart)
    } else {
        Ok(())
    }
}

/// A label value: empty, or 1 to 63 alphanumerics, `-`, `_` or `.`,
/// starting and ending alphanumeric (`MyValue`, `my_value`, `12345`).
///
/// # Errors
///
/// [`NameError::TooLong`] past 63 bytes, else [`NameError::LabelValue`].
pub fn label_value(value: &str) -> Result<(), NameError> {
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        return Err(NameError::TooLong {
            max: LABEL_VALUE_MAX_LENGTH,
        });
    }
    (value.is_empty() || is_name_chars(value))
        .then_some(())
        .ok_or(NameError::LabelValue)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1123_labels() {
        for good in ["a", "default", "kube-system", "123-abc", &"a".repeat(63)] {
            assert_eq!(dns1123_label(good), Ok(()), "{good:?}");
        }
        for bad in ["", "Default", "a.b", "a/b", "a?", "-a", "a-", "a_b", "é"] {
            assert_eq!(dns1123_label(bad), Err(NameError::Dns1123Label), "{bad:?}");
        }
        assert_eq!(
            dns1123_label(&"a".repeat(64)),
            Err(NameError::TooLong { max: 63 })
        );
    }

    #[test]
    fn dns1123_subdomains() {
        for good in [
            "apps",
            "demo.wasmctrl.dev",
            "a-b.c",
            "1.2.3",
            &"a".repeat(100),
        ] {
            assert_eq!(dns1123_subdomain(good), Ok(()), "{good:?}");
        }
        for bad in [
            "", "Apps", "apps/v1", "a..b", ".a", "a.", "a.-b", "Bad_Name",
        ] {
            assert_eq!(
                dns1123_subdomain(bad),
                Err(NameError::Dns1123Subdomain),
                "{bad:?}"
            );
        }
        assert_eq!(
            dns1123_subdomain(&"a".repeat(254)),
            Err(NameError::TooLong { max: 253 })
        );
    }

    #[test]
    fn dns1035_labels() {
        for good in ["v1", "v1beta1", "my-name"] {
            assert_eq!(dns1035_label(good), Ok(()), "{good:?}");
        }
        for bad in ["", "1", "1abc", "v1 ", "-a", "V1"] {
            assert_eq!(dns1035_label(bad), Err(NameError::Dns1035Label), "{bad:?}");
        }
        assert_eq!(
            dns1035_label(&"a".repeat(64)),
            Err(NameError::TooLong { max: 63 })
        );
    }

    #[test]
    fn qualified_names() {
        for good in [
            "app",
            "app.kubernetes.io/name",
            "example.com/f",
            "A.b_c-D",
            &"a".repeat(63),
        ] {
            assert_eq!(qualified_name(good), Ok(()), "{good:?}");
        }
        for (bad, err) in [
            ("", NameError::NamePartEmpty),
            ("example.com/", NameError::NamePartEmpty),
            ("a/b/c", NameError::QualifiedName),
            ("/a", NameError::PrefixEmpty),
            ("Example.com/a", NameError::Prefix),
            ("-a", NameError::NamePart),
            ("a b", NameError::NamePart),
            ("a_", NameError::NamePart),
        ] {
            assert_eq!(qualified_name(bad), Err(err), "{bad:?}");
        }
        assert_eq!(
            qualified_name(&"a".repeat(64)),
            Err(NameError::NamePartTooLong)
        );
        assert_eq!(
            qualified_name(&format!("{}/a", "a".repeat(254))),
            Err(NameError::PrefixTooLong)
        );
    }

    #[test]
    fn label_values() {
        for good in ["", "web-1", "MyValue", "my_value", "12345", "a.b"] {
            assert_eq!(label_value(good), Ok(()), "{good:?}");
        }
        for bad in ["a b", "a,b", "-v", "v-", "a/b", "é"] {
            assert_eq!(label_value(bad), Err(NameError::LabelValue), "{bad:?}");
        }
        assert_eq!(
            label_value(&"a".repeat(64)),
            Err(NameError::TooLong { max: 63 })
        );
    }

    /// The messages are kube-apiserver's, word for word.
    #[test]
    fn messages_are_upstream() {
        assert_eq!(
            NameError::TooLong { max: 253 }.to_string(),
            "must be no more than 253 characters"
        );
        assert_eq!(
            NameError::Dns1123Label.to_string(),
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        );
        assert_eq!(
            NameError::Prefix.to_string(),
            format!("prefix part {DNS1123_SUBDOMAIN_MSG}")
        );
        assert_eq!(
            NameError::NamePart.to_string(),
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        );
        assert!(
            NameError::QualifiedName
                .to_string()
                .starts_with("a qualified name must consist of")
        );
        assert!(NameError::QualifiedName.to_string().ends_with(
            "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ));
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
            fn accepted_names_are_safe_in_a_path(s in "\\PC{0,40}|[a-zA-Z0-9./%?#_-]{0,20}") {
                if dns1123_label(&s).is_ok() {
                    prop_assert!(url_safe(&s) && !s.contains('.') && !s.is_empty());
                    prop_assert!(dns1123_subdomain(&s).is_ok());
                }
                if dns1035_label(&s).is_ok() {
                    prop_assert!(dns1123_label(&s).is_ok());
                }
                if dns1123_subdomain(&s).is_ok() {
                    prop_assert!(url_safe(&s));
                    prop_assert!(s.len() > 63 || qualified_name(&s).is_ok());
                }
                if label_value(&s).is_ok() {
                    prop_assert!(url_safe(&s) && s.len() <= 63);
                }
                if qualified_name(&s).is_ok() {
                    prop_assert!(s.matches('/').count() <= 1);
                    prop_assert!(s.split('/').all(url_safe));
                }
            }
        }
    }
}
