//! The host side of the `wasmctrl:reconciler` imports: one file per WIT
//! interface, each implemented on a narrow view of the store's data (the
//! layout of wasmtime-wasi's `p2/host/`). Adding an import: see
//! docs/ARCHITECTURE.md, "Where to add what".

mod context;
mod kube;
mod secrets;

use wasmtime::component::{HasData, Linker};

use super::store::StoreState;
use crate::sandbox::wit::wasmctrl::reconciler as wit;

/// Links WASI (no filesystem, network or environment is granted in the
/// store), `wasi:http/outgoing-handler` (whose requests the store's hooks
/// check and send, `sandbox/outbound/`; a plugin without an outbound grant
/// has every request refused) and every `wasmctrl:reconciler` interface.
/// A component that imports no `wasi:http` never sees it.
pub(crate) fn add_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    wit::types::add_to_linker::<StoreState, Types>(linker, |_| Types)?;
    wit::context::add_to_linker::<StoreState, context::Context>(linker, context::view)?;
    wit::kube::add_to_linker::<StoreState, kube::Kube>(linker, kube::view)?;
    wit::secrets::add_to_linker::<StoreState, secrets::Secrets>(linker, secrets::view)?;
    Ok(())
}

/// `types` has no functions: its host side holds nothing.
struct Types;

impl HasData for Types {
    type Data<'a> = Types;
}

impl wit::types::Host for Types {}
