//! Reviews in the fake: a validator or defaulter run as the host runs it,
//! on an AdmissionReview request, with reads served by the fake cluster
//! and every write refused.

use serde_json::{Value, json};

use super::FakeCluster;
use super::state::with;
use crate::Resource;
use crate::admission::{self, Defaulter, Denied, Operation, Validator, Warnings};
use crate::bindings::wasmctrl::reconciler::types as wit;

impl FakeCluster {
    /// Runs `V` on a CREATE of `object`, as the host would: reads go to
    /// this cluster, writes are refused as `forbidden`.
    pub fn validate_create<V: Validator>(&self, object: &V::Kind) -> Result<Warnings, Denied> {
        let request = review::<V::Kind>(Operation::Create, Some(object), None);
        verdict(read_only("validate", || admission::validate::<V>(&request))).map(|(w, _)| w)
    }

    /// Runs `V` on an UPDATE from `old` to `new`.
    pub fn validate_update<V: Validator>(
        &self,
        old: &V::Kind,
        new: &V::Kind,
    ) -> Result<Warnings, Denied> {
        let request = review::<V::Kind>(Operation::Update, Some(new), Some(old));
        verdict(read_only("validate", || admission::validate::<V>(&request))).map(|(w, _)| w)
    }

    /// Runs `V` on a DELETE of `object`.
    pub fn validate_delete<V: Validator>(&self, object: &V::Kind) -> Result<Warnings, Denied> {
        let request = review::<V::Kind>(Operation::Delete, None, Some(object));
        verdict(read_only("validate", || admission::validate::<V>(&request))).map(|(w, _)| w)
    }

    /// Runs `D` on a CREATE of `object` and returns the object as it would
    /// be admitted: the request's object with the defaulter's changes.
    pub fn default_object<D: Defaulter>(&self, object: &D::Kind) -> Result<D::Kind, Denied> {
        let request = review::<D::Kind>(Operation::Create, Some(object), None);
        let (_, patched) = verdict(read_only("mutate", || admission::mutate::<D>(&request)))?;
        let admitted = match patched {
            Some(text) => serde_json::from_str(&text),
            None => serde_json::to_value(object).and_then(serde_json::from_value),
        };
        admitted.map_err(|e| Denied::with_code(500, format!("the admitted object: {e}")))
    }
}

fn read_only(
    review: &'static str,
    f: impl FnOnce() -> wit::AdmissionResponse,
) -> wit::AdmissionResponse {
    with(|s| s.read_only = Some(review));
    let response = f();
    with(|s| s.read_only = None);
    response
}

/// An AdmissionReview v1 request as kube-apiserver sends it.
fn review<K: Resource>(operation: Operation, object: Option<&K>, old: Option<&K>) -> String {
    let any = object
        .or(old)
        .expect("a review has an object or an old object");
    json!({
        "uid": "00000000-0000-0000-0000-000000000000",
        "kind": {"group": K::group(), "version": K::version(), "kind": K::kind()},
        "resource": {"group": K::group(), "version": K::version(), "resource": K::plural()},
        "name": any.name(),
        "namespace": any.meta().namespace,
        "operation": operation.as_str(),
        "userInfo": {"username": "tester", "groups": ["system:authenticated"]},
        "object": object.map_or(Value::Null, |o| serde_json::to_value(o).unwrap_or_default()),
        "oldObject": old.map_or(Value::Null, |o| serde_json::to_value(o).unwrap_or_default()),
        "dryRun": false,
    })
    .to_string()
}

fn verdict(r: wit::AdmissionResponse) -> Result<(Warnings, Option<String>), Denied> {
    if r.allowed {
        return Ok((r.warnings, r.patched));
    }
    Err(Denied::from_wit(r))
}
