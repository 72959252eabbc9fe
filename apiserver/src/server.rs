//! State shared by every request handler and background task.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use serde_json::Value;

use crate::audit::AuditLog;
use crate::authorization::Authorization;
use crate::faults::FaultState;
use crate::metrics::Metrics;
use crate::resources::{Registry, ResourceInfo, View};
use crate::sa_token::Signer;
use crate::storage::Store;

/// The user the configured token authenticates as (what SelfSubjectReview
/// and the write audit report).
pub(crate) const ADMIN_USER: &str = "wasmctrl-admin";

/// Everything a request can touch: the store, the registry of served
/// resources, credentials, and the signals that end watches.
pub(crate) struct ServerState {
    pub(crate) store: Store,
    registry: RwLock<Registry>,
    /// Bumped whenever the registry changes (CRDs), to change OpenAPI hashes.
    registry_generation: AtomicU64,
    /// The configured bearer token; it authenticates as [`ADMIN_USER`].
    pub(crate) token: String,
    /// Further `(token, user)` pairs issued at run time (feature `testing`).
    extra_tokens: RwLock<Vec<(String, String)>>,
    /// Signs and verifies service-account tokens.
    pub(crate) signer: Signer,
    /// How requests of identities other than the admin are authorized.
    pub(crate) authorization: Authorization,
    /// Server address as clients reach it (`127.0.0.1:PORT`).
    pub(crate) addr: std::net::SocketAddr,
    /// Bumped to close every open watch (forced expiry, shutdown).
    pub(crate) watch_epoch: tokio::sync::watch::Sender<u64>,
    /// Faults a test switched on (always off without feature `testing`).
    pub(crate) faults: FaultState,
    /// The write audit (records nothing without feature `testing`).
    pub(crate) audit: AuditLog,
    /// Shared with the connection layer and watch pumps, which outlive no
    /// request but are not handed the whole state.
    pub(crate) metrics: Arc<Metrics>,
    /// How long a client may take to send a request body.
    pub(crate) body_timeout: Duration,
}

impl ServerState {
    pub(crate) fn new(
        token: String,
        addr: std::net::SocketAddr,
        authorization: Authorization,
        service_account_key: &[u8],
        body_timeout: Duration,
    ) -> Self {
        ServerState {
            store: Store::new(),
            registry: RwLock::new(Registry::new()),
            registry_generation: AtomicU64::new(1),
            token,
            extra_tokens: RwLock::new(Vec::new()),
            signer: Signer::new(service_account_key),
            authorization,
            addr,
            watch_epoch: tokio::sync::watch::Sender::new(0),
            faults: FaultState::new(),
            audit: AuditLog::new(),
            metrics: Arc::new(Metrics::new()),
            body_timeout,
        }
    }

    /// The `(token, user)` pairs issued for named users.
    pub(crate) fn named_tokens(&self) -> RwLockReadGuard<'_, Vec<(String, String)>> {
        self.extra_tokens.read().unwrap_or_else(|e| e.into_inner())
    }

    /// A token authenticating as `user`, issued on first use (feature
    /// `testing`: tell processes sharing one server apart in the audit).
    #[cfg(feature = "testing")]
    pub(crate) fn token_for(&self, user: &str) -> String {
        if user == ADMIN_USER {
            return self.token.clone();
        }
        let mut tokens = self.extra_tokens.write().unwrap_or_else(|e| e.into_inner());
        if let Some((t, _)) = tokens.iter().find(|(_, u)| u == user) {
            return t.clone();
        }
        let t = crate::values::random_token();
        tokens.push((t.clone(), user.to_string()));
        t
    }

    /// Read access to the registry (never held across an await).
    pub(crate) fn registry(&self) -> RwLockReadGuard<'_, Registry> {
        self.registry.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Write access to the registry; bumps the OpenAPI generation.
    pub(crate) fn registry_mut(&self) -> RwLockWriteGuard<'_, Registry> {
        self.registry_generation.fetch_add(1, Ordering::SeqCst);
        self.registry.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes whenever the set of served resources changes.
    pub(crate) fn registry_generation(&self) -> u64 {
        self.registry_generation.load(Ordering::SeqCst)
    }

    /// Closes every open watch stream; clients reconnect.
    pub(crate) fn close_watches(&self) {
        self.watch_epoch.send_modify(|e| *e += 1);
    }

    /// Forces every client-held resourceVersion to be too old (410 on the
    /// next watch), closing open watches so clients notice at once.
    pub(crate) fn expire_watches(&self) {
        self.store.expire_history();
        self.close_watches();
    }
}

/// A stored object as the served version presents it.
pub(crate) fn to_view(info: &ResourceInfo, obj: &Value) -> Value {
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
pub(crate) fn from_view(info: &ResourceInfo, obj: Value) -> Value {
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
pub(crate) fn view_is_identity(info: &ResourceInfo, obj: &Value) -> bool {
    info.view == View::Plain
        && obj.get("apiVersion").and_then(Value::as_str) == Some(info.api_version().as_str())
}
