//! The host config file (YAML, Kubernetes-style): strict, validated, with
//! errors naming the file, the field path and the plugin.
//!
//! ```yaml
//! apiVersion: wasmctrl.dev/v1alpha1
//! kind: HostConfig
//! admin: { bind: "127.0.0.1:9090" }
//! shutdownTimeout: 30s
//! plugins:
//!   - name: webapp
//!     path: ../../target/wasm32-wasip2/release/webapp.wasm   # relative to this file
//!     reconcileTimeout: 10s
//!     memoryLimit: 64Mi
//!     permissions:
//!       - { group: apps, resources: [deployments], verbs: [get, patch] }
//! ```

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub const API_VERSION: &str = "wasmctrl.dev/v1alpha1";
pub const KIND: &str = "HostConfig";
const VERBS: [&str; 8] = [
    "get", "list", "watch", "create", "update", "patch", "delete", "*",
];

/// Why a config file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: cannot read: {source}")]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{file}: {location}{path}: {message}")]
    Parse {
        file: PathBuf,
        /// `line L column C: ` when known.
        location: String,
        /// The field path, e.g. `plugins[0].reconcileTimeout`.
        path: String,
        message: String,
    },
    #[error("{file}: {path}{plugin}: {message}")]
    Invalid {
        file: PathBuf,
        path: String,
        /// ` (plugin "webapp")` when the field belongs to a plugin.
        plugin: String,
        message: String,
    },
}

/// The whole host config.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HostConfig {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub admin: AdminConfig,
    #[serde(default = "default_shutdown_timeout", deserialize_with = "duration")]
    pub shutdown_timeout: Duration,
    /// How long plugins wait for their informers' first list before the
    /// host reports not ready.
    #[serde(default = "default_cache_sync_timeout", deserialize_with = "duration")]
    pub cache_sync_timeout: Duration,
    #[serde(default)]
    pub leader_election: LeaderElectionConfig,
    #[serde(default)]
    pub runtime: RuntimeSection,
    #[serde(default)]
    pub plugins: Vec<PluginConfig>,
    /// The directory of the config file; plugin paths are relative to it.
    #[serde(skip)]
    pub base_dir: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AdminConfig {
    /// Where `/metrics`, `/healthz`, `/readyz` and `/plugins` are served.
    pub bind: SocketAddr,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:9090".parse().unwrap(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LeaderElectionConfig {
    #[serde(default)]
    pub enabled: bool,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    #[serde(default = "default_lease_name")]
    pub lease_name: String,
    /// How long a lease is valid without renewal; a standby takes over
    /// within this after the leader dies.
    #[serde(default = "default_lease_duration", deserialize_with = "duration")]
    pub lease_duration: Duration,
    /// How often the leader renews (and a standby retries).
    #[serde(default = "default_retry_period", deserialize_with = "duration")]
    pub retry_period: Duration,
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            namespace: default_namespace(),
            lease_name: default_lease_name(),
            lease_duration: default_lease_duration(),
            retry_period: default_retry_period(),
        }
    }
}

/// Engine-wide wasm settings.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RuntimeSection {
    /// Where compiled components are cached across restarts (relative to
    /// the config file). Default: none (memory only).
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
}

/// One plugin: its component and how the host runs it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PluginConfig {
    pub name: String,
    /// The component file (relative paths are relative to the config file).
    pub path: PathBuf,
    #[serde(default = "one")]
    pub max_concurrent_reconciles: usize,
    #[serde(default = "default_reconcile_timeout", deserialize_with = "duration")]
    pub reconcile_timeout: Duration,
    /// Fuel per reconcile (deterministic CPU budget); None: unmetered.
    #[serde(default)]
    pub fuel: Option<u64>,
    #[serde(default = "default_memory_limit", deserialize_with = "quantity")]
    pub memory_limit: u64,
    /// After this many retries of a key, its error is terminal.
    #[serde(default)]
    pub max_retries: Option<u32>,
    #[serde(default)]
    pub rate_limiter: RateLimiterConfig,
    /// Only objects in these namespaces are watched and reconciled.
    #[serde(default)]
    pub namespaces: Option<Vec<String>>,
    /// Re-enqueue every key this often (None: only on events).
    #[serde(default, deserialize_with = "optional_duration")]
    pub resync_period: Option<Duration>,
    /// What the plugin is allowed to do through the `kube` interface.
    #[serde(default)]
    pub permissions: Vec<PermissionRule>,
    /// Handed to the plugin as JSON.
    #[serde(default = "empty_object")]
    pub settings: serde_json::Value,
}

