//! Where a test's mapped files stand in memory (tests of resident code;
//! feature `test-util`). A leaf: it imports nothing of the crate, so the
//! runtime's own unit tests can use it.

use std::path::Path;

/// Whether `dir` is on a tmpfs, whose pages have no disk to be dropped to
/// (the tests of resident code skip there).
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
