//! Compiled functions kept on disk, so that a host started again (a
//! `wasmctrl dev` restarted after an edit, a second plugin of the same
//! language next week) compiles only the functions it has not compiled
//! before. An interpreter's thousands of functions are the same from build
//! to build, while the component around them is not byte for byte (neither
//! componentize-py nor componentize-js writes the same bytes twice), so the
//! component-level artifacts of `compiled.rs` miss where these hit.
//!
//! # Layout
//! `<cacheDir>/functions/<engine hash>/` holds packs: each process appends
//! the functions it compiles to one pack of its own (`<pid>-<random>.pack`,
//! mode 0600), as records of `key length (u32 LE) · value length (u32 LE) ·
//! key · value · HMAC-SHA256`. The first lookup reads every pack's record
//! headers into an index; a lookup reads its record and checks its MAC.
//!
//! # A function is trusted only with its MAC
//! A value is machine code wasmtime will run, so it is used only if its
//! HMAC — keyed by the cache directory's `.key`, over the engine hash, the
//! key and the value — matches; otherwise the function is compiled and the
//! refusal counted (`wasmctrl_disk_refusals_total{what="compiledFunction"}`).
//! The directories must be writable by the host's user alone, as for the
//! artifacts (docs/SECURITY.md).
//!
//! # Bounded
//! The packs together hold at most the function cache's byte ceiling
//! (`runtime.functionCache`): a process whose next function would pass it
//! first removes the least recently used other packs (a pack's modified
//! time is when it was last written or read from), down to half of the
//! room its own leaves, and stops keeping functions once its own pack
//! alone would pass it. At most [`MAX_PACKS`] packs are kept; a record
//! over [`MAX_VALUE`] is neither written nor read.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Write as _};
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use hmac::Mac as _;

use crate::control::metrics::{DiskRefusal, count_disk_refusal};
use crate::meta::files;
use crate::sandbox::compiled::{HmacSha256, create_private_dir, mac_key};

/// Packs kept at most; a process finding this many removes the least
/// recently used half.
pub(super) const MAX_PACKS: usize = 64;
/// The largest compiled function written or read back (an interpreter's
/// dispatch loop compiles to a few hundred KiB).
pub(super) const MAX_VALUE: usize = 16 << 20;
/// Cranelift's keys are SHA-256 hashes; anything longer is not one.
const MAX_KEY: usize = 64;
const HEADER: usize = 8;
const TAG: usize = 32;

/// The packs of one engine's compiled functions under a cache directory.
pub(super) struct Packs {
    /// `cacheDir`: holds the MAC key.
    root: PathBuf,
    /// `cacheDir/functions/<engine hash>`.
    dir: PathBuf,
    engine: String,
    max_bytes: u64,
    key: OnceLock<Option<Vec<u8>>>,
    index: OnceLock<Option<Index>>,
    writer: Mutex<Writer>,
    /// Whether a refused record was logged: a damaged pack refuses every
    /// record in it, and one line says so (the metric counts them all).
    said_refused: AtomicBool,
    /// Functions read from the packs and written to them by this process.
    #[cfg(test)]
    pub(super) counts: Counts,
}

#[cfg(test)]
#[derive(Default)]
pub(super) struct Counts {
    pub(super) read: std::sync::atomic::AtomicUsize,
    pub(super) written: std::sync::atomic::AtomicUsize,
}

/// Where each function of the packs present at the first lookup is.
struct Index {
    packs: Vec<Pack>,
    at: HashMap<Vec<u8>, Record>,
}

/// A pack open for reading.
struct Pack {
    file: File,
    /// Whether this process marked it used (its modified time set to
    /// now), so that the packs removed for room are those least recently
    /// used, not the oldest written: the pack holding an interpreter's
    /// functions is written once and read by every start.
    used: AtomicBool,
}

#[derive(Clone, Copy)]
struct Record {
    pack: usize,
    offset: u64,
    key_len: usize,
    value_len: usize,
}

impl Record {
    fn len(self) -> usize {
        HEADER + self.key_len + self.value_len + TAG
    }
}

