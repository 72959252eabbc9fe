//! A plugin entry (of `plugins`, or the spec of a WasmReconciler object):
//! its component, how the host runs it, and what it is granted.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::shape::{mapping, mappings, optional_mapping};
use serde::Deserialize;

use super::error::FieldProblem;
use super::limits::LimitsConfig;
use super::record::RecordConfig;
use super::rollout::{CandidateConfig, CandidateMode};
use super::settings;
use super::source::{self, SourceConfig, SourceSpec};
use super::units::{
    MILLI, SECOND, YEAR, bytes_within, count, duration, optional_duration, optional_quantity,
    quantity, rate, within,
};
use super::webhook::AdmissionConfig;
use crate::control::controller::ControllerOptions;
use crate::control::secrets::SecretWatch;
use crate::control::workqueue::ratelimit;
use crate::meta::syntax;
use crate::sandbox::hostapi::{PermissionRule, RuleProblem};
use crate::sandbox::outbound::{
    MAX_SECRETS, OutboundGrant, OutboundLimits, OutboundRule, SecretBinding, Secrets,
};
use crate::sandbox::{InstanceMode, Limits, ReuseLimits};

/// One plugin: its component and how the host runs it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PluginConfig {
    pub name: String,
    /// Shorthand for `source: { file: PATH }`.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Where the component comes from (one of `path` and `source`).
    #[serde(default, deserialize_with = "optional_mapping")]
    pub source: Option<SourceConfig>,
    #[serde(default = "default_max_concurrent_reconciles")]
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
    #[serde(default, deserialize_with = "mapping")]
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
    #[serde(default, deserialize_with = "mappings")]
    pub permissions: Vec<PermissionRule>,
    /// Where outside the cluster its `wasi:http` requests may go (default:
    /// nowhere).
    #[serde(default)]
    pub outbound: Vec<OutboundRule>,
    /// Values its outbound requests carry without the plugin seeing them
    /// (`${secret:NAME}` in a header value), each bound to the only hosts
    /// it may be sent to.
    #[serde(default, deserialize_with = "mappings")]
    pub secrets: Vec<SecretBinding>,
    /// Handed to the plugin as JSON.
    #[serde(default = "empty_object")]
    pub settings: serde_json::Value,
    /// Ceilings on what one reconcile may consume.
    #[serde(default, deserialize_with = "mapping")]
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
    #[serde(default, deserialize_with = "optional_mapping")]
    pub candidate: Option<CandidateConfig>,
    /// Write matching reconciles' transcripts (every host call with its
    /// answer, the context read, the result) for `wasmctrl replay`.
    #[serde(default, deserialize_with = "optional_mapping")]
    pub record: Option<RecordConfig>,
    /// How the host answers with the plugin's admission verdicts (its
    /// webhooks are declared by the plugin and served under `webhook`).
    #[serde(default, deserialize_with = "mapping")]
    pub admission: AdmissionConfig,
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

impl From<InstanceModeConfig> for InstanceMode {
    fn from(mode: InstanceModeConfig) -> Self {
        match mode {
            InstanceModeConfig::Fresh => InstanceMode::Fresh,
            InstanceModeConfig::Reuse => InstanceMode::Reuse,
            InstanceModeConfig::Auto => InstanceMode::Auto,
        }
    }
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

    /// The sandbox limits of each instance of the plugin.
    pub fn sandbox_limits(&self) -> Limits {
        let l = &self.limits;
        Limits {
            memory_bytes: self.memory_limit as usize,
            fuel: self.fuel,
            instances: l.instances as usize,
            memories: l.memories as usize,
            tables: l.tables as usize,
            output_bytes: l.output_bytes as usize,
            output_line: l.output_line.min(l.output_bytes) as usize,
            log_calls: l.log_calls,
            host_calls: l.host_calls,
            ..Limits::default()
        }
    }

    /// When a warm instance of the plugin is recycled: `maxInstanceMemory`
    /// defaults to ¾ of `memoryLimit`, and as many are kept warm as
    /// reconciles run at once.
    pub fn reuse_limits(&self) -> ReuseLimits {
        ReuseLimits {
            max_calls: self.max_calls_per_instance,
            max_age: self.max_instance_age,
            max_memory: self
                .max_instance_memory
                .unwrap_or(self.memory_limit / 4 * 3) as usize,
            max_idle: self.max_concurrent_reconciles,
        }
    }
}

