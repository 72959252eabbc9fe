//! Requests to hosts outside the cluster, over `wasi:http/outgoing-handler`.
//!
//! The host sends every request itself, and only where the plugin's
//! `outbound` grant allows: declare each destination in the plugin's
//! metadata ([`crate::Metadata::outbound`]) and ask the host config for it.
//! A refused request fails the whole reconcile with an error naming the
//! rule (or ceiling) it failed; redirects are not followed (a 3xx is an
//! answer like any other); everything ends at the reconcile's deadline.
//!
//! ```no_run
//! use wasmctrl_sdk::http;
//!
//! # fn f() -> Result<(), wasmctrl_sdk::Error> {
//! let answer = http::get("https://api.example.com/v1/zones")?;
//! if answer.status == 200 {
//!     let zones: wasmctrl_sdk::serde_json::Value = answer.json()?;
//! }
//! let put = http::Request::new("PUT", "https://api.example.com/v1/zones/a")
//!     .header("content-type", "application/json")
//!     .body(br#"{"ttl": 60}"#.to_vec());
//! let answer = http::send(&put)?;
//! # Ok(()) }
//! ```

use std::fmt;

use wasip2::http::outgoing_handler;
use wasip2::http::types::{ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, Scheme};
use wasip2::io::streams::StreamError;

/// One request: a method, an absolute `http://` or `https://` URL, headers
/// and a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn new(method: &str, url: &str) -> Self {
        Self {
            method: method.into(),
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn body(mut self, body: Vec<u8>) -> Self {
        self.body = body;
        self
    }
}

/// An answer: its status, headers and whole body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (case-insensitive), as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    /// The body as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, HttpError> {
        serde_json::from_slice(&self.body).map_err(|e| HttpError::Body(e.to_string()))
    }
}

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The URL is not an absolute `http://` or `https://` URL.
    Url(String),
    /// The host refused or could not send the request, or the answer broke
    /// off: wasi:http's error code (`HttpRequestDenied` for a destination
    /// the grant does not allow; the reconcile fails with the host's
    /// reason).
    Failed(String),
    /// The body is not what was expected.
    Body(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Url(m) => write!(f, "bad URL: {m}"),
            HttpError::Failed(m) => write!(f, "HTTP request failed: {m}"),
            HttpError::Body(m) => write!(f, "HTTP body: {m}"),
        }
    }
}

impl std::error::Error for HttpError {}

impl From<HttpError> for crate::Error {
    fn from(e: HttpError) -> Self {
        crate::Error::transient(e.to_string())
    }
}

/// `GET url`.
pub fn get(url: &str) -> Result<Response, HttpError> {
    send(&Request::new("GET", url))
}

/// The parts of an absolute URL wasi:http takes apart.
struct Parts<'a> {
    https: bool,
    authority: &'a str,
    path_with_query: &'a str,
}

fn split(url: &str) -> Result<Parts<'_>, HttpError> {
    let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else {
        return Err(HttpError::Url(format!(
            "{url:?} must start with https:// or http://"
        )));
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.is_empty() {
        return Err(HttpError::Url(format!("{url:?} names no host")));
    }
    Ok(Parts {
        https,
        authority,
        path_with_query: if path.is_empty() { "/" } else { path },
    })
}

fn method(m: &str) -> Method {
    match m {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "PATCH" => Method::Patch,
        "OPTIONS" => Method::Options,
        other => Method::Other(other.into()),
    }
}

fn failed(code: ErrorCode) -> HttpError {
    HttpError::Failed(format!("{code:?}"))
}

/// How native unit tests answer a request instead of the host.
#[cfg(all(any(test, feature = "testing"), not(target_arch = "wasm32")))]
pub(crate) type Transport = fn(&Request) -> Result<Response, HttpError>;

#[cfg(all(any(test, feature = "testing"), not(target_arch = "wasm32")))]
thread_local! {
    /// Installed by `FakeCluster::new` for its thread, so this module needs
    /// nothing of the fake (which needs this module's types).
    static TRANSPORT: std::cell::Cell<Option<Transport>> = const { std::cell::Cell::new(None) };
}

/// Answers this thread's requests with `transport` (`FakeCluster::new`).
#[cfg(all(any(test, feature = "testing"), not(target_arch = "wasm32")))]
pub(crate) fn answer_with(transport: Transport) {
    TRANSPORT.with(|t| t.set(Some(transport)));
}

