//! Connection timeouts: silent, stalled and idle connections are closed;
//! watches, long-lived responses, are not.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{AsyncBufReadExt, TryStreamExt};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::Harness;

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

/// A TLS connection to the server, or `None` if it closed it first.
async fn tls_connect_fallible(h: &Harness) -> Option<Tls> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(h.server.ca_pem().as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = TcpStream::connect(h.server.addr()).await.ok()?;
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .ok()
}

async fn tls_connect(h: &Harness) -> Tls {
    tls_connect_fallible(h).await.expect("TLS handshake")
}

/// A server with these connection bounds (the rest as by default).
async fn with_timeouts(timeouts: wasmctrl_apiserver::Timeouts) -> Harness {
    Harness::start_with(wasmctrl_apiserver::Config {
        timeouts,
        ..Default::default()
    })
    .await
}

/// A new connection on which `GET path` (with the admin token and
/// `headers`, each ending in CRLF) was sent, nothing read.
async fn get_on_a_new_connection(h: &Harness, path: &str, headers: &str) -> Tls {
    let mut tls = tls_connect(h).await;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\n{headers}\r\n",
        h.server.token()
    );
    tls.write_all(request.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    tls
}

/// Reads until the server closes the connection (EOF or reset), at most
/// `limit`; returns how long that took.
async fn closed_within<S: tokio::io::AsyncRead + Unpin>(mut s: S, limit: Duration) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(limit.saturating_sub(started.elapsed()), s.read(&mut buf)).await
        {
            Err(_) => panic!("connection still open after {limit:?}"),
            Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => {}
        }
    }
}

/// Opens a watch on ConfigMaps and returns its line stream.
async fn watch_configmaps(
    h: &Harness,
) -> impl futures::Stream<Item = std::io::Result<String>> + Unpin {
    let client = h.client().await;
    let rv = h.server.resource_version();
    let req = http::Request::get(format!(
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}"
    ))
    .body(Vec::new())
    .unwrap();
    client.request_stream(req).await.unwrap().lines()
}

async fn create_cm(h: &Harness, name: &str) {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    let (code, _) = h
        .raw(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            None,
            &cm.to_string(),
        )
        .await;
    assert_eq!(code, 201);
}

async fn next_event(
    lines: &mut (impl futures::Stream<Item = std::io::Result<String>> + Unpin),
) -> serde_json::Value {
    let line = tokio::time::timeout(Duration::from_secs(10), lines.try_next())
        .await
        .expect("watch event in time")
        .expect("watch stream")
        .expect("watch still open");
    serde_json::from_str(&line).unwrap()
}

/// The default timeouts: every kind of silent or stalled connection is
/// closed within 15 s, while a watch opened before them keeps streaming.
#[tokio::test]
async fn silent_and_stalled_connections_close_but_watches_stream() {
    let h = Harness::start().await;
    let mut watch = watch_configmaps(&h).await;
    let limit = Duration::from_secs(15);

    let silent_tcp = async {
        let tcp = TcpStream::connect(h.server.addr()).await.unwrap();
        closed_within(tcp, limit).await
    };
    let silent_tls = async { closed_within(tls_connect(&h).await, limit).await };
    let stalled_head = async {
        let mut tls = tls_connect(&h).await;
        tls.write_all(b"GET /version HTTP/1.1\r\nHost: localhost\r\n")
            .await
            .unwrap();
        tls.flush().await.unwrap();
        closed_within(tls, limit).await
    };
    // Slowloris: a header byte every second never completes the head.
    let trickled_head = async {
        let mut tls = tls_connect(&h).await;
        let started = Instant::now();
        for b in b"GET /version HTTP/1.1\r\nX-Slow: ".iter().cycle() {
            if tls.write_all(&[*b]).await.is_err() || tls.flush().await.is_err() {
                break;
            }
            let mut buf = [0u8; 64];
            match tokio::time::timeout(Duration::from_secs(1), tls.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                _ => {}
            }
            assert!(started.elapsed() < limit, "trickling connection still open");
        }
        started.elapsed()
    };
    let (a, b, c, d) = tokio::join!(silent_tcp, silent_tls, stalled_head, trickled_head);
    eprintln!(
        "closed after: silent TCP {a:?}, silent TLS {b:?}, stalled head {c:?}, trickled head {d:?}"
    );
    // Each close was counted once, under the limit it ran into: the silent
    // TCP connection never finished TLS; the other three never sent a
    // complete request head.
    assert_eq!(h.server.limit_exceeded("tlsHandshake"), 1);
    assert_eq!(h.server.limit_exceeded("requestHead"), 3);
    assert_eq!(h.server.limit_exceeded("idleConnection"), 0);

    // The watch outlived all of that (> 10 s) and still delivers.
    create_cm(&h, "after-timeouts").await;
    let ev = next_event(&mut watch).await;
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(ev["object"]["metadata"]["name"], "after-timeouts");
}

