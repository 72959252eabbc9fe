//! Label selectors in their string form (`app=web,tier!=db,env in (a,b),!legacy`),
//! for lists served from the cache.

use std::collections::BTreeMap;
use std::fmt;

use crate::meta::syntax as validate;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; all requirements must hold. Keys and values
/// are checked against Kubernetes label syntax, so what reaches the API
/// server is this parse printed back ([`fmt::Display`]), never the guest's
/// text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

/// Requirements one selector may hold, and values one set may hold.
const MAX_REQUIREMENTS: usize = 64;
const MAX_SET: usize = 64;

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for term in split_terms(s) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let req = if let Some(key) = term.strip_prefix('!') {
                Requirement::NotExists(key.trim().to_string())
            } else if let Some((k, v)) = term.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, set)) = split_set(term, " notin ") {
                Requirement::NotIn(k, set?)
            } else if let Some((k, set)) = split_set(term, " in ") {
                Requirement::In(k, set?)
            } else {
                Requirement::Exists(term.into())
            };
            req.check()
                .map_err(|e| format!("label selector term {:?}: {e}", cut(term)))?;
            reqs.push(req);
            if reqs.len() > MAX_REQUIREMENTS {
                return Err(format!(
                    "label selector has more than {MAX_REQUIREMENTS} requirements"
                ));
            }
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_by(|k| labels.get(k).map(String::as_str))
    }

    /// Whether the labels `label` looks up (key → value) satisfy every
    /// requirement.
    pub fn matches_by<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        let is_in = |set: &[String], v: &str| set.iter().any(|s| s == v);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => label(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
            Requirement::In(k, set) => label(k).is_some_and(|v| is_in(set, v)),
            Requirement::NotIn(k, set) => label(k).is_none_or(|v| !is_in(set, v)),
            Requirement::Exists(k) => label(k).is_some(),
            Requirement::NotExists(k) => label(k).is_none(),
        })
    }
}

impl Requirement {
    fn check(&self) -> Result<(), String> {
        let key = |k: &str| validate::label_key(k).map_err(|e| e.message);
        let value = |v: &str| validate::label_value(v).map_err(|e| e.message);
        match self {
            Requirement::Equals(k, v) | Requirement::NotEquals(k, v) => {
                key(k)?;
                value(v)
            }
            Requirement::In(k, set) | Requirement::NotIn(k, set) => {
                key(k)?;
                if set.is_empty() || set.len() > MAX_SET {
                    return Err(format!("a set must hold 1 to {MAX_SET} values"));
                }
                set.iter().try_for_each(|v| value(v))
            }
            Requirement::Exists(k) | Requirement::NotExists(k) => key(k),
        }
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match r {
                Requirement::Equals(k, v) => write!(f, "{k}={v}")?,
                Requirement::NotEquals(k, v) => write!(f, "{k}!={v}")?,
                Requirement::In(k, set) => write!(f, "{k} in ({})", set.join(","))?,
                Requirement::NotIn(k, set) => write!(f, "{k} notin ({})", set.join(","))?,
                Requirement::Exists(k) => write!(f, "{k}")?,
                Requirement::NotExists(k) => write!(f, "!{k}")?,
            }
        }
        Ok(())
    }
}

/// The start of a term, for an error message.
fn cut(s: &str) -> String {
    s.chars().take(64).collect()
}

/// Splits on commas outside parentheses.
fn split_terms(s: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&s[start..]);
    terms
}

fn split_set(term: &str, op: &str) -> Option<(String, Result<Vec<String>, String>)> {
    let (k, rest) = term.split_once(op)?;
    let rest = rest.trim();
    let set = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .map(|inner| {
            if inner.trim().is_empty() {
                Vec::new()
            } else {
                inner.split(',').map(|v| v.trim().to_string()).collect()
            }
        })
        .ok_or_else(|| format!("expected a parenthesised set in {term:?}"));
    Some((k.trim().to_string(), set))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn equality_set_and_existence() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let t = |s: &str| LabelSelector::parse(s).unwrap().matches(&l);
        assert!(t("app=web"));
        assert!(t("app==web,tier!=db"));
        assert!(!t("app=db"));
        assert!(t("tier in (front, back)"));
        assert!(!t("tier notin (front)"));
        assert!(t("app,!legacy"));
        assert!(!t("legacy"));
        assert!(t(""));
        assert!(LabelSelector::parse("app in front").is_err());
    }

    #[test]
    fn only_label_syntax_is_accepted_and_printed_back() {
        for bad in [
            "app=web&x=1",
            "app=we b",
            "a/b/c=d",
            "app in ()",
            "app=web?watch=1",
            "=web",
            "app==",
        ] {
            // `app==` is `app` equal to the empty value: valid.
            if bad == "app==" {
                assert!(LabelSelector::parse(bad).is_ok());
                continue;
            }
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?} accepted");
        }
        let s = LabelSelector::parse(" app = web , tier in (a, b),!legacy,x.io/y").unwrap();
        assert_eq!(s.to_string(), "app=web,tier in (a,b),!legacy,x.io/y");
        assert!(LabelSelector::parse(&"a=b,".repeat(100)).is_err());
    }

    mod properties {
        use proptest::prelude::*;

        use super::super::*;

        // Bounded for CI (256 cases); PROPTEST_CASES=100000 for a long run.
        proptest! {
            #[test]
            fn a_selector_is_printed_back_as_what_was_parsed(s in "[a-z0-9=!,() ./_-]{0,60}|\\PC{0,60}") {
                if let Ok(sel) = LabelSelector::parse(&s) {
                    let printed = sel.to_string();
                    let reparsed = LabelSelector::parse(&printed);
                    prop_assert_eq!(reparsed, Ok(sel));
                    prop_assert!(!printed.contains('&') && !printed.contains('?') && !printed.contains('#'));
                }
            }

        }
    }
}
