//! `wasmctrl new`: a plugin project that builds, tests and runs anywhere,
//! with no checkout of this repository and no SDK in a package registry.
//!
//! A project holds a reconciler skeleton for a custom kind (a finalizer, a
//! `Ready` condition with `observedGeneration`, and with `--owns` an owned
//! object per kind), its unit test against the SDK's fake API server, the
//! kind's CRD, a sample object, a host config granting exactly what the
//! skeleton's metadata declares, a README, and the SDK this binary carries
//! (`sdk`) under `vendor/`, at this binary's version.
//!
//! - `names`: the plugin's name and the custom kind, checked.
//! - `shape`: the spec, the ownable kinds and the permissions, from which
//!   every language's code, the CRD, the sample and the grant are made.
//! - `rust`, `python`, `typescript`: one module per language, each
//!   rendering its `templates/`.
//! - `sdk`: the embedded SDKs.

mod names;
mod python;
mod rust;
mod sdk;
mod shape;
#[cfg(test)]
mod tests;
mod typescript;

use std::path::{Path, PathBuf};

use crate::tools::build::Language;
use names::{CustomKind, PluginName};
pub use sdk::ManifestError;
use shape::OwnedKind;

/// What `wasmctrl new` is asked for.
#[derive(Debug, Clone)]
pub struct NewOptions {
    pub name: String,
    pub language: Language,
    /// `GROUP/VERSION/KIND`; default `NAME.example.com/v1alpha1/Name`.
    pub kind: Option<String>,
    /// Built-in kinds the skeleton owns an object of (`ConfigMap`, …).
    pub owns: Vec<String>,
    /// Where to write the project; default `./NAME`.
    pub dir: Option<PathBuf>,
}

/// A project written.
#[derive(Debug, Clone)]
pub struct Scaffolded {
    pub dir: PathBuf,
    /// `GROUP/VERSION/KIND`.
    pub kind: String,
    /// Where the build writes the component, relative to `dir`.
    pub component: String,
    pub files: usize,
}

/// Why a project could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    #[error("plugin name {name:?}: {why}")]
    Name { name: String, why: String },
    #[error("--kind {kind:?}: {why}")]
    Kind { kind: String, why: String },
    #[error("--owns {kind:?}: not a kind the skeleton can own; one of {known}")]
    Owns { kind: String, known: String },
    #[error("{dir}: already exists and is not empty; choose another --dir or name")]
    NotEmpty { dir: PathBuf },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Manifest(#[from] ManifestError),
}

/// The files of a project, relative to its directory, before any is written.
#[derive(Default)]
struct Project {
    files: Vec<(String, String)>,
}

impl Project {
    fn file(&mut self, path: &str, text: String) {
        self.files.push((path.to_string(), text));
    }
}

/// Writes the project `options` describes; see the module docs.
pub fn scaffold(options: &NewOptions) -> Result<Scaffolded, ScaffoldError> {
    let name = PluginName::parse(&options.name)?;
    if options.language == Language::Python {
        name.check_python()?;
    }
    let kind = CustomKind::parse(options.kind.as_deref(), &name)?;
    let mut owns: Vec<&'static OwnedKind> = Vec::new();
    for wanted in &options.owns {
        let owned = OwnedKind::find(wanted).ok_or_else(|| ScaffoldError::Owns {
            kind: wanted.clone(),
            known: shape::OWNABLE
                .iter()
                .map(|k| k.kind)
                .collect::<Vec<_>>()
                .join(", "),
        })?;
        if !owns.iter().any(|o| o.kind == owned.kind) {
            owns.push(owned);
        }
    }
    let dir = options
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&name.name));
    let project = files(&name, &kind, &owns, options.language)?;
    check_empty(&dir)?;
    for (path, text) in &project.0.files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io_error(parent))?;
        }
        std::fs::write(&path, text).map_err(io_error(&path))?;
    }
    if options.language == Language::Rust {
        format_rust(&dir);
    }
    Ok(Scaffolded {
        dir,
        kind: format!("{}/{}/{}", kind.group, kind.version, kind.kind),
        component: project.1,
        files: project.0.files.len(),
    })
}

