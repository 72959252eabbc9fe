//! Sending a checked request: the host resolves the name, refuses internal
//! addresses the rule does not allow, connects to the address it checked,
//! speaks TLS (rustls with the platform's roots) and HTTP/1.1, and bounds
//! the connection count, both bodies and every step by the deadline.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use wasmtime_wasi_http::{Error, WasiBody};

use super::call::HttpCall;
use super::destination::Destination;
use super::lookup::{self, LookupError};
use super::rule::RequestHost;
use super::secret::{self, Redactor};
use super::tape::{BodySlot, HttpExchange, HttpTape, header_pairs};
use super::{DenyReason, OutboundGrant, Refusal};
use crate::meta::address::is_internal;

/// A request that passed the checks made before sending.
pub(super) struct Plan {
    /// The rule that allows it, as a refusal names it.
    pub(super) rule: String,
    /// Whether the rule lets a name resolve to an internal address.
    pub(super) private: bool,
    /// The `host` label of its metrics.
    pub(super) host_label: String,
    pub(super) dest: Destination,
    /// The plugin's secrets its headers place (indices into its secrets).
    pub(super) secrets: Vec<usize>,
    /// The tape to record the exchange on, with the request's headers as
    /// the guest wrote them (placeholders, not values).
    pub(super) record: Option<Recording>,
}

/// A tape, and the request's headers as the guest wrote them.
pub(super) type Recording = (Arc<HttpTape>, Vec<(String, String)>);

type Sent = (
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
);

trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

/// The TLS settings of an outbound connection whose grant names no
/// others: the platform's roots.
static TLS: LazyLock<Result<Arc<rustls::ClientConfig>, String>> =
    LazyLock::new(|| tls_config(None));

