//! Watch streams: chunked HTTP, one JSON event per line, resumable from a
//! resourceVersion inside the history window (410 Expired past it), with
//! bookmarks, `sendInitialEvents` and selector enter/leave semantics.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::Response;
use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use super::faults::{WatchFault, WatchFaults};
use super::state::ServerState;
use crate::error::{ApiError, Cause};
use crate::metrics::{Limit, Metrics};
use crate::registry::resources::ResourceInfo;
use crate::registry::selectors::{FieldSelector, LabelSelector, selectable_view};
use crate::registry::storage::{Event, EventType, StoreError, WatchFrom, parse_json};
use crate::registry::views::{stored_view_is_identity, to_view};

/// How often an idle watch that asked for bookmarks gets one.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(30);

/// Largest chunk a burst of events is coalesced into.
const MAX_BATCH_BYTES: usize = 256 * 1024;

/// The annotation kube-rs streaming lists wait for.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// A parsed watch request.
#[derive(Debug, Clone)]
pub(crate) struct WatchParams {
    pub(crate) namespace: Option<String>,
    pub(crate) resource_version: Option<String>,
    pub(crate) resource_version_match: Option<String>,
    pub(crate) send_initial_events: Option<bool>,
    pub(crate) allow_bookmarks: bool,
    pub(crate) timeout: Option<Duration>,
    pub(crate) labels: LabelSelector,
    pub(crate) fields: FieldSelector,
    /// kubectl's human-readable watch: each event object is a one-row Table.
    pub(crate) table: Option<(&'static str, super::table::Include)>,
}

impl WatchParams {
    /// Whether this watch sees the object `json` in namespace `ev_ns`; the
    /// object is parsed only for a selector.
    fn matches(&self, ev_ns: &str, json: &[u8]) -> bool {
        if let Some(ns) = &self.namespace
            && ns != ev_ns
        {
            return false;
        }
        if self.labels.is_empty() && self.fields.is_empty() {
            return true;
        }
        let obj = parse_json(json);
        self.labels.matches(&obj) && self.fields.matches(&obj)
    }

