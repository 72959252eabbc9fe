//! A level-triggered test reconciler: it copies each ConfigMap's
//! `data.value` into its label `wasmctrl.dev/mirror`, reading the object
//! from the host's cache. Fault and load tests change `data.value` while the
//! host, its watches or the API server fail, and then check that every
//! object's label shows its final value: nothing missed, nothing stale.
//!
//! A ConfigMap with `data.ref` mirrors the `data.value` of the ConfigMap it
//! names instead (a reconcile that reads a second object: `skipUnchanged`
//! tests). The plugin's settings select the behaviours the rollout tests
//! give a candidate version:
//! - `version: V` also sets the label `wasmctrl.dev/mirror-version: V`;
//! - `deleteDeployments: true` deletes every Deployment of the key's
//!   namespace instead of mirroring (a bad version a shadow must contain);
//! - `failHalf: true` fails every key whose name hashes to an even number
//!   (about half of them) with a transient error;
//! - `delayMs: N` sleeps N ms before each reconcile (a slow version whose
//!   p99 a canary must catch; a sleep, so it burns no CPU).

use serde::Deserialize;
use wasmctrl_sdk::k8s_openapi::api::apps::v1::Deployment;
use wasmctrl_sdk::k8s_openapi::api::core::v1::ConfigMap;
use wasmctrl_sdk::serde_json::{Map, Value, json};
use wasmctrl_sdk::{Action, Api, Context, Error, Metadata, ObjectKey, Patch, Reconciler, Resource};

const LABEL: &str = "wasmctrl.dev/mirror";
const VERSION_LABEL: &str = "wasmctrl.dev/mirror-version";

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Settings {
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    delete_deployments: bool,
    #[serde(default)]
    fail_half: bool,
    #[serde(default)]
    delay_ms: u64,
}

/// FNV-1a: stable across builds and hosts.
fn hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

struct Mirror;

impl Reconciler for Mirror {
    fn metadata() -> Metadata {
        Metadata::new("mirror", "0.1.0", ConfigMap::gvk()).permission(
            "",
            &["configmaps"],
            &["get", "list", "watch", "patch"],
        )
    }

    fn reconcile(key: ObjectKey, ctx: &Context) -> Result<Action, Error> {
        let settings: Settings = ctx.settings()?;
        let namespace = key.require_namespace()?;
        if settings.delay_ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(settings.delay_ms));
        }
        if settings.fail_half && hash(&key.name).is_multiple_of(2) {
            return Err(Error::transient(format!("{} is not handled yet", key.name)));
        }
        if settings.delete_deployments {
            let deployments = Api::<Deployment>::namespaced(namespace);
            for d in deployments.list()? {
                if let Some(name) = d.metadata.name {
                    deployments.delete(&name)?;
                }
            }
            return Ok(Action::done());
        }
        let api = Api::<ConfigMap>::namespaced(namespace);
        let Some(cm) = api.get_opt(&key.name)? else {
            return Ok(Action::done());
        };
        let data =
            |cm: &ConfigMap, field: &str| cm.data.as_ref().and_then(|d| d.get(field)).cloned();
        let value = match data(&cm, "ref") {
            Some(other) => api
                .get_opt(&other)?
                .and_then(|o| data(&o, "value"))
                .unwrap_or_default(),
            None => data(&cm, "value").unwrap_or_default(),
        };
        let labels = cm.metadata.labels.clone().unwrap_or_default();
        let mut wanted = Map::new();
        if labels.get(LABEL) != Some(&value) {
            wanted.insert(LABEL.into(), Value::String(value));
        }
        if let Some(v) = settings.version
            && labels.get(VERSION_LABEL) != Some(&v)
        {
            wanted.insert(VERSION_LABEL.into(), Value::String(v));
        }
        if !wanted.is_empty() {
            api.patch(
                &key.name,
                &Patch::Merge(json!({"metadata": {"labels": wanted}})),
            )?;
        }
        Ok(Action::done())
    }
}

wasmctrl_sdk::export_reconciler!(Mirror);
