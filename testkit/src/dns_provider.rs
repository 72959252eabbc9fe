//! A fake DNS provider for tests: the HTTP API an operator of records
//! outside the cluster manages, on a loopback port, with its state open to
//! the test.
//!
//! ```text
//! PUT    {endpoint}/zones/{zone}/records/{name}  {"type","value","ttl"}  → 200 and the record
//! GET    {endpoint}/zones/{zone}/records/{name}                         → 200 and the record, or 404
//! DELETE {endpoint}/zones/{zone}/records/{name}                         → 204, or 404
//! ```
//!
//! Every request must carry `Authorization: Bearer <token>`, or it is
//! answered 401. The test can change the token ([`DnsProvider::set_token`],
//! a rotation: only the new one is accepted afterwards), take the provider
//! down ([`DnsProvider::set_down`]: every request gets 503), and change
//! records behind the operator's back ([`DnsProvider::set_record`]).
//!
//! It is served by hyper's HTTP/1.1 server rather than by hand: the kube
//! client the kit already depends on brings hyper, hyper-util and
//! http-body-util, so only hyper's `server` feature is new (axum would add
//! crates the kit does not otherwise build). hyper keeps a connection
//! alive or closes it as each client asks, and refuses a request head over
//! 64 KiB (431); a body over 1 MiB is refused too (413).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

/// The largest request head read; hyper answers 431 past it.
const MAX_HEAD: usize = 64 << 10;
/// The largest request body read; answered 413 past it.
const MAX_BODY: usize = 1 << 20;

/// What the provider holds and has seen.
#[derive(Default)]
struct State {
    token: String,
    down: bool,
    /// Keyed by (zone, name).
    records: BTreeMap<(String, String), Value>,
    requests: u32,
    unauthorized: u32,
    last_authorization: Option<String>,
}

/// A fake DNS provider on `127.0.0.1`; it stops serving when dropped.
pub struct DnsProvider {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    server: JoinHandle<()>,
}

impl DnsProvider {
    /// Serves on a free loopback port, accepting `Bearer {token}`.
    pub async fn start(token: &str) -> DnsProvider {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port for the DNS provider");
        let addr = listener.local_addr().expect("the listener's address");
        let state = Arc::new(Mutex::new(State {
            token: token.to_string(),
            ..State::default()
        }));
        let server = tokio::spawn(serve(listener, state.clone()));
        DnsProvider {
            addr,
            state,
            server,
        }
    }

    /// `http://127.0.0.1:PORT`, the prefix of every path of the API.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The record `name` of `zone` as the provider holds it.
    pub fn record(&self, zone: &str, name: &str) -> Option<Value> {
        self.lock().records.get(&key(zone, name)).cloned()
    }

    /// Makes the record `name` of `zone` be `value`, as a change made
    /// outside the operator (drift).
    pub fn set_record(&self, zone: &str, name: &str, value: Value) {
        self.lock().records.insert(key(zone, name), value);
    }

    /// Removes the record `name` of `zone`; returns what it was.
    pub fn remove_record(&self, zone: &str, name: &str) -> Option<Value> {
        self.lock().records.remove(&key(zone, name))
    }

    /// Accepts `Bearer {token}` from now on, and no longer the old token.
    pub fn set_token(&self, token: &str) {
        self.lock().token = token.to_string();
    }

