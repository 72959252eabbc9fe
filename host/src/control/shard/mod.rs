//! Sharding: the keys of every plugin spread over the replicas of a host,
//! each key reconciled by one replica at a time.
//!
//! # Assignment
//! A key belongs to shard `fnv1a64("namespace/name") % shards` (`name` for
//! cluster-scoped objects): stable across processes, versions and
//! platforms, so every replica agrees without talking. A replica reconciles
//! the keys of the shards whose Lease (`<leaseName>-shard-<i>`) it holds;
//! its informers still see every object (the store is shared by plugins),
//! only its queues and workers are limited to its shards.
//!
//! # Fair share
//! Replicas announce themselves in one Lease, `<leaseName>-members`, whose
//! annotation `wasmctrl.dev/members` maps each replica to its last
//! heartbeat (every `retryPeriod`); a replica whose heartbeat another has
//! not seen change for `leaseDuration` is gone. With `M` live replicas
//! sorted by identity, the one of rank `r` should hold `shards / M` shards,
//! one more if `r < shards % M`: the shares sum to `shards` from any common
//! view. A replica under its share takes free or expired shard Leases; one
//! over it releases its extras (highest first), so a new replica gets
//! shards within a few retry periods. Every round a replica reads every
//! shard Lease, renewing its own and observing the others, so it sees a
//! dead replica's last renewal within a retry period, and takes its shards
//! once they expire: within `leaseDuration` plus two retry periods of that
//! renewal.
//!
//! # Never two replicas on a key
//! - A shard to give away first stops taking keys ([`Shards::admits`] and
//!   the reconcile gate refuse them), then waits until the reconciles of
//!   its keys already running have finished, and only then is its Lease
//!   released (while waiting, it keeps being renewed).
//! - Each tenure of a shard has a [`Fence`] (as `leader.rs`): open until
//!   `renewDeadline` after the start of the last successful renewal, on the
//!   monotonic clock; every request a plugin makes while reconciling a key
//!   of the shard checks it ([`request_allowed`]). A replica that stalls
//!   past its Lease finds the fence closed the moment it resumes. A lost
//!   shard also cancels its in-flight reconciles.
//! - Another replica may take a Lease only once it has seen the Lease's
//!   record unchanged for `leaseDuration` on its own clock
//!   (`control::lease`). It read that record after the holder's renewal
//!   began, so this is later than the holder's fence closes
//!   (`renewDeadline` after that beginning). The replicas' wall clocks may
//!   disagree by any amount; only their rates must agree to well within
//!   `leaseDuration − renewDeadline`.

mod coordinator;
mod members;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::control::leader::Fence;
use crate::{Action, ObjectKey, ReconcileError, ReconcileRequest};

pub use coordinator::{AcquiredShards, ShardCoordinator, fair_share};
pub use members::MEMBERS_ANNOTATION;

/// The shard of `key` among `shards`: FNV-1a (64 bit) of `namespace/name`
/// (`name` when cluster-scoped), modulo `shards`.
pub fn shard_of(key: &ObjectKey, shards: u32) -> u32 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(PRIME);
        }
    };
    if let Some(ns) = &key.namespace {
        feed(ns.as_bytes());
        feed(b"/");
    }
    feed(key.name.as_bytes());
    (hash % u64::from(shards.max(1))) as u32
}

/// The shards this replica holds, as `/plugins` and `/readyz` show them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardStatus {
    /// How many shards there are.
    pub total: u32,
    /// Shards whose keys this replica reconciles.
    pub held: Vec<u32>,
    /// Shards being given away: no new keys, in-flight reconciles finishing.
    pub draining: Vec<u32>,
}

/// One tenure of a shard by this replica.
struct Tenure {
    /// Tells tenures apart: a ticket counts only in the one it began in.
    id: u64,
    fence: Fence,
    /// Whether new keys of the shard may start (false while draining).
    accepting: bool,
    /// Reconciles of the shard's keys running now.
    in_flight: usize,
    /// Cancelled when the shard is lost (not when it is released: a release
    /// waits for in-flight reconciles instead).
    lost: CancellationToken,
}

/// Which shards this replica holds and what runs in each: the gate every
/// reconcile passes, shared by the plugins and the [`ShardCoordinator`].
pub struct Shards {
    count: u32,
    tenures: Mutex<Vec<Option<Tenure>>>,
    next_tenure: std::sync::atomic::AtomicU64,
    /// Woken whenever a reconcile ends (the coordinator waits for drains).
    idle: tokio::sync::Notify,
}

tokio::task_local! {
    /// The fence of the shard of the key being reconciled on this task.
    static RECONCILE_FENCE: Fence;
}

/// Whether a plugin's request may be sent now: false only while a
/// reconcile of a sharded key runs whose shard this replica no longer
/// surely holds. Checked by the host API before each request.
pub fn request_allowed() -> bool {
    RECONCILE_FENCE.try_with(Fence::is_open).unwrap_or(true)
}

/// A reconcile of a key of a held shard, counted as in flight until dropped.
struct Ticket {
    shards: Arc<Shards>,
    shard: u32,
    tenure: u64,
    fence: Fence,
    lost: CancellationToken,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut tenures = self.shards.tenures.lock().unwrap();
        // The tenure may have ended (lost) and even restarted meanwhile; a
        // ticket only counts in the tenure it began in.
        if let Some(t) = tenures[self.shard as usize].as_mut()
            && t.id == self.tenure
        {
            t.in_flight -= 1;
        }
        drop(tenures);
        self.shards.idle.notify_waiters();
    }
}

/// The most shards keys may be spread over: one Lease each, all renewed
/// every retry period, and each named in the generated RBAC.
pub const MAX_SHARDS: u32 = 256;

