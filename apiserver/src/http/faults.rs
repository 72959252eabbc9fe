//! Faults a test injects into a running server: failed requests, slow
//! responses, expired or cut watches, withheld events, status conflicts and
//! failing persistence. Only the `testing` feature can switch them on
//! (through [`crate::testing::Faults`]); without it [`FaultState`] is an
//! empty type whose checks are constant "no fault" and compile away.

#[cfg(feature = "testing")]
pub use enabled::Scope;
#[cfg(feature = "testing")]
pub(crate) use enabled::{FaultState, WatchFaults};

#[cfg(not(feature = "testing"))]
pub(crate) use disabled::{FaultState, WatchFaults};

/// What changed for an open watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub(crate) enum WatchFault {
    /// Cut the connection now, mid-stream.
    Abort,
    /// Start (true) or stop (false) withholding events.
    Withhold(bool),
}

#[cfg(feature = "testing")]
mod enabled {
    use std::collections::HashSet;
    use std::sync::Mutex;
    use std::time::Duration;

    use tokio::sync::watch;
    use tokio::time::Instant;

    use super::WatchFault;

    /// Objects remembered by the "first status write conflicts" fault before
    /// the memory is reset (keeps it bounded under load tests).
    const MAX_REMEMBERED_STATUS_WRITES: usize = 100_000;

    /// Which requests a fault applies to.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum Scope {
        /// Every request, discovery and `/version` included.
        All,
        /// Requests for non-resource paths: discovery, `/version`,
        /// `/openapi`, `/healthz`.
        NonResource,
        /// Requests for one resource (any version, namespace and name).
        Resource {
            /// API group, empty for the core group.
            group: String,
            /// Plural resource name, e.g. `configmaps`.
            resource: String,
        },
    }

    impl Scope {
        /// Requests for `resource` in `group` (empty for core).
        pub fn resource(group: &str, resource: &str) -> Scope {
            Scope::Resource {
                group: group.to_string(),
                resource: resource.to_string(),
            }
        }

        fn matches(&self, target: Option<(&str, &str)>) -> bool {
            match self {
                Scope::All => true,
                Scope::NonResource => target.is_none(),
                Scope::Resource { group, resource } => {
                    target.is_some_and(|(g, r)| g == group && r == resource)
                }
            }
        }
    }

    /// An object: group, resource, namespace, name.
    type ObjectId = (String, String, String, String);

    /// "Answer watches with 410 Expired": a count of next requests, a
    /// deadline, or both.
    #[derive(Debug)]
    struct ExpireRule {
        scope: Scope,
        remaining: u32,
        until: Option<Instant>,
    }

    /// The faults currently switched on, shared by every request handler,
    /// every watch and the persister.
    #[derive(Debug)]
    pub(crate) struct FaultState {
        fail_requests: Mutex<Option<(Scope, Instant)>>,
        delay: Mutex<Option<Duration>>,
        expire_watches: Mutex<Option<ExpireRule>>,
        /// `Some(seen)` while the first status write of each object is
        /// refused; `seen` holds the objects already refused once.
        status_conflicts: Mutex<Option<HashSet<ObjectId>>>,
        persistence: Mutex<Option<String>>,
        withhold: watch::Sender<bool>,
        abort: watch::Sender<u64>,
        hold: watch::Sender<Option<Scope>>,
    }

    impl Default for FaultState {
        fn default() -> Self {
            FaultState {
                fail_requests: Mutex::new(None),
                delay: Mutex::new(None),
                expire_watches: Mutex::new(None),
                status_conflicts: Mutex::new(None),
                persistence: Mutex::new(None),
                withhold: watch::Sender::new(false),
                abort: watch::Sender::new(0),
                hold: watch::Sender::new(None),
            }
        }
    }

    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    impl FaultState {
        /// Every fault off.
        pub(crate) fn new() -> Self {
            Self::default()
        }

        // Switches (called by `testing::Faults`).

        pub(crate) fn set_fail_requests(&self, rule: Option<(Scope, Duration)>) {
            *lock(&self.fail_requests) = rule.map(|(s, d)| (s, Instant::now() + d));
        }

        pub(crate) fn set_delay(&self, delay: Option<Duration>) {
            *lock(&self.delay) = delay;
        }

        pub(crate) fn set_hold(&self, scope: Option<Scope>) {
            self.hold.send_replace(scope);
        }

        pub(crate) fn set_expire_watches(
            &self,
            scope: Scope,
            next: u32,
            duration: Option<Duration>,
        ) {
            *lock(&self.expire_watches) = Some(ExpireRule {
                scope,
                remaining: next,
                until: duration.map(|d| Instant::now() + d),
            });
        }

        pub(crate) fn clear_expire_watches(&self) {
            *lock(&self.expire_watches) = None;
        }

        pub(crate) fn set_status_conflicts(&self, on: bool) {
            *lock(&self.status_conflicts) = on.then(HashSet::new);
        }

        pub(crate) fn set_persistence_failure(&self, message: Option<String>) {
            *lock(&self.persistence) = message;
        }

        pub(crate) fn set_withhold(&self, on: bool) {
            self.withhold.send_replace(on);
        }

        pub(crate) fn abort_watches(&self) {
            self.abort.send_modify(|n| *n += 1);
        }

        // Checks (called by the server).

        /// How long to hold every response back.
        pub(crate) fn response_delay(&self) -> Option<Duration> {
            *lock(&self.delay)
        }

        /// Waits while requests for `target` (group, resource; None for
        /// non-resource paths) are held.
        pub(crate) async fn held(&self, target: Option<(&str, &str)>) {
            let mut hold = self.hold.subscribe();
            let _ = hold
                .wait_for(|scope| !scope.as_ref().is_some_and(|s| s.matches(target)))
                .await;
        }

        /// Whether to answer a request for `target` (group, resource; None
        /// for non-resource paths) with 500.
        pub(crate) fn fails_request(&self, target: Option<(&str, &str)>) -> bool {
            let mut rule = lock(&self.fail_requests);
            match &*rule {
                Some((_, until)) if Instant::now() >= *until => {
                    *rule = None;
                    false
                }
                Some((scope, _)) => scope.matches(target),
                None => false,
            }
        }

        /// Whether this watch request must be answered with 410 Expired;
        /// counts it against "the next N watches".
        pub(crate) fn take_watch_expiry(&self, group: &str, resource: &str) -> bool {
            let mut rule = lock(&self.expire_watches);
            let Some(r) = rule.as_mut() else {
                return false;
            };
            if !r.scope.matches(Some((group, resource))) {
                return false;
            }
            if r.until.is_some_and(|u| Instant::now() < u) {
                return true;
            }
            if r.remaining > 0 {
                r.remaining -= 1;
                return true;
            }
            *rule = None;
            false
        }

        /// Whether to refuse this status write with 409 (the first for the
        /// object since the fault was switched on).
        pub(crate) fn refuses_status_write(
            &self,
            group: &str,
            resource: &str,
            namespace: &str,
            name: &str,
        ) -> bool {
            let mut seen = lock(&self.status_conflicts);
            let Some(seen) = seen.as_mut() else {
                return false;
            };
            if seen.len() >= MAX_REMEMBERED_STATUS_WRITES {
                seen.clear();
            }
            seen.insert((
                group.to_string(),
                resource.to_string(),
                namespace.to_string(),
                name.to_string(),
            ))
        }

        /// The error the persister must report instead of writing.
        pub(crate) fn persistence_failure(&self) -> Option<String> {
            lock(&self.persistence).clone()
        }

        /// Fault signals for one open watch.
        pub(crate) fn watch_faults(&self) -> WatchFaults {
            let mut abort = self.abort.subscribe();
            abort.borrow_and_update();
            WatchFaults {
                withhold: self.withhold.subscribe(),
                abort,
            }
        }
    }

    /// What one open watch listens to.
    pub(crate) struct WatchFaults {
        withhold: watch::Receiver<bool>,
        abort: watch::Receiver<u64>,
    }

    impl WatchFaults {
        /// Whether events are being withheld now.
        pub(crate) fn withholding(&self) -> bool {
            *self.withhold.borrow()
        }

        /// The next change; never resolves once the server is gone.
        pub(crate) async fn changed(&mut self) -> WatchFault {
            tokio::select! {
                r = self.abort.changed() => match r {
                    Ok(()) => WatchFault::Abort,
                    Err(_) => std::future::pending().await,
                },
                r = self.withhold.changed() => match r {
                    Ok(()) => WatchFault::Withhold(*self.withhold.borrow_and_update()),
                    Err(_) => std::future::pending().await,
                },
            }
        }
    }
}

