//! Who may call the webhook server: with a client CA (`webhook.clientCAFile`,
//! or the embedded API server's CA under `wasmctrl dev`), only a caller
//! presenting a certificate that CA signed for client authentication, as
//! the API server does; without one, whoever reaches the port.
//!
//! A review runs plugin code on a body the caller wrote, and a validator
//! may read the cache through the host API while it decides, so a port
//! that more than the API server can reach is worth closing with mutual
//! TLS.

use std::path::Path;
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;

use super::certs::CertError;
use crate::meta::pem::certificates;

/// Where the client CA comes from.
#[derive(Debug, Clone, Copy)]
pub enum ClientCa<'a> {
    /// A PEM file (`webhook.clientCAFile`).
    File(&'a Path),
    /// PEM handed over by the process (the embedded API server's CA).
    Pem(&'a str),
}

/// What verifies callers' certificates for `ca`: every certificate in it
/// is a root, and a caller must present a chain to one of them.
pub fn verifier(
    ca: ClientCa<'_>,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, CertError> {
    let (shown, pem) = match ca {
        ClientCa::File(path) => (path.display().to_string(), read(path)?),
        ClientCa::Pem(pem) => ("the embedded API server's CA".to_string(), pem.into()),
    };
    let err = |message: String| CertError::ClientCa {
        file: shown.clone(),
        message,
    };
    let mut roots = rustls::RootCertStore::empty();
    for (i, cert) in certificates(&pem).map_err(err)?.into_iter().enumerate() {
        roots
            .add(cert)
            .map_err(|e| err(format!("certificate {}: {e}", i + 1)))?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| err(e.to_string()))
}

fn read(path: &Path) -> Result<Vec<u8>, CertError> {
    super::certs::read_bounded(path).map_err(|message| CertError::ClientCa {
        file: path.display().to_string(),
        message,
    })
}

/// Why a handshake failed, as `wasmctrl_webhook_refused_handshakes_total`
/// counts it: `clientCertificate` when the caller presented no certificate
/// or one the client CA did not sign, else `tls`.
pub fn refusal_reason(e: &std::io::Error) -> &'static str {
    let rustls_error = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match rustls_error {
        Some(rustls::Error::NoCertificatesPresented | rustls::Error::InvalidCertificate(_)) => {
            "clientCertificate"
        }
        _ => "tls",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    #[test]
    fn a_client_ca_without_certificates_or_past_its_bound_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.crt");
        std::fs::write(&empty, "not a certificate").unwrap();
        let e = verifier(ClientCa::File(&empty), provider())
            .expect_err("refused")
            .to_string();
        assert!(
            e.contains("webhook.clientCAFile") && e.contains("empty.crt") && e.contains("no PEM"),
            "{e}"
        );

        let big = dir.path().join("big.crt");
        std::fs::write(&big, vec![b'a'; (1 << 20) + 1]).unwrap();
        let e = verifier(ClientCa::File(&big), provider())
            .expect_err("refused")
            .to_string();
        assert!(e.contains("at most 1048576"), "{e}");

        let missing = dir.path().join("missing.crt");
        let e = verifier(ClientCa::File(&missing), provider())
            .expect_err("refused")
            .to_string();
        assert!(e.contains("missing.crt"), "{e}");
    }

    #[test]
    fn a_ca_certificate_is_a_client_root() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let pem = params.self_signed(&key).unwrap().pem();
        let verifier = verifier(ClientCa::Pem(&pem), provider()).expect("a verifier");
        assert!(verifier.client_auth_mandatory());
    }
}
