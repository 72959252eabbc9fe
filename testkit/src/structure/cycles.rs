//! Import cycles among sibling modules: the modules directly inside one
//! module (the top-level modules of a crate, the files and folders of one
//! folder). `a` imports its sibling `b` when code anywhere in `a` names a
//! path into `b` (`super::b::X` from `a.rs`, `crate::m::b` from
//! `a/deep.rs`); siblings that import each other, directly or round a
//! longer circle, cannot be read or tested one without the other.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use super::code::Code;
use super::paths::references;
use super::tree::source_files;

/// Sibling modules that import each other in a circle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    /// The module they are in, as code names it (`crate`,
    /// `crate::control`).
    pub parent: String,
    /// The modules of the circle (a strongly connected set), by name.
    pub members: Vec<String>,
    /// Each import between two members, with one place that makes it.
    pub edges: Vec<Edge>,
}

/// One module importing a sibling, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    pub from: String,
    pub to: String,
    /// The first place that names the sibling: file, 1-based line, and
    /// the path as written.
    pub file: PathBuf,
    pub line: usize,
    pub written: String,
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} import each other (in {}):",
            self.members.join(", "),
            self.parent
        )?;
        for e in &self.edges {
            write!(
                f,
                "\n  {} → {}: {}:{} `{}`",
                e.from,
                e.to,
                e.file.display(),
                e.line,
                e.written
            )?;
        }
        Ok(())
    }
}

/// The import cycles among sibling modules, at every level, of the crate
/// whose sources are in `src` (binaries' roots, `main.rs` and `bin/`,
/// are crates of their own and left out). Comments and literals are no
/// code; `use` groups count item by item. Empty when the modules of every
/// level form layers.
pub fn sibling_cycles(src: &Path) -> Vec<Cycle> {
    let files = source_files(src);
    let modules: BTreeSet<Vec<String>> = files
        .iter()
        .filter_map(|f| f.module.clone())
        .flat_map(|m| (1..=m.len()).map(move |n| m[..n].to_vec()))
        .collect();
    // parent → (from, to) → the first place that imports.
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<(String, String), Edge>> = BTreeMap::new();
    for file in &files {
        let Some(module) = &file.module else {
            continue;
        };
        let text = std::fs::read_to_string(&file.path)
            .unwrap_or_else(|e| panic!("{}: {e}", file.path.display()));
        let code = Code::new(&text);
        let (inline, _) = code.modules();
        for r in references(&code, module, &inline) {
            let common = r.from.iter().zip(&r.to).take_while(|(a, b)| a == b).count();
            // Siblings of files only: a file's own inline modules are no
            // files or folders.
            if common >= module.len() || common >= r.to.len() {
                continue;
            }
            if !modules.contains(&r.to[..=common]) {
                continue;
            }
            let (from, to) = (r.from[common].clone(), r.to[common].clone());
            graphs
                .entry(r.to[..common].to_vec())
                .or_default()
                .entry((from.clone(), to.clone()))
                .or_insert(Edge {
                    from,
                    to,
                    file: file.path.clone(),
                    line: r.line,
                    written: r.written,
                });
        }
    }
    let mut cycles = Vec::new();
    for (parent, edges) in graphs {
        for members in strongly_connected(&edges) {
            cycles.push(Cycle {
                parent: std::iter::once("crate".to_string())
                    .chain(parent.iter().cloned())
                    .collect::<Vec<_>>()
                    .join("::"),
                edges: edges
                    .values()
                    .filter(|e| members.contains(&e.from) && members.contains(&e.to))
                    .cloned()
                    .collect(),
                members: members.into_iter().collect(),
            });
        }
    }
    cycles
}

/// The sets of more than one node of the graph `edges` in which every
/// node reaches every other (Tarjan's algorithm).
fn strongly_connected(edges: &BTreeMap<(String, String), Edge>) -> Vec<BTreeSet<String>> {
    struct Walk<'a> {
        next: BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<BTreeSet<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.next.get(v).cloned().unwrap_or_default() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut set = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    set.insert(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if set.len() > 1 {
                    self.found.push(set);
                }
            }
        }
    }
    let mut walk = Walk {
        next: BTreeMap::new(),
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for (from, to) in edges.keys() {
        walk.next.entry(from).or_default().push(to);
        walk.next.entry(to).or_default();
    }
    let nodes: Vec<&str> = walk.next.keys().copied().collect();
    for v in nodes {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found.sort();
    walk.found
}
