//! The wasm OCI artifact layout (CNCF TAG Runtime, "Wasm OCI Artifact
//! layout"): an OCI image manifest whose config has the media type
//! `application/vnd.wasm.config.v0+json` and whose one layer is the
//! component, `application/wasm`.
//!
//! ```json
//! {"created": "2025-01-01T00:00:00Z", "architecture": "wasm", "os": "wasip2",
//!  "layerDigests": ["sha256:…"],
//!  "component": {"target": "wasmctrl:reconciler/reconciler@0.1.3",
//!                "exports": ["metadata", "reconcile"],
//!                "imports": ["wasmctrl:reconciler/context@0.1.3", …]}}
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::sandbox::digest;

/// The config media type that marks a wasm OCI artifact.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The media type of the component layer.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The OCI image manifest media type.
pub const OCI_MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The world every wasmctrl plugin targets.
pub const RECONCILER_WORLD: &str = "wasmctrl:reconciler/reconciler@0.1.3";
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

/// The image manifest `raw` holds (`raw` as a registry served it, within
/// its size bound); the error says why it is not one, quoting a bounded
/// piece of it.
///
/// It is read straight into its fields, never into a tree: what the
/// manifest holds besides them is skipped as it is read, so 4 MiB of
/// values the host does not use cost it no memory.
pub fn parse_manifest(raw: &[u8]) -> Result<oci_client::manifest::OciImageManifest, String> {
    #[derive(serde::Deserialize)]
    struct Index {
        manifests: Option<serde::de::IgnoredAny>,
    }
    let index: Index = serde_json::from_slice(raw).map_err(|e| bounded(e.to_string()))?;
    if index.manifests.is_some() {
        return Err("it is an image index (a list of manifests), not an image manifest".into());
    }
    let manifest: oci_client::manifest::OciImageManifest =
        serde_json::from_slice(raw).map_err(|e| bounded(e.to_string()))?;
    if manifest.schema_version != 2 {
        return Err(format!(
            "its schemaVersion is {}; an image manifest's is 2",
            manifest.schema_version
        ));
    }
    Ok(manifest)
}

