//! # wasmctrl-sdk: write a wasmctrl reconciler
//!
//! A plugin is a `cdylib` crate built with `cargo build --release --target
//! wasm32-wasip2`. It implements [`Reconciler`] and exports it with
//! [`export_reconciler!`].
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use wasmctrl_sdk::k8s_openapi::api::core::v1::ConfigMap;
//! use wasmctrl_sdk::serde_json::json;
//! use wasmctrl_sdk::{Action, Api, Context, Error, Metadata, ObjectKey, Patch, Reconciler, Resource};
//!
//! struct Hello;
//!
//! impl Reconciler for Hello {
//!     fn metadata() -> Metadata {
//!         Metadata::new("hello", "0.1.0", ConfigMap::gvk())
//!             .permission("", &["configmaps"], &["get", "list", "watch", "patch"])
//!     }
//!
//!     fn reconcile(key: ObjectKey, ctx: &Context) -> Result<Action, Error> {
//!         let configmaps = Api::<ConfigMap>::namespaced(key.require_namespace()?);
//!         let Some(cm) = configmaps.get_opt(&key.name)? else {
//!             return Ok(Action::done()); // deleted: nothing to do
//!         };
//!         let keys = cm.data.as_ref().map_or(0, |d| d.len()).to_string();
//!         wasmctrl_sdk::info!("{key} has {keys} keys (attempt {})", ctx.attempt());
//!         let annotate = json!({"metadata": {"annotations": {"hello.wasmctrl.dev/keys": keys}}});
//!         configmaps.patch(&key.name, &Patch::Merge(annotate))?;
//!         Ok(Action::requeue_after(Duration::from_secs(300)))
//!     }
//! }
//!
//! wasmctrl_sdk::export_reconciler!(Hello);
//! ```
//!
//! What the SDK offers, kube-rs style, over the host's `kube` interface:
//!
//! - typed resources: every k8s-openapi type (re-exported as
//!   [`k8s_openapi`]) and the plugin's own kinds, declared with
//!   [`custom_resource!`] — both implement [`Resource`];
//! - [`Api<K>`](Api) — `get`/`get_opt`/`list`/`create`/`replace`/`patch`/`delete`,
//!   server-side [`Api::apply`], and the status subresource
//!   ([`Api::apply_status`], [`Api::patch_status`], [`Api::replace_status`]);
//!   failures are [`ApiError`]s, which `?` turns into [`Error`]s;
//! - [`finalizer()`]: add a finalizer, clean up on deletion, remove it,
//!   conflict-safe;
//! - [`conditions`]: set status conditions the way apimachinery does;
//! - [`events::Recorder`]: Kubernetes Events about an object;
//! - `testing::FakeCluster` (feature `testing`, native only): unit-test a
//!   reconciler against an in-memory API server, held to its permissions;
//! - [`Context`] (deadline, cancellation, attempt, settings) and logging
//!   ([`info!`] and friends);
//! - [`http`]: requests to hosts outside the cluster (`wasi:http`), as the
//!   host's `outbound` grant allows and [`Metadata::outbound`] declares;
//! - [`admission`]: validating and defaulting webhooks
//!   ([`admission::Validator`], [`admission::Defaulter`]) served by the host.
//!
//! Each reconcile runs in a fresh instance: nothing survives between calls, so a
//! reconciler reads the world, compares and writes, as level-triggered
//! controllers do.

extern crate self as wasmctrl_sdk;

mod action;
pub mod admission;
mod api;
pub mod conditions;
mod context;
mod error;
pub mod events;
pub mod finalizer;
mod host;
pub mod http;
pub mod log;
mod metadata;
mod resource;
pub mod secrets;
#[cfg(all(any(test, feature = "testing"), not(target_arch = "wasm32")))]
pub mod testing;

/// The generated bindings of the `wasmctrl:reconciler` world. Plugin authors
/// use the types re-exported at the crate root instead.
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "admission-reconciler",
        path: "../wit",
        pub_export_macro: true,
        export_macro_name: "__export_reconciler_world",
        default_bindings_module: "wasmctrl_sdk::bindings",
        runtime_path: "wasmctrl_sdk::__private::wit_bindgen::rt",
    });
}

pub use action::Action;
pub use api::{Api, Patch, PatchOp, escape_pointer};
pub use context::Context;
pub use error::{ApiError, Error};
pub use finalizer::finalizer;
pub use metadata::{Gvk, Metadata, ObjectKey, WatchMapping};
pub use resource::{NoStatus, Resource};

