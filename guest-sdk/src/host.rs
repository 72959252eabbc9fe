//! The seam between the SDK and the host's imports. Natively, with the
//! `testing` feature (and in the SDK's own tests), [`crate::testing`]'s
//! in-memory fake stands in for them: the real imports only exist inside a
//! wasm component.

#[cfg(not(all(any(test, feature = "testing"), not(target_arch = "wasm32"))))]
pub(crate) use crate::bindings::wasmctrl::reconciler::{context, kube, secrets};

#[cfg(all(any(test, feature = "testing"), not(target_arch = "wasm32")))]
pub(crate) use crate::testing::fake::{context, kube, secrets};
