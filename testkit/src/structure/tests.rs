//! The checks on small fixture trees, so that each can be seen to fail.

use std::path::Path;

use super::{MAX_LINES, long_files, sibling_cycles};

fn write(dir: &Path, file: &str, text: &str) {
    let path = dir.join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Each cycle as (parent, members).
fn cycles(src: &Path) -> Vec<(String, Vec<String>)> {
    sibling_cycles(src)
        .into_iter()
        .map(|c| (c.parent, c.members))
        .collect()
}

fn cycle(parent: &str, members: &[&str]) -> (String, Vec<String>) {
    (
        parent.to_string(),
        members.iter().map(|m| m.to_string()).collect(),
    )
}

#[test]
fn two_files_of_a_folder_importing_each_other_are_a_circle() {
    let src = tempfile::tempdir().unwrap();
    write(src.path(), "lib.rs", "pub mod m;\n");
    write(src.path(), "m/mod.rs", "mod a;\nmod b;\n");
    write(src.path(), "m/a.rs", "use super::b::Thing;\n");
    write(
        src.path(),
        "m/b.rs",
        "pub struct Thing;\nuse crate::m::a;\n",
    );
    let found = sibling_cycles(src.path());
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].parent, "crate::m");
    assert_eq!(found[0].members, ["a", "b"]);
    // The failure says where each import is made.
    let shown = found[0].to_string();
    assert!(
        shown.contains("a → b") && shown.contains("a.rs:1 `super::b::Thing`"),
        "{shown}"
    );
    assert!(
        shown.contains("b → a") && shown.contains("b.rs:2 `crate::m::a`"),
        "{shown}"
    );
}

#[test]
fn three_top_level_modules_in_a_circle_are_one_cycle() {
    let src = tempfile::tempdir().unwrap();
    write(
        src.path(),
        "lib.rs",
        "pub mod a;\npub mod b;\npub mod c;\npub mod d;\n",
    );
    write(src.path(), "a.rs", "use crate::b::inner::Thing;\n");
    write(src.path(), "b/mod.rs", "pub mod inner;\n");
    // A group, nested, and a comment that is no code.
    write(
        src.path(),
        "b/inner/deep.rs",
        "use crate::{d, c::{x, y as z}};\n// crate::a in a comment is no edge\n",
    );
    write(src.path(), "c.rs", "fn f() { crate::a::g(); }\n");
    write(src.path(), "d.rs", "const S: &str = \"crate::a::h\";\n");
    assert_eq!(cycles(src.path()), [cycle("crate", &["a", "b", "c"])]);
}

#[test]
fn super_climbs_from_where_the_code_is_inline_modules_included() {
    let src = tempfile::tempdir().unwrap();
    write(src.path(), "lib.rs", "mod p;\n");
    write(src.path(), "p/mod.rs", "mod a;\nmod b;\nmod c;\n");
    // `super::c` inside `a`'s inline test module is `a::c`, not the
    // sibling `c`; `super::super::b` from `a/x.rs` is the sibling `b`.
    write(
        src.path(),
        "p/a.rs",
        "mod x;\npub fn c() {}\n#[cfg(test)]\nmod tests {\n    use super::c;\n}\n",
    );
    write(src.path(), "p/a/x.rs", "use super::super::b;\n");
    write(src.path(), "p/b.rs", "use super::{self, a};\n");
    write(src.path(), "p/c.rs", "use super::a;\n");
    assert_eq!(cycles(src.path()), [cycle("crate::p", &["a", "b"])]);
}

#[test]
fn layers_that_import_only_downwards_form_no_cycle() {
    let src = tempfile::tempdir().unwrap();
    write(src.path(), "lib.rs", "pub mod high;\npub mod low;\n");
    write(src.path(), "low/mod.rs", "pub mod x;\npub mod y;\n");
    write(src.path(), "low/x.rs", "use super::y;\nuse crate::low;\n");
    write(src.path(), "low/y.rs", "pub fn f() {}\n");
    write(src.path(), "high/mod.rs", "use crate::low::x;\n");
    write(src.path(), "high/deep/y.rs", "use crate::{high, low::x};\n");
    // A binary's root is a crate of its own.
    write(src.path(), "main.rs", "mod low;\nuse crate::high;\n");
    write(src.path(), "bin/tool.rs", "use crate::low;\n");
    assert!(cycles(src.path()).is_empty());
}

fn lines(n: usize) -> String {
    (0..n)
        .map(|i| format!("const C{i}: u32 = {i};\n"))
        .collect()
}

#[test]
fn a_file_over_the_bound_is_named_with_its_length() {
    let src = tempfile::tempdir().unwrap();
    write(src.path(), "lib.rs", "mod long;\nmod short;\n");
    write(src.path(), "long.rs", &lines(MAX_LINES + 1));
    write(src.path(), "short.rs", &lines(MAX_LINES));
    let long = long_files(src.path(), MAX_LINES);
    assert_eq!(long.len(), 1, "{long:?}");
    assert!(long[0].path.ends_with("long.rs"));
    assert_eq!(long[0].lines, MAX_LINES + 1);
    assert!(
        long[0]
            .to_string()
            .ends_with(&format!("long.rs: {} lines", MAX_LINES + 1))
    );
}

#[test]
fn tests_do_not_count_toward_the_bound() {
    let src = tempfile::tempdir().unwrap();
    write(
        src.path(),
        "lib.rs",
        "mod a;\n#[cfg(test)]\nmod fuzz;\nmod marked;\n",
    );
    // 700 lines of code and an inline test module of 300.
    let braces = "#[cfg(test)]\nmod tests {\n    const S: &str = \"}\";\n";
    write(
        src.path(),
        "a.rs",
        &format!("{}{braces}{}}}\n", lines(700), lines(296)),
    );
    write(src.path(), "a/tests.rs", &lines(MAX_LINES + 1));
    write(src.path(), "a/tests/helpers.rs", &lines(MAX_LINES + 1));
    write(src.path(), "fuzz.rs", &lines(MAX_LINES + 1));
    write(src.path(), "fuzz/deep.rs", &lines(MAX_LINES + 1));
    write(
        src.path(),
        "marked.rs",
        &format!("#![cfg(test)]\n{}", lines(MAX_LINES + 1)),
    );
    let long = long_files(src.path(), MAX_LINES);
    assert!(long.is_empty(), "{long:?}");
    // Without the attribute the module is code.
    write(
        src.path(),
        "a.rs",
        &format!("{}mod tests {{\n{}}}\n", lines(700), lines(298)),
    );
    let long = long_files(src.path(), MAX_LINES);
    assert_eq!(long.len(), 1, "{long:?}");
    assert_eq!(long[0].lines, 1000);
}
