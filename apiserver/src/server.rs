//! State shared by every request handler and background task.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde_json::Value;

use crate::resources::{Registry, ResourceInfo, View};
use crate::storage::Store;

/// Everything a request can touch.
pub struct Shared {
    pub store: Store,
    registry: RwLock<Registry>,
    /// Bumped whenever the registry changes (CRDs), to change OpenAPI hashes.
    registry_generation: AtomicU64,
    pub token: String,
    /// Server address as clients reach it (`127.0.0.1:PORT`).
    pub addr: std::net::SocketAddr,
    /// Bumped to close every open watch (forced expiry, shutdown).
    pub watch_epoch: tokio::sync::watch::Sender<u64>,
}

impl Shared {
    pub fn new(token: String, addr: std::net::SocketAddr) -> Self {
        Shared {
            store: Store::new(),
            registry: RwLock::new(Registry::new()),
            registry_generation: AtomicU64::new(1),
            token,
            addr,
            watch_epoch: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Read access to the registry (never held across an await).
    pub fn registry(&self) -> RwLockReadGuard<'_, Registry> {
        self.registry.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Write access to the registry; bumps the OpenAPI generation.
    pub fn registry_mut(&self) -> RwLockWriteGuard<'_, Registry> {
        self.registry_generation.fetch_add(1, Ordering::SeqCst);
        self.registry.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes whenever the set of served resources changes.
    pub fn registry_generation(&self) -> u64 {
        self.registry_generation.load(Ordering::SeqCst)
    }

    /// Closes every open watch stream; clients reconnect.
    pub fn close_watches(&self) {
        self.watch_epoch.send_modify(|e| *e += 1);
    }

    /// Forces every client-held resourceVersion to be too old (410 on the
    /// next watch), closing open watches so clients notice at once.
    pub fn expire_watches(&self) {
        self.store.expire_history();
        self.close_watches();
    }
}

/// A stored object as the served version presents it.
pub fn to_view(info: &ResourceInfo, obj: &Value) -> Value {
    match info.view {
        View::Plain => {
            let mut o = obj.clone();
            if let Some(m) = o.as_object_mut() {
                m.insert("apiVersion".into(), Value::String(info.api_version()));
                m.insert("kind".into(), Value::String(info.kind.clone()));
            }
            o
        }
        View::EventsV1 => crate::events::core_to_events_v1(obj),
    }
}

/// A served-version object in stored form.
pub fn from_view(info: &ResourceInfo, obj: Value) -> Value {
    match info.view {
        View::Plain => {
            let mut o = obj;
            if let Some(m) = o.as_object_mut() {
                m.insert(
                    "apiVersion".into(),
                    Value::String(info.storage_api_version.clone()),
                );
                m.insert("kind".into(), Value::String(info.kind.clone()));
            }
            o
        }
        View::EventsV1 => crate::events::events_v1_to_core(&obj),
    }
}

/// Whether the stored form already equals the served form (no conversion
/// needed, so cached serializations can be reused).
pub fn view_is_identity(info: &ResourceInfo, obj: &Value) -> bool {
    info.view == View::Plain
        && obj.get("apiVersion").and_then(Value::as_str) == Some(info.api_version().as_str())
}
