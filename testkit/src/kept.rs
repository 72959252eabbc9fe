//! Directories the suites keep across runs, in the target directory (which
//! CI caches with the build): what a test would otherwise redo every run
//! without changing what it checks.

use std::path::PathBuf;

/// `<target>/tmp`, cargo's `CARGO_TARGET_TMPDIR`, found from the running
/// binary, so unit tests and libraries can reach it too: test binaries run
/// from `<target>/<profile>/deps/`.
pub fn target_tmp_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let target = exe
        .ancestors()
        .nth(3)
        .expect("the test binary runs from <target>/<profile>/deps/");
    target.join("tmp")
}

/// The compiled-component cache (`runtime.cacheDir`) of the suites' hosts
/// and runtimes: compiling a Python or JavaScript component takes seconds
/// and a Rust one most of a small test's CPU, and with this directory each
/// is compiled once per build of it rather than once per test. Artifacts
/// are keyed by the component's digest and the engine's settings, so a
/// test gets exactly the code it would have compiled.
pub fn compiled_components_dir() -> PathBuf {
    target_tmp_dir().join("compiled-components")
}
