//! Compiled components keyed by content digest: in memory for hot swaps and
//! repeated loads, on disk (precompiled artifacts) across restarts.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::PathBuf;
use std::sync::Mutex;

use sha2::{Digest as _, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// A component's content digest, `sha256:<hex>`.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Where a compiled component came from (for logs and benchmarks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheHit {
    Memory,
    Disk,
    Compiled,
}

pub(crate) struct ComponentCache {
    engine: Engine,
    dir: Option<PathBuf>,
    /// Distinguishes artifacts of engines with other settings (fuel, version).
    engine_hash: String,
    memory: Mutex<HashMap<String, Component>>,
}

impl ComponentCache {
    pub(crate) fn new(engine: Engine, dir: Option<PathBuf>) -> Self {
        let mut h = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        Self {
            engine,
            dir,
            engine_hash: format!("{:016x}", h.finish()),
            memory: Mutex::new(HashMap::new()),
        }
    }

    /// The compiled component for `bytes` (whose digest is `digest`).
    pub(crate) fn get_or_compile(
        &self,
        digest: &str,
        bytes: &[u8],
    ) -> wasmtime::Result<(Component, CacheHit)> {
        if let Some(c) = self.memory.lock().unwrap().get(digest) {
            return Ok((c.clone(), CacheHit::Memory));
        }
        let file = self.dir.as_ref().map(|d| {
            d.join(format!(
                "{}-{}.cwasm",
                digest.trim_start_matches("sha256:"),
                self.engine_hash
            ))
        });
        if let Some(file) = file.as_ref().filter(|f| f.exists()) {
            // SAFETY: the file was written by `serialize` of this engine
            // configuration (the name carries the digest and the engine's
            // compatibility hash) in a directory the host owns.
            match unsafe { Component::deserialize_file(&self.engine, file) } {
                Ok(c) => {
                    self.remember(digest, &c);
                    return Ok((c, CacheHit::Disk));
                }
                Err(e) => {
                    tracing::warn!(file = %file.display(), "ignoring unusable compiled artifact: {e:#}")
                }
            }
        }
        let component = Component::new(&self.engine, bytes)?;
        if let Some(file) = file
            && let Err(e) = self.store(&file, &component)
        {
            tracing::warn!(file = %file.display(), "cannot write compiled artifact: {e:#}");
        }
        self.remember(digest, &component);
        Ok((component, CacheHit::Compiled))
    }

    fn remember(&self, digest: &str, component: &Component) {
        self.memory
            .lock()
            .unwrap()
            .insert(digest.to_string(), component.clone());
    }

    fn store(&self, file: &std::path::Path, component: &Component) -> wasmtime::Result<()> {
        let bytes = component.serialize()?;
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)?;
        }
        // Write then rename, so a concurrent reader never maps a half-written file.
        let tmp = file.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, file)?;
        Ok(())
    }
}
