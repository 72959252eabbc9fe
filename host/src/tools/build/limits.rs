//! The bounds a build keeps: how long it waits for another install, how
//! much of a failed command's output an error holds, how much a project
//! file may configure.

use std::time::Duration;

/// How long a build waits for another process's toolchain install.
pub(super) const LOCK_WAIT: Duration = Duration::from_secs(15 * 60);
/// Output of a failed command kept in an error (its tail).
pub(super) const OUTPUT_TAIL: usize = 8 << 10;
/// Bounds on what a project file may configure.
pub(super) const MAX_PATH_ENTRIES: usize = 64;
pub(super) const MAX_FIELD_LEN: usize = 4096;
