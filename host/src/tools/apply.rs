//! `wasmctrl dev --apply DIR`: apply a directory of manifests the way a
//! user would with `kubectl apply --server-side`, CRDs first, waiting until
//! each CRD is established before the objects that need it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::Client;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde::Deserialize;

/// Why a manifest could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{path}: {kind} {name:?}: {message}")]
    Object {
        path: PathBuf,
        kind: String,
        name: String,
        message: String,
    },
}

const FIELD_MANAGER: &str = "wasmctrl-dev";

/// JSON files a plugin directory holds that are not manifests: npm's and
/// TypeScript's (`tsconfig*.json` is matched by prefix).
const NOT_MANIFESTS: &[&str] = &["package.json", "package-lock.json", "jsconfig.json"];

fn is_project_file(path: &Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        NOT_MANIFESTS.contains(&n) || (n.starts_with("tsconfig") && n.ends_with(".json"))
    })
}
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(30);

/// Applies every `.yaml`/`.yml`/`.json` file in `dir` (sorted by name):
/// CustomResourceDefinitions first (waiting until established), then the
/// rest. A host config (`kind: HostConfig`) beside them is skipped, and so
/// are a JavaScript plugin's project files ([`NOT_MANIFESTS`]), so that
/// `--apply .` works in a plugin's own directory. Returns how many objects
/// were applied.
pub async fn apply_dir(client: &Client, dir: &Path) -> Result<usize, ApplyError> {
    let file_error = |path: &Path, message: String| ApplyError::File {
        path: path.to_path_buf(),
        message,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| file_error(dir, format!("cannot read the directory: {e}")))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml" | "json")
            ) && !is_project_file(p)
        })
        .collect();
    files.sort();
    let mut objects = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).map_err(|e| file_error(&path, e.to_string()))?;
        objects.extend(parse(&path, &text)?);
    }
    apply_objects(client, objects).await
}

/// Applies the manifests in `text` (named `path` in errors and logs), CRDs
/// first, as [`apply_dir`] does for a file.
pub async fn apply_text(client: &Client, path: &Path, text: &str) -> Result<usize, ApplyError> {
    apply_objects(client, parse(path, text)?).await
}

/// The objects of the YAML documents in `text`, without a host config.
fn parse(path: &Path, text: &str) -> Result<Vec<(PathBuf, DynamicObject)>, ApplyError> {
    let file_error = |message: String| ApplyError::File {
        path: path.to_path_buf(),
        message,
    };
    let mut objects = Vec::new();
    for doc in serde_norway::Deserializer::from_str(text) {
        let value = serde_norway::Value::deserialize(doc).map_err(|e| file_error(e.to_string()))?;
        if value.is_null() {
            continue;
        }
        let obj: DynamicObject = serde_norway::from_value(value)
            .map_err(|e| file_error(format!("not a Kubernetes object: {e}")))?;
        // The host's own config may sit beside the manifests it runs on
        // (WasmReconcilers, of the same group, are applied).
        let own = obj
            .types
            .as_ref()
            .is_some_and(|t| t.api_version.starts_with("wasmctrl.dev/") && t.kind == "HostConfig");
        if !own {
            objects.push((path.to_path_buf(), obj));
        }
    }
    Ok(objects)
}

async fn apply_objects(
    client: &Client,
    objects: Vec<(PathBuf, DynamicObject)>,
) -> Result<usize, ApplyError> {
    let is_crd = |o: &DynamicObject| {
        o.types
            .as_ref()
            .is_some_and(|t| t.kind == "CustomResourceDefinition")
    };
    let (crds, rest): (Vec<_>, Vec<_>) = objects.into_iter().partition(|(_, o)| is_crd(o));
    let count = crds.len() + rest.len();
    for (path, crd) in &crds {
        apply_one(client, path, crd).await?;
    }
    for (path, crd) in &crds {
        wait_established(client, path, crd).await?;
    }
    for (path, obj) in &rest {
        apply_one(client, path, obj).await?;
    }
    Ok(count)
}

async fn apply_one(client: &Client, path: &Path, obj: &DynamicObject) -> Result<(), ApplyError> {
    let types = obj.types.clone().unwrap_or_default();
    let name = obj.metadata.name.clone().unwrap_or_default();
    let object_error = |message: String| ApplyError::Object {
        path: path.to_path_buf(),
        kind: types.kind.clone(),
        name: name.clone(),
        message,
    };
    let (group, version) = match types.api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), types.api_version.clone()),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, &types.kind);
    let (ar, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|e| object_error(format!("unknown kind: {e}")))?;
    let api: Api<DynamicObject> = if caps.scope == kube::discovery::Scope::Namespaced {
        let ns = obj
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        Api::namespaced_with(client.clone(), &ns, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
    .map_err(|e| object_error(e.to_string()))?;
    tracing::info!(kind = %types.kind, %name, file = %path.display(), "applied");
    Ok(())
}

async fn wait_established(
    client: &Client,
    path: &Path,
    crd: &DynamicObject,
) -> Result<(), ApplyError> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let name = crd.metadata.name.clone().unwrap_or_default();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let established = kube::runtime::wait::await_condition(
        api,
        &name,
        kube::runtime::wait::conditions::is_crd_established(),
    );
    match tokio::time::timeout(ESTABLISH_TIMEOUT, established).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(ApplyError::Object {
            path: path.to_path_buf(),
            kind: "CustomResourceDefinition".into(),
            name,
            message: e.to_string(),
        }),
        Err(_) => Err(ApplyError::Object {
            path: path.to_path_buf(),
            kind: "CustomResourceDefinition".into(),
            name,
            message: format!("not established within {ESTABLISH_TIMEOUT:?}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_javascript_plugins_project_files_are_not_manifests() {
        for name in [
            "package.json",
            "package-lock.json",
            "tsconfig.json",
            "tsconfig.test.json",
        ] {
            assert!(
                is_project_file(Path::new("plugin").join(name).as_path()),
                "{name}"
            );
        }
        for name in ["crd.yaml", "sample.json", "tsconfig.yaml"] {
            assert!(!is_project_file(Path::new(name)), "{name}");
        }
    }
}
