//! Source files short enough to read whole. Tests do not count: a file
//! named `tests.rs`, under a `tests/` folder, or of a module compiled only
//! for tests (`#[cfg(test)] mod fuzz;`, `#![cfg(test)]`), and in any other
//! file the inline `#[cfg(test)] mod … { … }` blocks.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use super::code::Code;
use super::tree::source_files;

/// The house's bound on a source file, in lines of code outside tests.
pub const MAX_LINES: usize = 800;

/// A source file over the bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LongFile {
    pub path: PathBuf,
    /// Its lines, those of inline test modules not counted.
    pub lines: usize,
}

impl fmt::Display for LongFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} lines", self.path.display(), self.lines)
    }
}

/// The source files under `src` with more than `limit` lines outside
/// tests, in path order.
pub fn long_files(src: &Path, limit: usize) -> Vec<LongFile> {
    let files = source_files(src);
    let texts: Vec<Code> = files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f.path)
                .unwrap_or_else(|e| panic!("{}: {e}", f.path.display()));
            Code::new(&text)
        })
        .collect();
    // Module → whether its file marks it, or its parent declares it, as
    // compiled only for tests.
    let mut test_only: BTreeMap<Vec<String>, bool> = BTreeMap::new();
    for (file, code) in files.iter().zip(&texts) {
        let Some(module) = &file.module else {
            continue;
        };
        if code.test_only_inner_attribute() {
            test_only.insert(module.clone(), true);
        }
        for declared in code.modules().1 {
            let mut child = module.clone();
            child.push(declared.name);
            *test_only.entry(child).or_default() |= declared.test_only;
        }
    }
    let mut long = Vec::new();
    for (file, code) in files.iter().zip(&texts) {
        let relative = file.path.strip_prefix(src).expect("under src");
        let named_as_tests = relative
            .components()
            .any(|c| c.as_os_str() == "tests" || c.as_os_str() == "tests.rs");
        let in_test_module = file.module.as_ref().is_some_and(|m| {
            (1..=m.len()).any(|n| test_only.get(&m[..n]).copied().unwrap_or(false))
        });
        if named_as_tests || in_test_module || code.test_only_inner_attribute() {
            continue;
        }
        let lines = counted_lines(code);
        if lines > limit {
            long.push(LongFile {
                path: file.path.clone(),
                lines,
            });
        }
    }
    long
}

/// The lines of `code` outside its inline `#[cfg(test)]` modules (from
/// their first attribute to their closing brace).
fn counted_lines(code: &Code) -> usize {
    let (inline, _) = code.modules();
    let mut tests: Vec<(usize, usize)> = inline
        .iter()
        .filter(|m| m.test_only)
        .map(|m| (m.first_line, m.last_line))
        .collect();
    tests.sort_unstable();
    // Nested test modules lie within their parent's lines.
    let mut excluded = 0;
    let mut covered_to = 0;
    for (first, last) in tests {
        let first = first.max(covered_to + 1);
        if last >= first {
            excluded += last - first + 1;
            covered_to = last;
        }
    }
    code.lines() - excluded
}
