//! The webhook server's certificate: one mounted from `webhook.certDir`
//! (cert-manager's Secret), re-read when its files change; or the host's
//! own CA and a serving certificate it signs, re-issued before it expires.
//! The CA outlives every serving certificate, so the `caBundle` registered
//! with the API server stays valid across rotations.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::meta::files::LocalReadError;

/// How long the host's own CA is valid.
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// How long a serving certificate the host issues is valid, and how long
/// before its end the host issues the next one.
pub const SERVING_VALIDITY: Duration = Duration::from_secs(30 * 24 * 3600);
pub const RENEW_BEFORE: Duration = Duration::from_secs(10 * 24 * 3600);
/// How often a mounted certificate's files are looked at for a change.
const REREAD_EVERY: Duration = Duration::from_secs(1);
/// The largest certificate or key file read from `certDir`.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Why the webhook server has no certificate.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("webhook.certDir: {path}: {message}")]
    Mounted { path: PathBuf, message: String },
    #[error("webhook certificate: {0}")]
    Generate(String),
    #[error("webhook.caSecret {namespace}/{name}: {message}")]
    Shared {
        namespace: String,
        name: String,
        message: String,
    },
    /// The CA whose client certificates the server requires.
    #[error("webhook.clientCAFile {file}: {message}")]
    ClientCa { file: String, message: String },
}

/// The names a serving certificate is for: DNS names and IP addresses.
#[derive(Debug, Clone, Default)]
pub struct Names {
    pub dns: Vec<String>,
    pub ips: Vec<IpAddr>,
}

/// What serves the webhook server's certificate on each handshake, and the
/// PEM the API server verifies it with.
#[derive(Clone)]
pub struct Certificates {
    resolver: Arc<dyn ResolvesServerCert>,
    ca: Ca,
}

/// Where the `caBundle` to register comes from.
#[derive(Clone)]
enum Ca {
    /// The host's own CA, or the one shared through a Secret: it outlives
    /// the serving certificates it signs.
    Fixed(String),
    /// A mounted `ca.crt`, read again when it changes (cert-manager renews
    /// it with the pair; with a self-signed issuer it *is* the pair's
    /// certificate). Without one, something else, cert-manager's CA
    /// injector, fills the bundle in.
    Mounted(Arc<Mounted>),
}

impl fmt::Debug for Certificates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ca = match &self.ca {
            Ca::Fixed(_) => "own",
            Ca::Mounted(_) => "mounted",
        };
        f.debug_struct("Certificates")
            .field("ca", &ca)
            .finish_non_exhaustive()
    }
}

impl Certificates {
    /// The certificate mounted in `dir` (`tls.crt`, `tls.key`, and
    /// `ca.crt` if present), each read again when its file changes.
    pub fn mounted(dir: &Path) -> Result<Self, CertError> {
        let mounted = Arc::new(Mounted::read(dir)?);
        Ok(Self {
            resolver: mounted.clone(),
            ca: Ca::Mounted(mounted),
        })
    }

    /// A new CA of the host's own and a serving certificate for `names`.
    pub fn own(names: Names) -> Result<Self, CertError> {
        Ok(Self::of(OwnCa::new(names, SystemTime::now())?))
    }

