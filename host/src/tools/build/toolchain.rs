//! The toolchain cache: where the Python and JavaScript tools are
//! installed, once per pinned version, under a lock other builds wait on.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use super::command::tail;
use super::error::{BuildError, io_error};
use super::limits::LOCK_WAIT;
use super::options::BuildOptions;

/// The toolchain cache a build uses: `options.toolchains`, else
/// [`toolchains_dir`].
pub(super) fn cache_root(options: &BuildOptions) -> Result<PathBuf, BuildError> {
    match &options.toolchains {
        Some(root) => Ok(root.clone()),
        None => toolchains_dir(),
    }
}

/// The toolchain cache: `$WASMCTRL_TOOLCHAINS`, else
/// `$XDG_CACHE_HOME/wasmctrl/toolchains`, else `~/.cache/wasmctrl/toolchains`.
pub fn toolchains_dir() -> Result<PathBuf, BuildError> {
    let set = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = set("WASMCTRL_TOOLCHAINS") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(cache) = set("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(cache).join("wasmctrl").join("toolchains"));
    }
    set("HOME")
        .map(|home| {
            PathBuf::from(home)
                .join(".cache")
                .join("wasmctrl")
                .join("toolchains")
        })
        .ok_or(BuildError::NoCacheDir)
}

/// Runs `install` into `dir` unless its `.installed` marker exists,
/// serialised with other builds by the lock directory `<dir>.lock`. A failed
/// install leaves nothing behind. Returns `dir` and whether it installed.
pub(super) fn ensure_installed(
    dir: &Path,
    install: impl FnOnce(&Path) -> Result<(), BuildError>,
) -> Result<(PathBuf, bool), BuildError> {
    let marker = dir.join(".installed");
    if marker.is_file() {
        return Ok((dir.to_path_buf(), false));
    }
    let parent = dir.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io_error(parent))?;
    let lock = dir.with_extension("lock");
    let waited = Instant::now();
    loop {
        match std::fs::create_dir(&lock) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if marker.is_file() {
                    return Ok((dir.to_path_buf(), false));
                }
                // A lock older than the wait bound belongs to a build that died.
                let age = std::fs::metadata(&lock)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| SystemTime::now().duration_since(t).ok());
                if age.is_some_and(|a| a > LOCK_WAIT) {
                    let _ = std::fs::remove_dir(&lock);
                    continue;
                }
                if waited.elapsed() > LOCK_WAIT {
                    return Err(BuildError::LockTimeout {
                        dir: dir.to_path_buf(),
                        lock,
                    });
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(e) => return Err(io_error(&lock)(e)),
        }
    }
    let result = if marker.is_file() {
        Ok(false)
    } else {
        // Whatever a failed install left: start clean.
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(io_error(dir))?;
        }
        match install(dir) {
            Ok(()) => std::fs::write(&marker, b"")
                .map(|()| true)
                .map_err(io_error(&marker)),
            Err(e) => {
                let _ = std::fs::remove_dir_all(dir);
                Err(e)
            }
        }
    };
    let _ = std::fs::remove_dir(&lock);
    result.map(|installed| (dir.to_path_buf(), installed))
}

pub(super) fn install_step(what: &str, dir: &Path, cmd: &mut Command) -> Result<(), BuildError> {
    let output = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| BuildError::Install {
            what: what.to_string(),
            dir: dir.to_path_buf(),
            status: "could not start".into(),
            output: e.to_string(),
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(BuildError::Install {
            what: what.to_string(),
            dir: dir.to_path_buf(),
            status: output.status.to_string(),
            output: tail(&output),
        })
    }
}
