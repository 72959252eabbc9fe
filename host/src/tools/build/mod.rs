//! `wasmctrl build`: turn a plugin directory into a component of the
//! `wasmctrl:reconciler@0.1.1` world, whatever language it is written in.
//!
//! The language is detected from the project file in the directory:
//!
//! | file | language | toolchain |
//! |---|---|---|
//! | `Cargo.toml` | Rust | `cargo build --release --target wasm32-wasip2` |
//! | `pyproject.toml` | Python | componentize-py [`COMPONENTIZE_PY`] in a venv |
//! | `package.json` | JavaScript / TypeScript | tsc (type-check), esbuild (bundle), componentize-js |
//!
//! # Toolchains
//! The Python and JavaScript tools are installed on first use into a cache
//! outside the repository ([`toolchains_dir`]): a venv with componentize-py,
//! and an npm prefix with componentize-js, jco, typescript and esbuild, each
//! in a directory named after the pinned versions, so a second build
//! installs nothing and a version bump installs next to the old one. An
//! install is complete once its `.installed` marker exists; concurrent
//! builds serialise on a lock directory. A missing `python3`, `node` or
//! `npm`, or a failed download, is an error naming what is missing and how
//! to get it.
//!
//! The WIT world is the host's own (`wit/reconciler.wit`, embedded), written
//! to a temporary directory for each build: a guest is always built against
//! exactly the world this host checks.
//!
//! # Plugin configuration
//! - Python (`pyproject.toml`): `[project] name`, and `[tool.wasmctrl]`
//!   `module` (the module that calls `wasmctrl_sdk.export`, default `app`)
//!   and `python-path` (directories componentize-py searches, relative to
//!   the file, default `["."]`).
//! - JavaScript/TypeScript (`package.json`): `name`, and `wasmctrl.entry`
//!   (the module that exports `metadata` and `reconcile`, default
//!   `src/index.ts`). With a `tsconfig.json`, the plugin is type-checked
//!   first. Dependencies resolve as a bundler resolves them (esbuild, with
//!   the tsconfig's `paths`); run `npm install` first if the plugin has any.
//!
//! Python and JavaScript components go to `<dir>/target/<name>.wasm` unless
//! told otherwise; Rust ones stay where cargo puts them.
//!
//! This module uses only `std`, `serde_json` and `thiserror`: the build
//! script of `plugins/artifacts` includes it as it is, so the test
//! components are built by the same code, through the same toolchain cache.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// The pinned componentize-py (PyPI).
pub const COMPONENTIZE_PY: &str = "0.25.1";
/// The pinned npm packages of the JavaScript toolchain.
pub const JS_TOOLS: [(&str, &str); 4] = [
    ("@bytecodealliance/componentize-js", "0.23.0"),
    ("@bytecodealliance/jco", "1.35.0"),
    ("typescript", "7.0.2"),
    ("esbuild", "0.28.2"),
];
/// The oldest Python that can create the venv and read `pyproject.toml`
/// (`tomllib`).
const MIN_PYTHON: (u32, u32) = (3, 11);
/// The oldest Node componentize-js is used with here.
const MIN_NODE: u32 = 20;
/// The world every plugin is built against.
const WIT: &str = include_str!("../../../../wit/reconciler.wit");
const WORLD: &str = "reconciler";
/// How long a build waits for another process's toolchain install.
const LOCK_WAIT: Duration = Duration::from_secs(15 * 60);
/// Output of a failed command kept in an error (its tail).
const OUTPUT_TAIL: usize = 8 << 10;
/// Bounds on what a project file may configure.
const MAX_PATH_ENTRIES: usize = 64;
const MAX_FIELD_LEN: usize = 4096;

/// The language of a plugin directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Rust,
    Python,
    /// JavaScript or TypeScript.
    JavaScript,
}

impl Language {
    /// The project file that marks a directory as this language.
    pub fn project_file(self) -> &'static str {
        match self {
            Language::Rust => "Cargo.toml",
            Language::Python => "pyproject.toml",
            Language::JavaScript => "package.json",
        }
    }

    fn all() -> [Language; 3] {
        [Language::Rust, Language::Python, Language::JavaScript]
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Language::Rust => "rust",
            Language::Python => "python",
            Language::JavaScript => "javascript",
        })
    }
}

impl std::str::FromStr for Language {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "rust" => Ok(Language::Rust),
            "python" => Ok(Language::Python),
            "javascript" | "typescript" | "js" | "ts" => Ok(Language::JavaScript),
            other => Err(format!(
                "unknown language {other:?} (rust, python, javascript or typescript)"
            )),
        }
    }
}

