//! The reconciler of the controller benchmarks (`bench/`: `throughput`,
//! `latency`, `density`, `scale`), the same logic as their native and
//! kube-rs variants: read the object (served from the host's cache), and if
//! `status.observed` is not `spec.seq` yet, merge-patch the status with
//! `observed: spec.seq` and `startedAt`, the wall-clock time (Unix
//! nanoseconds) at which this reconcile started, so a benchmark can time
//! "write → reconcile started" from outside.
//!
//! The kind it reconciles is `Bench0000` (group `bench.wasmctrl.dev/v1`,
//! plural `bench0000s`). The `density` benchmark makes 100 distinct
//! components of this one by rewriting the four digits in the component's
//! bytes (`Bench0000` → `Bench0042`, `bench0000s` → `bench0042s`): same
//! length, so the component stays valid, with a different digest and kind.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use wasmctrl_sdk::serde_json::json;
use wasmctrl_sdk::{Action, Api, Context, Error, Metadata, ObjectKey, Patch, Reconciler, Resource};

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Spec {
    #[serde(default)]
    pub seq: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    #[serde(default)]
    pub observed: u64,
    #[serde(default)]
    pub started_at: u64,
}

wasmctrl_sdk::custom_resource! {
    /// A benchmark object: `spec.seq` is bumped by the benchmark's writer.
    pub struct Bench0000 {
        group: "bench.wasmctrl.dev",
        version: "v1",
        plural: "bench0000s",
        scope: Namespaced,
        spec: Spec,
        status: Status,
    }
}

/// What the reconciler reads of a `Bench0000`.
#[derive(Deserialize)]
struct View {
    #[serde(default)]
    spec: Spec,
    status: Option<Status>,
}

struct BenchStatus;

impl Reconciler for BenchStatus {
    fn metadata() -> Metadata {
        Metadata::new("bench-status", "0.1.0", Bench0000::gvk()).permission(
            "bench.wasmctrl.dev",
            &["bench0000s", "bench0000s/status"],
            &["get", "list", "watch", "patch"],
        )
    }

    fn reconcile(key: ObjectKey, _ctx: &Context) -> Result<Action, Error> {
        let started_at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let items = Api::<Bench0000>::namespaced(key.require_namespace()?);
        // The fields it reads, as the native variant reads them.
        let Some(item) = items.get_opt_as::<View>(&key.name)? else {
            return Ok(Action::done());
        };
        let seq = item.spec.seq;
        if item.status.is_some_and(|s| s.observed == seq) {
            return Ok(Action::done());
        }
        let patch = json!({"status": {"observed": seq, "startedAt": started_at}});
        items.patch_status(&key.name, &Patch::Merge(patch))?;
        Ok(Action::done())
    }
}

wasmctrl_sdk::export_reconciler!(BenchStatus);
