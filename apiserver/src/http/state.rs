//! State shared by every request handler and background task.

use std::sync::Arc;
use std::time::Duration;

use super::audit::AuditLog;
use super::faults::FaultState;
use crate::auth::Auth;
use crate::auth::mode::Authorization;
use crate::metrics::Metrics;
use crate::registry::Objects;

/// Everything a request can touch: the objects, credentials, and the
/// signals that end watches.
pub(crate) struct ServerState {
    /// The store and the served resources.
    pub(crate) objects: Arc<Objects>,
    /// Authentication and authorization.
    pub(crate) auth: Auth,
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
    /// The OpenAPI documents built at the registry's generation.
    pub(crate) openapi: crate::http::discovery::OpenApiDocs,
    /// The bytes of list answers on their way to clients.
    pub(crate) list_budget: crate::http::list_budget::ListBudget,
    /// The bytes every watch has waiting for its client, and their bound.
    pub(crate) watch_bytes: Arc<std::sync::atomic::AtomicUsize>,
    pub(crate) max_watch_bytes: usize,
}

impl ServerState {
    pub(crate) fn new(
        token: String,
        addr: std::net::SocketAddr,
        authorization: Authorization,
        service_account_key: &[u8],
        body_timeout: Duration,
        max_list_bytes: usize,
        max_watch_bytes: usize,
    ) -> Self {
        let metrics = Arc::new(Metrics::new());
        let objects = Arc::new(Objects::new(metrics.clone()));
        ServerState {
            auth: Auth::new(objects.clone(), token, authorization, service_account_key),
            objects,
            addr,
            watch_epoch: tokio::sync::watch::Sender::new(0),
            faults: FaultState::new(),
            audit: AuditLog::new(),
            metrics,
            body_timeout,
            openapi: Default::default(),
            list_budget: crate::http::list_budget::ListBudget::new(max_list_bytes),
            watch_bytes: Arc::default(),
            max_watch_bytes,
        }
    }

    /// Closes every open watch stream; clients reconnect.
    pub(crate) fn close_watches(&self) {
        self.watch_epoch.send_modify(|e| *e += 1);
    }

    /// Forces every client-held resourceVersion to be too old (410 on the
    /// next watch), closing open watches so clients notice at once.
    pub(crate) fn expire_watches(&self) {
        self.objects.store.expire_history();
        self.close_watches();
    }
}
