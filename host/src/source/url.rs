//! A component at a URL, pinned by its SHA-256: downloaded once, verified,
//! cached by digest; it never changes, so it is never fetched again while
//! the cached copy is intact.

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;

use super::http::{self, chain, read_bounded};
use super::{Artifact, DiskCache, PluginSource, SourceError};
use crate::config::UrlSourceSpec;
use crate::runtime::digest;

/// A component at `https://…` whose digest is known in advance.
pub struct UrlSource {
    spec: UrlSourceSpec,
    cache: DiskCache,
}

impl UrlSource {
    pub fn new(spec: UrlSourceSpec, cache: DiskCache) -> Self {
        Self { spec, cache }
    }

    /// Downloads the component, without the cache, and verifies it.
    pub async fn download(&self) -> Result<Artifact, SourceError> {
        let timeout = self.spec.limits.timeout;
        let bytes = tokio::time::timeout(timeout, self.get())
            .await
            .map_err(|_| SourceError::Timeout {
                origin: self.origin(),
                after: timeout,
            })??;
        let got = digest(&bytes);
        if got != self.spec.digest {
            return Err(SourceError::DigestMismatch {
                origin: self.origin(),
                expected: self.spec.digest.clone(),
                got,
            });
        }
        Ok(Artifact { bytes, digest: got })
    }

    async fn get(&self) -> Result<Vec<u8>, SourceError> {
        let origin = self.origin();
        let failed = |message: String| SourceError::Download {
            origin: origin.clone(),
            message,
        };
        let client = http::client(self.spec.limits.timeout).map_err(failed)?;
        let response = client
            .get(&self.spec.url)
            .send()
            .await
            .map_err(|e| failed(format!("cannot download: {}", chain(&e))))?;
        let status = response.status();
        if !status.is_success() {
            return Err(failed(format!(
                "cannot download: the server answered {status}"
            )));
        }
        let announced = response.content_length();
        read_bounded(
            &origin,
            announced,
            self.spec.limits.max_size,
            response.bytes_stream().boxed(),
        )
        .await
    }
}

impl PluginSource for UrlSource {
    /// The URL without its query, which may carry a signature or token.
    fn origin(&self) -> String {
        match ::url::Url::parse(&self.spec.url) {
            Ok(mut u) if u.query().is_some() => {
                u.set_query(None);
                format!("{u}?…")
            }
            Ok(u) => u.to_string(),
            Err(_) => self.spec.url.clone(),
        }
    }

    fn fetch(&self) -> BoxFuture<'_, Result<Artifact, SourceError>> {
        Box::pin(async move {
            let expected = &self.spec.digest;
            if let Some(bytes) = self.cache.read(expected, self.spec.limits.max_size).await {
                return Ok(Artifact {
                    bytes,
                    digest: expected.clone(),
                });
            }
            let artifact = self.download().await?;
            if let Err(e) = self.cache.write(&artifact.bytes).await {
                tracing::warn!(origin = %self.origin(), cache = %self.cache.dir().display(), "cannot cache the component: {e}");
            }
            Ok(artifact)
        })
    }

    /// Pinned by digest: the component never changes.
    fn changes(&self) -> BoxStream<'static, ()> {
        futures::stream::empty().boxed()
    }
}
