//! Leader election through a coordination.k8s.io Lease: only the leader
//! runs workers; a standby takes over once the leader's lease expires
//! (or at once, if the leader released it on shutdown).
//!
//! # Never two leaders
//! client-go's timing: a leader renews every `retry_period`; if it cannot
//! renew for `renew_deadline` it gives up, and a standby may take the lease
//! only after `lease_duration` (> `renew_deadline`) without renewal. Every
//! lease request is bounded in time, so a slow API server cannot hold a
//! renewal past the deadline.
//!
//! On top of that, a [`Fence`] guards every request plugins make: it is
//! valid until `renew_deadline` after the start of the last successful
//! renewal, on the monotonic clock. A leader that was paused (SIGSTOP, a
//! long GC-like stall) past its lease finds its fence expired the moment it
//! resumes, before its election task has even run, so it cannot write as a
//! second leader.

use std::ops::RangeInclusive;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

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

/// A lease record as this host first saw it (holder and renew time), and
/// when.
#[derive(Debug)]
struct Observed {
    record: String,
    at: Instant,
}

/// Lease-based leader election settings.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    pub namespace: String,
    pub lease_name: String,
    /// Who we are (unique per host process).
    pub identity: String,
    /// A lease not renewed for this long is free to take.
    pub lease_duration: Duration,
    /// A leader that could not renew for this long gives up (less than
    /// `lease_duration`, so it stops before anyone may take over).
    pub renew_deadline: Duration,
    /// How often the leader renews (and a standby retries).
    pub retry_period: Duration,
}

impl LeaderElection {
    /// client-go's `leaseDuration`.
    pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
    /// client-go's `retryPeriod`.
    pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
    /// The values `lease_duration` may take.
    pub const LEASE_DURATION: RangeInclusive<Duration> =
        Duration::from_secs(1)..=Duration::from_secs(3600);
    /// The values `renew_deadline` and `retry_period` may take (each also
    /// less than the one before it).
    pub const DEADLINE: RangeInclusive<Duration> =
        Duration::from_millis(1)..=Duration::from_secs(3600);

    /// The renew deadline for `lease_duration` when none is chosen: two
    /// thirds of it, client-go's proportion (10 s of 15 s).
    pub fn default_renew_deadline(lease_duration: Duration) -> Duration {
        lease_duration * 2 / 3
    }

    /// The retry period for `renew_deadline` when none is chosen:
    /// [`Self::DEFAULT_RETRY_PERIOD`], at most half of it.
    pub fn default_retry_period(renew_deadline: Duration) -> Duration {
        Self::DEFAULT_RETRY_PERIOD.min(renew_deadline / 2)
    }

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
        let api: Api<Lease> = Api::namespaced(client, &self.namespace);
        let mut last_renewed: Option<Instant> = None;
        let mut observed: Option<Observed> = None;
        loop {
            let attempt = Instant::now();
            // A renewal must finish before the renew deadline; an
            // acquisition within a lease duration.
            let budget = match last_renewed {
                Some(t) => (t + self.renew_deadline).saturating_duration_since(attempt),
                None => self.lease_duration,
            };
            let outcome =
                tokio::time::timeout(budget, self.try_acquire_or_renew(&api, &mut observed))
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!("the lease request took longer than {budget:?}"))
                    });
            match outcome {
                Ok(true) => {
                    last_renewed = Some(attempt);
                    fence.extend_to(attempt + self.renew_deadline);
                    if !*leader.borrow() {
                        tracing::info!(identity = %self.identity, lease = %self.lease_name, "became leader");
                    }
                    leader.send_replace(true);
                }
                Ok(false) => {
                    fence.close();
                    if *leader.borrow() {
                        tracing::error!(identity = %self.identity, "leader election lost: another holder took the lease");
                    }
                    last_renewed = None;
                    leader.send_replace(false);
                }
                Err(e) => {
                    tracing::warn!(identity = %self.identity, "leader election: {e}");
                    if last_renewed.is_some_and(|t| t.elapsed() >= self.renew_deadline) {
                        fence.close();
                        tracing::error!(identity = %self.identity, "leader election lost: could not renew the lease within renewDeadline");
                        last_renewed = None;
                        leader.send_replace(false);
                    }
                }
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(self.retry_period) => {}
            }
        }
        if *leader.borrow() {
            fence.close();
            let _ = tokio::time::timeout(
                self.retry_period.max(Duration::from_secs(1)),
                self.release(&api),
            )
            .await;
            leader.send_replace(false);
        }
    }

    /// One round: Ok(true) if we hold the lease afterwards.
    ///
    /// Another holder's lease is judged expired on this host's own
    /// monotonic clock, as client-go does: only after `lease_duration` has
    /// passed since this host first saw the holder's current record
    /// unchanged. Comparing the holder's `renewTime` with our wall clock
    /// would let clock skew (or second-granular arithmetic) end a lease
    /// early, while its holder still writes.
    async fn try_acquire_or_renew(
        &self,
        api: &Api<Lease>,
        observed: &mut Option<Observed>,
    ) -> Result<bool, String> {
        let now = Timestamp::now();
        let duration_secs = i32::try_from(self.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let Some(mut lease) = api
            .get_opt(&self.lease_name)
            .await
            .map_err(|e| e.to_string())?
        else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.lease_name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(duration_secs),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e.to_string()),
            };
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == self.identity;
        let record = format!(
            "{holder}@{:?}",
            spec.renew_time.as_ref().map(|t| t.0.as_microsecond())
        );
        let seen_at = match observed {
            Some(o) if o.record == record => o.at,
            _ => {
                *observed = Some(Observed {
                    record,
                    at: Instant::now(),
                });
                Instant::now()
            }
        };
        let valid = Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(duration_secs)).unwrap_or(0),
        )
        .max(self.lease_duration);
        let expired = spec.renew_time.is_none() || seen_at.elapsed() >= valid;
        if !ours && !holder.is_empty() && !expired {
            return Ok(false);
        }
        if !ours {
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.lease_duration_seconds = Some(duration_secs);
        spec.renew_time = Some(MicroTime(now));
        // The replace carries the resourceVersion we read: a concurrent
        // candidate's write makes ours a 409 instead of a double leader.
        match api
            .replace(&self.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn release(&self, api: &Api<Lease>) {
        let Ok(Some(mut lease)) = api.get_opt(&self.lease_name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(&self.identity) {
            return;
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        if let Err(e) = api
            .replace(&self.lease_name, &PostParams::default(), &lease)
            .await
        {
            tracing::warn!(identity = %self.identity, "could not release the lease: {e}");
        } else {
            tracing::info!(identity = %self.identity, "released the lease");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
