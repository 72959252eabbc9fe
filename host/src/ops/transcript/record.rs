//! `record`: each matching reconcile of a plugin written as one transcript
//! line to `<dir>/<plugin>.jsonl`, off the reconcile's path.
//!
//! # Bounded
//! A file holds at most `max` transcripts and `maxBytes` bytes; then it is
//! rotated (`<plugin>.jsonl` → `<plugin>.1.jsonl` → … → `<plugin>.<files-1>.jsonl`,
//! the oldest deleted), so the plugin's transcripts never take more than
//! `files × maxBytes`. A transcript larger than `maxBytes` is not kept (its
//! calls stop being recorded as soon as it passes the bound). Lines are
//! written by one thread per plugin through a queue of [`BACKLOG`] lines: a
//! reconcile never waits for the disk, and a line that finds the queue full
//! is dropped. Every dropped transcript is counted in
//! `wasmctrl_record_dropped_total{plugin,reason}`.
//!
//! A config reload that rebuilds the plugin starts a new recorder on the
//! same file while the old one drains: both append whole lines (one write
//! each, so lines never interleave), and the first rotation after it may
//! come a few lines early or late.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::future::BoxFuture;

use super::{CallResponse, HostCall, Key, Outcome, TRANSCRIPT_VERSION, Transcript};
use crate::control::metrics::{Metrics, PluginLabel, PluginReasonLabels};
use crate::control::reconcile::{Action, ObjectKey, ReconcileError, ReconcileRequest};
use crate::meta::files;
use crate::sandbox::hostapi::{
    ApiError, KubeApi, KubeRequest, KubeResponse, LabelSelector, Layer, Layered, Next,
};
use crate::sandbox::outbound::HttpTape;
use crate::sandbox::{ContextTape, Plugin, Through};

/// Transcripts queued for the writer before new ones are dropped.
pub const BACKLOG: usize = 64;

/// What a plugin's transcripts go to, and which reconciles are recorded.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// The directory; the plugin's file is `<dir>/<plugin>.jsonl`.
    pub dir: PathBuf,
    /// Record only keys whose object's labels match (None: every key).
    pub keys: Option<LabelSelector>,
    /// Transcripts per file before it rotates.
    pub max: u64,
    /// Bytes per file before it rotates; also the bound of one transcript.
    pub max_bytes: u64,
    /// Files kept, the current one included.
    pub files: u32,
}

/// Why recording could not start.
#[derive(Debug, thiserror::Error)]
#[error("record: cannot write transcripts to {path}: {source}")]
pub struct RecordError {
    pub path: String,
    pub source: io::Error,
}

/// Records a plugin's reconciles (see the [module docs](self)).
pub struct Recorder {
    plugin: String,
    keys: Option<LabelSelector>,
    max_bytes: usize,
    lines: SyncSender<String>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("plugin", &self.plugin)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// Opens (or continues) `<dir>/<plugin>.jsonl` and starts its writer.
    pub fn start(
        plugin: &str,
        options: RecordOptions,
        metrics: Arc<Metrics>,
    ) -> Result<Self, RecordError> {
        let fail = |source| RecordError {
            path: options.dir.display().to_string(),
            source,
        };
        // Transcripts hold whatever the plugin read (Secrets too, if it
        // may read them): only the host's user may read them.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&options.dir)
            .map_err(fail)?;
        // Transcripts hold what the plugin read, and a planted link would
        // have the host overwrite the file it names.
        files::private_dir(&options.dir).map_err(fail)?;
        let mut files = Files::open(plugin, &options).map_err(fail)?;
        let (lines, received) = std::sync::mpsc::sync_channel::<String>(BACKLOG);
        let labels = PluginReasonLabels {
            plugin: plugin.to_string(),
            reason: "io".into(),
        };
        let written = metrics.clone();
        let name = plugin.to_string();
        std::thread::Builder::new()
            .name(format!("record-{plugin}"))
            .spawn(move || {
                // Ends when the recorder (the only sender) is dropped.
                for line in received {
                    if let Err(e) = files.write(&line) {
                        written.record_dropped.get_or_create(&labels).inc();
                        tracing::warn!(plugin = %name, "record: cannot write a transcript to {}: {e}", files.current().display());
                    } else {
                        written
                            .record_transcripts
                            .get_or_create(&PluginLabel {
                                plugin: name.clone(),
                            })
                            .inc();
                    }
                }
            })
            .map_err(fail)?;
        Ok(Self {
            plugin: plugin.to_string(),
            keys: options.keys,
            max_bytes: usize::try_from(options.max_bytes).unwrap_or(usize::MAX),
            lines,
            metrics,
        })
    }

