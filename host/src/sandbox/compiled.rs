//! Compiled components keyed by content digest: in memory for hot swaps and
//! repeated loads, on disk (precompiled artifacts) across restarts.
//!
//! # A compiled artifact is trusted only with its MAC
//! Deserializing a `.cwasm` runs its machine code, so a file in the cache
//! directory is loaded only if its HMAC-SHA256 — keyed by a random key the
//! host keeps in the directory (`.key`, mode 0600) — matches. A file that was
//! corrupted, truncated, swapped for another digest's artifact or copied from
//! another host's cache is recompiled instead. The key lives beside the
//! artifacts, so this guards against everything but a writer with the host's
//! own file access: the cache directory must be writable by the host alone
//! (docs/SECURITY.md).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use hmac::{Hmac, Mac};

use crate::control::metrics::DiskRefusal;
use crate::meta::files::{self, LocalReadError};
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
    /// Components of loaded plugins, by digest. Weak: a version no plugin
    /// holds any more is freed (a long run of hot swaps does not grow the
    /// host); loading it again comes from disk.
    memory: Mutex<HashMap<String, Weak<Component>>>,
    /// Digests of loaded plugins (counted): their artifacts are never
    /// pruned, so an unloaded idle plugin can always come back.
    pinned: Arc<Mutex<HashMap<String, usize>>>,
    /// The unnamed copies of components mapped but not yet run, by digest:
    /// their cached pages are dropped once the first instance ran
    /// ([`ComponentCache::settle`]).
    unsettled: Mutex<HashMap<String, std::fs::File>>,
}

/// A loaded plugin's hold on its on-disk artifact.
pub(crate) struct Pin {
    pinned: Arc<Mutex<HashMap<String, usize>>>,
    digest: String,
}

impl Drop for Pin {
    fn drop(&mut self) {
        let mut pinned = self.pinned.lock().unwrap();
        if let Some(n) = pinned.get_mut(&self.digest) {
            *n -= 1;
            if *n == 0 {
                pinned.remove(&self.digest);
            }
        }
    }
}

impl ComponentCache {
    pub(crate) fn new(engine: Engine, dir: Option<PathBuf>) -> Self {
        Self {
            engine_hash: engine_hash(&engine),
            engine,
            dir,
            memory: Mutex::new(HashMap::new()),
            pinned: Arc::default(),
            unsettled: Mutex::default(),
        }
    }

    /// Drops the page cache of `digest`'s mapped copy, once an instance of
    /// it ran. The first instance maps the copy's data segments into its
    /// memory, and that mapping's first fault reads ahead around it (the
    /// whole copy where a disk's readahead is large: 8 MiB on the machine
    /// of docs/BENCHMARKS.md); with the copy cached, every later fault in
    /// the code maps the 64 KiB around it. Dropped, only the pages that
    /// run come back. Pages mapped stay; nothing is lost (the copy is
    /// clean). Does nothing for a component not loaded from a copy.
    pub(crate) fn settle(&self, digest: &str) {
        let Some(copy) = self.unsettled.lock().unwrap().remove(digest) else {
            return;
        };
        #[cfg(target_os = "linux")]
        {
            let component = self
                .memory
                .lock()
                .unwrap()
                .get(digest)
                .and_then(Weak::upgrade);
            if let Some(component) = component {
                page_out(&component);
            }
            drop_cached_pages(&copy);
        }
        // Loading's transient allocations (the artifact read and checked,
        // the metadata call's instance) are freed by now.
        release_compile_garbage();
    }

