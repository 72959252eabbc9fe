//! Label selectors in their string form (`app=web,tier!=db,env in (a,b),!legacy`),
//! for lists served from the cache.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; all requirements must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

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
            } else if term
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            {
                Requirement::Exists(term.into())
            } else {
                return Err(format!("cannot parse label selector term {term:?}"));
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, set) => labels.get(k).is_some_and(|v| set.contains(v)),
            Requirement::NotIn(k, set) => labels.get(k).is_none_or(|v| !set.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
        })
    }
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
        .map(|inner| inner.split(',').map(|v| v.trim().to_string()).collect())
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
}