    /// Whether `key`'s reconciles are recorded: always without a selector;
    /// with one, when the key's object exists and its labels match (read
    /// from the plugin's API, the cache for its own kind).
    pub(crate) async fn admits(&self, plugin: &Plugin, key: &ObjectKey, timeout: Duration) -> bool {
        let Some(selector) = &self.keys else {
            return true;
        };
        let own = KubeRequest::Get {
            kind: plugin.metadata().for_.clone(),
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        };
        match plugin.kube().peek(own, Instant::now() + timeout).await {
            Ok(KubeResponse::Object(o)) => {
                let labels = serde_json::from_str::<serde_json::Value>(&o)
                    .ok()
                    .and_then(|v| serde_json::from_value(v["metadata"]["labels"].clone()).ok())
                    .unwrap_or_default();
                selector.matches(&labels)
            }
            _ => false,
        }
    }

    /// Starts recording one reconcile of `plugin` whose `kube` calls go to
    /// `api`.
    pub(crate) fn session(
        &self,
        plugin: &Plugin,
        request: &ReconcileRequest,
        api: Arc<dyn KubeApi>,
    ) -> Session {
        let taping = Taping {
            limit: self.max_bytes,
            calls: Mutex::new(Calls::default()),
        };
        Session {
            taping: Arc::new(Layered::new(taping, api)),
            tape: Arc::new(ContextTape::recording()),
            http: Arc::new(HttpTape::recording()),
            plugin: plugin.name().to_string(),
            digest: plugin.digest().to_string(),
            settings: serde_json::from_str(plugin.settings()).unwrap_or_default(),
            key: Key::from(&request.key),
            attempt: request.attempt,
            timeout: request.timeout,
            recorded_at: SystemTime::now(),
            started: Instant::now(),
        }
    }

    /// Queues the finished reconcile's transcript for the writer.
    pub(crate) fn finish(&self, session: Session, result: &Result<Action, ReconcileError>) {
        let Some(line) = session.line(result, self.max_bytes) else {
            tracing::warn!(plugin = %self.plugin, "record: a transcript over record.maxBytes ({} bytes) was dropped", self.max_bytes);
            return self.dropped("too-large");
        };
        match self.lines.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.dropped("backlog"),
            Err(TrySendError::Disconnected(_)) => self.dropped("io"),
        }
    }

    fn dropped(&self, reason: &str) {
        self.metrics
            .record_dropped
            .get_or_create(&PluginReasonLabels {
                plugin: self.plugin.clone(),
                reason: reason.into(),
            })
            .inc();
    }
}

/// One reconcile being recorded.
pub(crate) struct Session {
    taping: Arc<Layered<Taping>>,
    tape: Arc<ContextTape>,
    http: Arc<HttpTape>,
    plugin: String,
    digest: String,
    settings: serde_json::Value,
    key: Key,
    attempt: u32,
    timeout: Duration,
    recorded_at: SystemTime,
    started: Instant,
}

impl Session {
    /// What the reconcile's imports go through while it is recorded.
    pub(crate) fn through(&self) -> Through {
        Through {
            kube: Some(self.taping.clone()),
            tape: Some(self.tape.clone()),
            http_tape: Some(self.http.clone()),
            ..Through::default()
        }
    }

