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
//! pluginsFrom: { kind: WasmReconciler }   # also plugins defined as objects
//! maxGrant:                               # … granted at most this
//!   - { group: "", resources: [configmaps], verbs: [get, list, watch, patch] }
//! ```

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use wasmctrl_apimachinery::names;

use crate::meta::syntax;

pub(crate) mod reach;
mod source;
pub use reach::{Reach, is_internal, is_loopback_url};
pub use source::{
    DEFAULT_FETCH_TIMEOUT, DEFAULT_MAX_SIZE, FetchLimits, OciSourceSpec, SourceConfig,
    SourceProblem, SourceSpec, UrlSourceSpec, oci_reference, sha256_digest,
};

pub const API_VERSION: &str = "wasmctrl.dev/v1alpha1";

/// The most core instances, memories and tables a plugin may be allowed per
/// component instance (`limits.instances`, …): the engine's instance pool is
/// sized for them.
pub const MAX_INSTANCES: usize = 64;
pub const MAX_MEMORIES: usize = 8;
pub const MAX_TABLES: usize = 64;
/// Bytes of a plugin's `settings` as JSON.
const MAX_SETTINGS: usize = 1 << 20;

const MILLI: Duration = Duration::from_millis(1);
const SECOND: Duration = Duration::from_secs(1);
const HOUR: Duration = Duration::from_secs(3600);
const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);
/// No duration in a config may be longer: arithmetic on deadlines and
/// timers can then never overflow.
const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `d` within `[min, max]`, said in the units a user writes.
fn within(d: Duration, min: Duration, max: Duration) -> Result<(), String> {
    if d < min || d > max {
        return Err(format!(
            "must be between {} and {} (got {})",
            show(min),
            show(max),
            show(d)
        ));
    }
    Ok(())
}

/// A duration as a user writes it (`90s`, `5m`, `250ms`).
pub fn show_duration(d: Duration) -> String {
    show(d)
}

fn show(d: Duration) -> String {
    match d.as_millis() {
        0 => "0".into(),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

fn count(n: u64, min: u64, max: u64) -> Result<(), String> {
    if n < min || n > max {
        return Err(format!("must be between {min} and {max} (got {n})"));
    }
    Ok(())
}

fn rate(r: f64, max: f64) -> Result<(), String> {
    if !(r.is_finite() && r > 0.0 && r <= max) {
        return Err(format!(
            "must be a positive number of at most {max} (got {r})"
        ));
    }
    Ok(())
}
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
    /// What the shared informer cache keeps of each object.
    #[serde(default)]
    pub cache: CacheSection,
    #[serde(default)]
    pub leader_election: LeaderElectionConfig,
    /// Spread the keys over the replicas (see [`crate::control::shard`]);
    /// None: one leader (with leader election) or every host reconciles
    /// every key.
    #[serde(default)]
    pub sharding: Option<ShardingConfig>,
    #[serde(default)]
    pub runtime: RuntimeSection,
    #[serde(default)]
    pub plugins: Vec<PluginConfig>,
    /// Also run the plugins defined by WasmReconciler objects in the
    /// cluster (opt-in; see [`PluginsFrom`]).
    #[serde(default)]
    pub plugins_from: Option<PluginsFrom>,
    /// The most a WasmReconciler object may grant its plugin: an object
    /// whose `permissions` (within its `namespaces`) allow anything these
    /// rules do not is refused. Unset is `[]`: object plugins may be granted
    /// nothing, so every object that asks for a permission is refused
    /// (plugins of the config file are not limited by it).
    #[serde(default)]
    pub max_grant: Option<Vec<PermissionRule>>,
    /// The directory of the config file; plugin paths are relative to it.
    #[serde(skip)]
    pub base_dir: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AdminConfig {
    /// Where `/metrics`, `/healthz`, `/readyz` and `/plugins` are served.
    pub bind: SocketAddr,
    /// A file holding the bearer token the mutating endpoints (`POST
    /// /plugins/{name}/reload`) require. Required when `bind` is not a
    /// loopback address; relative to the config file.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:9090".parse().unwrap(),
            token_file: None,
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
    /// How long the leader keeps trying to renew before it gives up
    /// leadership and stops its workers; less than `leaseDuration`, so a
    /// leader stops before a standby may take over (client-go's
    /// `renewDeadline`). Default: two thirds of `leaseDuration`.
    #[serde(default, deserialize_with = "duration")]
    pub renew_deadline: Duration,
    /// How often the leader renews (and a standby retries). Default: 2s, at
    /// most half of `renewDeadline`.
    #[serde(default, deserialize_with = "duration")]
    pub retry_period: Duration,
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            namespace: default_namespace(),
            lease_name: default_lease_name(),
            lease_duration: default_lease_duration(),
            renew_deadline: Duration::ZERO,
            retry_period: Duration::ZERO,
        }
        .with_derived_defaults()
    }
}

