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
    Action, ObjectKey, OutboundRule, PluginMetadata, ReconcileError,
};

/// The world's export that reconciles one key.
const RECONCILE: &str = "reconcile";
/// The world's export that describes the plugin.
const METADATA: &str = "metadata";
/// The `outbound-reconciler` world's export that declares the outside
/// hosts the plugin calls; a component without it declares none.
const OUTBOUND: &str = "outbound";

/// A pre-linked component whose exports match the `reconciler` world.
pub(crate) struct GuestPre {
    pre: InstancePre<StoreState>,
    reconcile: ComponentExportIndex,
    metadata: ComponentExportIndex,
    outbound: Option<ComponentExportIndex>,
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
    ) -> wasmtime::Result<(PluginMetadata, Vec<OutboundRule>)> {
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
        Ok((metadata, outbound))
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
