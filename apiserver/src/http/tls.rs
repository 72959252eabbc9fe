//! TLS for the API server. kubectl (client-go's clientcmd) only sends a
//! kubeconfig's bearer token over TLS, so a token-protected server must speak
//! HTTPS: each start generates a private CA and a server certificate for the
//! listen address, and the kubeconfig carries the CA.

use std::net::IpAddr;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::admission::ClientIdentity;

/// Why TLS material could not be created.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("generating certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("configuring TLS: {0}")]
    Config(#[from] rustls::Error),
}

/// The common name of [`Ca::admission_client`]'s certificate.
pub(crate) const ADMISSION_CLIENT_NAME: &str = "wasmctrl-apiserver-admission";

/// The server configuration a CA signed.
pub(crate) struct TlsMaterial {
    pub(crate) server_config: Arc<rustls::ServerConfig>,
}

/// The private CA that signs server certificates.
pub(crate) struct Ca {
    key: KeyPair,
    /// PEM of the CA certificate.
    pub(crate) cert_pem: String,
}

/// The CA's parameters; deterministic so a persisted CA key re-creates an
/// issuer whose name matches the persisted certificate.
fn ca_params() -> Result<CertificateParams, TlsError> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name
        .push(DnType::CommonName, "wasmctrl-apiserver-ca");
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(p)
}

impl Ca {
    /// A new CA with a fresh key.
    pub(crate) fn generate() -> Result<Ca, TlsError> {
        let key = KeyPair::generate()?;
        let cert = ca_params()?.self_signed(&key)?;
        Ok(Ca {
            cert_pem: cert.pem(),
            key,
        })
    }

    /// A CA restored from its certificate and key PEM.
    pub(crate) fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Ca, TlsError> {
        Ok(Ca {
            key: KeyPair::from_pem(key_pem)?,
            cert_pem: cert_pem.to_string(),
        })
    }

    /// PEM of the CA private key (persisted with the data directory).
    pub(crate) fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// A client certificate (`clientAuth` only, common name
    /// [`ADMISSION_CLIENT_NAME`]) the server presents to the admission
    /// webhooks it calls, so that a webhook server may require it. The
    /// server issues no other client certificate: clients authenticate
    /// with tokens.
    pub(crate) fn admission_client(&self) -> Result<ClientIdentity, TlsError> {
        let key = KeyPair::generate()?;
        let mut leaf = CertificateParams::new(Vec::<String>::new())?;
        leaf.distinguished_name
            .push(DnType::CommonName, ADMISSION_CLIENT_NAME);
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let params = ca_params()?;
        let issuer = Issuer::from_params(&params, &self.key);
        let cert = leaf.signed_by(&key, &issuer)?;
        Ok(ClientIdentity::new(
            CertificateDer::from(cert.der().to_vec()),
            key.serialize_der(),
        ))
    }

    /// A server certificate for `ip`, 127.0.0.1, ::1 and `localhost`, and
    /// the TLS configuration serving it.
    pub(crate) fn server(&self, ip: IpAddr) -> Result<TlsMaterial, TlsError> {
        let leaf_key = KeyPair::generate()?;
        let mut leaf = CertificateParams::new(vec!["localhost".to_string()])?;
        leaf.distinguished_name
            .push(DnType::CommonName, "wasmctrl-apiserver");
        let mut ips = vec![
            ip,
            IpAddr::from([127, 0, 0, 1]),
            IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]),
        ];
        ips.dedup();
        for i in ips {
            if !i.is_unspecified() {
                leaf.subject_alt_names.push(SanType::IpAddress(i));
            }
        }
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let params = ca_params()?;
        let issuer = Issuer::from_params(&params, &self.key);
        let leaf_cert = leaf.signed_by(&leaf_key, &issuer)?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(leaf_cert.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
            )?;
        // HTTP/1.1 only: every client falls back to it, and chunked watch
        // streams are simplest there.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsMaterial {
            server_config: Arc::new(config),
        })
    }
}