/// The Kubernetes API types (k8s-openapi, latest version), for typed
/// resources: `wasmctrl_sdk::k8s_openapi::api::apps::v1::Deployment`.
pub use k8s_openapi;
/// For patches: `wasmctrl_sdk::serde_json::json!({"data": {"key": null}})`.
pub use serde_json;
/// Kubernetes' conventions as the host checks them: name syntax
/// (`apimachinery::names::dns1123_label`), label selectors, API timestamps
/// (`apimachinery::time::format_seconds`) and JSON patches.
pub use wasmctrl_apimachinery as apimachinery;

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

/// Exports a [`Reconciler`] implementation as the plugin's component
/// exports, with the plugin's admission webhooks if it serves any.
///
/// Use it exactly once per plugin crate, in one of these forms:
///
/// ```text
/// wasmctrl_sdk::export_reconciler!(MyReconciler);
/// wasmctrl_sdk::export_reconciler!(MyReconciler, validator: MyValidator);
/// wasmctrl_sdk::export_reconciler!(MyReconciler, defaulter: MyDefaulter);
/// wasmctrl_sdk::export_reconciler!(MyReconciler, validator: MyValidator, defaulter: MyDefaulter);
/// ```
///
/// where the validator implements [`admission::Validator`] and the
/// defaulter [`admission::Defaulter`].
#[macro_export]
macro_rules! export_reconciler {
    ($reconciler:ty) => {
        $crate::__export_plugin!($reconciler; []; []);
    };
    ($reconciler:ty, validator: $validator:ty) => {
        $crate::__export_plugin!($reconciler; [$validator]; []);
    };
    ($reconciler:ty, defaulter: $defaulter:ty) => {
        $crate::__export_plugin!($reconciler; []; [$defaulter]);
    };
    ($reconciler:ty, validator: $validator:ty, defaulter: $defaulter:ty) => {
        $crate::__export_plugin!($reconciler; [$validator]; [$defaulter]);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __export_plugin {
    ($reconciler:ty; [$($validator:ty)?]; [$($defaulter:ty)?]) => {
        #[doc(hidden)]
        struct __WasmctrlExport;

        impl $crate::bindings::Guest for __WasmctrlExport {
            fn metadata() -> $crate::bindings::wasmctrl::reconciler::types::PluginMetadata {
                $crate::__private::metadata::<$reconciler>()
            }

            fn outbound() -> ::std::vec::Vec<$crate::bindings::wasmctrl::reconciler::types::OutboundRule> {
                $crate::__private::outbound::<$reconciler>()
            }

            fn reconcile(
                key: $crate::bindings::wasmctrl::reconciler::types::ObjectKey,
            ) -> ::core::result::Result<
                $crate::bindings::wasmctrl::reconciler::types::Action,
                $crate::bindings::wasmctrl::reconciler::types::ReconcileError,
            > {
                $crate::__private::reconcile::<$reconciler>(key)
            }

            fn webhooks() -> ::std::vec::Vec<$crate::bindings::wasmctrl::reconciler::types::Webhook> {
                #[allow(unused_mut)]
                let mut webhooks = ::std::vec::Vec::new();
                $(webhooks.push($crate::__private::validating::<$validator>());)?
                $(webhooks.push($crate::__private::mutating::<$defaulter>());)?
                webhooks
            }

            #[allow(unreachable_code)]
            fn validate(
                request: ::std::string::String,
            ) -> $crate::bindings::wasmctrl::reconciler::types::AdmissionResponse {
                $(return $crate::__private::validate::<$validator>(&request);)?
                $crate::__private::not_served("validate")
            }

            #[allow(unreachable_code)]
            fn mutate(
                request: ::std::string::String,
            ) -> $crate::bindings::wasmctrl::reconciler::types::AdmissionResponse {
                $(return $crate::__private::mutate::<$defaulter>(&request);)?
                $crate::__private::not_served("mutate")
            }
        }

        $crate::bindings::__export_reconciler_world!(__WasmctrlExport with_types_in $crate::bindings);
    };
}

#[doc(hidden)]
pub mod __private {
    pub use crate::admission::{mutate, mutating, not_served, validate, validating};
    use crate::bindings::wasmctrl::reconciler::types as wit;
    pub use crate::resource::plumbing::{ObjectParts, serialize_object};
    pub use serde;
    pub use wit_bindgen;

    pub fn metadata<R: crate::Reconciler>() -> wit::PluginMetadata {
        R::metadata().into_wit()
    }

    pub fn outbound<R: crate::Reconciler>() -> Vec<wit::OutboundRule> {
        R::metadata().outbound_wit()
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

#[cfg(test)]
mod tests;
