//! The smallest reconciler: does nothing and succeeds. Used by benchmarks to
//! measure what wasmctrl itself costs per reconcile.

use wasmctrl_sdk::{Action, Context, Error, Gvk, Metadata, ObjectKey, Reconciler};

struct Noop;

impl Reconciler for Noop {
    fn metadata() -> Metadata {
        Metadata::new("noop", "0.1.0", Gvk::new("", "v1", "ConfigMap"))
    }

    fn reconcile(_key: ObjectKey, _ctx: &Context) -> Result<Action, Error> {
        Ok(Action::done())
    }
}

wasmctrl_sdk::export_reconciler!(Noop);