/// Short configured timeouts: an idle keep-alive connection closes after
/// the idle timeout (not the shorter head timeout), and a watch lives on
/// across several idle timeouts.
#[tokio::test]
async fn idle_keep_alive_closes_and_watches_outlive_it() {
    let timeouts = wasmctrl_apiserver::Timeouts {
        tls_handshake: Duration::from_secs(1),
        request_head: Duration::from_secs(1),
        idle: Duration::from_secs(3),
        ..Default::default()
    };
    let h = with_timeouts(timeouts).await;
    let mut watch = watch_configmaps(&h).await;

    let mut tls = get_on_a_new_connection(&h, "/version", "").await;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("gitVersion") {
        let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut buf))
            .await
            .expect("response in time")
            .unwrap();
        assert!(n > 0, "closed before answering");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"));
    let idle_for = closed_within(tls, Duration::from_secs(10)).await;
    assert!(
        idle_for >= Duration::from_secs(2),
        "an idle connection lives for the idle timeout, not the head timeout: {idle_for:?}"
    );
    assert_eq!(h.server.limit_exceeded("idleConnection"), 1);
    assert_eq!(h.server.limit_exceeded("requestHead"), 0);

    // The watch has now been open longer than two idle timeouts.
    tokio::time::sleep(Duration::from_secs(4)).await;
    create_cm(&h, "still-watching").await;
    let ev = next_event(&mut watch).await;
    assert_eq!(ev["object"]["metadata"]["name"], "still-watching");
}

/// A body that does not arrive within the body timeout (here 1 s; 60 s by
/// default) is answered 504 on the same connection, and counted.
#[tokio::test]
async fn a_slow_body_is_answered_504() {
    let timeouts = wasmctrl_apiserver::Timeouts {
        request_body: Duration::from_secs(1),
        ..Default::default()
    };
    let h = with_timeouts(timeouts).await;
    let mut tls = tls_connect(&h).await;
    let head = format!(
        "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: localhost\r\n\
         Authorization: Bearer {}\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{{\"apiVersion\":",
        h.server.token()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("\"code\":504") {
        let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut buf))
            .await
            .expect("answered in time")
            .unwrap();
        assert!(
            n > 0,
            "closed before answering: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 504"), "{text}");
    assert!(
        text.contains("request body not received within 1s"),
        "{text}"
    );
    assert_eq!(h.server.limit_exceeded("bodyTime"), 1);
    assert_eq!(h.server.limit_exceeded("requestBody"), 0);
}

/// A watcher that stops reading is closed once more than 16 MiB wait for
/// it (counted as `slowWatcher`); the server holds no more for it, and
/// other clients go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_stops_reading_is_let_go_past_its_queued_bytes() {
    let h = Harness::start().await;
    create_cm(&h, "big").await;
    let tls = silent_watch(&h).await;
    // It reads nothing from here on. Forty updates of 1 MiB each: more than
    // the 16 MiB a watch may hold for its client, and the socket's buffers.
    let before = h.server.limit_exceeded("slowWatcher");
    for i in 0..40 {
        update_big(&h, i).await;
        if h.server.limit_exceeded("slowWatcher") > before {
            break;
        }
    }
    wasmctrl_testkit::eventually(
        "the silent watcher let go",
        Duration::from_secs(60),
        || async { (h.server.limit_exceeded("slowWatcher") > before).then_some(()) },
    )
    .await;
    drop(tls);
}

/// Past its connections at once, the server closes a new connection
/// unanswered (counted as `connections`), and serves again once one ends.
#[tokio::test]
async fn connections_past_the_cap_are_closed_at_once() {
    let h = with_timeouts(wasmctrl_apiserver::Timeouts {
        max_connections: 2,
        ..Default::default()
    })
    .await;
    let held = [tls_connect(&h).await, tls_connect(&h).await];
    let third = TcpStream::connect(h.server.addr()).await.unwrap();
    closed_within(third, Duration::from_secs(5)).await;
    assert_eq!(h.server.limit_exceeded("connections"), 1);
    drop(held);
    wasmctrl_testkit::eventually("a connection served again", Duration::from_secs(30), || async {
        let mut tls = tls_connect(&h).await;
        let request = format!(
            "GET /version HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            h.server.token()
        );
        tls.write_all(request.as_bytes()).await.ok()?;
        let mut got = Vec::new();
        let _ = tls.read_to_end(&mut got).await;
        String::from_utf8_lossy(&got).contains("gitVersion").then_some(())
    })
    .await;
}

