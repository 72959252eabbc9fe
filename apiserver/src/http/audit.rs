//! An audit of writes for tests (feature `testing`): every mutating request
//! with its time, caller, target and result, in a bounded ring. Tests read it
//! through [`crate::testing::Audit`], e.g. to check that two controller
//! processes never wrote as leader at the same time. Without the feature
//! [`AuditLog`] is an empty type and recording compiles away.

use std::net::SocketAddr;

/// Who made a request, as far as the server can tell.
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub(crate) struct Caller<'a> {
    /// The user the bearer token belongs to.
    pub(crate) user: &'a str,
    pub(crate) user_agent: &'a str,
    /// The connection's remote address.
    pub(crate) peer: Option<SocketAddr>,
}

#[cfg(feature = "testing")]
pub(crate) use enabled::AuditLog;
#[cfg(feature = "testing")]
pub use enabled::AuditRecord;

#[cfg(not(feature = "testing"))]
pub(crate) use disabled::AuditLog;

#[cfg(feature = "testing")]
mod enabled {
    use std::collections::VecDeque;
    use std::net::SocketAddr;
    use std::sync::Mutex;
    use std::time::SystemTime;

    use super::Caller;
    use crate::http::request_info::RequestInfo;

    /// Records kept; older ones are dropped (and counted).
    pub(crate) const CAPACITY: usize = 100_000;

    /// One mutating request and how it ended.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct AuditRecord {
        /// When the request arrived.
        pub time: SystemTime,
        /// The user its bearer token belongs to.
        pub user: String,
        /// Its `User-Agent` header.
        pub user_agent: String,
        /// The `fieldManager` query parameter, if given.
        pub field_manager: Option<String>,
        /// The client's address (one per connection).
        pub peer: Option<SocketAddr>,
        /// `create`, `update`, `patch`, `delete` or `deletecollection`.
        pub verb: String,
        /// API group, empty for core.
        pub group: String,
        /// Plural resource name.
        pub resource: String,
        /// `status`, `scale`, ... if the request addressed a subresource.
        pub subresource: Option<String>,
        pub namespace: Option<String>,
        /// The object's name (for a create, the name it got).
        pub name: Option<String>,
        /// The HTTP status code of the response.
        pub code: u16,
        /// Audit annotations admission webhooks added, keyed
        /// `<webhook name>/<key>` (and upstream's `failed-open…` keys for
        /// webhooks whose failure was ignored).
        pub annotations: Vec<(String, String)>,
    }

    /// The bounded record of writes.
    #[derive(Debug, Default)]
    pub(crate) struct AuditLog {
        inner: Mutex<Ring>,
    }

    /// The records, oldest first, and how many were dropped.
    #[derive(Debug, Default)]
    struct Ring {
        records: VecDeque<AuditRecord>,
        dropped: u64,
    }

    impl AuditLog {
        pub(crate) fn new() -> Self {
            Self::default()
        }

        #[allow(clippy::too_many_arguments)]
        pub(crate) fn record(
            &self,
            time: SystemTime,
            caller: &Caller<'_>,
            info: &RequestInfo,
            field_manager: Option<&str>,
            created_name: Option<&str>,
            code: u16,
            annotations: Vec<(String, String)>,
        ) {
            if !info.is_mutating() {
                return;
            }
            let rec = AuditRecord {
                time,
                user: caller.user.to_string(),
                user_agent: caller.user_agent.to_string(),
                field_manager: field_manager.map(str::to_string),
                peer: caller.peer,
                verb: info.verb.clone(),
                group: info.group.clone(),
                resource: info.resource.clone(),
                subresource: info.subresource.clone(),
                namespace: info.namespace.clone(),
                name: info.name.clone().or(created_name.map(str::to_string)),
                code,
                annotations,
            };
            let mut ring = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            if ring.records.len() == CAPACITY {
                ring.records.pop_front();
                ring.dropped += 1;
            }
            ring.records.push_back(rec);
        }

        pub(crate) fn records(&self) -> Vec<AuditRecord> {
            let ring = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            ring.records.iter().cloned().collect()
        }

        pub(crate) fn dropped(&self) -> u64 {
            self.inner.lock().unwrap_or_else(|e| e.into_inner()).dropped
        }

        pub(crate) fn clear(&self) {
            let mut ring = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            ring.records.clear();
            ring.dropped = 0;
        }
    }
}

#[cfg(not(feature = "testing"))]
mod disabled {
    use std::time::SystemTime;

    use super::Caller;
    use crate::http::request_info::RequestInfo;

    /// Nothing is recorded without the `testing` feature.
    #[derive(Debug)]
    pub(crate) struct AuditLog;

    impl AuditLog {
        #[inline]
        pub(crate) fn new() -> Self {
            AuditLog
        }

        #[inline]
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn record(
            &self,
            _time: SystemTime,
            _caller: &Caller<'_>,
            _info: &RequestInfo,
            _field_manager: Option<&str>,
            _created_name: Option<&str>,
            _code: u16,
            _annotations: Vec<(String, String)>,
        ) {
        }
    }
}
