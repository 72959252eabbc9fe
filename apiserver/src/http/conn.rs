//! Serving connections: the TLS handshake, HTTP/1.1, and the timeouts that
//! close silent, stalled and idle connections without ever cutting a
//! response in progress (a watch may stream for hours), plus graceful
//! shutdown.
//!
//! | Limit | Value | Closes |
//! |---|---|---|
//! | [`TLS_HANDSHAKE_TIMEOUT`] | 10 s | a connection that does not finish TLS (e.g. sends nothing) |
//! | [`HEADER_READ_TIMEOUT`] | 10 s | a connection that does not send a complete request head, counted from the connection's start or the first byte of the next request |
//! | [`IDLE_TIMEOUT`] | 120 s | a keep-alive connection with no request in flight |
//! | [`RESPONSE_WRITE_TIMEOUT`] | 60 s | a connection whose client has not taken any of a response's bytes for that long (a list it never reads, a watch it stopped reading) |
//! | [`MAX_CONNECTIONS`] | 1,024 at once | a new connection past them, at once |
//! | [`MAX_UNPROVEN_PER_PEER`] | 64 per client address before their first request | a new one from that address, at once ([`peers`](super::peers)) |
//!
//! Each close is counted in `wasmctrl_apiserver_limit_exceeded_total`
//! (`tlsHandshake`, `requestHead`, `idleConnection`, `responseWrite`,
//! `connections`, `peerConnections`). The request body
//! timeout is enforced per request by the router, but configured here
//! with the others.
//!
//! hyper's own header timeout restarts whenever a connection goes idle, so
//! it would close idle keep-alive connections after the (short) header
//! timeout; the watchdog here tells "idle" from "in the middle of a request
//! head" instead.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, oneshot, watch};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::http::peers::{MAX_UNPROVEN_PER_PEER, Unproven, UnprovenGuard};
use crate::metrics::{Limit, Metrics};

/// Time a client gets to complete the TLS handshake (kube-apiserver's).
pub(crate) const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Time a client gets to send a complete request head: from the end of the
/// handshake for the first request, from its first byte for later ones.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Time a keep-alive connection may sit with no request in flight. Longer
/// than the 90 s after which kube-rs (hyper-util) and client-go drop idle
/// pooled connections themselves, so a client never races the server's
/// close when it reuses one.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Time a client may leave a response's bytes unread: a write to it that
/// makes no progress for this long closes the connection, and frees what
/// the response holds (a list's body, a watch's queued events). A watch
/// with nothing to send writes nothing, so it is never cut by this.
pub(crate) const RESPONSE_WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// Connections served at once (not an upstream bound: kube-apiserver limits
/// requests in flight instead). Each holds a task, a TLS session and, for a
/// watch, what waits for its client, so without a cap anyone who can open
/// connections could hold memory and file descriptors without end.
pub(crate) const MAX_CONNECTIONS: usize = 1024;

/// How long shutdown waits for responses in flight (watches are ended
/// first by the caller).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How long a client may take to send a body once its headers arrived
/// (kube-apiserver's default request timeout); slower uploads get 504.
/// The default of [`Timeouts::request_body`].
pub(crate) const BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// The connection bounds of one server: its timeouts, how many connections
/// it serves at once (see the module docs), and the bytes of list answers
/// it sends at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Time a client gets to complete the TLS handshake.
    pub tls_handshake: Duration,
    /// Time a client gets to send a complete request head: from the end of
    /// the handshake for the first request, from its first byte for later
    /// ones.
    pub request_head: Duration,
    /// Time a keep-alive connection may sit with no request in flight.
    pub idle: Duration,
    /// Time a client gets to send a request body once its head arrived
    /// (504 after).
    pub request_body: Duration,
    /// Time a response's write may make no progress (the client reads
    /// nothing) before the connection is closed.
    pub response_write: Duration,
    /// Connections served at once; a new one past them is closed at once.
    pub max_connections: usize,
    /// Connections one client address (an IPv6 /64) may have open before
    /// their first request; a new one past them is closed at once.
    pub max_unproven_per_peer: usize,
    /// Whether loopback clients count against `max_unproven_per_peer`. By
    /// default they do not: they are on this machine.
    pub count_loopback_peers: bool,
    /// Bytes of list answers on their way to clients at once; a list past
    /// them is answered 429.
    pub max_list_bytes: usize,
    /// Bytes all watches may have waiting for their clients at once; a
    /// watch whose client has bytes waiting past them falls behind (410).
    pub max_watch_bytes: usize,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            tls_handshake: TLS_HANDSHAKE_TIMEOUT,
            request_head: HEADER_READ_TIMEOUT,
            idle: IDLE_TIMEOUT,
            request_body: BODY_READ_TIMEOUT,
            response_write: RESPONSE_WRITE_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            max_unproven_per_peer: MAX_UNPROVEN_PER_PEER,
            count_loopback_peers: false,
            max_list_bytes: crate::http::list_budget::MAX_LIST_BYTES,
            max_watch_bytes: crate::http::watch::MAX_WATCH_BYTES,
        }
    }
}

