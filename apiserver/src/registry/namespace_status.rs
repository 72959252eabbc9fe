//! The conditions upstream's namespace controller keeps on a terminating
//! namespace, so that `kubectl describe namespace` and `kubectl get ns -o
//! yaml` say why it stays `Terminating`: the deletes of its contents that
//! failed (an admission webhook refused them), what is left of it, and the
//! finalizers that hold what is left.
//!
//! Five conditions, as upstream writes them: `NamespaceDeletionDiscoveryFailure`
//! and `NamespaceDeletionGroupVersionParsingFailure` (always `False` here:
//! every resource is known in-process), `NamespaceDeletionContentFailure`,
//! `NamespaceContentRemaining` and `NamespaceFinalizersRemaining`. Each
//! keeps its `lastTransitionTime` while its status stays the same.
//!
//! One difference: upstream counts a failure per resource type whose
//! collection failed and quotes each one's error; here each resource type
//! whose delete of some object failed counts once, with the first such
//! object's error.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// What one pass over a terminating namespace's contents found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ContentReport {
    /// Per resource type (`configmaps`, `deployments.apps`): the first
    /// error of a delete that failed.
    pub(crate) failures: BTreeMap<String, String>,
    /// Per resource type: the objects left.
    pub(crate) remaining: BTreeMap<String, usize>,
    /// Per finalizer: the objects left that carry it.
    pub(crate) finalizers: BTreeMap<String, usize>,
}

/// The conditions' types, in upstream's order, with the reason and message
/// each has when nothing is wrong.
const OK: [(&str, &str, &str); 5] = [
    (
        "NamespaceDeletionDiscoveryFailure",
        "ResourcesDiscovered",
        "All resources successfully discovered",
    ),
    (
        "NamespaceDeletionGroupVersionParsingFailure",
        "ParsedGroupVersions",
        "All legacy kube types successfully parsed",
    ),
    (
        "NamespaceDeletionContentFailure",
        "ContentDeleted",
        "All content successfully deleted, may be waiting on finalization",
    ),
    (
        "NamespaceContentRemaining",
        "ContentRemoved",
        "All content successfully removed",
    ),
    (
        "NamespaceFinalizersRemaining",
        "ContentHasNoFinalizers",
        "All content-preserving finalizers finished",
    ),
];

/// The longest message a condition quotes of the failures: a webhook's
/// message may be long, and a namespace's status is no place for it all.
const MAX_MESSAGE: usize = 4096;

/// The status and reason and message of condition `kind` for `report`.
fn judged(kind: &str, report: &ContentReport) -> Option<(&'static str, String)> {
    match kind {
        "NamespaceDeletionContentFailure" if !report.failures.is_empty() => {
            let errors: Vec<&str> = report.failures.values().map(String::as_str).collect();
            // Go's aggregate error: one error alone, else bracketed.
            let quoted = match errors.as_slice() {
                [one] => (*one).to_string(),
                many => format!("[{}]", many.join(", ")),
            };
            Some((
                "ContentDeletionFailed",
                format!(
                    "Failed to delete all resource types, {} remaining: {quoted}",
                    errors.len()
                ),
            ))
        }
        "NamespaceContentRemaining" if !report.remaining.is_empty() => {
            let each: Vec<String> = report
                .remaining
                .iter()
                .map(|(resource, n)| format!("{resource} has {n} resource instances"))
                .collect();
            Some((
                "SomeResourcesRemain",
                format!("Some resources are remaining: {}", each.join(", ")),
            ))
        }
        "NamespaceFinalizersRemaining" if !report.finalizers.is_empty() => {
            let each: Vec<String> = report
                .finalizers
                .iter()
                .map(|(finalizer, n)| format!("{finalizer} in {n} resource instances"))
                .collect();
            Some((
                "SomeFinalizersRemain",
                format!(
                    "Some content in the namespace has finalizers remaining: {}",
                    each.join(", ")
                ),
            ))
        }
        _ => None,
    }
}