/// The per-key and overall retry limits (client-go's default controller
/// rate limiter with every field chosen; its defaults by default).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct RateLimiterConfig {
    #[serde(deserialize_with = "duration")]
    pub base_delay: Duration,
    #[serde(deserialize_with = "duration")]
    pub max_delay: Duration,
    pub qps: f64,
    pub burst: u32,
}

impl Default for RateLimiterConfig {
    fn default() -> Self {
        Self {
            base_delay: ratelimit::DEFAULT_BASE_DELAY,
            max_delay: ratelimit::DEFAULT_MAX_DELAY,
            qps: ratelimit::DEFAULT_QPS,
            burst: ratelimit::DEFAULT_BURST,
        }
    }
}

impl RateLimiterConfig {
    /// Checks a plugin's `rateLimiter` (paths relative to the plugin).
    fn check(&self) -> Result<(), FieldProblem> {
        let check = |field: &str, r: Result<(), String>| r.map_err(|m| FieldProblem::new(field, m));
        check(
            "rateLimiter.maxDelay",
            within(self.max_delay, Duration::ZERO..=ratelimit::MAX_DELAY),
        )?;
        if self.base_delay > self.max_delay {
            return Err(FieldProblem::new(
                "rateLimiter.baseDelay",
                "must not exceed maxDelay",
            ));
        }
        check("rateLimiter.qps", rate(self.qps, ratelimit::MAX_QPS))?;
        check(
            "rateLimiter.burst",
            count(u64::from(self.burst), 1..=u64::from(ratelimit::MAX_BURST)),
        )
    }
}

fn default_max_calls_per_instance() -> u32 {
    ReuseLimits::default().max_calls
}
fn default_max_instance_age() -> Duration {
    ReuseLimits::default().max_age
}

fn default_max_concurrent_reconciles() -> usize {
    ControllerOptions::new(String::new()).max_concurrent_reconciles
}
fn default_reconcile_timeout() -> Duration {
    ControllerOptions::new(String::new()).reconcile_timeout
}
fn default_memory_limit() -> u64 {
    Limits::default().memory_bytes as u64
}

fn empty_object() -> serde_json::Value {
    serde_json::json!({})
}

/// The most namespaces a plugin names.
pub const MAX_NAMESPACES: usize = 64;
/// The most rules a `permissions` or `maxGrant` list holds.
pub const MAX_RULES: usize = 64;

const DNS_LABEL: &str =
    "must be a DNS label (lowercase letters, digits and '-', at most 63 characters)";