/// Every file of the project, and where its build writes the component.
fn files(
    name: &PluginName,
    kind: &CustomKind,
    owns: &[&'static OwnedKind],
    language: Language,
) -> Result<(Project, String), ScaffoldError> {
    let permissions = shape::permissions(kind, owns);
    let skeleton = shape::Skeleton {
        name,
        kind,
        owns,
        permissions: &permissions,
    };
    let mut project = Project::default();
    let component = match language {
        Language::Rust => {
            rust::project(skeleton, &mut project)?;
            rust::component(name)
        }
        Language::Python => {
            python::project(skeleton, &mut project);
            format!("target/{}.wasm", name.snake)
        }
        Language::JavaScript => {
            typescript::project(skeleton, &mut project);
            format!("target/{}.wasm", name.snake)
        }
    };
    let interpreted = language != Language::Rust;
    project.file("crd.yaml", shape::crd(kind, name));
    project.file("sample.yaml", shape::sample(kind));
    project.file(
        "wasmctrl.yaml",
        shape::host_config(&component, interpreted, name, &permissions),
    );
    project.file("README.md", readme(name, kind, owns, language, &component));
    project.file(".gitignore", GITIGNORE.to_string());
    Ok((project, component))
}

const GITIGNORE: &str = "target/\n.wasmctrl/\nnode_modules/\nbuild/\ndist/\n__pycache__/\n";

fn readme(
    name: &PluginName,
    kind: &CustomKind,
    owns: &[&OwnedKind],
    language: Language,
    component: &str,
) -> String {
    let (source, test) = match language {
        Language::Rust => (
            "`src/lib.rs` (the reconciler), `src/tests.rs` (its unit test)".to_string(),
            "cargo test".to_string(),
        ),
        Language::Python => (
            format!(
                "`{}.py` (the reconciler), `tests/` (its unit test)",
                name.snake
            ),
            "python3 -m unittest".to_string(),
        ),
        Language::JavaScript => (
            format!(
                "`src/{}.ts` (the reconciler), `src/index.ts` (what the component exports), `test/` (its unit test)",
                name.name
            ),
            "npm install && npm test".to_string(),
        ),
    };
    let owned = if owns.is_empty() {
        String::new()
    } else {
        format!(
            "\nIt server-side applies a {} of the same name that it owns.",
            owns.iter()
                .map(|o| o.kind)
                .collect::<Vec<_>>()
                .join(" and a ")
        )
    };
    format!(
        r#"# {plugin}

A wasmctrl plugin that reconciles `{kind}` (`{group}/{version}`): it adds
the finalizer `{finalizer}` and sets a `Ready` condition with
`observedGeneration`.{owned} Made by `wasmctrl new`.

- {source}
- `crd.yaml` (the kind, generated from the spec and status the code reads and
  writes: change them together), `sample.yaml` (an object of the kind to
  try), `wasmctrl.yaml` (the host config; its grant is exactly what the
  plugin's metadata declares: change them together too)
- `vendor/`: the SDK of wasmctrl {sdk_version}, as `wasmctrl new` wrote it

```sh
{test:<47} # the unit test, against the SDK's fake API server
wasmctrl build .                                # the component: {component}
wasmctrl dev --config wasmctrl.yaml --apply .   # run it on an embedded API server, with the CRD and sample applied
```

Then, from another terminal:

```sh
export KUBECONFIG=$PWD/.wasmctrl/kubeconfig
kubectl get {singular} sample -o jsonpath='{{.status.conditions}}'   # Ready: True, observedGeneration 1
kubectl patch {singular} sample --type=merge -p '{{"spec":{{"message":"changed"}}}}'
kubectl get {singular} sample -o jsonpath='{{.status.conditions}}'   # the new message, observedGeneration 2
```

`wasmctrl dev` builds the plugin when its component is missing; rebuild with
`wasmctrl build .` after an edit, and the running host swaps the new
component in.
"#,
        plugin = name.name,
        kind = kind.kind,
        group = kind.group,
        version = kind.version,
        singular = kind.singular,
        finalizer = finalizer(kind),
        sdk_version = sdk::version(),
    )
}

/// The skeleton's finalizer: `<group>/cleanup`.
/// The reconciler's doc sentence about its owned objects, each line
/// after `prefix` (the language's doc comment marker); empty without any.
fn owned_doc(owns: &[&OwnedKind], prefix: &str) -> String {
    if owns.is_empty() {
        return String::new();
    }
    let kinds: Vec<&str> = owns.iter().map(|o| o.kind).collect();
    format!(
        "\n{prefix}It server-side applies its own {} of the same name,\n{prefix}owned through a controller reference.",
        kinds.join(" and ")
    )
}

fn finalizer(kind: &CustomKind) -> String {
    format!("{}/cleanup", kind.group)
}

/// The world every plugin is built against: the SDKs' bindings read it.
fn wit() -> &'static str {
    include_str!("../../../../wit/reconciler.wit")
}

/// `template` with each `{{key}}` replaced by its value.
fn render(template: &str, vars: &[(&str, String)]) -> String {
    let mut out = template.to_string();
    for (key, value) in vars {
        out = out.replace(&format!("{{{{{key}}}}}"), value);
    }
    out
}

/// Formats the generated Rust as `cargo fmt` would: the templates cannot
/// know how long the names they are given make a line. Best effort: without
/// rustfmt the code stays as generated, which compiles the same.
fn format_rust(dir: &Path) {
    let _ = std::process::Command::new("rustfmt")
        .current_dir(dir)
        .args(["--edition", "2024", "src/lib.rs"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

fn check_empty(dir: &Path) -> Result<(), ScaffoldError> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(ScaffoldError::NotEmpty {
                    dir: dir.to_path_buf(),
                });
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error(dir)(e)),
    }
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> ScaffoldError + '_ {
    move |source| ScaffoldError::Io {
        path: path.to_path_buf(),
        source,
    }
}
