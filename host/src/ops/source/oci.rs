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
//!
//! # Bounded reads
//! A pull talks to the registry with the host's own HTTP client, not
//! oci-client's: oci-client 0.18 reads the token endpoint's answer, every
//! manifest and every error answer whole into memory (`text()`,
//! `bytes()`), and takes no client or hook to bound them, so a registry
//! could make the host hold gigabytes. Here every body read has a bound:
//! the token answer [`MAX_TOKEN_ANSWER`], a manifest [`MAX_MANIFEST_SIZE`],
//! the config [`MAX_CONFIG_SIZE`], the component the source's `maxSize`,
//! an error answer [`MAX_ERROR_ANSWER`] (the rest is not read); and every
//! URL connected to, redirects and the token realm included, meets the
//! source's [`Rule`]. The pull is three requests (the token exchange, the
//! manifest, the blob), small enough to own. `wasmctrl push`, run by an
//! operator against a registry of their choosing, still goes through
//! oci-client.

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

use super::Reach;
use super::artifact::{self, MAX_CONFIG_SIZE, OCI_MANIFEST_MEDIA_TYPE, Packed};
use super::credentials::RegistryCredentials;
use super::downloads::now_rfc3339;
use super::http::{
    self, CONNECT_TIMEOUT, PlainHttp, Rule, chain, error_text, install_crypto_provider,
    read_bounded, refused_by_rule,
};
use super::{Artifact, DiskCache, PluginSource, Resolution, SourceError, credentials};
use crate::config::{FetchLimits, OciSourceSpec};
use crate::control::metrics::{SourceRefusal, count_source_refusal};
use crate::sandbox::digest;

/// The most bytes of a registry's token endpoint answer read.
pub const MAX_TOKEN_ANSWER: usize = 64 << 10;
/// The most bytes of a manifest read: the distribution spec asks
/// registries to accept manifests of up to 4 MiB, so none is larger.
pub const MAX_MANIFEST_SIZE: usize = 4 << 20;
/// The most bytes of an error answer read (for its message).
pub const MAX_ERROR_ANSWER: usize = 64 << 10;

