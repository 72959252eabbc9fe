//! Where a plugin's component comes from.
//!
//! A [`PluginSource`] fetches the component's bytes (with their digest) and
//! says when they may have changed. The manager never knows more than that:
//! a file, a URL pinned by digest, an OCI reference or a Kubernetes object
//! are each a new implementation here, not a change to the manager (see
//! docs/ARCHITECTURE.md, "Where to add what").
//!
//! - `file`: a component file, watched for changes.
//! - `url`: an `https://` URL pinned by the component's SHA-256.
//! - `oci`: a wasm OCI artifact in a registry ([`artifact`] is the layout),
//!   by tag (resolved to a digest, optionally polled) or by digest.
//!
//! What `url` and `oci` download is kept on disk by digest ([`DiskCache`]),
//! with the digest each tag last resolved to, so a host restarts from it
//! when the network or the registry is down. docs/SECURITY.md (its sources section) states
//! what is trusted and why.

pub mod artifact;
pub mod credentials;
mod downloads;
mod file;
pub(crate) mod held;
mod http;
pub mod oci;
mod pull_secret;
mod reach;
mod url;

use std::fmt;
use std::path::Path;

use futures::future::BoxFuture;
use futures::stream::BoxStream;

pub use crate::config::is_loopback_url;
pub use credentials::{
    Credentials, CredentialsError, RegistryCredentials, credentials_from_dockerconfigjson,
};
pub use downloads::{DiskCache, Pruned, Resolution};
pub use file::{FileSource, FileWatcher};
pub use oci::OciSource;
pub use pull_secret::PullSecret;
pub use reach::{Reach, is_internal};
pub use url::UrlSource;

use crate::config::{HostConfig, SourceSpec};

/// A component as fetched.
#[derive(Clone)]
pub struct Artifact {
    pub bytes: Vec<u8>,
    /// `sha256:<hex>` of `bytes`.
    pub digest: String,
}

impl fmt::Debug for Artifact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Artifact")
            .field("bytes", &self.bytes.len())
            .field("digest", &self.digest)
            .finish()
    }
}

/// Why a source could not be fetched. Every variant names the source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("plugin {origin}: cannot read the file: {source}")]
    Read {
        origin: String,
        source: std::io::Error,
    },
    /// The source is not well formed (a reference or URL given on the
    /// command line).
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
    /// The network or the server failed (connection, HTTP status,
    /// protocol), or the server refused (unknown tag, credentials).
    #[error("plugin {origin}: {message}")]
    Download { origin: String, message: String },
    /// The source's rule refused where it would connect: an internal
    /// address for a WasmReconciler object's source, a redirect elsewhere
    /// than the rule allows. Not retried: the same request leads there
    /// again.
    #[error("plugin {origin}: {message}")]
    NotAllowed { origin: String, message: String },
    /// The bytes are not the ones the source is pinned to.
    #[error(
        "plugin {origin}: digest mismatch: expected {expected}, got {got}; refusing to load it"
    )]
    DigestMismatch {
        origin: String,
        expected: String,
        got: String,
    },
    #[error(
        "plugin {origin}: the component is larger than maxSize ({limit} bytes){}",
        size.map(|s| format!(": {s} bytes")).unwrap_or_default()
    )]
    TooLarge {
        origin: String,
        limit: u64,
        size: Option<u64>,
    },
    #[error("plugin {origin}: no answer within the source's timeout ({}s)", after.as_secs_f64())]
    Timeout {
        origin: String,
        after: std::time::Duration,
    },
    /// The registry answered with something that is not a wasm OCI artifact.
    #[error("plugin {origin}: not a wasm OCI artifact: {message}")]
    NotWasmArtifact { origin: String, message: String },
    /// Registry credentials could not be read.
    #[error("plugin {origin}: {source}")]
    Credentials {
        origin: String,
        source: CredentialsError,
    },
    /// The objects' loads under way hold all `pluginsFrom.maxLoadingBytes`
    /// allows: tried again later, never answered from the cache.
    #[error("plugin {origin}: {message}")]
    Busy { origin: String, message: String },
    /// The registry is unreachable and nothing usable is cached.
    #[error("plugin {origin}: {message}, and no copy is cached ({cache})")]
    Unavailable {
        origin: String,
        message: String,
        cache: String,
    },
}

/// `work`'s output, or `Timeout` naming `origin` once `after` has passed
/// (the source's `limits.timeout`, bounding a whole fetch or push).
pub(crate) async fn within<T>(
    origin: &str,
    after: std::time::Duration,
    work: impl std::future::Future<Output = T>,
) -> Result<T, SourceError> {
    tokio::time::timeout(after, work)
        .await
        .map_err(|_| SourceError::Timeout {
            origin: origin.to_string(),
            after,
        })
}

/// Where a plugin's component comes from.
pub trait PluginSource: Send + Sync + 'static {
    /// Where the bytes come from, for logs, errors and `/plugins`
    /// (`/abs/path/plugin.wasm`, `https://host/path`, `oci://registry/repo:tag`).
    fn origin(&self) -> String;

    /// The component now.
    fn fetch(&self) -> BoxFuture<'_, Result<Artifact, SourceError>>;

    /// Yields whenever the component may have changed (debounced); the
    /// manager then fetches it and swaps if its digest differs. A source
    /// that never changes returns an empty stream.
    fn changes(&self) -> BoxStream<'static, ()>;
}

/// The source a plugin's config names: files relative to the config's
/// directory, downloads cached in [`HostConfig::source_cache_dir`].
pub fn from_config(
    spec: &SourceSpec,
    host: &HostConfig,
    watcher: Option<&FileWatcher>,
) -> Box<dyn PluginSource> {
    from_spec(spec, &host.base_dir, &host.source_cache_dir(), watcher)
}

/// The source `spec` names, with relative paths resolved against
/// `base_dir` and downloads cached under `cache_dir`.
pub fn from_spec(
    spec: &SourceSpec,
    base_dir: &Path,
    cache_dir: &Path,
    watcher: Option<&FileWatcher>,
) -> Box<dyn PluginSource> {
    match spec {
        SourceSpec::File(path) => Box::new(FileSource::new(base_dir.join(path), watcher.cloned())),
        SourceSpec::Url(spec) => Box::new(UrlSource::new(
            spec.clone(),
            DiskCache::new(cache_dir.to_path_buf()),
        )),
        SourceSpec::Oci(spec) => {
            let mut spec = spec.clone();
            spec.docker_config = spec.docker_config.map(|p| base_dir.join(p));
            Box::new(OciSource::new(
                spec,
                DiskCache::new(cache_dir.to_path_buf()),
            ))
        }
    }
}