/// `message` cut to [`MAX_MESSAGE`] bytes at a character boundary.
fn bounded(mut message: String) -> String {
    if message.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

/// The namespace's conditions for `report`, after `old` (its current
/// `status.conditions`, if any): those five in upstream's order, then any
/// other condition `old` holds. None when they would say what `old` says.
pub(crate) fn conditions(old: Option<&Value>, report: &ContentReport, now: &str) -> Option<Value> {
    let old: &[Value] = old.and_then(Value::as_array).map_or(&[], Vec::as_slice);
    let find = |kind: &str| old.iter().find(|c| c["type"] == kind);
    let mut out = Vec::with_capacity(OK.len());
    let mut changed = false;
    for (kind, ok_reason, ok_message) in OK {
        let (status, reason, message) = match judged(kind, report) {
            Some((reason, message)) => ("True", reason, bounded(message)),
            None => ("False", ok_reason, ok_message.to_string()),
        };
        let before = find(kind);
        let since = before
            .filter(|c| c["status"] == status)
            .and_then(|c| c["lastTransitionTime"].as_str())
            .unwrap_or(now);
        changed |= before.is_none_or(|c| {
            c["status"] != status || c["reason"] != reason || c["message"] != message.as_str()
        });
        out.push(json!({
            "type": kind,
            "status": status,
            "lastTransitionTime": since,
            "reason": reason,
            "message": message,
        }));
    }
    if !changed {
        return None;
    }
    let ours = |c: &&Value| OK.iter().any(|(kind, _, _)| c["type"] == *kind);
    out.extend(old.iter().filter(|c| !ours(c)).cloned());
    Some(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> ContentReport {
        ContentReport {
            failures: [(
                "configmaps".to_string(),
                "admission webhook \"keep.example.com\" denied the request: kept".to_string(),
            )]
            .into(),
            remaining: [
                ("configmaps".to_string(), 2),
                ("widgets.example.com".to_string(), 1),
            ]
            .into(),
            finalizers: [("example.com/hold".to_string(), 1)].into(),
        }
    }

    #[test]
    fn a_refused_delete_and_what_remains_are_said_as_upstream_says_them() {
        let c = conditions(None, &report(), "T1").unwrap();
        let c = c.as_array().unwrap();
        let by = |kind: &str| c.iter().find(|x| x["type"] == kind).unwrap().clone();
        assert_eq!(c.len(), 5);
        assert_eq!(by("NamespaceDeletionDiscoveryFailure")["status"], "False");
        let failure = by("NamespaceDeletionContentFailure");
        assert_eq!(failure["status"], "True");
        assert_eq!(failure["reason"], "ContentDeletionFailed");
        assert_eq!(
            failure["message"],
            "Failed to delete all resource types, 1 remaining: admission webhook \"keep.example.com\" denied the request: kept"
        );
        assert_eq!(
            by("NamespaceContentRemaining")["message"],
            "Some resources are remaining: configmaps has 2 resource instances, widgets.example.com has 1 resource instances"
        );
        assert_eq!(
            by("NamespaceFinalizersRemaining")["message"],
            "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
        );
    }

    #[test]
    fn an_unchanged_report_writes_nothing_and_a_change_keeps_unchanged_times() {
        let first = conditions(None, &report(), "T1").unwrap();
        assert_eq!(conditions(Some(&first), &report(), "T2"), None);
        let mut better = report();
        better.failures.clear();
        let second = conditions(Some(&first), &better, "T2").unwrap();
        let second = second.as_array().unwrap();
        let by = |kind: &str| second.iter().find(|x| x["type"] == kind).unwrap().clone();
        let failure = by("NamespaceDeletionContentFailure");
        assert_eq!(failure["status"], "False");
        assert_eq!(failure["reason"], "ContentDeleted");
        assert_eq!(failure["lastTransitionTime"], "T2");
        assert_eq!(by("NamespaceContentRemaining")["lastTransitionTime"], "T1");
    }

    #[test]
    fn a_long_message_is_cut_and_other_conditions_are_kept() {
        let mut long = report();
        long.failures
            .insert("secrets".into(), "é".repeat(MAX_MESSAGE));
        let old = json!([{"type": "Custom", "status": "True"}]);
        let c = conditions(Some(&old), &long, "T1").unwrap();
        let c = c.as_array().unwrap();
        assert_eq!(c.len(), 6);
        assert_eq!(c[5]["type"], "Custom");
        let message = c[2]["message"].as_str().unwrap();
        assert!(
            message.len() <= MAX_MESSAGE + '…'.len_utf8(),
            "{}",
            message.len()
        );
        assert!(message.starts_with("Failed to delete all resource types, 2 remaining: ["));
    }
}
