//! A write as a shadow run compares it: what was written where, the body
//! as normalized JSON, and the multiset difference of two runs' writes.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::meta::normalized::{canonical, parse_body};
use crate::sandbox::hostapi::{Body, EventType, Gvk, KubeRequest, ObjectPatch};

/// Bytes of one write body kept in a divergence (the comparison uses all).
const MAX_KEPT_BODY: usize = 64 << 10;

/// Writes kept in each list of a divergence (each side's writes, each
/// side of the difference); the rest are counted.
pub(super) const MAX_KEPT_WRITES: usize = 100;

/// Write bodies past this many bytes are compared by their digest instead
/// of as normalized JSON, and a shadow run does not apply a patch this
/// large (or to an object this large): a tree of a body made of millions
/// of tiny values costs about 16 times its text.
pub(super) const MAX_NORMALIZED: usize = 256 << 10;

/// One write, as compared: what was written where, normalized. The body is
/// kept as its normalized text, never as a tree, so that what a run keeps
/// costs what it is counted as.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Write {
    /// `create`, `replace`, `patch`, `apply`, `replace-status`,
    /// `patch-status`, `apply-status`, `delete` or `event`.
    pub verb: String,
    /// `group/Kind` (`Kind` for the core group).
    pub kind: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// The object or patch as normalized JSON (keys sorted); None for
    /// deletes.
    pub body: Option<Box<RawValue>>,
    /// Verb, kind, namespace and name: with the body, what equality means.
    #[serde(skip)]
    head: String,
}

impl PartialEq for Write {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Write {}

fn kind_name(kind: &Gvk) -> String {
    if kind.group.is_empty() {
        kind.kind.clone()
    } else {
        format!("{}/{}", kind.group, kind.kind)
    }
}

fn raw(text: String) -> Option<Box<RawValue>> {
    RawValue::from_string(text).ok()
}

impl Write {
    fn new(
        verb: &str,
        kind: &Gvk,
        namespace: Option<String>,
        name: Option<String>,
        body: Option<Value>,
    ) -> Self {
        let kind = kind_name(kind);
        let head = format!("{verb}|{kind}|{namespace:?}|{name:?}");
        Write {
            verb: verb.into(),
            kind,
            namespace,
            name,
            body: body.as_ref().and_then(|b| raw(canonical(b))),
            head,
        }
    }

    /// What equality compares: the head and the normalized body.
    fn key(&self) -> (&str, &str) {
        (&self.head, self.body.as_deref().map_or("", RawValue::get))
    }

    /// The bytes this write holds, as a run's budget counts them.
    pub(super) fn bytes(&self) -> usize {
        self.head.len() + self.body.as_deref().map_or(0, |b| b.get().len())
    }

    /// The write `request` makes; None for reads.
    pub(super) fn of(request: &KubeRequest) -> Option<Write> {
        let verb = match request {
            KubeRequest::Get { .. } | KubeRequest::List { .. } => return None,
            KubeRequest::Patch {
                patch: ObjectPatch::Apply { .. },
                ..
            } => "apply",
            KubeRequest::PatchStatus {
                patch: ObjectPatch::Apply { .. },
                ..
            } => "apply-status",
            KubeRequest::RecordEvent { .. } => "event",
            other => other.operation(),
        };
        let body = match request {
            KubeRequest::RecordEvent { event: e } => Some(serde_json::json!({
                "type": match e.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                },
                "reason": e.reason,
                "action": e.action,
                "note": e.note,
            })),
            other => other.payload().map(compared),
        };
        let at = request.address();
        let name = match request {
            KubeRequest::Create { .. } => body
                .as_ref()
                .and_then(|b| b["metadata"]["name"].as_str())
                .map(str::to_string),
            _ => at.name.map(str::to_string),
        };
        let namespace = at.namespace.map(str::to_string);
        Some(Write::new(verb, at.kind, namespace, name, body))
    }

    /// This write as kept in a divergence: a body past
    /// [`MAX_KEPT_BODY`] is replaced by its size.
    pub(super) fn kept(&self) -> Write {
        let mut w = self.clone();
        if let Some(len) = w.body.as_deref().map(|b| b.get().len())
            && len > MAX_KEPT_BODY
        {
            w.body = raw(format!("{{\"truncated\":{len}}}"));
        }
        w
    }
}

/// `writes` as a divergence keeps them: at most [`MAX_KEPT_WRITES`], each
/// [`Write::kept`], and how many more there were.
pub(super) fn kept<'a>(writes: impl ExactSizeIterator<Item = &'a Write>) -> (Vec<Write>, usize) {
    let omitted = writes.len().saturating_sub(MAX_KEPT_WRITES);
    (
        writes.take(MAX_KEPT_WRITES).map(Write::kept).collect(),
        omitted,
    )
}

/// A write body as compared: normalized JSON, or past
/// [`MAX_NORMALIZED`] its name, size and SHA-256.
fn compared(json: &Body) -> Value {
    if json.len() <= MAX_NORMALIZED {
        return parse_body(json);
    }
    use sha2::Digest as _;
    let name = json.object_name();
    serde_json::json!({
        "metadata": { "name": name },
        "bytes": json.len(),
        "sha256": hex::encode(sha2::Sha256::digest(json.as_bytes())),
    })
}

/// Multiset difference: each write of `a` not matched by one of `b`.
pub(super) fn minus<'a>(a: &'a [Write], b: &[Write]) -> Vec<&'a Write> {
    let mut left: HashMap<(&str, &str), usize> = HashMap::new();
    for w in b {
        *left.entry(w.key()).or_default() += 1;
    }
    a.iter()
        .filter(|w| match left.get_mut(&w.key()) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .collect()
}