    /// While down, every request is answered 503 (and counted, but neither
    /// authorized nor served).
    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }

    /// How many requests were answered 401.
    pub fn unauthorized(&self) -> u32 {
        self.lock().unauthorized
    }

    /// How many requests arrived, whatever their answer.
    pub fn requests(&self) -> u32 {
        self.lock().requests
    }

    /// The `Authorization` header of the latest request (None if it had
    /// none), to check what a client sent without logging tokens.
    pub fn last_authorization(&self) -> Option<String> {
        self.lock().last_authorization.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

impl Drop for DnsProvider {
    fn drop(&mut self) {
        // The accept loop owns the connections' tasks: they end with it.
        self.server.abort();
    }
}

fn key(zone: &str, name: &str) -> (String, String) {
    (zone.to_string(), name.to_string())
}

/// The state even if a test panicked while holding it: a counter or a
/// record is never left half-written.
fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn serve(listener: TcpListener, state: Arc<Mutex<State>>) {
    let mut connections = JoinSet::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of descriptors and the like: the next accept may work.
                Err(_) => continue,
            },
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let state = state.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(answer(&state, request).await) }
            });
            // A client that goes away mid-request is its own business.
            let _ = hyper::server::conn::http1::Builder::new()
                .max_buf_size(MAX_HEAD)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(state: &Mutex<State>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let authorization = request
        .headers()
        .get(AUTHORIZATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    {
        let mut s = lock(state);
        s.requests += 1;
        s.last_authorization = authorization.clone();
        if s.down {
            return error(StatusCode::SERVICE_UNAVAILABLE, "the provider is down");
        }
        if authorization.as_deref() != Some(&format!("Bearer {}", s.token)) {
            s.unauthorized += 1;
            let mut answer = error(StatusCode::UNAUTHORIZED, "a valid bearer token is required");
            answer
                .headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return answer;
        }
    }
    let Some((zone, name)) = record_path(request.uri().path()) else {
        return error(StatusCode::NOT_FOUND, "no such path");
    };
    let key = key(zone, name);
    let method = request.method().clone();
    // A body announced too long is refused unread; Limited catches the
    // chunked ones.
    if usize::try_from(hyper::body::Body::size_hint(request.body()).lower())
        .map_or(true, |n| n > MAX_BODY)
    {
        return error(StatusCode::PAYLOAD_TOO_LARGE, "the body is over 1 MiB");
    }
    let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return error(StatusCode::PAYLOAD_TOO_LARGE, "the body is over 1 MiB");
        }
        Err(_) => return error(StatusCode::BAD_REQUEST, "the body broke off"),
    };
    let mut s = lock(state);
    match method {
        Method::GET => match s.records.get(&key) {
            Some(record) => ok(record),
            None => error(StatusCode::NOT_FOUND, "no such record"),
        },
        Method::PUT => match parse_record(&body) {
            Ok(record) => {
                s.records.insert(key, record.clone());
                ok(&record)
            }
            Err(why) => error(StatusCode::BAD_REQUEST, &why),
        },
        Method::DELETE => match s.records.remove(&key) {
            Some(_) => empty(StatusCode::NO_CONTENT),
            None => error(StatusCode::NOT_FOUND, "no such record"),
        },
        _ => error(StatusCode::METHOD_NOT_ALLOWED, "GET, PUT or DELETE"),
    }
}

/// `(zone, name)` of `/zones/{zone}/records/{name}`.
fn record_path(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/zones/")?;
    let (zone, name) = rest.split_once("/records/")?;
    let valid = |s: &str| !s.is_empty() && !s.contains('/');
    (valid(zone) && valid(name)).then_some((zone, name))
}

/// The record a PUT body describes, as the provider stores it: exactly
/// `type` and `value` (strings) and `ttl` (a whole number).
fn parse_record(body: &[u8]) -> Result<Value, String> {
    let body: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let text = |field: &str| {
        body.get(field)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{field:?} must be a string"))
    };
    let (type_, value) = (text("type")?, text("value")?);
    let ttl = body
        .get("ttl")
        .and_then(Value::as_u64)
        .ok_or("\"ttl\" must be a whole number")?;
    Ok(json!({"type": type_, "value": value, "ttl": ttl}))
}

fn ok(record: &Value) -> Response<Full<Bytes>> {
    let mut answer = Response::new(Full::new(Bytes::from(record.to_string())));
    answer
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    answer
}

fn error(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let mut answer = ok(&json!({ "error": message }));
    *answer.status_mut() = status;
    answer
}

