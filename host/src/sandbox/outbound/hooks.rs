//! The store's `wasi:http` hooks: every outgoing request of a guest is
//! checked here against the plugin's grant before the host sends it
//! (`send.rs`), and every refusal is kept for the call's result.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use super::call::HttpCall;

use super::destination::Destination;
use super::send::{self, Plan};
use super::tape::{HttpExchange, HttpTape, header_pairs};
use super::{DenyReason, OutboundGrant, Refusal};

/// The longest request method a guest may send. HTTP sets no limit, and
/// the method is quoted in every refusal and log line of the request; the
/// longest registered methods have 17 characters.
pub(crate) const MAX_METHOD_BYTES: usize = 32;

/// The hooks of one store: the plugin's grant and this call's state.
pub(crate) struct OutboundHooks {
    grant: Arc<OutboundGrant>,
    call: Arc<HttpCall>,
}

impl OutboundHooks {
    /// The hooks of a store whose first call is `call`, under `grant`.
    pub(crate) fn new(grant: Arc<OutboundGrant>, call: HttpCall) -> Self {
        Self {
            grant,
            call: Arc::new(call),
        }
    }

    /// A new call in the same store (a reused instance): new counts, no
    /// refusal, the new deadline. Requests of the last call still under
    /// way keep the state they started with. The secrets earlier calls
    /// revealed stay redacted: the instance may have kept them.
    pub(crate) fn begin_call(
        &mut self,
        deadline: Instant,
        tape: Option<Arc<HttpTape>>,
        reviewing: bool,
    ) {
        let call = &self.call;
        let next = HttpCall::new(
            call.plugin.clone(),
            call.metrics.clone(),
            deadline,
            tape,
            reviewing,
        );
        next.inherit_revealed(call);
        self.call = Arc::new(next);
    }

    /// `text` with every secret this call revealed redacted.
    pub(crate) fn redact(&self, text: &str) -> String {
        self.call.redact(text)
    }

    /// The plugin's grant.
    pub(crate) fn grant(&self) -> &Arc<OutboundGrant> {
        &self.grant
    }

    /// This call's state: its deadline, plugin and metrics.
    pub(crate) fn call(&self) -> &Arc<HttpCall> {
        &self.call
    }

