//! The SDKs this binary carries, so a scaffold builds with no checkout of
//! the repository and no package registry holding the SDKs: each is a list
//! of (path, text) embedded at compile time, written into a project's
//! `vendor/` at the version of this binary. `tests::the_embedded_sdks_are_complete`
//! fails when a file is added to an SDK but not here.

/// `(path inside the SDK, text)`, paths relative to `$root` of the repository.
macro_rules! embed {
    ($root:literal: $($path:literal),* $(,)?) => {
        &[$(($path, include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../", $root, "/", $path)))),*]
    };
}

pub(super) type Files = &'static [(&'static str, &'static str)];

/// The Rust SDK, crate `wasmctrl-sdk`.
pub(super) const RUST_SDK: Files = embed!("guest-sdk":
    "Cargo.toml", "src/action.rs", "src/admission.rs", "src/api.rs", "src/conditions.rs",
    "src/context.rs",
    "src/error.rs", "src/events.rs", "src/finalizer.rs", "src/host.rs", "src/http.rs",
    "src/lib.rs", "src/log.rs", "src/metadata.rs", "src/resource.rs", "src/secrets.rs",
    "src/testing/admission.rs", "src/testing/fake.rs", "src/testing/fake/context.rs", "src/testing/fake/http.rs",
    "src/testing/fake/kube.rs", "src/testing/fake/secrets.rs", "src/testing/mod.rs",
    "src/testing/permissions.rs", "src/testing/state.rs", "src/testing/tests.rs",
    "src/testing/transcript.rs", "src/tests.rs",
);

/// `wasmctrl-apimachinery`, which the Rust SDK depends on.
pub(super) const APIMACHINERY: Files = embed!("apimachinery":
    "Cargo.toml", "src/json.rs", "src/lib.rs", "src/names.rs", "src/patch.rs",
    "src/patch/tests.rs", "src/selector.rs", "src/selector/tests.rs", "src/time.rs",
);

/// The Python SDK, package `wasmctrl_sdk`.
pub(super) const PYTHON_SDK: Files = embed!("guest-sdk-python":
    "wasmctrl_sdk/__init__.py", "wasmctrl_sdk/_host.py", "wasmctrl_sdk/_wit.py",
    "wasmctrl_sdk/admission.py",
    "wasmctrl_sdk/_wit_http.py", "wasmctrl_sdk/http.py",
    "wasmctrl_sdk/action.py", "wasmctrl_sdk/api.py", "wasmctrl_sdk/conditions.py",
    "wasmctrl_sdk/context.py", "wasmctrl_sdk/errors.py", "wasmctrl_sdk/events.py",
    "wasmctrl_sdk/finalizer.py", "wasmctrl_sdk/kinds.py", "wasmctrl_sdk/log.py",
    "wasmctrl_sdk/metadata.py", "wasmctrl_sdk/objects.py", "wasmctrl_sdk/reconciler.py",
    "wasmctrl_sdk/secrets.py", "wasmctrl_sdk/testing.py",
);

/// The TypeScript SDK, npm package `@wasmctrl/sdk`.
pub(super) const TYPESCRIPT_SDK: Files = embed!("guest-sdk-js":
    "README.md", "package.json", "tsconfig.json", "src/action.ts", "src/admission.ts", "src/api.ts",
    "src/component.ts", "src/conditions.ts", "src/context.ts", "src/errors.ts",
    "src/events.ts", "src/finalizer.ts", "src/host.ts", "src/http.ts", "src/index.ts",
    "src/kinds.ts", "src/log.ts", "src/metadata.ts", "src/objects.ts",
    "src/reconciler.ts", "src/secrets.ts", "src/testing.ts", "src/utf8.ts",
    "src/wit-imports.d.ts",
);

/// The workspace manifest, whose `[workspace.package]` and
/// `[workspace.dependencies]` the Rust crates inherit from.
const WORKSPACE: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"));

/// The versions the repository's own builds and tests resolved: a
/// scaffold starts from them rather than from whatever is newest.
pub(super) const CARGO_LOCK: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock"));

/// Why a crate's manifest cannot stand alone.
#[derive(Debug, thiserror::Error)]
#[error("the embedded {krate} manifest cannot be made standalone: {why}")]
pub struct ManifestError {
    krate: &'static str,
    why: String,
}

/// The manifest of `krate` without workspace inheritance: `x.workspace =
/// true` and `dep = { workspace = true }` take the workspace's values,
/// workspace path dependencies become `path_deps` (name → path), and
/// `[lints]` and `[dev-dependencies]` (the workspace's policy and the
/// crate's own tests) are left out.
pub(super) fn standalone_manifest(
    krate: &'static str,
    manifest: &str,
    path_deps: &[(&str, &str)],
) -> Result<String, ManifestError> {
    let error = |why: String| ManifestError { krate, why };
    let package = section_entries(WORKSPACE, "workspace.package");
    let dependencies = section_entries(WORKSPACE, "workspace.dependencies");
    let mut out = String::new();
    let mut section = String::new();
    for line in manifest.lines() {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            section = name.to_string();
        }
        if section == "lints" || section == "dev-dependencies" {
            continue;
        }
        let Some((key, value)) = trimmed.split_once('=') else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        if let Some(field) = key.strip_suffix(".workspace") {
            let inherited = package
                .iter()
                .find(|(k, _)| k == field)
                .ok_or_else(|| error(format!("the workspace has no package.{field}")))?;
            out.push_str(&format!("{field} = {}\n", inherited.1));
        } else if value == "{ workspace = true }" {
            if let Some((_, path)) = path_deps.iter().find(|(name, _)| *name == key) {
                out.push_str(&format!("{key} = {{ path = {path:?} }}\n"));
            } else {
                let spec = dependencies
                    .iter()
                    .find(|(k, _)| k == key)
                    .ok_or_else(|| error(format!("the workspace has no dependency {key}")))?;
                if spec.1.contains("path =") {
                    return Err(error(format!(
                        "{key} is a path dependency of the workspace and is not vendored"
                    )));
                }
                out.push_str(&format!("{key} = {}\n", spec.1));
            }
        } else if value.contains("workspace") {
            return Err(error(format!("cannot rewrite {trimmed:?}")));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(out)
}

/// The `key = value` lines of one `[section]` of a manifest.
fn section_entries(manifest: &str, wanted: &str) -> Vec<(String, String)> {
    let mut entries = Vec::new();
    let mut inside = false;
    for line in manifest.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            inside = trimmed == format!("[{wanted}]");
            continue;
        }
        if !inside || trimmed.starts_with('#') {
            continue;
        }
        if let Some((key, value)) = trimmed.split_once('=') {
            entries.push((key.trim().to_string(), value.trim().to_string()));
        }
    }
    entries
}

/// The version of every embedded SDK: this binary's, as the workspace
/// versions them together.
pub(super) fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
