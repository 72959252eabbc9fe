//! Why a plugin could not be built.

use std::path::{Path, PathBuf};

use super::language::Language;
use super::limits::LOCK_WAIT;

/// Why a plugin could not be built. Every variant says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(
        "{dir}: no Cargo.toml, pyproject.toml or package.json: not a plugin directory (Rust, Python or JavaScript/TypeScript)"
    )]
    NoProject { dir: PathBuf },
    #[error("{dir}: has {files}: pass --lang to say which to build")]
    Ambiguous { dir: PathBuf, files: String },
    #[error("{dir}: --lang {language} but there is no {file}", file = .language.project_file())]
    NoProjectFile { dir: PathBuf, language: Language },
    #[error("`{tool}` is needed to build {language} plugins but {problem}; {hint}")]
    MissingTool {
        tool: &'static str,
        language: Language,
        problem: String,
        hint: &'static str,
    },
    #[error("{file}: {message}")]
    Config { file: PathBuf, message: String },
    #[error(
        "installing {what} into {dir} failed ({status}); check the network and the registry, then build again:\n{output}"
    )]
    Install {
        what: String,
        dir: PathBuf,
        status: String,
        output: String,
    },
    #[error("{step} failed ({status}): {command}\n{output}")]
    Step {
        step: &'static str,
        command: String,
        status: String,
        output: String,
    },
    #[error("{step} did not produce {path}")]
    NoOutput { step: &'static str, path: PathBuf },
    #[error("{path}: {message}")]
    Output { path: PathBuf, message: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no toolchain cache directory: set WASMCTRL_TOOLCHAINS (or XDG_CACHE_HOME or HOME)")]
    NoCacheDir,
    #[error("{dir}: another build has been installing this toolchain for over {minutes} minutes; remove {lock} if no build is running", minutes = LOCK_WAIT.as_secs() / 60)]
    LockTimeout { dir: PathBuf, lock: PathBuf },
}

pub(super) fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |source| BuildError::Io {
        path: path.to_path_buf(),
        source,
    }
}
