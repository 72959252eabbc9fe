//! coordination.k8s.io Leases held the way client-go's leader election
//! holds them: the one helper behind leader election (`leader.rs`) and the
//! shard Leases of sharding (`shard/`).
//!
//! # When a Lease expires
//! Every replica judges expiry on its own monotonic clock and nothing else.
//! It keeps, per Lease, the record it last read and the instant on its own
//! clock when it saw that record change ([`Observed`]); another holder's
//! Lease is expired once `leaseDuration` has passed on that clock since
//! then. The holder's `renewTime` and `acquireTime` are written from the
//! holder's wall clock for people and other clients to read, but never
//! compared with this replica's clock: clock skew between replicas, of any
//! size, cannot end a Lease early (while its holder still renews) or keep
//! a dead holder's Lease alive. The price is that a replica that has just
//! started, or just begun to look at a Lease, waits a full `leaseDuration`
//! from its first read before taking it.
//!
//! The clock is a [`Clock`], so tests move it by hand and give replicas
//! wall clocks hours apart.

use std::ops::RangeInclusive;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};

/// Which Lease a replica holds and how long, in client-go's terms: the
/// holder renews every `retry_period`; one that cannot renew for
/// `renew_deadline` gives up; another holder's Lease not seen renewed for
/// `lease_duration` is free to take. Leader election holds the Lease
/// `lease_name`; sharding holds `<lease_name>-shard-<i>` and
/// `<lease_name>-members`.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    pub namespace: String,
    pub lease_name: String,
    /// Who holds (unique per host process).
    pub identity: String,
    pub lease_duration: Duration,
    /// Less than `lease_duration`, so a holder stops before anyone may
    /// take over.
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaseSettings {
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
}

/// A replica's two clocks.
pub trait Clock: Send + Sync {
    /// The monotonic clock expiry is judged on: when a record was seen to
    /// change, and whether a Lease's duration has passed since.
    fn now(&self) -> Instant;

    /// The wall clock written into a Lease (`acquireTime`, `renewTime`)
    /// and the members' heartbeats, for people and other clients; never
    /// compared with another replica's.
    fn wall(&self) -> SystemTime;
}

/// The process's own clocks.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A record (a Lease's spec, a member's heartbeat) as this replica last
/// read it, and the instant on its own clock when it saw it change.
#[derive(Debug, Clone)]
pub struct Observed<R> {
    record: R,
    since: Instant,
}

impl<R: PartialEq> Observed<R> {
    /// `record`, first read at `now`.
    pub fn new(record: R, now: Instant) -> Self {
        Self { record, since: now }
    }

    /// Notes `record`, read at `now`: the instant of the last change stays
    /// as long as the record is equal to the one before.
    pub fn note(&mut self, record: R, now: Instant) {
        if self.record != record {
            *self = Self::new(record, now);
        }
    }

    /// [`Observed::note`] into `slot`, which holds nothing before the
    /// first read.
    pub fn note_in(slot: &mut Option<Self>, record: R, now: Instant) {
        match slot {
            Some(seen) => seen.note(record, now),
            None => *slot = Some(Self::new(record, now)),
        }
    }

    /// The record last read.
    pub fn record(&self) -> &R {
        &self.record
    }

    /// Whether `duration` has passed at `now` since the record changed.
    pub fn unchanged_for(&self, duration: Duration, now: Instant) -> bool {
        now.saturating_duration_since(self.since) >= duration
    }

    /// When the record was seen to change.
    pub fn since(&self) -> Instant {
        self.since
    }
}

/// What a replica knows of one Lease: its record as last read, or nothing
/// before the first read.
pub type LeaseRecord = Option<Observed<LeaseSpec>>;

/// Whether the Lease whose record is `seen` may be taken at `now`: nobody
/// holds it (no holder, or no `renewTime`: released), or its record has not
/// changed for its `leaseDurationSeconds` (at most the longest a replica
/// writes, [`LeaseSettings::LEASE_DURATION`]'s end, so that one write of a
/// huge duration cannot stall the election for decades), and at least
/// `at_least`, since this replica saw it change. A Lease never read is not
/// free: it has to be read first.
pub fn is_free(seen: &LeaseRecord, at_least: Duration, now: Instant) -> bool {
    let Some(seen) = seen else {
        return false;
    };
    let spec = seen.record();
    if spec
        .holder_identity
        .as_deref()
        .unwrap_or_default()
        .is_empty()
        || spec.renew_time.is_none()
    {
        return true;
    }
    let written = u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0);
    let written = Duration::from_secs(written).min(*LeaseSettings::LEASE_DURATION.end());
    seen.unchanged_for(written.max(at_least), now)
}

/// `duration` in whole seconds, rounded up (at least 1), as a Lease's
/// `leaseDurationSeconds` holds it: never shorter than the holder's own.
pub fn whole_seconds(duration: Duration) -> i32 {
    let secs = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
}

/// The wall clock's now as a `MicroTime`, in whole microseconds as the API
/// server stores it.
fn micro_time(clock: &dyn Clock) -> MicroTime {
    let now = Timestamp::try_from(clock.wall()).unwrap_or(Timestamp::UNIX_EPOCH);
    MicroTime(Timestamp::from_microsecond(now.as_microsecond()).unwrap_or(now))
}

