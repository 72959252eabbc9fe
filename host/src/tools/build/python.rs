//! Python plugins: componentize-py, from a venv in the toolchain cache.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::command::{run, tail};
use super::componentize::{
    ADMISSION_WORLD, file_stem_of, prepare_out, publish, string_list, write_wit,
};
use super::error::BuildError;
use super::language::Language;
use super::options::{BuildOptions, progress};
use super::toolchain::{cache_root, ensure_installed, install_step};

/// The pinned componentize-py (PyPI).
pub const COMPONENTIZE_PY: &str = "0.25.1";
/// The oldest Python that can create the venv and read `pyproject.toml`
/// (`tomllib`).
const MIN_PYTHON: (u32, u32) = (3, 11);

/// Reads `[project] name` and `[tool.wasmctrl]` with the venv's Python
/// (`tomllib`): JSON on stdout.
const READ_PYPROJECT: &str = r#"
import json, sys, tomllib
with open(sys.argv[1], "rb") as f:
    data = tomllib.load(f)
print(json.dumps({"name": data.get("project", {}).get("name"),
                  "wasmctrl": data.get("tool", {}).get("wasmctrl", {})}))
"#;

pub(super) fn build_python(
    dir: &Path,
    options: &BuildOptions,
) -> Result<(String, PathBuf, bool), BuildError> {
    let root = cache_root(options)?;
    let (venv, installed) = python_toolchain(&root, options)?;
    let python = venv.join("bin").join("python");
    let pyproject = dir.join("pyproject.toml");
    // Isolated (`-I`): `-c` would otherwise put the current directory, the
    // project's, first on `sys.path`, and a `json.py` there would run
    // natively, outside the sandbox componentize-py runs the app in.
    let mut read = Command::new(&python);
    read.arg("-I")
        .arg("-c")
        .arg(READ_PYPROJECT)
        .arg(&pyproject)
        .current_dir(&root);
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
    let staged = prepare_out(&out)?;
    let wit = write_wit()?;
    progress(
        options,
        &format!("componentizing {module} with componentize-py {COMPONENTIZE_PY} …"),
    );
    let mut cmd = Command::new(venv.join("bin").join("componentize-py"));
    cmd.current_dir(dir).arg("-d").arg(&wit.path).args([
        "-w",
        ADMISSION_WORLD,
        "componentize",
        &module,
    ]);
    for p in &search {
        cmd.arg("-p").arg(p);
    }
    cmd.arg("-o").arg(&staged);
    // componentize-py is written in Rust: with RUST_BACKTRACE set where the
    // build runs, its errors end in some 60 frames about itself.
    cmd.env("RUST_BACKTRACE", "0")
        .env("RUST_LIB_BACKTRACE", "0");
    run("componentize-py", &mut cmd, Language::Python, "python3").map_err(|e| match e {
        BuildError::Step { ref output, .. } => match missing_module(output) {
            Some(missing) => config_error(missing_module_hint(&missing, &paths)),
            None => e,
        },
        other => other,
    })?;
    publish("componentize-py", &staged, &out)?;
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
        // Isolated and run from the toolchains' own directory, as above:
        // `-m` puts the current directory first on `sys.path`.
        let mut venv = Command::new(&python);
        venv.args(["-I", "-m", "venv"]).arg(dir).current_dir(root);
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
        pip.current_dir(root)
            .args([
                "-I",
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

/// The module a failed componentize-py could not import, from Python's
/// `ModuleNotFoundError: No module named 'x'`.
pub(super) fn missing_module(output: &str) -> Option<String> {
    const NEEDLE: &str = "ModuleNotFoundError: No module named '";
    let start = output.find(NEEDLE)? + NEEDLE.len();
    let name = &output[start..start + output[start..].find('\'')?];
    is_module_name(name).then(|| name.to_string())
}

/// One line saying what to do about a module componentize-py did not find.
pub(super) fn missing_module_hint(module: &str, paths: &[String]) -> String {
    let searched = paths.join(", ");
    if module.split('.').next() == Some("wasmctrl_sdk") {
        format!(
            "the SDK (module {module}) is not on [tool.wasmctrl] python-path ({searched}): add the directory that holds wasmctrl_sdk/ (`vendor` in a project of `wasmctrl new`, `../../guest-sdk-python` in this repository)"
        )
    } else {
        format!(
            "module {module} is not on [tool.wasmctrl] python-path ({searched}): add the directory that holds it"
        )
    }
}

pub(super) fn is_module_name(s: &str) -> bool {
    s.len() <= 256
        && s.split('.').all(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}