impl LeaderElectionConfig {
    /// Fills `renewDeadline` and `retryPeriod` left out (zero) from
    /// `leaseDuration`, client-go's 15s/10s/2s proportions.
    fn with_derived_defaults(mut self) -> Self {
        if self.renew_deadline.is_zero() {
            self.renew_deadline = self.lease_duration * 2 / 3;
        }
        if self.retry_period.is_zero() {
            self.retry_period = default_retry_period().min(self.renew_deadline / 2);
        }
        self
    }
}

/// Keys spread over replicas: each replica reconciles the keys of the shards
/// whose Lease (`<leaderElection.leaseName>-shard-<i>`) it holds. The
/// Leases use `leaderElection`'s namespace and timing, and
/// `leaderElection.enabled` must be true.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ShardingConfig {
    /// How many shards the keys are hashed into (1 to 256); more shards
    /// than replicas lets the load rebalance in smaller steps.
    pub shards: u32,
}

/// What the shared informer cache keeps of each object (fixed at start:
/// every plugin reads the same informers).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct CacheSection {
    /// Drop `metadata.managedFields` from cached objects, and from the
    /// objects the host API hands guests (live reads, write answers)
    /// (default: true). Reconcilers do not read them, and every guest
    /// would parse them on every read.
    pub strip_managed_fields: bool,
}

impl Default for CacheSection {
    fn default() -> Self {
        Self {
            strip_managed_fields: true,
        }
    }
}

impl CacheSection {
    /// The informer cache's options.
    pub fn options(&self) -> crate::control::informer::CacheOptions {
        crate::control::informer::CacheOptions {
            strip_managed_fields: self.strip_managed_fields,
        }
    }
}

/// The most shards a config may ask for: one Lease each, all renewed every
/// `retryPeriod`, and each named in the generated RBAC.
pub const MAX_SHARDS: u32 = 256;

/// Engine-wide wasm settings. They are fixed when the host starts: a plugin
/// added later that needs more (fuel, instance slots) is refused with the
/// reason.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RuntimeSection {
    /// Where compiled components are cached across restarts (relative to
    /// the config file). Default: none (memory only). Components pulled by
    /// URL and registry sources are kept under `sources/` in it (see
    /// [`HostConfig::source_cache_dir`]).
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
    /// Compile fuel metering in (needed by any plugin with `fuel`). Default:
    /// on when a plugin of the config at start-up sets `fuel`.
    #[serde(default)]
    pub fuel: Option<bool>,
    /// Instances live at once across all plugins. Default: twice the sum of
    /// `maxConcurrentReconciles` at start-up plus headroom.
    #[serde(default)]
    pub max_instances: Option<u32>,
    /// Requests per second to the API server for all plugins together; a
    /// plugin of the config without `limits.apiQps` gets an equal share of
    /// it. With `pluginsFrom`, it is also one bucket (burst 2 × apiQps)
    /// that every object plugin and every config plugin without
    /// `limits.apiQps` draws from besides its own. A config plugin with
    /// `limits.apiQps` is the config author's explicit choice and keeps
    /// only its own bucket.
    #[serde(default = "default_host_api_qps")]
    pub api_qps: f64,
    /// How plugins' guests share the CPU when more than one has work.
    #[serde(default)]
    pub guest_cpu: GuestCpuSection,
}

impl Default for RuntimeSection {
    fn default() -> Self {
        Self {
            cache_dir: None,
            fuel: None,
            max_instances: None,
            api_qps: default_host_api_qps(),
            guest_cpu: GuestCpuSection::default(),
        }
    }
}

/// `runtime.guestCpu`: while another plugin has work, a plugin's guests,
/// past the first 5 ms of each call, may use `burst` of CPU at once and then
/// `share` of one core, all its calls together. Ordinary reconciles never
/// run that long, and a plugin alone is never held back.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GuestCpuSection {
    /// CPU time beyond the share taken at once (the bucket's depth).
    /// Default 50ms.
    #[serde(default = "default_guest_burst", deserialize_with = "duration")]
    pub burst: Duration,
    /// A CPU quantity (`100m`, `0.5`, `1`), in millicores. Default 100m.
    #[serde(default = "default_guest_share", deserialize_with = "cpu")]
    pub share: u32,
}

impl Default for GuestCpuSection {
    fn default() -> Self {
        Self {
            burst: default_guest_burst(),
            share: default_guest_share(),
        }
    }
}

fn default_guest_burst() -> Duration {
    Duration::from_millis(50)
}

fn default_guest_share() -> u32 {
    100
}

/// The smallest CPU share a plugin may be given (a tick per 100 ticks).
pub const MIN_GUEST_SHARE_MILLICORES: u32 = 10;
/// The largest: more than any host has cores.
pub const MAX_GUEST_SHARE_MILLICORES: u32 = 1024 * 1000;

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
}

/// The most hosts `pluginsFrom.allowHosts` may name: each is compared with
/// every connection an object's source makes.
pub const MAX_ALLOW_HOSTS: usize = 64;

impl PluginsFrom {
    /// `maxApiQps`, or its default under `runtime`.
    pub fn max_api_qps(&self, runtime: &RuntimeSection) -> f64 {
        self.max_api_qps.unwrap_or(runtime.api_qps)
    }