/// One Lease as one replica claims it.
pub struct LeaseClaim<'a> {
    /// The Leases of the namespace the Lease is in.
    pub api: &'a Api<Lease>,
    /// The Lease's name.
    pub name: &'a str,
    /// This replica (unique per process), written as the holder.
    pub identity: &'a str,
    /// How long the Lease may go unrenewed before another replica takes
    /// it, written rounded up to whole seconds.
    pub duration: Duration,
    /// This replica's clocks: expiry is judged on `now`, `wall` is written.
    pub clock: &'a dyn Clock,
}

impl LeaseClaim<'_> {
    /// Reads the Lease and notes its record in `seen` (an absent Lease is
    /// noted as an empty record: free).
    pub async fn observe(&self, seen: &mut LeaseRecord) -> Result<(), kube::Error> {
        let lease = self.api.get_opt(self.name).await?;
        let spec = lease.and_then(|l| l.spec).unwrap_or_default();
        Observed::note_in(seen, spec, self.clock.now());
        Ok(())
    }

    /// Takes the Lease if it is free ([`is_free`], judged on the record
    /// just read and what `seen` held before), renews it if ours; notes
    /// what was read and then written in `seen`. Ok(true): ours
    /// afterwards; Ok(false): another replica holds it, or won a race
    /// for it.
    pub async fn acquire_or_renew(&self, seen: &mut LeaseRecord) -> Result<bool, kube::Error> {
        let seconds = whole_seconds(self.duration);
        let Some(mut lease) = self.api.get_opt(self.name).await? else {
            let now = micro_time(self.clock);
            let spec = LeaseSpec {
                holder_identity: Some(self.identity.to_string()),
                lease_duration_seconds: Some(seconds),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            };
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.to_string()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec.clone()),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => {
                    Observed::note_in(seen, spec, self.clock.now());
                    Ok(true)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        Observed::note_in(seen, spec.clone(), self.clock.now());
        let ours = spec.holder_identity.as_deref() == Some(self.identity);
        if !ours && !is_free(seen, self.duration, self.clock.now()) {
            return Ok(false);
        }
        let now = micro_time(self.clock);
        if !ours {
            spec.holder_identity = Some(self.identity.to_string());
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.lease_duration_seconds = Some(seconds);
        spec.renew_time = Some(now);
        let written = spec.clone();
        // The replace carries the resourceVersion read: a concurrent
        // claimant's write makes ours a 409, never a second holder.
        match self
            .api
            .replace(self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                Observed::note_in(seen, written, self.clock.now());
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up if ours (no holder, no `renewTime`), so another
    /// replica can take it at once. Ok(true) if it was ours and is
    /// released.
    pub async fn release(&self) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.api.get_opt(self.name).await? else {
            return Ok(false);
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(false);
        };
        if spec.holder_identity.as_deref() != Some(self.identity) {
            return Ok(false);
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        self.api
            .replace(self.name, &PostParams::default(), &lease)
            .await
            .map(|_| true)
    }
}

/// A clock tests move by hand, for replicas whose wall clocks disagree,
/// and an API server to hold their Leases.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant, SystemTime};

    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::Api;

    use super::Clock;

    /// An embedded API server holding Leases, alive as long as this is.
    pub(crate) struct LeaseServer {
        /// The Leases of namespace `default`.
        pub(crate) leases: Api<Lease>,
        _server: wasmctrl_apiserver::ApiServer,
    }

    impl LeaseServer {
        pub(crate) async fn start() -> Self {
            let server =
                wasmctrl_apiserver::ApiServer::start(wasmctrl_apiserver::Config::default())
                    .await
                    .unwrap();
            let client = wasmctrl_testkit::client::client_for(&server.kubeconfig()).await;
            Self {
                leases: Api::namespaced(client, "default"),
                _server: server,
            }
        }
    }

    /// Time as it passes for every replica of a test: moved only by
    /// [`Timeline::advance`].
    #[derive(Clone)]
    pub(crate) struct Timeline(Arc<Mutex<Duration>>);

    impl Timeline {
        pub(crate) fn new() -> Self {
            Self(Arc::new(Mutex::new(Duration::ZERO)))
        }

        pub(crate) fn advance(&self, by: Duration) {
            *self.0.lock().unwrap() += by;
        }

        /// A replica's clocks on this timeline: a monotonic clock of its
        /// own (its instants mean nothing to another replica), and a wall
        /// clock `skew_secs` ahead of the real one (behind if negative).
        pub(crate) fn clock(&self, skew_secs: i64) -> ManualClock {
            let now = SystemTime::now();
            let skew = Duration::from_secs(skew_secs.unsigned_abs());
            ManualClock {
                timeline: self.clone(),
                start: Instant::now(),
                wall_start: if skew_secs >= 0 {
                    now + skew
                } else {
                    now - skew
                },
            }
        }

        fn elapsed(&self) -> Duration {
            *self.0.lock().unwrap()
        }
    }

    /// One replica's clocks on a [`Timeline`].
    pub(crate) struct ManualClock {
        timeline: Timeline,
        start: Instant,
        wall_start: SystemTime,
    }

    impl Clock for ManualClock {
        fn now(&self) -> Instant {
            self.start + self.timeline.elapsed()
        }

        fn wall(&self) -> SystemTime {
            self.wall_start + self.timeline.elapsed()
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::SignedDuration;

    use super::testing::Timeline;
    use super::*;

    fn held_by(holder: &str, renewed: Timestamp, seconds: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            renew_time: Some(MicroTime(renewed)),
            lease_duration_seconds: Some(seconds),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn a_lease_expires_its_duration_after_its_record_was_seen_to_change() {
        let t = Timeline::new();
        let clock = t.clock(0);
        let renewed: Timestamp = "2025-01-01T00:00:10.900Z".parse().unwrap();
        let mut seen: LeaseRecord = None;
        assert!(
            !is_free(&seen, Duration::from_secs(2), clock.now()),
            "unread"
        );
        Observed::note_in(&mut seen, held_by("a", renewed, 2), clock.now());
        t.advance(Duration::from_millis(1_999));
        // Read again unchanged: the instant of the change stays.
        Observed::note_in(&mut seen, held_by("a", renewed, 2), clock.now());
        assert!(!is_free(&seen, Duration::from_secs(2), clock.now()));
        t.advance(Duration::from_millis(1));
        assert!(is_free(&seen, Duration::from_secs(2), clock.now()));
        // A renewal restarts the count, whatever time it names.
        let earlier = renewed - SignedDuration::from_hours(5);
        Observed::note_in(&mut seen, held_by("a", earlier, 2), clock.now());
        assert!(!is_free(&seen, Duration::from_secs(2), clock.now()));
        t.advance(Duration::from_secs(2));
        assert!(is_free(&seen, Duration::from_secs(2), clock.now()));
    }

    #[test]
    fn the_longer_of_the_written_and_own_duration_counts() {
        let t = Timeline::new();
        let clock = t.clock(0);
        let mut seen: LeaseRecord = None;
        Observed::note_in(
            &mut seen,
            held_by("a", Timestamp::UNIX_EPOCH, 1),
            clock.now(),
        );
        t.advance(Duration::from_secs(1));
        assert!(!is_free(&seen, Duration::from_secs(3), clock.now()));
        t.advance(Duration::from_secs(2));
        assert!(is_free(&seen, Duration::from_secs(3), clock.now()));
        Observed::note_in(
            &mut seen,
            held_by("b", Timestamp::UNIX_EPOCH, 10),
            clock.now(),
        );
        t.advance(Duration::from_secs(3));
        assert!(!is_free(&seen, Duration::from_secs(3), clock.now()));
    }

    #[test]
    fn a_written_duration_counts_up_to_the_longest_a_replica_writes() {
        let t = Timeline::new();
        let clock = t.clock(0);
        let mut seen: LeaseRecord = None;
        Observed::note_in(
            &mut seen,
            held_by("x", Timestamp::UNIX_EPOCH, i32::MAX),
            clock.now(),
        );
        let longest = *LeaseSettings::LEASE_DURATION.end();
        t.advance(longest - Duration::from_secs(1));
        assert!(!is_free(&seen, Duration::from_secs(15), clock.now()));
        t.advance(Duration::from_secs(1));
        assert!(is_free(&seen, Duration::from_secs(15), clock.now()));
    }

    #[test]
    fn a_released_lease_is_free_at_once() {
        let clock = Timeline::new().clock(0);
        let mut seen: LeaseRecord = None;
        let released = LeaseSpec {
            holder_identity: None,
            ..held_by("a", Timestamp::UNIX_EPOCH, 15)
        };
        Observed::note_in(&mut seen, released, clock.now());
        assert!(is_free(&seen, Duration::from_secs(15), clock.now()));
        let no_renewal = LeaseSpec {
            renew_time: None,
            ..held_by("a", Timestamp::UNIX_EPOCH, 15)
        };
        Observed::note_in(&mut seen, no_renewal, clock.now());
        assert!(is_free(&seen, Duration::from_secs(15), clock.now()));
    }

    #[test]
    fn durations_are_written_in_whole_seconds_rounded_up() {
        assert_eq!(whole_seconds(Duration::from_millis(1_500)), 2);
        assert_eq!(whole_seconds(Duration::from_secs(15)), 15);
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::ZERO), 1);
    }

    #[test]
    fn skewed_clocks_share_the_timeline_but_not_the_wall() {
        let t = Timeline::new();
        let (ahead, behind) = (t.clock(3_600), t.clock(-3_600));
        let apart = ahead.wall().duration_since(behind.wall()).unwrap();
        assert!(apart >= Duration::from_secs(7_199), "{apart:?}");
        let (a0, b0) = (ahead.now(), behind.now());
        t.advance(Duration::from_secs(5));
        assert_eq!(ahead.now() - a0, Duration::from_secs(5));
        assert_eq!(behind.now() - b0, Duration::from_secs(5));
    }
}