    /// The transcript as one line, or None when it is over `max_bytes`.
    fn line(self, result: &Result<Action, ReconcileError>, max_bytes: usize) -> Option<String> {
        let calls = std::mem::take(&mut *self.taping.layer().calls.lock().unwrap());
        if calls.overflow {
            return None;
        }
        let transcript = Transcript {
            version: TRANSCRIPT_VERSION,
            plugin: self.plugin,
            digest: self.digest,
            key: self.key,
            attempt: self.attempt,
            timeout_ms: millis(self.timeout),
            settings: self.settings,
            recorded_at: wasmctrl_apimachinery::time::format_millis(self.recorded_at),
            duration_ms: millis(self.started.elapsed()),
            calls: calls.calls,
            context: self.tape.reads(),
            context_dropped: self.tape.dropped(),
            http: self.http.exchanges(),
            http_dropped: self.http.dropped(),
            result: Outcome::from(result),
        };
        let line = serde_json::to_string(&transcript).ok()?;
        (line.len() < max_bytes).then_some(line)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[derive(Default)]
struct Calls {
    calls: Vec<HostCall>,
    bytes: usize,
    overflow: bool,
}

/// Keeps each of the guest's calls with its answer, up to `limit` bytes of
/// them; the host's own reads (`peek`) are not the guest's and are not
/// kept.
struct Taping {
    limit: usize,
    calls: Mutex<Calls>,
}

impl Layer for Taping {
    fn call<'a>(&'a self, next: Next<'a>) -> BoxFuture<'a, Result<KubeResponse, ApiError>> {
        Box::pin(async move {
            let recorded = next.request.clone();
            let answer = next.pass().await;
            let mut calls = self.calls.lock().unwrap();
            if !calls.overflow {
                let response = CallResponse::from(&answer);
                calls.bytes += json_len(&recorded) + json_len(&response);
                if calls.bytes > self.limit {
                    // Past the bound the transcript is dropped: free what it
                    // holds now rather than at its end.
                    calls.overflow = true;
                    calls.calls = Vec::new();
                } else {
                    calls.calls.push(HostCall {
                        request: recorded,
                        response,
                    });
                }
            }
            answer
        })
    }
}

/// Bytes `value` takes as JSON in the transcript line, counted without
/// writing it anywhere.
fn json_len(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl Write for Count {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter fails only where serializing does: counted as
    // nothing, as the line itself is then not written.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// A plugin's transcript files and the current one's fill.
struct Files {
    dir: PathBuf,
    plugin: String,
    max: u64,
    max_bytes: u64,
    files: u32,
    file: File,
    lines: u64,
    bytes: u64,
}

impl Files {
    fn open(plugin: &str, options: &RecordOptions) -> io::Result<Self> {
        let path = options.dir.join(format!("{plugin}.jsonl"));
        let (lines, bytes) = fill(&path)?;
        let mut files = Files {
            dir: options.dir.clone(),
            plugin: plugin.to_string(),
            max: options.max.max(1),
            max_bytes: options.max_bytes,
            files: options.files.max(1),
            file: open_new(&path, OpenOptions::new().append(true))?,
            lines,
            bytes,
        };
        if files.lines >= files.max || files.bytes >= files.max_bytes {
            files.rotate()?;
        }
        Ok(files)
    }

    fn current(&self) -> PathBuf {
        self.dir.join(format!("{}.jsonl", self.plugin))
    }

    fn rotated(&self, n: u32) -> PathBuf {
        self.dir.join(format!("{}.{n}.jsonl", self.plugin))
    }

    fn write(&mut self, line: &str) -> io::Result<()> {
        let len = line.len() as u64 + 1;
        if self.lines > 0 && (self.lines >= self.max || self.bytes + len > self.max_bytes) {
            self.rotate()?;
        }
        // One write per line: a reader never sees half a transcript
        // followed by another one.
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        self.file.write_all(&buf)?;
        self.lines += 1;
        self.bytes += len;
        Ok(())
    }

    /// Shifts every file one place older, dropping the oldest, and starts
    /// an empty current file.
    fn rotate(&mut self) -> io::Result<()> {
        if self.files > 1 {
            for n in (1..self.files - 1).rev() {
                match std::fs::rename(self.rotated(n), self.rotated(n + 1)) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
            std::fs::rename(self.current(), self.rotated(1))?;
        }
        self.file = open_new(
            &self.current(),
            OpenOptions::new().write(true).truncate(true),
        )?;
        self.lines = 0;
        self.bytes = 0;
        Ok(())
    }
}

/// Opens a transcript file, created 0600, never through a symbolic link:
/// a link at the file's path is refused rather than followed.
fn open_new(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    options
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| not_through_a_link(path, e))
}

fn not_through_a_link(path: &Path, e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        io::Error::other(format!(
            "{} is a symbolic link; transcripts are never written through a link",
            path.display()
        ))
    } else {
        e
    }
}

/// Lines and bytes of an existing transcript file (0, 0 if there is none).
fn fill(path: &Path) -> io::Result<(u64, u64)> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((0, 0)),
        Err(e) => return Err(not_through_a_link(path, e)),
    };
    let bytes = file.metadata()?.len();
    let mut lines = 0;
    let mut reader = io::BufReader::new(file);
    let mut buf = Vec::new();
    while reader.read_until(b'\n', &mut buf)? > 0 {
        lines += 1;
        buf.clear();
    }
    Ok((lines, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(dir: &Path, max: u64, max_bytes: u64, files: u32) -> RecordOptions {
        RecordOptions {
            dir: dir.to_path_buf(),
            keys: None,
            max,
            max_bytes,
            files,
        }
    }

    fn lines(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn files_rotate_after_max_transcripts_and_keep_only_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Files::open("p", &options(dir.path(), 2, 1 << 20, 3)).unwrap();
        for i in 0..7 {
            files.write(&format!("t{i}")).unwrap();
        }
        assert_eq!(lines(&dir.path().join("p.jsonl")), ["t6"]);
        assert_eq!(lines(&dir.path().join("p.1.jsonl")), ["t4", "t5"]);
        assert_eq!(lines(&dir.path().join("p.2.jsonl")), ["t2", "t3"]);
        assert!(!dir.path().join("p.3.jsonl").exists(), "3 files at most");
        use std::os::unix::fs::PermissionsExt;
        for f in ["p.jsonl", "p.1.jsonl"] {
            let mode = std::fs::metadata(dir.path().join(f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(
                mode & 0o777,
                0o600,
                "{f}: only the host's user reads transcripts"
            );
        }
    }

    #[test]
    fn files_rotate_before_passing_max_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Files::open("p", &options(dir.path(), 100, 10, 2)).unwrap();
        for l in ["aaaa", "bbbb", "cccc"] {
            files.write(l).unwrap();
        }
        assert_eq!(lines(&dir.path().join("p.jsonl")), ["cccc"]);
        assert_eq!(lines(&dir.path().join("p.1.jsonl")), ["aaaa", "bbbb"]);
    }

    #[test]
    fn a_single_file_is_truncated_when_it_fills() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Files::open("p", &options(dir.path(), 1, 1 << 20, 1)).unwrap();
        files.write("a").unwrap();
        files.write("b").unwrap();
        assert_eq!(lines(&dir.path().join("p.jsonl")), ["b"]);
        assert!(!dir.path().join("p.1.jsonl").exists());
    }

    #[test]
    fn a_restarted_recorder_continues_the_file_and_counts_what_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        let o = options(dir.path(), 3, 1 << 20, 2);
        let mut files = Files::open("p", &o).unwrap();
        files.write("a").unwrap();
        files.write("b").unwrap();
        drop(files);
        let mut files = Files::open("p", &o).unwrap();
        files.write("c").unwrap();
        files.write("d").unwrap();
        assert_eq!(lines(&dir.path().join("p.jsonl")), ["d"]);
        assert_eq!(lines(&dir.path().join("p.1.jsonl")), ["a", "b", "c"]);
    }

    fn start(dir: &Path, files: u32) -> Result<Recorder, RecordError> {
        Recorder::start(
            "p",
            options(dir, 1, 1 << 20, files),
            Arc::new(Metrics::new()),
        )
    }

    #[test]
    fn a_directory_others_may_write_to_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("transcripts");
        std::fs::create_dir(&dir).unwrap();
        for mode in [0o777, 0o770, 0o1777] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = start(&dir, 2).unwrap_err().to_string();
            assert!(
                e.contains(&dir.display().to_string()) && e.contains("lets other users"),
                "{mode:o}: {e}"
            );
            assert!(!dir.join("p.jsonl").exists(), "nothing written in it");
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        start(&dir, 2).unwrap();
        assert!(dir.join("p.jsonl").exists());
    }

    #[test]
    fn a_planted_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("precious");
        std::fs::write(&target, "keep me\n").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("p.jsonl")).unwrap();
        for files in [1, 3] {
            let e = start(dir.path(), files).unwrap_err().to_string();
            assert!(e.contains("is a symbolic link"), "{e}");
        }
        // A full file with one file kept is truncated in place: the link
        // planted after the recorder started is not followed either.
        std::fs::remove_file(dir.path().join("p.jsonl")).unwrap();
        let mut files = Files::open("p", &options(dir.path(), 1, 1 << 20, 1)).unwrap();
        files.write("a").unwrap();
        std::fs::remove_file(dir.path().join("p.jsonl")).unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("p.jsonl")).unwrap();
        let e = files.write("b").unwrap_err().to_string();
        assert!(e.contains("is a symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me\n");
    }
}