/// How to build.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// Where to write the component (default: see the module docs).
    pub out: Option<PathBuf>,
    /// The language, when the directory has more than one project file.
    pub language: Option<Language>,
    /// The package to build when `dir` is a cargo workspace.
    pub package: Option<String>,
    /// The toolchain cache (default: [`toolchains_dir`]).
    pub toolchains: Option<PathBuf>,
    /// Print progress (installs, steps) to stderr.
    pub verbose: bool,
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

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |source| BuildError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The toolchain cache: `$WASMCTRL_TOOLCHAINS`, else
/// `$XDG_CACHE_HOME/wasmctrl/toolchains`, else `~/.cache/wasmctrl/toolchains`.
pub fn toolchains_dir() -> Result<PathBuf, BuildError> {
    let set = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = set("WASMCTRL_TOOLCHAINS") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(cache) = set("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(cache).join("wasmctrl").join("toolchains"));
    }
    set("HOME")
        .map(|home| {
            PathBuf::from(home)
                .join(".cache")
                .join("wasmctrl")
                .join("toolchains")
        })
        .ok_or(BuildError::NoCacheDir)
}

/// The language of the plugin in `dir`, from its project file.
pub fn detect(dir: &Path, language: Option<Language>) -> Result<Language, BuildError> {
    if let Some(language) = language {
        return if dir.join(language.project_file()).is_file() {
            Ok(language)
        } else {
            Err(BuildError::NoProjectFile {
                dir: dir.to_path_buf(),
                language,
            })
        };
    }
    let found: Vec<Language> = Language::all()
        .into_iter()
        .filter(|l| dir.join(l.project_file()).is_file())
        .collect();
    match found.as_slice() {
        [] => Err(BuildError::NoProject {
            dir: dir.to_path_buf(),
        }),
        [one] => Ok(*one),
        many => Err(BuildError::Ambiguous {
            dir: dir.to_path_buf(),
            files: many
                .iter()
                .map(|l| l.project_file())
                .collect::<Vec<_>>()
                .join(" and "),
        }),
    }
}

/// Where the source of the component at `path` is, by the output
/// conventions: `<dir>/target/<name>.wasm` of a Python or JavaScript plugin
/// (what `wasmctrl build` writes by default), or
/// `<workspace>/target/wasm32-wasip2/release/<crate>.wasm` of a Rust crate.
/// Used by `wasmctrl dev` to build a plugin whose component is missing.
pub fn source_of(component: &Path) -> Option<(PathBuf, BuildOptions)> {
    let parent = component.parent()?;
    if parent.file_name()? == "target" {
        let dir = parent.parent()?;
        for language in [Language::Python, Language::JavaScript] {
            if dir.join(language.project_file()).is_file() {
                let options = BuildOptions {
                    out: Some(component.to_path_buf()),
                    language: Some(language),
                    ..BuildOptions::default()
                };
                return Some((dir.to_path_buf(), options));
            }
        }
    }
    let target = parent.parent().filter(|t| t.ends_with(WASM_TARGET))?;
    let workspace = target.parent()?.parent()?;
    let krate = component.file_stem()?.to_string_lossy().replace('_', "-");
    let options = BuildOptions {
        out: Some(component.to_path_buf()),
        language: Some(Language::Rust),
        package: Some(krate),
        ..BuildOptions::default()
    };
    Some((workspace.to_path_buf(), options))
}

/// Builds the plugin in `dir` to a component; see the module docs.
pub fn build(dir: &Path, options: &BuildOptions) -> Result<Built, BuildError> {
    let started = Instant::now();
    let dir = std::path::absolute(dir).map_err(io_error(dir))?;
    let language = detect(&dir, options.language)?;
    let (name, component, installed_toolchain) = match language {
        Language::Rust => {
            let (name, component) = build_rust(&dir, options)?;
            (name, component, false)
        }
        Language::Python => build_python(&dir, options)?,
        Language::JavaScript => build_javascript(&dir, options)?,
    };
    let size = check_component(&component)?;
    Ok(Built {
        language,
        name,
        component,
        size,
        installed_toolchain,
        took: started.elapsed(),
    })
}

/// Checks the file is a WebAssembly component (not a core module); its size.
fn check_component(path: &Path) -> Result<u64, BuildError> {
    let bytes = std::fs::read(path).map_err(io_error(path))?;
    // `\0asm`, version 0x0d, layer 1: a component (a core module has layer 0).
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" || bytes[6..8] != [1, 0] {
        return Err(BuildError::Output {
            path: path.to_path_buf(),
            message: "not a WebAssembly component".into(),
        });
    }
    Ok(bytes.len() as u64)
}

fn progress(options: &BuildOptions, message: &str) {
    if options.verbose {
        eprintln!("{message}");
    }
}

// ---- Rust ----

/// The Rust target every plugin is built for.
pub const WASM_TARGET: &str = "wasm32-wasip2";