    /// The compiled component for `bytes` (whose digest is `digest`).
    /// The plugin keeps the returned `Arc` for as long as it is loaded.
    pub(crate) fn get_or_compile(
        &self,
        digest: &str,
        bytes: &[u8],
    ) -> wasmtime::Result<(Arc<Component>, CacheHit)> {
        if let Some(found) = self.compiled_in_memory_or_on_disk(digest) {
            return Ok(found);
        }
        // A large (interpreted) guest takes seconds to compile: say so
        // before and after, so a start or a swap is not a silent wait.
        let large = bytes.len() >= LARGE_COMPONENT;
        let started = std::time::Instant::now();
        if large {
            tracing::info!(
                digest = short(digest),
                mib = bytes.len() >> 20,
                "compiling a component …"
            );
        }
        let component = Component::new(&self.engine, bytes);
        release_compile_garbage();
        let mut component = component?;
        if large {
            tracing::info!(
                digest = short(digest),
                seconds = format!("{:.1}", started.elapsed().as_secs_f64()),
                "compiled"
            );
        }
        if let Some(file) = self.file(digest) {
            match self.store(&file, &component) {
                Ok(bytes) => {
                    self.prune(&file);
                    // The compiled code is in anonymous memory, all of it
                    // resident: the stored artifact's copy maps only what runs.
                    match self.load_verified(digest, &file, &bytes) {
                        Ok(mapped) => component = mapped,
                        Err(e) => {
                            tracing::debug!(file = %file.display(), "keeping the compiled component in memory: {e:#}")
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(file = %file.display(), "cannot write compiled artifact: {e:#}")
                }
            }
        }
        Ok((self.remember(digest, component), CacheHit::Compiled))
    }

    /// The compiled component of `digest` from memory or disk, without the
    /// component's bytes to compile it from (an idle plugin waking up).
    pub(crate) fn get_compiled(&self, digest: &str) -> Result<(Arc<Component>, CacheHit), String> {
        self.compiled_in_memory_or_on_disk(digest)
            .ok_or_else(|| match self.file(digest) {
                Some(f) => format!("no usable compiled artifact {}", f.display()),
                None => "no compiled-artifact cache (runtime.cacheDir)".into(),
            })
    }

    /// Whether `digest`'s compiled artifact is on disk.
    pub(crate) fn has_artifact(&self, digest: &str) -> bool {
        self.file(digest).is_some_and(|f| f.exists())
    }

    /// Keeps `digest`'s artifact on disk (not pruned) until the pin drops.
    pub(crate) fn pin(&self, digest: &str) -> Pin {
        *self
            .pinned
            .lock()
            .unwrap()
            .entry(digest.to_string())
            .or_default() += 1;
        Pin {
            pinned: self.pinned.clone(),
            digest: digest.to_string(),
        }
    }

    fn file(&self, digest: &str) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| {
            d.join(format!(
                "{}-{}.cwasm",
                digest.trim_start_matches("sha256:"),
                self.engine_hash
            ))
        })
    }

    fn compiled_in_memory_or_on_disk(&self, digest: &str) -> Option<(Arc<Component>, CacheHit)> {
        if let Some(c) = self
            .memory
            .lock()
            .unwrap()
            .get(digest)
            .and_then(Weak::upgrade)
        {
            return Some((c, CacheHit::Memory));
        }
        let file = self.file(digest).filter(|f| f.exists())?;
        match self.read_verified(&file, digest) {
            Ok(bytes) => match self.load_verified(digest, &file, &bytes) {
                Ok(c) => return Some((self.remember(digest, c), CacheHit::Disk)),
                Err(e) => {
                    crate::control::metrics::count_disk_refusal(DiskRefusal::CompiledArtifact);
                    tracing::warn!(file = %file.display(), "ignoring unusable compiled artifact: {e:#}")
                }
            },
            Err(reason) => {
                crate::control::metrics::count_disk_refusal(DiskRefusal::CompiledArtifact);
                tracing::warn!(file = %file.display(), "not loading compiled artifact ({reason}); recompiling")
            }
        }
        None
    }