    /// Whether this watch sees `ev`'s object (or, with `prev`, its state
    /// before), reading the selectable parts the event shares among its
    /// watchers; those used are put in `held`, which keeps them for the
    /// watchers that come to this event after this one.
    fn sees(
        &self,
        info: &ResourceInfo,
        ev: &Event,
        prev: bool,
        held: &mut Vec<Arc<Value>>,
    ) -> bool {
        if prev && ev.prev.is_none() {
            return false;
        }
        if let Some(ns) = &self.namespace
            && *ns != ev.namespace
        {
            return false;
        }
        if self.labels.is_empty() && self.fields.is_empty() {
            return true;
        }
        let Some(view) = ev.selectable(prev, |json| {
            selectable_view(&parse_json(json), &info.group, &info.kind)
        }) else {
            return false;
        };
        let seen = self.labels.matches(&view) && self.fields.matches(&view);
        held.push(view);
        seen
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

/// The object of an event line: the stored JSON as it is where the view is
/// the stored object, else its view (or one-row Table) rendered.
fn render<'a>(info: &ResourceInfo, p: &WatchParams, json: &'a [u8]) -> Cow<'a, [u8]> {
    if p.table.is_none() && stored_view_is_identity(info, json) {
        return Cow::Borrowed(json);
    }
    let view = to_view(info, &parse_json(json));
    match p.table {
        Some((version, include)) => {
            let metadata = json!({"resourceVersion": view["metadata"]["resourceVersion"]});
            let mut out = Vec::new();
            if super::table::write_table(&mut out, info, version, [view], &metadata, include)
                .is_err()
            {
                out.clear();
            }
            Cow::Owned(out)
        }
        None => Cow::Owned(serde_json::to_vec(&view).unwrap_or_default()),
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
/// `held` is what it read of the event's selectable parts (and, on entry,
/// of the event before, which it lets go).
fn translate(
    info: &ResourceInfo,
    p: &WatchParams,
    ev: &Event,
    held: &mut Vec<Arc<Value>>,
) -> Option<Bytes> {
    if ev.resource != info.storage {
        return None;
    }
    held.clear();
    let now = p.sees(info, ev, false, held);
    let kind = match ev.etype {
        EventType::Added | EventType::Deleted => {
            if !now {
                return None;
            }
            ev.etype
        }
        EventType::Modified => {
            let before = p.sees(info, ev, true, held);
            match (before, now) {
                (true, true) => EventType::Modified,
                (false, true) => EventType::Added,
                (true, false) => {
                    return Some(line(
                        EventType::Deleted.as_str(),
                        &render(info, p, &left_selector(ev)),
                    ));
                }
                (false, false) => return None,
            }
        }
    };
    Some(line(kind.as_str(), &render(info, p, &ev.object)))
}

/// What a selective watch is told of an object that no longer matches its
/// selectors: the object as it last matched, at the change's
/// resourceVersion, as upstream's cacher sends it (the new state is not
/// what the watch selected).
fn left_selector(ev: &Event) -> Vec<u8> {
    let Some(prev) = &ev.prev else {
        return ev.object.to_vec();
    };
    let mut obj = parse_json(prev);
    crate::values::metadata_mut(&mut obj)
        .insert("resourceVersion".into(), json!(ev.rv.to_string()));
    serde_json::to_vec(&obj).unwrap_or_else(|_| ev.object.to_vec())
}

/// Events held back by the "withhold events" fault before the watcher is
/// treated as fallen behind (410 Expired; it relists).
const MAX_WITHHELD: usize = 1 << 16;
/// Bytes a watch may have waiting for its client before it counts as
/// fallen behind (closed with 410; the client relists).
pub(crate) const MAX_QUEUED_BYTES: usize = 16 << 20;
/// Bytes all the watches of a server may have waiting for their clients
/// at once, by default ([`crate::Timeouts::max_watch_bytes`]): past it, a
/// watch whose client has bytes waiting falls behind.
pub(crate) const MAX_WATCH_BYTES: usize = 512 << 20;
/// How long a watch waits for its client to take anything before it
/// counts as fallen behind.
const SEND_PATIENCE: Duration = Duration::from_secs(30);

/// Ends a watch stream without its final chunk, so the client sees the
/// connection drop mid-stream (fault injection).
#[derive(Debug, thiserror::Error)]
#[error("watch connection cut (Faults::drop_watches)")]
struct WatchCut;

/// Bytes a watch queued for its client, counted in the watch's queue and
/// the server's until handed on to the connection, or dropped unsent (a
/// send that failed, a response the connection dropped): whatever ends a
/// chunk's wait takes its bytes off both.
struct Counted {
    n: usize,
    own: Arc<AtomicUsize>,
    all: Arc<AtomicUsize>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.own.fetch_sub(self.n, Ordering::Relaxed);
        self.all.fetch_sub(self.n, Ordering::Relaxed);
    }
}

/// What the pump sends to the response body: bytes, counted (the last
/// ERROR line is not), or the cut of a fault.
type Chunk = Result<(Bytes, Option<Counted>), WatchCut>;

/// The response streaming `rx`'s chunks; each leaves the counts as it is
/// handed on.
fn streaming(rx: mpsc::Receiver<Chunk>) -> Result<Response, ApiError> {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        let chunk = rx.recv().await?.map(|(bytes, _counted)| bytes);
        Some((chunk, rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(Body::from_stream(stream))
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// A watch answered at once with one ERROR event carrying 410 Expired, the
/// way the real server refuses a too-old resourceVersion (HTTP 200; clients
/// relist).
pub(crate) fn expired(message: &str) -> Result<Response, ApiError> {
    let (tx, rx) = mpsc::channel::<Chunk>(1);
    let _ = tx.try_send(Ok((expired_line(message), None)));
    streaming(rx)
}

/// Starts a watch and returns the streaming response.
pub(crate) fn serve(
    shared: Arc<ServerState>,
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
            vec![Cause::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is allowed with watch=true, allowWatchBookmarks=true and resourceVersionMatch=NotOlderThan",
            )],
        ));
    }
    let from = match (&rv_param, p.send_initial_events) {
        (_, Some(true)) => WatchFrom::Snapshot,
        (None, Some(false)) => WatchFrom::Rv(shared.objects.store.current_rv()),
        (None, None) => WatchFrom::Snapshot,
        (Some(rv), _) if rv == "0" => WatchFrom::Snapshot,
        (Some(rv), _) => WatchFrom::Rv(
            rv.parse::<u64>()
                .map_err(|_| ApiError::BadRequest(format!("invalid resource version: {rv}")))?,
        ),
    };
    let start = match shared
        .objects
        .store
        .watch(&info.storage, p.namespace.as_deref(), from)
    {
        // The real server answers 200 and an ERROR event, which is what
        // client-go, kube-rs and the Python client expect.
        Err(StoreError::Expired { requested, oldest }) => {
            shared.metrics.exceeded(Limit::WatchExpired);
            return expired(&format!("too old resource version: {requested} ({oldest})"));
        }
        Err(e) => return Err(ApiError::Internal(e.to_string())),
        Ok(start) => start,
    };
    let mut snapshot = Vec::new();
    for (ns, obj) in &start.snapshot {
        if p.matches(ns, obj) {
            snapshot.push(line("ADDED", &render(&info, &p, obj)));
        }
    }
    if initial_end {
        snapshot.push(bookmark(&info, start.rv, true));
    }
    let (tx, rx) = mpsc::channel::<Chunk>(256);
    let pump = Pump {
        info,
        p,
        seen: start.rv,
        withheld: VecDeque::new(),
        tx,
        queued: Arc::default(),
        all_queued: shared.watch_bytes.clone(),
        max_all_queued: shared.max_watch_bytes,
        faults: shared.faults.watch_faults(),
        metrics: shared.metrics.clone(),
        held: Vec::new(),
    };
    let epoch = shared.watch_epoch.subscribe();
    tokio::spawn(pump.run(snapshot, start.backlog, start.rx, epoch));
    streaming(rx)
}

/// Feeds one watch response: translates store events for this watcher,
/// coalesces bursts, sends bookmarks and honours faults.
struct Pump {
    info: Arc<ResourceInfo>,
    p: WatchParams,
    /// Every event up to `seen` has been delivered (or filtered out), so a
    /// bookmark at `seen` never skips anything for a resuming client.
    seen: u64,
    /// Events held back while the "withhold events" fault is on.
    withheld: VecDeque<Arc<Event>>,
    tx: mpsc::Sender<Chunk>,
    /// Bytes sent to the response and not yet handed on to the connection.
    queued: Arc<AtomicUsize>,
    /// The same, of every watch of the server, and its bound.
    all_queued: Arc<AtomicUsize>,
    max_all_queued: usize,
    faults: WatchFaults,
    metrics: Arc<Metrics>,
    /// The selectable parts of the last event evaluated, kept for the
    /// watchers that reach it after this one.
    held: Vec<Arc<Value>>,
}

/// The watch is over: the client went away, or it was told to relist.
struct Stop;

impl Pump {
    /// Queues `bytes` for the client; a client that has more than
    /// [`MAX_QUEUED_BYTES`] waiting, or whose bytes would take the server's
    /// watches past theirs, or that takes nothing for [`SEND_PATIENCE`],
    /// fell behind.
    async fn send(&self, bytes: Bytes) -> Result<(), Stop> {
        let n = bytes.len();
        let before = self.queued.fetch_add(n, Ordering::Relaxed);
        let before_all = self.all_queued.fetch_add(n, Ordering::Relaxed);
        let counted = Counted {
            n,
            own: self.queued.clone(),
            all: self.all_queued.clone(),
        };
        // One chunk always goes: a single event may be larger than a bound.
        if before > 0 && (before + n > MAX_QUEUED_BYTES || before_all + n > self.max_all_queued) {
            drop(counted);
            return Err(self.fell_behind());
        }
        match tokio::time::timeout(SEND_PATIENCE, self.tx.send(Ok((bytes, Some(counted))))).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(Stop),
            Err(_) => Err(self.fell_behind()),
        }
    }

