//! Loading a plugin: read, validate against the world, compile (through the
//! cache), pre-link, and ask it for its metadata.

use super::bindings::ReconcilerPre;
use super::cache::{self, CacheHit};
use super::instance::Sandbox;
use super::{Runtime, TrapKind};
use crate::hostapi::KubeApi;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use super::bindings::wasmctrl::reconciler::types::PluginMetadata;

/// The exports every plugin must have (the `reconciler` world).
const REQUIRED_EXPORTS: [&str; 2] = ["metadata", "reconcile"];

/// Per-plugin sandbox limits, applied to every instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Linear memory cap in bytes; a grow past it fails (and the guest
    /// usually aborts, reported as a [`TrapKind::Memory`] trap).
    pub memory_bytes: usize,
    /// Table elements cap.
    pub table_elements: usize,
    /// Fuel per reconcile (needs `RuntimeConfig::fuel`); None: unmetered.
    pub fuel: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 64 << 20,
            table_elements: 20_000,
            fuel: None,
        }
    }
}

/// What to load: a component file and how to run it.
#[derive(Clone)]
pub struct PluginSpec {
    /// The name the host knows the plugin by (the config's `name`).
    pub name: String,
    pub path: PathBuf,
    pub limits: Limits,
    /// The plugin's settings, handed to the guest as JSON.
    pub settings: serde_json::Value,
    /// Serves the plugin's `kube` calls.
    pub kube: Arc<dyn KubeApi>,
}

/// Why a plugin could not be loaded. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("plugin {path}: cannot read the file: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("plugin {path}: not a WebAssembly file (no `\\0asm` header)")]
    NotWasm { path: PathBuf },
    #[error(
        "plugin {path}: a core WebAssembly module, not a component; build it with `cargo build --release --target wasm32-wasip2` against the wasmctrl:reconciler world"
    )]
    CoreModule { path: PathBuf },
    #[error("plugin {path}: invalid component: {message}")]
    Compile { path: PathBuf, message: String },
    #[error(
        "plugin {path}: missing export `{export}`: the component does not implement the wasmctrl:reconciler/reconciler@0.1.0 world"
    )]
    MissingExport { path: PathBuf, export: &'static str },
    #[error(
        "plugin {path}: wrong world: the component's exports do not match wasmctrl:reconciler/reconciler@0.1.0: {message}"
    )]
    WrongWorld { path: PathBuf, message: String },
    #[error("plugin {path}: imports something the host does not provide: {message}")]
    UnsupportedImport { path: PathBuf, message: String },
    #[error("plugin {path}: `metadata` failed ({kind}): {message}")]
    Metadata {
        path: PathBuf,
        kind: TrapKind,
        message: String,
    },
    #[error("plugin {path}: the instance pool is exhausted: {message}")]
    Pool { path: PathBuf, message: String },
}

/// A loaded plugin: a compiled, pre-linked, validated component. Each
/// reconcile instantiates it afresh (see [`Plugin::invoke`]).
pub struct Plugin {
    pub(crate) sandbox: Sandbox,
    path: PathBuf,
    digest: String,
    metadata: PluginMetadata,
    cache_hit: CacheHit,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.sandbox.name)
            .field("path", &self.path)
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

impl Plugin {
    pub fn name(&self) -> &str {
        &self.sandbox.name
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `sha256:<hex>` of the component file.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// What the plugin said about itself at load time.
    pub fn metadata(&self) -> &PluginMetadata {
        &self.metadata
    }

    pub fn limits(&self) -> &Limits {
        &self.sandbox.limits
    }

    /// Whether loading reused a compiled artifact.
    pub fn cache_hit(&self) -> CacheHit {
        self.cache_hit
    }
}

impl Runtime {
    /// Loads the component at `spec.path`: validates it against the
    /// `reconciler` world, compiles it off the async executor (or reuses the
    /// compiled artifact of the same digest), pre-links it and calls its
    /// `metadata`. Nothing of a plugin that fails here is kept.
    pub async fn load(&self, spec: PluginSpec) -> Result<Arc<Plugin>, LoadError> {
        let bytes = tokio::fs::read(&spec.path)
            .await
            .map_err(|source| LoadError::Read {
                path: spec.path.clone(),
                source,
            })?;
        self.load_bytes(spec, bytes).await
    }

    /// Like [`Runtime::load`], with the component's bytes already read.
    pub async fn load_bytes(
        &self,
        spec: PluginSpec,
        bytes: Vec<u8>,
    ) -> Result<Arc<Plugin>, LoadError> {
        let path = spec.path.clone();
        check_header(&path, &bytes)?;
        let digest = cache::digest(&bytes);
        let runtime = self.clone();
        let pre_digest = digest.clone();
        let compile_path = path.clone();
        let (pre, cache_hit) = tokio::task::spawn_blocking(move || {
            runtime.prepare(&compile_path, &pre_digest, &bytes)
        })
        .await
        .expect("plugin compilation panicked")?;

        let sandbox = Sandbox {
            runtime: self.clone(),
            pre,
            name: spec.name.into(),
            settings: spec.settings.to_string().into(),
            limits: spec.limits,
            kube: spec.kube,
        };
        let metadata = sandbox
            .call_metadata()
            .await
            .map_err(|(kind, message)| match kind {
                None => LoadError::Pool {
                    path: path.clone(),
                    message,
                },
                Some(kind) => LoadError::Metadata {
                    path: path.clone(),
                    kind,
                    message,
                },
            })?;
        Ok(Arc::new(Plugin {
            sandbox,
            path,
            digest,
            metadata,
            cache_hit,
        }))
    }

    fn prepare(
        &self,
        path: &Path,
        digest: &str,
        bytes: &[u8],
    ) -> Result<(ReconcilerPre<super::HostState>, CacheHit), LoadError> {
        let (component, hit) = self
            .inner
            .cache
            .get_or_compile(digest, bytes)
            .map_err(|e| LoadError::Compile {
                path: path.to_path_buf(),
                message: format!("{e:#}"),
            })?;
        let ty = component.component_type();
        for export in REQUIRED_EXPORTS {
            if ty.get_export(&self.inner.engine, export).is_none() {
                return Err(LoadError::MissingExport {
                    path: path.to_path_buf(),
                    export,
                });
            }
        }
        let pre = self.inner.linker.instantiate_pre(&component).map_err(|e| {
            LoadError::UnsupportedImport {
                path: path.to_path_buf(),
                message: format!("{e:#}"),
            }
        })?;
        let pre = ReconcilerPre::new(pre).map_err(|e| LoadError::WrongWorld {
            path: path.to_path_buf(),
            message: format!("{e:#}"),
        })?;
        Ok((pre, hit))
    }
}

fn check_header(path: &Path, bytes: &[u8]) -> Result<(), LoadError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(LoadError::NotWasm {
            path: path.to_path_buf(),
        });
    }
    // Bytes 4..8 are the version and layer: 1,0,0,0 is a core module;
    // components have layer 1 (`0d 00 01 00`).
    if bytes[6..8] == [0, 0] {
        return Err(LoadError::CoreModule {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}
