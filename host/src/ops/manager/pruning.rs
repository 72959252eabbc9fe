//! Pruning the source disk cache ([`crate::ops::source::DiskCache::prune`]): a
//! tag polled for months leaves a component per version pushed. Every hour
//! (the first time ten minutes after start, once object plugins had time to
//! load) what no source needs is removed, keeping the components running
//! now and the newest few others for rollbacks and restarts without the
//! registry.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::Host;
use crate::ops::source::DiskCache;

/// How often the cache is pruned.
const EVERY: Duration = Duration::from_secs(3600);
/// The wait before the first prune.
const FIRST_AFTER: Duration = Duration::from_secs(600);
/// Components (and pinned-manifest records) kept beyond those in use.
pub const KEEP: usize = 4;

/// Prunes the host's source cache every [`EVERY`] until aborted.
pub(super) fn prune_periodically(host: &Arc<Host>) -> JoinHandle<()> {
    let host = Arc::downgrade(host);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + FIRST_AFTER, EVERY);
        loop {
            tick.tick().await;
            let Some(host) = host.upgrade() else {
                return;
            };
            host.prune_source_cache().await;
        }
    })
}

impl Host {
    /// Removes what no source needs from the source cache; failures are
    /// logged (a full disk is the operator's to see, not a reason to stop).
    pub(super) async fn prune_source_cache(&self) {
        // Candidates (shadow, canary) run too.
        let in_use: BTreeSet<String> = self
            .plugins
            .lock()
            .unwrap()
            .values()
            .flat_map(|e| {
                let slot = e.slot();
                std::iter::once(slot.current().digest().to_string())
                    .chain(slot.candidate().map(|(c, _)| c.digest().to_string()))
            })
            .collect();
        let cache = DiskCache::new(self.config.source_cache_dir());
        match cache.prune(&in_use, KEEP).await {
            Ok(p) if p.blobs + p.records > 0 => tracing::info!(
                cache = %cache.dir().display(),
                blobs = p.blobs,
                records = p.records,
                bytes = p.bytes,
                "pruned the source cache"
            ),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(cache = %cache.dir().display(), "cannot prune the source cache: {e}")
            }
        }
    }
}
