//! The finalizer helper: clean up before an object goes away (kube-runtime's
//! `finalizer()`, for one reconcile in the sandbox).

use serde_json::Value;

use crate::api::{Patch, PatchOp};
use crate::{Action, Api, ApiError, Error, Resource};

/// What the reconcile is asked to do with the object.
#[derive(Debug, Clone)]
pub enum Event<K> {
    /// The object is live and carries the finalizer: bring the world to its
    /// desired state. Must be idempotent.
    Apply(K),
    /// The object is being deleted and still carries the finalizer: undo
    /// what lives outside the object's garbage-collected dependents. Once it
    /// returns `Ok`, the finalizer is removed and the API server deletes the
    /// object. Must be idempotent too: a failed removal runs it again.
    Cleanup(K),
}

/// Runs `reconcile` for `obj` under the finalizer `name`:
///
/// - live object without the finalizer → adds it, then runs
///   [`Event::Apply`] with the patched object;
/// - live object with it → [`Event::Apply`];
/// - object being deleted with it → [`Event::Cleanup`]; if that succeeds,
///   removes the finalizer and returns cleanup's action;
/// - object being deleted without it → nothing; [`Action::done`].
///
/// # Conflict safety
///
/// Both finalizer writes are JSON patches guarded by a `test` operation: the
/// add tests that `metadata.finalizers` is still what `obj` showed, the
/// removal that our entry is still at the index `obj` showed. A concurrent
/// edit makes the patch fail rather than clobber the other writer; that
/// failure (a failed `test` is `invalid`, a stale object `conflict`) is
/// returned as a transient error, so the key is retried against a fresh read.
/// A `NotFound` while removing means the object is already gone: success.
pub fn finalizer<K, F>(api: &Api<K>, name: &str, obj: K, reconcile: F) -> Result<Action, Error>
where
    K: Resource,
    F: FnOnce(Event<K>) -> Result<Action, Error>,
{
    let object_name = obj.name().to_string();
    match plan(&obj, name) {
        Plan::Add(ops) => match api.patch(&object_name, &Patch::Json(ops)) {
            Ok(patched) => reconcile(Event::Apply(patched)),
            Err(ApiError::NotFound(_)) => Ok(Action::done()),
            Err(e) => Err(lost_race("add", name, e)),
        },
        Plan::Apply => reconcile(Event::Apply(obj)),
        Plan::Cleanup(ops) => {
            let action = reconcile(Event::Cleanup(obj))?;
            match api.patch(&object_name, &Patch::Json(ops)) {
                Ok(_) | Err(ApiError::NotFound(_)) => Ok(action),
                Err(e) => Err(lost_race("remove", name, e)),
            }
        }
        Plan::Nothing => Ok(Action::done()),
    }
}

fn lost_race(what: &str, finalizer: &str, e: ApiError) -> Error {
    match e {
        ApiError::Invalid(m) | ApiError::Conflict(m) => Error::transient(format!(
            "could not {what} finalizer {finalizer:?}: the object changed concurrently ({m})"
        )),
        other => other.into(),
    }
}

/// What [`finalizer`] does for an object, and the JSON patch it sends.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Plan {
    Add(Vec<PatchOp>),
    Apply,
    Cleanup(Vec<PatchOp>),
    Nothing,
}

pub(crate) fn plan<K: Resource>(obj: &K, name: &str) -> Plan {
    let finalizers = obj.meta().finalizers.as_deref().unwrap_or_default();
    let position = finalizers.iter().position(|f| f == name);
    match (obj.is_deleting(), position) {
        (false, Some(_)) => Plan::Apply,
        (false, None) => Plan::Add(match &obj.meta().finalizers {
            // `null` also matches the absent key: the first add wins, a
            // second concurrent add fails its test.
            None => vec![
                PatchOp::test("/metadata/finalizers", Value::Null),
                PatchOp::add("/metadata/finalizers", [name]),
            ],
            Some(current) => vec![
                PatchOp::test("/metadata/finalizers", current),
                PatchOp::add("/metadata/finalizers/-", name),
            ],
        }),
        (true, Some(i)) => {
            let path = format!("/metadata/finalizers/{i}");
            Plan::Cleanup(vec![PatchOp::test(&path, name), PatchOp::remove(&path)])
        }
        (true, None) => Plan::Nothing,
    }
}

/// True if `obj` carries the finalizer `name`.
pub fn has_finalizer<K: Resource>(obj: &K, name: &str) -> bool {
    obj.meta()
        .finalizers
        .as_deref()
        .is_some_and(|f| f.iter().any(|f| f == name))
}
