//! The registry: the cluster's objects and what they mean, below HTTP and
//! authentication.
//!
//! [`Objects`] holds the store and the served resources (built-ins plus
//! the versions CRDs add) and carries every write: create, update, patch
//! and delete with the real server's metadata, generation, status,
//! finalizer and CRD rules ([`writes`], [`delete`], [`scale`]), the
//! in-process controllers that complete deletions ([`gc`]) and aggregate
//! ClusterRoles ([`aggregation`]), and the checks
//! written objects pass ([`validation`], [`schema`], [`crd`]).
//!
//! | File | Job |
//! |---|---|
//! | [`storage`] | versioned in-memory store, watch history, durable commits |
//! | [`resources`] | the served resources and their names, scopes and subresources |
//! | [`views`] | stored form ⇄ served version (events.k8s.io ⇄ core Events) |
//! | [`selectors`] | label and field selectors |
//! | [`validation`], [`schema`], [`crd`] | metadata rules, CRD structural schemas, CRD status and registry entries |
//! | [`writes`], [`delete`], [`scale`] | object semantics of every write |
//! | [`gc`] | owner references, propagation, namespace and CRD cleanup |
//! | [`namespace_status`] | the conditions that say why a namespace stays `Terminating` |
//! | [`aggregation`] | the rules of ClusterRoles with an `aggregationRule` |
//!
//! Writes of requests go through admission ([`crate::admission`]) between
//! computing an object and committing it.
//!
//! May import: [`crate::admission`], [`crate::error`], [`crate::metrics`],
//! [`crate::values`], [`crate::yaml`] and [`crate::patch`]; never `auth`,
//! `http` or `persist`, which build on it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::admission::Webhooks;
use crate::metrics::Metrics;

pub(crate) mod aggregation;
pub(crate) mod crd;
pub(crate) mod delete;
pub(crate) mod gc;
pub(crate) mod namespace_status;
pub(crate) mod resources;
pub(crate) mod scale;
pub(crate) mod schema;
pub(crate) mod selectors;
pub(crate) mod storage;
pub(crate) mod validation;
pub(crate) mod views;
pub(crate) mod writes;

use resources::Registry;
use storage::Store;

/// The cluster's objects with the resources served for them: what every
/// read and write of an object goes through.
pub(crate) struct Objects {
    pub(crate) store: Store,
    registry: RwLock<Registry>,
    /// Bumped whenever the registry changes (CRDs), to change OpenAPI hashes.
    registry_generation: AtomicU64,
    /// Bumped whenever a change to an RBAC object becomes visible, so that
    /// what authorization parsed of them is parsed again.
    rbac_generation: AtomicU64,
    /// Where refused writes (limits) are counted; shared with the rest of
    /// the server.
    pub(crate) metrics: Arc<Metrics>,
    /// The admission webhooks the stored configurations name.
    pub(crate) admission: Webhooks,
}

/// Write access to the registry; bumps its generation when dropped.
pub(crate) struct RegistryWrite<'a> {
    guard: RwLockWriteGuard<'a, Registry>,
    generation: &'a AtomicU64,
}

impl std::ops::Deref for RegistryWrite<'_> {
    type Target = Registry;

    fn deref(&self) -> &Registry {
        &self.guard
    }
}

impl std::ops::DerefMut for RegistryWrite<'_> {
    fn deref_mut(&mut self) -> &mut Registry {
        &mut self.guard
    }
}

impl Drop for RegistryWrite<'_> {
    fn drop(&mut self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

impl Objects {
    pub(crate) fn new(metrics: Arc<Metrics>) -> Self {
        Objects {
            store: Store::new(),
            registry: RwLock::new(Registry::new()),
            registry_generation: AtomicU64::new(1),
            rbac_generation: AtomicU64::new(0),
            admission: Webhooks::new(metrics.clone(), storage::MAX_OBJECT_BYTES),
            metrics,
        }
    }

    /// Read access to the registry (never held across an await).
    pub(crate) fn registry(&self) -> RwLockReadGuard<'_, Registry> {
        self.registry.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Write access to the registry. The generation is bumped when the
    /// access ends, before the lock is let go: whoever reads the new
    /// generation then reads the registry as changed, so what is built
    /// for a generation (OpenAPI documents) is never older than it.
    pub(crate) fn registry_mut(&self) -> RegistryWrite<'_> {
        RegistryWrite {
            guard: self.registry.write().unwrap_or_else(|e| e.into_inner()),
            generation: &self.registry_generation,
        }
    }

    /// Changes whenever the set of served resources changes.
    pub(crate) fn registry_generation(&self) -> u64 {
        self.registry_generation.load(Ordering::SeqCst)
    }

    /// Changes whenever an RBAC object's change becomes visible (bumped
    /// under the store's lock, with the change itself).
    pub(crate) fn rbac_generation(&self) -> u64 {
        self.rbac_generation.load(Ordering::SeqCst)
    }

    fn rbac_changed(&self) {
        self.rbac_generation.fetch_add(1, Ordering::SeqCst);
    }
}
