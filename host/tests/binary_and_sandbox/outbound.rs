//! Outbound HTTP under the grant, through a real component
//! (`plugins/testing/outbound`, whose settings choose each key's request)
//! and a server on loopback: what the grant allows is sent and answered;
//! everything else fails only its reconcile, with an error naming the rule
//! or ceiling, counted in `wasmctrl_plugin_http_denied_total`, and nothing
//! reaches the server.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wasmctrl::sandbox::outbound::{OutboundGrant, OutboundLimits, OutboundRule};
use wasmctrl::sandbox::{Plugin, PluginSpec, Runtime};
use wasmctrl::{Action, ReconcileError, TrapKind};
use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::eventually;

use crate::{TIMEOUT, request, runtime};

mod dns;
mod replay;
mod secrets;
mod tls;

/// A loopback HTTP/1.1 server answering by path, counting what it got and
/// keeping each request's head.
pub(crate) struct Server {
    addr: SocketAddr,
    seen: Arc<Seen>,
}

#[derive(Default)]
struct Seen {
    hits: Mutex<HashMap<String, u32>>,
    heads: Mutex<Vec<String>>,
    /// Body bytes `/big` wrote before its client went away, summed over
    /// the answers that ended.
    big_sent: AtomicU64,
    big_ended: AtomicU32,
    /// The `x-store` header of the last request to `/store`.
    stored: Mutex<String>,
}

impl Server {
    pub(crate) async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Seen> = Arc::default();
        let kept = seen.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(answer(conn, kept.clone()));
            }
        });
        Self { addr, seen }
    }

    pub(crate) fn port(&self) -> u16 {
        self.addr.port()
    }

    pub(crate) fn hits(&self, path: &str) -> u32 {
        self.seen
            .hits
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    pub(crate) fn total(&self) -> u32 {
        self.seen.hits.lock().unwrap().values().sum()
    }

    /// What `/store` last kept.
    pub(crate) fn stored(&self) -> String {
        self.seen.stored.lock().unwrap().clone()
    }

    /// The heads of the requests received, in order.
    pub(crate) fn heads(&self) -> Vec<String> {
        self.seen.heads.lock().unwrap().clone()
    }
}

