//! Downloaded components on disk, by digest, and what each OCI reference
//! last resolved to: a host restarts from them when the network is down.
//!
//! ```text
//! <dir>/blobs/sha256/<hex>        a component or an OCI manifest (digest checked on read)
//! <dir>/refs/<sha256 of ref>.json {"reference", "manifest", "layer", "resolvedAt"}
//! ```
//!
//! Files are written aside and renamed into place, so a reader (another
//! host sharing the directory, or this one after a crash) never sees half
//! a file. Nothing read back is trusted: a blob whose bytes do not hash to
//! its name is deleted and treated as missing, only regular files of a
//! bounded size are read, and an OCI record's layer is believed only if
//! the manifest blob it names (itself checked) names that layer.
//!
//! # Pruning
//! Every version a polled tag moved to leaves a blob and a record of its
//! pinned manifest. [`DiskCache::prune`] removes what no source needs any
//! more, keeping the newest few for rollbacks and restarts without the
//! registry.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::held;
use crate::control::metrics::{DiskRefusal, count_disk_refusal};
use crate::meta::files::read_regular;
use crate::sandbox::digest;

/// The largest reference record read back.
const MAX_RECORD: u64 = 64 << 10;

/// Downloaded components by digest, and OCI reference resolutions. Cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct DiskCache {
    dir: PathBuf,
}

/// Files younger than this are never pruned: a fetch writes its blob
/// before the record naming it, and another host may share the directory.
const PRUNE_GRACE: Duration = Duration::from_secs(600);

