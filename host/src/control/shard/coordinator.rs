//! The loop that keeps this replica's fair share of shard Leases: every
//! `retryPeriod` it renews the Leases it holds, heartbeats in the members
//! Lease, reads the other shard Leases (expiry is judged from when this
//! replica saw a record change, so it keeps looking), releases drained
//! shards, gives away extras and takes free ones.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use futures::future::join_all;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::Shards;
use super::members::{Heartbeats, Membership};
use crate::control::lease::{Clock, LeaseClaim, LeaseRecord, LeaseSettings, SystemClock, is_free};

/// Told the shards just taken, so their keys are enqueued.
pub type AcquiredShards = Arc<dyn Fn(&[u32]) + Send + Sync>;

/// How many shards the replica `me` should hold among the `live` replicas
/// (`me` counts even if missing): `shards / M`, one more for the first
/// `shards % M` replicas sorted by identity.
pub fn fair_share(shards: u32, live: &[String], me: &str) -> usize {
    let mut members: Vec<&str> = live.iter().map(String::as_str).collect();
    members.push(me);
    members.sort_unstable();
    members.dedup();
    let m = members.len() as u32;
    let rank = members.iter().position(|id| *id == me).unwrap_or(0) as u32;
    (shards / m + u32::from(rank < shards % m)) as usize
}

/// Where the shard Leases are and how they are held (the host config's
/// `leaderElection` settings): shard `i`'s Lease is
/// `<lease_name>-shard-<i>`, the members Lease `<lease_name>-members`.
#[derive(Debug, Clone)]
pub struct ShardCoordinator {
    pub lease: LeaseSettings,
}

impl ShardCoordinator {
    /// The name of shard `shard`'s Lease.
    pub fn shard_lease(lease_name: &str, shard: u32) -> String {
        format!("{lease_name}-shard-{shard}")
    }

    /// The name of the members Lease.
    pub fn members_lease(lease_name: &str) -> String {
        format!("{lease_name}-members")
    }

    /// Keeps this replica's share of `shards` until `stop` is cancelled,
    /// calling `acquired` with each batch of shards taken. On stop, every
    /// shard still held stops taking keys, its in-flight reconciles get up to
    /// `renewDeadline` to finish, and its Lease is released; the replica
    /// leaves the members Lease so the others take over at once.
    pub async fn run(
        self,
        client: Client,
        shards: Arc<Shards>,
        acquired: AcquiredShards,
        stop: CancellationToken,
    ) {
        let api: Api<Lease> = Api::namespaced(client, &self.lease.namespace);
        let clock = SystemClock;
        let mut round = Round {
            coordinator: &self,
            api: &api,
            clock: &clock,
            names: (0..shards.count())
                .map(|i| Self::shard_lease(&self.lease.lease_name, i))
                .collect(),
            shards: &shards,
            renewed: vec![None; shards.count() as usize],
            seen: vec![None; shards.count() as usize],
            live: vec![self.lease.identity.clone()],
        };
        let members_name = Self::members_lease(&self.lease.lease_name);
        let mut membership = Membership {
            api: &api,
            name: &members_name,
            identity: &self.lease.identity,
            lifetime: self.lease.lease_duration,
            clock: &clock,
            heartbeats: Heartbeats::default(),
        };
        let mut ticker = tokio::time::interval(self.lease.retry_period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = stop.cancelled() => break,
                _ = ticker.tick() => {}
            }
            round.renew().await;
            match tokio::time::timeout(self.lease.retry_period, membership.heartbeat()).await {
                Ok(Ok(live)) => round.live = live,
                Ok(Err(e)) => {
                    tracing::warn!(identity = %self.lease.identity, "sharding: heartbeat failed: {e}")
                }
                Err(_) => {
                    tracing::warn!(identity = %self.lease.identity, "sharding: heartbeat took longer than retryPeriod")
                }
            }
            round.observe().await;
            round.release_drained().await;
            let taken = round.rebalance().await;
            if !taken.is_empty() {
                acquired(&taken);
            }
        }
        round.release_all().await;
        let _ = tokio::time::timeout(self.lease.retry_period, membership.leave()).await;
    }
}

