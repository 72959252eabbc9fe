//! Outbound HTTP under the grant: a guest's `wasi:http/outgoing-handler`
//! requests, each checked and sent by the host, never by the guest.
//!
//! # The order of checks
//! In the store's `send_request` hook (`hooks.rs`), before anything leaves:
//! the reconcile's request count (`limits.httpRequests`); the URL,
//! normalized (`destination.rs`: no user, WHATWG host forms — decimal,
//! octal and IPv4-mapped IP literals become the address they mean — dot
//! segments resolved, a `Host` header that agrees with it); a rule of the
//! plugin's `outbound` grant naming its scheme, host, port, path and
//! method (`rule.rs`); the announced request body size; the
//! `${secret:NAME}` placeholders of its headers, each toward a destination
//! its secret lists (`secret.rs`). Then, in the request's future
//! (`send.rs`): the secrets' values are read and substituted (a value that
//! cannot be read refuses the request, nothing sent), the host resolves the name itself, refuses
//! internal addresses unless the rule names that IP literal or says
//! `private: true`, connects to the address it checked, and bounds the
//! connection count, the request and response bodies, and everything up to
//! the last byte by the reconcile's deadline. Redirects are never followed.
//! Every response to a plugin with secrets has their values redacted
//! before the guest reads it, whether or not the request carried them.
//!
//! # What a refusal does
//! The guest's request fails (`HTTP-request-denied`, or the size or
//! timeout code), and the refusal is kept in the call's state: the
//! reconcile then fails with it whatever the guest returns, naming the
//! rule or the ceiling (`Sandbox::call`), and it is counted in
//! `wasmctrl_plugin_http_denied_total{reason}`.

mod call;
mod connections;
mod destination;
mod hooks;
mod lookup;
mod rule;
mod secret;
mod send;
mod tape;

use std::sync::Arc;

pub(crate) use call::HttpCall;
pub use connections::Connections;
pub use destination::Destination;
pub(crate) use hooks::OutboundHooks;
pub use lookup::MAX_LOOKUPS;
pub use rule::{HostPattern, OutboundRule, RequestHost, Target, grant_covers, method_allowed};
pub use secret::{
    MAX_SECRET_BYTES, MAX_SECRETS, RevealRefusal, SecretBinding, SecretKeyRef, SecretSource,
    Secrets,
};
pub use send::tls_config;
pub use tape::{HttpExchange, HttpTape, MAX_EXCHANGES, MAX_RECORDED_BODY, MAX_RECORDED_HEADERS};

use super::limits::Ceiling;

/// Per-plugin ceilings of outbound HTTP (`limits.http*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundLimits {
    /// Requests one reconcile may make (`limits.httpRequests`).
    pub requests: u32,
    /// Bytes of one request's body (`limits.httpRequestBytes`).
    pub request_bytes: u64,
    /// Bytes of one response's body (`limits.httpResponseBytes`).
    pub response_bytes: u64,
    /// Connections the plugin's reconciles hold open at once, across its
    /// versions (`limits.httpConnections`).
    pub connections: u32,
}

impl Default for OutboundLimits {
    fn default() -> Self {
        Self {
            requests: 100,
            request_bytes: 1 << 20,
            response_bytes: 4 << 20,
            connections: 16,
        }
    }
}

impl OutboundLimits {
    pub const REQUESTS: std::ops::RangeInclusive<u64> = 1..=100_000;
    pub const BODY_BYTES: std::ops::RangeInclusive<u64> = (1 << 10)..=(1 << 30);
    pub const CONNECTIONS: std::ops::RangeInclusive<u64> = 1..=1_024;
}

