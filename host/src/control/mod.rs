//! The controller machinery (controller-runtime's part): the workqueue, the
//! controller loop and its reconcile contract, the shared informer cache,
//! metrics, Leases and the leader election and sharding held through them,
//! clients and discovery. It knows nothing of wasm. control imports only
//! meta.

pub(crate) mod client;
pub mod controller;
pub mod discovery;
pub mod informer;
pub mod leader;
pub mod lease;
pub mod metrics;
pub(crate) mod reconcile;
pub mod secrets;
pub mod shard;
pub mod workqueue;