/// The client's address, attached to every request (the write audit
/// records it).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer(pub(crate) SocketAddr);

/// Accepts connections on `listener` until `stopped` fires, then lets
/// responses in flight finish (bounded) and returns.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: axum::Router,
    timeouts: Timeouts,
    metrics: Arc<Metrics>,
    mut stopped: oneshot::Receiver<()>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let tracker = TaskTracker::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(timeouts.max_connections));
    let unproven = Unproven::new(
        timeouts.max_unproven_per_peer,
        timeouts.count_loopback_peers,
    );
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Transient (e.g. out of file descriptors): keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stopped => break,
        };
        let Some(first_request) = unproven.admit(peer.ip()) else {
            metrics.exceeded(Limit::PeerConnections);
            tracing::warn!(
                %peer,
                "{} connections from this address have sent no request yet; closing a new one",
                timeouts.max_unproven_per_peer
            );
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            metrics.exceeded(Limit::Connections);
            tracing::warn!(%peer, "{} connections open; closing a new one", timeouts.max_connections);
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let served = connection(
            Accepted {
                tcp,
                peer,
                first_request,
            },
            acceptor.clone(),
            app.clone(),
            timeouts,
            metrics.clone(),
            shutdown_rx.clone(),
        );
        tracker.spawn(async move {
            let _slot = slot;
            served.await
        });
    }
    drop(listener);
    let _ = shutdown_tx.send(true);
    tracker.close();
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, tracker.wait()).await;
}

/// A connection just accepted: its stream, its client, and its count
/// among the client's connections without a first request.
struct Accepted {
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    first_request: UnprovenGuard,
}