    /// The CA kept in the Secret `namespace/name` (`ca.crt`, `ca.key`),
    /// made and stored there by the first replica that finds the Secret
    /// empty, and a serving certificate of this replica's own signed by
    /// it: every replica behind a Service then verifies against the one
    /// `caBundle` registered. The Secret must exist (`deploy/` has it
    /// empty), so the host needs only `get` and `update` on it by name.
    pub async fn shared(
        client: &kube::Client,
        namespace: &str,
        name: &str,
        names: Names,
    ) -> Result<Self, CertError> {
        use k8s_openapi::ByteString;
        use k8s_openapi::api::core::v1::Secret;
        let err = |message: String| CertError::Shared {
            namespace: namespace.into(),
            name: name.into(),
            message,
        };
        let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), namespace);
        // A conflict means another replica stored its CA first: read that.
        for _ in 0..5 {
            let mut secret = api.get(name).await.map_err(|e| err(e.to_string()))?;
            let data = secret.data.get_or_insert_with(Default::default);
            let text = |key: &str| {
                data.get(key)
                    .map(|v| {
                        String::from_utf8(v.0.clone())
                            .map_err(|_| err(format!("{key} is not PEM text")))
                    })
                    .transpose()
            };
            if let (Some(cert), Some(key)) = (text("ca.crt")?, text("ca.key")?) {
                let ca = OwnCa::restore(&cert, &key, names, SystemTime::now())
                    .map_err(|e| err(format!("holds a CA that cannot sign: {e}")))?;
                return Ok(Self::of(ca));
            }
            let ca = OwnCa::new(names.clone(), SystemTime::now())?;
            data.insert("ca.crt".into(), ByteString(ca.ca_pem.clone().into_bytes()));
            data.insert(
                "ca.key".into(),
                ByteString(ca.key.serialize_pem().into_bytes()),
            );
            match api.replace(name, &Default::default(), &secret).await {
                Ok(_) => {
                    tracing::info!(%namespace, %name, "stored a new webhook CA");
                    return Ok(Self::of(ca));
                }
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(err(e.to_string())),
            }
        }
        Err(err(
            "kept changing while this host tried to store its CA".into()
        ))
    }

    fn of(ca: OwnCa) -> Self {
        let pem = ca.ca_pem.clone();
        Self {
            resolver: Arc::new(ca),
            ca: Ca::Fixed(pem),
        }
    }

    pub fn resolver(&self) -> Arc<dyn ResolvesServerCert> {
        self.resolver.clone()
    }

    /// The PEM the API server verifies the server with, as it is now: a
    /// mounted `ca.crt` is read again if it changed.
    pub fn ca_bundle(&self) -> Option<String> {
        match &self.ca {
            Ca::Fixed(pem) => Some(pem.clone()),
            Ca::Mounted(mounted) => mounted.ca_bundle(),
        }
    }
}

fn generate(e: rcgen::Error) -> CertError {
    CertError::Generate(e.to_string())
}

fn certified(
    chain: Vec<CertificateDer<'static>>,
    key: &PrivateKeyDer<'_>,
) -> Result<Arc<CertifiedKey>, String> {
    let key = rustls::crypto::ring::sign::any_supported_type(key).map_err(|e| e.to_string())?;
    Ok(Arc::new(CertifiedKey::new(chain, key)))
}

/// The host's own CA, and the serving certificate it signed last.
struct OwnCa {
    key: KeyPair,
    params: CertificateParams,
    ca_pem: String,
    names: Names,
    serving: Mutex<Serving>,
}

struct Serving {
    key: Arc<CertifiedKey>,
    not_after: SystemTime,
}

/// The CA's parameters. The name is fixed, so a CA restored from its
/// key issues certificates whose issuer is the stored certificate's
/// subject.
fn ca_params(now: SystemTime) -> Result<CertificateParams, CertError> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(generate)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "wasmctrl-webhook-ca");
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = (now - Duration::from_secs(60)).into();
    params.not_after = (now + CA_VALIDITY).into();
    Ok(params)
}

impl OwnCa {
    fn new(names: Names, now: SystemTime) -> Result<Self, CertError> {
        let key = KeyPair::generate().map_err(generate)?;
        let params = ca_params(now)?;
        let ca_pem = params.self_signed(&key).map_err(generate)?.pem();
        Self::with(key, params, ca_pem, names, now)
    }

    /// A CA from its stored certificate and key.
    fn restore(
        cert_pem: &str,
        key_pem: &str,
        names: Names,
        now: SystemTime,
    ) -> Result<Self, CertError> {
        let key = KeyPair::from_pem(key_pem).map_err(generate)?;
        Self::with(key, ca_params(now)?, cert_pem.to_string(), names, now)
    }

    fn with(
        key: KeyPair,
        params: CertificateParams,
        ca_pem: String,
        names: Names,
        now: SystemTime,
    ) -> Result<Self, CertError> {
        let serving = issue(&params, &key, &names, now)?;
        Ok(Self {
            key,
            params,
            ca_pem,
            names,
            serving: Mutex::new(serving),
        })
    }

