//! One call of a webhook: an HTTPS POST of the review, within the
//! webhook's `timeoutSeconds` from start (resolving, connecting, TLS,
//! sending and reading the answer), trusting only the `caBundle` when one
//! is set (else the platform's roots), and reading at most
//! [`MAX_RESPONSE_BYTES`] of the answer. Failures read as Go's HTTP client
//! words them (`Post "URL": context deadline exceeded`), since upstream's
//! messages carry them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

use super::config::Endpoint;

/// The most of a webhook's answer read: a patch rewriting a whole 3 MiB
/// object, base64-encoded, with warnings and annotations fits several
/// times over. A longer answer is a failed call (and counted as the
/// `webhookResponse` limit).
pub(crate) const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// How much of an error answer's body an error message quotes.
const QUOTED_BODY: usize = 1024;

/// The certificate the server presents to a webhook server that asks for
/// one, and its key (PKCS #8 DER).
pub(crate) struct ClientIdentity {
    cert: CertificateDer<'static>,
    key: Vec<u8>,
}

impl ClientIdentity {
    pub(crate) fn new(cert: CertificateDer<'static>, key: Vec<u8>) -> Self {
        ClientIdentity { cert, key }
    }

    fn chain_and_key(&self) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        (
            vec![self.cert.clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.clone())),
        )
    }
}

/// Where one call goes, resolved.
#[derive(Debug)]
pub(crate) struct Destination {
    /// The URL as errors show it, `?timeout=Ns` included.
    pub(crate) shown: String,
    /// What to connect to: an address, a name to resolve, or why the
    /// Service has no address.
    connect: Connect,
    /// What the certificate must be valid for.
    server_name: String,
    /// The `Host` header.
    authority: String,
    path_and_query: String,
}

#[derive(Debug)]
enum Connect {
    Address(SocketAddr),
    Host(String, u16),
    Unreachable(String),
}

/// Where `endpoint` is called with a deadline of `timeout`. A Service is
/// reached at the address `resolve` gives for it (upstream's service
/// resolver), with `NAME.NAMESPACE.svc` as the TLS server name.
pub(crate) fn destination(
    endpoint: &Endpoint,
    timeout: Duration,
    resolve: impl FnOnce(&str, &str, u16) -> Result<SocketAddr, String>,
) -> Destination {
    // As upstream: the time the call has, rounded up to a second.
    let seconds = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
    let query = format!("timeout={}s", seconds.max(1));
    match endpoint {
        Endpoint::Url(url) => {
            let host = match url.host() {
                Some(url::Host::Ipv6(ip)) => ip.to_string(),
                Some(h) => h.to_string(),
                None => String::new(),
            };
            let port = url.port_or_known_default().unwrap_or(443);
            let connect = match host.parse() {
                Ok(ip) => Connect::Address(SocketAddr::new(ip, port)),
                Err(_) => Connect::Host(host.clone(), port),
            };
            Destination {
                shown: format!("{}?{query}", url.as_str()),
                connect,
                server_name: host,
                authority: url[url::Position::BeforeHost..url::Position::AfterPort].to_string(),
                path_and_query: format!("{}?{query}", url.path()),
            }
        }
        Endpoint::Service {
            namespace,
            name,
            path,
            port,
        } => {
            let host = format!("{name}.{namespace}.svc");
            let path = if path.is_empty() { "/" } else { path };
            Destination {
                shown: format!("https://{host}:{port}{path}?{query}"),
                connect: match resolve(namespace, name, *port) {
                    Ok(addr) => Connect::Address(addr),
                    Err(why) => Connect::Unreachable(why),
                },
                authority: format!("{host}:{port}"),
                server_name: host,
                path_and_query: format!("{path}?{query}"),
            }
        }
    }
}

/// Why a call failed, as the cause after `Post "URL": `.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    /// The webhook's `timeoutSeconds` passed (Go's context error).
    #[error("context deadline exceeded")]
    Deadline,
    /// The destination has no address (a Service without one, a name that
    /// does not resolve).
    #[error("{0}")]
    Unreachable(String),
    #[error("dial tcp {addr}: {cause}")]
    Connect { addr: String, cause: String },
    #[error("{0}")]
    Tls(String),
    #[error("{0}")]
    Http(String),
    /// A status other than 2xx: the message of its Status body, or
    /// client-go's words for an answer without one.
    #[error("{0}")]
    Status(String),
    #[error("the response body exceeds the limit of {MAX_RESPONSE_BYTES} bytes")]
    TooLarge,
}

