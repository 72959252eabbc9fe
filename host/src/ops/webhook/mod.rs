//! The admission webhook server: HTTPS (axum on hyper, rustls) on
//! `webhook.bind`, serving `POST /validate/<plugin>` and `POST
//! /mutate/<plugin>` with AdmissionReview v1 for the plugins that declare
//! webhooks, and the registration of those webhooks with the API server.
//!
//! | File | Job |
//! |---|---|
//! | `certs` | the serving certificate: mounted (`certDir`) or the host's own CA, rotated |
//! | `callers` | who may call: with a client CA, only callers it signed a certificate for |
//! | `review` | one review: the plugin's verdict under its deadline, failure policy and mode |
//! | `patch` | the JSONPatch of a mutation, within bounds |
//! | `registration` | the Validating- and MutatingWebhookConfiguration of each plugin |
//!
//! # Bounds
//! A review body is read up to [`MAX_REVIEW_BYTES`] (413 past it) within
//! the review's timeout (408 past it); at most
//! [`MAX_CONNECTIONS`] connections are served at once (more are closed at
//! once); a TLS handshake and a request's headers each have
//! [`HANDSHAKE_TIMEOUT`]. Each review runs in the plugin's sandbox, with
//! its limits, under the webhook's `timeoutSeconds` less a margin. A
//! mutation is compared with the reviewed object only when that is at most
//! 3 MiB, one per CPU at a time, and its patch is bounded ([`patch`]).

mod callers;
mod certs;
pub mod patch;
mod registration;
mod review;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use callers::ClientCa;
pub use certs::{CertError, Certificates, Names, RENEW_BEFORE, SERVING_VALIDITY};
pub use registration::{
    Endpoint, configuration, configuration_name, path_segment, register, webhook_name,
};
pub use review::{BadReview, MAX_REVIEW_BYTES};

use crate::config::{AdmissionMode, WebhookSection};
use crate::control::metrics::{Metrics, ReasonLabel, WebhookCodeLabels, WebhookLabel};
use crate::ops::serving;
use crate::sandbox::Plugin;
use crate::sandbox::admission::{Review, ReviewError, Verdict, Webhook, WebhookKind};
use futures::future::BoxFuture;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 256;
/// How long a client has to finish its TLS handshake, and to send a
/// request's headers.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What answers a webhook's reviews: a plugin; or, in benchmarks, native
/// code served by the same server, to measure the sandbox against it.
pub trait Reviewer: Send + Sync + 'static {
    /// The name its webhooks are served under (`/validate/<name>`).
    fn name(&self) -> &str;
    /// The webhooks it serves.
    fn webhooks(&self) -> &[Webhook];
    /// Its verdict on `request` (an AdmissionReview v1 `request`, JSON),
    /// within `timeout`.
    fn review(
        &self,
        review: Review,
        request: String,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Verdict, ReviewError>>;
}

impl Reviewer for Plugin {
    fn name(&self) -> &str {
        Plugin::name(self)
    }

    fn webhooks(&self) -> &[Webhook] {
        Plugin::webhooks(self)
    }

    fn review(
        &self,
        review: Review,
        request: String,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Verdict, ReviewError>> {
        Box::pin(async move {
            Plugin::review(self, review, request, timeout, CancellationToken::new())
                .await
                .0
        })
    }
}

/// The reviewers the server answers for.
pub trait Reviewers: Send + Sync + 'static {
    /// Reviewer `name` as it serves reviews now, and how its verdicts are
    /// answered; None when no such plugin runs.
    fn reviewer(&self, name: &str) -> Option<(Arc<dyn Reviewer>, AdmissionMode)>;
}

/// Why the webhook server could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("webhook.bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Cert(#[from] CertError),
    #[error("webhook TLS: {0}")]
    Tls(#[from] rustls::Error),
}

/// A running webhook server.
#[derive(Debug)]
pub struct WebhookServer {
    addr: SocketAddr,
    endpoint: Endpoint,
    certs: Certificates,
}

#[derive(Clone)]
struct Served {
    reviewers: Arc<dyn Reviewers>,
    metrics: Arc<Metrics>,
}

