//! Components in OCI registries, as wasm OCI artifacts ([`super::artifact`]).
//!
//! A reference pinned by digest (`…@sha256:…`) names one manifest forever:
//! once its component is cached, the registry is never asked again. A tag
//! is resolved to a manifest digest on every fetch (a `HEAD`), and, with
//! `pollInterval`, every interval: a digest other than the one last fetched
//! yields on [`PluginSource::changes`] and the manager fetches and swaps.
//! The manifest is then pulled *by that digest* (so it cannot change under
//! us between resolving and pulling) and its one layer by the layer's
//! digest, each verified.
//!
//! When the registry cannot be reached (connection, timeout, 5xx), a fetch
//! serves the component the reference last resolved to from the disk cache,
//! with a warning: a host restarts while its registry is down. A registry
//! that answers "no" (unknown tag, refused credentials, not an artifact) is
//! believed: no fallback.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use oci_client::errors::{DigestError, OciDistributionError};
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Reference, RegistryOperation};

use super::artifact::{self, MAX_CONFIG_SIZE, OCI_MANIFEST_MEDIA_TYPE, Packed};
use super::cache::now_rfc3339;
use super::credentials::RegistryCredentials;
use super::http::{CONNECT_TIMEOUT, chain, install_crypto_provider, read_bounded};
use super::{Artifact, DiskCache, PluginSource, Resolution, SourceError, credentials};
use crate::config::{FetchLimits, OciSourceSpec};
use crate::runtime::digest;

/// How to reach a registry.
#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    /// Plain HTTP instead of HTTPS.
    pub insecure: bool,
    /// A docker `config.json` with credentials (None: the default places,
    /// see [`credentials::docker_config_path`]).
    pub docker_config: Option<PathBuf>,
    /// Where credentials come from instead of a docker config file (a
    /// Kubernetes Secret); when set, `docker_config` is not read.
    pub credentials: Option<Arc<dyn RegistryCredentials>>,
    pub limits: FetchLimits,
}

/// A component in a registry, by tag or digest.
pub struct OciSource {
    inner: Arc<Inner>,
}

struct Inner {
    spec: OciSourceSpec,
    reference: Reference,
    options: RegistryOptions,
    cache: DiskCache,
    /// The manifest the last fetch reached a verdict on (loaded, or
    /// refused for what it is); None after a fetch that failed before (a
    /// network or credentials failure). A poll that resolves the tag to
    /// another manifest yields a change, so a transient failure is retried
    /// at the next poll and a refused manifest is not.
    fetched: Mutex<Option<String>>,
}

/// Why a fetch failed: the registry could not be reached (the cache may
/// stand in) or it answered something we refuse.
enum Failure {
    Unreachable(String),
    Refused(Box<SourceError>),
    /// The registry answered with the manifest named here, and it is
    /// refused for what it is (not a wasm artifact, too large, corrupt).
    RefusedManifest(Box<SourceError>, String),
}

impl Failure {
    fn refused(e: SourceError) -> Self {
        Failure::Refused(Box::new(e))
    }
}

impl From<SourceError> for Failure {
    fn from(e: SourceError) -> Self {
        Failure::refused(e)
    }
}

impl OciSource {
    /// The source of a checked spec (`spec.reference` parses; its
    /// `docker_config`, if any, is an absolute path or relative to the
    /// working directory).
    pub fn new(spec: OciSourceSpec, cache: DiskCache) -> Self {
        Self::build(spec, cache, None)
    }

    /// The source of a checked spec whose registry credentials come from
    /// `credentials` (anonymous when it has none for the registry); the
    /// spec's `docker_config` is not read.
    pub fn with_credentials(
        spec: OciSourceSpec,
        cache: DiskCache,
        credentials: Arc<dyn RegistryCredentials>,
    ) -> Self {
        Self::build(spec, cache, Some(credentials))
    }