impl PluginConfig {
    /// The component path, resolved against the config file's directory.
    pub fn resolved_path(&self, base_dir: &Path) -> PathBuf {
        base_dir.join(&self.path)
    }
}

/// The per-key and overall retry limits (client-go's default controller
/// rate limiter with every field chosen).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RateLimiterConfig {
    #[serde(default = "default_base_delay", deserialize_with = "duration")]
    pub base_delay: Duration,
    #[serde(default = "default_max_delay", deserialize_with = "duration")]
    pub max_delay: Duration,
    #[serde(default = "default_qps")]
    pub qps: f64,
    #[serde(default = "default_burst")]
    pub burst: u32,
}

impl Default for RateLimiterConfig {
    fn default() -> Self {
        Self {
            base_delay: default_base_delay(),
            max_delay: default_max_delay(),
            qps: default_qps(),
            burst: default_burst(),
        }
    }
}

/// Allows `verbs` on `resources` of API `group` ("" is core), optionally
/// only in `namespaces`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PermissionRule {
    #[serde(default)]
    pub group: String,
    pub resources: Vec<String>,
    pub verbs: Vec<String>,
    #[serde(default)]
    pub namespaces: Option<Vec<String>>,
}

fn default_shutdown_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_cache_sync_timeout() -> Duration {
    Duration::from_secs(120)
}
fn default_namespace() -> String {
    "default".into()
}
fn default_lease_name() -> String {
    "wasmctrl".into()
}
fn default_lease_duration() -> Duration {
    Duration::from_secs(15)
}
fn default_retry_period() -> Duration {
    Duration::from_secs(2)
}
fn one() -> usize {
    1
}
fn default_reconcile_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_memory_limit() -> u64 {
    64 << 20
}
fn default_base_delay() -> Duration {
    Duration::from_millis(5)
}
fn default_max_delay() -> Duration {
    Duration::from_secs(1000)
}
fn default_qps() -> f64 {
    10.0
}
fn default_burst() -> u32 {
    100
}
fn empty_object() -> serde_json::Value {
    serde_json::json!({})
}

impl HostConfig {
    /// Reads, parses and validates the config file at `file`.
    pub fn load(file: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(file).map_err(|source| ConfigError::Read {
            file: file.to_path_buf(),
            source,
        })?;
        let base_dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::parse(file, &text, base_dir)
    }

