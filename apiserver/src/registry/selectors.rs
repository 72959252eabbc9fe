//! Label and field selectors as list and watch filter them. Label
//! selectors are `wasmctrl_apimachinery::selector`'s, unbounded as
//! kube-apiserver's (the request's size bounds the text); field selectors
//! are the server's own, since which fields can be selected depends on the
//! kind.

use serde_json::Value;
use wasmctrl_apimachinery::selector::{self, SelectorBounds};

/// A selector parse failure (answered as 400 BadRequest).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SelectorError {
    /// A label selector that does not parse; the message starts
    /// `unable to parse requirement: `, as upstream's.
    #[error("{0}")]
    Label(#[from] selector::SelectorError),
    #[error("invalid selector: '{0}'; can't understand '{0}'")]
    Field(String),
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

/// A parsed `labelSelector`; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(selector::LabelSelector);

impl LabelSelector {
    /// Parses the string form (`k=v`, `k==v`, `k!=v`, `k in (a,b)`,
    /// `k notin (a,b)`, `k`, `!k`, comma-separated).
    pub(crate) fn parse(s: &str) -> Result<Self, SelectorError> {
        Ok(Self(selector::LabelSelector::parse_with(
            s,
            SelectorBounds::UNLIMITED,
        )?))
    }

    /// The selector of a `metav1.LabelSelector` object (`matchLabels` and
    /// `matchExpressions`), as a scale subresource reports it; `None` if
    /// the object is not a valid selector.
    pub(crate) fn from_object(sel: &Value) -> Option<Self> {
        selector::LabelSelector::from_object(sel, SelectorBounds::UNLIMITED)
            .ok()
            .map(Self)
    }

    /// Whether it matches every object.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the object's labels satisfy every requirement.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.0
            .matches_json(obj.pointer("/metadata/labels").unwrap_or(&Value::Null))
    }

    /// The canonical string form (`a=b,c in (d,e)`), as Scale.status.selector.
    pub(crate) fn to_selector_string(&self) -> String {
        self.0.to_string()
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

    /// Whether it matches every object.
    pub(crate) fn is_empty(&self) -> bool {
        self.reqs.is_empty()
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
/// The parts of a stored object of `group`/`kind` that label and field
/// selectors read, in their places: its labels and the kind's selectable
/// fields. Watchers evaluate selectors on it, shared per event, instead of
/// each parsing the whole object.
pub(crate) fn selectable_view(obj: &Value, group: &str, kind: &str) -> Value {
    let mut view = Value::Object(serde_json::Map::new());
    if let Some(labels) = obj.pointer("/metadata/labels") {
        crate::values::set_path(&mut view, "metadata.labels", labels.clone());
    }
    for field in COMMON_FIELDS.iter().chain(kind_fields(group, kind)) {
        // `source` selects on the event source's component.
        let path = if *field == "source" {
            "source.component"
        } else {
            field
        };
        if let Some(value) = crate::values::get_path(obj, path) {
            crate::values::set_path(&mut view, path, value.clone());
        }
    }
    view
}

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
        assert!(
            LabelSelector::parse("a b")
                .unwrap_err()
                .to_string()
                .starts_with("unable to parse requirement: ")
        );
        let o = json!({"metadata": {"name": "a"}});
        assert!(LabelSelector::parse("!app").unwrap().matches(&o));
        assert!(!LabelSelector::parse("app").unwrap().matches(&o));
    }

    #[test]
    fn objects_print_as_strings() {
        let sel = json!({"matchLabels": {"b": "2", "a": "1"},
                         "matchExpressions": [{"key": "t", "operator": "In", "values": ["x", "y"]}]});
        assert_eq!(
            LabelSelector::from_object(&sel)
                .unwrap()
                .to_selector_string(),
            "a=1,b=2,t in (x,y)"
        );
        assert_eq!(
            LabelSelector::from_object(&json!({"matchLabels": {"a b": "1"}})),
            None
        );
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
