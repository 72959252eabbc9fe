//! Running plugins in a process: the manager that wires a controller per
//! plugin, where components come from, the admin server, the admission
//! webhook server (both served within [`serving`]'s bounds), RBAC, reconcile
//! transcripts and the allocator settings. ops imports meta, control,
//! config and sandbox.

pub(crate) mod admin;
pub mod malloc;
pub mod manager;
pub mod rbac;
pub mod serving;
pub mod source;
pub mod transcript;
pub mod webhook;