/// Makes sure the Rust toolchain that builds in `dir` has the
/// [`WASM_TARGET`] standard library, adding it with rustup when it does not.
///
/// `rust-toolchain.toml` naming the target is not enough on its own: rustup
/// adds a toolchain file's targets only when it installs the toolchain, so
/// a machine that already had `stable` builds without it and fails deep in
/// the first crate with "can't find crate for `std`". Returns whether the
/// target was added.
pub fn ensure_wasm_target(dir: &Path, options: &BuildOptions) -> Result<bool, BuildError> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    ensure_target(dir, &rustc, "rustup".as_ref(), options)
}

fn ensure_target(
    dir: &Path,
    rustc: &std::ffi::OsStr,
    rustup: &std::ffi::OsStr,
    options: &BuildOptions,
) -> Result<bool, BuildError> {
    let mut libdir = Command::new(rustc);
    libdir
        .current_dir(dir)
        .args(["--print", "target-libdir", "--target", WASM_TARGET]);
    let output = run(
        "rustc --print target-libdir",
        &mut libdir,
        Language::Rust,
        "rustc",
    )?;
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    if path.is_dir() {
        return Ok(false);
    }
    progress(
        options,
        &format!(
            "the {WASM_TARGET} target is not installed ({} is missing): adding it with rustup …",
            path.display()
        ),
    );
    let mut add = Command::new(rustup);
    add.current_dir(dir).args(["target", "add", WASM_TARGET]);
    run("rustup target add", &mut add, Language::Rust, "rustup").map_err(|e| match e {
        BuildError::MissingTool { problem, .. } => BuildError::MissingTool {
            tool: "rustup",
            language: Language::Rust,
            problem: format!(
                "the {WASM_TARGET} target is not installed ({} is missing) and {problem}",
                path.display()
            ),
            hint: "install the target's standard library for this Rust toolchain",
        },
        other => other,
    })?;
    if !path.is_dir() {
        return Err(BuildError::NoOutput {
            step: "rustup target add",
            path,
        });
    }
    Ok(true)
}

fn build_rust(dir: &Path, options: &BuildOptions) -> Result<(String, PathBuf), BuildError> {
    let manifest = dir.join("Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut metadata = Command::new(&cargo);
    metadata
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .arg("--manifest-path")
        .arg(&manifest);
    let output = run("cargo metadata", &mut metadata, Language::Rust, "cargo")?;
    let meta: serde_json::Value =
        serde_json::from_slice(&output.stdout).map_err(|e| BuildError::Config {
            file: manifest.clone(),
            message: format!("unreadable `cargo metadata` output: {e}"),
        })?;
    let packages = meta["packages"].as_array().cloned().unwrap_or_default();
    let manifest_real = std::fs::canonicalize(&manifest).map_err(io_error(&manifest))?;
    let package = match &options.package {
        Some(name) => packages.iter().find(|p| p["name"] == name.as_str()),
        None => packages.iter().find(|p| {
            p["manifest_path"]
                .as_str()
                .and_then(|m| std::fs::canonicalize(m).ok())
                .is_some_and(|m| m == manifest_real)
        }),
    }
    .ok_or_else(|| BuildError::Config {
        file: manifest.clone(),
        message: match &options.package {
            Some(name) => format!("the workspace has no package {name:?}"),
            None => "a workspace without a package: build the plugin crate's directory (or pass --package)".into(),
        },
    })?;
    let name = package["name"].as_str().unwrap_or_default().to_string();
    let lib = package["targets"]
        .as_array()
        .and_then(|targets| {
            targets.iter().find(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "cdylib"))
            })
        })
        .and_then(|t| t["name"].as_str())
        .ok_or_else(|| BuildError::Config {
            file: manifest.clone(),
            message: format!(
                "package {name:?} has no cdylib target: a plugin crate needs `[lib] crate-type = [\"cdylib\"]`"
            ),
        })?
        .replace('-', "_");
    let target_dir = PathBuf::from(meta["target_directory"].as_str().unwrap_or("target"));
    ensure_wasm_target(dir, options)?;
    progress(options, &format!("building {name} with cargo …"));
    let mut cmd = Command::new(&cargo);
    cmd.args(["build", "--release", "--target", WASM_TARGET])
        .arg("--manifest-path")
        .arg(&manifest)
        .args(["-p", &name]);
    run("cargo build", &mut cmd, Language::Rust, "cargo")?;
    let built = target_dir
        .join(WASM_TARGET)
        .join("release")
        .join(format!("{lib}.wasm"));
    if !built.is_file() {
        return Err(BuildError::NoOutput {
            step: "cargo build",
            path: built,
        });
    }
    let component = match &options.out {
        Some(out) if !same_file(out, &built) => {
            copy_to(&built, out)?;
            out.clone()
        }
        _ => built,
    };
    Ok((name, component))
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn copy_to(from: &Path, to: &Path) -> Result<(), BuildError> {
    if let Some(parent) = to.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io_error(parent))?;
    }
    std::fs::copy(from, to).map_err(io_error(to))?;
    Ok(())
}

