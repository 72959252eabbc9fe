//! The module paths a file's code names through `crate::`, `super::` and
//! `self::`, `use` groups (`use crate::{a, b::{c, d}}`) expanded, each
//! resolved to a path from the crate's root.

use super::code::{Code, InlineModule, is_ident};

/// A path the code names, resolved.
pub(crate) struct Reference {
    /// The 1-based line it is written on.
    pub line: usize,
    /// The module the code sits in: the file's module and the inline
    /// modules around it.
    pub from: Vec<String>,
    /// What it names, from the crate's root (`crate::a::B` is `[a, B]`).
    pub to: Vec<String>,
    /// How it is written, for messages (`super::b`).
    pub written: String,
}

/// The paths the code of the file of `module` names. Globs (`super::*`)
/// name the module they import from; what a glob brings in is not known
/// without compiling, so it is no edge to anything below it.
pub(crate) fn references(
    code: &Code,
    module: &[String],
    inline: &[InlineModule],
) -> Vec<Reference> {
    let chars = code.chars();
    let mut found = Vec::new();
    let mut pos = 0;
    while pos < chars.len() {
        let start = ["crate", "super", "self"]
            .into_iter()
            .find(|w| code.word_at(pos, w));
        let Some(word) = start else {
            pos += 1;
            continue;
        };
        let after = code.skip_space(pos + word.len());
        if !chars[after..].starts_with(&[':', ':']) {
            pos += word.len();
            continue;
        }
        let mut raw = Vec::new();
        let end = expand(code, pos, Vec::new(), &mut raw);
        let from = context(module, inline, pos);
        let line = code.line_of(pos);
        for path in raw {
            if let Some(to) = resolve(&from, &path) {
                found.push(Reference {
                    line,
                    from: from.clone(),
                    to,
                    written: path.join("::"),
                });
            }
        }
        pos = end.max(pos + 1);
    }
    found
}

/// The module the code at `pos` sits in.
fn context(module: &[String], inline: &[InlineModule], pos: usize) -> Vec<String> {
    let mut around: Vec<&InlineModule> = inline
        .iter()
        .filter(|m| m.open < pos && pos < m.close)
        .collect();
    around.sort_by_key(|m| m.open);
    module
        .iter()
        .cloned()
        .chain(around.into_iter().map(|m| m.name.clone()))
        .collect()
}

/// `path` (starting with `crate`, `self` or `super`s) written in module
/// `from`, from the crate's root; None if it climbs above the root.
fn resolve(from: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut segments = path.iter().peekable();
    let mut base: Vec<String> = match segments.next().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("self") => from.to_vec(),
        Some("super") => from[..from.len().checked_sub(1)?].to_vec(),
        _ => return None,
    };
    while segments.peek().is_some_and(|s| *s == "super") {
        segments.next();
        base.pop()?;
    }
    base.extend(segments.cloned());
    Some(base)
}

/// Reads the path at `pos` (segments, then possibly a `{ group }` or a
/// `*`) below `prefix` into `out`, one path per leaf; returns where the
/// path ends.
fn expand(code: &Code, pos: usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let chars = code.chars();
    let mut p = code.skip_space(pos);
    loop {
        match chars.get(p) {
            Some('{') => {
                let Some(close) = code.closing(p) else {
                    out.push(prefix);
                    return chars.len();
                };
                let mut q = p + 1;
                loop {
                    q = code.skip_space(q);
                    if q >= close {
                        break;
                    }
                    if chars[q] == ',' {
                        q += 1;
                        continue;
                    }
                    let end = expand(code, q, prefix.clone(), out);
                    q = next_item(code, end, close);
                }
                return close + 1;
            }
            Some('*') => {
                out.push(prefix);
                return p + 1;
            }
            Some(&c) if is_ident(c) => {
                let ident = code.ident_at(p);
                p += ident.chars().count();
                // `{self, …}` names the prefix itself.
                if ident != "self" || prefix.is_empty() {
                    prefix.push(ident);
                }
                let q = code.skip_space(p);
                if chars[q..].starts_with(&[':', ':']) {
                    p = code.skip_space(q + 2);
                    continue;
                }
                out.push(prefix);
                return p;
            }
            _ => {
                out.push(prefix);
                return p;
            }
        }
    }
}

/// Past what follows an item of a group (`as name`) up to its `,`, or
/// `close`.
fn next_item(code: &Code, from: usize, close: usize) -> usize {
    let chars = code.chars();
    let mut depth = 0usize;
    let mut q = from;
    while q < close {
        match chars[q] {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => return q + 1,
            _ => {}
        }
        q += 1;
    }
    close
}
