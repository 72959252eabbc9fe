//! Where a test's mapped files stand in memory. Tests of resident code
//! measure pages dropped back to the file they map; on a tmpfs those pages
//! have no disk to go to, so such tests need a directory on a real disk.

use std::path::Path;

use tempfile::TempDir;

use crate::kept::target_tmp_dir;

/// A fresh directory on a real disk, removed when dropped: under the
/// target directory of the running test binary (beside cargo's
/// `CARGO_TARGET_TMPDIR`), which unit tests and integration tests alike
/// can reach. Panics, saying why, if that directory is on a tmpfs.
pub fn disk_dir() -> TempDir {
    let base = target_tmp_dir();
    std::fs::create_dir_all(&base)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", base.display()));
    let dir = tempfile::Builder::new()
        .prefix("disk-")
        .tempdir_in(&base)
        .unwrap_or_else(|e| panic!("cannot create a directory in {}: {e}", base.display()));
    assert!(
        !on_tmpfs(dir.path()),
        "{} is on a tmpfs, whose pages have no disk to be dropped to: this test \
         measures what a mapped file keeps resident, so it needs the target \
         directory on a disk (set CARGO_TARGET_DIR to one)",
        dir.path().display()
    );
    dir
}

/// Whether `dir` is on a tmpfs.
#[cfg(target_os = "linux")]
pub fn on_tmpfs(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: statfs is plain data, so all-zero is a valid value to fill;
    // `path` is a NUL-terminated string and `fs` a writable statfs that
    // outlives the call.
    let fs = unsafe {
        let mut fs: libc::statfs = std::mem::zeroed();
        (libc::statfs(path.as_ptr(), &mut fs) == 0).then_some(fs)
    };
    fs.is_some_and(|fs| fs.f_type == libc::TMPFS_MAGIC)
}

/// Whether `dir` is on a tmpfs (only Linux has one to tell).
#[cfg(not(target_os = "linux"))]
pub fn on_tmpfs(_dir: &Path) -> bool {
    false
}

/// Resident KiB of this process's mappings of files under `dir`, from
/// `/proc/self/smaps`: (executable mappings, the others).
#[cfg(target_os = "linux")]
pub fn resident_kib_under(dir: &Path) -> (usize, usize) {
    let dir = dir.display().to_string();
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let (mut code, mut rest, mut current) = (0, 0, None);
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("Rss:"), Some(kib)) => match current {
                Some(true) => code += kib.parse::<usize>().unwrap(),
                Some(false) => rest += kib.parse::<usize>().unwrap(),
                None => {}
            },
            (Some(range), Some(perms)) if range.contains('-') && perms.len() == 4 => {
                current = line.contains(&dir).then(|| perms.contains('x'));
            }
            _ => {}
        }
    }
    (code, rest)
}
