//! A component file on disk, and the one notify watcher every file source
//! (and the config file) shares.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tokio::sync::mpsc;

use super::{Artifact, PluginSource, SourceError, held};
use crate::config::DEFAULT_MAX_SIZE;
use crate::control::metrics::{DiskRefusal, count_disk_refusal};
use crate::meta::files::{LocalReadError, read_regular};
use crate::sandbox::digest;

/// How long file events settle before subscribers hear of them (editors and
/// `cargo build` write in several steps).
pub const DEBOUNCE: Duration = Duration::from_millis(250);

/// A component file. Reads it whole on every fetch: a regular file (links
/// followed) of at most the default `maxSize`, 256 MiB.
pub struct FileSource {
    path: PathBuf,
    watcher: Option<FileWatcher>,
}

impl FileSource {
    /// The file at `path`; with a `watcher`, its changes are reported.
    pub fn new(path: PathBuf, watcher: Option<FileWatcher>) -> Self {
        Self {
            path: absolute(&path),
            watcher,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl PluginSource for FileSource {
    fn origin(&self) -> String {
        self.path.display().to_string()
    }

    fn fetch(&self) -> BoxFuture<'_, Result<Artifact, SourceError>> {
        Box::pin(async move {
            // Charged to the load before it is read (an object's file
            // source), at its size now: a file grown since is cut at
            // maxSize by the read.
            if let Ok(meta) = tokio::fs::metadata(&self.path).await {
                held::charge_for(&self.origin(), meta.len().min(DEFAULT_MAX_SIZE))?;
            }
            let bytes = read_regular(&self.path, DEFAULT_MAX_SIZE)
                .await
                .map_err(|e| {
                    if !matches!(e, LocalReadError::Io(_)) {
                        count_disk_refusal(DiskRefusal::ComponentFile);
                    }
                    e
                })
                .map_err(|e| match e {
                    LocalReadError::Io(source) => SourceError::Read {
                        origin: self.origin(),
                        source,
                    },
                    LocalReadError::TooLarge { max, .. } => SourceError::TooLarge {
                        origin: self.origin(),
                        limit: max,
                        size: None,
                    },
                    e @ LocalReadError::NotRegular(_) => SourceError::Read {
                        origin: self.origin(),
                        source: std::io::Error::other(e.to_string()),
                    },
                })?;
            let digest = digest(&bytes);
            Ok(Artifact { bytes, digest })
        })
    }

    fn changes(&self) -> BoxStream<'static, ()> {
        match &self.watcher {
            Some(w) => w.subscribe(&self.path),
            None => futures::stream::empty().boxed(),
        }
    }
}

/// One `notify` watcher for the host: directories are watched on demand,
/// events are debounced per file and fanned out to the file's subscribers.
/// Cheap to clone.
#[derive(Clone)]
pub struct FileWatcher {
    inner: Arc<Mutex<WatcherState>>,
}

/// The watcher and who listens to which file.
struct WatcherState {
    watcher: Option<notify::RecommendedWatcher>,
    dirs: BTreeSet<PathBuf>,
    subscribers: HashMap<PathBuf, Vec<mpsc::UnboundedSender<()>>>,
}

impl Default for FileWatcher {
    fn default() -> Self {
        Self::new()
    }
}

impl FileWatcher {
    /// Starts the watcher (a no-op watcher, with an error logged, if the
    /// platform refuses one: reloads then need SIGHUP or the admin API).
    pub fn new() -> Self {
        let inner = Arc::new(Mutex::new(WatcherState {
            watcher: None,
            dirs: BTreeSet::new(),
            subscribers: HashMap::new(),
        }));
        let (tx, rx) = mpsc::unbounded_channel::<PathBuf>();
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            if let Ok(event) = res
                && is_change(&event.kind)
            {
                for p in event.paths {
                    let _ = tx.send(p);
                }
            }
        });
        match watcher {
            Ok(w) => inner.lock().unwrap().watcher = Some(w),
            Err(e) => {
                tracing::error!("cannot watch files; reload with SIGHUP or the admin API: {e}")
            }
        }
        tokio::spawn(debounce(rx, Arc::downgrade(&inner)));
        Self { inner }
    }

    /// A stream that yields (debounced) whenever `path` changes. The
    /// directory is watched before this returns, so no later change is
    /// missed.
    pub fn subscribe(&self, path: &Path) -> BoxStream<'static, ()> {
        use notify::Watcher;
        let path = absolute(path);
        let (tx, rx) = mpsc::unbounded_channel();
        let mut state = self.inner.lock().unwrap();
        let state = &mut *state;
        if let Some(dir) = path.parent().map(Path::to_path_buf)
            && !state.dirs.contains(&dir)
            && let Some(w) = state.watcher.as_mut()
        {
            match w.watch(&dir, notify::RecursiveMode::NonRecursive) {
                Ok(()) => {
                    state.dirs.insert(dir);
                }
                Err(e) => tracing::warn!(dir = %dir.display(), "cannot watch: {e}"),
            }
        }
        state.subscribers.entry(path).or_default().push(tx);
        futures::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|()| ((), rx)) },
        )
        .boxed()
    }
}

