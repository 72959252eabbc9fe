//! Rust plugins: cargo, for the wasm32-wasip2 target.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::command::run;
use super::error::{BuildError, io_error};
use super::language::Language;
use super::options::{BuildOptions, progress};

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

pub(super) fn ensure_target(
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

pub(super) fn build_rust(
    dir: &Path,
    options: &BuildOptions,
) -> Result<(String, PathBuf), BuildError> {
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
