//! The plugin's API rate limit, the host's budget it shares, and the
//! leader's (or shard's) fence: what a request waits for, or is refused
//! by, before it is sent.

use std::time::{Duration, Instant};

use super::ClusterApi;
use crate::control::metrics::PluginLabel;
use crate::control::workqueue::ratelimit::HeldBy;
use crate::sandbox::hostapi::error::ApiError;

/// What a throttled call must have left of the reconcile's deadline once its
/// wait is over: a wait that ends at the deadline would only hand the guest
/// back to be interrupted, after taking a token; it is refused instead, as
/// one that ends past it is.
const ROOM_FOR_THE_CALL: Duration = Duration::from_millis(10);

/// Why a request of a sharded reconcile was not sent.
const SHARD_LOST: &str = "this replica no longer surely holds the shard of the key being reconciled (its Lease was not renewed in time or was given away); the request was not sent";

impl ClusterApi {
    /// Waits for the plugin's API rate limit and the host's API budget it
    /// shares, if any (bounded by `deadline`: a wait that would end past it,
    /// or within [`ROOM_FOR_THE_CALL`] of it, is refused and takes no token),
    /// and refuses when this host is not (or no longer surely) the leader.
    pub(super) async fn throttle(&self, deadline: Instant) -> Result<(), ApiError> {
        if !self.fence.is_open() {
            return Err(ApiError::Unavailable(
                "this host is not the leader (its lease was not renewed in time); the request was not sent".into(),
            ));
        }
        if !crate::control::shard::request_allowed() {
            return Err(ApiError::Unavailable(SHARD_LOST.into()));
        }
        let label = PluginLabel {
            plugin: self.plugin.clone(),
        };
        self.metrics.api_requests.get_or_create(&label).inc();
        let shared = self.limits.shared.as_deref();
        let wait = match self.bucket.reserve_with(shared, |wait| {
            wait + ROOM_FOR_THE_CALL <= deadline.saturating_duration_since(Instant::now())
        }) {
            Ok(wait) if wait.is_zero() => return Ok(()),
            Ok(wait) => wait,
            Err((held_by, _)) => {
                self.limit_exceeded("apiQps");
                let message = match (held_by, shared) {
                    (HeldBy::Shared, Some(host)) => format!(
                        "the host's API budget, which this plugin shares with the host's other plugins (runtime.apiQps: {} requests/s, burst {}), would delay this call past the reconcile's deadline",
                        host.qps(),
                        host.burst()
                    ),
                    _ => format!(
                        "the plugin's API rate limit ({} requests/s, burst {}) would delay this call past the reconcile's deadline",
                        self.limits.qps, self.limits.burst
                    ),
                };
                return Err(ApiError::Timeout(message));
            }
        };
        self.metrics
            .api_throttled_seconds
            .get_or_create(&label)
            .inc_by(wait.as_secs_f64());
        tokio::time::sleep(wait).await;
        if !self.fence.is_open() {
            return Err(ApiError::Unavailable(
                "this host stopped being the leader while the request waited".into(),
            ));
        }
        if !crate::control::shard::request_allowed() {
            return Err(ApiError::Unavailable(SHARD_LOST.into()));
        }
        Ok(())
    }
}
