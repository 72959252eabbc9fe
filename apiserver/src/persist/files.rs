//! Files holding credentials (the kubeconfig, `credentials.json`), written
//! so that no reader ever sees a partial file and no other user can read
//! them.

use std::io::Write;
use std::path::Path;

/// Writes `contents` to `path` atomically with mode 0600, creating parent
/// directories: the bytes go to a new temporary file in the same directory
/// (created 0600 before anything is written), which is fsynced and renamed
/// over `path`, and the directory is fsynced so the rename survives a
/// crash. A reader sees the old file or the new one, never a mix.
pub(crate) fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let file_name = path.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} names no file", path.display()),
        )
    })?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        file_name.to_string_lossy(),
        crate::values::random_suffix()
    ));
    let result = write_new(&tmp, contents).and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    sync_dir(dir)
}

fn write_new(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(contents)?;
    f.sync_all()
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> std::io::Result<()> {
    Ok(())
}

/// Creates `dir` (and parents) readable only by this user when it does not
/// exist yet. An existing directory must be this user's and writable by no
/// one else: another user who could create files in it could plant the
/// credentials the server adopts (a token and CA key the planter knows).
/// One others may only read is made private.
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let meta = std::fs::metadata(dir)?;
        // The caller names the directory.
        let refuse = |why: String| {
            Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                why,
            ))
        };
        if !meta.is_dir() {
            return refuse("it is not a directory".into());
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me {
            return refuse(format!(
                "it belongs to user {}, not to this one ({me}); refusing to keep credentials there",
                meta.uid()
            ));
        }
        let mode = meta.mode() & 0o777;
        if mode & 0o022 != 0 {
            return refuse(format!(
                "its mode {mode:04o} lets other users create files in it; refusing to keep credentials there (chmod 700 it)"
            ));
        }
        if mode & 0o077 != 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    Ok(())
}

/// The bytes of the regular file at `path`, at most `max`, without
/// following a link at `path` or waiting on a FIFO; `Ok(None)` when there
/// is no such file.
pub(crate) fn read_private(path: &Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = match opts.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    if !meta.is_file() {
        return Err(invalid("it is not a regular file".into()));
    }
    if meta.len() > max {
        return Err(invalid(format!(
            "it is {} bytes, more than {max}",
            meta.len()
        )));
    }
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(invalid(format!("it grew past {max} bytes while read")));
    }
    Ok(Some(bytes))
}

/// Opens (creating with mode 0600) the file at `path` for reading and
/// writing, without following a link there: the database, created by this
/// process rather than by its library, which would create it readable by
/// others until it was restricted.
pub(crate) fn open_private(path: &Path) -> std::io::Result<std::fs::File> {
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    let file = opts.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "it is not a regular file",
        ));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_atomically_with_mode_0600() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/creds.json");
        write_private(&path, b"one").unwrap();
        write_private(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left: {leftovers:?}");
    }

    #[cfg(unix)]
    #[test]
    fn a_data_directory_others_may_write_to_is_refused_and_one_they_may_read_made_private() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("data");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = create_private_dir(&dir).unwrap_err().to_string();
        assert!(e.contains("0777 lets other users create files"), "{e}");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        create_private_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[cfg(unix)]
    #[test]
    fn a_private_file_is_read_only_as_a_bounded_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("credentials.json");
        assert!(read_private(&path, 16).unwrap().is_none());
        std::fs::write(&path, "small").unwrap();
        assert_eq!(read_private(&path, 16).unwrap().unwrap(), b"small");
        std::fs::write(&path, "x".repeat(17)).unwrap();
        let e = read_private(&path, 16).unwrap_err().to_string();
        assert!(e.contains("17 bytes, more than 16"), "{e}");
        let link = dir.path().join("planted");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(read_private(&link, 16).is_err(), "a link is not followed");
    }
}
