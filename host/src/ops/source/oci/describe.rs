//! `wasmctrl inspect oci://…`: an artifact's manifest, config and
//! component, each checked, without the cache.

use super::failure::{Failure, reached};
use super::options::RegistryOptions;
use super::reference::{parse_reference, pin};
use super::registry::Registry;
use crate::ops::source::Reach;
use crate::ops::source::artifact::{self, MAX_CONFIG_SIZE};
use crate::ops::source::{Artifact, SourceError, within};

/// A wasm OCI artifact as stored: for `wasmctrl inspect oci://…`.
#[derive(Debug, Clone)]
pub struct Described {
    /// The manifest digest the reference resolved to.
    pub manifest_digest: String,
    pub manifest: serde_json::Value,
    pub config: serde_json::Value,
    pub component: Artifact,
}

/// Pulls the manifest, config and component of `reference`, checking each
/// (no cache).
pub async fn describe_artifact(
    reference: &str,
    options: &RegistryOptions,
) -> Result<Described, SourceError> {
    let origin = format!("oci://{reference}");
    let (parsed, _) = parse_reference(reference, &origin)?;
    let refused = |f: Failure| reached(&origin, f);
    let work = async {
        let registry = Registry::open(options, &origin, &parsed, Reach::Anywhere)
            .await
            .map_err(refused)?;
        let manifest_digest = match parsed.digest() {
            Some(d) => d.to_string(),
            None => registry.resolve(&parsed).await.map_err(refused)?,
        };
        let pinned = pin(&parsed, &manifest_digest);
        let (manifest, raw) = registry.manifest(&pinned).await.map_err(refused)?;
        let layer = artifact::component_layer(&manifest, options.limits.max_size)
            .map_err(|message| refused(registry.not_an_artifact(message)))?;
        let config = registry
            .blob(&pinned, &manifest.config, MAX_CONFIG_SIZE)
            .await
            .map_err(refused)?;
        let config: serde_json::Value =
            serde_json::from_slice(&config).map_err(|e| SourceError::NotWasmArtifact {
                origin: origin.clone(),
                message: format!("its config is not JSON: {e}"),
            })?;
        let bytes = registry
            .blob(&pinned, layer, options.limits.max_size)
            .await
            .map_err(refused)?;
        Ok::<_, SourceError>(Described {
            manifest_digest,
            manifest: serde_json::from_slice(&raw).expect("parsed above"),
            config,
            component: Artifact {
                bytes,
                digest: layer.digest.clone(),
            },
        })
    };
    within(&origin, options.limits.timeout, work).await?
}
