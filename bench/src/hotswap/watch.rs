//! The label watch: the first ConfigMap stamped by the version being waited
//! for.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context as _, bail};
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, WatchEvent, WatchParams};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::keys::STAMP_LABEL;

pub(super) struct Awaited {
    pub(super) stamp: &'static str,
    pub(super) after_rv: u64,
    pub(super) tx: oneshot::Sender<Instant>,
}

pub(super) type LabelProbe = Arc<Mutex<Option<Awaited>>>;

pub(super) async fn watch_labels(
    api: Api<ConfigMap>,
    rv: u64,
    probe: LabelProbe,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let mut rv = rv.to_string();
    while !stop.is_cancelled() {
        let stream = api
            .watch(&WatchParams::default(), &rv)
            .await
            .context("watching ConfigMaps")?;
        let mut stream = std::pin::pin!(stream);
        loop {
            let ev = tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                ev = stream.try_next() => ev.context("ConfigMap watch")?,
            };
            let cm = match ev {
                Some(WatchEvent::Added(cm) | WatchEvent::Modified(cm)) => cm,
                Some(WatchEvent::Bookmark(b)) => {
                    rv = b.metadata.resource_version;
                    continue;
                }
                Some(WatchEvent::Deleted(_)) => continue,
                Some(WatchEvent::Error(e)) => bail!("ConfigMap watch: {e:?}"),
                None => break, // server-side timeout: resume from `rv`
            };
            let obj_rv = cm.metadata.resource_version.clone().unwrap_or_default();
            let at: u64 = obj_rv.parse().unwrap_or(0);
            rv = obj_rv;
            let stamp = cm.metadata.labels.as_ref().and_then(|l| l.get(STAMP_LABEL));
            let mut slot = probe.lock().unwrap();
            if let Some(a) = slot.as_ref()
                && stamp.map(String::as_str) == Some(a.stamp)
                && at > a.after_rv
                && let Some(a) = slot.take()
            {
                let _ = a.tx.send(Instant::now());
            }
        }
    }
    Ok(())
}
