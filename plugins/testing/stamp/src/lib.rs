//! A test reconciler built several times: it labels every ConfigMap it
//! reconciles with `wasmctrl.dev/stamp: v1` (or `v2` with `--features v2`),
//! so a hot swap is observable from outside. `--features greedy` asks for
//! more permissions than tests grant, `--features trap-in-metadata` panics in
//! `metadata`: both must be refused by a hot swap.

use wasmctrl_sdk::bindings::wasmctrl::reconciler::kube::{self, ObjectPatch};
use wasmctrl_sdk::bindings::wasmctrl::reconciler::types::{ApiError, Gvk};
use wasmctrl_sdk::{Action, Context, Error, Metadata, ObjectKey, Reconciler};

#[cfg(not(feature = "v2"))]
const STAMP: &str = "v1";
#[cfg(feature = "v2")]
const STAMP: &str = "v2";

struct Stamp;

fn configmaps() -> Gvk {
    Gvk {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
    }
}

impl Reconciler for Stamp {
    fn metadata() -> Metadata {
        let version = if STAMP == "v1" { "1.0.0" } else { "2.0.0" };
        Metadata::new(
            "stamp",
            version,
            wasmctrl_sdk::Gvk::new("", "v1", "ConfigMap"),
        )
        .permission("", &["configmaps"], &["get", "patch"])
    }

    fn reconcile(key: ObjectKey, _ctx: &Context) -> Result<Action, Error> {
        let patch = format!(r#"{{"metadata":{{"labels":{{"wasmctrl.dev/stamp":"{STAMP}"}}}}}}"#);
        match kube::patch(
            &configmaps(),
            key.namespace.as_deref(),
            &key.name,
            &ObjectPatch::Merge(patch),
        ) {
            Ok(_) | Err(ApiError::NotFound(_)) => Ok(Action::done()),
            Err(e) => Err(e.into()),
        }
    }
}

wasmctrl_sdk::export_reconciler!(Stamp);
