//! Downloaded components on disk, by digest, and what each OCI reference
//! last resolved to: a host restarts from them when the network is down.
//!
//! ```text
//! <dir>/blobs/sha256/<hex>        the component bytes (digest checked on read)
//! <dir>/refs/<sha256 of ref>.json {"reference", "manifest", "layer", "resolvedAt"}
//! ```
//!
//! Files are written aside and renamed into place, so a reader (another
//! host sharing the directory, or this one after a crash) never sees half
//! a file. Nothing read back is trusted: a blob whose bytes do not hash to
//! its name is deleted and treated as missing.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::runtime::digest;

/// The largest reference record read back.
const MAX_RECORD: u64 = 64 << 10;

/// Downloaded components by digest, and OCI reference resolutions. Cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct DiskCache {
    dir: PathBuf,
}

/// What an OCI reference resolved to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resolution {
    /// The reference as configured.
    pub reference: String,
    /// The manifest's digest.
    pub manifest: String,
    /// The component layer's digest.
    pub layer: String,
    /// When the reference was first seen resolving to this manifest (RFC
    /// 3339).
    pub resolved_at: String,
}

impl DiskCache {
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bytes stored under `digest` (`sha256:<hex>`), if present, at
    /// most `max_size` bytes and intact. A corrupt file is removed.
    pub async fn read(&self, digest_: &str, max_size: u64) -> Option<Vec<u8>> {
        let path = self.blob_path(digest_)?;
        let len = tokio::fs::metadata(&path).await.ok()?.len();
        if len > max_size {
            tracing::warn!(file = %path.display(), "cached component is larger than maxSize; ignoring it");
            return None;
        }
        let bytes = tokio::fs::read(&path).await.ok()?;
        if digest(&bytes) != digest_ {
            tracing::warn!(file = %path.display(), "cached component does not match its digest; removing it");
            let _ = tokio::fs::remove_file(&path).await;
            return None;
        }
        Some(bytes)
    }

    /// Stores `bytes` under their digest.
    pub async fn write(&self, bytes: &[u8]) -> std::io::Result<()> {
        let path = self
            .blob_path(&digest(bytes))
            .expect("a computed digest is well formed");
        if tokio::fs::try_exists(&path).await.unwrap_or(false) {
            return Ok(());
        }
        write_atomically(&path, bytes).await
    }

    /// What `reference` last resolved to, if recorded.
    pub async fn resolution(&self, reference: &str) -> Option<Resolution> {
        let path = self.record_path(reference);
        let len = tokio::fs::metadata(&path).await.ok()?.len();
        if len > MAX_RECORD {
            return None;
        }
        let bytes = tokio::fs::read(&path).await.ok()?;
        let record: Resolution = serde_json::from_slice(&bytes).ok()?;
        // Digests name files: only well-formed ones are believed.
        (record.reference == reference && is_sha256(&record.manifest) && is_sha256(&record.layer))
            .then_some(record)
    }

    /// Records what `resolution.reference` resolved to.
    pub async fn remember(&self, resolution: &Resolution) -> std::io::Result<()> {
        let path = self.record_path(&resolution.reference);
        let bytes = serde_json::to_vec_pretty(resolution).map_err(std::io::Error::other)?;
        write_atomically(&path, &bytes).await
    }

    fn blob_path(&self, digest: &str) -> Option<PathBuf> {
        is_sha256(digest).then(|| {
            self.dir
                .join("blobs")
                .join("sha256")
                .join(&digest["sha256:".len()..])
        })
    }

    fn record_path(&self, reference: &str) -> PathBuf {
        // References hold ':' and '/', so the file is named by their hash.
        let name = hex::encode(Sha256::digest(reference.as_bytes()));
        self.dir.join("refs").join(format!("{name}.json"))
    }
}

/// `sha256:` and 64 lowercase hex digits.
pub(crate) fn is_sha256(d: &str) -> bool {
    d.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Writes `bytes` next to `path` and renames the file into place.
async fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().expect("cache files live in a directory");
    tokio::fs::create_dir_all(dir).await?;
    let tmp = dir.join(format!(
        ".{}.{}-{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = async {
        let mut file = tokio::fs::File::create(&tmp).await?;
        tokio::io::AsyncWriteExt::write_all(&mut file, bytes).await?;
        file.sync_all().await?;
        drop(file);
        tokio::fs::rename(&tmp, path).await
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    result
}

/// Now, RFC 3339.
pub(crate) fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_blob_round_trips_and_a_corrupt_one_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::new(dir.path().to_path_buf());
        let d = digest(b"component");
        assert_eq!(cache.read(&d, 1 << 20).await, None);
        cache.write(b"component").await.unwrap();
        assert_eq!(
            cache.read(&d, 1 << 20).await.as_deref(),
            Some(&b"component"[..])
        );
        // Too large for the caller's bound: not returned.
        assert_eq!(cache.read(&d, 4).await, None);
        // Corrupted on disk: detected, removed.
        let path = cache.blob_path(&d).unwrap();
        std::fs::write(&path, b"tampered").unwrap();
        assert_eq!(cache.read(&d, 1 << 20).await, None);
        assert!(!path.exists());
        // A malformed digest never names a file.
        assert_eq!(cache.read("sha256:../../etc/passwd", 1 << 20).await, None);
        // Nothing but the blob and no temporary file is left behind.
        cache.write(b"component").await.unwrap();
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[tokio::test]
    async fn a_resolution_is_remembered_per_reference() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::new(dir.path().to_path_buf());
        let r = Resolution {
            reference: "127.0.0.1:5000/p/stamp:v1".into(),
            manifest: digest(b"m"),
            layer: digest(b"l"),
            resolved_at: now_rfc3339(),
        };
        assert_eq!(cache.resolution(&r.reference).await, None);
        cache.remember(&r).await.unwrap();
        assert_eq!(cache.resolution(&r.reference).await, Some(r.clone()));
        assert_eq!(cache.resolution("127.0.0.1:5000/p/stamp:v2").await, None);
    }
}
