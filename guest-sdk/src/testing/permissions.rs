//! The permission check: which `(verb, group, resource)` each call needs,
//! derived as the host derives it, against the reconciler's declared
//! permissions.

use super::Call;
use super::state::State;
use crate::ApiError;
use crate::bindings::wasmctrl::reconciler::types as wit;

impl State {
    /// Records the call, then applies an injected fault or the permission check.
    pub(super) fn admit(&mut self, call: Call) -> Result<(), ApiError> {
        let verb = call.verb;
        let denied = self.permissions.as_deref().and_then(|p| {
            let (v, group, resource) = needed(&call);
            self.used
                .insert((v.to_string(), group.clone(), resource.clone()));
            (!allowed(p, v, &group, &resource)).then(|| {
                ApiError::Forbidden(format!(
                    "{v} on {}/{resource} is not in the plugin's permissions",
                    if group.is_empty() { "core" } else { &group }
                ))
            })
        });
        let denied = denied.or_else(|| {
            let review = self.read_only?;
            (!matches!(verb, "get" | "list")).then(|| {
                ApiError::Forbidden(format!(
                    "{verb} {}: the host API is read-only during an admission review ({review}); write from `reconcile` instead",
                    call.kind.kind
                ))
            })
        });
        self.calls.push(call);
        if let Some(i) = self.faults.iter().position(|(v, _)| v == verb) {
            return Err(self.faults.remove(i).1);
        }
        denied.map_or(Ok(()), Err)
    }
}

/// The verb, group and resource a call needs permission for.
fn needed(call: &Call) -> (&'static str, String, String) {
    let plural = plural(&call.kind.kind);
    match call.verb {
        "record-event" => ("create", "events.k8s.io".into(), "events".into()),
        "replace-status" => (
            "update",
            call.kind.group.clone(),
            format!("{plural}/status"),
        ),
        "patch-status" => ("patch", call.kind.group.clone(), format!("{plural}/status")),
        "replace" => ("update", call.kind.group.clone(), plural),
        verb => (verb, call.kind.group.clone(), plural),
    }
}

/// Kubernetes' default plural of a kind.
fn plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        return format!("{stem}ies");
    }
    if lower.ends_with(['s', 'x', 'z']) || lower.ends_with("ch") || lower.ends_with("sh") {
        return format!("{lower}es");
    }
    format!("{lower}s")
}

fn allowed(permissions: &[wit::Permission], verb: &str, group: &str, resource: &str) -> bool {
    permissions.iter().any(|p| {
        p.group == group
            && p.resources.iter().any(|r| r == resource || r == "*")
            && p.verbs.iter().any(|v| v == verb || v == "*")
    })
}