/// Whether `kind` may have changed a file's content. Opens and reads are
/// not changes: the host opens its config and components to read them, and
/// hearing of those reads made every read schedule another one.
fn is_change(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode, EventKind};
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Collects events for [`DEBOUNCE`], then notifies each changed file's live
/// subscribers once.
async fn debounce(
    mut rx: mpsc::UnboundedReceiver<PathBuf>,
    state: std::sync::Weak<Mutex<WatcherState>>,
) {
    while let Some(first) = rx.recv().await {
        let mut changed = BTreeSet::from([first]);
        tokio::time::sleep(DEBOUNCE).await;
        while let Ok(p) = rx.try_recv() {
            changed.insert(p);
        }
        let Some(state) = state.upgrade() else {
            return;
        };
        let mut state = state.lock().unwrap();
        for path in changed {
            if let Some(subs) = state.subscribers.get_mut(&path) {
                subs.retain(|s| s.send(()).is_ok());
                tracing::debug!(path = %path.display(), subscribers = subs.len(), "file changed");
            }
        }
        state.subscribers.retain(|_, subs| !subs.is_empty());
    }
}

/// `p` made absolute, as file events name paths.
pub(crate) fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file source naming a device (an object author's `file:
    /// /dev/zero`, with file sources allowed) fails its fetch, counted,
    /// instead of reading forever.
    #[tokio::test]
    async fn a_file_source_naming_a_device_is_refused_and_counted() {
        use crate::control::metrics::disk_refusals;
        let before = disk_refusals(DiskRefusal::ComponentFile);
        let e = FileSource::new("/dev/zero".into(), None)
            .fetch()
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/dev/zero") && e.contains("not a regular file"),
            "{e}"
        );
        assert!(disk_refusals(DiskRefusal::ComponentFile) > before);
    }

    /// Reading a file (the host reads its config and components) is no
    /// change: a subscriber that heard of every open would reload forever.
    #[tokio::test]
    async fn a_read_is_not_a_change_but_a_write_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wasmctrl.yaml");
        std::fs::write(&path, "plugins: []\n").unwrap();
        let watcher = FileWatcher::new();
        let mut changes = watcher.subscribe(&path);
        std::fs::read(&path).unwrap();
        let heard = tokio::time::timeout(DEBOUNCE * 4, changes.next()).await;
        assert!(heard.is_err(), "a read was reported as a change");
        std::fs::write(&path, "plugins: []\n# edited\n").unwrap();
        let heard = tokio::time::timeout(Duration::from_secs(10), changes.next()).await;
        assert_eq!(heard, Ok(Some(())), "a write was not reported");
    }
}