/// Serves one connection until the client closes it, a timeout fires, or
/// shutdown finishes it.
async fn connection(
    accepted: Accepted,
    acceptor: tokio_rustls::TlsAcceptor,
    app: axum::Router,
    timeouts: Timeouts,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let Accepted {
        tcp,
        peer,
        first_request,
    } = accepted;
    let stream = match tokio::time::timeout(timeouts.tls_handshake, acceptor.accept(tcp)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            metrics.exceeded(Limit::TlsHandshake);
            return;
        }
    };
    let activity = Arc::new(Activity::new(timeouts));
    let io = hyper_util::rt::TokioIo::new(Tracked {
        inner: stream,
        activity: activity.clone(),
    });
    let svc = hyper_util::service::TowerToHyperService::new(app);
    let requests = activity.clone();
    // Held until the first request head, or the connection's end.
    let unproven = Mutex::new(Some(first_request));
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(Peer(peer));
        unproven.lock().unwrap_or_else(|e| e.into_inner()).take();
        let guard = requests.begin_request();
        let fut = hyper::service::Service::call(&svc, req);
        async move {
            fut.await.map(|resp| {
                resp.map(|body| GuardedBody {
                    inner: body,
                    _guard: guard,
                })
            })
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        // The watchdog below enforces header and idle timeouts.
        .header_read_timeout(None)
        .serve_connection(io, service);
    tokio::pin!(conn);
    let mut shutting_down = *shutdown.borrow();
    if shutting_down {
        conn.as_mut().graceful_shutdown();
    }
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            (why, limit) = activity.expired() => {
                tracing::debug!(%peer, why, "closing connection");
                metrics.exceeded(limit);
                return;
            }
            r = shutdown.changed(), if !shutting_down => {
                // Idle connections close at once; a response in flight
                // finishes first.
                shutting_down = true;
                if r.is_ok() {
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// What the watchdog knows about a connection.
#[derive(Debug)]
struct ActivityState {
    /// Requests whose response has not been fully sent.
    in_flight: usize,
    /// When the connection last became idle (or was established).
    idle_since: Instant,
    /// First byte of a request head not yet complete, while idle.
    head_started: Option<Instant>,
    /// Whether any request has arrived yet.
    served_any: bool,
    /// Since when writes to the client have made no progress (the socket
    /// is full because the client reads nothing).
    write_stalled: Option<Instant>,
}

/// A connection's request activity, shared by its reader, its service and
/// its watchdog.
#[derive(Debug)]
struct Activity {
    state: Mutex<ActivityState>,
    changed: Notify,
    timeouts: Timeouts,
}

impl Activity {
    fn new(timeouts: Timeouts) -> Self {
        Activity {
            timeouts,
            state: Mutex::new(ActivityState {
                in_flight: 0,
                idle_since: Instant::now(),
                head_started: None,
                served_any: false,
                write_stalled: None,
            }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ActivityState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes arrived from the client.
    fn on_read(&self) {
        let mut st = self.lock();
        if st.in_flight == 0 && st.head_started.is_none() {
            st.head_started = Some(Instant::now());
            drop(st);
            self.changed.notify_one();
        }
    }

    /// A write to the client could not proceed (or, with `progressed`, it
    /// took bytes). Only the start of a stall wakes the watchdog.
    fn on_write(&self, progressed: bool) {
        let mut st = self.lock();
        if progressed {
            st.write_stalled = None;
        } else if st.write_stalled.is_none() {
            st.write_stalled = Some(Instant::now());
            drop(st);
            self.changed.notify_one();
        }
    }

    /// A request head is complete; the returned guard ends the request when
    /// its response body is dropped (sent or abandoned).
    fn begin_request(self: &Arc<Self>) -> RequestGuard {
        {
            let mut st = self.lock();
            st.in_flight += 1;
            st.head_started = None;
            st.served_any = true;
        }
        self.changed.notify_one();
        RequestGuard(self.clone())
    }

    /// Resolves when the connection should be closed, naming why and the
    /// limit it ran into.
    async fn expired(&self) -> (&'static str, Limit) {
        loop {
            let notified = self.changed.notified();
            let deadline = {
                let st = self.lock();
                if let Some(t) = st.write_stalled {
                    Some((
                        t + self.timeouts.response_write,
                        (
                            "the client reads nothing of the response",
                            Limit::ResponseWrite,
                        ),
                    ))
                } else if st.in_flight > 0 {
                    None
                } else if let Some(t) = st.head_started {
                    Some((
                        t + self.timeouts.request_head,
                        ("request head not received in time", Limit::RequestHead),
                    ))
                } else if !st.served_any {
                    Some((
                        st.idle_since + self.timeouts.request_head,
                        ("no request after the TLS handshake", Limit::RequestHead),
                    ))
                } else {
                    Some((
                        st.idle_since + self.timeouts.idle,
                        ("idle keep-alive connection", Limit::IdleConnection),
                    ))
                }
            };
            match deadline {
                None => notified.await,
                Some((at, why)) => {
                    if Instant::now() >= at {
                        return why;
                    }
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
            }
        }
    }
}

/// Marks the end of a request when dropped.
#[derive(Debug)]
struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        {
            let mut st = self.0.lock();
            st.in_flight = st.in_flight.saturating_sub(1);
            if st.in_flight == 0 {
                st.idle_since = Instant::now();
            }
        }
        self.0.changed.notify_one();
    }
}

/// A response body that ends its request when hyper drops it.
struct GuardedBody {
    inner: axum::body::Body,
    _guard: RequestGuard,
}

impl hyper::body::Body for GuardedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// The TLS stream, reporting reads to the watchdog.
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.on_read();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.activity.on_write(r.is_ready());
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.activity.on_write(r.is_ready());
        r
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.activity.on_write(r.is_ready());
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
