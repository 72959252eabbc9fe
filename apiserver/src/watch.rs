//! Watch streams: chunked HTTP, one JSON event per line, resumable from a
//! resourceVersion inside the history window (410 Expired past it), with
//! bookmarks, `sendInitialEvents` and selector enter/leave semantics.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::Response;
use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::error::{ApiError, Cause};
use crate::resources::ResourceInfo;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::server::{Shared, to_view, view_is_identity};
use crate::storage::{Event, EventType, StoreError, WatchFrom};

/// How often an idle watch that asked for bookmarks gets one.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(30);

/// Largest chunk a burst of events is coalesced into.
const MAX_BATCH_BYTES: usize = 256 * 1024;

/// The annotation kube-rs streaming lists wait for.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// A parsed watch request.
#[derive(Debug, Clone)]
pub struct WatchParams {
    pub namespace: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub send_initial_events: Option<bool>,
    pub allow_bookmarks: bool,
    pub timeout: Option<Duration>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    /// kubectl's human-readable watch: each event object is a one-row Table.
    pub table: Option<(&'static str, crate::table::Include)>,
}

impl WatchParams {
    fn matches(&self, ev_ns: &str, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && ns != ev_ns
        {
            return false;
        }
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

fn line(kind: &str, object: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(object.len() + 32);
    b.put_slice(b"{\"type\":\"");
    b.put_slice(kind.as_bytes());
    b.put_slice(b"\",\"object\":");
    b.put_slice(object);
    b.put_slice(b"}\n");
    b.freeze()
}

fn render(info: &ResourceInfo, p: &WatchParams, obj: &Value) -> Vec<u8> {
    let view = to_view(info, obj);
    match p.table {
        Some((version, include)) => {
            let t = crate::table::table(
                info,
                version,
                std::slice::from_ref(&view),
                json!({"resourceVersion": view["metadata"]["resourceVersion"]}),
                include,
                true,
            );
            serde_json::to_vec(&t).unwrap_or_default()
        }
        None => serde_json::to_vec(&view).unwrap_or_default(),
    }
}

fn bookmark(info: &ResourceInfo, rv: u64, initial_end: bool) -> Bytes {
    let mut md = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        md["annotations"] = json!({INITIAL_EVENTS_END: "true"});
    }
    let obj = json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": md});
    line("BOOKMARK", &serde_json::to_vec(&obj).unwrap_or_default())
}

/// The ERROR event sent (with HTTP 200) when a watch cannot resume.
fn expired_line(message: &str) -> Bytes {
    let status = ApiError::Expired(message.to_string()).to_status();
    line("ERROR", &serde_json::to_vec(&status).unwrap_or_default())
}

/// Translates one store event into what this watcher sees, if anything.
fn translate(info: &ResourceInfo, p: &WatchParams, ev: &Event) -> Option<Bytes> {
    if ev.resource != info.storage {
        return None;
    }
    let now = p.matches(&ev.namespace, &ev.object);
    let kind = match ev.etype {
        EventType::Added | EventType::Deleted => {
            if !now {
                return None;
            }
            ev.etype
        }
        EventType::Modified => {
            let before = ev
                .prev
                .as_ref()
                .is_some_and(|o| p.matches(&ev.namespace, o));
            match (before, now) {
                (true, true) => EventType::Modified,
                (false, true) => EventType::Added,
                (true, false) => EventType::Deleted,
                (false, false) => return None,
            }
        }
    };
    let body = if p.table.is_none() && view_is_identity(info, &ev.object) {
        return Some(line(kind.as_str(), ev.rendered()));
    } else {
        render(info, p, &ev.object)
    };
    Some(line(kind.as_str(), &body))
}

/// Starts a watch and returns the streaming response.
pub fn serve(
    shared: Arc<Shared>,
    info: Arc<ResourceInfo>,
    p: WatchParams,
) -> Result<Response, ApiError> {
    let rv_param = p.resource_version.clone().filter(|s| !s.is_empty());
    let initial_end = p.send_initial_events == Some(true);
    if initial_end
        && (p.resource_version_match.as_deref() != Some("NotOlderThan") || !p.allow_bookmarks)
    {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "ListOptions",
            "",
            vec![Cause {
                reason: "FieldValueForbidden".into(),
                message: "Forbidden: sendInitialEvents is allowed with watch=true, allowWatchBookmarks=true and resourceVersionMatch=NotOlderThan".into(),
                field: "sendInitialEvents".into(),
            }],
        ));
    }
    let from = match (&rv_param, p.send_initial_events) {
        (_, Some(true)) => WatchFrom::Snapshot,
        (None, Some(false)) => WatchFrom::Rv(shared.store.current_rv()),
        (None, None) => WatchFrom::Snapshot,
        (Some(rv), _) if rv == "0" => WatchFrom::Snapshot,
        (Some(rv), _) => WatchFrom::Rv(
            rv.parse::<u64>()
                .map_err(|_| ApiError::BadRequest(format!("invalid resource version: {rv}")))?,
        ),
    };
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    match shared.store.watch(&info.storage, from) {
        Err(StoreError::Expired { requested, oldest }) => {
            // The real server answers 200 and an ERROR event, which is what
            // client-go, kube-rs and the Python client expect.
            let msg = format!("too old resource version: {requested} ({oldest})");
            let _ = tx.try_send(expired_line(&msg));
            drop(tx);
        }
        Err(e) => return Err(ApiError::Internal(e.to_string())),
        Ok(start) => {
            let mut initial = Vec::new();
            for obj in &start.snapshot {
                let ns = crate::util::meta_str(obj, "namespace").unwrap_or("");
                if p.matches(ns, obj) {
                    initial.push(line("ADDED", &render(&info, &p, obj)));
                }
            }
            for ev in &start.backlog {
                if let Some(l) = translate(&info, &p, ev) {
                    initial.push(l);
                }
            }
            if initial_end {
                initial.push(bookmark(&info, start.rv, true));
            }
            let epoch = shared.watch_epoch.subscribe();
            tokio::spawn(pump(info, p, start.rv, initial, start.rx, tx, epoch));
        }
    }
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(Body::from_stream(stream))
        .map_err(|e| ApiError::Internal(e.to_string()))
}