/// The manifest media types a tag is resolved with.
const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";

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
    /// Where the registry may be: anywhere for a config's source, public
    /// addresses for an object's.
    reach: Reach,
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
                reach: Reach::Anywhere,
                cache,
                fetched: Mutex::new(None),
            }),
        }
    }

    /// The source, connecting only where `reach` allows (a WasmReconciler
    /// object's source: [`Reach::public`]).
    pub fn reaching(self, reach: Reach) -> Self {
        let mut inner = Arc::try_unwrap(self.inner)
            .unwrap_or_else(|_| unreachable!("a source being built has one owner"));
        inner.reach = reach;
        Self {
            inner: Arc::new(inner),
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
        let registry =
            Registry::open(&self.options, &origin, &self.reference, self.reach.clone()).await?;
        let manifest_digest = match self.reference.digest() {
            Some(d) => d.to_string(),
            None => registry.resolve(&self.reference).await?,
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
            let (manifest, _) = registry.manifest(&pinned).await?;
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
        let registry = Registry::open(
            &self.options,
            &self.origin(),
            &self.reference,
            self.reach.clone(),
        )
        .await?;
        registry.resolve(&self.reference).await
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

/// How requests to the registry are authenticated.
enum Auth {
    Anonymous,
    Basic(String, String),
    Bearer(String),
}

/// One conversation with a registry for a pull: the host's HTTP client
/// with the source's [`Rule`], and the credentials the registry asked for.
/// A new one per fetch, so rotated credentials and certificates are picked
/// up.
struct Registry {
    http: reqwest::Client,
    rule: Rule,
    /// `https://REGISTRY` (or `http://` with `insecure`).
    base: String,
    origin: String,
    auth: Auth,
}

impl Registry {
    /// Connects to `reference`'s registry and authenticates as it asks
    /// (anonymously, with basic auth, or with a token from its realm).
    async fn open(
        options: &RegistryOptions,
        origin: &str,
        reference: &Reference,
        reach: Reach,
    ) -> Result<Self, Failure> {
        let refused = |message: String| {
            Failure::refused(SourceError::Download {
                origin: origin.to_string(),
                message,
            })
        };
        let not_allowed = |message: String| {
            Failure::refused(SourceError::NotAllowed {
                origin: origin.to_string(),
                message,
            })
        };
        let rule = Rule {
            http: if options.insecure {
                PlainHttp::Any
            } else {
                PlainHttp::Never
            },
            reach,
        };
        let scheme = if options.insecure { "http" } else { "https" };
        let base = format!("{scheme}://{}", reference.resolve_registry());
        let url = reqwest::Url::parse(&format!("{base}/v2/"))
            .map_err(|e| refused(format!("{base:?} is not a registry address: {e}")))?;
        rule.check(&url).map_err(not_allowed)?;
        let client = http::client(options.limits.timeout, rule.clone()).map_err(refused)?;
        let credentials = match &options.credentials {
            Some(provider) => provider.credentials(reference.resolve_registry()).await,
            None => {
                credentials::credentials_for(
                    options.docker_config.as_deref(),
                    reference.resolve_registry(),
                )
                .await
            }
        }
        .map_err(|source| {
            Failure::refused(SourceError::Credentials {
                origin: origin.to_string(),
                source,
            })
        })?;
        let mut registry = Self {
            http: client,
            rule,
            base,
            origin: origin.to_string(),
            auth: Auth::Anonymous,
        };
        registry.auth = registry
            .authenticate(url, reference.repository(), credentials)
            .await?;
        Ok(registry)
    }

    /// What the registry's `/v2/` asks for: nothing, basic auth, or a
    /// bearer token from the realm its challenge names, for pulling
    /// `repository`.
    async fn authenticate(
        &self,
        v2: reqwest::Url,
        repository: &str,
        credentials: Option<credentials::Credentials>,
    ) -> Result<Auth, Failure> {
        let response = self
            .http
            .get(v2)
            .send()
            .await
            .map_err(|e| self.send_failure(e))?;
        // Only its headers matter; its body is never read.
        let Some(challenge) = response
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|h| h.to_str().ok())
            .map(str::to_string)
        else {
            return Ok(Auth::Anonymous);
        };
        drop(response);
        let Some((realm, service)) = bearer_challenge(&challenge) else {
            return Ok(match credentials {
                Some(c) => Auth::Basic(c.username, c.password),
                None => Auth::Anonymous,
            });
        };
        let realm = reqwest::Url::parse(&realm).map_err(|e| {
            self.refused(format!(
                "the registry's token realm {realm:?} is not a URL: {e}"
            ))
        })?;
        self.rule.check(&realm).map_err(|why| {
            Failure::refused(SourceError::NotAllowed {
                origin: self.origin.clone(),
                message: format!("the registry's token realm: {why}"),
            })
        })?;
        let mut query = vec![("scope", format!("repository:{repository}:pull"))];
        if let Some(service) = service {
            query.push(("service", service));
        }
        let mut request = self.http.get(realm).query(&query);
        if let Some(c) = credentials {
            request = request.basic_auth(c.username, Some(c.password));
        }
        let response = request.send().await.map_err(|e| self.send_failure(e))?;
        let status = response.status();
        if !status.is_success() {
            let text = error_text(response, MAX_ERROR_ANSWER).await;
            return Err(self.status_failure(
                status,
                format!("the registry's token endpoint answered {status}: {text}"),
            ));
        }
        let body = self
            .read_capped(
                response,
                MAX_TOKEN_ANSWER,
                "the registry's token answer",
                SourceRefusal::TokenAnswer,
            )
            .await?;
        #[derive(serde::Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let token: Token = serde_json::from_slice(&body).map_err(|e| {
            self.refused(format!("the registry's token answer is not a token: {e}"))
        })?;
        match token.token.or(token.access_token) {
            Some(t) if !t.is_empty() => Ok(Auth::Bearer(t)),
            _ => Err(self.refused("the registry's token answer holds no token".into())),
        }
    }

    fn get(&self, url: &str) -> reqwest::RequestBuilder {
        self.with_auth(self.http.get(url))
    }

    fn with_auth(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.auth {
            Auth::Anonymous => request,
            Auth::Basic(user, password) => request.basic_auth(user, Some(password)),
            Auth::Bearer(token) => request.bearer_auth(token),
        }
    }

    fn manifest_url(&self, reference: &Reference, at: &str) -> String {
        format!("{}/v2/{}/manifests/{at}", self.base, reference.repository())
    }

    async fn resolve(&self, reference: &Reference) -> Result<String, Failure> {
        let url = self.manifest_url(reference, reference.tag().unwrap_or("latest"));
        let response = self
            .with_auth(self.http.head(&url))
            .header(reqwest::header::ACCEPT, MANIFEST_TYPES)
            .send()
            .await
            .map_err(|e| self.send_failure(e))?;
        if !response.status().is_success() {
            return Err(self.answer_failure(response).await);
        }
        let header = response
            .headers()
            .get("docker-content-digest")
            .and_then(|h| h.to_str().ok())
            .map(str::to_string);
        let d = match header {
            Some(d) => d,
            None => {
                // Without the header, the digest is the manifest's own.
                let response = self
                    .get(&url)
                    .header(reqwest::header::ACCEPT, MANIFEST_TYPES)
                    .send()
                    .await
                    .map_err(|e| self.send_failure(e))?;
                if !response.status().is_success() {
                    return Err(self.answer_failure(response).await);
                }
                digest(
                    &self
                        .read_capped(
                            response,
                            MAX_MANIFEST_SIZE,
                            "the manifest",
                            SourceRefusal::Manifest,
                        )
                        .await?,
                )
            }
        };
        if !super::downloads::is_sha256(&d) {
            return Err(self.refused(format!(
                "the registry resolved the tag to {d:?}, not a sha256 digest"
            )));
        }
        Ok(d)
    }

    /// The image manifest at `pinned` (parsed, and as stored).
    async fn manifest(&self, pinned: &Reference) -> Result<(OciImageManifest, Vec<u8>), Failure> {
        let expected = pinned.digest().unwrap_or_default();
        let response = self
            .get(&self.manifest_url(pinned, expected))
            .header(reqwest::header::ACCEPT, OCI_MANIFEST_MEDIA_TYPE)
            .send()
            .await
            .map_err(|e| self.send_failure(e))?;
        if !response.status().is_success() {
            return Err(self.answer_failure(response).await);
        }
        let raw = self
            .read_capped(
                response,
                MAX_MANIFEST_SIZE,
                "the manifest",
                SourceRefusal::Manifest,
            )
            .await?;
        // Everything below trusts it.
        let got = digest(&raw);
        if got != expected {
            return Err(Failure::refused(SourceError::DigestMismatch {
                origin: self.origin.clone(),
                expected: expected.to_string(),
                got,
            }));
        }
        let manifest = artifact::parse_manifest(&raw).map_err(|e| self.not_an_artifact(e))?;
        Ok((manifest, raw))
    }

    /// The blob `descriptor` names, at most `max_size` bytes, verified.
    async fn blob(
        &self,
        pinned: &Reference,
        descriptor: &OciDescriptor,
        max_size: u64,
    ) -> Result<Vec<u8>, Failure> {
        let url = format!(
            "{}/v2/{}/blobs/{}",
            self.base,
            pinned.repository(),
            descriptor.digest
        );
        let response = self
            .get(&url)
            .send()
            .await
            .map_err(|e| self.send_failure(e))?;
        if !response.status().is_success() {
            return Err(self.answer_failure(response).await);
        }
        let announced = response.content_length();
        let bytes = read_bounded(&self.origin, announced, max_size, response.bytes_stream())
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

    /// At most `limit` bytes of `response`'s body (`what`, for the error):
    /// a longer one is refused, and not read past the bound.
    async fn read_capped(
        &self,
        mut response: reqwest::Response,
        limit: usize,
        what: &str,
        counted_as: SourceRefusal,
    ) -> Result<Vec<u8>, Failure> {
        let too_large = || {
            count_source_refusal(counted_as);
            self.refused(format!("{what} exceeds {}; refusing it", size(limit)))
        };
        if response.content_length().is_some_and(|n| n > limit as u64) {
            return Err(too_large());
        }
        let mut out = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| Failure::Unreachable(format!("{what} broke off: {}", chain(&e))))?
        {
            if out.len() + chunk.len() > limit {
                return Err(too_large());
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    fn refused(&self, message: String) -> Failure {
        Failure::refused(SourceError::Download {
            origin: self.origin.clone(),
            message,
        })
    }

    fn not_an_artifact(&self, message: String) -> Failure {
        Failure::refused(SourceError::NotWasmArtifact {
            origin: self.origin.clone(),
            message,
        })
    }

    /// A request that got no answer: unreachable, unless the source's rule
    /// refused where it led (a redirect, an address).
    fn send_failure(&self, e: reqwest::Error) -> Failure {
        let message = chain(&e);
        if refused_by_rule(&e) {
            return Failure::refused(SourceError::NotAllowed {
                origin: self.origin.clone(),
                message,
            });
        }
        let mut message = message;
        if message.contains("InvalidContentType") {
            message.push_str(
                " (the registry does not speak TLS; for a plain-HTTP registry set insecure: true)",
            );
        }
        Failure::Unreachable(message)
    }

    /// A non-success answer, sorted into "cannot reach" (5xx, 429) and
    /// "refused" (the rest), with the registry's own words, read under
    /// [`MAX_ERROR_ANSWER`].
    async fn answer_failure(&self, response: reqwest::Response) -> Failure {
        let status = response.status();
        let text = error_text(response, MAX_ERROR_ANSWER).await;
        #[derive(serde::Deserialize)]
        struct Envelope {
            errors: Vec<ErrorEntry>,
        }
        #[derive(serde::Deserialize)]
        struct ErrorEntry {
            code: String,
            #[serde(default)]
            message: String,
        }
        let errors = serde_json::from_str::<Envelope>(&text)
            .map(|e| e.errors)
            .unwrap_or_default();
        let unknown = errors.iter().any(|e| {
            matches!(
                e.code.as_str(),
                "MANIFEST_UNKNOWN" | "NAME_UNKNOWN" | "BLOB_UNKNOWN"
            )
        });
        if unknown || status == reqwest::StatusCode::NOT_FOUND {
            return self.refused("the registry has no such repository, tag or digest".into());
        }
        let said = if errors.is_empty() {
            text
        } else {
            errors
                .iter()
                .map(|e| format!("{}: {}", e.code, e.message))
                .collect::<Vec<_>>()
                .join("; ")
        };
        self.status_failure(status, format!("the registry answered {status}: {said}"))
    }

    fn status_failure(&self, status: reqwest::StatusCode, message: String) -> Failure {
        if status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS {
            Failure::Unreachable(message)
        } else if matches!(status.as_u16(), 401 | 403) {
            self.refused(format!(
                "the registry refused access ({message}); check the credentials in the docker config"
            ))
        } else {
            self.refused(message)
        }
    }
}

/// `n` bytes as "64 KiB", "4 MiB".
fn size(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

/// The realm and service of a `Bearer` challenge
/// (`Bearer realm="https://auth.example/token",service="registry"`); None
/// for another scheme.
fn bearer_challenge(header: &str) -> Option<(String, Option<String>)> {
    let (scheme, params) = header.trim().split_once(char::is_whitespace)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut realm = None;
    let mut service = None;
    let mut rest = params.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let key = key.trim().trim_start_matches(',').trim();
        let after = after.trim_start();
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            value.push(escaped);
                        }
                    }
                    '"' => {
                        end = Some(i + 1);
                        break;
                    }
                    c => value.push(c),
                }
            }
            (value, &quoted[end?..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_string(), &after[end..])
        };
        if key.eq_ignore_ascii_case("realm") {
            realm = Some(value);
        } else if key.eq_ignore_ascii_case("service") {
            service = Some(value);
        }
        rest = next.trim_start().trim_start_matches(',').trim_start();
    }
    Some((realm?, service))
}