    /// Adds an event to `batch`, or holds it back while withholding.
    fn take(&mut self, ev: Arc<Event>, batch: &mut BytesMut) {
        if self.faults.withholding() {
            self.withheld.push_back(ev);
            return;
        }
        self.seen = ev.rv;
        if let Some(l) = translate(&self.info, &self.p, &ev, &mut self.held) {
            batch.extend_from_slice(&l);
        }
    }

    /// Sends a batch; while withholding, a bookmark (at the last delivered
    /// version) shows the client the watch is alive.
    async fn flush(&mut self, batch: BytesMut) -> Result<(), Stop> {
        if !batch.is_empty() {
            self.send(batch.freeze()).await?;
        }
        if self.withheld.len() > MAX_WITHHELD {
            return Err(self.fell_behind());
        }
        Ok(())
    }

    /// Ends the watch with 410 Expired, if the client has room for it (it
    /// relists either way, when the stream ends).
    fn fell_behind(&self) -> Stop {
        self.metrics.exceeded(Limit::SlowWatcher);
        let msg = format!(
            "too old resource version: {}: watcher fell behind",
            self.seen
        );
        let _ = self.tx.try_send(Ok((expired_line(&msg), None)));
        Stop
    }

    async fn run(
        mut self,
        snapshot: Vec<Bytes>,
        backlog: Vec<Arc<Event>>,
        rx: broadcast::Receiver<Arc<Event>>,
        epoch: tokio::sync::watch::Receiver<u64>,
    ) {
        let _ = self.run_inner(snapshot, backlog, rx, epoch).await;
    }

