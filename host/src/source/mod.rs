//! Where a plugin's component comes from.
//!
//! A [`PluginSource`] fetches the component's bytes (with their digest) and
//! says when they may have changed. The manager never knows more than that:
//! a file, a URL pinned by digest, an OCI reference or a Kubernetes object
//! are each a new implementation here, not a change to the manager (see
//! docs/EXTENDING.md).

mod file;

use std::fmt;
use std::path::Path;

use futures::future::BoxFuture;
use futures::stream::BoxStream;

pub use file::{FileSource, FileWatcher};

use crate::config::SourceSpec;

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

/// Why a source could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("plugin {origin}: cannot read the file: {source}")]
    Read {
        origin: String,
        source: std::io::Error,
    },
}

/// Where a plugin's component comes from.
pub trait PluginSource: Send + Sync + 'static {
    /// Where the bytes come from, for logs, errors and `/plugins`
    /// (`/abs/path/plugin.wasm`).
    fn origin(&self) -> String;

    /// The component now.
    fn fetch(&self) -> BoxFuture<'_, Result<Artifact, SourceError>>;

    /// Yields whenever the component may have changed (debounced); the
    /// manager then fetches it and swaps if its digest differs. A source
    /// that never changes returns an empty stream.
    fn changes(&self) -> BoxStream<'static, ()>;
}

/// The source a config entry names, relative to the config's directory.
pub fn from_config(
    config: &SourceSpec,
    base_dir: &Path,
    watcher: Option<&FileWatcher>,
) -> Box<dyn PluginSource> {
    match config {
        SourceSpec::File(path) => Box::new(FileSource::new(base_dir.join(path), watcher.cloned())),
    }
}
