//! A plugin's exports (`reconcile`, `metadata`): type-checked once per
//! component, looked up per instance only when called.
//!
//! bindgen's `ReconcilerPre::instantiate_async` loads every export of each
//! new instance and type-checks it again, although `ReconcilerPre::new`
//! has already checked the component's exports against the world's types
//! and an instance cannot differ from its component. With a fresh instance
//! per reconcile, that is two type checks per call, one of them of an
//! export the call never uses (`metadata`), about 1 µs of a busy host's
//! instantiation (docs/BENCHMARKS.md, `throughput`).

use wasmtime::Store;
use wasmtime::component::{ComponentExportIndex, Func, Instance, InstancePre, TypedFunc};

use super::store::StoreState;
use crate::sandbox::wit::ReconcilerPre;
use crate::sandbox::wit::wasmctrl::reconciler::types::{
    Action, AdmissionResponse, ObjectKey, OutboundRule, PluginMetadata, ReconcileError, Webhook,
};

/// The world's export that reconciles one key.
const RECONCILE: &str = "reconcile";
/// The world's export that describes the plugin.
const METADATA: &str = "metadata";
/// The `outbound-reconciler` world's export that declares the outside
/// hosts the plugin calls; a component without it declares none.
const OUTBOUND: &str = "outbound";
/// The `admission-reconciler` world's exports: the webhooks a plugin
/// serves, and the two calls a review makes. A component without them
/// serves none.
const WEBHOOKS: &str = "webhooks";
const VALIDATE: &str = "validate";
const MUTATE: &str = "mutate";

/// A review's export: `validate` or `mutate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Review {
    Validate,
    Mutate,
}

impl Review {
    fn export(self) -> &'static str {
        match self {
            Review::Validate => VALIDATE,
            Review::Mutate => MUTATE,
        }
    }
}

/// A pre-linked component whose exports match the `reconciler` world.
pub(crate) struct GuestPre {
    pre: InstancePre<StoreState>,
    reconcile: ComponentExportIndex,
    metadata: ComponentExportIndex,
    outbound: Option<ComponentExportIndex>,
    admission: Option<Admission>,
}

/// The indices of the `admission-reconciler` world's exports.
#[derive(Clone, Copy)]
struct Admission {
    webhooks: ComponentExportIndex,
    validate: ComponentExportIndex,
    mutate: ComponentExportIndex,
}

impl GuestPre {
    /// Checks that the component exports `reconcile` and `metadata` with
    /// the world's types; fails with bindgen's own message when it does
    /// not (a missing export, or one of another type).
    pub(crate) fn new(pre: InstancePre<StoreState>) -> wasmtime::Result<Self> {
        // The world's type checks, once: what makes `Guest`'s unchecked
        // calls sound.
        ReconcilerPre::new(pre.clone())?;
        let index = |name: &str| {
            pre.component()
                .get_export_index(None, name)
                .ok_or_else(|| wasmtime::format_err!("no export `{name}` found"))
        };
        Ok(Self {
            reconcile: index(RECONCILE)?,
            metadata: index(METADATA)?,
            outbound: pre.component().get_export_index(None, OUTBOUND),
            admission: admission(&pre)?,
            pre,
        })
    }

    /// A new instance of the component in `store`.
    pub(crate) async fn instantiate_async(
        &self,
        store: &mut Store<StoreState>,
    ) -> wasmtime::Result<Guest> {
        let instance = self.pre.instantiate_async(store).await?;
        Ok(Guest {
            instance,
            reconcile_index: self.reconcile,
            metadata_index: self.metadata,
            outbound_index: self.outbound,
            admission: self.admission,
            reconcile: None,
        })
    }
}

/// One instance of a plugin's component.
pub(crate) struct Guest {
    instance: Instance,
    reconcile_index: ComponentExportIndex,
    metadata_index: ComponentExportIndex,
    outbound_index: Option<ComponentExportIndex>,
    admission: Option<Admission>,
    /// Looked up at the first reconcile; a reused instance keeps it.
    reconcile: Option<Func>,
}