    /// Loads `bytes`, an artifact whose MAC was checked, from an unnamed
    /// copy of it beside `file` that only this process holds: wasmtime then
    /// maps the code from that file: its pages are file-backed, paged in
    /// as they run, clean and reclaimable under memory pressure, where
    /// anonymous memory is not. In memory if no such file can be made.
    fn load_verified(
        &self,
        digest: &str,
        file: &std::path::Path,
        bytes: &[u8],
    ) -> wasmtime::Result<Component> {
        #[cfg(target_os = "linux")]
        if let Some(dir) = file.parent() {
            match unnamed_copy(dir, bytes) {
                // SAFETY: the unnamed file holds `bytes`, which carry a
                // valid MAC under this host's key over (digest, engine
                // hash, content): what `serialize` of this engine
                // configuration wrote for this digest. It has no name, so
                // no other process can open it to change it (short of
                // /proc/<pid>/fd, open only to the host's own user, whom
                // the MAC does not guard against either: docs/SECURITY.md).
                Ok(copy) => {
                    let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&copy));
                    match unsafe { Component::deserialize_file(&self.engine, &path) } {
                        Ok(c) => {
                            page_in_only_what_runs(&c, &copy);
                            self.unsettled
                                .lock()
                                .unwrap()
                                .insert(digest.to_string(), copy);
                            return Ok(c);
                        }
                        Err(e) => tracing::debug!(
                            "cannot map the artifact's copy, loading it in memory: {e:#}"
                        ),
                    }
                }
                Err(e) => {
                    tracing::debug!(dir = %dir.display(), "cannot make an unnamed copy of the artifact, loading it in memory: {e}")
                }
            }
        }
        let _ = file;
        // SAFETY: as above, and `bytes` are in this process's memory, read
        // once, so nothing can change them between the check and the load.
        unsafe { Component::deserialize(&self.engine, bytes) }
    }

    fn remember(&self, digest: &str, component: Component) -> Arc<Component> {
        let component = Arc::new(component);
        let mut memory = self.memory.lock().unwrap();
        memory.retain(|_, w| w.strong_count() > 0);
        memory.insert(digest.to_string(), Arc::downgrade(&component));
        // A component dropped before it was settled (its load failed after
        // the compile: a wrong world, a missing export) lets its copy go
        // here, so failed loads cannot pile up descriptors and disk.
        self.unsettled
            .lock()
            .unwrap()
            .retain(|d, _| memory.contains_key(d));
        component
    }

    /// Digests whose compiled component is in memory (held by a plugin).
    pub(crate) fn resident(&self) -> usize {
        self.memory
            .lock()
            .unwrap()
            .values()
            .filter(|w| w.strong_count() > 0)
            .count()
    }

    /// Writes `component`'s artifact with its MAC to `file`; returns the
    /// artifact (without the MAC).
    fn store(&self, file: &std::path::Path, component: &Component) -> wasmtime::Result<Vec<u8>> {
        let mut bytes = component.serialize()?;
        let dir = file.parent().unwrap_or(std::path::Path::new("."));
        create_private_dir(dir)?;
        // What is stored where others can write would not be loaded.
        files::private_dir(dir).map_err(|e| {
            wasmtime::Error::msg(format!("the cache directory {}: {e}", dir.display()))
        })?;
        let digest = file_digest(file);
        let tag = self.mac(dir, &digest, &bytes)?;
        let len = bytes.len();
        bytes.extend_from_slice(&tag);
        // Write then rename, so a concurrent reader never sees a half-written file.
        let tmp = file.with_extension(format!("tmp{}", std::process::id()));
        write_private(&tmp, &bytes)?;
        std::fs::rename(&tmp, file)?;
        bytes.truncate(len);
        Ok(bytes)
    }

    /// The artifact's bytes if its trailing MAC is valid, and its directory
    /// writable by the host's user alone: the MAC's key lives there too,
    /// so whoever else could write it could forge an artifact.
    fn read_verified(&self, file: &std::path::Path, digest: &str) -> Result<Vec<u8>, String> {
        let dir = file.parent().unwrap_or(std::path::Path::new("."));
        files::private_dir(dir)
            .map_err(|e| format!("the cache directory {}: {e}", dir.display()))?;
        let mut bytes = files::read_regular_blocking(file, MAX_ARTIFACT_BYTES)
            .map_err(|e| format!("cannot read it: {e}"))?;
        if bytes.len() < MAC_LEN {
            return Err("truncated".into());
        }
        let tag = bytes.split_off(bytes.len() - MAC_LEN);
        let key = mac_key(dir).map_err(|e| format!("no cache key: {e}"))?;
        let mut mac = HmacSha256::new_from_slice(&key).expect("HMAC takes any key length");
        mac.update(digest.as_bytes());
        mac.update(self.engine_hash.as_bytes());
        mac.update(&bytes);
        mac.verify_slice(&tag).map_err(|_| {
            "its MAC does not match: corrupted, replaced or from another host".to_string()
        })?;
        Ok(bytes)
    }

    fn mac(&self, dir: &std::path::Path, digest: &str, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
        let key = mac_key(dir)?;
        let mut mac = HmacSha256::new_from_slice(&key).expect("HMAC takes any key length");
        mac.update(digest.as_bytes());
        mac.update(self.engine_hash.as_bytes());
        mac.update(bytes);
        Ok(mac.finalize().into_bytes().to_vec())
    }
}