    /// Where an object's sources may connect: public addresses, and the
    /// `allowHosts`.
    pub fn reach(&self) -> Reach {
        Reach::public(self.allow_hosts.iter().cloned())
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

/// A plugin's ceilings (docs/SECURITY.md lists them with their defaults).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LimitsConfig {
    /// Bytes of output (stdout, stderr, log messages) kept per reconcile.
    #[serde(default = "default_output_bytes", deserialize_with = "quantity")]
    pub output_bytes: u64,
    /// Bytes of one output line or log message kept.
    #[serde(default = "default_output_line", deserialize_with = "quantity")]
    pub output_line: u64,
    /// `log` calls per reconcile.
    #[serde(default = "default_log_calls")]
    pub log_calls: u32,
    /// `kube` calls per reconcile; one more fails the reconcile.
    #[serde(default = "default_host_calls")]
    pub host_calls: u32,
    /// Bytes of one `list` result.
    #[serde(default = "default_list_bytes", deserialize_with = "quantity")]
    pub list_bytes: u64,
    /// API requests per second (default: an equal share of
    /// `runtime.apiQps` for a config plugin, `runtime.apiQps` for an
    /// object's, which `pluginsFrom.maxApiQps` bounds).
    #[serde(default)]
    pub api_qps: Option<f64>,
    /// API requests allowed at once above `apiQps` (default: 2 × apiQps).
    #[serde(default)]
    pub api_burst: Option<u32>,
    /// Core instances one instance of the component may create.
    #[serde(default = "default_instances")]
    pub instances: u32,
    /// Linear memories one instance may define (`memoryLimit` is their sum).
    #[serde(default = "default_memories")]
    pub memories: u32,
    /// Tables one instance may define.
    #[serde(default = "default_tables")]
    pub tables: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            output_bytes: default_output_bytes(),
            output_line: default_output_line(),
            log_calls: default_log_calls(),
            host_calls: default_host_calls(),
            list_bytes: default_list_bytes(),
            api_qps: None,
            api_burst: None,
            instances: default_instances(),
            memories: default_memories(),
            tables: default_tables(),
        }
    }
}

/// One plugin: its component and how the host runs it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PluginConfig {
    pub name: String,
    /// Shorthand for `source: { file: PATH }`.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Where the component comes from (one of `path` and `source`).
    #[serde(default)]
    pub source: Option<SourceConfig>,
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
    /// After this long without a key, drop the plugin's compiled code and
    /// pre-linked state (its informers and queue stay); its next key loads
    /// it again from the on-disk compiled cache (`runtime.cacheDir`, which
    /// it requires). None (the default): always resident.
    #[serde(default, deserialize_with = "optional_duration")]
    pub idle_unload: Option<Duration>,
    /// What the plugin is allowed to do through the `kube` interface.
    #[serde(default)]
    pub permissions: Vec<PermissionRule>,
    /// Handed to the plugin as JSON.
    #[serde(default = "empty_object")]
    pub settings: serde_json::Value,
    /// Ceilings on what one reconcile may consume.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// `fresh` (a new instance per reconcile), `reuse` (warm instances) or
    /// `auto` (reuse for components with a large initial memory:
    /// interpreted guests).
    #[serde(default)]
    pub instance_mode: InstanceModeConfig,
    /// A warm instance serves at most this many reconciles.
    #[serde(default = "default_max_calls_per_instance")]
    pub max_calls_per_instance: u32,
    /// A warm instance lives at most this long.
    #[serde(default = "default_max_instance_age", deserialize_with = "duration")]
    pub max_instance_age: Duration,
    /// A warm instance whose memory grew past this is dropped (default: ¾ of
    /// memoryLimit).
    #[serde(default, deserialize_with = "optional_quantity")]
    pub max_instance_memory: Option<u64>,
    /// Skip a resync or duplicate event of a key when nothing its last
    /// done reconcile read or wrote changed, and neither did the plugin's
    /// digest or settings (see `ops::manager::skip`).
    #[serde(default)]
    pub skip_unchanged: bool,
    /// A second version run beside this one: in shadow (its writes
    /// captured and compared, never sent) or as a canary on a share of the
    /// keys.
    #[serde(default)]
    pub candidate: Option<CandidateConfig>,
    /// Write matching reconciles' transcripts (every host call with its
    /// answer, the context read, the result) for `wasmctrl replay`.
    #[serde(default)]
    pub record: Option<RecordConfig>,
}

/// `record:` of a plugin: its reconciles' transcripts, one JSON line each,
/// in `<dir>/<plugin>.jsonl`, rotated (see `ops::transcript::record`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RecordConfig {
    /// The directory (relative to the config file).
    pub dir: PathBuf,
    /// `all`, or a label selector on the reconciled object: only the keys
    /// whose object matches are recorded.
    #[serde(default = "record_all")]
    pub keys: String,
    /// Transcripts per file before it rotates.
    #[serde(default = "default_record_max")]
    pub max: u64,
    /// Bytes per file before it rotates; a transcript larger than this is
    /// dropped (counted in `wasmctrl_record_dropped_total`).
    #[serde(default = "default_record_max_bytes", deserialize_with = "quantity")]
    pub max_bytes: u64,
    /// Files kept, the current one included: the plugin's transcripts take
    /// at most `files × maxBytes`.
    #[serde(default = "default_record_files")]
    pub files: u32,
}

