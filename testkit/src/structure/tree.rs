//! The source files of a crate and the modules they are.

use std::path::{Path, PathBuf};

/// A source file of a crate.
pub(crate) struct SourceFile {
    pub path: PathBuf,
    /// The module it is, from the crate's root (`src/a/b.rs` and
    /// `src/a/b/mod.rs` are `[a, b]`, `src/lib.rs` is `[]`); None for the
    /// root of a binary (`src/main.rs`, `src/bin/…`), which is a crate of
    /// its own.
    pub module: Option<Vec<String>>,
}

/// Every `.rs` file under `src`, in path order; panics if `src` cannot be
/// read.
pub(crate) fn source_files(src: &Path) -> Vec<SourceFile> {
    let mut paths = Vec::new();
    collect(src, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let module = module_of(path.strip_prefix(src).expect("under src"));
            SourceFile { path, module }
        })
        .collect()
}

fn collect(dir: &Path, into: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The module of the file at `relative` (to `src`).
fn module_of(relative: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    match parts.as_slice() {
        [root] if root == "main" => return None,
        [bin, _, ..] if bin == "bin" => return None,
        [root] if root == "lib" => return Some(Vec::new()),
        _ => {}
    }
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    Some(parts)
}
