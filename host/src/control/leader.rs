//! Leader election through a coordination.k8s.io Lease: only the leader
//! runs workers; a standby takes over once the leader's lease expires
//! (or at once, if the leader released it on shutdown).
//!
//! # Never two leaders
//! client-go's timing: a leader renews every `retry_period`; if it cannot
//! renew for `renew_deadline` it gives up, and a standby may take the lease
//! only after `lease_duration` (> `renew_deadline`) without renewal, counted
//! on the standby's own clock from when it saw the lease's record change
//! (`control::lease`), so clock skew between hosts cannot shorten it. Every
//! lease request is bounded in time, so a slow API server cannot hold a
//! renewal past the deadline.
//!
//! On top of that, a [`Fence`] guards every request plugins make: it is
//! valid until `renew_deadline` after the start of the last successful
//! renewal, on the monotonic clock. A leader that was paused (SIGSTOP, a
//! long GC-like stall) past its lease finds its fence expired the moment it
//! resumes, before its election task has even run, so it cannot write as a
//! second leader.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::control::lease::{Clock, LeaseClaim, LeaseRecord, LeaseSettings, SystemClock};

/// Whether this host may act as leader now. Cheap to clone and check.
#[derive(Debug, Clone)]
pub struct Fence {
    /// Nanoseconds after `epoch` until which writes are allowed; 0: never,
    /// `u64::MAX`: always (no leader election).
    valid_until: Arc<AtomicU64>,
    epoch: Instant,
}

impl Fence {
    /// A fence that is always open (leader election off).
    pub fn open() -> Self {
        Self {
            valid_until: Arc::new(AtomicU64::new(u64::MAX)),
            epoch: Instant::now(),
        }
    }

    /// A fence closed until an election extends it.
    pub fn closed() -> Self {
        Self {
            valid_until: Arc::new(AtomicU64::new(0)),
            epoch: Instant::now(),
        }
    }

    /// Whether this host may act as leader at this instant.
    pub fn is_open(&self) -> bool {
        let until = self.valid_until.load(Ordering::Acquire);
        until == u64::MAX || self.nanos(Instant::now()) < until
    }

    pub(crate) fn extend_to(&self, until: Instant) {
        self.valid_until
            .store(self.nanos(until).max(1), Ordering::Release);
    }

    pub(crate) fn close(&self) {
        self.valid_until.store(0, Ordering::Release);
    }

    fn nanos(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX - 1)
    }
}

/// Lease-based leader election: one Lease, held as its settings say.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    pub lease: LeaseSettings,
}

impl LeaderElection {
    /// Campaigns until `stop` is cancelled, publishing leadership on
    /// `leader` and keeping `fence` open only while the lease is surely
    /// ours. Once leader, keeps renewing; if no renewal succeeded for
    /// `renew_deadline`, leadership is reported lost (false). On stop, a
    /// held lease is released so a standby can take over at once.
    pub async fn run(
        self,
        client: Client,
        leader: watch::Sender<bool>,
        fence: Fence,
        stop: CancellationToken,
    ) {
        let api: Api<Lease> = Api::namespaced(client, &self.lease.namespace);
        let mut last_renewed: Option<Instant> = None;
        let mut seen: LeaseRecord = None;
        loop {
            let attempt = Instant::now();
            // A renewal must finish before the renew deadline; an
            // acquisition within a lease duration.
            let budget = match last_renewed {
                Some(t) => (t + self.lease.renew_deadline).saturating_duration_since(attempt),
                None => self.lease.lease_duration,
            };
            let outcome = tokio::time::timeout(
                budget,
                self.try_acquire_or_renew(&api, &mut seen, &SystemClock),
            )
            .await
            .unwrap_or_else(|_| Err(format!("the lease request took longer than {budget:?}")));
            match outcome {
                Ok(true) => {
                    last_renewed = Some(attempt);
                    fence.extend_to(attempt + self.lease.renew_deadline);
                    if !*leader.borrow() {
                        tracing::info!(identity = %self.lease.identity, lease = %self.lease.lease_name, "became leader");
                    }
                    leader.send_replace(true);
                }
                Ok(false) => {
                    fence.close();
                    if *leader.borrow() {
                        tracing::error!(identity = %self.lease.identity, "leader election lost: another holder took the lease");
                    }
                    last_renewed = None;
                    leader.send_replace(false);
                }
                Err(e) => {
                    tracing::warn!(identity = %self.lease.identity, "leader election: {e}");
                    if last_renewed.is_some_and(|t| t.elapsed() >= self.lease.renew_deadline) {
                        fence.close();
                        tracing::error!(identity = %self.lease.identity, "leader election lost: could not renew the lease within renewDeadline");
                        last_renewed = None;
                        leader.send_replace(false);
                    }
                }
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(self.lease.retry_period) => {}
            }
        }
        if *leader.borrow() {
            fence.close();
            let _ = tokio::time::timeout(
                self.lease.retry_period.max(Duration::from_secs(1)),
                self.release(&api),
            )
            .await;
            leader.send_replace(false);
        }
    }

