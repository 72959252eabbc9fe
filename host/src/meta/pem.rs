//! A PEM bundle of CA certificates a user hands the host (`runtime.caBundle`,
//! `webhook.clientCAFile`), read within bounds.

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// The most bytes of a bundle.
pub const MAX_BUNDLE_BYTES: usize = 1 << 20;
/// The most certificates of a bundle.
pub const MAX_BUNDLE_CERTS: usize = 512;

/// The certificates of `pem`: at least one, at most [`MAX_BUNDLE_CERTS`],
/// from at most [`MAX_BUNDLE_BYTES`]. The error says what is wrong.
pub fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    if pem.len() > MAX_BUNDLE_BYTES {
        return Err(format!(
            "{} bytes, past the ceiling of {MAX_BUNDLE_BYTES}",
            pem.len()
        ));
    }
    let mut certs = Vec::new();
    for (i, cert) in CertificateDer::pem_slice_iter(pem).enumerate() {
        if i >= MAX_BUNDLE_CERTS {
            return Err(format!("more than {MAX_BUNDLE_CERTS} certificates"));
        }
        certs.push(cert.map_err(|e| format!("certificate {}: {e}", i + 1))?);
    }
    if certs.is_empty() {
        return Err("no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into());
    }
    Ok(certs)
}