    fn build(
        spec: OciSourceSpec,
        cache: DiskCache,
        credentials: Option<Arc<dyn RegistryCredentials>>,
    ) -> Self {
        let reference = Reference::try_from(spec.reference.as_str())
            .expect("validated: an oci source's reference parses");
        let options = RegistryOptions {
            insecure: spec.insecure,
            docker_config: spec.docker_config.clone(),
            credentials,
            limits: spec.limits,
        };
        Self {
            inner: Arc::new(Inner {
                spec,
                reference,
                options,
                cache,
                fetched: Mutex::new(None),
            }),
        }
    }
}

impl PluginSource for OciSource {
    fn origin(&self) -> String {
        self.inner.origin()
    }

    fn fetch(&self) -> BoxFuture<'_, Result<Artifact, SourceError>> {
        Box::pin(self.inner.fetch())
    }

    /// A tag with `pollInterval`: yields when the tag resolves to a manifest
    /// other than the one last fetched. Otherwise empty.
    fn changes(&self) -> BoxStream<'static, ()> {
        let (Some(interval), None) = (self.inner.spec.poll_interval, self.inner.reference.digest())
        else {
            return futures::stream::empty().boxed();
        };
        let inner = self.inner.clone();
        futures::stream::unfold(inner, move |inner| async move {
            loop {
                tokio::time::sleep(interval).await;
                match inner.resolve_tag().await {
                    Ok(d) if inner.fetched.lock().unwrap().as_deref() != Some(d.as_str()) => {
                        tracing::info!(origin = %inner.origin(), digest = %d, "the tag resolves to a new manifest");
                        return Some(((), inner));
                    }
                    Ok(_) => {}
                    Err(message) => {
                        tracing::debug!(origin = %inner.origin(), "cannot resolve the tag: {message}")
                    }
                }
            }
        })
        .boxed()
    }
}

impl Inner {
    fn origin(&self) -> String {
        format!("oci://{}", self.spec.reference)
    }

    async fn fetch(&self) -> Result<Artifact, SourceError> {
        let timeout = self.options.limits.timeout;
        let outcome = tokio::time::timeout(timeout, self.fetch_from_registry())
            .await
            .unwrap_or_else(|_| {
                Err(Failure::Unreachable(format!(
                    "no answer within the source's timeout ({}s)",
                    timeout.as_secs_f64()
                )))
            });
        let (artifact, manifest) = match outcome {
            Ok(found) => found,
            Err(Failure::RefusedManifest(e, manifest)) => {
                // Polls stay quiet until the tag moves again; this says why
                // once.
                tracing::warn!(origin = %self.origin(), %manifest, "refusing the manifest the reference resolves to: {e}");
                *self.fetched.lock().unwrap() = Some(manifest);
                return Err(*e);
            }
            Err(Failure::Refused(e)) => {
                *self.fetched.lock().unwrap() = None;
                return Err(*e);
            }
            Err(Failure::Unreachable(message)) => {
                let Some((artifact, r)) = self.cached(&self.spec.reference).await else {
                    *self.fetched.lock().unwrap() = None;
                    return Err(SourceError::Unavailable {
                        origin: self.origin(),
                        message: format!("the registry is unreachable: {message}"),
                        cache: self.cache.dir().display().to_string(),
                    });
                };
                tracing::warn!(
                    origin = %self.origin(),
                    digest = %r.manifest,
                    resolved_at = %r.resolved_at,
                    "the registry is unreachable ({message}); using the cached component this reference last resolved to"
                );
                (artifact, r.manifest)
            }
        };
        *self.fetched.lock().unwrap() = Some(manifest);
        Ok(artifact)
    }

