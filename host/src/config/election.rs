//! `leaderElection` and `sharding`: which replica reconciles which keys,
//! held through Leases.

use std::time::Duration;

use serde::Deserialize;

use super::error::FieldProblem;
use super::units::{count, duration, within};
use crate::control::lease::LeaseSettings;
use crate::control::shard::MAX_SHARDS;
use crate::meta::syntax;

/// `leaderElection`: the Lease one replica holds to run the workers (with
/// `sharding`, the Leases of the shards), onto [`LeaseSettings`], whose
/// defaults and ranges these take.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LeaderElectionConfig {
    #[serde(default)]
    pub enabled: bool,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    #[serde(default = "default_lease_name")]
    pub lease_name: String,
    /// How long a lease is valid without renewal; a standby takes over
    /// within this after the leader dies.
    #[serde(default = "default_lease_duration", deserialize_with = "duration")]
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up
    /// leadership and stops its workers; less than `leaseDuration`, so a
    /// leader stops before a standby may take over (client-go's
    /// `renewDeadline`). Default: two thirds of `leaseDuration`.
    #[serde(default, deserialize_with = "duration")]
    pub renew_deadline: Duration,
    /// How often the leader renews (and a standby retries). Default: 2s, at
    /// most half of `renewDeadline`.
    #[serde(default, deserialize_with = "duration")]
    pub retry_period: Duration,
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            namespace: default_namespace(),
            lease_name: default_lease_name(),
            lease_duration: default_lease_duration(),
            renew_deadline: Duration::ZERO,
            retry_period: Duration::ZERO,
        }
        .with_derived_defaults()
    }
}

impl LeaderElectionConfig {
    /// Fills `renewDeadline` and `retryPeriod` left out (zero) from
    /// `leaseDuration`, in the election's default proportions.
    pub(super) fn with_derived_defaults(mut self) -> Self {
        if self.renew_deadline.is_zero() {
            self.renew_deadline = LeaseSettings::default_renew_deadline(self.lease_duration);
        }
        if self.retry_period.is_zero() {
            self.retry_period = LeaseSettings::default_retry_period(self.renew_deadline);
        }
        self
    }

    /// The Lease settings of replica `identity`.
    pub fn lease(&self, identity: &str) -> LeaseSettings {
        LeaseSettings {
            namespace: self.namespace.clone(),
            lease_name: self.lease_name.clone(),
            identity: identity.to_string(),
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
        }
    }
}

/// Keys spread over replicas: each replica reconciles the keys of the shards
/// whose Lease (`<leaderElection.leaseName>-shard-<i>`) it holds. The
/// Leases use `leaderElection`'s namespace and timing, and
/// `leaderElection.enabled` must be true.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ShardingConfig {
    /// How many shards the keys are hashed into (1 to [`MAX_SHARDS`]); more shards
    /// than replicas lets the load rebalance in smaller steps.
    pub shards: u32,
}

pub(super) fn default_namespace() -> String {
    "default".into()
}
fn default_lease_name() -> String {
    "wasmctrl".into()
}
fn default_lease_duration() -> Duration {
    LeaseSettings::DEFAULT_LEASE_DURATION
}

impl LeaderElectionConfig {
    /// Checks `leaderElection` and the `sharding` that relies on it (paths
    /// from the document's root).
    pub(super) fn check(&self, sharding: Option<&ShardingConfig>) -> Result<(), FieldProblem> {
        let check = |field: &str, r: Result<(), String>| r.map_err(|m| FieldProblem::new(field, m));
        check(
            "leaderElection.namespace",
            syntax::namespace(&self.namespace).map_err(|e| e.message),
        )?;
        check(
            "leaderElection.leaseName",
            syntax::dns_subdomain("leaseName", &self.lease_name).map_err(|e| e.message),
        )?;
        check(
            "leaderElection.leaseDuration",
            within(self.lease_duration, LeaseSettings::LEASE_DURATION),
        )?;
        check(
            "leaderElection.renewDeadline",
            within(self.renew_deadline, LeaseSettings::DEADLINE).and_then(|()| {
                (self.renew_deadline < self.lease_duration)
                    .then_some(())
                    .ok_or_else(|| "must be less than leaseDuration".to_string())
            }),
        )?;
        check(
            "leaderElection.retryPeriod",
            within(self.retry_period, LeaseSettings::DEADLINE).and_then(|()| {
                (self.retry_period < self.renew_deadline)
                    .then_some(())
                    .ok_or_else(|| "must be less than renewDeadline".to_string())
            }),
        )?;
        if let Some(sharding) = sharding {
            check(
                "sharding.shards",
                count(u64::from(sharding.shards), 1..=u64::from(MAX_SHARDS)),
            )?;
            if !self.enabled {
                return Err(FieldProblem::new(
                    "sharding",
                    "needs leaderElection.enabled: true (each shard is held through a Lease with its namespace and timing)",
                ));
            }
            // The longest name derived from leaseName must still be a name.
            let longest = format!("{}-shard-{}", self.lease_name, sharding.shards - 1);
            check(
                "leaderElection.leaseName",
                syntax::dns_subdomain("leaseName", &longest)
                    .map_err(|e| format!("too long for sharding: {}", e.message)),
            )?;
        }
        Ok(())
    }
}