/// TLS settings trusting the platform's roots and, when given, the
/// certificates of `ca_bundle` (PEM): an internal CA's servers. The error
/// says what is wrong with the bundle.
pub fn tls_config(ca_bundle: Option<&[u8]>) -> Result<Arc<rustls::ClientConfig>, String> {
    let extra = match ca_bundle {
        Some(pem) => crate::meta::pem::certificates(pem)?,
        None => Vec::new(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls_platform_verifier::Verifier::new_with_extra_roots(extra, provider.clone())
            .map_err(|e| e.to_string())?;
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Sends `request` as `plan` says, under the grant's ceilings and the
/// call's deadline.
pub(super) async fn send(
    plan: Plan,
    request: http::Request<WasiBody>,
    grant: Arc<OutboundGrant>,
    call: Arc<HttpCall>,
) -> Result<Sent, Error> {
    let started = Instant::now();
    let deadline = call.deadline;
    let shown = format!("{} {}", request.method(), plan.dest.shown);
    // The answer to a HEAD carries its resource's length but no body.
    let head = request.method() == http::Method::HEAD;
    let late = |step: &str| {
        call.refuse(Refusal {
            reason: DenyReason::Deadline,
            message: format!("{shown}: the reconcile's deadline passed while {step}"),
        })
    };
    // Secrets first: a value that cannot be read refuses the request
    // before anything reaches the network.
    let (request, redactor) = match place_secrets(&plan, request, &grant, &call, &shown).await {
        Ok(placed) => placed,
        Err(e) => return Err(e),
    };
    let Some(permit) = grant.connections.try_take(grant.limits.connections) else {
        return Err(call.refuse(Refusal {
            reason: DenyReason::Connections,
            message: format!(
                "{shown}: the plugin already holds {} connections (limits.httpConnections)",
                grant.limits.connections
            ),
        }));
    };
    let dest = &plan.dest;
    let (addrs, permit) = match &dest.host {
        RequestHost::Ip(ip) => (vec![SocketAddr::new(*ip, dest.port)], permit),
        RequestHost::Name(name) => {
            match lookup::SYSTEM
                .resolve(name, dest.port, permit, deadline)
                .await
            {
                Ok(resolved) => resolved,
                Err(LookupError::Deadline) => return Err(late("resolving the name")),
                Err(LookupError::Full(slots)) => {
                    return Err(call.refuse(Refusal {
                        reason: DenyReason::Lookups,
                        message: format!(
                            "{shown}: the host's {slots} name lookups are all taken by lookups its resolver has not answered; nothing was sent"
                        ),
                    }));
                }
                Err(LookupError::Failed(e)) => {
                    return Err(Error::DnsError {
                        rcode: Some(e.to_string()),
                        info_code: None,
                    });
                }
            }
        }
    };
    // A rule matching an IP literal names that exact address.
    let literal = matches!(dest.host, RequestHost::Ip(_));
    if !(plan.private || literal)
        && let Some(bad) = addrs.iter().find(|a| is_internal(a.ip()))
    {
        return Err(call.refuse(Refusal {
            reason: DenyReason::InternalAddress,
            message: format!(
                "{shown}: {} resolves to {}, an internal address (loopback, private, shared, link-local or cloud metadata); {} reaches internal addresses only with `private: true` or by naming the IP literal",
                dest.host,
                bad.ip(),
                plan.rule
            ),
        }));
    }
    let mut stream = None;
    let mut last_error = None;
    for addr in &addrs {
        match tokio::time::timeout_at(deadline.into(), tokio::net::TcpStream::connect(addr)).await {
            Err(_) => return Err(late("connecting")),
            Ok(Ok(s)) => {
                stream = Some(s);
                break;
            }
            Ok(Err(e)) => last_error = Some(e),
        }
    }
    let Some(tcp) = stream else {
        return Err(last_error.map_or(Error::DestinationNotFound, Error::Connect));
    };
    let stream: Box<dyn Stream> = if dest.scheme == "https" {
        let config = match grant.tls.as_ref() {
            Some(config) => config,
            None => TLS
                .as_ref()
                .map_err(|e| Error::InternalError(Some(format!("TLS is not available: {e}"))))?,
        };
        let name = match &dest.host {
            RequestHost::Ip(ip) => rustls::pki_types::ServerName::IpAddress((*ip).into()),
            RequestHost::Name(n) => rustls::pki_types::ServerName::try_from(n.clone())
                .map_err(|_| Error::HttpRequestUriInvalid)?,
        };
        let tls = tokio_rustls::TlsConnector::from(config.clone()).connect(name, tcp);
        match tokio::time::timeout_at(deadline.into(), tls).await {
            Err(_) => return Err(late("the TLS handshake ran")),
            Ok(Err(e)) => return Err(Error::Tls(e)),
            Ok(Ok(s)) => Box::new(s),
        }
    } else {
        Box::new(tcp)
    };
    let handshake = hyper::client::conn::http1::handshake::<_, WasiBody>(TokioIo::new(stream));
    let (mut sender, conn) = match tokio::time::timeout_at(deadline.into(), handshake).await {
        Err(_) => return Err(late("the connection was set up")),
        Ok(Err(e)) => return Err(Error::Hyper(e)),
        Ok(Ok(pair)) => pair,
    };

    let (mut parts, body) = request.into_parts();
    parts.uri = http::Uri::try_from(dest.path_and_query.as_str())
        .map_err(|_| Error::HttpRequestUriInvalid)?;
    parts.headers.remove(http::header::HOST);
    parts.headers.insert(
        http::header::HOST,
        http::HeaderValue::try_from(dest.authority.as_str())
            .map_err(|_| Error::HttpRequestUriInvalid)?,
    );
    let body = BoundedRequest {
        inner: body,
        left: grant.limits.request_bytes,
        call: call.clone(),
        shown: shown.clone(),
    }
    .boxed_unsync();
    let request = http::Request::from_parts(parts, body);

    let mut conn = Box::pin(conn);
    let exchange = async {
        let mut send = std::pin::pin!(sender.send_request(request));
        tokio::select! {
            biased;
            response = &mut send => (response.map_err(Error::Hyper), false),
            // The connection may end (the server closes it) in the very
            // poll that delivered the response: the response decides.
            _ = &mut conn => (send.await.map_err(Error::Hyper), true),
        }
    };
    let Ok((response, ended)) = tokio::time::timeout_at(deadline.into(), exchange).await else {
        return Err(late("waiting for the response"));
    };
    let conn = (!ended).then_some(conn);
    let code = match &response {
        Ok(r) => r.status().as_u16().to_string(),
        Err(_) => "error".to_string(),
    };
    call.metrics.observe_http_request(
        &call.plugin,
        call.version,
        &plan.host_label,
        &code,
        started.elapsed(),
    );
    let mut response = response?;
    let limit = grant.limits.response_bytes;
    let status = response.status();
    let bodiless = head
        || status.is_informational()
        || status == http::StatusCode::NO_CONTENT
        || status == http::StatusCode::NOT_MODIFIED;
    if let Some(n) = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .filter(|_| !bodiless)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .filter(|n| *n > limit)
    {
        return Err(call.refuse(Refusal {
            reason: DenyReason::ResponseBytes,
            message: format!(
                "{shown}: a response body of {n} bytes is past the ceiling of {limit} (limits.httpResponseBytes)"
            ),
        }));
    }
    if let Some(redactor) = &redactor {
        if let Some(encoding) = response
            .headers()
            .get(http::header::CONTENT_ENCODING)
            .filter(|e| !e.as_bytes().eq_ignore_ascii_case(b"identity"))
        {
            let encoding = String::from_utf8_lossy(&encoding.as_bytes()[..encoding.len().min(64)])
                .into_owned();
            return Err(call.refuse(Refusal {
                reason: DenyReason::Secret,
                message: format!(
                    "{shown}: the answer to a request of a plugin with secrets is encoded ({encoding:?}); only an unencoded answer can be checked for the secrets' values, and the request asked for one"
                ),
            }));
        }
        redact_headers(response.headers_mut(), redactor);
    }
    let slot = plan.record.as_ref().and_then(|(tape, headers)| {
        tape.record(HttpExchange {
            method: shown.split(' ').next().unwrap_or("").to_string(),
            url: plan.dest.url(),
            request_headers: headers.clone(),
            status: response.status().as_u16(),
            response_headers: header_pairs(response.headers()),
            body: String::new(),
            truncated: false,
        })
    });
    let response = response.map(|incoming| {
        BoundedResponse {
            inner: incoming,
            left: limit,
            limit,
            deadline: Box::pin(tokio::time::sleep_until(deadline.into())),
            call: call.clone(),
            shown: shown.clone(),
            redactor,
            ended: false,
            slot,
        }
        .boxed_unsync()
    });
    // The connection lives while the guest reads the body, and no longer
    // than the deadline; its permit goes with it.
    let io = async move {
        let _permit = permit;
        let Some(conn) = conn else {
            return Ok(());
        };
        match tokio::time::timeout_at(deadline.into(), conn).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Error::Hyper(e)),
            Err(_) => Err(Error::ConnectionReadTimeout),
        }
    };
    Ok((response, Box::new(io)))
}

/// What a body's `poll_frame` answers.
type NextFrame = Poll<Option<Result<Frame<Bytes>, Error>>>;

/// A guest's request body, refused past `limits.httpRequestBytes`.
struct BoundedRequest {
    inner: WasiBody,
    left: u64,
    call: Arc<HttpCall>,
    shown: String,
}

impl Body for BoundedRequest {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> NextFrame {
        let frame = std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let Some(Ok(f)) = &frame
            && let Some(data) = f.data_ref()
        {
            let n = data.len() as u64;
            if n > self.left {
                let message = format!(
                    "{}: the request body is past its ceiling (limits.httpRequestBytes)",
                    self.shown
                );
                self.left = 0;
                return Poll::Ready(Some(Err(self.call.refuse(Refusal {
                    reason: DenyReason::RequestBytes,
                    message,
                }))));
            }
            self.left -= n;
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}

/// A response body handed to the guest: refused past
/// `limits.httpResponseBytes`, ended at the reconcile's deadline.
struct BoundedResponse {
    inner: hyper::body::Incoming,
    left: u64,
    limit: u64,
    deadline: Pin<Box<tokio::time::Sleep>>,
    call: Arc<HttpCall>,
    shown: String,
    /// The values of the plugin's secrets, to redact.
    redactor: Option<Redactor>,
    /// The inner body ended (and the redactor's tail was handed on).
    ended: bool,
    /// Where a recording keeps the body as the guest reads it.
    slot: Option<BodySlot>,
}

impl Body for BoundedResponse {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> NextFrame {
        loop {
            let next = self.as_mut().next_frame(cx);
            // Trailers come after the redactor's held-back tail, and
            // redaction reads only data: with a secret on the request they
            // are dropped.
            if let Poll::Ready(Some(Ok(f))) = &next
                && f.is_trailers()
                && self.redactor.is_some()
            {
                continue;
            }
            return next;
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || (self.redactor.is_none() && self.slot.is_none() && self.inner.is_end_stream())
    }
}

impl BoundedResponse {
    /// Charges what redaction added to the body: `raw` bytes of the
    /// server's, already counted, became `shown` bytes for the guest. A
    /// placeholder is longer than a short value, so a body of repeated
    /// short values would otherwise reach the guest many times over the
    /// ceiling.
    fn charge_redacted(&mut self, raw: usize, shown: usize) -> Result<(), Error> {
        let added = shown.saturating_sub(raw) as u64;
        if added <= self.left {
            self.left -= added;
            return Ok(());
        }
        self.left = 0;
        let message = format!(
            "{}: the response body, with the secrets in it redacted, is past the ceiling of {} bytes (limits.httpResponseBytes)",
            self.shown, self.limit
        );
        Err(self.call.refuse(Refusal {
            reason: DenyReason::ResponseBytes,
            message,
        }))
    }

    fn next_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> NextFrame {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => frame,
            Poll::Pending => {
                if this.deadline.as_mut().poll(cx).is_ready() {
                    let message = format!(
                        "{}: the reconcile's deadline passed while the response body was read",
                        this.shown
                    );
                    return Poll::Ready(Some(Err(this.call.refuse(Refusal {
                        reason: DenyReason::Deadline,
                        message,
                    }))));
                }
                return Poll::Pending;
            }
        };
        match frame {
            None => {
                this.ended = true;
                match this.redactor.as_mut().map(Redactor::finish) {
                    Some(tail) if !tail.is_empty() => {
                        if let Err(e) = this.charge_redacted(0, tail.len()) {
                            return Poll::Ready(Some(Err(e)));
                        }
                        if let Some(slot) = &this.slot {
                            slot.append(&tail);
                        }
                        Poll::Ready(Some(Ok(Frame::data(Bytes::from(tail)))))
                    }
                    _ => Poll::Ready(None),
                }
            }
            Some(Err(e)) => Poll::Ready(Some(Err(Error::Hyper(e)))),
            Some(Ok(f)) => {
                if let Some(data) = f.data_ref() {
                    let n = data.len() as u64;
                    if n > this.left {
                        let message = format!(
                            "{}: the response body is past the ceiling of {} bytes (limits.httpResponseBytes)",
                            this.shown, this.limit
                        );
                        this.left = 0;
                        return Poll::Ready(Some(Err(this.call.refuse(Refusal {
                            reason: DenyReason::ResponseBytes,
                            message,
                        }))));
                    }
                    this.left -= n;
                }
                let data = match (&mut this.redactor, f.into_data()) {
                    (Some(r), Ok(data)) => {
                        let redacted = r.push(&data);
                        if let Err(e) = this.charge_redacted(data.len(), redacted.len()) {
                            return Poll::Ready(Some(Err(e)));
                        }
                        Bytes::from(redacted)
                    }
                    (_, Ok(data)) => data,
                    (_, Err(f)) => return Poll::Ready(Some(Ok(f))),
                };
                if let Some(slot) = &this.slot {
                    slot.append(&data);
                }
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
        }
    }
}

/// Reads the values of the secrets `plan` places and substitutes them into
/// the request's headers; with them, the redactor of its response, of
/// every value of the plugin's secrets (None when it has none). A placed
/// value that cannot be read, or that no header may carry, refuses the
/// request.
async fn place_secrets(
    plan: &Plan,
    request: http::Request<WasiBody>,
    grant: &OutboundGrant,
    call: &HttpCall,
    shown: &str,
) -> Result<(http::Request<WasiBody>, Option<Redactor>), Error> {
    let secrets = grant.secrets();
    // A server a secret was sent to may keep it (a header stored as a
    // field, say) and answer it later to a request that does not carry
    // it, under any name the server goes by: every answer is redacted of
    // all the plugin's secrets, whoever it comes from.
    if secrets.is_empty() {
        return Ok((request, None));
    }
    let mut values = Vec::with_capacity(plan.secrets.len());
    for &i in &plan.secrets {
        let name = secrets.name(i);
        match secrets.value(i, call.deadline).await {
            Ok(v) => values.push((name, v)),
            Err(e) => {
                return Err(call.refuse(Refusal {
                    reason: DenyReason::Secret,
                    message: format!("{shown}: secret {name:?}: {e}; nothing was sent"),
                }));
            }
        }
    }
    // The request's own secrets come first: a value two secrets share is
    // marked with the name the request used.
    let placed = values.len();
    for i in (0..secrets.len()).filter(|i| !plan.secrets.contains(i)) {
        // A value that cannot be read now is not one the request sends;
        // the answer is redacted of those that can.
        if let Ok(v) = secrets.value(i, call.deadline).await {
            values.push((secrets.name(i), v));
        }
    }
    let (mut parts, body) = request.into_parts();
    let pairs: Vec<(&str, &[u8])> = values[..placed]
        .iter()
        .map(|(n, v)| (*n, v.as_slice()))
        .collect();
    for value in parts.headers.values_mut() {
        if memchr::memmem::find(value.as_bytes(), b"${secret:").is_none() {
            continue;
        }
        let placed = secret::substitute(value.as_bytes(), &pairs);
        match http::HeaderValue::from_bytes(&placed) {
            Ok(mut v) => {
                v.set_sensitive(true);
                *value = v;
            }
            Err(_) => {
                return Err(call.refuse(Refusal {
                    reason: DenyReason::Secret,
                    message: format!(
                        "{shown}: a secret's value cannot be sent in a header (it holds a line break or another control character); nothing was sent"
                    ),
                }));
            }
        }
    }
    let redactor = secrets.redactor(
        values
            .into_iter()
            .map(|(n, v)| (n.to_string(), v))
            .collect(),
    );
    let redactor = (!redactor.is_empty()).then_some(redactor);
    if redactor.is_some() {
        // Redaction reads the answer's bytes as they come: a compressed
        // answer, or a range of one, would carry an echoed value in a form
        // it cannot see.
        for h in [
            http::header::RANGE,
            http::header::IF_RANGE,
            http::header::TE,
        ] {
            parts.headers.remove(h);
        }
        parts.headers.insert(
            http::header::ACCEPT_ENCODING,
            http::HeaderValue::from_static("identity"),
        );
    }
    Ok((http::Request::from_parts(parts, body), redactor))
}

/// The response's headers with the request's secret values redacted; its
/// length is dropped, since redaction changes the body's.
fn redact_headers(headers: &mut http::HeaderMap, redactor: &Redactor) {
    headers.remove(http::header::CONTENT_LENGTH);
    for value in headers.values_mut() {
        let redacted = redactor.redact(value.as_bytes());
        if redacted != value.as_bytes() {
            *value = http::HeaderValue::from_bytes(&redacted)
                .unwrap_or_else(|_| http::HeaderValue::from_static("<secret>"));
        }
    }
}