/// A plugin's outbound grant: its rules (checked), its ceilings and the
/// connections its reconciles hold. Shared by every store of the plugin.
#[derive(Debug)]
pub struct OutboundGrant {
    rules: Vec<(OutboundRule, Target)>,
    limits: OutboundLimits,
    /// Only GET and HEAD may be sent (a shadow candidate's grant: its
    /// writes are never sent, and to the outside world any other method
    /// may write).
    read_only: bool,
    /// The connections the plugin holds, counted with its other versions'
    /// when the host shares them (see [`OutboundGrant::sharing_connections`]).
    connections: Arc<Connections>,
    /// The values its requests may carry as `${secret:NAME}`.
    secrets: Secrets,
    /// The TLS settings of its connections (None: the platform's roots).
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Default for OutboundGrant {
    fn default() -> Self {
        Self::new(Vec::new(), OutboundLimits::default()).expect("no rules cannot fail")
    }
}

impl OutboundGrant {
    /// The grant of `rules` under `limits`; an invalid rule is refused
    /// with its index and why (the config checks them first).
    pub fn new(rules: Vec<OutboundRule>, limits: OutboundLimits) -> Result<Self, String> {
        let rules = rules
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let t = r.target().map_err(|e| format!("outbound[{i}]: {e}"))?;
                Ok((r, t))
            })
            .collect::<Result<_, String>>()?;
        Ok(Self {
            rules,
            connections: Connections::new(),
            limits,
            read_only: false,
            secrets: Secrets::default(),
            tls: None,
        })
    }

    /// The same grant whose connections trust `tls`'s roots (see
    /// [`tls_config`]).
    pub fn with_tls(mut self, tls: Arc<rustls::ClientConfig>) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The same grant counting its connections in `connections`, the
    /// plugin's count that its other versions' grants share: the ceiling
    /// `limits.httpConnections` bounds what all of them hold together.
    pub fn sharing_connections(mut self, connections: Arc<Connections>) -> Self {
        self.connections = connections;
        self
    }

    /// The same grant with `secrets` for its requests to carry.
    pub fn with_secrets(mut self, secrets: Secrets) -> Self {
        self.secrets = secrets;
        self
    }

    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// The same grant allowing only GET and HEAD.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    pub fn rules(&self) -> impl Iterator<Item = &OutboundRule> {
        self.rules.iter().map(|(r, _)| r)
    }

    pub fn limits(&self) -> &OutboundLimits {
        &self.limits
    }

    /// The declared rules this grant does not cover, each as declared:
    /// what a plugin asks for beyond its grant.
    pub fn uncovered<'a>(&self, declared: &'a [OutboundRule]) -> Vec<&'a OutboundRule> {
        declared
            .iter()
            .filter(|d| {
                let Ok(target) = d.target() else {
                    return true;
                };
                !self
                    .rules
                    .iter()
                    .any(|(g, t)| grant_covers((t, &g.methods), (&target, &d.methods)))
            })
            .collect()
    }

    /// The index and rule that allow `method` to `dest`, if any.
    fn find(&self, dest: &Destination, method: &str) -> Option<(usize, &OutboundRule)> {
        self.rules
            .iter()
            .enumerate()
            .find(|(_, (r, t))| {
                t.matches(&dest.scheme, &dest.host, dest.port, &dest.path)
                    && method_allowed(&r.methods, method)
            })
            .map(|(i, (r, _))| (i, r))
    }
}

/// Why an outbound request was refused: the `reason` label of
/// `wasmctrl_plugin_http_denied_total`, from this fixed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyReason {
    /// No rule names the destination and method.
    NotAllowed,
    /// The URL carries a user, does not parse, or its `Host` header
    /// disagrees with it.
    Url,
    /// The name resolved to (or the rule's literal is) an internal address
    /// the rule does not allow.
    InternalAddress,
    /// A shadow candidate's request other than GET or HEAD.
    ReadOnly,
    /// `limits.httpRequests`.
    Requests,
    /// `limits.httpRequestBytes`.
    RequestBytes,
    /// `limits.httpResponseBytes`.
    ResponseBytes,
    /// `limits.httpConnections`.
    Connections,
    /// Every one of the host's name-lookup slots is taken (lookups the
    /// resolver has not answered; see [`MAX_LOOKUPS`]).
    Lookups,
    /// The reconcile's deadline passed while the request was under way.
    Deadline,
    /// A `${secret:NAME}` placeholder the plugin's secrets do not hold, in
    /// the URL, or whose value cannot be read now.
    Secret,
    /// A secret placed in a request to a destination its entry does not
    /// list.
    SecretHost,
}

impl DenyReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DenyReason::NotAllowed => "notAllowed",
            DenyReason::Url => "url",
            DenyReason::InternalAddress => "internalAddress",
            DenyReason::ReadOnly => "readOnly",
            DenyReason::Requests => "requests",
            DenyReason::RequestBytes => "requestBytes",
            DenyReason::ResponseBytes => "responseBytes",
            DenyReason::Connections => "connections",
            DenyReason::Lookups => "lookups",
            DenyReason::Deadline => "deadline",
            DenyReason::Secret => "secret",
            DenyReason::SecretHost => "secretHost",
        }
    }

    /// The ceiling of `limits` this reason is, if it is one.
    pub(crate) fn ceiling(self) -> Option<Ceiling> {
        match self {
            DenyReason::Requests => Some(Ceiling::HttpRequests),
            DenyReason::RequestBytes => Some(Ceiling::HttpRequestBytes),
            DenyReason::ResponseBytes => Some(Ceiling::HttpResponseBytes),
            DenyReason::Connections => Some(Ceiling::HttpConnections),
            _ => None,
        }
    }
}

/// One refused request: why, and the message the reconcile fails with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("outbound request refused: {message}")]
pub struct Refusal {
    pub reason: DenyReason,
    pub message: String,
}

/// `url` cut to at most 96 characters, with a marker: a refusal names
/// where a request went without repeating a guest's whole URL (which may
/// carry a token or be megabytes long).
pub(crate) fn cut_url(url: &str) -> String {
    const MAX: usize = 96;
    match url.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &url[..i]),
        None => url.to_string(),
    }
}