    /// The serving certificate for `now`, issuing the next one when the
    /// current one is within [`RENEW_BEFORE`] of its end.
    fn current(&self, now: SystemTime) -> Arc<CertifiedKey> {
        let mut serving = self.serving.lock().unwrap_or_else(|e| e.into_inner());
        if now + RENEW_BEFORE >= serving.not_after {
            match issue(&self.params, &self.key, &self.names, now) {
                Ok(next) => {
                    tracing::info!("webhook serving certificate rotated");
                    *serving = next;
                }
                Err(e) => tracing::error!("cannot rotate the webhook serving certificate: {e}"),
            }
        }
        serving.key.clone()
    }
}

fn issue(
    ca: &CertificateParams,
    ca_key: &KeyPair,
    names: &Names,
    now: SystemTime,
) -> Result<Serving, CertError> {
    let key = KeyPair::generate().map_err(generate)?;
    let mut dns = names.dns.clone();
    if dns.is_empty() {
        dns.push("localhost".into());
    }
    let mut leaf = CertificateParams::new(dns).map_err(generate)?;
    leaf.distinguished_name
        .push(DnType::CommonName, "wasmctrl-webhook");
    for ip in &names.ips {
        leaf.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let not_after = now + SERVING_VALIDITY;
    leaf.not_before = (now - Duration::from_secs(60)).into();
    leaf.not_after = not_after.into();
    let issuer = Issuer::from_params(ca, ca_key);
    let cert = leaf.signed_by(&key, &issuer).map_err(generate)?;
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let key = certified(vec![CertificateDer::from(cert.der().to_vec())], &der)
        .map_err(CertError::Generate)?;
    Ok(Serving { key, not_after })
}

impl fmt::Debug for OwnCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OwnCa")
    }
}

impl ResolvesServerCert for OwnCa {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current(SystemTime::now()))
    }
}

/// A certificate mounted from a directory, re-read when a file changes.
struct Mounted {
    dir: PathBuf,
    state: Mutex<MountedState>,
}

struct MountedState {
    key: Arc<CertifiedKey>,
    ca: Option<String>,
    stamp: Option<SystemTime>,
    looked: std::time::Instant,
}

impl fmt::Debug for Mounted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mounted").field("dir", &self.dir).finish()
    }
}

fn read_bytes(path: &Path) -> Result<Vec<u8>, CertError> {
    read_bounded(path).map_err(|message| CertError::Mounted {
        path: path.to_path_buf(),
        message,
    })
}

/// The bytes of a certificate or key file of at most [`MAX_FILE_BYTES`],
/// or why it cannot be read.
pub(super) fn read_bounded(path: &Path) -> Result<Vec<u8>, String> {
    crate::meta::files::read_regular_blocking(path, MAX_FILE_BYTES).map_err(|e| match e {
        LocalReadError::TooLarge { len, max } => format!("{len} bytes; at most {max}"),
        e => e.to_string(),
    })
}

fn read_text(path: &Path) -> Result<String, CertError> {
    String::from_utf8(read_bytes(path)?).map_err(|_| CertError::Mounted {
        path: path.to_path_buf(),
        message: "not PEM text".into(),
    })
}

/// The latest modification time of the mounted files: a Secret volume
/// swaps a symlink, so the time of what it points to is what changes.
fn stamp(dir: &Path) -> Option<SystemTime> {
    ["tls.crt", "tls.key", "ca.crt"]
        .iter()
        .filter_map(|f| {
            std::fs::metadata(dir.join(f))
                .and_then(|m| m.modified())
                .ok()
        })
        .max()
}