/// The TLS client a webhook is called with: only `ca_pem`'s certificates
/// as roots when given (as client-go's `CAData`), else the platform's;
/// presenting `identity` when the webhook server asks for a client
/// certificate.
pub(crate) fn tls_config(
    ca_pem: Option<&[u8]>,
    identity: Option<&ClientIdentity>,
) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match ca_pem {
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| format!("unable to load root certificates: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("unable to load root certificates: {e}"))?;
            }
            if roots.is_empty() {
                return Err(
                    "unable to load root certificates: unable to parse bytes as PEM block".into(),
                );
            }
            builder.with_root_certificates(roots)
        }
        None => {
            let verifier =
                rustls_platform_verifier::Verifier::new(provider).map_err(|e| e.to_string())?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
        }
    };
    let mut config = match identity {
        Some(id) => {
            let (chain, key) = id.chain_and_key();
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| e.to_string())?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// POSTs `body` to `dest` over TLS, within `deadline`; the answer's body
/// on a 2xx status.
pub(crate) async fn post(
    dest: &Destination,
    tls: Arc<rustls::ClientConfig>,
    body: Vec<u8>,
    deadline: Duration,
) -> Result<Bytes, CallError> {
    tokio::time::timeout(deadline, exchange(dest, tls, body))
        .await
        .unwrap_or(Err(CallError::Deadline))
}

async fn exchange(
    dest: &Destination,
    tls: Arc<rustls::ClientConfig>,
    body: Vec<u8>,
) -> Result<Bytes, CallError> {
    let addr = match &dest.connect {
        Connect::Address(a) => *a,
        Connect::Unreachable(why) => return Err(CallError::Unreachable(why.clone())),
        Connect::Host(host, port) => tokio::net::lookup_host((host.as_str(), *port))
            .await
            .map_err(|e| CallError::Unreachable(format!("dial tcp: lookup {host}: {e}")))?
            .next()
            .ok_or_else(|| {
                CallError::Unreachable(format!("dial tcp: lookup {host}: no such host"))
            })?,
    };
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| CallError::Connect {
            addr: addr.to_string(),
            cause: match e.kind() {
                std::io::ErrorKind::ConnectionRefused => "connect: connection refused".into(),
                _ => format!("connect: {e}"),
            },
        })?;
    let name = ServerName::try_from(dest.server_name.clone())
        .map_err(|e| CallError::Tls(format!("tls: {e}")))?;
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .map_err(|e| CallError::Tls(tls_cause(&e)))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| CallError::Http(e.to_string()))?;
    let request = hyper::Request::post(dest.path_and_query.as_str())
        .header(hyper::header::HOST, dest.authority.as_str())
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| CallError::Http(e.to_string()))?;
    let answer = async move {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| CallError::Http(e.to_string()))?;
        // Without its sender the connection ends once the answer is read.
        drop(sender);
        let status = response.status();
        let announced = response
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if announced.is_some_and(|n| n > MAX_RESPONSE_BYTES as u64) {
            return Err(CallError::TooLarge);
        }
        let bytes = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    CallError::TooLarge
                } else {
                    CallError::Http(e.to_string())
                }
            })?
            .to_bytes();
        if !status.is_success() {
            return Err(CallError::Status(status_cause(status.as_u16(), &bytes)));
        }
        Ok(bytes)
    };
    let (answer, _) = tokio::join!(answer, conn);
    answer
}

/// client-go's words for a non-2xx answer: the message of a Status body,
/// else the body quoted.
fn status_cause(code: u16, body: &[u8]) -> String {
    /// Only what is read of a Status: the rest is skipped, not built.
    #[derive(serde::Deserialize)]
    struct Status {
        #[serde(default)]
        kind: String,
        message: Option<String>,
    }
    if let Ok(status) = serde_json::from_slice::<Status>(body)
        && status.kind == "Status"
        && let Some(mut message) = status.message
    {
        crate::values::cut_message(&mut message, QUOTED_BODY);
        return message;
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(QUOTED_BODY)]);
    if text.trim().is_empty() {
        format!(
            "the server responded with the status code {code} but did not return more information"
        )
    } else {
        format!(
            "an error on the server ({}) has prevented the request from succeeding",
            crate::values::go_quote(text.trim())
        )
    }
}

/// A TLS failure as Go's `crypto/tls` reports the common ones.
fn tls_cause(e: &std::io::Error) -> String {
    use rustls::CertificateError as C;
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(c)) => {
            let why = match c {
                // Go finds no chain to its roots either way.
                C::UnknownIssuer | C::BadSignature => {
                    "certificate signed by unknown authority".to_string()
                }
                C::NotValidForName | C::NotValidForNameContext { .. } => {
                    "certificate is not valid for the requested name".to_string()
                }
                C::Expired
                | C::ExpiredContext { .. }
                | C::NotValidYet
                | C::NotValidYetContext { .. } => {
                    "certificate has expired or is not yet valid".to_string()
                }
                other => format!("{other:?}"),
            };
            format!("tls: failed to verify certificate: x509: {why}")
        }
        Some(other) => format!("tls: {other}"),
        None => format!("tls: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_show_upstream_s_urls() {
        let url = Endpoint::Url(url::Url::parse("https://127.0.0.1:8443/validate").unwrap());
        let d = destination(&url, Duration::from_secs(10), |_, _, _| unreachable!());
        assert_eq!(d.shown, "https://127.0.0.1:8443/validate?timeout=10s");
        assert_eq!(d.authority, "127.0.0.1:8443");
        assert_eq!(d.path_and_query, "/validate?timeout=10s");
        let svc = Endpoint::Service {
            namespace: "hooks".into(),
            name: "admit".into(),
            path: "/mutate".into(),
            port: 443,
        };
        let d = destination(&svc, Duration::from_secs(1), |ns, name, port| {
            assert_eq!((ns, name, port), ("hooks", "admit", 443));
            Err("service \"admit\" not found".into())
        });
        assert_eq!(d.shown, "https://admit.hooks.svc:443/mutate?timeout=1s");
        assert_eq!(d.server_name, "admit.hooks.svc");
        assert!(matches!(d.connect, Connect::Unreachable(_)));
    }

    #[test]
    fn an_error_answers_status_message_is_cut() {
        let body = serde_json::json!({"kind": "Status", "message": "m".repeat(3000), "details": {"x": [1, 2, 3]}});
        let cause = status_cause(500, body.to_string().as_bytes());
        assert_eq!(
            cause,
            format!("{}… (1976 more bytes not shown)", "m".repeat(QUOTED_BODY))
        );
    }

    #[test]
    fn error_answers_are_worded_as_client_go_words_them() {
        let status = br#"{"kind":"Status","message":"no route"}"#;
        assert_eq!(status_cause(404, status), "no route");
        assert_eq!(
            status_cause(500, b"boom"),
            "an error on the server (\"boom\") has prevented the request from succeeding"
        );
        assert!(status_cause(502, b"").contains("status code 502"));
    }
}