impl PluginConfig {
    /// Checks every field of one plugin but its name (a config file and a
    /// WasmReconciler object name plugins differently). The same checks
    /// hold wherever a plugin is defined, so the two can never disagree.
    pub fn check(&self) -> Result<(), FieldProblem> {
        let check = |field: &str, r: Result<(), String>| r.map_err(|m| FieldProblem::new(field, m));
        source::check_origin(
            "source",
            "the component",
            self.path.as_ref(),
            self.source.as_ref(),
        )?;
        check(
            "maxConcurrentReconciles",
            count(
                self.max_concurrent_reconciles as u64,
                ControllerOptions::MAX_CONCURRENT_RECONCILES,
            ),
        )?;
        check(
            "reconcileTimeout",
            within(self.reconcile_timeout, ControllerOptions::RECONCILE_TIMEOUT),
        )?;
        check(
            "memoryLimit",
            bytes_within(self.memory_limit, Limits::MEMORY_BYTES),
        )?;
        if self.fuel == Some(0) {
            return Err(FieldProblem::new(
                "fuel",
                "must be positive (omit it for no fuel limit)",
            ));
        }
        self.rate_limiter.check()?;
        if let Some(list) = &self.namespaces {
            if list.is_empty() {
                return Err(FieldProblem::new(
                    "namespaces",
                    "must name at least one namespace (omit it for all)",
                ));
            }
            if list.len() > MAX_NAMESPACES {
                return Err(FieldProblem::new(
                    "namespaces",
                    format!(
                        "names {} namespaces; a plugin names at most {MAX_NAMESPACES} (each is an informer of every kind it watches; omit it for all)",
                        list.len()
                    ),
                ));
            }
            for ns in list {
                check("namespaces", syntax::namespace(ns).map_err(|e| e.message))?;
            }
        }
        if let Some(period) = self.resync_period {
            check("resyncPeriod", within(period, SECOND..=YEAR))?;
        }
        if let Some(idle) = self.idle_unload {
            check("idleUnload", within(idle, MILLI..=YEAR))?;
        }
        settings::check("settings", &self.settings)?;
        check(
            "maxCallsPerInstance",
            count(
                u64::from(self.max_calls_per_instance),
                ReuseLimits::MAX_CALLS,
            ),
        )?;
        check(
            "maxInstanceAge",
            within(self.max_instance_age, ReuseLimits::MAX_AGE),
        )?;
        if let Some(m) = self.max_instance_memory {
            let least = *Limits::MEMORY_BYTES.start();
            check("maxInstanceMemory", count(m, least..=self.memory_limit))?;
        }
        self.limits.check()?;
        if let Some(c) = &self.candidate {
            c.check()?;
        }
        if let Some(r) = &self.record {
            r.check()?;
        }
        check_rules(&self.permissions, "permissions")?;
        if self.outbound.len() > MAX_OUTBOUND_RULES {
            return Err(FieldProblem::new(
                "outbound",
                format!("at most {MAX_OUTBOUND_RULES} rules"),
            ));
        }
        for (i, rule) in self.outbound.iter().enumerate() {
            check(&format!("outbound[{i}]"), rule.target().map(|_| ()))?;
        }
        if self.secrets.len() > MAX_SECRETS {
            return Err(FieldProblem::new(
                "secrets",
                format!("at most {MAX_SECRETS} secrets per plugin"),
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, secret) in self.secrets.iter().enumerate() {
            check(&format!("secrets[{i}]"), secret.check())?;
            if !names.insert(&secret.name) {
                return Err(FieldProblem::new(
                    format!("secrets[{i}].name"),
                    format!("a second secret named {:?}", secret.name),
                ));
            }
        }
        Ok(())
    }

    /// The plugin's outbound grant with its secrets, read (a
    /// `secretKeyRef`) through `watch`.
    pub fn outbound_grant_with(&self, watch: Option<&SecretWatch>) -> OutboundGrant {
        let secrets = Secrets::new(self.secrets.clone(), watch)
            .expect("validated: secrets are checked when the config is parsed");
        self.outbound_grant().with_secrets(secrets)
    }

    /// The plugin's outbound grant: its `outbound` rules under its
    /// `limits.http*` (checked by [`PluginConfig::check`]), without secrets.
    pub fn outbound_grant(&self) -> OutboundGrant {
        let l = &self.limits;
        OutboundGrant::new(
            self.outbound.clone(),
            OutboundLimits {
                requests: l.http_requests,
                request_bytes: l.http_request_bytes,
                response_bytes: l.http_response_bytes,
                connections: l.http_connections,
            },
        )
        .expect("validated: outbound rules are checked when the config is parsed")
    }
}

/// Outbound rules one plugin may be granted.
const MAX_OUTBOUND_RULES: usize = 64;

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
pub(super) fn check_rules(rules: &[PermissionRule], at: &str) -> Result<(), FieldProblem> {
    if rules.len() > MAX_RULES {
        return Err(FieldProblem::new(
            at,
            format!("names {} rules; at most {MAX_RULES}", rules.len()),
        ));
    }
    for (j, rule) in rules.iter().enumerate() {
        rule.check()
            .map_err(|RuleProblem { field, message }| match field {
                Some(field) => FieldProblem::new(format!("{at}[{j}].{field}"), message),
                None => FieldProblem::new(format!("{at}[{j}]"), message),
            })?;
    }
    Ok(())
}

fn is_dns_label(s: &str) -> bool {
    wasmctrl_apimachinery::names::dns1123_label(s).is_ok()
}
