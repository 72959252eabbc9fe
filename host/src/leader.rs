//! Leader election through a coordination.k8s.io Lease: only the leader
//! runs workers; a standby takes over once the leader's lease expires
//! (or at once, if the leader released it on shutdown).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

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
    /// How often the leader renews and a standby retries.
    pub retry_period: Duration,
}

impl LeaderElection {
    /// Campaigns until `stop` is cancelled, publishing leadership on
    /// `leader`. Once leader, keeps renewing; if a renewal fails for a whole
    /// lease duration, leadership is reported lost (false). On stop, a held
    /// lease is released so a standby can take over at once.
    pub async fn run(self, client: Client, leader: watch::Sender<bool>, stop: CancellationToken) {
        let api: Api<Lease> = Api::namespaced(client, &self.namespace);
        let mut last_renewed: Option<tokio::time::Instant> = None;
        loop {
            match self.try_acquire_or_renew(&api).await {
                Ok(true) => {
                    last_renewed = Some(tokio::time::Instant::now());
                    if !*leader.borrow() {
                        tracing::info!(identity = %self.identity, lease = %self.lease_name, "became leader");
                    }
                    leader.send_replace(true);
                }
                Ok(false) => {
                    if *leader.borrow() {
                        tracing::error!(identity = %self.identity, "leader election lost: another holder took the lease");
                    }
                    last_renewed = None;
                    leader.send_replace(false);
                }
                Err(e) => {
                    tracing::warn!(identity = %self.identity, "leader election: {e}");
                    if last_renewed.is_some_and(|t| t.elapsed() >= self.renew_deadline) {
                        tracing::error!(identity = %self.identity, "leader election lost: could not renew the lease");
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
            self.release(&api).await;
            leader.send_replace(false);
        }
    }

    /// One round: Ok(true) if we hold the lease afterwards.
    async fn try_acquire_or_renew(&self, api: &Api<Lease>) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let duration_secs = self.lease_duration.as_secs().max(1) as i32;
        let Some(mut lease) = api.get_opt(&self.lease_name).await? else {
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
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == self.identity;
        let expired = spec.renew_time.as_ref().is_none_or(|t| {
            let valid = spec.lease_duration_seconds.unwrap_or(duration_secs).max(0) as i64;
            t.0.as_second() + valid <= now.as_second()
        });
        if !ours && !holder.is_empty() && !expired {
            return Ok(false);
        }
        if !ours {
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
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
            Err(e) => Err(e),
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
