//! An admission webhook for tests: an HTTPS server in this process, with
//! its own CA (certificate valid for 127.0.0.1 and `hook.hooks.svc`),
//! answering each AdmissionReview as the test's handler says and keeping
//! every review it received.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use base64::Engine;
use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The DNS name the server's certificate also holds: Service `hook` in
/// namespace `hooks`.
pub const SERVICE_NAME: &str = "hook.hooks.svc";

/// One review as the webhook received it.
#[derive(Debug, Clone)]
pub struct Call {
    /// The request's path (without the query), which tells the test's
    /// webhooks apart.
    pub path: String,
    /// The `?timeout=` the server sent.
    pub query: String,
    /// `request` of the AdmissionReview.
    pub request: Value,
}

/// What the handler answers.
pub enum Reply {
    /// These `response` fields, with `uid` set to the request's unless
    /// they carry one.
    Respond(Value),
    /// Never answer (the connection stays open).
    Hang,
    /// Answer with this HTTP status and plain-text body, not a review.
    Status(u16, &'static str),
}

type Handler = Arc<dyn Fn(Call) -> BoxFuture<'static, Reply> + Send + Sync>;

/// A running webhook server; stops accepting when dropped.
pub struct WebhookServer {
    pub addr: SocketAddr,
    /// PEM of the CA that signed its certificate.
    pub ca_pem: String,
    calls: Arc<Mutex<Vec<Call>>>,
    received: Arc<Notify>,
    task: JoinHandle<()>,
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A CA and a server configuration whose certificate it signed.
pub fn certificates() -> (String, Arc<rustls::ServerConfig>) {
    certificates_asking(None)
}

/// [`certificates`], with a server that requires a client certificate
/// signed by `client_ca` (PEM) when given.
pub fn certificates_asking(client_ca: Option<&str>) -> (String, Arc<rustls::ServerConfig>) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "webhook test CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::from_params(&ca, &ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec![SERVICE_NAME.to_string()]).unwrap();
    leaf.subject_alt_names
        .push(SanType::IpAddress([127, 0, 0, 1].into()));
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        Some(pem) => {
            use rustls::pki_types::pem::PemObject;
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots.add(cert.unwrap()).unwrap();
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(
            vec![CertificateDer::from(leaf_cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    (ca_cert.pem(), Arc::new(config))
}

impl WebhookServer {
    /// Serves reviews, answering each as `handler` says (it may take its
    /// time, e.g. to write to the API server itself).
    pub async fn start_async(
        handler: impl Fn(Call) -> BoxFuture<'static, Reply> + Send + Sync + 'static,
    ) -> WebhookServer {
        Self::serve_with(certificates(), handler).await
    }

    /// Serves reviews as [`WebhookServer::start`] does, only to clients
    /// presenting a certificate `client_ca` (PEM) signed.
    pub async fn start_requiring_client_certificate(
        client_ca: &str,
        answer: impl Fn(&Call) -> Reply + Send + Sync + 'static,
    ) -> WebhookServer {
        let answer = Arc::new(answer);
        Self::serve_with(certificates_asking(Some(client_ca)), move |call| {
            let reply = answer(&call);
            Box::pin(async move { reply })
        })
        .await
    }

    async fn serve_with(
        (ca_pem, config): (String, Arc<rustls::ServerConfig>),
        handler: impl Fn(Call) -> BoxFuture<'static, Reply> + Send + Sync + 'static,
    ) -> WebhookServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let received = Arc::new(Notify::new());
        let handler: Handler = Arc::new(handler);
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let (calls2, received2) = (calls.clone(), received.clone());
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, handler) = (acceptor.clone(), handler.clone());
                let (calls, received) = (calls2.clone(), received2.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |req| {
                        serve(req, handler.clone(), calls.clone(), received.clone())
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        WebhookServer {
            addr,
            ca_pem,
            calls,
            received,
            task,
        }
    }

    /// Serves reviews, answering each as `answer` says at once.
    pub async fn start(answer: impl Fn(&Call) -> Reply + Send + Sync + 'static) -> WebhookServer {
        let answer = Arc::new(answer);
        Self::start_async(move |call| {
            let reply = answer(&call);
            Box::pin(async move { reply })
        })
        .await
    }

    /// `https://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// The CA as a `caBundle` (base64 of the PEM).
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    /// The reviews received at `path`, in order.
    pub fn calls(&self, path: &str) -> Vec<Call> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.path == path)
            .cloned()
            .collect()
    }

    /// Waits (bounded) until `path` received `n` reviews; the reviews.
    pub async fn await_calls(&self, path: &str, n: usize) -> Vec<Call> {
        let wait = async {
            loop {
                let notified = self.received.notified();
                let calls = self.calls(path);
                if calls.len() >= n {
                    return calls;
                }
                notified.await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(30), wait)
            .await
            .unwrap_or_else(|_| panic!("{path} did not receive {n} reviews"))
    }
}

async fn serve(
    req: hyper::Request<hyper::body::Incoming>,
    handler: Handler,
    calls: Arc<Mutex<Vec<Call>>>,
    received: Arc<Notify>,
) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let review: Value = serde_json::from_slice(&body).unwrap();
    let call = Call {
        path,
        query,
        request: review["request"].clone(),
    };
    calls.lock().unwrap().push(call.clone());
    received.notify_waiters();
    let uid = call.request["uid"].clone();
    let mut response = match handler(call).await {
        Reply::Respond(r) => r,
        Reply::Hang => std::future::pending().await,
        Reply::Status(code, text) => {
            return Ok(hyper::Response::builder()
                .status(code)
                .header("content-type", "text/plain")
                .body(Full::new(Bytes::from_static(text.as_bytes())))
                .unwrap());
        }
    };
    if response.get("uid").is_none() {
        response["uid"] = uid;
    }
    let answer = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    });
    Ok(hyper::Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(&answer).unwrap())))
        .unwrap())
}

/// An allowing answer.
pub fn allow() -> Reply {
    Reply::Respond(json!({"allowed": true}))
}

/// A denial as controller-runtime words one: 403 Forbidden with `message`.
pub fn deny(message: &str) -> Reply {
    Reply::Respond(json!({
        "allowed": false,
        "status": {"code": 403, "reason": "Forbidden", "message": message},
    }))
}

/// An allowing answer with a JSON patch.
pub fn patch(ops: Value) -> Reply {
    Reply::Respond(json!({
        "allowed": true,
        "patchType": "JSONPatch",
        "patch": base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&ops).unwrap()),
    }))
}
