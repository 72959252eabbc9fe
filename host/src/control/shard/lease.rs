//! One shard Lease: take it when free or expired, renew it while ours,
//! release it. Expiry is computed to the microsecond (`renewTime +
//! leaseDurationSeconds`), and the duration written is rounded up to whole
//! seconds, so no replica ever sees a Lease expire earlier than its holder's
//! fence closes.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ObjectMeta, PostParams};

/// Whether a Lease with `spec` is free to take at `now`: nobody holds it,
/// or its holder did not renew it for its `leaseDurationSeconds`.
pub fn lease_expired(spec: &LeaseSpec, now: Timestamp) -> bool {
    if spec
        .holder_identity
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        return true;
    }
    let Some(renewed) = &spec.renew_time else {
        return true;
    };
    let seconds = i64::from(spec.lease_duration_seconds.unwrap_or(0).max(0));
    match renewed.0.checked_add(SignedDuration::from_secs(seconds)) {
        Ok(until) => until <= now,
        Err(_) => false,
    }
}

/// `duration` in whole seconds, rounded up (at least 1).
pub(super) fn whole_seconds(duration: Duration) -> i32 {
    let secs = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
}

/// One Lease as one replica claims it.
pub(super) struct LeaseClaim<'a> {
    pub(super) api: &'a Api<Lease>,
    pub(super) name: &'a str,
    pub(super) identity: &'a str,
    pub(super) duration: Duration,
}

impl LeaseClaim<'_> {
    /// Takes the Lease if it is free or expired, renews it if ours.
    /// Ok(true): ours afterwards; Ok(false): another replica holds it (or
    /// won a race for it).
    pub(super) async fn acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let seconds = whole_seconds(self.duration);
        let Some(mut lease) = self.api.get_opt(self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.to_string()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.to_string()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let ours = spec.holder_identity.as_deref() == Some(self.identity);
        if !ours && !lease_expired(spec, now) {
            return Ok(false);
        }
        if !ours {
            spec.holder_identity = Some(self.identity.to_string());
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.lease_duration_seconds = Some(seconds);
        spec.renew_time = Some(MicroTime(now));
        // The replace carries the resourceVersion read: a concurrent
        // claimant's write makes ours a 409, never a second holder.
        match self
            .api
            .replace(self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up if ours, so another replica can take it at once.
    pub(super) async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(self.name).await? else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.identity) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        self.api
            .replace(self.name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }
}