// ---- Python ----

/// Reads `[project] name` and `[tool.wasmctrl]` with the venv's Python
/// (`tomllib`): JSON on stdout.
const READ_PYPROJECT: &str = r#"
import json, sys, tomllib
with open(sys.argv[1], "rb") as f:
    data = tomllib.load(f)
print(json.dumps({"name": data.get("project", {}).get("name"),
                  "wasmctrl": data.get("tool", {}).get("wasmctrl", {})}))
"#;

fn build_python(dir: &Path, options: &BuildOptions) -> Result<(String, PathBuf, bool), BuildError> {
    let root = match &options.toolchains {
        Some(root) => root.clone(),
        None => toolchains_dir()?,
    };
    let (venv, installed) = python_toolchain(&root, options)?;
    let python = venv.join("bin").join("python");
    let pyproject = dir.join("pyproject.toml");
    let mut read = Command::new(&python);
    read.arg("-c").arg(READ_PYPROJECT).arg(&pyproject);
    let output = run(
        "reading pyproject.toml",
        &mut read,
        Language::Python,
        "python3",
    )?;
    let config: serde_json::Value =
        serde_json::from_slice(&output.stdout).map_err(|e| BuildError::Config {
            file: pyproject.clone(),
            message: format!("cannot read it: {e}"),
        })?;
    let config_error = |message: String| BuildError::Config {
        file: pyproject.clone(),
        message,
    };
    let name = match &config["name"] {
        serde_json::Value::String(s) => file_stem_of(s)
            .ok_or_else(|| config_error(format!("[project] name {s:?} is not a usable name")))?,
        serde_json::Value::Null => "plugin".to_string(),
        other => {
            return Err(config_error(format!(
                "[project] name is {other}, not a string"
            )));
        }
    };
    let tool = &config["wasmctrl"];
    let module = match &tool["module"] {
        serde_json::Value::Null => "app".to_string(),
        serde_json::Value::String(m) if is_module_name(m) => m.clone(),
        other => {
            return Err(config_error(format!(
                "[tool.wasmctrl] module must be a Python module name (like `webapp` or `pkg.app`), not {other}"
            )));
        }
    };
    let paths = string_list(&tool["python-path"], "[tool.wasmctrl] python-path")
        .map_err(&config_error)?
        .unwrap_or_else(|| vec![".".into()]);
    let mut search = Vec::new();
    for p in &paths {
        let path = dir.join(p);
        if !path.is_dir() {
            return Err(config_error(format!(
                "[tool.wasmctrl] python-path entry {p:?} is not a directory ({})",
                path.display()
            )));
        }
        search.push(path);
    }
    let out = options
        .out
        .clone()
        .unwrap_or_else(|| dir.join("target").join(format!("{name}.wasm")));
    prepare_out(&out)?;
    let wit = TempDir::new("wit")?;
    let wit_file = wit.path.join("reconciler.wit");
    std::fs::write(&wit_file, WIT).map_err(io_error(&wit_file))?;
    progress(
        options,
        &format!("componentizing {module} with componentize-py {COMPONENTIZE_PY} …"),
    );
    let mut cmd = Command::new(venv.join("bin").join("componentize-py"));
    cmd.current_dir(dir)
        .arg("-d")
        .arg(&wit.path)
        .args(["-w", WORLD, "componentize", &module]);
    for p in &search {
        cmd.arg("-p").arg(p);
    }
    cmd.arg("-o").arg(&out);
    run("componentize-py", &mut cmd, Language::Python, "python3")?;
    if !out.is_file() {
        return Err(BuildError::NoOutput {
            step: "componentize-py",
            path: out,
        });
    }
    Ok((name, out, installed))
}

/// The venv with componentize-py, installed if missing; whether it was.
fn python_toolchain(root: &Path, options: &BuildOptions) -> Result<(PathBuf, bool), BuildError> {
    let dir = root.join(format!("componentize-py-{COMPONENTIZE_PY}"));
    ensure_installed(&dir, |dir| {
        let python = find_python()?;
        progress(
            options,
            &format!(
                "installing componentize-py {COMPONENTIZE_PY} into {} (once) …",
                dir.display()
            ),
        );
        let mut venv = Command::new(&python);
        venv.args(["-m", "venv"]).arg(dir);
        let output = venv.output().map_err(|e| missing_python(e.to_string()))?;
        if !output.status.success() {
            return Err(BuildError::MissingTool {
                tool: "python3",
                language: Language::Python,
                problem: format!(
                    "`python3 -m venv` failed ({}): {}",
                    output.status,
                    tail(&output)
                ),
                hint: "install the venv module (Debian: apt-get install python3-venv)",
            });
        }
        let mut pip = Command::new(dir.join("bin").join("python"));
        pip.args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--quiet",
        ])
        .arg(format!("componentize-py=={COMPONENTIZE_PY}"));
        install_step(
            &format!("componentize-py {COMPONENTIZE_PY} (pip)"),
            dir,
            &mut pip,
        )
    })
}