    /// The lease as this host claims it, on `clock`.
    fn claim<'a>(&'a self, api: &'a Api<Lease>, clock: &'a dyn Clock) -> LeaseClaim<'a> {
        LeaseClaim {
            api,
            name: &self.lease.lease_name,
            identity: &self.lease.identity,
            duration: self.lease.lease_duration,
            clock,
        }
    }

    /// One round: Ok(true) if we hold the lease afterwards. Another
    /// holder's lease is taken only once it has gone `lease_duration`
    /// unchanged on `clock` since `seen` (what this host last read of it)
    /// changed.
    async fn try_acquire_or_renew(
        &self,
        api: &Api<Lease>,
        seen: &mut LeaseRecord,
        clock: &dyn Clock,
    ) -> Result<bool, String> {
        self.claim(api, clock)
            .acquire_or_renew(seen)
            .await
            .map_err(|e| e.to_string())
    }

    async fn release(&self, api: &Api<Lease>) {
        match self.claim(api, &SystemClock).release().await {
            Ok(true) => tracing::info!(identity = %self.lease.identity, "released the lease"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(identity = %self.lease.identity, "could not release the lease: {e}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::control::lease::testing::{LeaseServer, Timeline};

    const LEASE: Duration = Duration::from_secs(10);
    const RETRY: Duration = Duration::from_secs(1);

    fn election(identity: &str, lease_name: &str) -> LeaderElection {
        LeaderElection {
            lease: LeaseSettings {
                namespace: "default".into(),
                lease_name: lease_name.into(),
                identity: identity.into(),
                lease_duration: LEASE,
                renew_deadline: Duration::from_secs(7),
                retry_period: RETRY,
            },
        }
    }

    /// Two hosts whose wall clocks are `skew_a` and `skew_b` seconds off,
    /// each trying every retry period on its own clock: the standby never
    /// takes the lease the leader keeps renewing, and takes it exactly
    /// `LEASE` after it last saw the leader's record change.
    async fn standby_waits_for_the_lease_on_its_own_clock(skew_a: i64, skew_b: i64) {
        let server = LeaseServer::start().await;
        let api = &server.leases;
        let name = format!("le-{}-{}", skew_a + 100_000, skew_b + 100_000);
        let t = Timeline::new();
        let (clock_a, clock_b) = (t.clock(skew_a), t.clock(skew_b));
        let (a, b) = (election("a", &name), election("b", &name));
        let (mut seen_a, mut seen_b): (LeaseRecord, LeaseRecord) = (None, None);
        let mut round = async |a_renews: bool| {
            t.advance(RETRY);
            let a_holds = if a_renews {
                a.try_acquire_or_renew(api, &mut seen_a, &clock_a)
                    .await
                    .unwrap()
            } else {
                false
            };
            let b_holds = b
                .try_acquire_or_renew(api, &mut seen_b, &clock_b)
                .await
                .unwrap();
            (a_holds, b_holds)
        };
        // Three lease durations of renewals: "b" never takes over.
        for _ in 0..30 {
            assert_eq!(round(true).await, (true, false));
        }
        // "a" stops. "b" saw its last renewal in the round it was written.
        for second in 1..LEASE.as_secs() {
            assert_eq!(round(false).await, (false, false), "{second} s after");
        }
        assert_eq!(round(false).await, (false, true), "LEASE after");
        let spec = api.get(&name).await.unwrap().spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.lease_transitions, Some(1));
        assert_eq!(spec.lease_duration_seconds, Some(10));
        // What is written is the taker's wall clock, for people to read.
        let written = SystemTime::from(spec.renew_time.unwrap().0);
        let off = |t: SystemTime| match t.duration_since(clock_b.wall()) {
            Ok(d) => d,
            Err(e) => e.duration(),
        };
        assert!(off(written) < Duration::from_secs(1), "{written:?}");
    }

    #[tokio::test]
    async fn a_standby_an_hour_ahead_or_behind_takes_over_only_once_renewals_stop() {
        standby_waits_for_the_lease_on_its_own_clock(3_600, -3_600).await;
        standby_waits_for_the_lease_on_its_own_clock(-3_600, 3_600).await;
    }

    #[tokio::test]
    async fn a_standby_skewed_by_more_than_the_lease_takes_over_only_once_renewals_stop() {
        standby_waits_for_the_lease_on_its_own_clock(0, 25).await;
        standby_waits_for_the_lease_on_its_own_clock(25, 0).await;
    }

    #[test]
    fn a_fence_is_open_only_until_its_deadline() {
        assert!(Fence::open().is_open());
        let f = Fence::closed();
        assert!(!f.is_open());
        f.extend_to(Instant::now() + Duration::from_secs(60));
        assert!(f.is_open());
        f.extend_to(Instant::now() - Duration::from_millis(1));
        assert!(!f.is_open(), "a fence whose deadline passed is closed");
        f.extend_to(Instant::now() + Duration::from_secs(60));
        f.close();
        assert!(!f.is_open());
    }
}