impl Shards {
    /// `count` shards, none held.
    pub fn new(count: u32) -> Self {
        let count = count.max(1);
        Self {
            count,
            tenures: Mutex::new((0..count).map(|_| None).collect()),
            next_tenure: std::sync::atomic::AtomicU64::new(1),
            idle: tokio::sync::Notify::new(),
        }
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    /// The shard of `key`.
    pub fn shard_of(&self, key: &ObjectKey) -> u32 {
        shard_of(key, self.count)
    }

    /// Whether this replica reconciles `key` now: its shard is held, not
    /// draining, and surely ours.
    pub fn admits(&self, key: &ObjectKey) -> bool {
        let tenures = self.tenures.lock().unwrap();
        tenures[self.shard_of(key) as usize]
            .as_ref()
            .is_some_and(|t| t.accepting && t.fence.is_open())
    }

    /// The held and draining shards.
    pub fn status(&self) -> ShardStatus {
        let tenures = self.tenures.lock().unwrap();
        let pick = |accepting: bool| {
            tenures
                .iter()
                .enumerate()
                .filter(|(_, t)| t.as_ref().is_some_and(|t| t.accepting == accepting))
                .map(|(i, _)| i as u32)
                .collect()
        };
        ShardStatus {
            total: self.count,
            held: pick(true),
            draining: pick(false),
        }
    }

    /// Runs `call` for `request` if its key's shard is held, as one in-flight
    /// reconcile of the shard: its plugin requests are fenced by the shard's
    /// tenure and it is cancelled if the shard is lost. A key of a shard
    /// this replica does not hold is not reconciled here (its holder
    /// reconciles it): `Ok(done)`.
    pub async fn reconcile<F, Fut>(
        self: &Arc<Self>,
        mut request: ReconcileRequest,
        call: F,
    ) -> Result<Action, ReconcileError>
    where
        F: FnOnce(ReconcileRequest) -> Fut,
        Fut: Future<Output = Result<Action, ReconcileError>>,
    {
        let Some(ticket) = self.begin(&request.key) else {
            tracing::debug!(key = %request.key, "not reconciled here: another replica holds its shard");
            return Ok(Action::done());
        };
        // The per-key log of sharded reconciles (tests check from it that no
        // key ever runs on two replicas at once).
        let key = request.key.clone();
        tracing::debug!(target: "wasmctrl::shard::log", key = %key, shard = ticket.shard, "reconcile begins");
        let cancel = request.cancel.child_token();
        request.cancel = cancel.clone();
        let run = RECONCILE_FENCE.scope(ticket.fence.clone(), call(request));
        tokio::pin!(run);
        let result = tokio::select! {
            biased;
            r = &mut run => r,
            _ = ticket.lost.cancelled() => {
                tracing::warn!(shard = ticket.shard, "shard lost: cancelling the reconcile of one of its keys");
                cancel.cancel();
                run.await
            }
        };
        tracing::debug!(target: "wasmctrl::shard::log", key = %key, shard = ticket.shard, "reconcile ends");
        drop(ticket);
        result
    }

    fn begin(self: &Arc<Self>, key: &ObjectKey) -> Option<Ticket> {
        let shard = self.shard_of(key);
        let mut tenures = self.tenures.lock().unwrap();
        let t = tenures[shard as usize].as_mut()?;
        if !(t.accepting && t.fence.is_open()) {
            return None;
        }
        t.in_flight += 1;
        Some(Ticket {
            shards: self.clone(),
            shard,
            tenure: t.id,
            fence: t.fence.clone(),
            lost: t.lost.clone(),
        })
    }

    /// A new tenure of `shard`, ours until `valid_until` unless renewed.
    fn take(&self, shard: u32, valid_until: Instant) {
        let fence = Fence::closed();
        fence.extend_to(valid_until);
        let id = self
            .next_tenure
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut tenures = self.tenures.lock().unwrap();
        tenures[shard as usize] = Some(Tenure {
            id,
            fence,
            accepting: true,
            in_flight: 0,
            lost: CancellationToken::new(),
        });
    }

    /// A renewal of `shard` succeeded: its fence holds until `valid_until`.
    fn extend(&self, shard: u32, valid_until: Instant) {
        if let Some(t) = self.tenures.lock().unwrap()[shard as usize].as_ref() {
            t.fence.extend_to(valid_until);
        }
    }

    /// `shard` is to be given away: no new keys start.
    fn stop_accepting(&self, shard: u32) {
        if let Some(t) = self.tenures.lock().unwrap()[shard as usize].as_mut() {
            t.accepting = false;
        }
    }

    /// Reconciles of `shard` running now.
    fn in_flight(&self, shard: u32) -> usize {
        self.tenures.lock().unwrap()[shard as usize]
            .as_ref()
            .map_or(0, |t| t.in_flight)
    }

    /// Ends the tenure of `shard`: its fence closes; if `lost`, its
    /// in-flight reconciles are cancelled.
    fn end(&self, shard: u32, lost: bool) {
        if let Some(t) = self.tenures.lock().unwrap()[shard as usize].take() {
            t.fence.close();
            if lost {
                t.lost.cancel();
            }
        }
    }

    /// Shards with a tenure (held or draining), accepting ones, draining ones.
    fn tenured(&self) -> Vec<u32> {
        let tenures = self.tenures.lock().unwrap();
        (0..self.count)
            .filter(|i| tenures[*i as usize].is_some())
            .collect()
    }

    /// Waits until no reconcile of `shards` runs, for at most `timeout`;
    /// true if none does.
    async fn wait_idle(&self, shards: &[u32], timeout: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Registered before the check, so an end in between still wakes us.
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if shards.iter().all(|&s| self.in_flight(s) == 0) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests;
