//! The house's structure, checked on the workspace's own sources: the
//! modules of every level of every crate form layers (no import cycle
//! among siblings), so each can be read and tested without those above
//! it; and no source file outside tests is over
//! `structure::MAX_LINES` lines, so each can be read whole.

use std::path::{Path, PathBuf};

use wasmctrl_testkit::structure::{MAX_LINES, long_files, sibling_cycles};

/// The crates whose sources the house's rules cover.
const CRATES: [&str; 6] = [
    "host",
    "apiserver",
    "apimachinery",
    "guest-sdk",
    "bench",
    "testkit",
];

/// The workspace's root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the kit is a folder of the workspace")
}

fn src(krate: &str) -> PathBuf {
    root().join(krate).join("src")
}

/// `found` with paths relative to the workspace's root.
fn shown(found: impl std::fmt::Display) -> String {
    found
        .to_string()
        .replace(&format!("{}/", root().display()), "")
}

#[test]
fn sibling_modules_import_each_other_in_no_circle() {
    let cycles: Vec<String> = CRATES
        .iter()
        .flat_map(|krate| sibling_cycles(&src(krate)))
        .map(shown)
        .collect();
    assert!(
        cycles.is_empty(),
        "import cycles among sibling modules:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn no_source_file_outside_tests_is_over_the_bound() {
    let long: Vec<String> = CRATES
        .iter()
        .flat_map(|krate| long_files(&src(krate), MAX_LINES))
        .map(shown)
        .collect();
    assert!(
        long.is_empty(),
        "source files over {MAX_LINES} lines outside tests:\n{}",
        long.join("\n")
    );
}
