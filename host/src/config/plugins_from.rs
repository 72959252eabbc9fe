//! `pluginsFrom`: plugins defined as WasmReconciler objects, and what
//! the host allows them.

use serde::Deserialize;

use super::election::default_namespace;
use super::error::FieldProblem;
use super::runtime::RuntimeSection;
use super::units::{bytes_within, quantity, rate};
use crate::meta::syntax;

/// The kind `pluginsFrom` accepts.
pub const PLUGINS_FROM_KIND: &str = "WasmReconciler";

/// `pluginsFrom`: where plugins defined as Kubernetes objects come from.
///
/// ```yaml
/// pluginsFrom:
///   kind: WasmReconciler
///   namespace: wasmctrl-system
///   maxApiQps: 50
///   allowHosts: ["registry.internal:5000"]   # may be internal
/// maxGrant:
///   - { group: "", resources: [configmaps], verbs: [get, list, watch, patch] }
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PluginsFrom {
    /// The kind of the objects: `WasmReconciler` (group `wasmctrl.dev`,
    /// cluster-scoped), the only one.
    pub kind: String,
    /// Where an object's `source.imagePullSecret` Secrets are read (the
    /// objects are cluster-scoped; their Secrets live here). Default:
    /// `default`.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Whether objects may name `file:` sources (a path on the host's
    /// filesystem). Default false: whoever creates a WasmReconciler must
    /// not choose files the host reads.
    #[serde(default)]
    pub allow_file_sources: bool,
    /// The most API requests per second an object may ask for its plugin
    /// (`limits.apiQps`; `limits.apiBurst` at most twice this): an object
    /// asking more is refused. Default (None): `runtime.apiQps`, which also
    /// bounds every object plugin together.
    #[serde(default)]
    pub max_api_qps: Option<f64>,
    /// Hosts an object's `url` and `oci` sources may reach even where they
    /// are internal: `host` (any port) or `host:port`, as written in the
    /// URL or registry (`registry.internal:5000`, `10.0.0.7`, `[fd00::7]`).
    /// Whoever creates a WasmReconciler chooses where the host connects,
    /// from the host's network position, so by default an object's source
    /// reaches only public addresses: not loopback (the admin endpoint),
    /// link-local (cloud metadata), private or shared ones, whether named
    /// literally or by a name that resolves to one. At most
    /// [`MAX_ALLOW_HOSTS`], each at most 253 bytes. Default: none.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// The most outbound HTTP an object may grant its plugin: each rule of
    /// an object's `outbound` must be covered by one of these (its scheme,
    /// port, host, path and methods within the rule's, and `private` only
    /// under a `private` rule). Default: none, so an object with
    /// `outbound` is refused. At most 64 rules.
    #[serde(default)]
    pub max_outbound: Vec<crate::sandbox::outbound::OutboundRule>,
    /// The most bytes of components the objects' loads hold in memory
    /// together, from the first byte downloaded or read from the cache
    /// until the plugin is compiled; a load that would pass it is refused
    /// as unavailable and tried again later. Default 1Gi; 1Mi–64Gi.
    #[serde(default = "default_max_loading_bytes", deserialize_with = "quantity")]
    pub max_loading_bytes: u64,
}

/// `maxLoadingBytes` unset: four components of the default `maxSize`.
pub const DEFAULT_MAX_LOADING_BYTES: u64 = 1 << 30;

fn default_max_loading_bytes() -> u64 {
    DEFAULT_MAX_LOADING_BYTES
}

/// The most hosts `pluginsFrom.allowHosts` may name: each is compared with
/// every connection an object's source makes.
pub const MAX_ALLOW_HOSTS: usize = 64;

impl PluginsFrom {
    /// `maxApiQps`, or its default under `runtime`.
    pub fn max_api_qps(&self, runtime: &RuntimeSection) -> f64 {
        self.max_api_qps.unwrap_or(runtime.api_qps)
    }

    /// Checks `pluginsFrom` against the `runtime` it draws from (paths from
    /// the document's root).
    pub(super) fn check(&self, runtime: &RuntimeSection) -> Result<(), FieldProblem> {
        let check = |field: &str, r: Result<(), String>| r.map_err(|m| FieldProblem::new(field, m));
        if self.kind != PLUGINS_FROM_KIND {
            return Err(FieldProblem::new(
                "pluginsFrom.kind",
                format!("must be {PLUGINS_FROM_KIND:?}, not {:?}", self.kind),
            ));
        }
        check(
            "pluginsFrom.namespace",
            syntax::namespace(&self.namespace).map_err(|e| e.message),
        )?;
        if let Some(qps) = self.max_api_qps {
            check("pluginsFrom.maxApiQps", rate(qps, 1e5))?;
            // Object plugins draw from runtime.apiQps together: a larger
            // ceiling would promise what the host never grants.
            if qps > runtime.api_qps {
                return Err(FieldProblem::new(
                    "pluginsFrom.maxApiQps",
                    format!(
                        "must be at most runtime.apiQps ({}): object plugins draw their API requests from that budget (got {qps})",
                        runtime.api_qps
                    ),
                ));
            }
        }
        check(
            "pluginsFrom.maxLoadingBytes",
            bytes_within(self.max_loading_bytes, (1 << 20)..=(64 << 30)),
        )?;
        if self.max_outbound.len() > 64 {
            return Err(FieldProblem::new(
                "pluginsFrom.maxOutbound",
                format!("names {} rules; at most 64", self.max_outbound.len()),
            ));
        }
        for (i, rule) in self.max_outbound.iter().enumerate() {
            check(
                &format!("pluginsFrom.maxOutbound[{i}]"),
                rule.target().map(|_| ()),
            )?;
        }
        if self.allow_hosts.len() > MAX_ALLOW_HOSTS {
            return Err(FieldProblem::new(
                "pluginsFrom.allowHosts",
                format!(
                    "names {} hosts; at most {MAX_ALLOW_HOSTS}",
                    self.allow_hosts.len()
                ),
            ));
        }
        for (i, entry) in self.allow_hosts.iter().enumerate() {
            check(&format!("pluginsFrom.allowHosts[{i}]"), allowed_host(entry))?;
        }
        Ok(())
    }
}

/// Checks a `pluginsFrom.allowHosts` entry: `host` or `host:port`, where
/// host is a DNS name, an IPv4 address or a bracketed IPv6 address, written
/// as a URL shows it (lowercase, IPv6 compressed), since that is what it is
/// compared with.
fn allowed_host(entry: &str) -> Result<(), String> {
    if entry.len() > 253 {
        return Err(format!("is {} bytes; at most 253", entry.len()));
    }
    let (host, port) = match entry.rsplit_once(':') {
        Some((h, p)) if !entry.ends_with(']') && (!entry.starts_with('[') || h.ends_with(']')) => {
            (h, Some(p))
        }
        _ => (entry, None),
    };
    if let Some(port) = port
        && !matches!(port.parse::<u16>(), Ok(1..))
    {
        return Err(format!(
            "{entry:?}: the port must be a number from 1 to 65535 (write host or host:port)"
        ));
    }
    let parsed = url::Host::parse(host).map_err(|e| {
        format!("{entry:?}: not a host name or address ({e}); write host or host:port")
    })?;
    let canonical = parsed.to_string();
    if canonical != host {
        return Err(format!(
            "{entry:?}: write the host as a URL shows it: {canonical:?}"
        ));
    }
    if let url::Host::Domain(d) = &parsed
        && (d.is_empty()
            || !d
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.'))
    {
        return Err(format!(
            "{entry:?}: a host name has letters, digits, '-' and '.' only; write host or host:port"
        ));
    }
    Ok(())
}