/// The component layer of a manifest, after checking the manifest is a
/// wasm OCI artifact whose component is at most `max_size` bytes.
pub fn component_layer(
    manifest: &oci_client::manifest::OciImageManifest,
    max_size: u64,
) -> Result<&oci_client::manifest::OciDescriptor, String> {
    if manifest.config.media_type != WASM_CONFIG_MEDIA_TYPE {
        return Err(format!(
            "its config media type is {}, not {WASM_CONFIG_MEDIA_TYPE:?} (push components with `wasmctrl push`)",
            shown(&manifest.config.media_type)
        ));
    }
    // Its digest names the blob `inspect` reads: a path on the registry.
    if !super::downloads::is_sha256(&manifest.config.digest) {
        return Err(format!(
            "its config digest {} is not sha256:<64 lowercase hex>",
            shown(&manifest.config.digest)
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
            "its layer media type is {}, not {WASM_LAYER_MEDIA_TYPE:?}",
            shown(&layer.media_type)
        ));
    }
    if !super::downloads::is_sha256(&layer.digest) {
        return Err(format!(
            "its layer digest {} is not sha256:<64 lowercase hex>",
            shown(&layer.digest)
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

/// Bytes of a registry's text an error quotes: a manifest is up to 4 MiB,
/// all of it the registry's choice.
const MAX_QUOTED: usize = 256;

/// `s` quoted as Rust quotes it, at most [`MAX_QUOTED`] bytes of the
/// quote.
pub(super) fn shown(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        if out.len() >= MAX_QUOTED {
            return format!("{out}\"… ({} bytes)", s.len());
        }
        out.extend(c.escape_debug());
    }
    out.push('"');
    out
}

/// A parser's `message`, which may quote the registry's strings whole, cut
/// to [`MAX_QUOTED`] bytes and made one line.
pub(super) fn bounded(message: String) -> String {
    let mut out = String::new();
    for c in message.chars() {
        if out.len() >= MAX_QUOTED {
            out.push_str(&format!("… ({} bytes)", message.len()));
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
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

    /// A manifest, config or layer descriptor is the registry's text: any
    /// of it is accepted only when it is a wasm OCI artifact's, and
    /// otherwise refused with a bounded one-line reason, never a panic.
    /// `PROPTEST_CASES` scales the run (`scripts/fuzz-campaign.sh`).
    mod properties {
        use proptest::prelude::*;
        use serde_json::{Value, json};

        use super::*;

        const MAX_SIZE: u64 = 1 << 20;

        fn sample() -> Value {
            let packed = pack(
                b"\0asm\x0d\0\x01\0",
                "2025-01-01T00:00:00Z",
                BTreeMap::from([("org.opencontainers.image.source".into(), "x".into())]),
            )
            .unwrap();
            serde_json::from_slice(&packed.manifest).unwrap()
        }

        fn is_sha256(v: &Value) -> bool {
            v.as_str().is_some_and(|d| {
                d.strip_prefix("sha256:").is_some_and(|h| {
                    h.len() == 64
                        && h.bytes()
                            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                })
            })
        }

        /// What a wasm OCI artifact's manifest has, read off the JSON
        /// independently of the parser.
        fn well_formed(v: &Value) -> bool {
            let layers = v["layers"].as_array();
            v.get("manifests").is_none()
                && v["schemaVersion"].as_u64() == Some(2)
                && v["config"]["mediaType"] == WASM_CONFIG_MEDIA_TYPE
                && is_sha256(&v["config"]["digest"])
                && layers.is_some_and(|l| l.len() == 1)
                && v["layers"][0]["mediaType"] == WASM_LAYER_MEDIA_TYPE
                && is_sha256(&v["layers"][0]["digest"])
                && v["layers"][0]["size"]
                    .as_u64()
                    .is_some_and(|n| n <= MAX_SIZE)
        }

        fn json() -> impl Strategy<Value = Value> {
            let words = vec![
                "schemaVersion",
                "mediaType",
                "config",
                "layers",
                "digest",
                "size",
                "annotations",
                "urls",
                "manifests",
                "subject",
                WASM_CONFIG_MEDIA_TYPE,
                WASM_LAYER_MEDIA_TYPE,
            ];
            let extra = prop_oneof![
                Just(Value::from(digest(b"x"))),
                (1usize..50_000).prop_map(|n| Value::from("\n".repeat(n))),
            ];
            crate::fuzz::json(words, 1, extra.boxed(), 8)
        }

        fn hostile() -> impl Strategy<Value = Value> {
            prop_oneof![
                json(),
                Just(json!(-1)),
                Just(json!(u64::MAX)),
                Just(json!(256)),
                Just(json!(1e300)),
                Just(json!("sha256:")),
                Just(json!(format!("sha256:{}", "A".repeat(64)))),
                Just(json!("../../v2/_catalog?n=1")),
                (1usize..300_000).prop_map(|n| json!("\u{1b}".repeat(n))),
                (0usize..50_000).prop_map(|n| Value::Array(vec![sample()["layers"][0].clone(); n])),
                (0usize..5_000).prop_map(|n| Value::Object(
                    (0..n)
                        .map(|i| (format!("k{i}"), json!("v".repeat(64))))
                        .collect()
                )),
            ]
        }

        /// The sample manifest, mutated: as JSON, or as bytes.
        fn mutated() -> impl Strategy<Value = Vec<u8>> {
            let raw = sample().to_string().into_bytes();
            let len = raw.len();
            let mut at = Vec::new();
            crate::fuzz::pointers(&sample(), String::new(), &mut at);
            let (r1, r2) = (raw.clone(), raw);
            prop_oneof![
                (prop::sample::select(at), hostile()).prop_map(|(at, new)| {
                    let mut v = sample();
                    if let Some(slot) = v.pointer_mut(&at) {
                        *slot = new;
                    }
                    v.to_string().into_bytes()
                }),
                (0..=len).prop_map(move |n| r1[..n].to_vec()),
                prop::collection::vec((0..len, any::<u8>()), 1..6).prop_map(move |flips| {
                    let mut r = r2.clone();
                    flips.into_iter().for_each(|(i, b)| r[i] = b);
                    r
                }),
            ]
        }

        fn accepted_only_if_well_formed(raw: &[u8]) -> Result<(), TestCaseError> {
            let checked = parse_manifest(raw)
                .and_then(|m| component_layer(&m, MAX_SIZE).map(|l| l.digest.clone()));
            match checked {
                Ok(layer) => {
                    let v: Value = serde_json::from_slice(raw).expect("parsed");
                    prop_assert!(well_formed(&v), "accepted: {v:.2000}");
                    prop_assert_eq!(Some(layer.as_str()), v["layers"][0]["digest"].as_str());
                }
                Err(message) => crate::fuzz::one_bounded_line(&message)?,
            }
            Ok(())
        }

        proptest! {
            #[test]
            fn any_bytes_are_a_manifest_only_if_well_formed(raw in prop::collection::vec(any::<u8>(), 0..1024)) {
                accepted_only_if_well_formed(&raw)?;
            }

            #[test]
            fn any_json_is_a_manifest_only_if_well_formed(v in json()) {
                accepted_only_if_well_formed(v.to_string().as_bytes())?;
            }

            #[test]
            fn a_mutated_manifest_is_accepted_only_if_well_formed(raw in mutated()) {
                accepted_only_if_well_formed(&raw)?;
            }

            /// The config is read as JSON for `inspect`: any blob is JSON
            /// or refused, and `pack`'s own config reads back.
            #[test]
            fn any_config_blob_is_json_or_refused(raw in prop_oneof![
                prop::collection::vec(any::<u8>(), 0..512),
                json().prop_map(|v| v.to_string().into_bytes()),
            ]) {
                let _ = serde_json::from_slice::<Value>(&raw);
                if let Ok(c) = serde_json::from_slice::<WasmConfig>(&raw) {
                    let back: WasmConfig = serde_json::from_slice(&serde_json::to_vec(&c).unwrap()).unwrap();
                    prop_assert_eq!(back, c);
                }
            }
        }

        #[test]
        fn the_sample_is_well_formed_and_accepted() {
            let raw = sample().to_string();
            assert!(well_formed(&sample()));
            assert!(component_layer(&parse_manifest(raw.as_bytes()).unwrap(), MAX_SIZE).is_ok());
        }

        #[test]
        fn refusals_name_the_field_and_quote_a_bounded_piece() {
            let refused = |at: &str, new: Value| {
                let mut v = sample();
                *v.pointer_mut(at).unwrap() = new;
                parse_manifest(v.to_string().as_bytes())
                    .and_then(|m| component_layer(&m, MAX_SIZE).map(|_| ()))
                    .unwrap_err()
            };
            let e = refused("/config/digest", json!("../../v2/_catalog"));
            assert_eq!(
                e,
                r#"its config digest "../../v2/_catalog" is not sha256:<64 lowercase hex>"#
            );
            let e = refused("/layers/0/mediaType", json!("\n".repeat(1 << 20)));
            assert!(
                e.starts_with(r#"its layer media type is "\n\n"#) && e.len() < 1024,
                "{e:.2000}"
            );
            assert!(e.contains("… (1048576 bytes)"), "{e:.2000}");
            let e = refused(
                "/layers",
                Value::Array(vec![sample()["layers"][0].clone(); 100_000]),
            );
            assert_eq!(
                e,
                "it has 100000 layers; a wasm OCI artifact has exactly one"
            );
            let e = refused("/schemaVersion", json!(1));
            assert_eq!(e, "its schemaVersion is 1; an image manifest's is 2");
            let e = refused("/config/mediaType", json!(["x".repeat(1 << 20)]));
            assert!(
                e.starts_with("invalid type: sequence, expected a string"),
                "{e:.2000}"
            );
            let e = refused("/annotations", json!({"a": 1}));
            assert!(e.len() < 1024, "{e:.2000}");
        }
    }
}
