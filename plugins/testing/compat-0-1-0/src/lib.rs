//! A reconciler built against `wasmctrl:reconciler@0.1.0`, frozen in this
//! crate's `wit/` (not the repository's, which moves on): a host that adds
//! imports in a compatible version (0.1.1 added `context.log-enabled`) must
//! still load and run it. It uses wit-bindgen directly, not the SDK, because
//! the SDK always follows the current WIT.

wit_bindgen::generate!({
    path: "wit",
    world: "reconciler",
});

use wasmctrl::reconciler::context;
use wasmctrl::reconciler::types::{Gvk, LogLevel};

struct Compat;

impl Guest for Compat {
    fn metadata() -> PluginMetadata {
        PluginMetadata {
            name: "compat-0-1-0".into(),
            version: "0.1.0".into(),
            for_: Gvk {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
            },
            owns: Vec::new(),
            watches: Vec::new(),
            permissions: Vec::new(),
        }
    }

    fn reconcile(key: ObjectKey) -> Result<Action, ReconcileError> {
        context::log(
            LogLevel::Info,
            &format!("compat reconciled {}", key.name),
            &[],
        );
        if key.name == "fail" {
            return Err(ReconcileError::Transient(format!(
                "attempt {}",
                context::attempt()
            )));
        }
        Ok(Action {
            requeue: false,
            requeue_after_ms: 0,
        })
    }
}

export!(Compat);
