//! The steady load: writers updating every key, each update removing the
//! stamp.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use tokio_util::sync::CancellationToken;

use super::keys::{STAMP_LABEL, key_name};

/// Writer tasks; each owns every `WRITERS`-th key.
const WRITERS: usize = 4;

/// Updates every key in turn (`WRITERS` tasks, each owning a share), paced
/// to `rate` updates/s in total; each update changes data and removes the
/// stamp.
pub(super) fn spawn_writer(
    api: Api<ConfigMap>,
    keys: usize,
    rate: u32,
    stop: CancellationToken,
    count: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let per_task = (f64::from(rate) / WRITERS as f64).max(1.0);
    let period = Duration::from_secs_f64(1.0 / per_task);
    (0..WRITERS)
        .map(|w| {
            let (api, stop, count, errors) =
                (api.clone(), stop.clone(), count.clone(), errors.clone());
            tokio::spawn(async move {
                let mine: Vec<usize> = (w..keys).step_by(WRITERS).collect();
                let mut tick = tokio::time::interval(period);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                let mut round = 0u64;
                'outer: loop {
                    round += 1;
                    for &i in &mine {
                        tokio::select! {
                            _ = stop.cancelled() => break 'outer,
                            _ = tick.tick() => {}
                        }
                        let patch = serde_json::json!({
                            "metadata": {"labels": {STAMP_LABEL: null}},
                            "data": {"round": round.to_string()},
                        });
                        match api
                            .patch(&key_name(i), &PatchParams::default(), &Patch::Merge(&patch))
                            .await
                        {
                            Ok(_) => count.fetch_add(1, Ordering::Relaxed),
                            Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                }
            })
        })
        .collect()
}