/// One address may hold only so many connections that have sent no
/// request: past them a new one is closed unanswered (counted as
/// `peerConnections`); a connection that sent a request no longer counts.
#[tokio::test]
async fn an_address_holds_a_bounded_number_of_connections_without_a_request() {
    let h = with_timeouts(wasmctrl_apiserver::Timeouts {
        max_unproven_per_peer: 3,
        count_loopback_peers: true,
        ..Default::default()
    })
    .await;
    let mut held = vec![
        tls_connect(&h).await,
        tls_connect(&h).await,
        tls_connect(&h).await,
    ];
    let fourth = TcpStream::connect(h.server.addr()).await.unwrap();
    closed_within(fourth, Duration::from_secs(5)).await;
    assert_eq!(h.server.limit_exceeded("peerConnections"), 1);

    held.pop();
    let answered = wasmctrl_testkit::eventually(
        "a connection from the address served again",
        Duration::from_secs(30),
        || async {
            let mut tls = tls_connect_fallible(&h).await?;
            let request = format!(
                "GET /version HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {}\r\n\r\n",
                h.server.token()
            );
            tls.write_all(request.as_bytes()).await.ok()?;
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !String::from_utf8_lossy(&got).contains("gitVersion") {
                let n = tls.read(&mut buf).await.ok()?;
                if n == 0 {
                    return None;
                }
                got.extend_from_slice(&buf[..n]);
            }
            Some(tls)
        },
    )
    .await;
    // Two without a request and one that sent one: room for one more.
    held.push(tls_connect(&h).await);
    let refused_before = h.server.limit_exceeded("peerConnections");
    let over = TcpStream::connect(h.server.addr()).await.unwrap();
    closed_within(over, Duration::from_secs(5)).await;
    assert_eq!(
        h.server.limit_exceeded("peerConnections"),
        refused_before + 1
    );
    drop((held, answered));
}

/// A `timeoutSeconds` too large to add to the current time is no timeout:
/// the watch streams as any other.
#[tokio::test]
async fn a_watch_timeout_too_large_to_add_is_no_timeout() {
    let h = Harness::start().await;
    let client = h.client().await;
    let rv = h.server.resource_version();
    let req = http::Request::get(format!(
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds={}",
        u64::MAX
    ))
    .body(Vec::new())
    .unwrap();
    let mut watch = client.request_stream(req).await.unwrap().lines();
    create_cm(&h, "after-a-huge-timeout").await;
    let ev = next_event(&mut watch).await;
    assert_eq!(ev["type"], "ADDED");
    assert_eq!(ev["object"]["metadata"]["name"], "after-a-huge-timeout");
}

const BIG_LIST: &str = "/api/v1/namespaces/default/configmaps";

/// Stores twelve ConfigMaps of 1 MiB (more than both ends' socket buffers
/// hold until the client reads) and asks for their list on a connection
/// it returns, having read nothing.
async fn silent_list(h: &Harness) -> Tls {
    for i in 0..12 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("big-{i}")}, "data": {"v": "x".repeat(1 << 20)}});
        let (code, body) = h.raw("POST", BIG_LIST, None, &cm.to_string()).await;
        assert_eq!(code, 201, "{body}");
    }
    get_on_a_new_connection(h, BIG_LIST, "").await
}

/// Gives ConfigMap `big` a new value of 1 MiB (the `i`th): an event of
/// that size for every watcher.
async fn update_big(h: &Harness, i: usize) {
    let patch = json!({"data": {"v": format!("{i}{}", "x".repeat(1 << 20))}});
    let (code, body) = h
        .raw(
            "PATCH",
            "/api/v1/namespaces/default/configmaps/big",
            Some("application/merge-patch+json"),
            &patch.to_string(),
        )
        .await;
    assert_eq!(code, 200, "{body}");
}

/// A watch of ConfigMaps from now, asked on a connection it returns,
/// having read nothing.
async fn silent_watch(h: &Harness) -> Tls {
    let path = format!(
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={}",
        h.server.resource_version()
    );
    get_on_a_new_connection(h, &path, "").await
}

