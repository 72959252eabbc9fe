//! The {{plugin}} plugin: reconciles {{Kind}} ({{group}}/{{version}}).
//!
//! Each {{Kind}} gets the finalizer `{{finalizer}}` and a `Ready` condition
//! whose `observedGeneration` says which spec it describes.{{owned_doc}}
//! The CRD (`crd.yaml`) was generated from `{{Kind}}Spec` and
//! `{{Kind}}Status`: change them together.

use serde::{Deserialize, Serialize};
use wasmctrl_sdk::finalizer::Event;
use wasmctrl_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
{{uses}}use wasmctrl_sdk::{
    Action, Api, Context, Error, Metadata, ObjectKey, Reconciler, Resource, conditions, finalizer,
};

/// The field manager of every write, and the plugin's name.
const MANAGER: &str = "{{plugin}}";
const FINALIZER: &str = "{{finalizer}}";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct {{Kind}}Spec {
{{spec_fields}}}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct {{Kind}}Status {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

wasmctrl_sdk::custom_resource! {
    /// A {{Kind}}, reconciled by the {{plugin}} plugin.
    pub struct {{Kind}} {
        group: "{{group}}",
        version: "{{version}}",
        plural: "{{plural}}",
        scope: Namespaced,
        spec: {{Kind}}Spec,
        status: {{Kind}}Status,
    }
}

pub struct {{Reconciler}};

impl Reconciler for {{Reconciler}} {
    /// Every kind it reconciles or owns and every access it makes: the
    /// host config (`wasmctrl.yaml`) grants exactly this.
    fn metadata() -> Metadata {
        Metadata::new(MANAGER, env!("CARGO_PKG_VERSION"), {{Kind}}::gvk())
{{metadata}}    }

    fn reconcile(key: ObjectKey, _ctx: &Context) -> Result<Action, Error> {
        let namespace = key.require_namespace()?;
        let api = Api::<{{Kind}}>::namespaced(namespace);
        let Some(object) = api.get_opt(&key.name)? else {
            // Gone: what it owned is garbage-collected.
            return Ok(Action::done());
        };
        finalizer(&api, FINALIZER, object, |event| match event {
            Event::Apply(object) => apply(&api, namespace, &object),
            Event::Cleanup(object) => {
                // Release here what the cluster does not garbage-collect.
                wasmctrl_sdk::info!("{{Kind}} {} is being deleted", object.name());
                Ok(Action::done())
            }
        })
    }
}

/// Brings what the {{Kind}} asks for about, then reports it in `Ready`.
fn apply(api: &Api<{{Kind}}>, namespace: &str, object: &{{Kind}}) -> Result<Action, Error> {
{{apply_owned}}    let generation = object.metadata.generation;
    let old = object.status.clone().unwrap_or_default();
    let mut status = {{Kind}}Status {
        observed_generation: generation,
        ..old.clone()
    };
    let ready = Condition {
        observed_generation: generation,
        ..conditions::new("Ready", true, "Reconciled", object.spec.message.as_str())
    };
    conditions::set(&mut status.conditions, ready);
    // A status that would not change is not written: no write, no event,
    // no reconcile of our own making.
    if status != old {
        api.apply_status(object.name(), &status, MANAGER, true)?;
    }
    Ok(Action::done())
}
{{helpers}}
wasmctrl_sdk::export_reconciler!({{Reconciler}});

#[cfg(test)]
mod tests;
