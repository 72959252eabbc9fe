//! Cranelift's incremental compilation cache: a function whose code did
//! not change since an earlier compile (in this process, or with a cache
//! directory in an earlier one) is not compiled again. A Python or
//! JavaScript plugin is an interpreter plus the plugin's code (mostly data
//! in the interpreter's memory snapshot), so a rebuild after an edit, or a
//! second plugin of the same SDK, differs from the last compile in a few
//! functions at most: its compile is mostly cache hits
//! (docs/BENCHMARKS.md, `dev --watch`).
//!
//! The key is Cranelift's hash of the function (its body, signature and
//! the target's flags) and the value the compiled function. At most
//! `max_bytes` of keys and values are kept in memory: past it, nothing more
//! is added, and what is kept stays valid. With a cache directory
//! (`runtime.cacheDir`), what this process compiles is also kept on disk
//! for the next (`disk.rs`), up to the same ceiling.

mod disk;

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use wasmtime::CacheStore;

/// The compiled functions of this process, up to a byte ceiling, and those
/// kept on disk.
pub(super) struct FunctionCache {
    max_bytes: usize,
    kept: Mutex<Kept>,
    disk: OnceLock<disk::Packs>,
}

impl std::fmt::Debug for FunctionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FunctionCache")
            .field("max_bytes", &self.max_bytes)
            .field("on_disk", &self.disk.get().is_some())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Kept {
    functions: HashMap<Vec<u8>, Vec<u8>>,
    bytes: usize,
}

impl FunctionCache {
    pub(super) fn new(max_bytes: usize) -> Self {
        Self {
            max_bytes,
            kept: Mutex::default(),
            disk: OnceLock::new(),
        }
    }

    /// Keeps compiled functions under the cache directory `root` too, for
    /// the engine whose code `engine` (its hash) names. Called once the
    /// engine is built, before anything is compiled with it.
    pub(super) fn keep_on_disk(&self, root: &Path, engine: &str) {
        let _ = self
            .disk
            .set(disk::Packs::new(root, engine, self.max_bytes as u64));
    }
}

impl CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(value) = kept.functions.get(key) {
            return Some(Cow::Owned(value.clone()));
        }
        drop(kept);
        self.disk.get()?.get(key).map(Cow::Owned)
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        if let Some(disk) = self.disk.get() {
            disk.insert(key, &value);
        }
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let size = key.len() + value.len();
        if kept.bytes + size > self.max_bytes || kept.functions.contains_key(key) {
            return false;
        }
        kept.bytes += size;
        kept.functions.insert(key.to_vec(), value);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    /// An engine of the host's kind compiling through `cache`.
    fn engine(cache: &Arc<FunctionCache>) -> wasmtime::Engine {
        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true).epoch_interruption(true);
        config
            .enable_incremental_compilation(cache.clone())
            .unwrap();
        wasmtime::Engine::new(&config).unwrap()
    }

    #[test]
    fn a_host_started_again_compiles_a_changed_component_from_the_functions_kept_on_disk() {
        let root = tempfile::tempdir().unwrap();
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let bytes = std::fs::read(wasmctrl_plugin_artifacts::MIRROR).unwrap();
        let first = Arc::new(FunctionCache::new(128 << 20));
        let engine_a = engine(&first);
        let hash = crate::sandbox::compiled::engine_hash(&engine_a);
        first.keep_on_disk(root.path(), &hash);
        wasmtime::component::Component::new(&engine_a, &bytes).unwrap();
        let disk = first.disk.get().unwrap();
        let compiled = disk.counts.written.load(Ordering::Relaxed);
        assert!(
            compiled > 10,
            "the first compile keeps its functions: {compiled}"
        );
        assert_eq!(disk.counts.read.load(Ordering::Relaxed), 0);

        // Another process, another build of the same code: a component
        // whose bytes differ (a custom section added), so no artifact of
        // the whole matches, while its functions are the same.
        let mut rebuilt = bytes.clone();
        rebuilt.extend_from_slice(&[0, 7, 5, b'b', b'u', b'i', b'l', b'd', 1]);
        let next = Arc::new(FunctionCache::new(128 << 20));
        let engine_b = engine(&next);
        assert_eq!(crate::sandbox::compiled::engine_hash(&engine_b), hash);
        next.keep_on_disk(root.path(), &hash);
        let component = wasmtime::component::Component::new(&engine_b, &rebuilt).unwrap();
        assert!(component.component_type().exports(&engine_b).count() > 0);
        let disk = next.disk.get().unwrap();
        // A few functions (some of wasmtime's trampolines) are not the
        // same from compile to compile and are always compiled again; the
        // rest come from disk.
        let read = disk.counts.read.load(Ordering::Relaxed);
        let again = disk.counts.written.load(Ordering::Relaxed);
        assert!(
            read > compiled / 2 && again * 3 < read + again,
            "{read} functions read from disk, {again} compiled again, of the first's {compiled}"
        );
    }

    #[test]
    fn functions_are_kept_up_to_the_ceiling_and_never_replaced() {
        let cache = FunctionCache::new(10);
        assert!(cache.insert(b"a", vec![1; 4]));
        assert!(!cache.insert(b"a", vec![2; 4]), "a key is never replaced");
        assert_eq!(cache.get(b"a").as_deref(), Some(&[1u8; 4][..]));
        assert!(!cache.insert(b"b", vec![0; 9]), "past the ceiling");
        assert!(cache.get(b"b").is_none());
        assert!(cache.insert(b"c", vec![0; 4]));
    }
}