async fn pump(
    info: Arc<ResourceInfo>,
    p: WatchParams,
    start_rv: u64,
    initial: Vec<Bytes>,
    mut rx: broadcast::Receiver<Arc<Event>>,
    tx: mpsc::Sender<Bytes>,
    mut epoch: tokio::sync::watch::Receiver<u64>,
) {
    epoch.borrow_and_update();
    let mut chunk = BytesMut::new();
    for l in initial {
        chunk.extend_from_slice(&l);
        if chunk.len() >= MAX_BATCH_BYTES && tx.send(chunk.split().freeze()).await.is_err() {
            return;
        }
    }
    if !chunk.is_empty() && tx.send(chunk.freeze()).await.is_err() {
        return;
    }
    let deadline = p.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut ticker = tokio::time::interval_at(
        tokio::time::Instant::now() + BOOKMARK_INTERVAL,
        BOOKMARK_INTERVAL,
    );
    // Every event up to `seen` has been considered, so a bookmark at `seen`
    // never skips anything for a resuming client.
    let mut seen = start_rv;
    loop {
        tokio::select! {
            r = rx.recv() => match r {
                Ok(ev) => {
                    // Coalesce whatever else is already queued into one
                    // chunk: one write and one TLS record for a burst instead
                    // of one per event, which is what keeps fan-out to many
                    // watchers cheap.
                    let mut batch = BytesMut::new();
                    seen = ev.rv;
                    if let Some(l) = translate(&info, &p, &ev) {
                        batch.extend_from_slice(&l);
                    }
                    let mut lagged = false;
                    while batch.len() < MAX_BATCH_BYTES {
                        match rx.try_recv() {
                            Ok(ev) => {
                                seen = ev.rv;
                                if let Some(l) = translate(&info, &p, &ev) {
                                    batch.extend_from_slice(&l);
                                }
                            }
                            Err(broadcast::error::TryRecvError::Lagged(_)) => {
                                lagged = true;
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    if !batch.is_empty() && tx.send(batch.freeze()).await.is_err() {
                        return;
                    }
                    if lagged {
                        let _ = tx
                            .send(expired_line(&format!(
                                "too old resource version: {seen}: watcher fell behind"
                            )))
                            .await;
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let _ = tx
                        .send(expired_line(&format!(
                            "too old resource version: {seen}: watcher fell behind"
                        )))
                        .await;
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = ticker.tick(), if p.allow_bookmarks => {
                if tx.send(bookmark(&info, seen, false)).await.is_err() {
                    return;
                }
            }
            _ = tx.closed() => return,
            _ = epoch.changed() => return,
            _ = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            } => {
                // A last bookmark lets the client resume from the newest
                // resourceVersion instead of its last event's, which may have
                // left the history window by the time it reconnects.
                if p.allow_bookmarks {
                    let _ = tx.send(bookmark(&info, seen, false)).await;
                }
                return;
            }
        }
    }
}
