//! # wasmctrl-sdk: write a wasmctrl reconciler
//!
//! A plugin is a `cdylib` crate built with `cargo build --release --target
//! wasm32-wasip2`. It implements [`Reconciler`] and exports it with
//! [`export_reconciler!`]; this crate is its only dependency.
//!
//! ```ignore
//! use wasmctrl_sdk::{Action, Context, Error, Gvk, Metadata, ObjectKey, Reconciler};
//!
//! struct Hello;
//!
//! impl Reconciler for Hello {
//!     fn metadata() -> Metadata {
//!         Metadata::new("hello", "0.1.0", Gvk::new("", "v1", "ConfigMap"))
//!     }
//!
//!     fn reconcile(key: ObjectKey, ctx: &Context) -> Result<Action, Error> {
//!         wasmctrl_sdk::info!("reconciling {key} (attempt {})", ctx.attempt());
//!         Ok(Action::done())
//!     }
//! }
//!
//! wasmctrl_sdk::export_reconciler!(Hello);
//! ```
//!
//! Each reconcile runs in a fresh instance: nothing survives between calls, so a
//! reconciler reads the world, compares and writes, as level-triggered
//! controllers do.

extern crate self as wasmctrl_sdk;

mod action;
mod context;
mod error;
pub mod log;
mod metadata;

/// The generated bindings of the `wasmctrl:reconciler` world. Plugin authors
/// use the types re-exported at the crate root instead.
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "reconciler",
        path: "../wit",
        pub_export_macro: true,
        export_macro_name: "__export_reconciler_world",
        default_bindings_module: "wasmctrl_sdk::bindings",
        runtime_path: "wasmctrl_sdk::__private::wit_bindgen::rt",
    });
}

pub use action::Action;
pub use context::Context;
pub use error::{ApiError, Error};
pub use metadata::{Gvk, Metadata, ObjectKey, WatchMapping};

/// The one trait a plugin implements.
pub trait Reconciler {
    /// What the plugin reconciles, watches and needs permission for. Called
    /// once when the host loads the plugin (and on every hot swap).
    fn metadata() -> Metadata;

    /// Bring the object named by `key` to its desired state. Called with a
    /// fresh instance every time; may be called for objects that no longer
    /// exist (the reconcile then sees NotFound and cleans up).
    fn reconcile(key: ObjectKey, ctx: &Context) -> Result<Action, Error>;
}

/// Exports a [`Reconciler`] implementation as the plugin's component exports.
///
/// Use it exactly once per plugin crate: `wasmctrl_sdk::export_reconciler!(MyReconciler);`
#[macro_export]
macro_rules! export_reconciler {
    ($reconciler:ty) => {
        #[doc(hidden)]
        struct __WasmctrlExport;

        impl $crate::bindings::Guest for __WasmctrlExport {
            fn metadata() -> $crate::bindings::wasmctrl::reconciler::types::PluginMetadata {
                $crate::__private::metadata::<$reconciler>()
            }

            fn reconcile(
                key: $crate::bindings::wasmctrl::reconciler::types::ObjectKey,
            ) -> ::core::result::Result<
                $crate::bindings::wasmctrl::reconciler::types::Action,
                $crate::bindings::wasmctrl::reconciler::types::ReconcileError,
            > {
                $crate::__private::reconcile::<$reconciler>(key)
            }
        }

        $crate::bindings::__export_reconciler_world!(__WasmctrlExport with_types_in $crate::bindings);
    };
}

#[doc(hidden)]
pub mod __private {
    use crate::bindings::wasmctrl::reconciler::types as wit;
    pub use wit_bindgen;

    pub fn metadata<R: crate::Reconciler>() -> wit::PluginMetadata {
        R::metadata().into_wit()
    }

    pub fn reconcile<R: crate::Reconciler>(
        key: wit::ObjectKey,
    ) -> Result<wit::Action, wit::ReconcileError> {
        let key = crate::ObjectKey {
            namespace: key.namespace,
            name: key.name,
        };
        R::reconcile(key, &crate::Context::current())
            .map(crate::Action::into_wit)
            .map_err(crate::Error::into_wit)
    }
}
