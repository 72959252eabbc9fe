//! What a build is asked for and what it yields.

use std::path::PathBuf;
use std::time::Duration;

use super::language::Language;
use super::warm::BuildSession;

/// How to build.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// Where to write the component (default: see the module docs).
    pub out: Option<PathBuf>,
    /// The language, when the directory has more than one project file.
    pub language: Option<Language>,
    /// The package to build when `dir` is a cargo workspace.
    pub package: Option<String>,
    /// The toolchain cache (default: [`toolchains_dir`](super::toolchain::toolchains_dir)).
    pub toolchains: Option<PathBuf>,
    /// Print progress (installs, steps) to stderr.
    pub verbose: bool,
    /// Warm toolchain processes to build in (repeated builds of a watch);
    /// none: every tool starts cold.
    pub session: Option<BuildSession>,
}

/// A built component.
#[derive(Debug, Clone)]
pub struct Built {
    pub language: Language,
    /// The plugin's name (package or project name).
    pub name: String,
    pub component: PathBuf,
    /// The component's size in bytes.
    pub size: u64,
    /// Whether a toolchain had to be installed for this build.
    pub installed_toolchain: bool,
    pub took: Duration,
}

pub(super) fn progress(options: &BuildOptions, message: &str) {
    if options.verbose {
        eprintln!("{message}");
    }
}