/// `wasmctrl push`'s conversation with a registry, through oci-client.
struct Pusher {
    client: oci_client::Client,
    options: RegistryOptions,
    origin: String,
}

impl Pusher {
    fn connect(options: &RegistryOptions, origin: &str) -> Result<Self, SourceError> {
        install_crypto_provider();
        let config = oci_client::client::ClientConfig {
            protocol: if options.insecure {
                oci_client::client::ClientProtocol::Http
            } else {
                oci_client::client::ClientProtocol::Https
            },
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
        let registry = Pusher::connect(options, &origin)?;
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
        let registry = Registry::open(options, &origin, &parsed, Reach::Anywhere)
            .await
            .map_err(refused)?;
        let manifest_digest = match parsed.digest() {
            Some(d) => d.to_string(),
            None => registry.resolve(&parsed).await.map_err(refused)?,
        };
        let pinned = pin(&parsed, &manifest_digest);
        let (manifest, raw) = registry.manifest(&pinned).await.map_err(refused)?;
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

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use axum::Router;
    use axum::body::Body;
    use axum::http::{StatusCode, header};
    use axum::routing::get;

    use super::*;

    /// A body that never ends.
    fn endless() -> Body {
        Body::from_stream(futures::stream::repeat_with(|| {
            Ok::<_, std::convert::Infallible>(bytes::Bytes::from(vec![b'a'; 64 << 10]))
        }))
    }

    /// Serves `routes(addr)` on a loopback port.
    async fn serve(routes: impl FnOnce(SocketAddr) -> Router) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = routes(addr);
        tokio::spawn(async move { axum::serve(listener, router).await });
        addr
    }

    /// A registry whose `/v2/` sends clients for a token to `/token`.
    fn token_realm(addr: SocketAddr) -> Router {
        let challenge = format!("Bearer realm=\"http://{addr}/token\",service=\"test\"");
        Router::new().route(
            "/v2/",
            get(move || async move {
                (
                    StatusCode::UNAUTHORIZED,
                    [(header::WWW_AUTHENTICATE, challenge)],
                )
            }),
        )
    }

    async fn fetch(reference: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let docker_config = dir.path().join("config.json");
        std::fs::write(&docker_config, "{}").unwrap();
        let spec = OciSourceSpec {
            reference: reference.to_string(),
            poll_interval: None,
            insecure: true,
            docker_config: Some(docker_config),
            limits: FetchLimits::default(),
        };
        let source = OciSource::new(spec, DiskCache::new(dir.path().join("cache")));
        source.fetch().await.unwrap_err().to_string()
    }

    const PINNED: &str =
        "p/x@sha256:0000000000000000000000000000000000000000000000000000000000000000";

    #[tokio::test]
    async fn an_endless_token_answer_is_refused_at_its_bound() {
        let addr =
            serve(|addr| token_realm(addr).route("/token", get(|| async { endless() }))).await;
        let e = fetch(&format!("{addr}/p/x:1")).await;
        assert!(
            e.contains("the registry's token answer exceeds 64 KiB"),
            "{e}"
        );
        // A length announced past the bound is refused before reading.
        let addr = serve(|addr| {
            token_realm(addr).route(
                "/token",
                get(|| async { ([(header::CONTENT_LENGTH, "2147483648")], endless()) }),
            )
        })
        .await;
        let e = fetch(&format!("{addr}/{PINNED}")).await;
        assert!(
            e.contains("the registry's token answer exceeds 64 KiB"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn an_endless_error_answer_is_read_only_to_its_bound() {
        let addr = serve(|addr| {
            token_realm(addr).route(
                "/token",
                get(|| async { (StatusCode::UNAUTHORIZED, endless()) }),
            )
        })
        .await;
        let e = fetch(&format!("{addr}/p/x:1")).await;
        assert!(
            e.contains("refused access") && e.contains("the rest was not read"),
            "{e}"
        );
        assert!(e.len() < 2 * MAX_ERROR_ANSWER, "{} bytes", e.len());
        let addr = serve(|_| {
            Router::new().route("/v2/", get(|| async { "{}" })).route(
                "/v2/p/x/manifests/{at}",
                get(|| async { (StatusCode::BAD_REQUEST, endless()) }),
            )
        })
        .await;
        let e = fetch(&format!("{addr}/{PINNED}")).await;
        assert!(
            e.contains("answered 400") && e.contains("the rest was not read"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn an_endless_manifest_is_refused_at_its_bound() {
        let addr = serve(|_| {
            Router::new()
                .route("/v2/", get(|| async { "{}" }))
                .route("/v2/p/x/manifests/{at}", get(|| async { endless() }))
        })
        .await;
        let e = fetch(&format!("{addr}/{PINNED}")).await;
        assert!(e.contains("the manifest exceeds 4 MiB"), "{e}");
        // A tag whose HEAD lacks the digest header is resolved by reading
        // the manifest, under the same bound.
        let e = fetch(&format!("{addr}/p/x:1")).await;
        assert!(e.contains("the manifest exceeds 4 MiB"), "{e}");
    }

    /// A registry serving `manifest` under its own digest, counting the
    /// requests for anything else.
    async fn serving(
        manifest: Vec<u8>,
    ) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let pinned = format!("p/x@{}", digest(&manifest));
        let others = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = others.clone();
        let addr = serve(move |_| {
            Router::new()
                .route("/v2/", get(|| async { "{}" }))
                .route(
                    "/v2/p/x/manifests/{at}",
                    get(move || async move { manifest }),
                )
                .fallback(move || async move {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    StatusCode::NOT_FOUND
                })
        })
        .await;
        (format!("{addr}/{pinned}"), others)
    }

    #[tokio::test]
    async fn a_hostile_manifest_is_refused_in_one_bounded_line_asking_nothing_more() {
        let dir = tempfile::tempdir().unwrap();
        let docker_config = dir.path().join("config.json");
        std::fs::write(&docker_config, "{}").unwrap();
        let options = RegistryOptions {
            insecure: true,
            docker_config: Some(docker_config),
            credentials: None,
            limits: FetchLimits::default(),
        };
        let layer =
            serde_json::json!({"mediaType": "application/wasm", "digest": digest(b"c"), "size": 1});
        let manifest = |config_digest: serde_json::Value, layers: serde_json::Value| {
            serde_json::to_vec(&serde_json::json!({
                "schemaVersion": 2,
                "config": {"mediaType": artifact::WASM_CONFIG_MEDIA_TYPE, "digest": config_digest, "size": 2},
                "layers": layers,
            }))
            .unwrap()
        };
        let cases = [
            // A config digest that is a path on the registry.
            (
                manifest(
                    "../../../v2/_catalog?n=1".into(),
                    serde_json::json!([layer]),
                ),
                "its config digest \"../../../v2/_catalog?n=1\" is not sha256",
            ),
            // Nested past the parser's depth, within the 4 MiB bound.
            ("[".repeat(3 << 20).into_bytes(), "recursion limit exceeded"),
            // A media type of 1.5 MiB of newlines (3 MiB as JSON).
            (
                manifest(
                    digest(b"{}").into(),
                    serde_json::json!([{"mediaType": "\n".repeat(3 << 19), "digest": digest(b"c"), "size": 1}]),
                ),
                "its layer media type is \"\\n\\n",
            ),
            (
                manifest(digest(b"{}").into(), serde_json::json!(vec![layer; 30_000])),
                "it has 30000 layers; a wasm OCI artifact has exactly one",
            ),
        ];
        for (raw, expected) in cases {
            let (reference, others) = serving(raw).await;
            let e = match describe_artifact(&reference, &options).await {
                Ok(_) => panic!("accepted: {expected}"),
                Err(e) => e.to_string(),
            };
            assert!(e.contains(expected), "{e:.2000}");
            assert!(e.len() < 1024 && !e.contains('\n'), "{e:.2000}");
            assert_eq!(others.load(std::sync::atomic::Ordering::SeqCst), 0, "{e}");
        }
    }

    #[tokio::test]
    async fn an_objects_registry_on_loopback_is_refused_unless_allowed() {
        let addr = serve(|_| Router::new().route("/v2/", get(|| async { "{}" }))).await;
        let dir = tempfile::tempdir().unwrap();
        let source = |reach: Reach| {
            let spec = OciSourceSpec {
                reference: format!("{addr}/{PINNED}"),
                poll_interval: None,
                insecure: true,
                docker_config: None,
                limits: FetchLimits::default(),
            };
            OciSource::with_credentials(
                spec,
                DiskCache::new(dir.path().join("cache")),
                Arc::new(NoCredentials),
            )
            .reaching(reach)
        };
        let e = source(Reach::public([]))
            .fetch()
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("refusing to connect to 127.0.0.1") && e.contains("public addresses"),
            "{e}"
        );
        // Allowed by name, it gets as far as the (missing) manifest.
        let e = source(Reach::public([addr.to_string()]))
            .fetch()
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("no such repository"), "{e}");
    }

    #[test]
    fn bearer_challenges_are_read() {
        assert_eq!(
            bearer_challenge(
                r#"Bearer realm="https://auth.example/token",service="reg, istry",scope="x""#
            ),
            Some((
                "https://auth.example/token".into(),
                Some("reg, istry".into())
            ))
        );
        assert_eq!(
            bearer_challenge("bearer realm=https://a/t"),
            Some(("https://a/t".into(), None))
        );
        assert_eq!(bearer_challenge(r#"Basic realm="registry""#), None);
        assert_eq!(bearer_challenge(r#"Bearer service="x""#), None);
    }

    #[derive(Debug)]
    struct NoCredentials;

    impl RegistryCredentials for NoCredentials {
        fn credentials<'a>(
            &'a self,
            _registry: &'a str,
        ) -> BoxFuture<'a, Result<Option<credentials::Credentials>, credentials::CredentialsError>>
        {
            Box::pin(async { Ok(None) })
        }
    }
}
