//! Sharding in the manager: the coordinator keeping this replica's shards,
//! and the keys of newly taken shards enqueued (the gate and the feeds
//! filter the rest through [`super::PluginSlot::admits`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::Host;
use super::wiring::enqueue_taken;
use crate::control::shard::{AcquiredShards, ShardCoordinator};

impl Host {
    /// Starts the shard coordinator when sharding is on; it stops (releasing
    /// its Leases) when `stop` is cancelled, after the workers drained.
    pub(super) fn start_sharding(
        self: &Arc<Self>,
        identity: &str,
        stop: CancellationToken,
    ) -> Option<JoinHandle<()>> {
        let shards = self.shards.clone()?;
        let le = &self.config.leader_election;
        let coordinator = ShardCoordinator {
            lease: le.lease(identity),
        };
        let host = Arc::downgrade(self);
        let acquired: AcquiredShards = Arc::new(move |taken: &[u32]| {
            if let Some(host) = host.upgrade() {
                host.enqueue_shards(taken);
            }
        });
        Some(tokio::spawn(coordinator.run(
            self.client.clone(),
            shards,
            acquired,
            stop,
        )))
    }

    /// Enqueues, for every plugin, the keys of the objects of its reconciled
    /// kind that fall in `taken`, in a task of its own (a plugin still
    /// syncing enqueues all its admitted keys once synced).
    fn enqueue_shards(&self, taken: &[u32]) {
        let Some(shards) = &self.shards else {
            return;
        };
        let taken: BTreeSet<u32> = taken.iter().copied().collect();
        let enqueues: Vec<_> = self
            .plugins
            .lock()
            .unwrap()
            .values()
            .map(|entry| enqueue_taken(entry, shards.clone(), taken.clone()))
            .collect();
        tokio::spawn(futures::future::join_all(enqueues));
    }
}
