//! Rust source read as text, the way the structure checks need it: with
//! comments and literals blanked out (so a path in a doc comment or a brace
//! in a string is no code), and the inline modules it declares.

/// The code of a source file: every character of a comment or of a string
/// or char literal replaced by a space, newlines kept, so positions and
/// line numbers are the file's own.
pub(crate) struct Code {
    chars: Vec<char>,
}

/// An inline module (`mod name { … }`) of a file.
pub(crate) struct InlineModule {
    pub name: String,
    /// Char positions of its `{` and `}`.
    pub open: usize,
    pub close: usize,
    /// The line of its first attribute (or of `mod` without one), 1-based.
    pub first_line: usize,
    /// The line of its `}`, 1-based.
    pub last_line: usize,
    /// Declared under `#[cfg(test)]`.
    pub test_only: bool,
}

/// An out-of-line module declaration (`mod name;`) of a file.
pub(crate) struct ModuleDeclaration {
    pub name: String,
    /// Declared under `#[cfg(test)]`.
    pub test_only: bool,
}

impl Code {
    /// `text` with its comments and literals blanked.
    pub fn new(text: &str) -> Code {
        Code { chars: blank(text) }
    }

    pub fn chars(&self) -> &[char] {
        &self.chars
    }

    /// The 1-based line of the char at `pos`.
    pub fn line_of(&self, pos: usize) -> usize {
        1 + self.chars[..pos.min(self.chars.len())]
            .iter()
            .filter(|&&c| c == '\n')
            .count()
    }

    /// The number of lines of the file.
    pub fn lines(&self) -> usize {
        let newlines = self.chars.iter().filter(|&&c| c == '\n').count();
        match self.chars.last() {
            None => 0,
            Some('\n') => newlines,
            Some(_) => newlines + 1,
        }
    }

    /// The identifier starting at `pos` (empty if none does).
    pub fn ident_at(&self, pos: usize) -> String {
        self.chars[pos.min(self.chars.len())..]
            .iter()
            .take_while(|c| is_ident(**c))
            .collect()
    }

    /// Whether the whole word `word` stands at `pos` (not inside a longer
    /// identifier).
    pub fn word_at(&self, pos: usize, word: &str) -> bool {
        let end = pos + word.chars().count();
        end <= self.chars.len()
            && self.chars[pos..end].iter().copied().eq(word.chars())
            && (pos == 0 || !is_ident(self.chars[pos - 1]))
            && self.chars.get(end).is_none_or(|c| !is_ident(*c))
    }

    /// The first position at or after `pos` that is not whitespace.
    pub fn skip_space(&self, mut pos: usize) -> usize {
        while self.chars.get(pos).is_some_and(|c| c.is_whitespace()) {
            pos += 1;
        }
        pos
    }