/// The host's MAC key in the cache directory `dir`, created (32 random
/// bytes, mode 0600) on first use: it signs the compiled artifacts and the
/// compiled functions kept there (`function_cache`).
pub(super) fn mac_key(dir: &std::path::Path) -> std::io::Result<Vec<u8>> {
    let path = dir.join(".key");
    let not_a_key =
        || std::io::Error::other(format!("{} is not a {KEY_LEN}-byte key", path.display()));
    match files::read_regular_blocking(&path, KEY_LEN as u64) {
        Ok(k) if k.len() == KEY_LEN => return Ok(k),
        Ok(_) | Err(LocalReadError::TooLarge { .. }) => return Err(not_a_key()),
        Err(e) if e.not_found() => {}
        Err(LocalReadError::Io(e)) => return Err(e),
        Err(e) => return Err(std::io::Error::other(format!("{}: {e}", path.display()))),
    }
    create_private_dir(dir)?;
    let mut key = vec![0u8; KEY_LEN];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut key)?;
    let tmp = dir.join(format!(".key.tmp{}", std::process::id()));
    write_private(&tmp, &key)?;
    // Another host process may have raced us: the first rename wins and
    // everyone uses the key that is there afterwards.
    if std::fs::hard_link(&tmp, &path).is_err() {
        let _ = std::fs::remove_file(&tmp);
        return match files::read_regular_blocking(&path, KEY_LEN as u64) {
            Ok(k) if k.len() == KEY_LEN => Ok(k),
            _ => Err(not_a_key()),
        };
    }
    let _ = std::fs::remove_file(&tmp);
    Ok(key)
}

/// What distinguishes the code of engines with other settings (fuel,
/// version): part of every cached artifact's name and MAC.
pub(super) fn engine_hash(engine: &Engine) -> String {
    let mut h = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    format!("{:016x}", h.finish())
}

pub(super) type HmacSha256 = Hmac<Sha256>;
const MAC_LEN: usize = 32;
const KEY_LEN: usize = 32;
/// The largest compiled artifact read back: an interpreter's component
/// compiles to tens of MiB, and a path may name a device or a FIFO.
const MAX_ARTIFACT_BYTES: u64 = 1 << 30;

/// The digest part of an artifact's file name (`<hex>-<engine>.cwasm`).
fn file_digest(file: &std::path::Path) -> String {
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    format!("sha256:{}", name.split('-').next().unwrap_or_default())
}

pub(super) fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Writes a new file at `path` (mode 0600), never through a link: what is
/// there already (a file a process that died left, or a planted link) is
/// removed first, and the file is created exclusively.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Compiled artifacts kept on disk; older ones are removed.
const KEEP_ON_DISK: usize = 64;

impl ComponentCache {
    /// Removes all but the [`KEEP_ON_DISK`] most recently written artifacts
    /// beside `written` (just written), never `written` itself nor a pinned
    /// one (a loaded plugin's): a host that swaps versions for weeks keeps a
    /// bounded cache, and a plugin that unloads while idle finds its
    /// artifact again (a load pins its artifact before writing it, so the
    /// prune of a load running beside it spares it).
    fn prune(&self, written: &std::path::Path) {
        let dir = written.parent().unwrap_or(std::path::Path::new("."));
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let pinned = self.pinned.lock().unwrap().clone();
        let mut artifacts: Vec<(std::time::SystemTime, PathBuf)> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
            .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
            .collect();
        if artifacts.len() <= KEEP_ON_DISK {
            return;
        }
        artifacts.sort();
        let excess = artifacts.len() - KEEP_ON_DISK;
        for (_, old) in artifacts
            .iter()
            .filter(|(_, p)| p != written && !pinned.contains_key(&file_digest(p)))
            .take(excess)
        {
            let _ = std::fs::remove_file(old);
        }
    }
}