impl WebhookServer {
    /// Binds `section.bind`, loads or makes the certificate, and serves
    /// until `stop`. `client` reads and stores the shared CA of
    /// `webhook.caSecret`. Callers must present a certificate that
    /// `webhook.clientCAFile` signed, or else `client_ca` (PEM) when given.
    pub async fn start(
        section: &WebhookSection,
        client: Option<&kube::Client>,
        client_ca: Option<&str>,
        base_dir: &Path,
        reviewers: Arc<dyn Reviewers>,
        metrics: Arc<Metrics>,
        stop: CancellationToken,
    ) -> Result<Self, WebhookError> {
        let bind = section.bind;
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .map_err(|source| WebhookError::Bind { addr: bind, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| WebhookError::Bind { addr: bind, source })?;
        let endpoint = endpoint(section, addr);
        let certs = match (&section.cert_dir, &section.ca_secret) {
            (Some(dir), _) => Certificates::mounted(&base_dir.join(dir))?,
            (None, Some(s)) => {
                let client = client.ok_or_else(|| CertError::Shared {
                    namespace: s.namespace.clone(),
                    name: s.name.clone(),
                    message: "no API server to read it from".into(),
                })?;
                Certificates::shared(client, &s.namespace, &s.name, names(&endpoint, addr)).await?
            }
            (None, None) => Certificates::own(names(&endpoint, addr))?,
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client_ca_file = section.client_ca_file.as_ref().map(|f| base_dir.join(f));
        let callers = match (&client_ca_file, client_ca) {
            (Some(file), _) => Some(ClientCa::File(file)),
            (None, Some(pem)) => Some(ClientCa::Pem(pem)),
            (None, None) => None,
        };
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        let builder = match callers {
            Some(ca) => builder.with_client_cert_verifier(callers::verifier(ca, provider)?),
            None => builder.with_no_client_auth(),
        };
        let mut tls = builder.with_cert_resolver(certs.resolver());
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let app = Router::new()
            .route("/validate/{plugin}", post(validate))
            .route("/mutate/{plugin}", post(mutate))
            .with_state(Served {
                reviewers,
                metrics: metrics.clone(),
            });
        let tls = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let refused = metrics.webhook_refused_handshakes.clone();
        let handshake = move |tcp: tokio::net::TcpStream| {
            let (tls, refused) = (tls.clone(), refused.clone());
            async move {
                let peer = tcp.peer_addr().ok();
                tls.accept(tcp)
                    .await
                    .inspect_err(|e| {
                        let reason = callers::refusal_reason(e);
                        refused
                            .get_or_create(&ReasonLabel {
                                reason: reason.into(),
                            })
                            .inc();
                        tracing::debug!(?peer, reason, "webhook TLS handshake failed: {e}");
                    })
                    .ok()
            }
        };
        let bounds = serving::Bounds::new(MAX_CONNECTIONS, HANDSHAKE_TIMEOUT);
        tokio::spawn(serving::serve(
            "webhook", listener, app, bounds, stop, handshake,
        ));
        tracing::info!(%addr, ?endpoint, "webhook server listening");
        Ok(Self {
            addr,
            endpoint,
            certs,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How the API server reaches this server.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The PEM the API server verifies this server with, as it is now.
    pub fn ca_bundle(&self) -> Option<String> {
        self.certs.ca_bundle()
    }
}

/// Where the API server calls: `url`, `service`, or the bound address.
fn endpoint(section: &WebhookSection, addr: SocketAddr) -> Endpoint {
    if let Some(url) = &section.url {
        return Endpoint::Url(url.trim_end_matches('/').to_string());
    }
    if let Some(s) = &section.service {
        return Endpoint::Service {
            namespace: s.namespace.clone(),
            name: s.name.clone(),
            port: s.port,
        };
    }
    let ip = match addr.ip() {
        ip if ip.is_unspecified() => IpAddr::from([127, 0, 0, 1]),
        ip => ip,
    };
    Endpoint::Url(format!("https://{}", SocketAddr::new(ip, addr.port())))
}

/// The names the host's own serving certificate is for.
fn names(endpoint: &Endpoint, addr: SocketAddr) -> Names {
    let mut names = Names {
        dns: vec!["localhost".into()],
        ips: vec![
            IpAddr::from([127, 0, 0, 1]),
            IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]),
        ],
    };
    if !addr.ip().is_unspecified() && !names.ips.contains(&addr.ip()) {
        names.ips.push(addr.ip());
    }
    match endpoint {
        Endpoint::Url(url) => {
            if let Some(host) = url::Url::parse(url)
                .ok()
                .and_then(|u| u.host().map(|h| h.to_owned()))
            {
                match host {
                    url::Host::Domain(d) if d != "localhost" => names.dns.push(d),
                    url::Host::Ipv4(ip) if !names.ips.contains(&ip.into()) => {
                        names.ips.push(ip.into())
                    }
                    url::Host::Ipv6(ip) if !names.ips.contains(&ip.into()) => {
                        names.ips.push(ip.into())
                    }
                    _ => {}
                }
            }
        }
        Endpoint::Service {
            namespace, name, ..
        } => {
            names.dns.push(format!("{name}.{namespace}.svc"));
            names
                .dns
                .push(format!("{name}.{namespace}.svc.cluster.local"));
        }
    }
    names
}

async fn validate(
    state: State<Served>,
    plugin: UrlPath<String>,
    query: RawQuery,
    body: Body,
) -> Response {
    serve(state, plugin, query, body, WebhookKind::Validating).await
}

async fn mutate(
    state: State<Served>,
    plugin: UrlPath<String>,
    query: RawQuery,
    body: Body,
) -> Response {
    serve(state, plugin, query, body, WebhookKind::Mutating).await
}

async fn serve(
    State(s): State<Served>,
    UrlPath(name): UrlPath<String>,
    RawQuery(query): RawQuery,
    body: Body,
    kind: WebhookKind,
) -> Response {
    let Some((plugin, mode)) = s.reviewers.reviewer(&name) else {
        // Unknown names are not metric labels: anyone who reaches the
        // port chooses them.
        return (
            StatusCode::NOT_FOUND,
            BadReview::UnknownPlugin(name).to_string(),
        )
            .into_response();
    };
    let label = WebhookLabel {
        webhook: format!("/{}/{}", registration::path_segment(kind), plugin.name()),
    };
    let mut counted = Counted::start(s.metrics.clone(), label);
    let timeout = review::parse_timeout(query.as_deref());
    let patience = review::body_patience(timeout);
    let response = match tokio::time::timeout(
        patience,
        axum::body::to_bytes(body, MAX_REVIEW_BYTES),
    )
    .await
    {
        Err(_) => (
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the AdmissionReview body did not arrive within {patience:?} (the review's timeout)"
            ),
        )
            .into_response(),
        Ok(Err(e)) if too_large(&e) => (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("an AdmissionReview is at most {MAX_REVIEW_BYTES} bytes"),
        )
            .into_response(),
        // The caller went away mid-body: no one reads an answer, and the
        // review is counted as one whose caller left.
        Ok(Err(_)) => return StatusCode::BAD_REQUEST.into_response(),
        Ok(Ok(body)) => {
            match review::answer(&*plugin, mode, kind, &body, timeout, &s.metrics).await {
                Ok(review) => axum::Json(review).into_response(),
                Err(bad @ BadReview::NoWebhook { .. }) => {
                    (StatusCode::NOT_FOUND, bad.to_string()).into_response()
                }
                Err(bad) => (StatusCode::BAD_REQUEST, bad.to_string()).into_response(),
            }
        }
    };
    counted.code = response.status().as_u16();
    response
}

/// Whether a body read failed for its length rather than its connection.
fn too_large(e: &axum::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cause = c.source();
    }
    false
}

/// A review in the webhook metrics: in flight from its start, then timed
/// and counted by its answer's code when it ends, also when it ends
/// because its caller hung up and the handler was dropped mid-review
/// (counted as 499, nginx's "client closed request"), so that the
/// in-flight gauge never keeps a review that is gone.
struct Counted {
    metrics: Arc<Metrics>,
    label: WebhookLabel,
    started: Instant,
    /// The answer's status code, once there is one.
    code: u16,
}

impl Counted {
    fn start(metrics: Arc<Metrics>, label: WebhookLabel) -> Self {
        metrics.webhook_in_flight.get_or_create(&label).inc();
        Counted {
            metrics,
            label,
            started: Instant::now(),
            code: 499,
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let m = &self.metrics;
        m.webhook_in_flight.get_or_create(&self.label).dec();
        m.webhook_latency
            .get_or_create(&self.label)
            .observe(self.started.elapsed().as_secs_f64());
        m.webhook_requests
            .get_or_create(&WebhookCodeLabels {
                webhook: self.label.webhook.clone(),
                code: self.code.to_string(),
            })
            .inc();
    }
}

/// Keeps every plugin's webhook configurations as its webhooks are: told
/// of a change, it reads the plugin's webhooks then (so a burst of changes
/// is one write) and applies them, retrying on failure. Every
/// `reapply` it applies them all again, which puts back a configuration
/// someone else deleted or edited: without it the plugin's reviews would
/// stop being asked for, and nothing would say so.
pub struct Registrar {
    changes: mpsc::UnboundedSender<String>,
}

/// How long a failed registration waits before it is tried again.
const RETRY: Duration = Duration::from_secs(2);

/// How often the registrar looks whether the `caBundle` changed (a
/// mounted `ca.crt` renewed); each look is a stat of the mounted files.
const CA_CHECK: Duration = Duration::from_secs(5);

/// Marks every applied plugin to be applied again, and asks for each.
fn all_due(
    applied: &BTreeMap<String, Vec<Webhook>>,
    due: &mut BTreeSet<String>,
    ask: &mpsc::UnboundedSender<String>,
) {
    for name in applied.keys() {
        if due.insert(name.clone()) {
            let _ = ask.send(name.clone());
        }
    }
}

impl Registrar {
    /// Starts registering with `client` toward `server`, reading each
    /// plugin's webhooks from `reviewers`, applying all again every
    /// `reapply`, until `stop`.
    pub fn start(
        client: kube::Client,
        server: &WebhookServer,
        reviewers: Arc<dyn Reviewers>,
        reapply: Duration,
        stop: CancellationToken,
    ) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let retry = tx.clone();
        let endpoint = server.endpoint().clone();
        let certs = server.certs.clone();
        let mut ca = certs.ca_bundle();
        tokio::spawn(async move {
            let mut applied: BTreeMap<String, Vec<Webhook>> = BTreeMap::new();
            // Plugins to apply again though their webhooks are as applied.
            let mut due = BTreeSet::new();
            let mut ca_check = tokio::time::interval(CA_CHECK);
            ca_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut reapplying =
                tokio::time::interval_at(tokio::time::Instant::now() + reapply, reapply);
            reapplying.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let name = tokio::select! {
                    _ = stop.cancelled() => return,
                    name = rx.recv() => match name { Some(n) => n, None => return },
                    _ = ca_check.tick() => {
                        // A renewed CA: every configuration is written
                        // again with it, or the API server could no
                        // longer verify the renewed serving certificate.
                        let now = certs.ca_bundle();
                        if now != ca {
                            tracing::info!(plugins = applied.len(), "webhook CA changed; registering again");
                            ca = now;
                            all_due(&applied, &mut due, &retry);
                        }
                        continue;
                    }
                    _ = reapplying.tick() => {
                        tracing::debug!(plugins = applied.len(), "applying the webhook configurations again");
                        all_due(&applied, &mut due, &retry);
                        continue;
                    }
                };
                let webhooks = reviewers
                    .reviewer(&name)
                    .map(|(p, _)| p.webhooks().to_vec())
                    .unwrap_or_default();
                // The first look at a plugin always writes: configurations a
                // former run left behind are brought in line (or deleted).
                let changed = applied.get(&name) != Some(&webhooks);
                if !due.remove(&name) && !changed {
                    continue;
                }
                match register(&client, &name, &webhooks, &endpoint, ca.as_deref()).await {
                    Ok(()) => {
                        if changed {
                            tracing::info!(plugin = %name, webhooks = webhooks.len(), "webhook configurations applied");
                        } else {
                            tracing::debug!(plugin = %name, "webhook configurations applied again");
                        }
                        applied.insert(name, webhooks);
                    }
                    Err(e) => {
                        // Forgotten, so the retry writes whatever it finds.
                        applied.remove(&name);
                        tracing::error!(plugin = %name, "cannot apply the plugin's webhook configurations (retrying): {e}");
                        let retry = retry.clone();
                        let stop = stop.clone();
                        tokio::spawn(async move {
                            tokio::select! {
                                _ = stop.cancelled() => {}
                                _ = tokio::time::sleep(RETRY) => { let _ = retry.send(name); }
                            }
                        });
                    }
                }
            }
        });
        Self { changes: tx }
    }

    /// Plugin `name` was loaded, swapped or removed.
    pub fn changed(&self, name: &str) {
        let _ = self.changes.send(name.to_string());
    }
}