/// `python3` on PATH, at least [`MIN_PYTHON`].
fn find_python() -> Result<String, BuildError> {
    let python = "python3".to_string();
    let output = Command::new(&python)
        .args(["-c", "import sys; print('%d %d' % sys.version_info[:2])"])
        .output()
        .map_err(|e| missing_python(e.to_string()))?;
    let version = String::from_utf8_lossy(&output.stdout);
    let mut parts = version.split_whitespace().map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) if (major, minor) >= MIN_PYTHON => Ok(python),
        (Some(major), Some(minor)) => Err(missing_python(format!(
            "it is Python {major}.{minor}, older than {}.{}",
            MIN_PYTHON.0, MIN_PYTHON.1
        ))),
        _ => Err(missing_python(format!(
            "`python3 -c` did not print its version ({})",
            output.status
        ))),
    }
}

fn missing_python(problem: String) -> BuildError {
    BuildError::MissingTool {
        tool: "python3",
        language: Language::Python,
        problem: if problem.contains("No such file") || problem.contains("not found") {
            "it is not on PATH".into()
        } else {
            problem
        },
        hint: "install Python 3.11 or newer with its venv module (Debian: apt-get install python3 python3-venv)",
    }
}

fn is_module_name(s: &str) -> bool {
    s.len() <= 256
        && s.split('.').all(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

// ---- JavaScript / TypeScript ----

fn build_javascript(
    dir: &Path,
    options: &BuildOptions,
) -> Result<(String, PathBuf, bool), BuildError> {
    let package_json = dir.join("package.json");
    let text = std::fs::read_to_string(&package_json).map_err(io_error(&package_json))?;
    let config_error = |message: String| BuildError::Config {
        file: package_json.clone(),
        message,
    };
    let package: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| config_error(format!("invalid JSON: {e}")))?;
    let name = match &package["name"] {
        serde_json::Value::String(s) => file_stem_of(s)
            .ok_or_else(|| config_error(format!("name {s:?} is not a usable name")))?,
        serde_json::Value::Null => "plugin".to_string(),
        other => return Err(config_error(format!("name is {other}, not a string"))),
    };
    let entry = match &package["wasmctrl"]["entry"] {
        serde_json::Value::Null => "src/index.ts".to_string(),
        serde_json::Value::String(e) if !e.is_empty() && e.len() <= MAX_FIELD_LEN => e.clone(),
        other => {
            return Err(config_error(format!(
                "wasmctrl.entry must be a path to the entry module, not {other}"
            )));
        }
    };
    let entry_path = dir.join(&entry);
    if !entry_path.is_file() {
        return Err(config_error(format!(
            "the entry module {entry:?} does not exist (set wasmctrl.entry)"
        )));
    }

    let root = match &options.toolchains {
        Some(root) => root.clone(),
        None => toolchains_dir()?,
    };
    let (tools, installed) = js_toolchain(&root, options)?;
    let bin = tools.join("node_modules").join(".bin");
    let tsconfig = dir.join("tsconfig.json");
    if tsconfig.is_file() {
        progress(options, "type-checking with tsc …");
        let mut tsc = Command::new(bin.join("tsc"));
        tsc.current_dir(dir)
            .arg("--noEmit")
            .arg("-p")
            .arg(&tsconfig);
        run_js("tsc (type check)", &mut tsc)?;
    }
    let work = TempDir::new("js")?;
    let bundle = work.path.join("plugin.js");
    progress(options, &format!("bundling {entry} with esbuild …"));
    let mut esbuild = Command::new(bin.join("esbuild"));
    esbuild
        .current_dir(dir)
        .arg(&entry)
        .args([
            "--bundle",
            "--format=esm",
            "--platform=neutral",
            "--target=es2022",
            "--main-fields=module,main",
            // The SDK's package points this condition at its TypeScript sources.
            "--conditions=wasmctrl-source",
            // The host's interfaces: componentize-js binds them.
            "--external:wasmctrl:*",
            "--log-level=warning",
        ])
        .arg(format!("--outfile={}", bundle.display()));
    if tsconfig.is_file() {
        esbuild.arg(format!("--tsconfig={}", tsconfig.display()));
    }
    run_js("esbuild (bundle)", &mut esbuild)?;
    let wit_file = work.path.join("reconciler.wit");
    std::fs::write(&wit_file, WIT).map_err(io_error(&wit_file))?;
    let out = options
        .out
        .clone()
        .unwrap_or_else(|| dir.join("target").join(format!("{name}.wasm")));
    prepare_out(&out)?;
    progress(options, "componentizing with componentize-js …");
    let mut componentize = Command::new(bin.join("componentize-js"));
    componentize
        .current_dir(&work.path)
        .arg(&bundle)
        .arg("--wit")
        .arg(&wit_file)
        .args(["-n", WORLD])
        // StarlingMonkey's http imports are not provided by the host.
        .args(["-d", "http", "fetch-event"])
        .arg("-o")
        .arg(&out);
    run_js("componentize-js", &mut componentize)?;
    if !out.is_file() {
        return Err(BuildError::NoOutput {
            step: "componentize-js",
            path: out,
        });
    }
    Ok((name, out, installed))
}

fn run_js(step: &'static str, cmd: &mut Command) -> Result<Output, BuildError> {
    run(step, cmd, Language::JavaScript, "node").map_err(|e| match e {
        BuildError::Step {
            step,
            command,
            status,
            output,
        } if output.contains("Could not resolve") || output.contains("Cannot find module") => {
            BuildError::Step {
                step,
                command,
                status,
                output: format!(
                    "{output}\n(if the plugin has npm dependencies, run `npm install` in its directory first)"
                ),
            }
        }
        other => other,
    })
}

/// The npm prefix with the JavaScript tools, installed if missing; whether it was.
fn js_toolchain(root: &Path, options: &BuildOptions) -> Result<(PathBuf, bool), BuildError> {
    let key: Vec<String> = JS_TOOLS
        .iter()
        .map(|(package, version)| {
            format!(
                "{}-{version}",
                package.rsplit('/').next().unwrap_or(package)
            )
        })
        .collect();
    let dir = root.join(format!("js-{}", key.join("-")));
    ensure_installed(&dir, |dir| {
        check_node()?;
        progress(
            options,
            &format!(
                "installing {} into {} (once) …",
                JS_TOOLS
                    .iter()
                    .map(|(p, v)| format!("{p}@{v}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                dir.display()
            ),
        );
        let mut npm = Command::new("npm");
        npm.arg("install")
            .arg("--prefix")
            .arg(dir)
            .args([
                "--no-audit",
                "--no-fund",
                "--no-update-notifier",
                "--save-exact",
                "--loglevel=error",
            ])
            .args(JS_TOOLS.iter().map(|(p, v)| format!("{p}@{v}")));
        install_step("the JavaScript toolchain (npm)", dir, &mut npm)
    })
}

fn check_node() -> Result<(), BuildError> {
    let hint = "install Node.js 20 or newer with npm (Debian: apt-get install nodejs npm)";
    let output = Command::new("node")
        .arg("--version")
        .output()
        .map_err(|_| BuildError::MissingTool {
            tool: "node",
            language: Language::JavaScript,
            problem: "it is not on PATH".into(),
            hint,
        })?;
    let version = String::from_utf8_lossy(&output.stdout);
    let major = version
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(m) if m >= MIN_NODE => {}
        _ => {
            return Err(BuildError::MissingTool {
                tool: "node",
                language: Language::JavaScript,
                problem: format!("it is {}, older than v{MIN_NODE}", version.trim()),
                hint,
            });
        }
    }
    match Command::new("npm").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err(BuildError::MissingTool {
            tool: "npm",
            language: Language::JavaScript,
            problem: "it is not on PATH".into(),
            hint,
        }),
    }
}

// ---- toolchain installs ----

/// Runs `install` into `dir` unless its `.installed` marker exists,
/// serialised with other builds by the lock directory `<dir>.lock`. A failed
/// install leaves nothing behind. Returns `dir` and whether it installed.
fn ensure_installed(
    dir: &Path,
    install: impl FnOnce(&Path) -> Result<(), BuildError>,
) -> Result<(PathBuf, bool), BuildError> {
    let marker = dir.join(".installed");
    if marker.is_file() {
        return Ok((dir.to_path_buf(), false));
    }
    let parent = dir.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io_error(parent))?;
    let lock = dir.with_extension("lock");
    let waited = Instant::now();
    loop {
        match std::fs::create_dir(&lock) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if marker.is_file() {
                    return Ok((dir.to_path_buf(), false));
                }
                // A lock older than the wait bound belongs to a build that died.
                let age = std::fs::metadata(&lock)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| SystemTime::now().duration_since(t).ok());
                if age.is_some_and(|a| a > LOCK_WAIT) {
                    let _ = std::fs::remove_dir(&lock);
                    continue;
                }
                if waited.elapsed() > LOCK_WAIT {
                    return Err(BuildError::LockTimeout {
                        dir: dir.to_path_buf(),
                        lock,
                    });
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(e) => return Err(io_error(&lock)(e)),
        }
    }
    let result = if marker.is_file() {
        Ok(false)
    } else {
        // Whatever a failed install left: start clean.
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(io_error(dir))?;
        }
        match install(dir) {
            Ok(()) => std::fs::write(&marker, b"")
                .map(|()| true)
                .map_err(io_error(&marker)),
            Err(e) => {
                let _ = std::fs::remove_dir_all(dir);
                Err(e)
            }
        }
    };
    let _ = std::fs::remove_dir(&lock);
    result.map(|installed| (dir.to_path_buf(), installed))
}

