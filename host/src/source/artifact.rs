//! The wasm OCI artifact layout (CNCF TAG Runtime, "Wasm OCI Artifact
//! layout"): an OCI image manifest whose config has the media type
//! `application/vnd.wasm.config.v0+json` and whose one layer is the
//! component, `application/wasm`.
//!
//! ```json
//! {"created": "2025-01-01T00:00:00Z", "architecture": "wasm", "os": "wasip2",
//!  "layerDigests": ["sha256:…"],
//!  "component": {"target": "wasmctrl:reconciler/reconciler@0.1.1",
//!                "exports": ["metadata", "reconcile"],
//!                "imports": ["wasmctrl:reconciler/context@0.1.1", …]}}
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::runtime::digest;

/// The config media type that marks a wasm OCI artifact.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The media type of the component layer.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The OCI image manifest media type.
pub const OCI_MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The world every wasmctrl plugin targets.
pub const RECONCILER_WORLD: &str = "wasmctrl:reconciler/reconciler@0.1.1";
/// The largest config blob read from a registry.
pub const MAX_CONFIG_SIZE: u64 = 1 << 20;

/// The artifact's config (`application/vnd.wasm.config.v0+json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WasmConfig {
    /// When the artifact was made (RFC 3339).
    pub created: String,
    #[serde(default)]
    pub author: Option<String>,
    /// Always `wasm`.
    pub architecture: String,
    /// `wasip2` for a component.
    pub os: String,
    /// The digests of the manifest's layers, in order.
    #[serde(default)]
    pub layer_digests: Vec<String>,
    /// The component's world, exports and imports.
    #[serde(default)]
    pub component: Option<ComponentInfo>,
}

/// A component's shape, as the config records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentInfo {
    /// Interfaces and functions it exports.
    pub exports: Vec<String>,
    /// Interfaces and functions it imports.
    pub imports: Vec<String>,
    /// The WIT world it targets.
    #[serde(default)]
    pub target: Option<String>,
}