impl Guest {
    /// Calls the guest's `reconcile` export.
    pub(crate) async fn call_reconcile(
        &mut self,
        store: &mut Store<StoreState>,
        key: &ObjectKey,
    ) -> wasmtime::Result<Result<Action, ReconcileError>> {
        let func = match self.reconcile {
            Some(func) => func,
            None => *self.reconcile.insert(export(
                &self.instance,
                store,
                self.reconcile_index,
                RECONCILE,
            )?),
        };
        // SAFETY: `GuestPre::new` type-checked this component's `reconcile`
        // export against exactly these types, and the instance is of that
        // component.
        let typed = unsafe {
            TypedFunc::<(&ObjectKey,), (Result<Action, ReconcileError>,)>::new_unchecked(func)
        };
        let (returned,) = typed.call_async(store, (key,)).await?;
        Ok(returned)
    }

    /// Calls the guest's `metadata` export, and its `outbound` export if
    /// it has one (type-checked here: the world's check covers only the
    /// exports every plugin has).
    pub(crate) async fn call_metadata(
        &self,
        store: &mut Store<StoreState>,
    ) -> wasmtime::Result<(PluginMetadata, Vec<OutboundRule>, Vec<Webhook>)> {
        let func = export(&self.instance, store, self.metadata_index, METADATA)?;
        // SAFETY: as in `call_reconcile`, for the `metadata` export.
        let typed = unsafe { TypedFunc::<(), (PluginMetadata,)>::new_unchecked(func) };
        let (metadata,) = typed.call_async(&mut *store, ()).await?;
        let outbound = match self.outbound_index {
            None => Vec::new(),
            Some(index) => {
                let typed = self
                    .instance
                    .get_typed_func::<(), (Vec<OutboundRule>,)>(&mut *store, index)
                    .map_err(|e| {
                        e.context(format!(
                            "the export `{OUTBOUND}` is not the outbound-reconciler world's"
                        ))
                    })?;
                typed.call_async(&mut *store, ()).await?.0
            }
        };
        let webhooks = match self.admission {
            None => Vec::new(),
            Some(a) => {
                let typed = self
                    .instance
                    .get_typed_func::<(), (Vec<Webhook>,)>(&mut *store, a.webhooks)
                    .map_err(|e| e.context(wrong_admission(WEBHOOKS)))?;
                typed.call_async(&mut *store, ()).await?.0
            }
        };
        Ok((metadata, outbound, webhooks))
    }

    /// Calls the guest's `validate` or `mutate` export with an
    /// AdmissionReview `request` (JSON).
    pub(crate) async fn call_review(
        &self,
        store: &mut Store<StoreState>,
        review: Review,
        request: &str,
    ) -> wasmtime::Result<AdmissionResponse> {
        let Some(a) = self.admission else {
            wasmtime::bail!(
                "the component has no `{}` export: it does not serve admission webhooks",
                review.export()
            );
        };
        let index = match review {
            Review::Validate => a.validate,
            Review::Mutate => a.mutate,
        };
        let typed = self
            .instance
            .get_typed_func::<(&str,), (AdmissionResponse,)>(&mut *store, index)
            .map_err(|e| e.context(wrong_admission(review.export())))?;
        Ok(typed.call_async(&mut *store, (request,)).await?.0)
    }
}

fn wrong_admission(export: &str) -> String {
    format!("the export `{export}` is not the admission-reconciler world's")
}

/// The admission exports of a component: all three, or none. A component
/// with only some of them is of no world the host knows.
fn admission(pre: &InstancePre<StoreState>) -> wasmtime::Result<Option<Admission>> {
    let index = |name| pre.component().get_export_index(None, name);
    match (index(WEBHOOKS), index(VALIDATE), index(MUTATE)) {
        (Some(webhooks), Some(validate), Some(mutate)) => Ok(Some(Admission {
            webhooks,
            validate,
            mutate,
        })),
        (None, None, None) => Ok(None),
        _ => Err(wasmtime::format_err!(
            "the component exports only some of `{WEBHOOKS}`, `{VALIDATE}` and `{MUTATE}`; the admission-reconciler world has all three"
        )),
    }
}

fn export(
    instance: &Instance,
    store: &mut Store<StoreState>,
    index: ComponentExportIndex,
    name: &str,
) -> wasmtime::Result<Func> {
    instance
        .get_func(store, index)
        .ok_or_else(|| wasmtime::format_err!("the instance has no export `{name}`"))
}