    /// The component (and its manifest digest) from the registry, or from
    /// the cache when the manifest it resolves to was pulled before.
    async fn fetch_from_registry(&self) -> Result<(Artifact, String), Failure> {
        let origin = self.origin();
        // Pinned and pulled before: nothing to ask the registry.
        if let Some(d) = self.reference.digest()
            && let Some((artifact, _)) = self.cached(&pin(&self.reference, d).whole()).await
        {
            return Ok((artifact, d.to_string()));
        }
        let registry = Registry::connect(&self.options, &origin)?;
        let auth = registry.auth(&self.reference).await?;
        let manifest_digest = match self.reference.digest() {
            Some(d) => d.to_string(),
            None => registry.resolve(&self.reference, &auth).await?,
        };
        let pinned = pin(&self.reference, &manifest_digest);
        if let Some((artifact, r)) = self.cached(&pinned.whole()).await {
            // A tag back on a manifest pulled before: it is what the tag
            // resolves to now, for a restart without the registry.
            self.remember(&self.spec.reference, &r.manifest, &r.layer)
                .await;
            return Ok((artifact, manifest_digest));
        }
        let pulled = async {
            let (manifest, _) = registry.manifest(&pinned, &auth).await?;
            let layer = artifact::component_layer(&manifest, self.options.limits.max_size)
                .map_err(|message| SourceError::NotWasmArtifact {
                    origin: origin.clone(),
                    message,
                })?
                .clone();
            let bytes = registry
                .blob(&pinned, &layer, self.options.limits.max_size)
                .await?;
            Ok::<_, Failure>((layer, bytes))
        }
        .await;
        let (layer, bytes) = match pulled {
            Ok(found) => found,
            Err(Failure::Refused(e)) => return Err(Failure::RefusedManifest(e, manifest_digest)),
            Err(other) => return Err(other),
        };
        if let Err(e) = self.cache.write(&bytes).await {
            tracing::warn!(%origin, cache = %self.cache.dir().display(), "cannot cache the component: {e}");
        }
        self.remember(&pinned.whole(), &manifest_digest, &layer.digest)
            .await;
        self.remember(&self.spec.reference, &manifest_digest, &layer.digest)
            .await;
        let digest = layer.digest.clone();
        Ok((Artifact { bytes, digest }, manifest_digest))
    }

    /// Records that `reference` resolved to `manifest` whose component is
    /// `layer` (unless already recorded); a failure to write only costs a
    /// download later.
    async fn remember(&self, reference: &str, manifest: &str, layer: &str) {
        if let Some(r) = self.cache.resolution(reference).await
            && r.manifest == manifest
            && r.layer == layer
        {
            return;
        }
        let record = Resolution {
            reference: reference.to_string(),
            manifest: manifest.to_string(),
            layer: layer.to_string(),
            resolved_at: now_rfc3339(),
        };
        if let Err(e) = self.cache.remember(&record).await {
            tracing::warn!(origin = %self.origin(), cache = %self.cache.dir().display(), "cannot record the resolved digest: {e}");
        }
    }

    /// The cached component `reference` last resolved to, if intact.
    async fn cached(&self, reference: &str) -> Option<(Artifact, Resolution)> {
        let r = self.cache.resolution(reference).await?;
        let bytes = self
            .cache
            .read(&r.layer, self.options.limits.max_size)
            .await?;
        let artifact = Artifact {
            bytes,
            digest: r.layer.clone(),
        };
        Some((artifact, r))
    }

    /// The manifest digest the tag names now (for a poll).
    async fn resolve_tag(&self) -> Result<String, String> {
        let timeout = self.options.limits.timeout;
        tokio::time::timeout(timeout, self.resolve_tag_now())
            .await
            .map_err(|_| {
                format!(
                    "no answer within the source's timeout ({}s)",
                    timeout.as_secs_f64()
                )
            })?
            .map_err(describe)
    }

    async fn resolve_tag_now(&self) -> Result<String, Failure> {
        let registry = Registry::connect(&self.options, &self.origin())?;
        let auth = registry.auth(&self.reference).await?;
        registry.resolve(&self.reference, &auth).await
    }
}

/// A failure where no cache stands in: an error either way.
fn reached(origin: &str, f: Failure) -> SourceError {
    match f {
        Failure::Refused(e) | Failure::RefusedManifest(e, _) => *e,
        Failure::Unreachable(message) => SourceError::Download {
            origin: origin.to_string(),
            message: format!("cannot reach the registry: {message}"),
        },
    }
}

fn describe(f: Failure) -> String {
    match f {
        Failure::Unreachable(m) => m,
        Failure::Refused(e) | Failure::RefusedManifest(e, _) => e.to_string(),
    }
}