/// A client that asks for a list and reads none of it is let go once the
/// response's writes make no progress for the write timeout (here 2 s;
/// 60 s by default), and the list's body with it, counted as
/// `responseWrite`. Before, the connection and the body were held for as
/// long as the client kept the socket open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_the_client_never_reads_is_let_go() {
    let h = with_timeouts(wasmctrl_apiserver::Timeouts {
        response_write: Duration::from_secs(2),
        ..Default::default()
    })
    .await;
    let _tls = silent_list(&h).await;
    // It reads nothing.
    wasmctrl_testkit::eventually(
        "the unread list's connection closed",
        Duration::from_secs(30),
        || async { (h.server.limit_exceeded("responseWrite") == 1).then_some(()) },
    )
    .await;
    // The server is fine and answers others meanwhile.
    let (code, _) = h.raw("GET", "/version", None, "").await;
    assert_eq!(code, 200);
}

/// A request without valid credentials is answered 401 and its connection
/// closed, so unauthenticated clients cannot hold connection slots for
/// the idle timeout.
#[tokio::test]
async fn an_unauthenticated_request_does_not_keep_its_connection() {
    let h = Harness::start().await;
    let mut tls = tls_connect(&h).await;
    tls.write_all(
        b"GET /version HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer wrong\r\n\r\n",
    )
    .await
    .unwrap();
    tls.flush().await.unwrap();
    let mut got = Vec::new();
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), tls.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!("connection still open after {:?}", started.elapsed()),
        }
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 401"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
}

/// List answers on their way to clients hold a server-wide budget (here
/// 4 MiB; 512 MiB by default): while a client that reads nothing holds
/// a list past it, another list is answered 429, counted as `listBytes`,
/// and once that client goes, lists are served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_answers_in_flight_hold_a_budget() {
    let h = with_timeouts(wasmctrl_apiserver::Timeouts {
        max_list_bytes: 4 << 20,
        ..Default::default()
    })
    .await;
    let mut tls = silent_list(&h).await;
    // Its answer has begun (so it holds its share), and it reads no more.
    let mut head = [0u8; 12];
    tls.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    // The silent client's list is being sent; the next is refused. (Asked
    // on a connection of its own: kube's client retries a 429 itself.)
    let mut other = get_on_a_new_connection(&h, BIG_LIST, "Connection: close\r\n").await;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), other.read_to_end(&mut answer))
        .await
        .expect("answered")
        .ok();
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 429"),
        "{}",
        &answer[..answer.len().min(300)]
    );
    assert!(
        answer.contains("\"reason\":\"TooManyRequests\""),
        "{answer}"
    );
    assert!(answer.contains("\"retryAfterSeconds\":1"), "{answer}");
    assert_eq!(h.server.limit_exceeded("listBytes"), 1);
    drop(tls);
    wasmctrl_testkit::eventually("lists served again", Duration::from_secs(30), || async {
        let (code, body) = h.raw("GET", BIG_LIST, None, "").await;
        (code == 200 && body["items"].as_array().is_some_and(|i| i.len() == 12)).then_some(())
    })
    .await;
}

/// What all watches have waiting for their clients holds a server-wide
/// bound (here 2 MiB; 512 MiB by default): two watchers that read nothing
/// fall behind (410, counted as `slowWatcher`) within twelve updates of
/// 1 MiB, each far below the 16 MiB one watch may hold alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bytes_all_watches_hold_for_their_clients_are_bounded() {
    let h = with_timeouts(wasmctrl_apiserver::Timeouts {
        max_watch_bytes: 2 << 20,
        ..Default::default()
    })
    .await;
    create_cm(&h, "big").await;
    let mut silent = Vec::new();
    for _ in 0..2 {
        silent.push(silent_watch(&h).await);
    }
    let before = h.server.limit_exceeded("slowWatcher");
    for i in 0..12 {
        update_big(&h, i).await;
    }
    wasmctrl_testkit::eventually(
        "a silent watcher let go under the server's bound",
        Duration::from_secs(30),
        || async { (h.server.limit_exceeded("slowWatcher") > before).then_some(()) },
    )
    .await;
    // A watch that reads still gets what happens next.
    let mut watch = watch_configmaps(&h).await;
    create_cm(&h, "after").await;
    assert_eq!(
        next_event(&mut watch).await["object"]["metadata"]["name"],
        "after"
    );
    drop(silent);
}