/// A file in `dir` holding `bytes` that has no name (`O_TMPFILE`): it
/// lives as long as a descriptor or a mapping of it does. Written through
/// to disk and dropped from the page cache, so that mapping it pages in
/// only what is touched (a no-op where `dir` is a tmpfs).
#[cfg(target_os = "linux")]
fn unnamed_copy(dir: &std::path::Path, bytes: &[u8]) -> std::io::Result<std::fs::File> {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    let dir = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("the cache directory's path holds a NUL"))?;
    // SAFETY: `dir` is a valid C string; the descriptor returned is owned
    // by the File from here on.
    let fd = unsafe {
        libc::open(
            dir.as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let mut file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    file.write_all(bytes)?;
    file.sync_data()?;
    drop_cached_pages(&file);
    Ok(file)
}

/// Asks the kernel to read only the pages of `component`'s image (mapped
/// from its unnamed copy `file`) that are touched (`MADV_RANDOM`: no
/// readahead), and drops what loading read. Loading read the image before
/// the advice could apply (its headers, metadata and unwind tables, each
/// fault reading ahead around it), leaving most of the copy in the page
/// cache, from which the kernel maps the 64 KiB around every later fault: a
/// plugin that had run once held 536 of its 664 KiB of code resident
/// (docs/BENCHMARKS.md, `density`). So the data segments are copied out
/// now, then the image's pages are unmapped and dropped from the cache, and
/// only what runs comes back, a page per fault.
#[cfg(target_os = "linux")]
fn page_in_only_what_runs(component: &Component, file: &std::fs::File) {
    let _ = component.initialize_copy_on_write_image();
    advise_image(component, libc::MADV_RANDOM);
    page_out(component);
    drop_cached_pages(file);
}

/// Unmaps and reclaims the pages of `component`'s image this process
/// maps; they come back from the file as they are touched.
#[cfg(target_os = "linux")]
fn page_out(component: &Component) {
    advise_image(component, libc::MADV_PAGEOUT);
}

#[cfg(target_os = "linux")]
fn advise_image(component: &Component, advice: libc::c_int) {
    let image = component.image_range();
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    // The image starts where wasmtime mapped the file, on a page.
    let start = image.start as usize & !(page - 1);
    // SAFETY: the range is wasmtime's mapping of the component's image,
    // which wasmtime documents as open to this kind of paging advice; the
    // advice used here (MADV_RANDOM, MADV_PAGEOUT) changes paging, neither
    // contents nor protections: MADV_PAGEOUT reclaims clean file pages (the
    // image is a private mapping nothing writes), which fault back in from
    // the file.
    unsafe {
        libc::madvise(
            start as *mut libc::c_void,
            image.end as usize - start,
            advice,
        );
    }
}

/// Drops `file`'s cached pages that no mapping holds (they are clean).
#[cfg(target_os = "linux")]
fn drop_cached_pages(file: &std::fs::File) {
    // SAFETY: `file` is an open descriptor; the advice only drops clean
    // cached pages no mapping holds.
    unsafe {
        libc::posix_fadvise(
            std::os::fd::AsRawFd::as_raw_fd(file),
            0,
            0,
            libc::POSIX_FADV_DONTNEED,
        );
    }
}

/// Compiling a component allocates tens of MiB of short-lived memory on
/// cranelift's worker threads, and glibc keeps the freed pages in its
/// per-thread arenas: every hot swap left the host's RSS about 0.4 MiB
/// higher (docs/RELIABILITY.md, the soak). `malloc_trim` hands the free
/// pages of every arena back to the kernel; it recovers part of that (0.34
/// MiB per swap remained in the soak), the rest is fragmentation.
fn release_compile_garbage() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases memory malloc holds free; glibc
    // makes it safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Components this large (bytes) are compiled with a log line before and
/// after: interpreted guests, whose compile takes seconds.
const LARGE_COMPONENT: usize = 4 << 20;

/// `sha256:` and the first 12 hex digits of a digest.
fn short(digest: &str) -> &str {
    &digest[..digest.len().min("sha256:".len() + 12)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn a_private_write_replaces_a_planted_link_instead_of_following_it() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let tmp = dir.path().join("artifact.tmp1");
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        write_private(&tmp, b"artifact").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert!(std::fs::symlink_metadata(&tmp).unwrap().is_file());
        assert_eq!(std::fs::read(&tmp).unwrap(), b"artifact");
    }

    /// Executable mappings of files under `dir` in this process.
    #[cfg(target_os = "linux")]
    fn code_mapped_from(dir: &std::path::Path) -> usize {
        let dir = dir.display().to_string();
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .filter(|l| l.split_whitespace().nth(1).is_some_and(|p| p.contains('x')))
            .filter(|l| l.contains(&dir))
            .count()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_cached_component_runs_from_a_mapped_file_not_anonymous_memory() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = std::fs::read(wasmctrl_plugin_artifacts::MIRROR).unwrap();
        let digest = digest(&bytes);
        let cache = ComponentCache::new(Engine::default(), Some(dir.path().to_path_buf()));
        let (compiled, hit) = cache.get_or_compile(&digest, &bytes).unwrap();
        assert_eq!(hit, CacheHit::Compiled);
        assert_eq!(code_mapped_from(dir.path()), 1, "the fresh compile's code");
        drop(compiled);
        assert_eq!(code_mapped_from(dir.path()), 0, "unmapped once dropped");
        // A host starting again loads the artifact mapped too (the cluster
        // tests with a cacheDir run plugins loaded so).
        let again = ComponentCache::new(Engine::default(), Some(dir.path().to_path_buf()));
        let (loaded, hit) = again.get_compiled(&digest).unwrap();
        assert_eq!(hit, CacheHit::Disk);
        assert_eq!(
            code_mapped_from(dir.path()),
            1,
            "the loaded artifact's code"
        );
        assert!(loaded.component_type().exports(&Engine::default()).count() > 0);
        // The copies have no name: nothing in the directory but the artifact
        // and the key.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_loaded_component_holds_no_image_pages_until_they_run() {
        // tmpfs pages have no disk to be dropped to (without swap).
        let dir = wasmctrl_testkit::residency::disk_dir();
        let bytes = std::fs::read(wasmctrl_plugin_artifacts::MIRROR).unwrap();
        let digest = digest(&bytes);
        let cache = ComponentCache::new(Engine::default(), Some(dir.path().to_path_buf()));
        drop(cache.get_or_compile(&digest, &bytes).unwrap());
        let again = ComponentCache::new(Engine::default(), Some(dir.path().to_path_buf()));
        let (_loaded, hit) = again.get_compiled(&digest).unwrap();
        assert_eq!(hit, CacheHit::Disk);
        let (text, rest) = wasmctrl_testkit::residency::resident_kib_under(dir.path());
        assert!(
            text + rest <= 64,
            "text {text} KiB, rest {rest} KiB resident"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_copy_of_a_component_dropped_unsettled_is_let_go_on_the_next_load() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(Engine::default(), Some(dir.path().to_path_buf()));
        let unsettled =
            || -> Vec<String> { cache.unsettled.lock().unwrap().keys().cloned().collect() };
        let mirror = std::fs::read(wasmctrl_plugin_artifacts::MIRROR).unwrap();
        let (failed, _) = cache.get_or_compile(&digest(&mirror), &mirror).unwrap();
        assert_eq!(unsettled(), [digest(&mirror)]);
        // Dropped without `settle`, as a load that fails after compiling.
        drop(failed);
        let noop = std::fs::read(wasmctrl_plugin_artifacts::NOOP).unwrap();
        let (_held, _) = cache.get_or_compile(&digest(&noop), &noop).unwrap();
        assert_eq!(unsettled(), [digest(&noop)]);
    }

    #[test]
    fn prune_spares_the_newest_the_just_written_and_the_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(Engine::default(), Some(dir.path().to_path_buf()));
        let files: Vec<PathBuf> = (0..KEEP_ON_DISK + 3)
            .map(|i| {
                let f = dir.path().join(format!("{i:064x}-e.cwasm"));
                std::fs::write(&f, b"x").unwrap();
                let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + i as u64);
                std::fs::File::options()
                    .write(true)
                    .open(&f)
                    .unwrap()
                    .set_modified(t)
                    .unwrap();
                f
            })
            .collect();
        // The oldest is a loaded plugin's; the second oldest was just written.
        let _pin = cache.pin(&format!("sha256:{:064x}", 0));
        cache.prune(&files[1]);
        let left: Vec<bool> = files.iter().map(|f| f.exists()).collect();
        assert!(left[0] && left[1], "{left:?}");
        assert!(!left[2] && !left[3] && !left[4], "{left:?}");
        assert!(left[5..].iter().all(|&x| x), "{left:?}");
    }
}
