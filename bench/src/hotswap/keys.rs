//! The benchmark's ConfigMaps, and the stamps reconciles leave on them.

use std::time::{Duration, Instant};

use anyhow::ensure;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};

pub(super) const STAMP_LABEL: &str = "wasmctrl.dev/stamp";
pub(super) const NAMESPACE: &str = "default";

pub(super) fn key_name(i: usize) -> String {
    format!("hs-{i}")
}

/// Per-key stamps (None: unstamped) of the benchmark's ConfigMaps.
async fn stamps(api: &Api<ConfigMap>) -> anyhow::Result<Vec<Option<String>>> {
    let list = api.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("hs-"))
        })
        .map(|c| c.metadata.labels.and_then(|mut l| l.remove(STAMP_LABEL)))
        .collect())
}

/// Polls until every key carries `stamp` or `limit` passes; returns the
/// (unstamped, stamped by another version) counts at the end.
pub(super) async fn converge(
    api: &Api<ConfigMap>,
    keys: usize,
    stamp: &str,
    limit: Duration,
) -> anyhow::Result<(usize, usize)> {
    let deadline = Instant::now() + limit;
    loop {
        let all = stamps(api).await?;
        ensure!(
            all.len() == keys,
            "found {} of {keys} ConfigMaps",
            all.len()
        );
        let unstamped = all.iter().filter(|s| s.is_none()).count();
        let stale = all
            .iter()
            .filter(|s| s.as_deref().is_some_and(|s| s != stamp))
            .count();
        if unstamped + stale == 0 || Instant::now() >= deadline {
            return Ok((unstamped, stale));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
