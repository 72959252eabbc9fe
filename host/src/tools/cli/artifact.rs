//! `wasmctrl inspect` and `wasmctrl push`: a plugin component checked,
//! described, and pushed to a registry.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;

use crate::control::metrics::Metrics;
use crate::ops::source::artifact::RECONCILER_WORLD;
use crate::ops::source::oci::RegistryOptions;
use crate::sandbox::{PluginSpec, Runtime, RuntimeConfig};

/// How to reach a registry (or a URL).
#[derive(clap::Args)]
pub(super) struct RegistryArgs {
    /// Plain HTTP: to a registry without TLS, or to an http:// URL on a
    /// loopback address.
    #[arg(long)]
    insecure: bool,
    /// A docker config.json with registry credentials (default:
    /// $DOCKER_CONFIG/config.json, then ~/.docker/config.json).
    #[arg(long)]
    docker_config: Option<PathBuf>,
    /// How long the whole transfer may take.
    #[arg(long, default_value = "5m", value_parser = crate::config::parse_duration)]
    timeout: std::time::Duration,
}

impl RegistryArgs {
    fn options(&self) -> RegistryOptions {
        RegistryOptions {
            insecure: self.insecure,
            docker_config: self.docker_config.clone(),
            credentials: None,
            limits: crate::config::FetchLimits {
                timeout: self.timeout,
                ..Default::default()
            },
        }
    }
}

/// A runtime for one-off checks of a component (`inspect`, `push`).
pub(super) fn check_runtime() -> anyhow::Result<Runtime> {
    Ok(Runtime::new(
        RuntimeConfig {
            max_instances: 4,
            ..RuntimeConfig::default()
        },
        Arc::new(Metrics::new()),
    )?)
}

/// What `inspect` prints about a loaded plugin.
fn describe_plugin(plugin: &crate::sandbox::Plugin) -> serde_json::Value {
    let m = plugin.metadata();
    let gvk = |g: &crate::Gvk| serde_json::json!({"group": g.group, "version": g.version, "kind": g.kind});
    serde_json::json!({
        "world": RECONCILER_WORLD,
        "path": plugin.origin(),
        "digest": plugin.digest(),
        "name": m.name,
        "version": m.version,
        "for": gvk(&m.for_),
        "owns": m.owns.iter().map(gvk).collect::<Vec<_>>(),
        "watches": m.watches.iter().map(|w| serde_json::json!({
            "kind": gvk(&w.kind),
            "mapping": format!("{:?}", w.mapping),
        })).collect::<Vec<_>>(),
        "permissions": m.permissions.iter().map(|p| serde_json::json!({
            "group": p.group, "resources": p.resources, "verbs": p.verbs,
        })).collect::<Vec<_>>(),
        "outbound": m.outbound,
    })
}

/// Loads `plugin` (a file, `oci://…` or `https://…#sha256=…`) and prints
/// its metadata; for a registry artifact, its manifest and config first.
pub(super) async fn inspect(plugin: String, registry: RegistryArgs) -> anyhow::Result<()> {
    let options = registry.options();
    let (origin, bytes, name, mut extra) = if let Some(reference) = plugin.strip_prefix("oci://") {
        let found = crate::ops::source::oci::describe_artifact(reference, &options).await?;
        let name = reference
            .rsplit('/')
            .next()
            .and_then(|last| last.split([':', '@']).next())
            .unwrap_or_default()
            .to_string();
        let extra = serde_json::json!({
            "oci": {
                "reference": reference,
                "manifestDigest": found.manifest_digest,
                "manifest": found.manifest,
                "config": found.config,
            }
        });
        (plugin.clone(), found.component.bytes, name, extra)
    } else if plugin.starts_with("https://") || plugin.starts_with("http://") {
        let (url, sha256) = plugin
            .split_once("#sha256=")
            .context("give the component's digest after the URL: https://…#sha256=<64 hex>")?;
        let spec = crate::config::SourceConfig {
            url: Some(url.to_string()),
            sha256: Some(sha256.to_string()),
            insecure: registry.insecure,
            timeout: Some(registry.timeout),
            ..Default::default()
        }
        .spec()
        .map_err(|p| anyhow::anyhow!("{}: {}", p.field, p.message))?;
        let crate::config::SourceSpec::Url(spec) = spec else {
            unreachable!("a url source config is a url source");
        };
        let source = crate::ops::source::UrlSource::new(
            spec,
            crate::ops::source::DiskCache::new(PathBuf::new()),
        );
        let artifact = source.download().await?;
        let name = url
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .trim_end_matches(".wasm")
            .to_string();
        (url.to_string(), artifact.bytes, name, serde_json::json!({}))
    } else {
        let (bytes, name) = read_component(Path::new(&plugin)).await?;
        (plugin.clone(), bytes, name, serde_json::json!({}))
    };
    let runtime = check_runtime()?;
    let plugin = runtime
        .load_bytes(origin, bytes, PluginSpec::new(name))
        .await?;
    let mut out = describe_plugin(&plugin);
    if let (Some(out), Some(extra)) = (out.as_object_mut(), extra.as_object_mut()) {
        out.append(extra);
    }
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

/// The bytes of the component file at `path`, and its name (the file's stem).
async fn read_component(path: &Path) -> anyhow::Result<(Vec<u8>, String)> {
    let bytes = tokio::fs::read(path)
        .await
        .with_context(|| format!("cannot read {}", path.display()))?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok((bytes, name))
}

/// Checks `path` is a plugin (loads it and asks its metadata), pushes it
/// to `reference` and prints the manifest digest.
pub(super) async fn push(
    path: PathBuf,
    reference: String,
    registry: RegistryArgs,
) -> anyhow::Result<()> {
    let (bytes, name) = read_component(&path).await?;
    let runtime = check_runtime()?;
    let plugin = runtime
        .load_bytes(
            path.display().to_string(),
            bytes.clone(),
            PluginSpec::new(name),
        )
        .await?;
    let m = plugin.metadata();
    let annotations = std::collections::BTreeMap::from([
        ("org.opencontainers.image.title".to_string(), m.name.clone()),
        (
            "org.opencontainers.image.version".to_string(),
            m.version.clone(),
        ),
    ]);
    let pushed =
        crate::ops::source::oci::push(&reference, bytes, annotations, &registry.options()).await?;
    eprintln!(
        "pushed {} {} ({}) to {}@{}",
        m.name, m.version, pushed.layer_digest, pushed.reference, pushed.manifest_digest
    );
    println!("{}", pushed.manifest_digest);
    Ok(())
}