/// The largest `record.maxBytes`: one transcript line at most.
pub const MAX_RECORD_BYTES: u64 = 256 << 20;

fn record_all() -> String {
    "all".into()
}

fn default_record_max() -> u64 {
    1000
}

fn default_record_max_bytes() -> u64 {
    16 << 20
}

fn default_record_files() -> u32 {
    4
}

impl RecordConfig {
    /// The keys' label selector; None for `all`.
    pub fn selector(&self) -> Result<Option<crate::meta::selector::LabelSelector>, String> {
        match self.keys.trim() {
            "all" => Ok(None),
            "" => Err("must be `all` or a label selector".into()),
            s => crate::meta::selector::LabelSelector::parse(s).map(Some),
        }
    }

    fn check(&self) -> Result<(), FieldProblem> {
        let check = |field: &str, r: Result<(), String>| {
            r.map_err(|m| FieldProblem::new(format!("record.{field}"), m))
        };
        if self.dir.as_os_str().is_empty() {
            return Err(FieldProblem::new(
                "record.dir",
                "is required: the directory the transcripts go to",
            ));
        }
        check("keys", self.selector().map(|_| ()))?;
        check("max", count(self.max, 1, 1_000_000))?;
        check(
            "maxBytes",
            count(self.max_bytes, 64 << 10, MAX_RECORD_BYTES)
                .map_err(|_| "must be between 64Ki and 256Mi".to_string()),
        )?;
        check("files", count(u64::from(self.files), 1, 100))
    }
}

/// How a candidate version runs beside the stable one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CandidateMode {
    /// After the stable version reconciles a key, the candidate reconciles
    /// it against a capturing API: reads served, writes recorded and
    /// compared with the stable version's, never sent.
    Shadow,
    /// The candidate reconciles `canary.percent` of the keys for real.
    Canary,
}

/// `candidate:` of a plugin.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CandidateConfig {
    /// Shorthand for `source: { file: PATH }`.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Where the candidate's component comes from (one of `path` and `source`).
    #[serde(default)]
    pub source: Option<SourceConfig>,
    /// The candidate's settings (default: the plugin's).
    #[serde(default)]
    pub settings: Option<serde_json::Value>,
    pub mode: CandidateMode,
    /// Shadow runs at once; a key finished by the stable version while all
    /// are busy gets no shadow run (counted in
    /// `wasmctrl_shadow_skipped_total`), so shadows never delay it.
    #[serde(default = "one")]
    pub max_concurrent_shadows: usize,
    /// Divergences kept for `/plugins/{name}/shadow`.
    #[serde(default = "default_keep_divergences")]
    pub keep_divergences: usize,
    /// Required with `mode: canary`.
    #[serde(default)]
    pub canary: Option<CanaryConfig>,
}

/// `candidate.canary`: the share of keys, how the two versions are
/// compared, and when the candidate is rolled back or promoted.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CanaryConfig {
    /// Keys (by a stable hash) the candidate reconciles, 1–99.
    pub percent: u32,
    /// The sliding window both versions are measured over.
    #[serde(default = "default_canary_window", deserialize_with = "duration")]
    pub window: Duration,
    /// Reconciles of the candidate within the window before it is judged.
    #[serde(default = "default_min_reconciles")]
    pub min_reconciles: u32,
    /// Rolled back when the candidate's failure rate (errors, traps,
    /// timeouts) exceeds the stable version's by more than this (0–1).
    #[serde(default = "default_max_failure_rate_increase")]
    pub max_failure_rate_increase: f64,
    /// Rolled back when the candidate's p99 reconcile time exceeds this
    /// multiple of the stable version's (unset: not compared).
    #[serde(default)]
    pub max_p99_ratio: Option<f64>,
    /// Promote the candidate after one whole clean window.
    #[serde(default)]
    pub auto_promote: bool,
}

impl PluginConfig {
    /// Reconciles that may run at once: the workers, plus the shadow runs
    /// of a candidate in shadow mode (a canary shares the workers).
    pub fn concurrency(&self) -> usize {
        self.max_concurrent_reconciles
            + match &self.candidate {
                Some(c) if c.mode == CandidateMode::Shadow => c.max_concurrent_shadows,
                _ => 0,
            }
    }

    /// The config the candidate version loads with: the plugin's, with the
    /// candidate's source and settings.
    pub fn candidate_plugin(&self) -> Option<PluginConfig> {
        let c = self.candidate.as_ref()?;
        Some(PluginConfig {
            path: c.path.clone(),
            source: c.source.clone(),
            settings: c.settings.clone().unwrap_or_else(|| self.settings.clone()),
            candidate: None,
            record: None,
            ..self.clone()
        })
    }
}

