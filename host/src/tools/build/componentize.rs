//! What the Python and JavaScript builds share: the embedded WIT world,
//! the project-file fields they read, the output file and scratch
//! directories.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::error::{BuildError, io_error};
use super::limits::{MAX_FIELD_LEN, MAX_PATH_ENTRIES};

/// The reconciler world with `wasi:http/outgoing-handler` named among its
/// imports (`wit/http.wit`): a plugin that sends no request imports no
/// more than a `reconciler` one; the host serves both. A JavaScript plugin
/// whose entry module exports `metadata` and `reconcile` only is built
/// against it.
pub(super) const WORLD: &str = "http-reconciler";

/// `WORLD` with the admission exports (`webhooks`, `validate`, `mutate`,
/// `outbound`): Python plugins are always built against it (the Python
/// SDK's `export` supplies every export), and a JavaScript plugin whose
/// entry module exports `validate`.
pub(super) const ADMISSION_WORLD: &str = "http-admission-reconciler";

/// The world's WIT files and the WASI packages they need, as
/// `(path in the WIT directory, text)`.
const WIT: &[(&str, &str)] = &[
    (
        "reconciler.wit",
        include_str!("../../../../wit/reconciler.wit"),
    ),
    ("http.wit", include_str!("../../../../wit/http.wit")),
    ("deps/cli.wit", include_str!("../../../../wit/deps/cli.wit")),
    (
        "deps/clocks.wit",
        include_str!("../../../../wit/deps/clocks.wit"),
    ),
    (
        "deps/filesystem.wit",
        include_str!("../../../../wit/deps/filesystem.wit"),
    ),
    (
        "deps/http.wit",
        include_str!("../../../../wit/deps/http.wit"),
    ),
    ("deps/io.wit", include_str!("../../../../wit/deps/io.wit")),
    (
        "deps/random.wit",
        include_str!("../../../../wit/deps/random.wit"),
    ),
    (
        "deps/sockets.wit",
        include_str!("../../../../wit/deps/sockets.wit"),
    ),
];

/// Writes the world's WIT files into a new scratch directory, the one a
/// componentize tool is pointed at.
pub(super) fn write_wit() -> Result<TempDir, BuildError> {
    let wit = TempDir::new("wit")?;
    for (file, text) in WIT {
        let path = wit.path.join(file);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io_error(parent))?;
        }
        std::fs::write(&path, text).map_err(io_error(&path))?;
    }
    Ok(wit)
}

/// A file stem for a package name: its last `/` segment, with anything but
/// letters, digits, `_` and `-` replaced; None if nothing is left.
pub(super) fn file_stem_of(name: &str) -> Option<String> {
    let last = name.rsplit('/').next()?;
    let stem: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    (!stem.trim_matches('_').is_empty() && stem.len() <= 128).then_some(stem.replace('-', "_"))
}

pub(super) fn string_list(
    value: &serde_json::Value,
    what: &str,
) -> Result<Option<Vec<String>>, String> {
    match value {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::Array(items) if items.len() <= MAX_PATH_ENTRIES => items
            .iter()
            .map(|item| match item {
                serde_json::Value::String(s) if !s.is_empty() && s.len() <= MAX_FIELD_LEN => {
                    Ok(s.clone())
                }
                other => Err(format!("{what}: {other} is not a path")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        other => Err(format!(
            "{what} must be a list of at most {MAX_PATH_ENTRIES} paths, not {other}"
        )),
    }
}

pub(super) fn prepare_out(out: &Path) -> Result<PathBuf, BuildError> {
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io_error(parent))?;
    }
    let staged = staged(out);
    // A stale partial file must not pass for this build's output.
    match std::fs::remove_file(&staged) {
        Ok(()) => Ok(staged),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(staged),
        Err(e) => Err(io_error(&staged)(e)),
    }
}

/// Where a build writes before its output is complete: beside `out`, so
/// [`publish`] is an atomic rename. The component a running host loads from
/// `out` stays whole (and in place) until the new one is.
fn staged(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    out.with_file_name(name)
}

/// Moves the complete component from `staged` to `out`, or fails with
/// `NoOutput` naming `step` when the tool wrote nothing.
pub(super) fn publish(step: &'static str, staged: &Path, out: &Path) -> Result<(), BuildError> {
    if !staged.is_file() {
        return Err(BuildError::NoOutput {
            step,
            path: out.to_path_buf(),
        });
    }
    std::fs::rename(staged, out).map_err(io_error(out))
}

/// A directory under the system temp dir, removed on drop.
pub(super) struct TempDir {
    pub(super) path: PathBuf,
}

impl TempDir {
    pub(super) fn new(what: &str) -> Result<Self, BuildError> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        // Created new and private, never adopted: another user could
        // have made a directory of a guessed name first, and put a link
        // where a build writes.
        let mut attempt = 0;
        loop {
            let path = std::env::temp_dir().join(format!(
                "wasmctrl-build-{what}-{}-{}-{nanos}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let mut dir = std::fs::DirBuilder::new();
            std::os::unix::fs::DirBuilderExt::mode(&mut dir, 0o700);
            match dir.create(&path) {
                Ok(()) => return Ok(Self { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 16 => {
                    attempt += 1;
                }
                Err(e) => return Err(io_error(&path)(e)),
            }
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