fn empty(status: StatusCode) -> Response<Full<Bytes>> {
    let mut answer = Response::new(Full::new(Bytes::new()));
    *answer.status_mut() = status;
    answer
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    use tokio::net::TcpStream;

    use super::*;

    const TOKEN: &str = "s3cret";
    const PATH: &str = "/zones/example.com/records/www";

    /// One request on a fresh connection that asks to be closed: (status,
    /// body), read to the end of the stream.
    async fn raw(
        provider: &DnsProvider,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &str,
    ) -> (u16, String) {
        let mut stream = TcpStream::connect(("127.0.0.1", provider.port()))
            .await
            .unwrap();
        let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: dns\r\nConnection: close\r\n{auth}\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        let status = answer[9..12].parse().unwrap();
        let (_, body) = answer.split_once("\r\n\r\n").unwrap();
        (status, body.to_string())
    }

    fn record() -> &'static str {
        r#"{"type":"A","value":"192.0.2.1","ttl":300}"#
    }

    #[tokio::test]
    async fn without_the_token_every_request_is_unauthorized() {
        let p = DnsProvider::start(TOKEN).await;
        assert_eq!(raw(&p, "GET", PATH, None, "").await.0, 401);
        assert_eq!(raw(&p, "PUT", PATH, Some("wrong"), record()).await.0, 401);
        assert_eq!(p.record("example.com", "www"), None, "nothing written");
        assert_eq!(p.unauthorized(), 2);
        assert_eq!(p.requests(), 2);
        assert_eq!(p.last_authorization().as_deref(), Some("Bearer wrong"));
    }

    #[tokio::test]
    async fn records_are_put_read_and_deleted() {
        let p = DnsProvider::start(TOKEN).await;
        assert_eq!(raw(&p, "GET", PATH, Some(TOKEN), "").await.0, 404);
        let (status, body) = raw(&p, "PUT", PATH, Some(TOKEN), record()).await;
        assert_eq!(status, 200);
        let expected = json!({"type": "A", "value": "192.0.2.1", "ttl": 300});
        assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), expected);
        assert_eq!(p.record("example.com", "www"), Some(expected.clone()));

        let (status, body) = raw(&p, "GET", PATH, Some(TOKEN), "").await;
        assert_eq!(status, 200);
        assert_eq!(serde_json::from_str::<Value>(&body).unwrap(), expected);

        assert_eq!(raw(&p, "DELETE", PATH, Some(TOKEN), "").await.0, 204);
        assert_eq!(p.record("example.com", "www"), None);
        assert_eq!(raw(&p, "DELETE", PATH, Some(TOKEN), "").await.0, 404);
        assert_eq!(p.unauthorized(), 0);
        assert_eq!(p.last_authorization(), Some(format!("Bearer {TOKEN}")));
    }

    #[tokio::test]
    async fn bad_bodies_and_paths_are_refused() {
        let p = DnsProvider::start(TOKEN).await;
        let missing_ttl = r#"{"type":"A","value":"192.0.2.1"}"#;
        assert_eq!(raw(&p, "PUT", PATH, Some(TOKEN), missing_ttl).await.0, 400);
        assert_eq!(raw(&p, "PUT", PATH, Some(TOKEN), "not json").await.0, 400);
        let nested = "/zones/example.com/records/a/b";
        assert_eq!(raw(&p, "GET", nested, Some(TOKEN), "").await.0, 404);
        assert_eq!(raw(&p, "POST", PATH, Some(TOKEN), record()).await.0, 405);
        assert_eq!(p.record("example.com", "www"), None);
    }

    #[tokio::test]
    async fn a_rotated_token_replaces_the_old_one() {
        let p = DnsProvider::start(TOKEN).await;
        p.set_token("rotated");
        assert_eq!(raw(&p, "GET", PATH, Some(TOKEN), "").await.0, 401);
        assert_eq!(raw(&p, "GET", PATH, Some("rotated"), "").await.0, 404);
        assert_eq!(p.unauthorized(), 1);
    }

    #[tokio::test]
    async fn while_down_every_request_is_unavailable() {
        let p = DnsProvider::start(TOKEN).await;
        p.set_record("example.com", "www", json!({"type": "A"}));
        p.set_down(true);
        assert_eq!(raw(&p, "GET", PATH, Some(TOKEN), "").await.0, 503);
        assert_eq!(raw(&p, "DELETE", PATH, None, "").await.0, 503);
        assert_eq!(p.unauthorized(), 0, "down is answered before auth");
        assert!(p.record("example.com", "www").is_some());
        p.set_down(false);
        assert_eq!(raw(&p, "GET", PATH, Some(TOKEN), "").await.0, 200);
        assert_eq!(
            p.remove_record("example.com", "www"),
            Some(json!({"type": "A"}))
        );
        assert_eq!(p.requests(), 3);
    }

    #[tokio::test]
    async fn a_connection_kept_open_is_answered_without_waiting_for_it_to_close() {
        let p = DnsProvider::start(TOKEN).await;
        let stream = TcpStream::connect(("127.0.0.1", p.port())).await.unwrap();
        let mut stream = BufReader::new(stream);
        for (method, body, status) in [("PUT", record(), 200), ("GET", "", 200)] {
            let request = format!(
                "{method} {PATH} HTTP/1.1\r\nHost: dns\r\nAuthorization: Bearer {TOKEN}\r\n\
                 Content-Length: {}\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut length = 0;
            let mut line = String::new();
            stream.read_line(&mut line).await.unwrap();
            assert!(line.starts_with(&format!("HTTP/1.1 {status}")), "{line}");
            loop {
                line.clear();
                stream.read_line(&mut line).await.unwrap();
                if line == "\r\n" {
                    break;
                }
                if let Some((name, value)) = line.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; length];
            stream.read_exact(&mut body).await.unwrap();
            let record: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(record["value"], "192.0.2.1");
        }
    }

    #[tokio::test]
    async fn a_body_announced_over_the_bound_is_refused_unread() {
        let p = DnsProvider::start(TOKEN).await;
        let mut stream = TcpStream::connect(("127.0.0.1", p.port())).await.unwrap();
        // Only the head: the answer must not wait for the body.
        let head = format!(
            "PUT {PATH} HTTP/1.1\r\nHost: dns\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        assert_eq!(p.record("example.com", "www"), None);
    }
}