/// The top-level imports and exports of a component (read, not compiled or
/// run).
pub fn component_info(bytes: &[u8]) -> Result<ComponentInfo, String> {
    use wasmparser::{ComponentExternalKind, ComponentTypeRef, Parser, Payload};
    let mut info = ComponentInfo {
        exports: Vec::new(),
        imports: Vec::new(),
        target: None,
    };
    // Nested modules and components report their own payloads, between a
    // `Version` and an `End`; only depth 1 is the component itself.
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| format!("not a valid component: {e}"))?;
        match payload {
            Payload::Version { encoding, .. } => {
                if depth == 0 && encoding != wasmparser::Encoding::Component {
                    return Err("a core module, not a component".into());
                }
                depth += 1;
            }
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(reader) if depth == 1 => {
                for import in reader {
                    let import = import.map_err(|e| format!("not a valid component: {e}"))?;
                    if matches!(
                        import.ty,
                        ComponentTypeRef::Instance(_) | ComponentTypeRef::Func(_)
                    ) {
                        info.imports.push(import.name.name.to_string());
                    }
                }
            }
            Payload::ComponentExportSection(reader) if depth == 1 => {
                for export in reader {
                    let export = export.map_err(|e| format!("not a valid component: {e}"))?;
                    if matches!(
                        export.kind,
                        ComponentExternalKind::Instance | ComponentExternalKind::Func
                    ) {
                        info.exports.push(export.name.name.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    let reconciler = ["metadata", "reconcile"]
        .iter()
        .all(|f| info.exports.iter().any(|e| e == f));
    info.target = reconciler.then(|| RECONCILER_WORLD.to_string());
    Ok(info)
}

/// An artifact ready to push: the config and manifest bytes as they will
/// be stored, and their digests.
#[derive(Debug, Clone)]
pub struct Packed {
    pub config: Vec<u8>,
    pub config_digest: String,
    pub layer_digest: String,
    pub manifest: Vec<u8>,
    pub manifest_digest: String,
}

/// Lays `component` out as a wasm OCI artifact created at `created`
/// (RFC 3339), with `annotations` on the manifest.
pub fn pack(
    component: &[u8],
    created: &str,
    annotations: BTreeMap<String, String>,
) -> Result<Packed, String> {
    let layer_digest = digest(component);
    let config = WasmConfig {
        created: created.to_string(),
        author: None,
        architecture: "wasm".into(),
        os: "wasip2".into(),
        layer_digests: vec![layer_digest.clone()],
        component: Some(component_info(component)?),
    };
    let config = serde_json::to_vec(&config).map_err(|e| e.to_string())?;
    let config_digest = digest(&config);
    let mut manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST_MEDIA_TYPE,
        "config": {
            "mediaType": WASM_CONFIG_MEDIA_TYPE,
            "digest": config_digest,
            "size": config.len(),
        },
        "layers": [{
            "mediaType": WASM_LAYER_MEDIA_TYPE,
            "digest": layer_digest,
            "size": component.len(),
        }],
    });
    if !annotations.is_empty() {
        manifest["annotations"] = serde_json::json!(annotations);
    }
    let manifest = serde_json::to_vec(&manifest).map_err(|e| e.to_string())?;
    Ok(Packed {
        config_digest,
        layer_digest,
        manifest_digest: digest(&manifest),
        config,
        manifest,
    })
}

/// The component layer of a manifest, after checking the manifest is a
/// wasm OCI artifact whose component is at most `max_size` bytes.
pub fn component_layer(
    manifest: &oci_client::manifest::OciImageManifest,
    max_size: u64,
) -> Result<&oci_client::manifest::OciDescriptor, String> {
    if manifest.config.media_type != WASM_CONFIG_MEDIA_TYPE {
        return Err(format!(
            "its config media type is {:?}, not {WASM_CONFIG_MEDIA_TYPE:?} (push components with `wasmctrl push`)",
            manifest.config.media_type
        ));
    }
    let [layer] = manifest.layers.as_slice() else {
        return Err(format!(
            "it has {} layers; a wasm OCI artifact has exactly one",
            manifest.layers.len()
        ));
    };
    if layer.media_type != WASM_LAYER_MEDIA_TYPE {
        return Err(format!(
            "its layer media type is {:?}, not {WASM_LAYER_MEDIA_TYPE:?}",
            layer.media_type
        ));
    }
    if !super::cache::is_sha256(&layer.digest) {
        return Err(format!(
            "its layer digest {:?} is not sha256:<64 lowercase hex>",
            layer.digest
        ));
    }
    if layer.size < 0 || layer.size as u64 > max_size {
        return Err(format!(
            "its component is {} bytes, more than maxSize ({max_size} bytes)",
            layer.size
        ));
    }
    Ok(layer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_core_module_or_garbage_has_no_component_info() {
        assert!(
            component_info(b"\0asm\x01\0\0\0")
                .unwrap_err()
                .contains("core module")
        );
        assert!(component_info(b"nope").is_err());
    }

    #[test]
    fn a_packed_manifest_names_its_config_and_layer() {
        // The smallest component: magic and the component version/layer.
        let component = b"\0asm\x0d\0\x01\0";
        let packed = pack(component, "2025-01-01T00:00:00Z", BTreeMap::new()).unwrap();
        let manifest: oci_client::manifest::OciImageManifest =
            serde_json::from_slice(&packed.manifest).unwrap();
        assert_eq!(manifest.config.digest, packed.config_digest);
        assert_eq!(
            component_layer(&manifest, 1 << 20).unwrap().digest,
            digest(component)
        );
        assert!(
            component_layer(&manifest, 4)
                .unwrap_err()
                .contains("maxSize")
        );
        let config: WasmConfig = serde_json::from_slice(&packed.config).unwrap();
        assert_eq!(
            (config.architecture.as_str(), config.os.as_str()),
            ("wasm", "wasip2")
        );
        assert_eq!(config.layer_digests, vec![digest(component)]);
        assert_eq!(packed.manifest_digest, digest(&packed.manifest));
    }
}
