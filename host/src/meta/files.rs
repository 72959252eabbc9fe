//! Reads of files the host takes from the local disk that another party
//! may have put there: a component file, the download cache's blobs and
//! records, a docker config, certificate and CA files. Only regular files
//! are read, and never more than a bound: a path may name `/dev/zero`, a
//! FIFO or a link to either, whose size says nothing of what a read
//! returns.

use std::fs::{Metadata, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use tokio::io::AsyncReadExt;

/// Why a local file was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LocalReadError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("it is a {0}, not a regular file; refusing to read it")]
    NotRegular(&'static str),
    /// `len`: what the file measured (or, grown while read, more than
    /// `max`).
    #[error("it is {len} bytes, larger than {max} bytes")]
    TooLarge { len: u64, max: u64 },
}

impl LocalReadError {
    pub(crate) fn not_found(&self) -> bool {
        matches!(self, LocalReadError::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

/// Whether what was opened may be read: a regular file of at most `max`
/// bytes.
fn readable(meta: &Metadata, max: u64) -> Result<(), LocalReadError> {
    let kind = meta.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "directory"
        } else if kind.is_fifo() {
            "FIFO"
        } else if kind.is_char_device() {
            "character device"
        } else if kind.is_block_device() {
            "block device"
        } else if kind.is_socket() {
            "socket"
        } else {
            "special file"
        };
        return Err(LocalReadError::NotRegular(what));
    }
    if meta.len() > max {
        return Err(LocalReadError::TooLarge {
            len: meta.len(),
            max,
        });
    }
    Ok(())
}

/// `bytes` as read through `take(max + 1)`: refused if the file grew past
/// `max` after it was measured.
fn within(bytes: Vec<u8>, max: u64) -> Result<Vec<u8>, LocalReadError> {
    let len = bytes.len() as u64;
    if len > max {
        return Err(LocalReadError::TooLarge { len, max });
    }
    Ok(bytes)
}

/// The bytes of the regular file at `path` (links followed), at most `max`.
/// The file is opened without blocking (a FIFO would wait for a writer)
/// and its type judged on what was opened, so a swap after a check
/// cannot slip a device in.
pub(crate) async fn read_regular(path: &Path, max: u64) -> Result<Vec<u8>, LocalReadError> {
    let mut file = tokio::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .await?;
    let meta = file.metadata().await?;
    readable(&meta, max)?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    (&mut file).take(max + 1).read_to_end(&mut bytes).await?;
    within(bytes, max)
}

/// [`read_regular`], for callers outside the async runtime (start-up,
/// certificate reloads).
pub(crate) fn read_regular_blocking(path: &Path, max: u64) -> Result<Vec<u8>, LocalReadError> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    readable(&meta, max)?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    (&mut file).take(max + 1).read_to_end(&mut bytes)?;
    within(bytes, max)
}

/// `name` in the user's cache directory: `$XDG_CACHE_HOME/wasmctrl/<name>`,
/// else `~/.cache/wasmctrl/<name>`; None with neither variable set.
pub(crate) fn user_cache_dir(name: &str) -> Option<PathBuf> {
    let var = |v: &str| {
        std::env::var_os(v)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
    };
    let cache = var("XDG_CACHE_HOME").or_else(|| Some(var("HOME")?.join(".cache")))?;
    Some(cache.join("wasmctrl").join(name))
}

/// Refuses a directory someone other than the host's user could plant
/// files or links in: it must be a directory owned by the host's
/// effective user and writable by no one else. A directory that already
/// existed keeps its mode, so it is checked, not assumed.
pub(crate) fn private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::other("it is not a directory"));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if meta.uid() != uid {
        return Err(io::Error::other(format!(
            "refusing it: it is owned by uid {}, not by the host's user (uid {uid}), so another user controls what is in it",
            meta.uid()
        )));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(io::Error::other(format!(
            "refusing it: its mode {mode:04o} lets other users create files and links in it; make it writable only by its owner (chmod 700)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn devices_fifos_directories_and_large_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let e = read_regular(&link, 1 << 20).await.unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");

        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let e = read_regular(&fifo, 1 << 20).await.unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");

        let e = read_regular(dir.path(), 1 << 20).await.unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");

        let big = dir.path().join("big");
        std::fs::write(&big, vec![0u8; 2048]).unwrap();
        let e = read_regular(&big, 1024).await.unwrap_err();
        assert!(e.to_string().contains("larger than 1024 bytes"), "{e}");
        assert_eq!(read_regular(&big, 2048).await.unwrap().len(), 2048);

        let missing = read_regular(&dir.path().join("missing"), 1)
            .await
            .unwrap_err();
        assert!(missing.not_found());
    }
}