/// The coordinator's state between rounds.
struct Round<'a> {
    coordinator: &'a ShardCoordinator,
    api: &'a Api<Lease>,
    clock: &'a dyn Clock,
    names: Vec<String>,
    shards: &'a Arc<Shards>,
    /// Per shard: the start of its last successful renewal (while held).
    renewed: Vec<Option<Instant>>,
    /// Per shard: its Lease as this replica last read it.
    seen: Vec<LeaseRecord>,
    /// The live replicas at the last heartbeat.
    live: Vec<String>,
}

impl Round<'_> {
    fn claim(&self, shard: u32) -> LeaseClaim<'_> {
        LeaseClaim {
            api: self.api,
            name: &self.names[shard as usize],
            identity: &self.coordinator.lease.identity,
            duration: self.coordinator.lease.lease_duration,
            clock: self.clock,
        }
    }

    /// Renews every held or draining shard at once. A renewal must finish
    /// within `renewDeadline` of the last successful one; a shard whose
    /// Lease another replica holds, or that could not be renewed in time,
    /// is lost.
    async fn renew(&mut self) {
        let c = self.coordinator;
        let held = self.shards.tenured();
        let mut seen = std::mem::take(&mut self.seen);
        let attempts = seen.iter_mut().enumerate().filter_map(|(s, seen)| {
            let s = s as u32;
            if !held.contains(&s) {
                return None;
            }
            let attempt = Instant::now();
            let last = self.renewed[s as usize].unwrap_or(attempt);
            let budget = (last + c.lease.renew_deadline).saturating_duration_since(attempt);
            let claim = self.claim(s);
            Some(async move {
                let outcome = tokio::time::timeout(budget, claim.acquire_or_renew(seen)).await;
                (s, attempt, last, outcome)
            })
        });
        let outcomes = join_all(attempts).await;
        self.seen = seen;
        for (s, attempt, last, outcome) in outcomes {
            match outcome {
                Ok(Ok(true)) => {
                    self.renewed[s as usize] = Some(attempt);
                    self.shards.extend(s, attempt + c.lease.renew_deadline);
                }
                Ok(Ok(false)) => {
                    tracing::error!(identity = %c.lease.identity, shard = s, "shard lost: another replica holds its Lease");
                    self.lose(s);
                }
                Ok(Err(e)) if last.elapsed() < c.lease.renew_deadline => {
                    tracing::warn!(identity = %c.lease.identity, shard = s, "cannot renew the shard's Lease (retrying): {e}");
                }
                Err(_) if last.elapsed() < c.lease.renew_deadline => {
                    tracing::warn!(identity = %c.lease.identity, shard = s, "renewing the shard's Lease is slow (retrying)");
                }
                _ => {
                    tracing::error!(identity = %c.lease.identity, shard = s, "shard lost: its Lease was not renewed within renewDeadline");
                    self.lose(s);
                }
            }
        }
    }

    /// Reads every shard Lease this replica does not hold, so that it has
    /// seen a holder's last renewal within a round of it (a Lease is
    /// expired `leaseDuration` after this replica saw its record change).
    /// Unread ones (a request failed or was slow) keep their last reading.
    async fn observe(&mut self) {
        let c = self.coordinator;
        let tenured = self.shards.tenured();
        let mut seen = std::mem::take(&mut self.seen);
        let reads = seen.iter_mut().enumerate().filter_map(|(s, seen)| {
            let s = s as u32;
            if tenured.contains(&s) {
                return None;
            }
            let claim = self.claim(s);
            Some(async move {
                let read = tokio::time::timeout(c.lease.retry_period, claim.observe(seen)).await;
                if !matches!(read, Ok(Ok(()))) {
                    tracing::debug!(identity = %c.lease.identity, shard = s, "could not read the shard's Lease this round");
                }
            })
        });
        join_all(reads).await;
        self.seen = seen;
    }

    fn lose(&mut self, shard: u32) {
        self.shards.end(shard, true);
        self.renewed[shard as usize] = None;
    }

    /// Releases the Leases of draining shards whose reconciles finished.
    async fn release_drained(&mut self) {
        for s in self.shards.status().draining {
            if self.shards.in_flight(s) == 0 {
                self.release(s).await;
            }
        }
    }

    /// Ends the tenure (its fence closes first: nothing of ours may run
    /// once another replica can take the Lease), then gives up the Lease.
    async fn release(&mut self, shard: u32) {
        let c = self.coordinator;
        self.shards.end(shard, false);
        self.renewed[shard as usize] = None;
        match tokio::time::timeout(c.lease.retry_period, self.claim(shard).release()).await {
            Ok(Ok(_)) => tracing::info!(identity = %c.lease.identity, shard, "released the shard"),
            Ok(Err(e)) => {
                tracing::warn!(identity = %c.lease.identity, shard, "could not release the shard's Lease (it expires instead): {e}")
            }
            Err(_) => {
                tracing::warn!(identity = %c.lease.identity, shard, "releasing the shard's Lease timed out (it expires instead)")
            }
        }
    }

    /// Moves toward the fair share: extras (highest first) stop taking keys
    /// and drain; missing ones are taken from free or expired Leases,
    /// starting at an offset by rank so replicas do not all race for the
    /// same shard. Returns the shards taken.
    async fn rebalance(&mut self) -> Vec<u32> {
        let c = self.coordinator;
        let count = self.shards.count();
        let target = fair_share(count, &self.live, &c.lease.identity);
        let held = self.shards.status().held;
        if held.len() > target {
            for &s in held.iter().rev().take(held.len() - target) {
                tracing::info!(identity = %c.lease.identity, shard = s, target, "giving the shard away: draining it");
                self.shards.stop_accepting(s);
            }
            return Vec::new();
        }
        let mut taken = Vec::new();
        if held.len() == target {
            return taken;
        }
        let tenured: BTreeSet<u32> = self.shards.tenured().into_iter().collect();
        let mut sorted = self.live.clone();
        sorted.sort_unstable();
        let rank = sorted
            .iter()
            .position(|id| *id == c.lease.identity)
            .unwrap_or(0);
        let start = (rank as u64 * u64::from(count) / sorted.len().max(1) as u64) as u32;
        for k in 0..count {
            if held.len() + taken.len() >= target {
                break;
            }
            let s = (start + k) % count;
            // Held by another replica and not expired, as just read.
            if tenured.contains(&s)
                || !is_free(
                    &self.seen[s as usize],
                    c.lease.lease_duration,
                    self.clock.now(),
                )
            {
                continue;
            }
            let attempt = Instant::now();
            let mut seen = self.seen[s as usize].take();
            let outcome = tokio::time::timeout(
                c.lease.lease_duration,
                self.claim(s).acquire_or_renew(&mut seen),
            )
            .await;
            self.seen[s as usize] = seen;
            match outcome {
                Ok(Ok(true)) => {
                    self.shards.take(s, attempt + c.lease.renew_deadline);
                    self.renewed[s as usize] = Some(attempt);
                    taken.push(s);
                }
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(identity = %c.lease.identity, shard = s, "cannot take the shard's Lease: {e}")
                }
                Err(_) => {
                    tracing::warn!(identity = %c.lease.identity, shard = s, "taking the shard's Lease timed out")
                }
            }
        }
        if !taken.is_empty() {
            tracing::info!(identity = %c.lease.identity, shards = ?taken, target, "took shards");
        }
        taken
    }

    /// On stop: no shard takes keys any more; in-flight reconciles get up
    /// to `renewDeadline` (their fences close then anyway); then every
    /// Lease is released.
    async fn release_all(&mut self) {
        let held = self.shards.tenured();
        for &s in &held {
            self.shards.stop_accepting(s);
        }
        self.shards
            .wait_idle(&held, self.coordinator.lease.renew_deadline)
            .await;
        for s in held {
            self.release(s).await;
        }
    }
}
