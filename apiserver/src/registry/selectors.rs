//! Label and field selectors as list and watch filter them.

use serde_json::Value;

/// A selector parse failure (answered as 400 BadRequest).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SelectorError {
    #[error("unable to parse requirement: {0}")]
    Label(String),
    #[error("invalid selector: '{0}'; can't understand '{0}'")]
    Field(String),
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed `labelSelector`; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector {
    reqs: Vec<LabelReq>,
}

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn set_values(s: &str) -> Result<Vec<String>, SelectorError> {
    let s = s.trim();
    let inner = s
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| SelectorError::Label(s.to_string()))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`,
    /// comma-separated (AND).
    pub(crate) fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let p = part.trim();
            if p.is_empty() {
                continue;
            }
            let req = if let Some(k) = p.strip_prefix('!') {
                LabelReq::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = p.split_once("!=") {
                LabelReq::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once("==") {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once('=') {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some(idx) = p.find(" notin ") {
                LabelReq::NotIn(p[..idx].trim().into(), set_values(&p[idx + 7..])?)
            } else if let Some(idx) = p.find(" in ") {
                LabelReq::In(p[..idx].trim().into(), set_values(&p[idx + 4..])?)
            } else if p.contains(|c: char| c.is_whitespace() || "()<>".contains(c)) {
                return Err(SelectorError::Label(p.to_string()));
            } else {
                LabelReq::Exists(p.to_string())
            };
            reqs.push(req);
        }
        Ok(LabelSelector { reqs })
    }

    /// Builds a selector from a `metav1.LabelSelector` object
    /// (`matchLabels` + `matchExpressions`), as used by scale subresources.
    pub(crate) fn from_object(sel: &Value) -> Self {
        let mut reqs = Vec::new();
        if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push(LabelReq::Eq(k.clone(), v.as_str().unwrap_or("").into()));
            }
        }
        for e in sel
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = e["key"].as_str().unwrap_or("").to_string();
            let values: Vec<String> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            reqs.push(match e["operator"].as_str().unwrap_or("") {
                "In" => LabelReq::In(key, values),
                "NotIn" => LabelReq::NotIn(key, values),
                "DoesNotExist" => LabelReq::NotExists(key),
                _ => LabelReq::Exists(key),
            });
        }
        LabelSelector { reqs }
    }

    /// Whether the object's labels satisfy every requirement.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        if self.reqs.is_empty() {
            return true;
        }
        let labels = obj.get("metadata").and_then(|m| m.get("labels"));
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.reqs.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }

    /// The canonical string form (`a=b,c in (d,e)`), as Scale.status.selector.
    pub(crate) fn to_selector_string(&self) -> String {
        self.reqs
            .iter()
            .map(|r| match r {
                LabelReq::Eq(k, v) => format!("{k}={v}"),
                LabelReq::NotEq(k, v) => format!("{k}!={v}"),
                LabelReq::In(k, vs) => format!("{k} in ({})", vs.join(",")),
                LabelReq::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
                LabelReq::Exists(k) => k.clone(),
                LabelReq::NotExists(k) => format!("!{k}"),
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A parsed `fieldSelector`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector {
    reqs: Vec<(String, bool, String)>,
}

/// Fields every kind supports.
const COMMON_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];

/// Extra selectable fields of a kind (core v1 names, which is how Events are
/// stored).
fn kind_fields(group: &str, kind: &str) -> &'static [&'static str] {
    match (group, kind) {
        ("", "Event") | ("events.k8s.io", "Event") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "Pod") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "Secret") => &["type"],
        ("", "Namespace") => &["status.phase"],
        ("apps", "ReplicaSet") => &["status.replicas"],
        ("batch", "Job") => &["status.successful"],
        _ => &[],
    }
}

impl FieldSelector {
    /// Parses `f=v`, `f==v`, `f!=v`, comma-separated, checking the field is
    /// selectable for this kind.
    pub(crate) fn parse(s: &str, group: &str, kind: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for part in s.split(',') {
            let p = part.trim();
            if p.is_empty() {
                continue;
            }
            let (f, eq, v) = if let Some((f, v)) = p.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = p.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = p.split_once('=') {
                (f, true, v)
            } else {
                return Err(SelectorError::Field(p.to_string()));
            };
            let f = f.trim();
            if !COMMON_FIELDS.contains(&f) && !kind_fields(group, kind).contains(&f) {
                return Err(SelectorError::UnsupportedField(f.to_string()));
            }
            reqs.push((f.to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector { reqs })
    }

    /// Whether every requirement holds. Objects are matched in stored form.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.reqs.iter().all(|(f, eq, v)| {
            let actual = field_value(obj, f);
            (actual == *v) == *eq
        })
    }

    /// The value of `metadata.name` an `=` requirement pins, which lets list
    /// skip scanning.
    pub(crate) fn exact_name(&self) -> Option<&str> {
        self.reqs
            .iter()
            .find(|(f, eq, _)| f == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }
}

/// The name a field selector pins with `metadata.name=NAME` (or `==`),
/// whatever else it requires, if that name is a valid path segment: what
/// upstream's request-info parsing takes as the name a list or watch is
/// about. Anything the selector returns then has that name, so
/// authorizing the request for that name alone is sound.
pub(crate) fn exact_name_of(selector: &str) -> Option<String> {
    selector.split(',').find_map(|term| {
        let term = term.trim();
        if term.contains("!=") {
            return None;
        }
        let (field, value) = term.split_once("==").or_else(|| term.split_once('='))?;
        let value = value.trim();
        (field.trim() == "metadata.name"
            && !value.is_empty()
            && value != "."
            && value != ".."
            && !value.contains(['/', '%']))
        .then(|| value.to_string())
    })
}

/// A selectable field as a string ("" when absent, as the real server does).
fn field_value(obj: &Value, field: &str) -> String {
    if field == "source" {
        return obj
            .get("source")
            .and_then(|s| s.get("component"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
    }
    match crate::values::get_path(obj, field) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn label_operators() {
        let o = obj(json!({"app": "x", "tier": "web"}));
        for (sel, want) in [
            ("", true),
            ("app=x", true),
            ("app==x", true),
            ("app!=x", false),
            ("app in (x,y)", true),
            ("app notin (x,y)", false),
            ("tier", true),
            ("!tier", false),
            ("app=x,tier=db", false),
            ("missing notin (a)", true),
            ("app in (x, y),!gone", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&o),
                want,
                "{sel}"
            );
        }
        assert!(LabelSelector::parse("a b").is_err());
    }

    #[test]
    fn field_selectors() {
        let o = obj(json!({}));
        let s =
            FieldSelector::parse("metadata.name=a,metadata.namespace!=x", "", "ConfigMap").unwrap();
        assert!(s.matches(&o));
        assert_eq!(s.exact_name(), Some("a"));
        assert_eq!(
            exact_name_of("metadata.namespace=x, metadata.name==a"),
            Some("a".into())
        );
        assert_eq!(exact_name_of("metadata.name!=a"), None);
        assert_eq!(exact_name_of("metadata.name=a/b"), None);
        assert_eq!(exact_name_of("metadata.name="), None);
        assert_eq!(
            FieldSelector::parse("spec.x=1", "", "ConfigMap").unwrap_err(),
            SelectorError::UnsupportedField("spec.x".into())
        );
        let ev = json!({"involvedObject": {"kind": "ConfigMap", "name": "c1"}, "source": {"component": "k"}});
        let s =
            FieldSelector::parse("involvedObject.kind=ConfigMap,source=k", "", "Event").unwrap();
        assert!(s.matches(&ev));
    }
}
