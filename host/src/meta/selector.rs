//! Label selectors in their string form (`app=web,tier!=db,env in (a,b),!legacy`),
//! for lists served from the cache and for the keys a transcript records.
//!
//! The grammar, the matching and the printing are
//! `wasmctrl_apimachinery::selector`'s, the same the API server and the
//! guest SDK's fake use; the host adds its bounds on what a guest may send
//! (64 requirements of at most 64 values each) and refuses in text.

use std::collections::BTreeMap;
use std::fmt;

use wasmctrl_apimachinery::selector::{self, SelectorBounds};

/// A parsed label selector; all requirements must hold. Keys and values
/// are checked against Kubernetes label syntax, so what reaches the API
/// server is this parse printed back ([`fmt::Display`]), never the guest's
/// text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelector(selector::LabelSelector);

/// Requirements one selector may hold, and values one set may hold.
const BOUNDS: SelectorBounds = SelectorBounds {
    max_requirements: 64,
    max_values: 64,
};

impl LabelSelector {
    /// Parses the string form within the host's bounds.
    ///
    /// # Errors
    ///
    /// The parser's refusal (`label selector: unable to parse requirement:
    /// …`), which quotes at most 64 characters of the text.
    pub fn parse(s: &str) -> Result<Self, String> {
        selector::LabelSelector::parse_with(s, BOUNDS)
            .map(Self)
            .map_err(|e| format!("label selector: {e}"))
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.matches(labels)
    }

    /// Whether the labels `label` looks up (key → value) satisfy every
    /// requirement.
    pub fn matches_by<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.matches_by(label)
    }
}

impl LabelSelector {
    /// The object form (`matchExpressions`) Kubernetes objects carry.
    pub fn to_object(&self) -> serde_json::Value {
        self.0.to_object()
    }
}

impl fmt::Display for LabelSelector {
    /// The canonical string form, which parses back to an equal selector.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
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
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?} accepted");
        }
        // `app==` is `app` equal to the empty value.
        assert!(LabelSelector::parse("app==").is_ok());
        let s = LabelSelector::parse(" app = web , tier in (a, b),!legacy,x.io/y").unwrap();
        assert_eq!(s.to_string(), "app=web,tier in (a,b),!legacy,x.io/y");
    }

    #[test]
    fn the_host_bounds_hold_and_refusals_do_not_echo_megabytes() {
        let many = |n: usize| vec!["a=b"; n].join(",");
        assert!(LabelSelector::parse(&many(64)).is_ok());
        assert!(LabelSelector::parse(&many(65)).is_err());
        let set = |n: usize| format!("k in ({})", vec!["v"; n].join(","));
        assert!(LabelSelector::parse(&set(64)).is_ok());
        assert!(LabelSelector::parse(&set(65)).is_err());
        let e = LabelSelector::parse(&format!("a={}", "x ".repeat(1 << 20))).unwrap_err();
        assert!(
            e.starts_with("label selector: unable to parse requirement: "),
            "{e}"
        );
        assert!(e.len() < 400, "{}", e.len());
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
