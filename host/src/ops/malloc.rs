//! The host process's allocator settings.

/// Caps glibc's malloc arenas at one per CPU (glibc allows eight per CPU),
/// unless `MALLOC_ARENA_MAX` is set, which glibc then honours as given.
///
/// Why: every thread that allocates may get an arena of its own, and each
/// arena keeps the pages its frees leave behind. A host runs tokio's
/// workers, its blocking threads (loading and compiling plugins, reading
/// files) and cranelift's compile threads; with 100 plugins loaded the
/// arenas held ~19 MiB beyond the live heap, and one arena per CPU ~12 MiB
/// (docs/BENCHMARKS.md, `density`). Call it first thing in `main`, before
/// other threads start. Does nothing on other platforms.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        let arenas = libc::c_int::try_from(cpus).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only changes a malloc tunable; glibc allows it at
        // any time.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
}
