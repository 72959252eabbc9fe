//! Serving a router to whoever reaches a port, within bounds: at most so
//! many connections at once, at most [`MAX_UNPROVEN_PER_PEER`] of them from
//! one address before their first request (the embedded API server's
//! count, [`wasmctrl_apiserver::peers`]), and a client that goes quiet
//! before its request's headers are in is hung up on.
//!
//! The admin and webhook servers use this rather than `axum::serve`, whose
//! hyper-util server has no timer (so no header timeout) and no connection
//! cap: anyone who reaches the port could hold silent connections until
//! the process runs out of file descriptors, which the host's API client,
//! outbound requests and other servers need too.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use wasmctrl_apiserver::peers::{MAX_UNPROVEN_PER_PEER, Unproven};

/// The bounds of one server.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Connections served at once; one more is closed at once, logged.
    pub connections: usize,
    /// How long a client has to send each request's headers, counted from
    /// the connection's start or the previous answer (an idle keep-alive
    /// connection is closed after it), and to finish a TLS handshake.
    pub quiet: Duration,
    /// Connections one address (an IPv6 /64) may hold before its first
    /// request; one more from it is closed at once, logged. Loopback
    /// clients are counted only with `count_loopback` (tests).
    pub unproven_per_peer: usize,
    pub count_loopback: bool,
}

impl Bounds {
    /// `connections` at once and `quiet` as above, and
    /// [`MAX_UNPROVEN_PER_PEER`] from one address before its first request,
    /// loopback clients not counted.
    pub fn new(connections: usize, quiet: Duration) -> Self {
        Bounds {
            connections,
            quiet,
            unproven_per_peer: MAX_UNPROVEN_PER_PEER,
            count_loopback: false,
        }
    }
}

/// Serves `app` on `listener` until `stop`, each connection first made a
/// stream by `open` (a TLS handshake, or the TCP stream itself), which has
/// [`Bounds::quiet`] to finish and may refuse the connection with None.
/// On `stop` new connections are no longer taken, and open ones finish the
/// request they are answering (within [`Bounds::quiet`]).
pub async fn serve<S, F, Fut>(
    name: &'static str,
    listener: TcpListener,
    app: Router,
    bounds: Bounds,
    stop: CancellationToken,
    open: F,
) where
    F: Fn(TcpStream) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Option<S>> + Send,
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let slots = Arc::new(tokio::sync::Semaphore::new(bounds.connections));
    let unproven = Unproven::new(bounds.unproven_per_peer, bounds.count_loopback);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("{name} server: accept failed: {e}");
                    continue;
                }
            },
        };
        let Some(first_request) = unproven.admit(peer.ip()) else {
            tracing::warn!(
                %peer,
                "{name} server: {} connections from this address have sent no request yet; closing a new one",
                bounds.unproven_per_peer
            );
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "{name} server: {} connections open; closing a new one", bounds.connections);
            continue;
        };
        let (app, stop, open) = (app.clone(), stop.clone(), open.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let Ok(Some(stream)) = tokio::time::timeout(bounds.quiet, open(tcp)).await else {
                return;
            };
            let app = hyper_util::service::TowerToHyperService::new(app);
            // The address's count of connections without a request ends
            // at the first request's head.
            let first_request = std::sync::Mutex::new(Some(first_request));
            let service = hyper::service::service_fn(move |req| {
                first_request
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                hyper::service::Service::call(&app, req)
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(bounds.quiet)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = stop.cancelled() => {}
            }
            // The answer in progress finishes, for a while.
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(bounds.quiet, conn).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Reads until the server closes the connection; what it sent.
    async fn until_closed(conn: &mut TcpStream) -> String {
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut got))
            .await
            .expect("the server closes the connection")
            .unwrap();
        String::from_utf8_lossy(&got).into_owned()
    }

    /// What the server answers `GET /` on a new connection, read until it
    /// closes it.
    async fn get_on_a_new_connection(addr: std::net::SocketAddr) -> String {
        let mut conn = TcpStream::connect(addr).await.unwrap();
        conn.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        until_closed(&mut conn).await
    }

    /// Whether the server has neither closed `conn` nor sent on it yet.
    fn still_open(conn: &TcpStream) -> bool {
        let mut byte = [0u8; 1];
        matches!(conn.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }

    /// A server within `bounds` answering `GET /` with "served", on plain
    /// TCP: its address, and what stops it.
    async fn served(bounds: Bounds) -> (std::net::SocketAddr, CancellationToken) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/", axum::routing::get(|| async { "served" }));
        let stop = CancellationToken::new();
        tokio::spawn(serve(
            "test",
            listener,
            app,
            bounds,
            stop.clone(),
            |tcp| async { Some(tcp) },
        ));
        (addr, stop)
    }

    #[tokio::test]
    async fn connections_past_the_cap_are_closed_and_quiet_ones_hung_up_on() {
        // Long enough that the quiet clients still hold their slots when
        // the third is refused, on a loaded machine too.
        let (addr, stop) = served(Bounds::new(2, Duration::from_secs(5))).await;

        // Two clients that say nothing hold both slots; a third is closed
        // at once, before the quiet ones are hung up on.
        let mut quiet = [
            TcpStream::connect(addr).await.unwrap(),
            TcpStream::connect(addr).await.unwrap(),
        ];
        let mut third = TcpStream::connect(addr).await.unwrap();
        assert_eq!(
            until_closed(&mut third).await,
            "",
            "past the cap: closed unanswered"
        );
        assert!(
            still_open(&quiet[0]),
            "the third was closed for the cap, while the quiet ones still held their slots"
        );
        for conn in &mut quiet {
            assert_eq!(until_closed(conn).await, "", "a quiet client is hung up on");
        }
        // The slots are free again.
        assert!(get_on_a_new_connection(addr).await.ends_with("served"));
        stop.cancel();
    }

    #[tokio::test]
    async fn an_address_holds_a_bounded_number_of_connections_without_a_request() {
        let (addr, stop) = served(Bounds {
            unproven_per_peer: 2,
            count_loopback: true,
            ..Bounds::new(10, Duration::from_secs(5))
        })
        .await;
        let mut spoken = TcpStream::connect(addr).await.unwrap();
        let silent = TcpStream::connect(addr).await.unwrap();
        let mut third = TcpStream::connect(addr).await.unwrap();
        assert_eq!(
            until_closed(&mut third).await,
            "",
            "a third without a request: closed unanswered"
        );
        assert!(
            still_open(&silent),
            "the third was closed for the address's count, while the earlier ones were still open"
        );
        // Once one of them has sent a request, it no longer counts.
        spoken
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        while !String::from_utf8_lossy(&answer).ends_with("served") {
            let mut chunk = [0u8; 256];
            let n = tokio::time::timeout(Duration::from_secs(10), spoken.read(&mut chunk))
                .await
                .expect("an answer")
                .unwrap();
            assert!(n > 0, "closed before the answer");
            answer.extend_from_slice(&chunk[..n]);
        }
        assert!(get_on_a_new_connection(addr).await.ends_with("served"));
        stop.cancel();
    }
}
