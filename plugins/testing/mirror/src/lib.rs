//! A level-triggered test reconciler: it copies each ConfigMap's
//! `data.value` into its label `wasmctrl.dev/mirror`, reading the object
//! from the host's cache. Fault and load tests change `data.value` while the
//! host, its watches or the API server fail, and then check that every
//! object's label shows its final value: nothing missed, nothing stale.

use wasmctrl_sdk::k8s_openapi::api::core::v1::ConfigMap;
use wasmctrl_sdk::serde_json::json;
use wasmctrl_sdk::{Action, Api, Context, Error, Metadata, ObjectKey, Patch, Reconciler, Resource};

const LABEL: &str = "wasmctrl.dev/mirror";

struct Mirror;

impl Reconciler for Mirror {
    fn metadata() -> Metadata {
        Metadata::new("mirror", "0.1.0", ConfigMap::gvk()).permission(
            "",
            &["configmaps"],
            &["get", "list", "watch", "patch"],
        )
    }

    fn reconcile(key: ObjectKey, _ctx: &Context) -> Result<Action, Error> {
        let api = Api::<ConfigMap>::namespaced(key.require_namespace()?);
        let Some(cm) = api.get_opt(&key.name)? else {
            return Ok(Action::done());
        };
        let value = cm
            .data
            .as_ref()
            .and_then(|d| d.get("value"))
            .cloned()
            .unwrap_or_default();
        let current = cm.metadata.labels.as_ref().and_then(|l| l.get(LABEL));
        if current != Some(&value) {
            api.patch(
                &key.name,
                &Patch::Merge(json!({"metadata": {"labels": {LABEL: value}}})),
            )?;
        }
        Ok(Action::done())
    }
}

wasmctrl_sdk::export_reconciler!(Mirror);
