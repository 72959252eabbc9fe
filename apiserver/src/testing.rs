//! Test-only control of a running server (feature `testing`): fault
//! injection ([`Faults`], from [`crate::ApiServer::faults`]) and the audit
//! of writes ([`Audit`], from [`crate::ApiServer::audit`]).
//!
//! Faults take effect at once for every connection and last until switched
//! off (or their duration ends). A restart is driven with the public API:
//! `let config = server.config(); server.shutdown().await;
//! ApiServer::start(config)` serves the same address, token and CA again.
//!
//! ```no_run
//! # async fn demo() -> Result<(), wasmctrl_apiserver::Error> {
//! use std::time::Duration;
//! use wasmctrl_apiserver::testing::Scope;
//! let server = wasmctrl_apiserver::ApiServer::start(Default::default()).await?;
//! let faults = server.faults();
//! faults.fail_requests(Scope::resource("", "configmaps"), Duration::from_secs(5));
//! faults.drop_watches();
//! faults.clear();
//! for write in server.audit().records() {
//!     println!("{} {} {:?} -> {}", write.user, write.verb, write.name, write.code);
//! }
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::Duration;

use crate::http::state::ServerState;

pub use crate::http::audit::AuditRecord;
pub use crate::http::faults::Scope;

/// Switches faults of one server on and off. Cheap to clone; every clone
/// controls the same server.
#[derive(Clone)]
pub struct Faults {
    shared: Arc<ServerState>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("server", &self.shared.addr)
            .finish()
    }
}

impl Faults {
    pub(crate) fn new(shared: Arc<ServerState>) -> Self {
        Faults { shared }
    }

    /// Cuts every open watch connection now, mid-stream: the response ends
    /// without its final chunk, so clients see a broken connection (not a
    /// clean end) and must reconnect.
    pub fn drop_watches(&self) {
        self.shared.faults.abort_watches();
    }

    /// Ends every open watch cleanly now, as a server-side timeout does.
    pub fn close_watches(&self) {
        self.shared.close_watches();
    }

    /// Answers the next `n` watch requests in `scope` with 410 Expired (an
    /// ERROR event, as the real server does for a too-old
    /// resourceVersion), so clients relist.
    pub fn expire_next_watches(&self, scope: Scope, n: u32) {
        self.shared.faults.set_expire_watches(scope, n, None);
    }

    /// Answers every watch request in `scope` with 410 Expired for
    /// `duration`.
    pub fn expire_watches_for(&self, scope: Scope, duration: Duration) {
        self.shared
            .faults
            .set_expire_watches(scope, 0, Some(duration));
    }

    /// Answers every request in `scope` with 500 InternalError for
    /// `duration`.
    pub fn fail_requests(&self, scope: Scope, duration: Duration) {
        self.shared
            .faults
            .set_fail_requests(Some((scope, duration)));
    }

    /// Holds every response back by `delay` (a slow server); `None` stops.
    pub fn delay_responses(&self, delay: Option<Duration>) {
        self.shared.faults.set_delay(delay);
    }

    /// While `Some`, requests in `scope` wait, unanswered, until the hold
    /// is lifted (`None`) or moved to another scope: a test holds a client
    /// at a known point for as long as it needs.
    pub fn hold_requests(&self, scope: Option<Scope>) {
        self.shared.faults.set_hold(scope);
    }

    /// While on, open and new watches deliver no events, only bookmarks at
    /// the last delivered resourceVersion (one whenever an event is held
    /// back, for watches that asked for bookmarks). Switching off delivers
    /// the held-back events in order and resumes the stream.
    pub fn withhold_watch_events(&self, on: bool) {
        self.shared.faults.set_withhold(on);
    }

    /// While on, the first status write (PUT or PATCH of `/status`) of each
    /// object is refused with 409 Conflict; its retry succeeds.
    pub fn conflict_first_status_writes(&self, on: bool) {
        self.shared.faults.set_status_conflicts(on);
    }

    /// While on, every write to the data directory fails: requests that
    /// write answer 500, and nothing they wrote becomes visible. Without a
    /// data directory nothing is persisted and this has no effect.
    pub fn fail_persistence(&self, on: bool) {
        self.shared.faults.set_persistence_failure(
            on.then(|| "disk write refused by Faults::fail_persistence".into()),
        );
    }

    /// Switches every fault off (a withholding watch delivers what it held).
    pub fn clear(&self) {
        let f = &self.shared.faults;
        f.set_fail_requests(None);
        f.set_delay(None);
        f.clear_expire_watches();
        f.set_status_conflicts(false);
        f.set_persistence_failure(None);
        f.set_withhold(false);
        f.set_hold(None);
    }
}

/// Reads the audit of writes of one server: every create, update, patch,
/// delete and deletecollection it answered, oldest first, bounded to the
/// newest 100 000.
#[derive(Clone)]
pub struct Audit {
    shared: Arc<ServerState>,
}

impl std::fmt::Debug for Audit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audit")
            .field("server", &self.shared.addr)
            .finish()
    }
}

impl Audit {
    pub(crate) fn new(shared: Arc<ServerState>) -> Self {
        Audit { shared }
    }

    /// A snapshot of the records kept, oldest first.
    pub fn records(&self) -> Vec<AuditRecord> {
        self.shared.audit.records()
    }

    /// How many old records were dropped to keep the audit bounded.
    pub fn dropped(&self) -> u64 {
        self.shared.audit.dropped()
    }

    /// Forgets every record.
    pub fn clear(&self) {
        self.shared.audit.clear();
    }
}
