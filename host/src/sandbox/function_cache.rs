//! Cranelift's incremental compilation cache, kept in memory: a function
//! whose code did not change since an earlier compile in this process is
//! not compiled again. A Python or JavaScript plugin is an interpreter
//! plus the plugin's code (mostly data in the interpreter's memory
//! snapshot), so a rebuild after an edit, or a second plugin of the same
//! SDK, differs from the last compile in a few functions at most: its
//! compile is mostly cache hits (docs/BENCHMARKS.md, `dev --watch`).
//!
//! The key is Cranelift's hash of the function (its body, signature and
//! the target's flags) and the value the compiled function; both stay in
//! this process. At most `max_bytes` of keys and values are kept: past it,
//! nothing more is added, and what is kept stays valid.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;

use wasmtime::CacheStore;

/// The compiled functions of this process, up to a byte ceiling.
#[derive(Debug)]
pub(super) struct FunctionCache {
    max_bytes: usize,
    kept: Mutex<Kept>,
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
        }
    }
}

impl CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.functions.get(key).map(|v| Cow::Owned(v.clone()))
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
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