    /// Parses and validates config `text` (named `file` in errors).
    pub fn parse(file: &Path, text: &str, base_dir: PathBuf) -> Result<Self, ConfigError> {
        let de = serde_yaml::Deserializer::from_str(text);
        let mut config: HostConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let location = inner
                .location()
                .map(|l| format!("line {} column {}: ", l.line(), l.column()))
                .unwrap_or_default();
            ConfigError::Parse {
                file: file.to_path_buf(),
                location,
                path: if path == "." { String::new() } else { path },
                message: strip_location(&inner.to_string()),
            }
        })?;
        config.base_dir = base_dir;
        config.validate(file)?;
        Ok(config)
    }

    fn validate(&self, file: &Path) -> Result<(), ConfigError> {
        let invalid = |path: String, plugin: Option<&str>, message: String| ConfigError::Invalid {
            file: file.to_path_buf(),
            path,
            plugin: plugin
                .map(|p| format!(" (plugin {p:?})"))
                .unwrap_or_default(),
            message,
        };
        if self.api_version != API_VERSION {
            return Err(invalid(
                "apiVersion".into(),
                None,
                format!("must be {API_VERSION:?}, not {:?}", self.api_version),
            ));
        }
        if self.kind != KIND {
            return Err(invalid(
                "kind".into(),
                None,
                format!("must be {KIND:?}, not {:?}", self.kind),
            ));
        }
        let mut names = HashSet::new();
        for (i, p) in self.plugins.iter().enumerate() {
            let at = |field: &str| format!("plugins[{i}].{field}");
            let name = Some(p.name.as_str());
            if !is_dns_label(&p.name) {
                return Err(invalid(
                    at("name"),
                    name,
                    "must be a DNS label (lowercase letters, digits and '-', at most 63 characters)".into(),
                ));
            }
            if !names.insert(p.name.as_str()) {
                return Err(invalid(at("name"), name, "duplicate plugin name".into()));
            }
            if p.max_concurrent_reconciles == 0 {
                return Err(invalid(
                    at("maxConcurrentReconciles"),
                    name,
                    "must be at least 1".into(),
                ));
            }
            if p.reconcile_timeout.is_zero() {
                return Err(invalid(
                    at("reconcileTimeout"),
                    name,
                    "must be positive".into(),
                ));
            }
            if p.memory_limit < (1 << 20) {
                return Err(invalid(
                    at("memoryLimit"),
                    name,
                    "must be at least 1Mi".into(),
                ));
            }
            if p.fuel == Some(0) {
                return Err(invalid(
                    at("fuel"),
                    name,
                    "must be positive (omit it for no fuel limit)".into(),
                ));
            }
            let rl = &p.rate_limiter;
            if rl.base_delay > rl.max_delay {
                return Err(invalid(
                    at("rateLimiter.baseDelay"),
                    name,
                    "must not exceed maxDelay".into(),
                ));
            }
            if !(rl.qps.is_finite() && rl.qps > 0.0) {
                return Err(invalid(
                    at("rateLimiter.qps"),
                    name,
                    "must be a positive number".into(),
                ));
            }
            if rl.burst == 0 {
                return Err(invalid(
                    at("rateLimiter.burst"),
                    name,
                    "must be at least 1".into(),
                ));
            }
            if !p.settings.is_object() {
                return Err(invalid(at("settings"), name, "must be a mapping".into()));
            }
            for (j, rule) in p.permissions.iter().enumerate() {
                for verb in &rule.verbs {
                    if !VERBS.contains(&verb.as_str()) {
                        return Err(invalid(
                            at(&format!("permissions[{j}].verbs")),
                            name,
                            format!(
                                "unknown verb {verb:?} (expected one of {})",
                                VERBS.join(", ")
                            ),
                        ));
                    }
                }
                if rule.resources.is_empty() || rule.verbs.is_empty() {
                    return Err(invalid(
                        at(&format!("permissions[{j}]")),
                        name,
                        "needs at least one resource and one verb".into(),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The plugin named `name`.
    pub fn plugin(&self, name: &str) -> Option<&PluginConfig> {
        self.plugins.iter().find(|p| p.name == name)
    }
}

/// serde_yaml prefixes its own path ("plugins[0]: ") and appends
/// " at line L column C"; both are reported apart, more precisely.
fn strip_location(message: &str) -> String {
    let message = match message.rfind(" at line ") {
        Some(i) => &message[..i],
        None => message,
    };
    match message.split_once(": ") {
        Some((prefix, rest)) if !prefix.contains(' ') => rest.to_string(),
        _ => message.to_string(),
    }
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Parses a Go-style duration: `250ms`, `10s`, `5m`, `1h30m`, `1.5s`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("invalid duration {s:?}: missing unit (ns, us, ms, s, m, h)"))?;
        if num_end == 0 {
            return Err(format!("invalid duration {s:?}: expected a number"));
        }
        let value: f64 = rest[..num_end]
            .parse()
            .map_err(|_| format!("invalid duration {s:?}: bad number {:?}", &rest[..num_end]))?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            unit => {
                return Err(format!(
                    "invalid duration {s:?}: unknown unit {unit:?} (expected ns, us, ms, s, m, h)"
                ));
            }
        };
        total += value * seconds;
        rest = &rest[unit_end..];
    }
    Ok(Duration::from_secs_f64(total))
}

/// Parses a Kubernetes quantity of bytes: `64Mi`, `1Gi`, `500M`, `1048576`.
pub fn parse_quantity(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let value: u64 = num.parse().map_err(|_| {
        format!("invalid quantity {s:?}: expected a whole number with an optional suffix")
    })?;
    let factor: u64 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        other => {
            return Err(format!(
                "invalid quantity {s:?}: unknown suffix {other:?} (expected Ki, Mi, Gi, k, M, G)"
            ));
        }
    };
    value
        .checked_mul(factor)
        .ok_or_else(|| format!("quantity {s:?} is too large"))
}

/// A duration written as a string (`10s`) or a number of seconds.
#[derive(Deserialize)]
#[serde(untagged)]
enum DurationRepr {
    Text(String),
    Seconds(u64),
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    match DurationRepr::deserialize(d)? {
        DurationRepr::Text(s) => parse_duration(&s).map_err(serde::de::Error::custom),
        DurationRepr::Seconds(n) => Ok(Duration::from_secs(n)),
    }
}

fn optional_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

#[derive(Deserialize)]
#[serde(untagged)]
enum QuantityRepr {
    Text(String),
    Bytes(u64),
}

fn quantity<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match QuantityRepr::deserialize(d)? {
        QuantityRepr::Text(s) => parse_quantity(&s).map_err(serde::de::Error::custom),
        QuantityRepr::Bytes(n) => Ok(n),
    }
}

impl fmt::Display for PermissionRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        write!(
            f,
            "{} on {}/{}",
            self.verbs.join(","),
            group,
            self.resources.join(",")
        )
    }
}

#[cfg(test)]
mod tests;