/// Sends `request` and reads the whole answer. In native unit tests (the
/// `testing` feature) a `FakeCluster`'s canned answers serve it.
pub fn send(request: &Request) -> Result<Response, HttpError> {
    let parts = split(&request.url)?;
    #[cfg(all(any(test, feature = "testing"), not(target_arch = "wasm32")))]
    {
        let _ = parts;
        match TRANSPORT.with(|t| t.get()) {
            Some(transport) => transport(request),
            None => Err(HttpError::Failed(
                "no FakeCluster on this thread answers HTTP".into(),
            )),
        }
    }
    #[cfg(not(all(any(test, feature = "testing"), not(target_arch = "wasm32"))))]
    send_wasi(request, &parts)
}

/// `send` through the host's `wasi:http/outgoing-handler`.
#[cfg_attr(
    all(any(test, feature = "testing"), not(target_arch = "wasm32")),
    allow(dead_code)
)]
fn send_wasi(request: &Request, parts: &Parts<'_>) -> Result<Response, HttpError> {
    let entries: Vec<(String, Vec<u8>)> = request
        .headers
        .iter()
        .map(|(n, v)| (n.clone(), v.clone().into_bytes()))
        .collect();
    let headers = Fields::from_list(&entries)
        .map_err(|e| HttpError::Failed(format!("header refused: {e:?}")))?;
    let outgoing = OutgoingRequest::new(headers);
    let bad = |what: &str| HttpError::Url(format!("{what} refused for {:?}", request.url));
    outgoing
        .set_method(&method(&request.method))
        .map_err(|()| bad("method"))?;
    let scheme = if parts.https {
        Scheme::Https
    } else {
        Scheme::Http
    };
    outgoing
        .set_scheme(Some(&scheme))
        .map_err(|()| bad("scheme"))?;
    outgoing
        .set_authority(Some(parts.authority))
        .map_err(|()| bad("host"))?;
    outgoing
        .set_path_with_query(Some(parts.path_with_query))
        .map_err(|()| bad("path"))?;
    let body = outgoing.body().map_err(|()| bad("body"))?;
    let future = outgoing_handler::handle(outgoing, None).map_err(failed)?;
    {
        let stream = body.write().map_err(|()| bad("body"))?;
        for chunk in request.body.chunks(4096) {
            // A request that failed while its body was sent: its answer
            // (below) says why.
            if stream.blocking_write_and_flush(chunk).is_err() {
                break;
            }
        }
    }
    OutgoingBody::finish(body, None).map_err(failed)?;
    future.subscribe().block();
    let incoming = match future.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(code))) => return Err(failed(code)),
        Some(Err(())) | None => {
            return Err(HttpError::Failed("the answer was already taken".into()));
        }
    };
    let status = incoming.status();
    let headers = incoming.headers().entries();
    let answer_body = incoming
        .consume()
        .map_err(|()| HttpError::Failed("the body was already taken".into()))?;
    let mut body = Vec::new();
    {
        let stream = answer_body
            .stream()
            .map_err(|()| HttpError::Failed("the body was already taken".into()))?;
        loop {
            match stream.blocking_read(64 << 10) {
                Ok(chunk) => body.extend_from_slice(&chunk),
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => {
                    let why = wasip2::http::types::http_error_code(&e)
                        .map_or_else(|| e.to_debug_string(), |c| format!("{c:?}"));
                    return Err(HttpError::Failed(format!("the body broke off: {why}")));
                }
            }
        }
    }
    drop(wasip2::http::types::IncomingBody::finish(answer_body));
    Ok(Response {
        status,
        headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_split_for_wasi_http() {
        let p = split("https://api.example.com:8443/v1/x?q=1").unwrap();
        assert!(p.https);
        assert_eq!(p.authority, "api.example.com:8443");
        assert_eq!(p.path_with_query, "/v1/x?q=1");
        let p = split("http://127.0.0.1:9").unwrap();
        assert_eq!((p.https, p.path_with_query), (false, "/"));
        assert!(matches!(split("ftp://x/"), Err(HttpError::Url(_))));
        assert!(matches!(split("https:///x"), Err(HttpError::Url(_))));
    }
}