    /// The call's first refusal, if any.
    pub(crate) fn refusal(&self) -> Option<Refusal> {
        self.call
            .refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Requests the guest made this call.
    pub(crate) fn requests(&self) -> u32 {
        self.call.requests.load(Ordering::Relaxed)
    }

    /// Everything checked before the request leaves the guest's hands.
    fn check(&self, request: &http::Request<WasiBody>) -> Result<Checked, Refusal> {
        let limits = self.grant.limits();
        let n = self.call.requests.fetch_add(1, Ordering::Relaxed) + 1;
        if n > limits.requests {
            return Err(Refusal {
                reason: DenyReason::Requests,
                message: format!(
                    "request {n} of this reconcile is past its ceiling of {} (limits.httpRequests)",
                    limits.requests
                ),
            });
        }
        let method = request.method().as_str();
        if method.len() > MAX_METHOD_BYTES {
            return Err(Refusal {
                reason: DenyReason::Url,
                message: format!(
                    "a request method of {} bytes is refused: at most {MAX_METHOD_BYTES}",
                    method.len()
                ),
            });
        }
        let dest = Destination::of(request)?;
        if let Some(tape) = self.call.tape.as_ref().filter(|t| t.is_replaying()) {
            match tape.answer(method, &dest.url()) {
                Some(exchange) => return Ok(Checked::Replayed(exchange)),
                None if tape.live_otherwise() => {}
                None => {
                    return Err(Refusal {
                        reason: DenyReason::NotAllowed,
                        message: format!(
                            "{method} {}: the transcript holds no (further) answer to it, and a replay sends nothing",
                            dest.shown
                        ),
                    });
                }
            }
        }
        // Many servers take a method-override header as the method, so each
        // one named is judged as the request's method is: a GET that a
        // server reads as DELETE needs a rule that allows DELETE.
        let overrides = method_overrides(request, &dest)?;
        let mut found = Vec::with_capacity(1);
        for method in std::iter::once(method).chain(overrides.iter().map(String::as_str)) {
            if (self.grant.read_only || self.call.reviewing) && !matches!(method, "GET" | "HEAD") {
                return Err(Refusal {
                    reason: DenyReason::ReadOnly,
                    message: format!(
                        "{method} {}: {} sends only GET and HEAD requests",
                        dest.shown,
                        if self.call.reviewing {
                            "an admission review"
                        } else {
                            "a shadow candidate"
                        }
                    ),
                });
            }
            let Some(allowed) = self.grant.find(&dest, method) else {
                return Err(Refusal {
                    reason: DenyReason::NotAllowed,
                    message: format!(
                        "{method} {}: no rule of the plugin's outbound grant allows it ({})",
                        dest.shown,
                        self.rules_named()
                    ),
                });
            };
            found.push(allowed);
        }
        let (index, rule) = found[0];
        // An internal address is reached only if every rule that allowed
        // one of the request's methods allows it.
        let private = found.iter().all(|(_, r)| r.private);
        let announced = request
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if let Some(n) = announced.filter(|n| *n > limits.request_bytes) {
            return Err(Refusal {
                reason: DenyReason::RequestBytes,
                message: format!(
                    "{method} {}: a body of {n} bytes is past the ceiling of {} (limits.httpRequestBytes)",
                    dest.shown, limits.request_bytes
                ),
            });
        }
        let secrets = self.grant.secrets.placed(request, &dest)?;
        let record = self
            .call
            .tape
            .clone()
            .filter(|t| !t.is_replaying())
            .map(|tape| (tape, header_pairs(request.headers())));
        Ok(Checked::Send(Plan {
            secrets,
            rule: format!("outbound[{index}] ({rule})"),
            private,
            host_label: rule_host(&rule.url),
            record,
            dest,
        }))
    }

    /// The grant's rules, for a refusal (at most 8 named).
    fn rules_named(&self) -> String {
        let rules: Vec<String> = self.grant.rules().map(|r| r.to_string()).collect();
        match rules.len() {
            0 => "it has no rules: outbound is denied by default".into(),
            n if n <= 8 => format!("its rules: {}", rules.join("; ")),
            n => format!("its rules: {}; and {} more", rules[..8].join("; "), n - 8),
        }
    }
}

/// The headers by which common HTTP frameworks let a request name another
/// method than its own.
const METHOD_OVERRIDE_HEADERS: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// The methods `request` names in method-override headers, each bounded
/// as a method is.
fn method_overrides(
    request: &http::Request<WasiBody>,
    dest: &Destination,
) -> Result<Vec<String>, Refusal> {
    let mut methods = Vec::new();
    for name in METHOD_OVERRIDE_HEADERS {
        for value in request.headers().get_all(name) {
            let method = value
                .to_str()
                .ok()
                .filter(|m| m.len() <= MAX_METHOD_BYTES && !m.is_empty())
                .ok_or_else(|| Refusal {
                    reason: DenyReason::Url,
                    message: format!(
                        "{}: a {name} header of {} bytes that is not a method is refused (at most {MAX_METHOD_BYTES} bytes of text)",
                        dest.shown,
                        value.len()
                    ),
                })?;
            methods.push(method.trim().to_ascii_uppercase());
        }
    }
    Ok(methods)
}

/// What the checks decided: send the request, or (in a replay) answer it
/// from the transcript.
enum Checked {
    Send(Plan),
    Replayed(HttpExchange),
}

/// A recorded answer as the response the guest reads; nothing is sent.
fn replayed(
    exchange: HttpExchange,
) -> (
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
) {
    use http_body_util::BodyExt;
    let body = http_body_util::Full::new(bytes::Bytes::from(exchange.body))
        .map_err(|never| match never {})
        .boxed_unsync();
    let mut response = http::Response::new(body);
    *response.status_mut() =
        http::StatusCode::from_u16(exchange.status).unwrap_or(http::StatusCode::OK);
    for (name, value) in exchange.response_headers {
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::try_from(name),
            http::HeaderValue::try_from(value),
        ) {
            response.headers_mut().append(n, v);
        }
    }
    // The recorded body is what the guest read: its length may differ.
    response.headers_mut().remove(http::header::CONTENT_LENGTH);
    (response, Box::new(async { Ok(()) }))
}

/// The `host` label of a rule's requests: the host part of its URL as
/// written in the grant (a bounded set, unlike the hosts a wildcard rule
/// lets a guest name).
fn rule_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_string()
}

impl WasiHttpHooks for OutboundHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        _options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Box<
        dyn Future<
                Output = Result<
                    (
                        http::Response<WasiBody>,
                        Box<dyn Future<Output = Result<(), Error>> + Send>,
                    ),
                    Error,
                >,
            > + Send,
    > {
        match self.check(&request) {
            Ok(Checked::Send(plan)) => Box::new(send::send(
                plan,
                request,
                self.grant.clone(),
                self.call.clone(),
            )),
            Ok(Checked::Replayed(exchange)) => Box::new(async move { Ok(replayed(exchange)) }),
            Err(refusal) => {
                let error = self.call.refuse(refusal);
                Box::new(async move { Err(error) })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::outbound::OutboundLimits;

    /// A reused instance may keep a value it was shown: the next call's
    /// lines and errors are redacted of it too.
    #[test]
    fn secrets_revealed_to_an_instance_stay_redacted_in_its_next_calls() {
        let grant = Arc::new(OutboundGrant::new(Vec::new(), OutboundLimits::default()).unwrap());
        let metrics = Arc::new(crate::control::metrics::Metrics::new());
        let first = HttpCall::new("p".into(), metrics, Instant::now(), None, false);
        let mut hooks = OutboundHooks::new(grant, first);
        hooks.call().revealed("tok", b"s3cr3t");
        assert_eq!(hooks.redact("kept: s3cr3t"), "kept: <secret:tok>");
        hooks.begin_call(Instant::now(), None, false);
        hooks.begin_call(Instant::now(), None, false);
        assert_eq!(hooks.redact("still: s3cr3t"), "still: <secret:tok>");
    }
}