fn install_step(what: &str, dir: &Path, cmd: &mut Command) -> Result<(), BuildError> {
    let output = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| BuildError::Install {
            what: what.to_string(),
            dir: dir.to_path_buf(),
            status: "could not start".into(),
            output: e.to_string(),
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(BuildError::Install {
            what: what.to_string(),
            dir: dir.to_path_buf(),
            status: output.status.to_string(),
            output: tail(&output),
        })
    }
}

// ---- helpers ----

/// Runs a build step, capturing its output for the error.
fn run(
    step: &'static str,
    cmd: &mut Command,
    language: Language,
    tool: &'static str,
) -> Result<Output, BuildError> {
    let command = describe(cmd);
    let output = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => BuildError::MissingTool {
                tool,
                language,
                problem: format!("`{command}` could not be started ({e})"),
                hint: match language {
                    Language::Rust => "install Rust and `rustup target add wasm32-wasip2`",
                    Language::Python => "install Python 3.11 or newer with its venv module",
                    Language::JavaScript => "install Node.js 20 or newer with npm",
                },
            },
            _ => BuildError::Step {
                step,
                command: command.clone(),
                status: "could not start".into(),
                output: e.to_string(),
            },
        })?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(BuildError::Step {
            step,
            command,
            status: output.status.to_string(),
            output: tail(&output),
        })
    }
}

fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The end of a command's stderr and stdout, bounded.
fn tail(output: &Output) -> String {
    let mut text = String::from_utf8_lossy(&output.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !stdout.trim().is_empty() {
        text.push_str(&stdout);
    }
    let text = text.trim();
    if text.len() <= OUTPUT_TAIL {
        return text.to_string();
    }
    let mut start = text.len() - OUTPUT_TAIL;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

/// A file stem for a package name: its last `/` segment, with anything but
/// letters, digits, `_` and `-` replaced; None if nothing is left.
fn file_stem_of(name: &str) -> Option<String> {
    let last = name.rsplit('/').next()?;
    let stem: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    (!stem.trim_matches('_').is_empty() && stem.len() <= 128).then_some(stem.replace('-', "_"))
}

fn string_list(value: &serde_json::Value, what: &str) -> Result<Option<Vec<String>>, String> {
    match value {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::Array(items) if items.len() <= MAX_PATH_ENTRIES => items
            .iter()
            .map(|item| match item {
                serde_json::Value::String(s) if !s.is_empty() && s.len() <= MAX_FIELD_LEN => {
                    Ok(s.clone())
                }
                other => Err(format!("{what}: {other} is not a path")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        other => Err(format!(
            "{what} must be a list of at most {MAX_PATH_ENTRIES} paths, not {other}"
        )),
    }
}

fn prepare_out(out: &Path) -> Result<(), BuildError> {
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io_error(parent))?;
    }
    // A stale component must not pass for this build's output.
    match std::fs::remove_file(out) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error(out)(e)),
    }
}

/// A directory under the system temp dir, removed on drop.
struct TempDir {
    path: PathBuf,
}

impl TempDir {
    fn new(what: &str) -> Result<Self, BuildError> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "wasmctrl-build-{what}-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).map_err(io_error(&path))?;
        Ok(Self { path })
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(files: &[&str]) -> TempDir {
        let dir = TempDir::new("test").unwrap();
        for f in files {
            std::fs::write(dir.path.join(f), "").unwrap();
        }
        dir
    }

    #[test]
    fn the_language_comes_from_the_project_file() {
        for (file, language) in [
            ("Cargo.toml", Language::Rust),
            ("pyproject.toml", Language::Python),
            ("package.json", Language::JavaScript),
        ] {
            let dir = scratch(&[file]);
            assert_eq!(detect(&dir.path, None).unwrap(), language);
        }
        let none = scratch(&[]);
        let err = detect(&none.path, None).unwrap_err();
        assert!(
            err.to_string()
                .contains("no Cargo.toml, pyproject.toml or package.json"),
            "{err}"
        );
        let both = scratch(&["pyproject.toml", "package.json"]);
        let err = detect(&both.path, None).unwrap_err();
        assert!(err.to_string().contains("pass --lang"), "{err}");
        assert_eq!(
            detect(&both.path, Some(Language::Python)).unwrap(),
            Language::Python
        );
        let err = detect(&both.path, Some(Language::Rust)).unwrap_err();
        assert!(err.to_string().contains("no Cargo.toml"), "{err}");
    }

    #[test]
    fn dev_finds_the_source_of_a_missing_component() {
        let dir = scratch(&["pyproject.toml"]);
        let component = dir.path.join("target").join("webapp.wasm");
        let (source, options) = source_of(&component).unwrap();
        assert_eq!(source, dir.path);
        assert_eq!(options.language, Some(Language::Python));
        assert_eq!(options.out.as_deref(), Some(component.as_path()));

        let rust = Path::new("/ws/target/wasm32-wasip2/release/my_plugin.wasm");
        let (source, options) = source_of(rust).unwrap();
        assert_eq!(source, Path::new("/ws"));
        assert_eq!(options.package.as_deref(), Some("my-plugin"));
        assert_eq!(options.language, Some(Language::Rust));

        assert!(source_of(Path::new("/somewhere/plugin.wasm")).is_none());
    }

    #[test]
    fn names_and_modules_are_checked() {
        assert_eq!(
            file_stem_of("@wasmctrl/webapp-ts").as_deref(),
            Some("webapp_ts")
        );
        assert_eq!(file_stem_of("hello").as_deref(), Some("hello"));
        assert_eq!(file_stem_of("../.."), None);
        assert!(is_module_name("webapp"));
        assert!(is_module_name("pkg.app_1"));
        for bad in ["", "1x", "a..b", "a-b", "a/b"] {
            assert!(!is_module_name(bad), "{bad}");
        }
        let list = serde_json::json!([".", "../sdk"]);
        assert_eq!(
            string_list(&list, "p").unwrap(),
            Some(vec![".".to_string(), "../sdk".to_string()])
        );
        assert!(string_list(&serde_json::json!("."), "p").is_err());
        assert!(string_list(&serde_json::json!([1]), "p").is_err());
    }

    #[test]
    fn a_core_module_is_not_a_component() {
        let dir = scratch(&[]);
        let core = dir.path.join("core.wasm");
        std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
        assert!(check_component(&core).is_err());
        let component = dir.path.join("c.wasm");
        std::fs::write(&component, b"\0asm\x0d\0\x01\0").unwrap();
        assert_eq!(check_component(&component).unwrap(), 8);
    }

    #[test]
    fn an_install_that_fails_leaves_nothing_and_a_done_one_is_not_redone() {
        let root = scratch(&[]);
        let dir = root.path.join("tool-1.0");
        let err = ensure_installed(&dir, |d| {
            std::fs::create_dir_all(d).unwrap();
            Err(BuildError::NoCacheDir)
        })
        .unwrap_err();
        assert!(matches!(err, BuildError::NoCacheDir));
        assert!(!dir.exists() && !dir.with_extension("lock").exists());

        let (_, installed) =
            ensure_installed(&dir, |d| std::fs::create_dir_all(d).map_err(io_error(d))).unwrap();
        assert!(installed);
        let (_, installed) = ensure_installed(&dir, |_| panic!("installed twice")).unwrap();
        assert!(!installed);
    }

    /// An executable shell script in `dir`.
    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn a_missing_wasm_target_is_added_with_rustup_and_otherwise_named() {
        let root = scratch(&[]);
        let libdir = root.path.join("sysroot/lib/rustlib/wasm32-wasip2/lib");
        let rustc = script(&root.path, "rustc", &format!("echo {}", libdir.display()));
        let absent = root.path.join("no-rustup");
        let quiet = BuildOptions::default();
        let ensure = |rustup: &Path| {
            ensure_target(&root.path, rustc.as_os_str(), rustup.as_os_str(), &quiet)
        };

        // No rustup: the error says which target is missing and where.
        let err = ensure(&absent).unwrap_err().to_string();
        assert!(
            err.contains("`rustup`") && err.contains("wasm32-wasip2 target is not installed"),
            "{err}"
        );
        assert!(err.contains(&libdir.display().to_string()), "{err}");

        // A rustup that fails: its output is in the error.
        let failing = script(
            &root.path,
            "rustup-offline",
            "echo 'error: could not download' >&2; exit 1",
        );
        let err = ensure(&failing).unwrap_err().to_string();
        assert!(
            err.contains("rustup target add") && err.contains("could not download"),
            "{err}"
        );

        // A rustup that installs it, asked for exactly that target.
        let rustup = script(
            &root.path,
            "rustup",
            &format!(
                "[ \"$*\" = \"target add wasm32-wasip2\" ] || exit 3; mkdir -p {}",
                libdir.display()
            ),
        );
        assert!(ensure(&rustup).unwrap());
        // Installed: rustup is not asked again.
        assert!(!ensure(&absent).unwrap());
    }
}