/// Answers one request, then closes the connection.
async fn answer(mut conn: TcpStream, seen: Arc<Seen>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 << 10 {
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let path = text.split_whitespace().nth(1).unwrap_or("").to_string();
    *seen.hits.lock().unwrap().entry(path.clone()).or_default() += 1;
    seen.heads.lock().unwrap().push(text.clone());
    let plain = |status: &str, body: &str| {
        format!(
            "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    match path.as_str() {
        "/echo" => {
            // A server that echoes its request: its authorization in a
            // header, the whole head in the body.
            let auth = text
                .lines()
                .find_map(|l| l.strip_prefix("authorization: "))
                .unwrap_or("")
                .to_string();
            let r = format!(
                "HTTP/1.1 200 OK\r\nx-echo-authorization: {auth}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                text.len()
            );
            let _ = conn.write_all(r.as_bytes()).await;
        }
        "/echo-repeated" => {
            // A server that echoes its bearer token over and over: 256 KiB.
            let token = text
                .lines()
                .find_map(|l| l.strip_prefix("authorization: Bearer "))
                .unwrap_or("-")
                .to_string();
            let body = token.repeat((256 << 10) / token.len().max(1));
            let _ = conn.write_all(plain("200 OK", &body).as_bytes()).await;
        }
        "/store" => {
            // A server that keeps a header as a field of its own.
            let value = text
                .lines()
                .find_map(|l| l.strip_prefix("x-store: "))
                .unwrap_or("")
                .to_string();
            *seen.stored.lock().unwrap() = value;
            let _ = conn.write_all(plain("200 OK", "kept").as_bytes()).await;
        }
        "/stored" => {
            let value = seen.stored.lock().unwrap().clone();
            let _ = conn.write_all(plain("200 OK", &value).as_bytes()).await;
        }
        "/encoded" => {
            // A server that compresses whatever the client asked for.
            let r = "HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: 4\r\nconnection: close\r\n\r\n\x1f\x08\x08\x00";
            let _ = conn.write_all(r.as_bytes()).await;
        }
        "/redirect" => {
            let r = "HTTP/1.1 302 Found\r\nlocation: http://evil.test/stolen\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
            let _ = conn.write_all(r.as_bytes()).await;
        }
        "/big" => {
            // Chunked, so only counting the body finds its size, and
            // endless for any client: 1 GiB. What it managed to write shows
            // how much the client took before it hung up.
            let _ = conn
                .write_all(
                    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
                )
                .await;
            let chunk = vec![b'b'; 16 << 10];
            let mut sent = 0u64;
            for _ in 0..(1u64 << 30) / chunk.len() as u64 {
                let mut frame = format!("{:x}\r\n", chunk.len()).into_bytes();
                frame.extend_from_slice(&chunk);
                frame.extend_from_slice(b"\r\n");
                if conn.write_all(&frame).await.is_err() {
                    break;
                }
                sent += chunk.len() as u64;
            }
            seen.big_sent.fetch_add(sent, Ordering::SeqCst);
            seen.big_ended.fetch_add(1, Ordering::SeqCst);
        }
        "/head-announced" => {
            // What a HEAD is answered with: the length of a body not sent.
            let r = "HTTP/1.1 200 OK\r\ncontent-length: 5242880\r\nconnection: close\r\n\r\n";
            let _ = conn.write_all(r.as_bytes()).await;
        }
        "/not-modified" => {
            let r =
                "HTTP/1.1 304 Not Modified\r\ncontent-length: 5242880\r\nconnection: close\r\n\r\n";
            let _ = conn.write_all(r.as_bytes()).await;
        }
        "/big-announced" => {
            let body = "b".repeat(256 << 10);
            let _ = conn.write_all(plain("200 OK", &body).as_bytes()).await;
        }
        "/trickle" => {
            let _ = conn
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\nconnection: close\r\n\r\n")
                .await;
            for _ in 0..100 {
                if conn.write_all(b"t").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        _ => {
            let _ = conn.write_all(plain("200 OK", "hello").as_bytes()).await;
        }
    }
}

pub(crate) fn rule(url: &str, methods: &[&str], private: bool) -> OutboundRule {
    OutboundRule {
        url: url.into(),
        methods: methods.iter().map(|m| m.to_string()).collect(),
        private,
    }
}

/// The test grant: GET and PUT to the server by name (loopback, hence
/// `private`), and the subdomains of `allowed.test`.
fn grant(server: &Server, limits: OutboundLimits) -> OutboundGrant {
    let port = server.port();
    OutboundGrant::new(
        vec![
            rule(&format!("http://localhost:{port}"), &["GET", "PUT"], true),
            rule(&format!("http://*.allowed.test:{port}"), &[], false),
        ],
        limits,
    )
    .unwrap()
}

/// The outbound test plugin with `cases` (key name → request) under `grant`.
pub(crate) async fn plugin(
    rt: &Runtime,
    cases: serde_json::Value,
    grant: OutboundGrant,
) -> Arc<Plugin> {
    let spec = PluginSpec {
        settings: json!({ "cases": cases }),
        outbound: Arc::new(grant),
        ..crate::spec("outbound")
    };
    rt.load_file(artifacts::OUTBOUND, spec)
        .await
        .expect("the outbound plugin loads")
}

/// One reconcile as the controller runs it (its cost and ceilings counted
/// in the plugin's metrics).
pub(crate) async fn run(
    plugin: &Plugin,
    key: &str,
    timeout: Duration,
) -> Result<Action, ReconcileError> {
    wasmctrl::Reconcile::reconcile(plugin, request(key, timeout)).await
}

/// `wasmctrl_plugin_http_denied_total{plugin="outbound",reason}`.
pub(crate) fn denied(rt: &Runtime, reason: &str) -> u64 {
    let text = rt.metrics().encode();
    let series =
        format!("wasmctrl_plugin_http_denied_total{{plugin=\"outbound\",reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// The refusal a reconcile failed with: its trap kind and message.
pub(crate) fn refusal(result: &Result<Action, ReconcileError>) -> (TrapKind, &str) {
    match result {
        Err(ReconcileError::Trap { kind, message }) => (*kind, message.as_str()),
        other => panic!("expected a refused request, got {other:?}"),
    }
}

#[tokio::test]
async fn an_allowed_get_is_sent_and_answered_and_counted() {
    let server = Server::start().await;
    let rt = runtime();
    let url = format!("http://localhost:{}/ok", server.port());
    let p = plugin(
        &rt,
        json!({ "ok": { "url": url } }),
        grant(&server, OutboundLimits::default()),
    )
    .await;
    assert_eq!(run(&p, "ok", TIMEOUT).await, Ok(Action::done()));
    assert_eq!(server.hits("/ok"), 1);
    let metrics = rt.metrics().encode();
    let sent = format!(
        "wasmctrl_plugin_http_requests_total{{plugin=\"outbound\",version=\"stable\",host=\"localhost:{}\",code=\"200\"}} 1",
        server.port()
    );
    assert!(metrics.contains(&sent), "{metrics}");
    assert!(metrics.contains("wasmctrl_plugin_http_request_duration_seconds_count{plugin=\"outbound\",version=\"stable\"} 1"));
}

/// Each destination the grant does not name is refused before anything is
/// sent: the reconcile fails naming why, the host serves the next one.
#[tokio::test]
async fn destinations_outside_the_grant_fail_only_their_reconcile_naming_why() {
    let server = Server::start().await;
    let admin = Server::start().await;
    let rt = runtime();
    let port = server.port();
    let cases = json!({
        "elsewhere": { "url": format!("http://elsewhere.test:{port}/ok") },
        "apex": { "url": format!("http://allowed.test:{port}/ok") },
        "userinfo": { "url": format!("http://localhost@evil.test:{port}/ok") },
        "decimal": { "url": format!("http://2130706433:{port}/ok") },
        "octal": { "url": format!("http://0177.0.0.1:{port}/ok") },
        "mapped": { "url": format!("http://[::ffff:127.0.0.1]:{port}/ok") },
        "admin-port": { "url": format!("http://localhost:{}/metrics", admin.port()) },
        "https-for-http": { "url": format!("https://localhost:{port}/ok") },
        "method": { "method": "DELETE", "url": format!("http://localhost:{port}/ok") },
        "ok": { "url": format!("http://localhost:{port}/ok") },
    });
    let p = plugin(&rt, cases, grant(&server, OutboundLimits::default())).await;
    for (key, reason, says) in [
        ("elsewhere", "notAllowed", "GET http://elsewhere.test"),
        ("apex", "notAllowed", "http://allowed.test"),
        ("userinfo", "url", "userinfo"),
        ("decimal", "notAllowed", "http://127.0.0.1"),
        ("octal", "notAllowed", "http://127.0.0.1"),
        ("mapped", "notAllowed", "http://127.0.0.1"),
        (
            "admin-port",
            "notAllowed",
            &format!("localhost:{}", admin.port()),
        ),
        ("https-for-http", "notAllowed", "https://localhost"),
        ("method", "notAllowed", "DELETE"),
    ] {
        let before = denied(&rt, reason);
        let result = run(&p, key, TIMEOUT).await;
        let (kind, message) = refusal(&result);
        assert_eq!(kind, TrapKind::Other, "{key}: {message}");
        assert!(
            message.starts_with("outbound request refused: ") && message.contains(says),
            "{key}: {message}"
        );
        if reason == "notAllowed" {
            assert!(
                message.contains("its rules: http://localhost:"),
                "{key}: {message}"
            );
        }
        assert_eq!(denied(&rt, reason), before + 1, "{key}");
    }
    assert_eq!(server.total(), 0, "a refused request reached the server");
    assert_eq!(admin.total(), 0, "a refused request reached the admin port");
    // The host is still there for what the grant allows.
    assert_eq!(run(&p, "ok", TIMEOUT).await, Ok(Action::done()));
    assert_eq!(server.hits("/ok"), 1);
}

/// A name that resolves to loopback is refused unless its rule says
/// `private: true` (or names the address itself).
#[tokio::test]
async fn a_name_resolving_to_loopback_needs_private() {
    let server = Server::start().await;
    let rt = runtime();
    let port = server.port();
    let url = format!("http://localhost:{port}/ok");
    let public_only = OutboundGrant::new(
        vec![rule(&format!("http://localhost:{port}"), &[], false)],
        OutboundLimits::default(),
    )
    .unwrap();
    let p = plugin(&rt, json!({ "ok": { "url": url } }), public_only).await;
    let result = run(&p, "ok", TIMEOUT).await;
    let (_, message) = refusal(&result);
    assert!(
        message.contains("resolves to 127.0.0.1, an internal address")
            && message.contains("outbound[0] (http://localhost:"),
        "{message}"
    );
    assert_eq!(denied(&rt, "internalAddress"), 1);
    assert_eq!(server.total(), 0);

    let literal = OutboundGrant::new(
        vec![rule(&format!("http://127.0.0.1:{port}"), &[], false)],
        OutboundLimits::default(),
    )
    .unwrap();
    let url = format!("http://127.0.0.1:{port}/ok");
    let p = plugin(&rt, json!({ "ok": { "url": url } }), literal).await;
    assert_eq!(run(&p, "ok", TIMEOUT).await, Ok(Action::done()));
    assert_eq!(server.hits("/ok"), 1);
}

/// A plugin granted nothing has every request refused, and nothing leaves.
#[tokio::test]
async fn without_a_grant_every_request_is_refused() {
    let server = Server::start().await;
    let rt = runtime();
    let url = format!("http://localhost:{}/ok", server.port());
    let p = plugin(
        &rt,
        json!({ "ok": { "url": url } }),
        OutboundGrant::default(),
    )
    .await;
    let result = run(&p, "ok", TIMEOUT).await;
    let (_, message) = refusal(&result);
    assert!(
        message.contains("outbound is denied by default"),
        "{message}"
    );
    assert_eq!(server.total(), 0);
}

#[tokio::test]
async fn a_redirect_is_handed_to_the_guest_not_followed() {
    let server = Server::start().await;
    let rt = runtime();
    let url = format!("http://localhost:{}/redirect", server.port());
    let p = plugin(
        &rt,
        json!({ "redirect": { "url": url, "expect": 302 } }),
        grant(&server, OutboundLimits::default()),
    )
    .await;
    assert_eq!(run(&p, "redirect", TIMEOUT).await, Ok(Action::done()));
    assert_eq!(server.hits("/redirect"), 1);
    assert_eq!(server.hits("/stolen"), 0);
}

#[tokio::test]
async fn a_response_over_its_ceiling_fails_the_reconcile_naming_the_limit() {
    let server = Server::start().await;
    let rt = runtime();
    let port = server.port();
    let limits = OutboundLimits {
        response_bytes: 64 << 10,
        ..OutboundLimits::default()
    };
    let cases = json!({
        "big": { "url": format!("http://localhost:{port}/big") },
        "announced": { "url": format!("http://localhost:{port}/big-announced") },
    });
    let p = plugin(&rt, cases, grant(&server, limits)).await;
    for key in ["big", "announced"] {
        let result = run(&p, key, TIMEOUT).await;
        let (kind, message) = refusal(&result);
        assert_eq!(kind, TrapKind::Limit, "{key}: {message}");
        assert!(
            message.contains("limits.httpResponseBytes"),
            "{key}: {message}"
        );
    }
    assert_eq!(denied(&rt, "responseBytes"), 2);
    let metrics = rt.metrics().encode();
    assert!(
        metrics.contains("wasmctrl_plugin_limit_exceeded_total{plugin=\"outbound\",limit=\"httpResponseBytes\",version=\"stable\"} 2"),
        "{metrics}"
    );
    // The host hung up at its ceiling rather than reading on: a 1 GiB answer
    // ends having written its ceiling and what the sockets' buffers hold.
    let ended = || {
        let n = server.seen.big_ended.load(Ordering::SeqCst);
        async move { n == 1 }
    };
    eventually("the endless answer to end", Duration::from_secs(30), ended).await;
    let sent = server.seen.big_sent.load(Ordering::SeqCst);
    assert!(
        sent < 64 << 20,
        "the host read {sent} bytes of a 1 GiB answer"
    );
}

/// The length a HEAD or a 304 announces is of a body they do not carry:
/// it is not held against the response ceiling.
#[tokio::test]
async fn answers_without_a_body_are_not_held_to_the_length_they_announce() {
    let server = Server::start().await;
    let rt = runtime();
    let port = server.port();
    let limits = OutboundLimits {
        response_bytes: 64 << 10,
        ..OutboundLimits::default()
    };
    let everything = OutboundGrant::new(
        vec![rule(&format!("http://localhost:{port}"), &[], true)],
        limits,
    )
    .unwrap();
    let cases = json!({
        "head": { "method": "HEAD", "url": format!("http://localhost:{port}/head-announced") },
        "cached": { "url": format!("http://localhost:{port}/not-modified"), "expect": 304 },
        "big": { "url": format!("http://localhost:{port}/big-announced") },
    });
    let p = plugin(&rt, cases, everything).await;
    assert_eq!(run(&p, "head", TIMEOUT).await, Ok(Action::done()));
    assert_eq!(run(&p, "cached", TIMEOUT).await, Ok(Action::done()));
    // A body that is sent still is.
    let result = run(&p, "big", TIMEOUT).await;
    let (kind, message) = refusal(&result);
    assert_eq!(kind, TrapKind::Limit, "{message}");
    assert_eq!(denied(&rt, "responseBytes"), 1);
}

/// HTTP bounds no method, and a refusal quotes it: a method past 32 bytes
/// is refused before anything else, and nothing is sent.
#[tokio::test]
async fn a_method_past_its_bound_is_refused_naming_its_length() {
    let server = Server::start().await;
    let rt = runtime();
    let port = server.port();
    let everything = OutboundGrant::new(
        vec![rule(&format!("http://localhost:{port}"), &[], true)],
        OutboundLimits::default(),
    )
    .unwrap();
    let long = "X".repeat(4096);
    let cases = json!({
        "long": { "method": long, "url": format!("http://localhost:{port}/ok") },
        "extension": { "method": "PROPFIND", "url": format!("http://localhost:{port}/ok") },
    });
    let p = plugin(&rt, cases, everything).await;
    let result = run(&p, "long", TIMEOUT).await;
    let (kind, message) = refusal(&result);
    assert_eq!(kind, TrapKind::Other, "{message}");
    assert!(
        message.contains("a request method of 4096 bytes is refused: at most 32"),
        "{message}"
    );
    assert!(message.len() < 200, "{message}");
    assert_eq!(denied(&rt, "url"), 1);
    assert_eq!(server.total(), 0);
    assert_eq!(run(&p, "extension", TIMEOUT).await, Ok(Action::done()));
    assert_eq!(server.hits("/ok"), 1);
}

#[tokio::test]
async fn a_request_body_over_its_ceiling_is_cut_off_and_named() {
    let server = Server::start().await;
    let rt = runtime();
    let limits = OutboundLimits {
        request_bytes: 4 << 10,
        ..OutboundLimits::default()
    };
    let url = format!("http://localhost:{}/put", server.port());
    let cases = json!({ "put": { "method": "PUT", "url": url, "body_bytes": 64 << 10 } });
    let p = plugin(&rt, cases, grant(&server, limits)).await;
    let result = run(&p, "put", TIMEOUT).await;
    let (kind, message) = refusal(&result);
    assert_eq!(kind, TrapKind::Limit, "{message}");
    assert!(message.contains("limits.httpRequestBytes"), "{message}");
    assert_eq!(denied(&rt, "requestBytes"), 1);
}

/// A server that trickles its body one byte a second cannot hold the
/// reconcile past its deadline.
#[tokio::test]
async fn a_trickling_server_ends_at_the_reconcile_s_deadline() {
    let server = Server::start().await;
    let rt = runtime();
    let url = format!("http://localhost:{}/trickle", server.port());
    let p = plugin(
        &rt,
        json!({ "trickle": { "url": url } }),
        grant(&server, OutboundLimits::default()),
    )
    .await;
    let timeout = Duration::from_millis(1500);
    let started = Instant::now();
    let result = run(&p, "trickle", timeout).await;
    let took = started.elapsed();
    assert!(result.is_err(), "{result:?}");
    assert!(took >= timeout, "ended before the deadline: {took:?}");
    assert!(
        took < timeout + Duration::from_secs(1),
        "ran {took:?} past a {timeout:?} deadline"
    );
    let message = result.unwrap_err().to_string();
    assert!(message.contains("deadline"), "{message}");
    eventually(
        "the deadline refusal is counted",
        Duration::from_secs(5),
        || async { (denied(&rt, "deadline") >= 1).then_some(()) },
    )
    .await;
}

/// While one reconcile holds the plugin's only connection (a trickling
/// answer), another reconcile's request is refused, not queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_plugin_s_ceiling_are_refused() {
    let server = Server::start().await;
    let rt = runtime();
    let port = server.port();
    let limits = OutboundLimits {
        connections: 1,
        ..OutboundLimits::default()
    };
    let cases = json!({
        "trickle": { "url": format!("http://localhost:{port}/trickle") },
        "ok": { "url": format!("http://localhost:{port}/ok") },
    });
    let p = plugin(&rt, cases, grant(&server, limits)).await;
    let holder = {
        let p = p.clone();
        tokio::spawn(async move { run(&p, "trickle", Duration::from_secs(3)).await })
    };
    eventually(
        "the trickle holds the connection",
        Duration::from_secs(10),
        || async { (server.hits("/trickle") == 1).then_some(()) },
    )
    .await;
    let result = run(&p, "ok", TIMEOUT).await;
    let (kind, message) = refusal(&result);
    assert_eq!(kind, TrapKind::Limit, "{message}");
    assert!(message.contains("limits.httpConnections"), "{message}");
    assert_eq!(server.hits("/ok"), 0);
    assert_eq!(denied(&rt, "connections"), 1);
    assert!(holder.await.unwrap().is_err());
    // The connection went with the reconcile that held it.
    eventually(
        "the connection is given back",
        Duration::from_secs(10),
        || async { (run(&p, "ok", TIMEOUT).await == Ok(Action::done())).then_some(()) },
    )
    .await;
}

/// A thousand requests in one reconcile: the one past `limits.httpRequests`
/// fails the reconcile; none past it is sent.
#[tokio::test]
async fn a_thousand_requests_stop_at_the_request_ceiling() {
    let server = Server::start().await;
    let rt = runtime();
    let url = format!("http://localhost:{}/ok", server.port());
    let p = plugin(
        &rt,
        json!({ "flood": { "url": url, "repeat": 1000 } }),
        grant(&server, OutboundLimits::default()),
    )
    .await;
    let result = run(&p, "flood", Duration::from_secs(30)).await;
    let (kind, message) = refusal(&result);
    assert_eq!(kind, TrapKind::Limit, "{message}");
    assert!(
        message.contains(
            "request 101 of this reconcile is past its ceiling of 100 (limits.httpRequests)"
        ),
        "{message}"
    );
    assert_eq!(server.hits("/ok"), 100);
    assert_eq!(denied(&rt, "requests"), 1);
    // The next reconcile has its own budget.
    let again = run(&p, "flood", Duration::from_secs(30)).await;
    assert!(again.is_err());
    assert_eq!(server.hits("/ok"), 200);
}

/// A shadow candidate's grant sends GET and HEAD only: anything else may
/// write to the outside world.
#[tokio::test]
async fn a_read_only_grant_refuses_writes_before_sending() {
    let server = Server::start().await;
    let rt = runtime();
    let url = format!("http://localhost:{}/put", server.port());
    let cases = json!({
        "put": { "method": "PUT", "url": url },
        "get": { "url": url },
    });
    let p = plugin(
        &rt,
        cases,
        grant(&server, OutboundLimits::default()).read_only(),
    )
    .await;
    let result = run(&p, "put", TIMEOUT).await;
    let (_, message) = refusal(&result);
    assert!(
        message.contains("a shadow candidate sends only GET and HEAD"),
        "{message}"
    );
    assert_eq!(server.total(), 0);
    assert_eq!(run(&p, "get", TIMEOUT).await, Ok(Action::done()));
    assert_eq!(server.total(), 1);
}

/// Servers that read a method-override header take it as the method: a
/// GET that names DELETE there is judged as a DELETE, by the grant's rules
/// and by a read-only grant, and nothing is sent.
#[tokio::test]
async fn a_method_override_header_is_judged_as_the_method_it_names() {
    let server = Server::start().await;
    let rt = runtime();
    let url = format!("http://localhost:{}/ok", server.port());
    let cases = json!({
        "delete": { "url": url, "headers": [["X-HTTP-Method-Override", "delete"]] },
        "put": { "url": url, "headers": [["X-Method-Override", "PUT"]] },
        "garbled": { "url": url, "headers": [["X-HTTP-Method", "x".repeat(64)]] },
    });
    // GET and PUT to the server: a DELETE in disguise has no rule.
    let p = plugin(
        &rt,
        cases.clone(),
        grant(&server, OutboundLimits::default()),
    )
    .await;
    let deleted = run(&p, "delete", TIMEOUT).await;
    let (_, message) = refusal(&deleted);
    assert!(
        message.contains("DELETE http://localhost:")
            && message.contains("no rule of the plugin's outbound grant allows it"),
        "{message}"
    );
    let garbled = run(&p, "garbled", TIMEOUT).await;
    let (_, message) = refusal(&garbled);
    assert!(
        message.contains("a x-http-method header of 64 bytes that is not a method is refused"),
        "{message}"
    );
    assert_eq!(server.total(), 0);
    // PUT is granted, so a GET that names it is sent.
    assert_eq!(run(&p, "put", TIMEOUT).await, Ok(Action::done()));
    assert_eq!(server.hits("/ok"), 1);
    // A shadow candidate sends no PUT, whatever header carries it.
    let shadow = plugin(
        &rt,
        cases,
        grant(&server, OutboundLimits::default()).read_only(),
    )
    .await;
    let shadowed = run(&shadow, "put", TIMEOUT).await;
    let (_, message) = refusal(&shadowed);
    assert!(
        message.contains("PUT http://localhost:")
            && message.contains("a shadow candidate sends only GET and HEAD"),
        "{message}"
    );
    assert_eq!(server.hits("/ok"), 1);
}

/// The component declares its destinations through the
/// `outbound-reconciler` world's `outbound` export; the host reads them
/// with its metadata.
#[tokio::test]
async fn the_declared_destinations_are_read_at_load() {
    let rt = runtime();
    let spec = PluginSpec {
        settings: json!({ "declare": [
            { "url": "https://api.example.com/v1", "methods": ["GET"] },
            { "url": "https://*.example.net" },
        ] }),
        ..crate::spec("outbound")
    };
    let p = rt.load_file(artifacts::OUTBOUND, spec).await.unwrap();
    let declared = &p.metadata().outbound;
    assert_eq!(declared.len(), 2);
    assert_eq!(declared[0].url, "https://api.example.com/v1");
    assert_eq!(declared[0].methods, ["GET"]);
    let grant = OutboundGrant::new(
        vec![rule("https://api.example.com", &["GET", "PUT"], false)],
        OutboundLimits::default(),
    )
    .unwrap();
    let uncovered = grant.uncovered(declared);
    assert_eq!(uncovered.len(), 1);
    assert_eq!(uncovered[0].url, "https://*.example.net");

    let spec = PluginSpec {
        settings: json!({ "declare": [{ "url": "ftp://example.com" }] }),
        ..crate::spec("outbound")
    };
    let e = rt
        .load_file(artifacts::OUTBOUND, spec)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("invalid metadata: outbound[0]: url scheme must be http or https"),
        "{e}"
    );
}

/// The embedded API server and a kube client for it.
async fn cluster() -> (wasmctrl_apiserver::ApiServer, kube::Client) {
    let server = wasmctrl_apiserver::ApiServer::start(wasmctrl_apiserver::Config::default())
        .await
        .expect("API server starts");
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&server.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    (server, kube::Client::try_from(config).unwrap())
}

/// A host config running the outbound plugin on ConfigMaps of `default`,
/// declaring `declare` and granted `grant` (YAML flow sequences).
fn host_config_text(port: u16, declare: &str, grant: &str) -> String {
    format!(
        r#"
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
shutdownTimeout: 5s
plugins:
  - name: outbound
    path: {path}
    namespaces: [default]
    skipUnchanged: true
    resyncPeriod: 1s
    permissions:
      - {{ group: "", resources: [configmaps], verbs: [get, list, watch] }}
    outbound: {grant}
    settings:
      declare: {declare}
      cases:
        cm-ok: {{ url: "http://localhost:{port}/ok" }}
"#,
        path = artifacts::OUTBOUND
    )
}

/// Through the manager: the grant shows in `/plugins`, a ConfigMap's
/// reconcile makes its request, and `skipUnchanged` never skips a
/// reconcile that made one (each resync asks the server again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_runs_the_grant_and_never_skips_a_reconcile_that_went_outside() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, ObjectMeta, PostParams};
    use wasmctrl_testkit::host::{RunningHost, host_config};

    let server = Server::start().await;
    let port = server.port();
    let (_api_server, client) = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let text = host_config_text(
        port,
        &format!(r#"[{{ url: "http://localhost:{port}/ok", methods: [GET] }}]"#),
        &format!(r#"[{{ url: "http://localhost:{port}", methods: [GET], private: true }}]"#),
    );
    let host = RunningHost::start(host_config(&text, dir.path()), client.clone(), None).await;
    let status = host.plugin("outbound").await.expect("/plugins lists it");
    assert_eq!(
        status["outbound"],
        json!([{ "url": format!("http://localhost:{port}"), "methods": ["GET"], "private": true }])
    );
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("cm-ok".into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    api.create(&PostParams::default(), &cm).await.unwrap();
    // Resyncs every second re-run the reconcile, each asking the server.
    eventually(
        "three requests from resyncs",
        Duration::from_secs(30),
        || async { (server.hits("/ok") >= 3).then_some(()) },
    )
    .await;
    let metrics = host.metrics.encode();
    let skipped = metrics
        .lines()
        .find_map(|l| l.strip_prefix("wasmctrl_reconcile_skipped_total{plugin=\"outbound\"} "))
        .map_or(0, |v| v.trim().parse::<u64>().unwrap());
    assert_eq!(skipped, 0, "{metrics}");
    host.stop().await.unwrap();
}

/// A component declaring a destination its grant does not cover does not
/// load; the error names the declared rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declaration_beyond_the_grant_is_refused_naming_the_rule() {
    use wasmctrl::ops::manager::{Manager, ManagerOptions};
    use wasmctrl_testkit::host::host_config;

    let (_api_server, client) = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let text = host_config_text(
        9,
        r#"[{ url: "https://api.example.com/v1", methods: [GET] }, { url: "https://*.example.net" }]"#,
        r#"[{ url: "https://api.example.com", methods: [GET, PUT] }]"#,
    );
    let manager = Manager::start(
        host_config(&text, dir.path()),
        client,
        ManagerOptions {
            admin_bind: Some("127.0.0.1:0".parse().unwrap()),
            watch_sources: false,
            ..ManagerOptions::default()
        },
    )
    .await
    .expect("the host itself starts");
    let error = manager
        .loaded()
        .await
        .first()
        .expect("a declaration beyond the grant is refused")
        .error
        .clone();
    assert!(
        error.contains("declares outbound destinations its `outbound` grant does not cover")
            && error.contains("outbound[1] https://*.example.net")
            && !error.contains("outbound[0]"),
        "{error}"
    );
}