impl Mounted {
    fn read(dir: &Path) -> Result<Self, CertError> {
        let (key, ca) = Self::load(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            state: Mutex::new(MountedState {
                key,
                ca,
                stamp: stamp(dir),
                looked: std::time::Instant::now(),
            }),
        })
    }

    /// The mounted `ca.crt` as it is now.
    fn ca_bundle(&self) -> Option<String> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.refresh(&mut state);
        state.ca.clone()
    }

    /// Reads the files again if one changed. A half-written set keeps the
    /// old certificate until a later look finds them whole.
    fn refresh(&self, state: &mut MountedState) {
        state.looked = std::time::Instant::now();
        let now = stamp(&self.dir);
        if now == state.stamp {
            return;
        }
        match Self::load(&self.dir) {
            Ok((key, ca)) => {
                tracing::info!(dir = %self.dir.display(), "webhook certificate re-read");
                state.key = key;
                state.ca = ca;
                state.stamp = now;
            }
            Err(e) => tracing::warn!("keeping the webhook certificate: {e}"),
        }
    }

    /// The serving pair, and `ca.crt` if there is one.
    fn load(dir: &Path) -> Result<(Arc<CertifiedKey>, Option<String>), CertError> {
        let key = Self::load_pair(dir)?;
        let ca = dir.join("ca.crt");
        let ca = match ca.exists() {
            true => Some(read_text(&ca)?),
            false => None,
        };
        Ok((key, ca))
    }

    fn load_pair(dir: &Path) -> Result<Arc<CertifiedKey>, CertError> {
        let (crt, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(&read_bytes(&crt)?)
                .collect::<Result<_, _>>()
                .map_err(|e| CertError::Mounted {
                    path: crt.clone(),
                    message: format!("not a PEM certificate chain: {e}"),
                })?;
        if chain.is_empty() {
            return Err(CertError::Mounted {
                path: crt,
                message: "holds no certificate".into(),
            });
        }
        let der =
            PrivateKeyDer::from_pem_slice(&read_bytes(&key)?).map_err(|e| CertError::Mounted {
                path: key.clone(),
                message: format!("not a PEM private key: {e}"),
            })?;
        certified(chain, &der).map_err(|message| CertError::Mounted { path: key, message })
    }
}

impl ResolvesServerCert for Mounted {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.looked.elapsed() >= REREAD_EVERY {
            self.refresh(&mut state);
        }
        Some(state.key.clone())
    }
}

#[cfg(test)]
mod tests {
    use rustls::client::danger::ServerCertVerifier;

    use super::*;

    fn names() -> Names {
        Names {
            dns: vec!["localhost".into()],
            ips: vec![IpAddr::from([127, 0, 0, 1])],
        }
    }

    #[test]
    fn the_serving_certificate_is_reissued_before_it_expires_under_the_same_ca() {
        let start = SystemTime::now();
        let ca = OwnCa::new(names(), start).unwrap();
        let first = ca.current(start);
        let later = ca.current(start + SERVING_VALIDITY - RENEW_BEFORE - Duration::from_secs(60));
        assert!(Arc::ptr_eq(&first, &later), "not yet due");
        let due = ca.current(start + SERVING_VALIDITY - RENEW_BEFORE);
        assert!(!Arc::ptr_eq(&first, &due), "re-issued when due");
        let again = ca.current(start + SERVING_VALIDITY - RENEW_BEFORE);
        assert!(
            Arc::ptr_eq(&due, &again),
            "the new one lasts another period"
        );
        let ca_pem = ca.ca_pem.clone();
        // The re-issued certificate chains to the CA the API server holds.
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        verifier
            .verify_server_cert(
                &due.cert[0],
                &[],
                &name,
                &[],
                rustls::pki_types::UnixTime::since_unix_epoch(
                    (start + SERVING_VALIDITY - RENEW_BEFORE)
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .unwrap(),
                ),
            )
            .unwrap();
    }

    #[test]
    fn a_mounted_certificate_is_read_and_a_broken_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let e = Certificates::mounted(dir.path()).unwrap_err().to_string();
        assert!(e.contains("tls.crt"), "{e}");
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.path().join("tls.crt"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("tls.key"), "not a key").unwrap();
        let e = Certificates::mounted(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("tls.key") && e.contains("not a PEM private key"),
            "{e}"
        );
        std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).unwrap();
        std::fs::write(dir.path().join("ca.crt"), cert.pem()).unwrap();
        let certs = Certificates::mounted(dir.path()).unwrap();
        assert_eq!(certs.ca_bundle(), Some(cert.pem()));

        // A renewed pair and CA are what the next look reads.
        let renewed_key = KeyPair::generate().unwrap();
        let renewed = CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&renewed_key)
            .unwrap();
        let later = std::time::SystemTime::now() + Duration::from_secs(5);
        for (file, text) in [
            ("tls.crt", renewed.pem()),
            ("tls.key", renewed_key.serialize_pem()),
            ("ca.crt", renewed.pem()),
        ] {
            let path = dir.path().join(file);
            std::fs::write(&path, text).unwrap();
            let f = std::fs::File::options().write(true).open(&path).unwrap();
            f.set_modified(later).unwrap();
        }
        assert_eq!(certs.ca_bundle(), Some(renewed.pem()));
    }
}