    /// The position of the brace closing the one at `open`.
    pub fn closing(&self, open: usize) -> Option<usize> {
        let mut depth = 0usize;
        for (i, c) in self.chars.iter().enumerate().skip(open) {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i);
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// The modules the file declares, inline (`mod a { … }`) and out of
    /// line (`mod a;`), each with whether `#[cfg(test)]` is among its
    /// attributes.
    pub fn modules(&self) -> (Vec<InlineModule>, Vec<ModuleDeclaration>) {
        let (mut inline, mut declared) = (Vec::new(), Vec::new());
        for pos in 0..self.chars.len() {
            if !self.word_at(pos, "mod") {
                continue;
            }
            let name_at = self.skip_space(pos + 3);
            let name = self.ident_at(name_at);
            if name.is_empty() {
                continue;
            }
            let after = self.skip_space(name_at + name.chars().count());
            let (first, test_only) = self.attributes_before(pos);
            match self.chars.get(after) {
                Some(';') => declared.push(ModuleDeclaration { name, test_only }),
                Some('{') => {
                    let Some(close) = self.closing(after) else {
                        continue;
                    };
                    inline.push(InlineModule {
                        name,
                        open: after,
                        close,
                        first_line: self.line_of(first),
                        last_line: self.line_of(close),
                        test_only,
                    });
                }
                _ => {}
            }
        }
        (inline, declared)
    }

    /// Walks back from the item keyword at `pos` over its visibility and
    /// attributes: where the item starts, and whether one attribute is
    /// `#[cfg(test)]`.
    fn attributes_before(&self, pos: usize) -> (usize, bool) {
        let mut start = pos;
        let mut test_only = false;
        loop {
            let mut back = start;
            while back > 0 && self.chars[back - 1].is_whitespace() {
                back -= 1;
            }
            let before: String = self.chars[..back].iter().collect();
            // `pub`, `pub(crate)`, `pub(super)`, `pub(in path)`.
            if let Some(rest) = before.strip_suffix("pub")
                && rest.chars().last().is_none_or(|c| !is_ident(c))
            {
                start = back - 3;
                continue;
            }
            if before.ends_with(')')
                && let Some(open) = before.rfind("pub(")
                && !before[open + 4..before.len() - 1].contains(['(', ')', ';', '{', '}'])
            {
                start = before[..open].chars().count();
                continue;
            }
            // An attribute `#[…]` (brackets inside it balanced).
            if before.ends_with(']') {
                let mut depth = 0usize;
                let mut open = None;
                for (i, c) in self.chars[..back].iter().enumerate().rev() {
                    match c {
                        ']' => depth += 1,
                        '[' => {
                            depth -= 1;
                            if depth == 0 {
                                open = Some(i);
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                if let Some(open) = open.filter(|&o| o > 0 && self.chars[o - 1] == '#') {
                    let attribute: String = self.chars[open + 1..back - 1]
                        .iter()
                        .filter(|c| !c.is_whitespace())
                        .collect();
                    test_only |= attribute == "cfg(test)";
                    start = open - 1;
                    continue;
                }
            }
            return (start, test_only);
        }
    }

    /// Whether the file declares itself test-only (`#![cfg(test)]`).
    pub fn test_only_inner_attribute(&self) -> bool {
        let code: String = self.chars.iter().filter(|c| !c.is_whitespace()).collect();
        code.contains("#![cfg(test)]")
    }
}

pub(crate) fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `text` with comments, string literals and char literals blanked.
fn blank(text: &str) -> Vec<char> {
    let src: Vec<char> = text.chars().collect();
    let mut out = src.clone();
    let mut i = 0;
    let wipe = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in &mut out[from..to.min(src.len())] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    while i < src.len() {
        let c = src[i];
        let next = src.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            let end = src[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(src.len(), |n| i + n);
            wipe(&mut out, i, end);
            i = end;
        } else if c == '/' && next == Some('*') {
            let (mut depth, mut j) = (1, i + 2);
            while j < src.len() && depth > 0 {
                if src[j] == '/' && src.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if src[j] == '*' && src.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            wipe(&mut out, i, j);
            i = j;
        } else if let Some(end) = raw_string_end(&src, i) {
            wipe(&mut out, i, end);
            i = end;
        } else if c == '"' {
            let mut j = i + 1;
            while j < src.len() && src[j] != '"' {
                j += if src[j] == '\\' { 2 } else { 1 };
            }
            wipe(&mut out, i, j + 1);
            i = j + 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{7f}'), not a lifetime ('a).
            let end = if next == Some('\\') {
                // The escaped char may be a quote itself ('\'').
                src.get(i + 3..)
                    .unwrap_or_default()
                    .iter()
                    .position(|&c| c == '\'')
                    .map(|n| i + 3 + n + 1)
            } else if src.get(i + 2) == Some(&'\'') {
                Some(i + 3)
            } else {
                None
            };
            match end {
                Some(end) => {
                    wipe(&mut out, i, end);
                    i = end;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Where the raw string literal (`r"…"`, `r#"…"#`, `br#"…"#`) starting
/// at `i` ends, if one does.
fn raw_string_end(src: &[char], i: usize) -> Option<usize> {
    let start = if src[i] == 'b' || src[i] == 'c' {
        i + 1
    } else {
        i
    };
    if src.get(start) != Some(&'r') || (i > 0 && is_ident(src[i - 1])) {
        return None;
    }
    let hashes = src[start + 1..].iter().take_while(|&&c| c == '#').count();
    let quote = start + 1 + hashes;
    if src.get(quote) != Some(&'"') {
        return None;
    }
    let mut j = quote + 1;
    while j < src.len() {
        if src[j] == '"'
            && src[j + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == '#')
                .count()
                == hashes
        {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(src.len())
}
