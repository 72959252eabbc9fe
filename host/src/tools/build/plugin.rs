//! Building a plugin directory: its language from its project file, the
//! build of that language, and the check that the result is a component;
//! and the output conventions read backwards, for `wasmctrl dev`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::error::{BuildError, io_error};
use super::javascript::{build_javascript, prewarm_javascript};
use super::language::Language;
use super::options::{BuildOptions, Built};
use super::python::build_python;
use super::rust::{WASM_TARGET, build_rust};

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
/// A relative `component` is taken from the current directory, and the
/// source returned is absolute (a config in the current directory names
/// `target/…`, whose project is `.`, not an empty path).
pub fn source_of(component: &Path) -> Option<(PathBuf, BuildOptions)> {
    let component = std::path::absolute(component).ok()?;
    let parent = component.parent()?;
    if parent.file_name()? == "target" {
        let dir = parent.parent()?;
        for language in [Language::Python, Language::JavaScript] {
            if dir.join(language.project_file()).is_file() {
                let options = BuildOptions {
                    out: Some(component.clone()),
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
        out: Some(component.clone()),
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

/// Warms up the tools of `options.session` for rebuilds of the plugin in
/// `dir` (see [`super::BuildSession`]): a JavaScript plugin's
/// componentize-js worker is started and run once on a stub. Nothing to do
/// for the other languages, or without a session.
pub fn prewarm(dir: &Path, options: &BuildOptions) -> Result<(), BuildError> {
    let Some(session) = &options.session else {
        return Ok(());
    };
    match detect(dir, options.language)? {
        Language::JavaScript if !session.js_worker_running() => {
            prewarm_javascript(options, session)
        }
        _ => Ok(()),
    }
}

/// Checks the file is a WebAssembly component (not a core module); its size.
pub(super) fn check_component(path: &Path) -> Result<u64, BuildError> {
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