    async fn run_inner(
        &mut self,
        snapshot: Vec<Bytes>,
        backlog: Vec<Arc<Event>>,
        mut rx: broadcast::Receiver<Arc<Event>>,
        mut epoch: tokio::sync::watch::Receiver<u64>,
    ) -> Result<(), Stop> {
        epoch.borrow_and_update();
        let mut chunk = BytesMut::new();
        for l in snapshot {
            chunk.extend_from_slice(&l);
            if chunk.len() >= MAX_BATCH_BYTES {
                self.send(chunk.split().freeze()).await?;
            }
        }
        for ev in backlog {
            self.take(ev, &mut chunk);
            if chunk.len() >= MAX_BATCH_BYTES {
                self.send(chunk.split().freeze()).await?;
            }
        }
        self.flush(chunk).await?;
        // A timeout too long to add is none at all.
        let deadline = self
            .p
            .timeout
            .and_then(|t| tokio::time::Instant::now().checked_add(t));
        let mut ticker = tokio::time::interval_at(
            tokio::time::Instant::now() + BOOKMARK_INTERVAL,
            BOOKMARK_INTERVAL,
        );
        loop {
            tokio::select! {
                r = rx.recv() => match r {
                    Ok(ev) => {
                        // Coalesce whatever else is already queued into one
                        // chunk: one write and one TLS record for a burst
                        // instead of one per event, which is what keeps
                        // fan-out to many watchers cheap.
                        let mut batch = BytesMut::new();
                        let withheld_before = self.withheld.len();
                        self.take(ev, &mut batch);
                        let mut lagged = false;
                        while batch.len() < MAX_BATCH_BYTES {
                            match rx.try_recv() {
                                Ok(ev) => self.take(ev, &mut batch),
                                Err(broadcast::error::TryRecvError::Lagged(_)) => {
                                    lagged = true;
                                    break;
                                }
                                Err(_) => break,
                            }
                        }
                        if self.withheld.len() > withheld_before && self.p.allow_bookmarks {
                            batch.extend_from_slice(&bookmark(&self.info, self.seen, false));
                        }
                        self.flush(batch).await?;
                        if lagged {
                            return Err(self.fell_behind());
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        return Err(self.fell_behind());
                    }
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                },
                _ = ticker.tick(), if self.p.allow_bookmarks => {
                    self.send(bookmark(&self.info, self.seen, false)).await?;
                }
                fault = self.faults.changed() => match fault {
                    WatchFault::Abort => {
                        let _ = self.tx.send(Err(WatchCut)).await;
                        return Ok(());
                    }
                    WatchFault::Withhold(true) => {
                        if self.p.allow_bookmarks {
                            self.send(bookmark(&self.info, self.seen, false)).await?;
                        }
                    }
                    WatchFault::Withhold(false) => {
                        // Deliver what was held back, in order, then carry on
                        // from the live stream where it left off.
                        let mut batch = BytesMut::new();
                        while let Some(ev) = self.withheld.pop_front() {
                            self.take(ev, &mut batch);
                            if batch.len() >= MAX_BATCH_BYTES {
                                self.send(batch.split().freeze()).await?;
                            }
                        }
                        self.flush(batch).await?;
                    }
                },
                _ = self.tx.closed() => return Ok(()),
                _ = epoch.changed() => return Ok(()),
                _ = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                } => {
                    // A last bookmark lets the client resume from the newest
                    // resourceVersion instead of its last event's, which may
                    // have left the history window by the time it reconnects.
                    if self.p.allow_bookmarks {
                        let _ = self.send(bookmark(&self.info, self.seen, false)).await;
                    }
                    return Ok(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::faults::FaultState;
    use crate::registry::resources::Registry;

    fn params() -> WatchParams {
        WatchParams {
            namespace: None,
            resource_version: None,
            resource_version_match: None,
            send_initial_events: None,
            allow_bookmarks: false,
            timeout: None,
            labels: LabelSelector::parse("").unwrap(),
            fields: FieldSelector::parse("", "", "ConfigMap").unwrap(),
            table: None,
        }
    }

    /// A watcher more events behind than the store's broadcast buffer holds
    /// (65 536; 2 here) gets 410 and its stream ends, counted once.
    #[tokio::test]
    async fn a_watcher_that_falls_behind_is_closed_and_counted() {
        let info = Registry::new().find("", "v1", "configmaps").unwrap();
        let (events, rx) = broadcast::channel(2);
        for rv in 1..=5 {
            let cm = json!({"metadata": {"name": format!("c{rv}")}});
            events
                .send(Event::added(rv, info.storage.clone(), cm))
                .unwrap();
        }
        let faults = FaultState::new();
        let metrics = Arc::new(Metrics::new());
        let (tx, mut out) = mpsc::channel(16);
        let pump = Pump {
            info,
            p: params(),
            seen: 0,
            withheld: VecDeque::new(),
            tx,
            queued: Arc::default(),
            all_queued: Arc::default(),
            max_all_queued: MAX_WATCH_BYTES,
            faults: faults.watch_faults(),
            metrics: metrics.clone(),
            held: Vec::new(),
        };
        let (_epoch, epoch) = tokio::sync::watch::channel(0);
        pump.run(Vec::new(), Vec::new(), rx, epoch).await;
        let mut lines = Vec::new();
        while let Some(Ok((chunk, _))) = out.recv().await {
            lines.push(chunk);
        }
        let last: serde_json::Value = serde_json::from_slice(lines.last().unwrap()).unwrap();
        assert_eq!(last["type"], "ERROR");
        assert_eq!(last["object"]["code"], 410);
        assert_eq!(metrics.exceeded_count("slowWatcher"), 1);
        drop(events);
    }
}