/// What [`DiskCache::prune`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Component blobs removed.
    pub blobs: usize,
    /// Reference records removed.
    pub records: usize,
    /// Bytes freed by the blobs.
    pub bytes: u64,
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
    /// most `max_size` bytes and intact. A corrupt file is removed. Their
    /// size is [`held::charge`]d to the load they are for before they are
    /// read (none are read past its budget).
    pub async fn read(&self, digest_: &str, max_size: u64) -> Option<Vec<u8>> {
        let path = self.blob_path(digest_)?;
        let len = tokio::fs::metadata(&path).await.ok()?.len();
        if let Err(e) = held::charge(len.min(max_size)) {
            tracing::debug!(file = %path.display(), "not reading a cached blob now: {e}");
            return None;
        }
        let bytes = match read_regular(&path, max_size).await {
            Ok(bytes) => bytes,
            Err(e) if e.not_found() => return None,
            Err(e) => {
                count_disk_refusal(DiskRefusal::CachedComponent);
                tracing::warn!(file = %path.display(), "ignoring a cached blob: {e}");
                return None;
            }
        };
        if digest(&bytes) != digest_ {
            count_disk_refusal(DiskRefusal::CachedComponent);
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
        let refused = || {
            count_disk_refusal(DiskRefusal::CachedRecord);
            None
        };
        let bytes = match read_regular(&path, MAX_RECORD).await {
            Ok(bytes) => bytes,
            Err(e) if e.not_found() => return None,
            Err(_) => return refused(),
        };
        let Ok(record) = serde_json::from_slice::<Resolution>(&bytes) else {
            return refused();
        };
        // Digests name files: only well-formed ones are believed.
        if record.reference == reference && is_sha256(&record.manifest) && is_sha256(&record.layer)
        {
            Some(record)
        } else {
            refused()
        }
    }

    /// Records what `resolution.reference` resolved to.
    pub async fn remember(&self, resolution: &Resolution) -> std::io::Result<()> {
        let path = self.record_path(&resolution.reference);
        let bytes = serde_json::to_vec_pretty(resolution).map_err(std::io::Error::other)?;
        write_atomically(&path, &bytes).await
    }

    /// Removes what no source needs any more, and keeps the rest:
    ///
    /// - a record of a tag (`…:TAG`, one per reference, updated in place)
    ///   is kept when its component is in `in_use` or when it is one of the
    ///   `keep` newest tag records: the tags of deleted objects (whose
    ///   authors choose them) go, with what only they named;
    /// - a record of a pinned manifest (`…@sha256:…`, written for every
    ///   version pulled) is kept when its component is in `in_use`, when a
    ///   tag record names the same manifest, or when it is one of the
    ///   `keep` newest; the others are removed;
    /// - a blob is kept when a kept record names it, when it is in `in_use`
    ///   (the digests of the components running now: URL sources' blobs
    ///   have no record), or when it is one of the `keep` newest of the
    ///   rest; the others are removed.
    ///
    /// Files changed within the last 10 minutes are never removed (a fetch
    /// in flight, another host sharing the directory), nor are unreadable
    /// records; temporary files older than that are (a crash's leftovers).
    pub async fn prune(&self, in_use: &BTreeSet<String>, keep: usize) -> std::io::Result<Pruned> {
        let now = SystemTime::now();
        let recent = |modified: SystemTime| {
            now.duration_since(modified)
                .map_or(true, |age| age < PRUNE_GRACE)
        };
        let mut pruned = Pruned::default();
        // Records: (path, modified, resolution).
        let mut tags = Vec::new();
        let mut pinned = Vec::new();
        for (path, modified, len) in files(&self.dir.join("refs")).await? {
            if is_temporary(&path) {
                if !recent(modified) && tokio::fs::remove_file(&path).await.is_ok() {
                    pruned.records += 1;
                }
                continue;
            }
            if len > MAX_RECORD {
                continue;
            }
            let Ok(bytes) = read_regular(&path, MAX_RECORD).await else {
                continue;
            };
            let Ok(record) = serde_json::from_slice::<Resolution>(&bytes) else {
                continue;
            };
            if record.reference.contains('@') {
                pinned.push((path, modified, record));
            } else {
                tags.push((path, modified, record));
            }
        }
        tags.sort_by_key(|t| std::cmp::Reverse(t.1));
        let mut kept_tags = Vec::new();
        for (i, (path, modified, record)) in tags.into_iter().enumerate() {
            if i < keep || in_use.contains(&record.layer) || recent(modified) {
                kept_tags.push(record);
            } else if tokio::fs::remove_file(&path).await.is_ok() {
                pruned.records += 1;
            }
        }
        let tagged: BTreeSet<&str> = kept_tags.iter().map(|r| r.manifest.as_str()).collect();
        let mut needed: BTreeSet<String> = kept_tags
            .iter()
            .flat_map(|r| [r.layer.clone(), r.manifest.clone()])
            .collect();
        pinned.sort_by_key(|p| std::cmp::Reverse(p.1));
        for (i, (path, modified, record)) in pinned.iter().enumerate() {
            let wanted = i < keep
                || in_use.contains(&record.layer)
                || tagged.contains(record.manifest.as_str())
                || recent(*modified);
            if wanted {
                needed.insert(record.layer.clone());
                needed.insert(record.manifest.clone());
            } else if tokio::fs::remove_file(path).await.is_ok() {
                pruned.records += 1;
            }
        }
        let mut others = Vec::new();
        for (path, modified, len) in files(&self.dir.join("blobs").join("sha256")).await? {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if is_temporary(&path) {
                if !recent(modified) && tokio::fs::remove_file(&path).await.is_ok() {
                    pruned.blobs += 1;
                    pruned.bytes += len;
                }
                continue;
            }
            let digest = format!("sha256:{name}");
            if !is_sha256(&digest) {
                continue;
            }
            if !needed.contains(&digest) && !in_use.contains(&digest) && !recent(modified) {
                others.push((path, modified, len));
            }
        }
        others.sort_by_key(|o| std::cmp::Reverse(o.1));
        for (path, _, len) in others.into_iter().skip(keep) {
            if tokio::fs::remove_file(&path).await.is_ok() {
                pruned.blobs += 1;
                pruned.bytes += len;
            }
        }
        Ok(pruned)
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

/// The regular files in `dir` (none if it does not exist): path, last
/// change, size.
async fn files(dir: &Path) -> std::io::Result<Vec<(PathBuf, SystemTime, u64)>> {
    let mut entries = match tokio::fs::read_dir(dir).await {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    while let Some(entry) = entries.next_entry().await? {
        let Ok(meta) = entry.metadata().await else {
            continue;
        };
        if meta.is_file() {
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            found.push((entry.path(), modified, meta.len()));
        }
    }
    Ok(found)
}

/// A file [`write_atomically`] has not renamed into place (yet).
fn is_temporary(path: &Path) -> bool {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    name.starts_with('.') && name.ends_with(".tmp")
}

/// `sha256:` and 64 lowercase hex digits.
pub(crate) fn is_sha256(d: &str) -> bool {
    d.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Writes `bytes` next to `path` and renames the file into place. The
/// temporary file is created new and never through a link, so a link
/// planted at its name cannot have the host overwrite another file.
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
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .await?;
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

/// Now, RFC 3339 in whole seconds.
pub(crate) fn now_rfc3339() -> String {
    wasmctrl_apimachinery::time::format_seconds(SystemTime::now())
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
        // Corrupted on disk: detected, removed, counted.
        let path = cache.blob_path(&d).unwrap();
        std::fs::write(&path, b"tampered").unwrap();
        let before = crate::control::metrics::disk_refusals(DiskRefusal::CachedComponent);
        assert_eq!(cache.read(&d, 1 << 20).await, None);
        assert!(!path.exists());
        assert!(crate::control::metrics::disk_refusals(DiskRefusal::CachedComponent) > before);
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

    /// Makes `path` look `age` old.
    fn age(path: &Path, age: Duration) {
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(SystemTime::now() - age).unwrap();
    }

    #[tokio::test]
    async fn prune_keeps_what_sources_need_and_the_newest_others() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::new(dir.path().to_path_buf());
        let hour = Duration::from_secs(3600);
        // Seven versions pulled through one tag, oldest first; the tag now
        // names v6. v0 is also pinned by a configured source and running.
        let mut versions = Vec::new();
        for i in 0..7u64 {
            let bytes = format!("component v{i}").into_bytes();
            cache.write(&bytes).await.unwrap();
            let layer = digest(&bytes);
            let manifest = digest(format!("manifest v{i}").as_bytes());
            let pinned = Resolution {
                reference: format!("r.example/p@{manifest}"),
                manifest: manifest.clone(),
                layer: layer.clone(),
                resolved_at: now_rfc3339(),
            };
            cache.remember(&pinned).await.unwrap();
            let old = hour * (10 - i as u32);
            age(&cache.blob_path(&layer).unwrap(), old);
            age(&cache.record_path(&pinned.reference), old);
            versions.push((layer, manifest, pinned.reference));
        }
        let tag = Resolution {
            reference: "r.example/p:live".into(),
            manifest: versions[6].1.clone(),
            layer: versions[6].0.clone(),
            resolved_at: now_rfc3339(),
        };
        cache.remember(&tag).await.unwrap();
        // A URL source's blob (no record), running now; one nobody needs; a
        // fresh one (a fetch in flight); a crash's temporary file.
        let url_blob = b"url component".to_vec();
        cache.write(&url_blob).await.unwrap();
        age(&cache.blob_path(&digest(&url_blob)).unwrap(), hour * 20);
        let stale = b"stale".to_vec();
        cache.write(&stale).await.unwrap();
        age(&cache.blob_path(&digest(&stale)).unwrap(), hour * 30);
        let fresh = b"fresh".to_vec();
        cache.write(&fresh).await.unwrap();
        let tmp = dir.path().join("blobs/sha256/.x.1-2.tmp");
        std::fs::write(&tmp, b"half").unwrap();
        age(&tmp, hour);

        // Tags of objects since deleted, each naming a component of its
        // own, newest first.
        let mut gone = Vec::new();
        for i in 0..3u32 {
            let bytes = format!("deleted {i}").into_bytes();
            cache.write(&bytes).await.unwrap();
            let record = Resolution {
                reference: format!("evil.example/x:t{i}"),
                manifest: digest(format!("deleted manifest {i}").as_bytes()),
                layer: digest(&bytes),
                resolved_at: now_rfc3339(),
            };
            cache.remember(&record).await.unwrap();
            age(&cache.record_path(&record.reference), hour * (40 + i));
            age(&cache.blob_path(&record.layer).unwrap(), hour * (40 + i));
            gone.push(record);
        }

        let in_use: BTreeSet<String> = [versions[0].0.clone(), digest(&url_blob)].into();
        let pruned = cache.prune(&in_use, 2).await.unwrap();

        let blob = |d: &str| cache.blob_path(d).unwrap().exists();
        let record = |r: &str| cache.record_path(r).exists();
        // Kept whole: v0 (running), v5 and v6 (the 2 newest pinned; v6 is
        // also the tag's). v3 and v4 lose their records, but their blobs
        // are the 2 newest of those nobody needs; v1 and v2 go whole.
        for i in [0, 5, 6] {
            assert!(blob(&versions[i].0) && record(&versions[i].2), "v{i}");
        }
        for i in [3, 4] {
            assert!(blob(&versions[i].0) && !record(&versions[i].2), "v{i}");
        }
        for i in [1, 2] {
            assert!(!blob(&versions[i].0) && !record(&versions[i].2), "v{i}");
        }
        assert!(blob(&digest(&url_blob)) && blob(&digest(&fresh)));
        assert!(record(&tag.reference));
        assert!(!blob(&digest(&stale)) && !tmp.exists());
        // Of the deleted objects' tags, the newest is one of the 2 newest tag
        // records and stays; the older two go, and so do their components
        // (older than the 2 newest of those nobody needs).
        assert!(record(&gone[0].reference) && blob(&gone[0].layer));
        for old in &gone[1..] {
            assert!(!record(&old.reference) && !blob(&old.layer), "{old:?}");
        }
        assert_eq!(
            pruned,
            Pruned {
                records: 6,
                blobs: 6,
                bytes: (2 * b"component v1".len()
                    + 2 * b"deleted 1".len()
                    + stale.len()
                    + b"half".len()) as u64,
            }
        );
        // Nothing more goes the second time.
        assert_eq!(cache.prune(&in_use, 2).await.unwrap(), Pruned::default());
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
        // A record over its bound, or one naming a malformed digest, is
        // not believed, and counted.
        let path = cache.record_path(&r.reference);
        let before = crate::control::metrics::disk_refusals(DiskRefusal::CachedRecord);
        std::fs::write(&path, vec![b' '; (MAX_RECORD + 1) as usize]).unwrap();
        assert_eq!(cache.resolution(&r.reference).await, None);
        let forged = serde_json::json!({
            "reference": r.reference, "manifest": "sha256:../../x", "layer": r.layer,
            "resolvedAt": r.resolved_at,
        });
        std::fs::write(&path, forged.to_string()).unwrap();
        assert_eq!(cache.resolution(&r.reference).await, None);
        assert!(crate::control::metrics::disk_refusals(DiskRefusal::CachedRecord) >= before + 2);
    }
}