/// `reference` pinned to `digest` (its tag dropped).
fn pin(reference: &Reference, digest: &str) -> Reference {
    Reference::with_digest(
        reference.registry().to_string(),
        reference.repository().to_string(),
        digest.to_string(),
    )
}

/// One conversation with a registry: a client with the options' protocol
/// and timeouts. A new one per operation, so rotated credentials and
/// certificates are picked up.
struct Registry {
    client: oci_client::Client,
    options: RegistryOptions,
    origin: String,
}

impl Registry {
    fn connect(options: &RegistryOptions, origin: &str) -> Result<Self, SourceError> {
        install_crypto_provider();
        let config = oci_client::client::ClientConfig {
            protocol: if options.insecure {
                oci_client::client::ClientProtocol::Http
            } else {
                oci_client::client::ClientProtocol::Https
            },
            // An image index is a multi-platform image, never a wasm artifact.
            platform_resolver: None,
            connect_timeout: Some(options.limits.timeout.min(CONNECT_TIMEOUT)),
            read_timeout: Some(options.limits.timeout),
            user_agent: concat!("wasmctrl/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        };
        let client = oci_client::Client::try_from(config).map_err(|e| SourceError::Download {
            origin: origin.to_string(),
            message: format!("cannot set up a registry client: {}", chain(&e)),
        })?;
        Ok(Self {
            client,
            options: options.clone(),
            origin: origin.to_string(),
        })
    }

    async fn auth(&self, reference: &Reference) -> Result<RegistryAuth, SourceError> {
        let registry = reference.resolve_registry();
        let found = match &self.options.credentials {
            Some(provider) => provider.credentials(registry).await,
            None => {
                credentials::credentials_for(self.options.docker_config.as_deref(), registry).await
            }
        }
        .map_err(|source| SourceError::Credentials {
            origin: self.origin.clone(),
            source,
        })?;
        Ok(match found {
            Some(c) => RegistryAuth::Basic(c.username, c.password),
            None => RegistryAuth::Anonymous,
        })
    }

    async fn resolve(&self, reference: &Reference, auth: &RegistryAuth) -> Result<String, Failure> {
        let d = self
            .client
            .fetch_manifest_digest(reference, auth)
            .await
            .map_err(|e| self.failure(e))?;
        if !super::cache::is_sha256(&d) {
            return Err(Failure::refused(SourceError::Download {
                origin: self.origin.clone(),
                message: format!("the registry resolved the tag to {d:?}, not a sha256 digest"),
            }));
        }
        Ok(d)
    }

    /// The image manifest at `pinned` (parsed, and as stored).
    async fn manifest(
        &self,
        pinned: &Reference,
        auth: &RegistryAuth,
    ) -> Result<(OciImageManifest, Vec<u8>), Failure> {
        let (raw, _) = self
            .client
            .pull_manifest_raw(pinned, auth, &[OCI_MANIFEST_MEDIA_TYPE])
            .await
            .map_err(|e| self.failure(e))?;
        // oci-client checked the body against the pinned digest; so do we,
        // since everything below trusts it.
        let expected = pinned.digest().unwrap_or_default();
        let got = digest(&raw);
        if got != expected {
            return Err(Failure::refused(SourceError::DigestMismatch {
                origin: self.origin.clone(),
                expected: expected.to_string(),
                got,
            }));
        }
        let value: serde_json::Value =
            serde_json::from_slice(&raw).map_err(|e| self.not_an_artifact(e.to_string()))?;
        if value.get("manifests").is_some() {
            return Err(self.not_an_artifact(
                "it is an image index (a list of manifests), not an image manifest".into(),
            ));
        }
        let manifest =
            serde_json::from_value(value).map_err(|e| self.not_an_artifact(e.to_string()))?;
        Ok((manifest, raw.to_vec()))
    }

    /// The blob `descriptor` names, at most `max_size` bytes, verified.
    async fn blob(
        &self,
        pinned: &Reference,
        descriptor: &OciDescriptor,
        max_size: u64,
    ) -> Result<Vec<u8>, Failure> {
        let stream = self
            .client
            .pull_blob_stream(pinned, descriptor)
            .await
            .map_err(|e| self.failure(e))?;
        let announced = stream.content_length;
        let bytes = read_bounded(&self.origin, announced, max_size, stream.stream)
            .await
            .map_err(|e| match e {
                // A body cut short is the network's doing.
                SourceError::Download { message, .. } => Failure::Unreachable(message),
                e => Failure::refused(e),
            })?;
        let got = digest(&bytes);
        if got != descriptor.digest {
            return Err(Failure::refused(SourceError::DigestMismatch {
                origin: self.origin.clone(),
                expected: descriptor.digest.clone(),
                got,
            }));
        }
        Ok(bytes)
    }

    fn not_an_artifact(&self, message: String) -> Failure {
        Failure::refused(SourceError::NotWasmArtifact {
            origin: self.origin.clone(),
            message,
        })
    }

    /// Sorts an oci-client error into "cannot reach" and "refused".
    fn failure(&self, e: OciDistributionError) -> Failure {
        let origin = self.origin.clone();
        let refused = |message: String| Failure::refused(SourceError::Download { origin, message });
        match e {
            OciDistributionError::RequestError(e) => {
                let mut message = chain(&e);
                if !self.options.insecure && message.contains("InvalidContentType") {
                    message.push_str(
                        " (the registry does not speak TLS; for a plain-HTTP registry set insecure: true)",
                    );
                }
                Failure::Unreachable(message)
            }
            OciDistributionError::RegistryError { envelope, .. } => {
                use oci_client::errors::OciErrorCode;
                let unknown = envelope.errors.iter().any(|e| {
                    matches!(
                        e.code,
                        OciErrorCode::ManifestUnknown | OciErrorCode::NameUnknown
                    )
                });
                if unknown {
                    refused("the registry has no such repository, tag or digest".into())
                } else {
                    let errors: Vec<String> = envelope
                        .errors
                        .iter()
                        .map(|e| format!("{:?}: {}", e.code, e.message))
                        .collect();
                    refused(format!("the registry refused: {}", errors.join("; ")))
                }
            }
            OciDistributionError::ServerError { code, message, .. }
                if code >= 500 || code == 429 =>
            {
                Failure::Unreachable(format!("the registry answered {code}: {message}"))
            }
            OciDistributionError::DigestError(DigestError::VerificationError {
                expected,
                actual,
            }) => Failure::refused(SourceError::DigestMismatch {
                origin: self.origin.clone(),
                expected,
                got: actual,
            }),
            OciDistributionError::ImageManifestNotFoundError(_) => {
                refused("the registry has no such manifest (unknown tag or digest)".into())
            }
            OciDistributionError::ServerError {
                code: 401 | 403, ..
            }
            | OciDistributionError::UnauthorizedError { .. }
            | OciDistributionError::AuthenticationFailure(_) => refused(format!(
                "the registry refused access ({}); check the credentials in the docker config",
                chain(&e)
            )),
            e => refused(chain(&e)),
        }
    }
}

/// What `wasmctrl push` stored.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The reference pushed to.
    pub reference: String,
    pub manifest_digest: String,
    pub config_digest: String,
    pub layer_digest: String,
}

/// Pushes `component` to `reference` (a tag) as a wasm OCI artifact with
/// `annotations` on its manifest.
pub async fn push(
    reference: &str,
    component: Vec<u8>,
    annotations: BTreeMap<String, String>,
    options: &RegistryOptions,
) -> Result<Pushed, SourceError> {
    let origin = format!("oci://{reference}");
    let (parsed, pinned) = parse_reference(reference, &origin)?;
    if pinned {
        return Err(SourceError::Invalid {
            origin,
            message: "push to a tag (REGISTRY/REPOSITORY:TAG); the digest follows from the content"
                .into(),
        });
    }
    let Packed {
        config,
        config_digest,
        layer_digest,
        manifest,
        manifest_digest,
    } = artifact::pack(&component, &now_rfc3339(), annotations).map_err(|message| {
        SourceError::NotWasmArtifact {
            origin: origin.clone(),
            message,
        }
    })?;
    let work = async {
        let registry = Registry::connect(options, &origin)?;
        let auth = registry.auth(&parsed).await?;
        let describe = |e: OciDistributionError| reached(&origin, registry.failure(e));
        registry
            .client
            .auth(&parsed, &auth, RegistryOperation::Push)
            .await
            .map_err(describe)?;
        registry
            .client
            .push_blob(&parsed, component, &layer_digest)
            .await
            .map_err(describe)?;
        registry
            .client
            .push_blob(&parsed, config, &config_digest)
            .await
            .map_err(describe)?;
        registry
            .client
            .push_manifest_raw(
                &parsed,
                manifest,
                OCI_MANIFEST_MEDIA_TYPE
                    .parse()
                    .expect("a valid header value"),
            )
            .await
            .map_err(describe)?;
        Ok::<_, SourceError>(())
    };
    tokio::time::timeout(options.limits.timeout, work)
        .await
        .map_err(|_| SourceError::Timeout {
            origin: origin.clone(),
            after: options.limits.timeout,
        })??;
    Ok(Pushed {
        reference: reference.to_string(),
        manifest_digest,
        config_digest,
        layer_digest,
    })
}

/// A wasm OCI artifact as stored: for `wasmctrl inspect oci://…`.
#[derive(Debug, Clone)]
pub struct Described {
    /// The manifest digest the reference resolved to.
    pub manifest_digest: String,
    pub manifest: serde_json::Value,
    pub config: serde_json::Value,
    pub component: Artifact,
}

/// Pulls the manifest, config and component of `reference`, checking each
/// (no cache).
pub async fn describe_artifact(
    reference: &str,
    options: &RegistryOptions,
) -> Result<Described, SourceError> {
    let origin = format!("oci://{reference}");
    let (parsed, _) = parse_reference(reference, &origin)?;
    let refused = |f: Failure| reached(&origin, f);
    let work = async {
        let registry = Registry::connect(options, &origin)?;
        let auth = registry.auth(&parsed).await?;
        let manifest_digest = match parsed.digest() {
            Some(d) => d.to_string(),
            None => registry.resolve(&parsed, &auth).await.map_err(refused)?,
        };
        let pinned = pin(&parsed, &manifest_digest);
        let (manifest, raw) = registry.manifest(&pinned, &auth).await.map_err(refused)?;
        let layer =
            artifact::component_layer(&manifest, options.limits.max_size).map_err(|message| {
                SourceError::NotWasmArtifact {
                    origin: origin.clone(),
                    message,
                }
            })?;
        let config = registry
            .blob(&pinned, &manifest.config, MAX_CONFIG_SIZE)
            .await
            .map_err(refused)?;
        let config: serde_json::Value =
            serde_json::from_slice(&config).map_err(|e| SourceError::NotWasmArtifact {
                origin: origin.clone(),
                message: format!("its config is not JSON: {e}"),
            })?;
        let bytes = registry
            .blob(&pinned, layer, options.limits.max_size)
            .await
            .map_err(refused)?;
        Ok::<_, SourceError>(Described {
            manifest_digest,
            manifest: serde_json::from_slice(&raw).expect("parsed above"),
            config,
            component: Artifact {
                bytes,
                digest: layer.digest.clone(),
            },
        })
    };
    tokio::time::timeout(options.limits.timeout, work)
        .await
        .map_err(|_| SourceError::Timeout {
            origin: origin.clone(),
            after: options.limits.timeout,
        })?
}

/// The parsed reference, and whether it is pinned by digest.
fn parse_reference(reference: &str, origin: &str) -> Result<(Reference, bool), SourceError> {
    let pinned =
        crate::config::oci_reference(reference).map_err(|message| SourceError::Invalid {
            origin: origin.to_string(),
            message,
        })?;
    Ok((
        Reference::try_from(reference).expect("checked above"),
        pinned,
    ))
}