/// `instanceMode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum InstanceModeConfig {
    #[default]
    Fresh,
    Reuse,
    Auto,
}

impl PluginConfig {
    /// Where the component comes from (`path` is `source: { file: path }`).
    pub fn source(&self) -> SourceSpec {
        match (&self.source, &self.path) {
            (Some(source), _) => source
                .spec()
                .expect("validated: a plugin's source is checked when the config is parsed"),
            (None, Some(f)) => SourceSpec::File(f.clone()),
            (None, None) => unreachable!("validated: a plugin has a path or a source"),
        }
    }

    /// The component file, resolved against the config file's directory,
    /// for a file source.
    pub fn file(&self, base_dir: &Path) -> Option<PathBuf> {
        match self.source() {
            SourceSpec::File(p) => Some(base_dir.join(p)),
            SourceSpec::Url(_) | SourceSpec::Oci(_) => None,
        }
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
fn default_max_calls_per_instance() -> u32 {
    1_000
}
fn default_max_instance_age() -> Duration {
    Duration::from_secs(600)
}
fn default_host_api_qps() -> f64 {
    200.0
}
fn default_output_bytes() -> u64 {
    1 << 20
}
fn default_output_line() -> u64 {
    16 << 10
}
fn default_log_calls() -> u32 {
    1_000
}
fn default_host_calls() -> u32 {
    10_000
}
fn default_list_bytes() -> u64 {
    16 << 20
}
fn default_instances() -> u32 {
    32
}
fn default_memories() -> u32 {
    4
}
fn default_tables() -> u32 {
    32
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
fn default_keep_divergences() -> usize {
    20
}
fn default_canary_window() -> Duration {
    Duration::from_secs(60)
}
fn default_min_reconciles() -> u32 {
    20
}
fn default_max_failure_rate_increase() -> f64 {
    0.1
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
        config.leader_election = config.leader_election.with_derived_defaults();
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
        let top =
            |field: &str, r: Result<(), String>| r.map_err(|m| invalid(field.to_string(), None, m));
        top(
            "shutdownTimeout",
            within(self.shutdown_timeout, Duration::ZERO, HOUR),
        )?;
        top(
            "cacheSyncTimeout",
            within(self.cache_sync_timeout, SECOND, HOUR),
        )?;
        if !self.admin.bind.ip().is_loopback() && self.admin.token_file.is_none() {
            return Err(invalid(
                "admin.tokenFile".into(),
                None,
                format!(
                    "is required when admin.bind ({}) is not a loopback address: the reload endpoint must not be open to the network",
                    self.admin.bind
                ),
            ));
        }
        let le = &self.leader_election;
        top(
            "leaderElection.namespace",
            syntax::namespace(&le.namespace).map_err(|e| e.message),
        )?;
        top(
            "leaderElection.leaseName",
            syntax::dns_subdomain("leaseName", &le.lease_name).map_err(|e| e.message),
        )?;
        top(
            "leaderElection.leaseDuration",
            within(le.lease_duration, SECOND, HOUR),
        )?;
        top(
            "leaderElection.renewDeadline",
            within(le.renew_deadline, MILLI, HOUR).and_then(|()| {
                (le.renew_deadline < le.lease_duration)
                    .then_some(())
                    .ok_or_else(|| "must be less than leaseDuration".to_string())
            }),
        )?;
        top(
            "leaderElection.retryPeriod",
            within(le.retry_period, MILLI, HOUR).and_then(|()| {
                (le.retry_period < le.renew_deadline)
                    .then_some(())
                    .ok_or_else(|| "must be less than renewDeadline".to_string())
            }),
        )?;
        if let Some(sharding) = &self.sharding {
            top(
                "sharding.shards",
                count(u64::from(sharding.shards), 1, u64::from(MAX_SHARDS)),
            )?;
            if !le.enabled {
                return Err(invalid(
                    "sharding".into(),
                    None,
                    "needs leaderElection.enabled: true (each shard is held through a Lease with its namespace and timing)".into(),
                ));
            }
            // The longest name derived from leaseName must still be a name.
            let longest = format!("{}-shard-{}", le.lease_name, sharding.shards - 1);
            top(
                "leaderElection.leaseName",
                syntax::dns_subdomain("leaseName", &longest)
                    .map_err(|e| format!("too long for sharding: {}", e.message)),
            )?;
        }
        top("runtime.apiQps", rate(self.runtime.api_qps, 1e6))?;
        let cpu = &self.runtime.guest_cpu;
        top(
            "runtime.guestCpu.share",
            count(
                u64::from(cpu.share),
                u64::from(MIN_GUEST_SHARE_MILLICORES),
                u64::from(MAX_GUEST_SHARE_MILLICORES),
            )
            .map_err(|e| format!("{e} (millicores)")),
        )?;
        if cpu.burst < Duration::from_millis(1) {
            return Err(invalid(
                "runtime.guestCpu.burst".into(),
                None,
                "must be at least 1ms (one epoch tick)".into(),
            ));
        }
        if let Some(n) = self.runtime.max_instances {
            top("runtime.maxInstances", count(u64::from(n), 1, 10_000))?;
        }
        let mut names = HashSet::new();
        for (i, p) in self.plugins.iter().enumerate() {
            let at = |field: &str| format!("plugins[{i}].{field}");
            let name = Some(p.name.as_str());
            if !is_dns_label(&p.name) {
                return Err(invalid(at("name"), name, DNS_LABEL.into()));
            }
            if !names.insert(p.name.as_str()) {
                return Err(invalid(at("name"), name, "duplicate plugin name".into()));
            }
            p.check()
                .map_err(|FieldProblem { field, message }| invalid(at(&field), name, message))?;
            if p.idle_unload.is_some() && self.runtime.cache_dir.is_none() {
                return Err(invalid(
                    at("idleUnload"),
                    name,
                    "needs runtime.cacheDir: an unloaded plugin is loaded again from its compiled artifact there".into(),
                ));
            }
            if p.source
                .as_ref()
                .is_some_and(|s| s.image_pull_secret.is_some())
            {
                return Err(invalid(
                    at("source.imagePullSecret"),
                    name,
                    "only applies to WasmReconciler objects; a host config names a docker config file (dockerConfig)".into(),
                ));
            }
        }
        if let Some(from) = &self.plugins_from {
            if from.kind != PLUGINS_FROM_KIND {
                return Err(invalid(
                    "pluginsFrom.kind".into(),
                    None,
                    format!("must be {PLUGINS_FROM_KIND:?}, not {:?}", from.kind),
                ));
            }
            top(
                "pluginsFrom.namespace",
                syntax::namespace(&from.namespace).map_err(|e| e.message),
            )?;
            if let Some(qps) = from.max_api_qps {
                top("pluginsFrom.maxApiQps", rate(qps, 1e5))?;
                // Object plugins draw from runtime.apiQps together: a larger
                // ceiling would promise what the host never grants.
                if qps > self.runtime.api_qps {
                    return Err(invalid(
                        "pluginsFrom.maxApiQps".into(),
                        None,
                        format!(
                            "must be at most runtime.apiQps ({}): object plugins draw their API requests from that budget (got {qps})",
                            self.runtime.api_qps
                        ),
                    ));
                }
            }
            if from.allow_hosts.len() > MAX_ALLOW_HOSTS {
                return Err(invalid(
                    "pluginsFrom.allowHosts".into(),
                    None,
                    format!(
                        "names {} hosts; at most {MAX_ALLOW_HOSTS}",
                        from.allow_hosts.len()
                    ),
                ));
            }
            for (i, entry) in from.allow_hosts.iter().enumerate() {
                top(&format!("pluginsFrom.allowHosts[{i}]"), allowed_host(entry))?;
            }
        }
        if let Some(rules) = &self.max_grant {
            check_rules(rules, "maxGrant")
                .map_err(|FieldProblem { field, message }| invalid(field, None, message))?;
        }
        Ok(())
    }

    /// Where URL and registry sources keep what they downloaded (by digest)
    /// and the digest each tag last resolved to: `runtime.cacheDir/sources`,
    /// or `.wasmctrl/cache/sources` next to the config file when
    /// `runtime.cacheDir` is unset (a restart must find them, so they are
    /// never memory only).
    pub fn source_cache_dir(&self) -> PathBuf {
        match &self.runtime.cache_dir {
            Some(dir) => self.base_dir.join(dir).join("sources"),
            None => self
                .base_dir
                .join(".wasmctrl")
                .join("cache")
                .join("sources"),
        }
    }

    /// The plugin named `name`.
    pub fn plugin(&self, name: &str) -> Option<&PluginConfig> {
        self.plugins.iter().find(|p| p.name == name)
    }
}

/// A field that is wrong: its path (relative to where the checked value
/// sits: `reconcileTimeout`, `source.oci`, `permissions[0].verbs`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    pub field: String,
    pub message: String,
}

impl FieldProblem {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

const DNS_LABEL: &str =
    "must be a DNS label (lowercase letters, digits and '-', at most 63 characters)";

impl PluginConfig {
    /// Checks every field of one plugin but its name (a config file and a
    /// WasmReconciler object name plugins differently). The same checks
    /// hold wherever a plugin is defined, so the two can never disagree.
    pub fn check(&self) -> Result<(), FieldProblem> {
        let check = |field: &str, r: Result<(), String>| r.map_err(|m| FieldProblem::new(field, m));
        match (&self.path, &self.source) {
            (Some(_), Some(_)) => {
                return Err(FieldProblem::new(
                    "source",
                    "give either path or source, not both",
                ));
            }
            (None, None) => {
                return Err(FieldProblem::new(
                    "source",
                    "is required: where the component comes from (path: FILE, or source: with one of file, url and oci)",
                ));
            }
            (None, Some(source)) => {
                if let Err(SourceProblem { field, message }) = source.spec() {
                    let path = match field {
                        "source" => "source".to_string(),
                        f => format!("source.{f}"),
                    };
                    return Err(FieldProblem::new(path, message));
                }
            }
            (Some(_), None) => {}
        }
        check(
            "maxConcurrentReconciles",
            count(self.max_concurrent_reconciles as u64, 1, 1024),
        )?;
        check(
            "reconcileTimeout",
            within(self.reconcile_timeout, MILLI, HOUR),
        )?;
        check(
            "memoryLimit",
            count(self.memory_limit, 1 << 20, 4 << 30)
                .map_err(|_| "must be between 1Mi and 4Gi".to_string()),
        )?;
        if self.fuel == Some(0) {
            return Err(FieldProblem::new(
                "fuel",
                "must be positive (omit it for no fuel limit)",
            ));
        }
        let rl = &self.rate_limiter;
        check(
            "rateLimiter.maxDelay",
            within(rl.max_delay, Duration::ZERO, YEAR),
        )?;
        if rl.base_delay > rl.max_delay {
            return Err(FieldProblem::new(
                "rateLimiter.baseDelay",
                "must not exceed maxDelay",
            ));
        }
        check("rateLimiter.qps", rate(rl.qps, 1e6))?;
        check(
            "rateLimiter.burst",
            count(u64::from(rl.burst), 1, 1_000_000),
        )?;
        if let Some(list) = &self.namespaces {
            if list.is_empty() {
                return Err(FieldProblem::new(
                    "namespaces",
                    "must name at least one namespace (omit it for all)",
                ));
            }
            for ns in list {
                check("namespaces", syntax::namespace(ns).map_err(|e| e.message))?;
            }
        }
        if let Some(period) = self.resync_period {
            check("resyncPeriod", within(period, SECOND, YEAR))?;
        }
        if let Some(idle) = self.idle_unload {
            check("idleUnload", within(idle, MILLI, YEAR))?;
        }
        if !self.settings.is_object() {
            return Err(FieldProblem::new("settings", "must be a mapping"));
        }
        let settings_len = self.settings.to_string().len();
        if settings_len > MAX_SETTINGS {
            return Err(FieldProblem::new(
                "settings",
                format!("is {settings_len} bytes as JSON; at most {MAX_SETTINGS} are allowed"),
            ));
        }
        check(
            "maxCallsPerInstance",
            count(u64::from(self.max_calls_per_instance), 1, 1_000_000_000),
        )?;
        check(
            "maxInstanceAge",
            within(self.max_instance_age, SECOND, YEAR),
        )?;
        if let Some(m) = self.max_instance_memory {
            check("maxInstanceMemory", count(m, 1 << 20, self.memory_limit))?;
        }
        let l = &self.limits;
        check(
            "limits.outputBytes",
            count(l.output_bytes, 1 << 10, 64 << 20),
        )?;
        check("limits.outputLine", count(l.output_line, 64, 1 << 20))?;
        check(
            "limits.logCalls",
            count(u64::from(l.log_calls), 0, 1_000_000),
        )?;
        check(
            "limits.hostCalls",
            count(u64::from(l.host_calls), 1, 1_000_000),
        )?;
        check("limits.listBytes", count(l.list_bytes, 1 << 10, 1 << 30))?;
        if let Some(qps) = l.api_qps {
            check("limits.apiQps", rate(qps, 1e5))?;
        }
        if let Some(burst) = l.api_burst {
            check("limits.apiBurst", count(u64::from(burst), 1, 100_000))?;
        }
        check(
            "limits.instances",
            count(u64::from(l.instances), 1, MAX_INSTANCES as u64),
        )?;
        check(
            "limits.memories",
            count(u64::from(l.memories), 1, MAX_MEMORIES as u64),
        )?;
        check(
            "limits.tables",
            count(u64::from(l.tables), 1, MAX_TABLES as u64),
        )?;
        if let Some(c) = &self.candidate {
            c.check()?;
        }
        if let Some(r) = &self.record {
            r.check()?;
        }
        check_rules(&self.permissions, "permissions")
    }
}

impl CandidateConfig {
    /// Checks a plugin's `candidate` (fields relative to the plugin).
    fn check(&self) -> Result<(), FieldProblem> {
        let check = |field: &str, r: Result<(), String>| {
            r.map_err(|m| FieldProblem::new(format!("candidate.{field}"), m))
        };
        match (&self.path, &self.source) {
            (Some(_), Some(_)) => {
                return Err(FieldProblem::new(
                    "candidate.source",
                    "give either path or source, not both",
                ));
            }
            (None, None) => {
                return Err(FieldProblem::new(
                    "candidate.source",
                    "is required: where the candidate's component comes from (path: FILE, or source: with one of file, url and oci)",
                ));
            }
            (None, Some(source)) => {
                if let Err(SourceProblem { field, message }) = source.spec() {
                    let path = match field {
                        "source" => "candidate.source".to_string(),
                        f => format!("candidate.source.{f}"),
                    };
                    return Err(FieldProblem::new(path, message));
                }
            }
            (Some(_), None) => {}
        }
        if let Some(settings) = &self.settings {
            if !settings.is_object() {
                return Err(FieldProblem::new("candidate.settings", "must be a mapping"));
            }
            let len = settings.to_string().len();
            if len > MAX_SETTINGS {
                return Err(FieldProblem::new(
                    "candidate.settings",
                    format!("is {len} bytes as JSON; at most {MAX_SETTINGS} are allowed"),
                ));
            }
        }
        check(
            "maxConcurrentShadows",
            count(self.max_concurrent_shadows as u64, 1, 64),
        )?;
        check(
            "keepDivergences",
            count(self.keep_divergences as u64, 1, 1000),
        )?;
        match (self.mode, &self.canary) {
            (CandidateMode::Canary, None) => Err(FieldProblem::new(
                "candidate.canary",
                "is required with mode: canary (at least `percent`)",
            )),
            (CandidateMode::Shadow, Some(_)) => Err(FieldProblem::new(
                "candidate.canary",
                "only applies to mode: canary",
            )),
            (CandidateMode::Shadow, None) => Ok(()),
            (CandidateMode::Canary, Some(k)) => {
                check("canary.percent", count(u64::from(k.percent), 1, 99))?;
                check("canary.window", within(k.window, SECOND, YEAR))?;
                check(
                    "canary.minReconciles",
                    count(u64::from(k.min_reconciles), 1, 1_000_000),
                )?;
                if !(0.0..=1.0).contains(&k.max_failure_rate_increase) {
                    return Err(FieldProblem::new(
                        "candidate.canary.maxFailureRateIncrease",
                        format!(
                            "must be between 0 and 1 (got {})",
                            k.max_failure_rate_increase
                        ),
                    ));
                }
                if let Some(r) = k.max_p99_ratio {
                    check("canary.maxP99Ratio", rate(r, 1e6))?;
                }
                Ok(())
            }
        }
    }
}

/// Whether `name` can name a plugin: a DNS label (it names metrics, the
/// queue and admin paths).
pub fn check_plugin_name(name: &str) -> Result<(), String> {
    if is_dns_label(name) {
        Ok(())
    } else {
        Err(DNS_LABEL.into())
    }
}

/// Checks permission rules (a plugin's `permissions`, the host's
/// `maxGrant`); `at` names the list in errors.
fn check_rules(rules: &[PermissionRule], at: &str) -> Result<(), FieldProblem> {
    for (j, rule) in rules.iter().enumerate() {
        for verb in &rule.verbs {
            if !VERBS.contains(&verb.as_str()) {
                return Err(FieldProblem::new(
                    format!("{at}[{j}].verbs"),
                    format!(
                        "unknown verb {verb:?} (expected one of {})",
                        VERBS.join(", ")
                    ),
                ));
            }
        }
        if rule.resources.is_empty() || rule.verbs.is_empty() {
            return Err(FieldProblem::new(
                format!("{at}[{j}]"),
                "needs at least one resource and one verb",
            ));
        }
        if rule.group != "*" {
            syntax::group(&rule.group)
                .map_err(|e| FieldProblem::new(format!("{at}[{j}].group"), e.message))?;
        }
        for ns in rule.namespaces.iter().flatten() {
            syntax::namespace(ns)
                .map_err(|e| FieldProblem::new(format!("{at}[{j}].namespaces"), e.message))?;
        }
    }
    Ok(())
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
    names::dns1123_label(s).is_ok()
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
    if !(total.is_finite() && total <= MAX_DURATION.as_secs_f64()) {
        return Err(format!("duration {s:?} is longer than 100 years"));
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

/// Parses a Kubernetes CPU quantity into millicores: `100m`, `0.5`, `2`.
pub fn parse_cpu(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let (number, scale) = match t.strip_suffix('m') {
        Some(n) => (n, 1.0),
        None => (t, 1000.0),
    };
    let ok = !number.is_empty()
        && number.chars().all(|c| c.is_ascii_digit() || c == '.')
        && number.chars().filter(|&c| c == '.').count() <= 1;
    let value: f64 = if ok { number.parse().ok() } else { None }.ok_or_else(|| {
        format!("invalid CPU quantity {s:?}: expected cores (0.5, 2) or millicores (100m)")
    })?;
    let millis = (value * scale).round();
    if !(millis >= 1.0 && millis <= f64::from(u32::MAX)) {
        return Err(format!(
            "CPU quantity {s:?} is out of range (1m to {} cores)",
            u32::MAX / 1000
        ));
    }
    Ok(millis as u32)
}

fn cpu<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum CpuRepr {
        Text(String),
        Cores(f64),
    }
    match CpuRepr::deserialize(d)? {
        CpuRepr::Text(s) => parse_cpu(&s),
        CpuRepr::Cores(n) => parse_cpu(&n.to_string()),
    }
    .map_err(serde::de::Error::custom)
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
        DurationRepr::Seconds(n) if n <= MAX_DURATION.as_secs() => Ok(Duration::from_secs(n)),
        DurationRepr::Seconds(n) => Err(serde::de::Error::custom(format!(
            "duration of {n} seconds is longer than 100 years"
        ))),
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

fn optional_quantity<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    quantity(d).map(Some)
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