enum Writer {
    NotStarted,
    Writing {
        file: File,
        path: PathBuf,
        written: u64,
        /// The other packs' bytes when last listed.
        others: u64,
    },
    /// Full, or the directory cannot be written: nothing more is written.
    Stopped,
}

impl Packs {
    pub(super) fn new(root: &Path, engine: &str, max_bytes: u64) -> Self {
        Self {
            root: root.to_path_buf(),
            dir: root.join("functions").join(engine),
            engine: engine.to_string(),
            max_bytes,
            key: OnceLock::new(),
            index: OnceLock::new(),
            writer: Mutex::new(Writer::NotStarted),
            said_refused: AtomicBool::new(false),
            #[cfg(test)]
            counts: Counts::default(),
        }
    }

    /// The compiled function of `key` from the packs, if one is there and
    /// its MAC checks out.
    pub(super) fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let index = self.index.get_or_init(|| self.read_index()).as_ref()?;
        let record = *index.at.get(key)?;
        let mac = self.key()?;
        let mut bytes = vec![0; record.len()];
        let pack = &index.packs[record.pack];
        let read = pack.file.read_exact_at(&mut bytes, record.offset);
        match read.ok().and_then(|()| self.verified(&mac, key, &bytes)) {
            Some(value) => {
                if !pack.used.swap(true, Ordering::Relaxed) {
                    let _ = pack.file.set_modified(std::time::SystemTime::now());
                }
                #[cfg(test)]
                self.counts.read.fetch_add(1, Ordering::Relaxed);
                Some(value)
            }
            None => {
                count_disk_refusal(DiskRefusal::CompiledFunction);
                if !self.said_refused.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        dir = %self.dir.display(),
                        "a compiled function on disk does not check out (corrupted, replaced or from another host); compiling it, and any other that does not"
                    );
                }
                None
            }
        }
    }

    /// Appends a function this process compiled to its pack, while the
    /// packs have room.
    pub(super) fn insert(&self, key: &[u8], value: &[u8]) {
        if key.len() > MAX_KEY || value.len() > MAX_VALUE {
            return;
        }
        let mut writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(*writer, Writer::NotStarted) {
            *writer = self.start_pack();
        }
        let Writer::Writing {
            file,
            path,
            written,
            others,
        } = &mut *writer
        else {
            return;
        };
        let Some(mac) = self.key() else {
            *writer = Writer::Stopped;
            return;
        };
        let record = self.record(&mac, key, value);
        let len = record.len() as u64;
        // The directory is listed again only when the last listing says
        // this would not fit: another process may have removed packs since.
        if *written + len + *others > self.max_bytes
            && let Some(left) = self.make_room(path, *written + len)
        {
            *others = left;
        }
        if *written + len + *others > self.max_bytes {
            tracing::debug!(dir = %self.dir.display(), "this process's compiled functions fill runtime.functionCache on disk; no more are kept");
            *writer = Writer::Stopped;
            return;
        }
        if let Err(e) = file.write_all(&record) {
            tracing::warn!(dir = %self.dir.display(), "cannot keep compiled functions on disk: {e}");
            *writer = Writer::Stopped;
            return;
        }
        *written += len;
        #[cfg(test)]
        self.counts.written.fetch_add(1, Ordering::Relaxed);
    }

    fn key(&self) -> Option<Vec<u8>> {
        self.key
            .get_or_init(|| match mac_key(&self.root) {
                Ok(k) => Some(k),
                Err(e) => {
                    tracing::warn!(dir = %self.root.display(), "no cache key, compiled functions are not kept on disk: {e}");
                    None
                }
            })
            .clone()
    }

    fn tag(&self, mac: &[u8], header: &[u8], key: &[u8], value: &[u8]) -> HmacSha256 {
        let mut tag = HmacSha256::new_from_slice(mac).expect("HMAC takes any key length");
        tag.update(b"wasmctrl compiled function\0");
        tag.update(self.engine.as_bytes());
        tag.update(header);
        tag.update(key);
        tag.update(value);
        tag
    }

    fn record(&self, mac: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut record = Vec::with_capacity(HEADER + key.len() + value.len() + TAG);
        record.extend_from_slice(&(key.len() as u32).to_le_bytes());
        record.extend_from_slice(&(value.len() as u32).to_le_bytes());
        let tag = self.tag(mac, &record[..HEADER], key, value);
        record.extend_from_slice(key);
        record.extend_from_slice(value);
        record.extend_from_slice(&tag.finalize().into_bytes());
        record
    }

    /// The value of `record` (a whole record read back) if it is `key`'s
    /// and its MAC matches.
    fn verified(&self, mac: &[u8], key: &[u8], record: &[u8]) -> Option<Vec<u8>> {
        let (header, rest) = record.split_at_checked(HEADER)?;
        let key_len = u32::from_le_bytes(header[..4].try_into().ok()?) as usize;
        let value_len = u32::from_le_bytes(header[4..].try_into().ok()?) as usize;
        if key_len != key.len() || rest.len() != key_len + value_len + TAG {
            return None;
        }
        let (stored_key, rest) = rest.split_at(key_len);
        let (value, tag) = rest.split_at(value_len);
        if stored_key != key {
            return None;
        }
        self.tag(mac, header, key, value).verify_slice(tag).ok()?;
        Some(value.to_vec())
    }

    /// The index of the packs there now, or None where the directory is
    /// missing or others could write it.
    fn read_index(&self) -> Option<Index> {
        for dir in [&self.root, &self.dir] {
            if let Err(e) = files::private_dir(dir) {
                if dir.exists() {
                    count_disk_refusal(DiskRefusal::CompiledFunction);
                    tracing::warn!(dir = %dir.display(), "compiled functions on disk are not used: {e}");
                }
                return None;
            }
        }
        let mut index = Index {
            packs: Vec::new(),
            at: HashMap::new(),
        };
        let mut packs = self.packs();
        // The newest first: a function in two packs is read from the newer.
        packs.reverse();
        for (_, _, path) in packs.into_iter().take(MAX_PACKS) {
            let Ok(file) = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(&path)
            else {
                continue;
            };
            let Ok(meta) = file.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            let pack = index.packs.len();
            let mut reader = BufReader::with_capacity(64 << 10, &file);
            let mut offset = 0u64;
            // A pack another process is still writing ends in a partial
            // record: reading stops at the first that does not fit.
            while offset + (HEADER as u64) <= meta.len() {
                let mut header = [0u8; HEADER];
                if reader.read_exact(&mut header).is_err() {
                    break;
                }
                let key_len = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
                let value_len = u32::from_le_bytes(header[4..].try_into().unwrap()) as usize;
                let record = Record {
                    pack,
                    offset,
                    key_len,
                    value_len,
                };
                if key_len > MAX_KEY
                    || value_len > MAX_VALUE
                    || offset + record.len() as u64 > meta.len()
                {
                    break;
                }
                let mut key = vec![0u8; key_len];
                if reader.read_exact(&mut key).is_err()
                    || reader.seek_relative((value_len + TAG) as i64).is_err()
                {
                    break;
                }
                index.at.entry(key).or_insert(record);
                offset += record.len() as u64;
            }
            drop(reader);
            index.packs.push(Pack {
                file,
                used: AtomicBool::new(false),
            });
        }
        Some(index)
    }

    /// The packs in the directory, least recently used first: (modified,
    /// bytes, path).
    fn packs(&self) -> Vec<(std::time::SystemTime, u64, PathBuf)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut packs: Vec<_> = entries
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "pack"))
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                meta.is_file()
                    .then(|| Some((meta.modified().ok()?, meta.len(), e.path())))?
            })
            .collect();
        packs.sort();
        packs
    }

    /// Makes room for this process's pack (`ours`) to grow to `needed`
    /// bytes within the ceiling, removing the least recently used other
    /// packs (down to half of what is left beside ours, so that this is
    /// rare) if it must; the other packs' bytes then, None if `needed`
    /// alone is too many.
    fn make_room(&self, ours: &Path, needed: u64) -> Option<u64> {
        if needed > self.max_bytes {
            return None;
        }
        let mut others: Vec<_> = self
            .packs()
            .into_iter()
            .filter(|(_, _, p)| p != ours)
            .collect();
        let mut total: u64 = others.iter().map(|(_, bytes, _)| bytes).sum();
        if needed + total <= self.max_bytes {
            return Some(total);
        }
        let keep = (self.max_bytes - needed) / 2;
        while total > keep && !others.is_empty() {
            let (_, bytes, least_used) = others.remove(0);
            let _ = std::fs::remove_file(&least_used);
            total -= bytes;
        }
        tracing::debug!(dir = %self.dir.display(), "removed the least recently used packs of compiled functions for new ones");
        Some(total)
    }

    /// Creates this process's pack, first removing the least recently used
    /// packs when there are [`MAX_PACKS`].
    fn start_pack(&self) -> Writer {
        if let Err(e) = create_private_dir(&self.dir)
            .and_then(|()| files::private_dir(&self.root))
            .and_then(|()| files::private_dir(&self.dir))
        {
            tracing::warn!(dir = %self.dir.display(), "compiled functions are not kept on disk: {e}");
            return Writer::Stopped;
        }
        let mut packs = self.packs();
        if packs.len() >= MAX_PACKS {
            for (_, _, least_used) in packs.drain(..packs.len() - MAX_PACKS / 2) {
                let _ = std::fs::remove_file(least_used);
            }
        }
        let others = packs.iter().map(|(_, bytes, _)| bytes).sum();
        let name = format!("{}-{:016x}.pack", std::process::id(), rand::random::<u64>());
        let path = self.dir.join(name);
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path);
        match file {
            Ok(file) => Writer::Writing {
                file,
                path,
                written: 0,
                others,
            },
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), "compiled functions are not kept on disk: {e}");
                Writer::Stopped
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn private_root() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        root
    }

    fn pack_files(packs: &Packs) -> Vec<PathBuf> {
        packs.packs().into_iter().map(|(_, _, p)| p).collect()
    }

    /// The pack of a process of `engine` that kept two functions, `k1`
    /// and `k2`, under `root`.
    fn two_kept(root: &Path, engine: &str) -> PathBuf {
        let first = Packs::new(root, engine, 1 << 20);
        first.insert(b"k1", b"code one");
        first.insert(b"k2", b"code two");
        pack_files(&first).remove(0)
    }

    #[test]
    fn what_one_process_kept_the_next_reads_and_another_engine_does_not() {
        let root = private_root();
        let pack = two_kept(root.path(), "engine-a");
        let next = Packs::new(root.path(), "engine-a", 1 << 20);
        assert_eq!(next.get(b"k1").as_deref(), Some(&b"code one"[..]));
        assert_eq!(next.get(b"k2").as_deref(), Some(&b"code two"[..]));
        assert_eq!(next.get(b"k3"), None);
        let other = Packs::new(root.path(), "engine-b", 1 << 20);
        assert_eq!(other.get(b"k1"), None, "another engine's code is not used");
        let mode = std::fs::metadata(&pack).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_changed_value_or_a_pack_moved_to_another_engine_is_refused() {
        let root = private_root();
        let pack = two_kept(root.path(), "engine-a");
        let mut bytes = std::fs::read(&pack).unwrap();
        let at = bytes.windows(3).position(|w| w == b"one").unwrap();
        bytes[at] = b'X';
        std::fs::write(&pack, &bytes).unwrap();
        let refused = || crate::control::metrics::disk_refusals(DiskRefusal::CompiledFunction);
        let before = refused();
        let next = Packs::new(root.path(), "engine-a", 1 << 20);
        assert_eq!(next.get(b"k1"), None, "a changed value is compiled again");
        assert!(refused() > before, "the refusal is counted");
        assert_eq!(next.get(b"k2").as_deref(), Some(&b"code two"[..]));
        // The same pack under another engine's name: its MACs name engine-a.
        let moved = root.path().join("functions").join("engine-b");
        std::fs::create_dir_all(&moved).unwrap();
        std::fs::set_permissions(&moved, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::copy(&pack, moved.join("1-0.pack")).unwrap();
        let other = Packs::new(root.path(), "engine-b", 1 << 20);
        assert_eq!(other.get(b"k2"), None);
    }

    #[test]
    fn a_partly_written_pack_keeps_its_whole_records() {
        let root = private_root();
        let pack = two_kept(root.path(), "e");
        let len = std::fs::metadata(&pack).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&pack)
            .unwrap()
            .set_len(len - 5)
            .unwrap();
        let next = Packs::new(root.path(), "e", 1 << 20);
        assert_eq!(next.get(b"k1").as_deref(), Some(&b"code one"[..]));
        assert_eq!(next.get(b"k2"), None);
    }

    #[test]
    fn the_packs_stay_within_the_ceiling_and_the_least_used_go_first() {
        let root = private_root();
        let value = vec![7u8; 300];
        let written = |p: &Packs| p.counts.written.load(Ordering::Relaxed);
        let size = |p: &Packs| -> u64 { p.packs().iter().map(|(_, b, _)| b).sum() };
        // Each record is 8 + 2 + 300 + 32 = 342 bytes: two fit in 1000.
        let first = Packs::new(root.path(), "e", 1000);
        first.insert(b"a1", &value);
        first.insert(b"a2", &value);
        first.insert(b"a3", &value);
        assert_eq!(
            written(&first),
            2,
            "its own pack alone would pass the ceiling"
        );
        assert!(size(&first) <= 1000);
        let oldest = pack_files(&first);
        // The next process needs room: the least recently used pack goes.
        let second = Packs::new(root.path(), "e", 1000);
        second.insert(b"b1", &value);
        second.insert(b"b2", &value);
        assert_eq!(written(&second), 2);
        assert!(!oldest[0].exists(), "the oldest pack is removed");
        assert!(size(&second) <= 1000);
        let third = Packs::new(root.path(), "e", 1000);
        assert_eq!(third.get(b"a1"), None);
        assert_eq!(third.get(b"b1").as_deref(), Some(&value[..]));
        // A function larger than the ceiling is never written.
        third.insert(b"c1", &[0u8; 1000]);
        assert_eq!(written(&third), 0);
        assert_eq!(third.get(b"b2").as_deref(), Some(&value[..]));
    }

    #[test]
    fn a_pack_read_from_is_kept_over_one_written_later_but_unused() {
        let root = private_root();
        let value = vec![7u8; 50];
        // Records of 8 + 2 + 50 + 32 = 92 bytes.
        let first = Packs::new(root.path(), "e", 1000);
        first.insert(b"a1", &value);
        first.insert(b"a2", &value);
        let used = pack_files(&first).remove(0);
        let second = Packs::new(root.path(), "e", 1000);
        for key in [b"b1", b"b2", b"b3"] {
            second.insert(key, &value);
        }
        let unused = pack_files(&second)
            .into_iter()
            .find(|p| *p != used)
            .unwrap();
        let ago = |secs| std::time::SystemTime::now() - std::time::Duration::from_secs(secs);
        let set = |path: &Path, at| File::open(path).unwrap().set_modified(at).unwrap();
        set(&used, ago(100));
        set(&unused, ago(50));
        // A third process reads from the older pack, then needs room.
        let third = Packs::new(root.path(), "e", 1000);
        assert_eq!(third.get(b"a1").as_deref(), Some(&value[..]));
        for key in [b"c1", b"c2", b"c3", b"c4", b"c5", b"c6"] {
            third.insert(key, &value);
        }
        assert!(used.exists(), "the pack read from stays");
        assert!(!unused.exists(), "the pack not read from goes");
        let next = Packs::new(root.path(), "e", 1000);
        assert_eq!(next.get(b"a2").as_deref(), Some(&value[..]));
        assert_eq!(next.get(b"c6").as_deref(), Some(&value[..]));
        assert_eq!(next.get(b"b1"), None);
    }

    #[test]
    fn a_directory_others_can_write_is_not_read() {
        let root = private_root();
        let first = Packs::new(root.path(), "e", 1 << 20);
        first.insert(b"k1", b"code");
        std::fs::set_permissions(
            root.path().join("functions").join("e"),
            std::fs::Permissions::from_mode(0o777),
        )
        .unwrap();
        let next = Packs::new(root.path(), "e", 1 << 20);
        assert_eq!(next.get(b"k1"), None);
        next.insert(b"k2", b"code");
        assert_eq!(next.counts.written.load(Ordering::Relaxed), 0);
    }
}