#[cfg(not(feature = "testing"))]
mod disabled {
    use std::time::Duration;

    use super::WatchFault;

    /// No fault can be switched on without the `testing` feature.
    #[derive(Debug)]
    pub(crate) struct FaultState;

    impl FaultState {
        #[inline]
        pub(crate) fn new() -> Self {
            FaultState
        }

        #[inline]
        pub(crate) fn response_delay(&self) -> Option<Duration> {
            None
        }

        #[inline]
        pub(crate) async fn held(&self, _target: Option<(&str, &str)>) {}

        #[inline]
        pub(crate) fn fails_request(&self, _target: Option<(&str, &str)>) -> bool {
            false
        }

        #[inline]
        pub(crate) fn take_watch_expiry(&self, _group: &str, _resource: &str) -> bool {
            false
        }

        #[inline]
        pub(crate) fn refuses_status_write(
            &self,
            _group: &str,
            _resource: &str,
            _namespace: &str,
            _name: &str,
        ) -> bool {
            false
        }

        #[inline]
        pub(crate) fn watch_faults(&self) -> WatchFaults {
            WatchFaults
        }
    }

    /// No fault reaches a watch without the `testing` feature.
    pub(crate) struct WatchFaults;

    impl WatchFaults {
        #[inline]
        pub(crate) fn withholding(&self) -> bool {
            false
        }

        pub(crate) async fn changed(&mut self) -> WatchFault {
            std::future::pending().await
        }
    }
}
