//! [`OciSource`]: a plugin's component from a registry, by tag or digest,
//! with the disk cache standing in while the registry cannot be reached.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use oci_client::Reference;

use super::failure::{Failure, describe};
use super::options::RegistryOptions;
use super::reference::pin;
use super::registry::{MAX_MANIFEST_SIZE, Registry};
use crate::config::OciSourceSpec;
use crate::control::metrics::{DiskRefusal, count_disk_refusal};
use crate::ops::source::Reach;
use crate::ops::source::artifact;
use crate::ops::source::credentials::RegistryCredentials;
use crate::ops::source::downloads::now_rfc3339;
use crate::ops::source::{Artifact, DiskCache, PluginSource, Resolution, SourceError};

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
                let Some((artifact, r)) = self.cached(&self.record_key()).await else {
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
            self.remember(&self.record_key(), &r.manifest, &r.layer)
                .await;
            return Ok((artifact, manifest_digest));
        }
        let pulled = async {
            let (manifest, raw) = registry.manifest(&pinned).await?;
            let layer = artifact::component_layer(&manifest, self.options.limits.max_size)
                .map_err(|message| registry.not_an_artifact(message))?
                .clone();
            let bytes = registry
                .blob(&pinned, &layer, self.options.limits.max_size)
                .await?;
            Ok::<_, Failure>((layer, bytes, raw))
        }
        .await;
        let (layer, bytes, raw_manifest) = match pulled {
            Ok(found) => found,
            Err(Failure::Refused(e)) => return Err(Failure::RefusedManifest(e, manifest_digest)),
            Err(other) => return Err(other),
        };
        // The manifest too: a record's layer is believed only through it.
        for blob in [&bytes, &raw_manifest] {
            if let Err(e) = self.cache.write(blob).await {
                tracing::warn!(%origin, cache = %self.cache.dir().display(), "cannot cache the component: {e}");
            }
        }
        self.remember(&pinned.whole(), &manifest_digest, &layer.digest)
            .await;
        self.remember(&self.record_key(), &manifest_digest, &layer.digest)
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

    /// The key of the record of what this source's reference resolves to.
    /// A tag over plain HTTP has a record of its own: what a network could
    /// answer there never stands for the same tag fetched over TLS (a
    /// WasmReconciler naming a config plugin's tag, with `insecure`, shares
    /// the cache).
    fn record_key(&self) -> String {
        if self.spec.insecure && self.reference.digest().is_none() {
            format!("{} (plain HTTP)", self.spec.reference)
        } else {
            self.spec.reference.clone()
        }
    }

    /// The cached component `reference` last resolved to, if intact. The
    /// record is believed only as far as the cache's content checks it: a
    /// pinned reference's record must name that manifest, and its layer is
    /// the one the manifest blob (checked against its digest) names. So
    /// whoever can write the cache directory cannot change what runs for a
    /// digest.
    async fn cached(&self, reference: &str) -> Option<(Artifact, Resolution)> {
        let r = self.cache.resolution(reference).await?;
        let refuse = |why: &str| {
            count_disk_refusal(DiskRefusal::CachedRecord);
            tracing::warn!(origin = %self.origin(), cache = %self.cache.dir().display(), "ignoring the cached record of {reference}: {why}");
            None
        };
        if let Some((_, pinned)) = reference.rsplit_once('@')
            && pinned != r.manifest
        {
            return refuse("it names another manifest than the reference pins");
        }
        let Some(raw) = self.cache.read(&r.manifest, MAX_MANIFEST_SIZE as u64).await else {
            return refuse("the manifest it names is not cached");
        };
        let layer = artifact::parse_manifest(&raw).ok().and_then(|m| {
            artifact::component_layer(&m, self.options.limits.max_size)
                .ok()
                .map(|l| l.digest.clone())
        });
        if layer.as_deref() != Some(r.layer.as_str()) {
            return refuse("its layer is not the one its manifest names");
        }
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
