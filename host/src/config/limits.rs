//! `limits` of a plugin: what one reconcile may consume.

use serde::Deserialize;

use super::error::FieldProblem;
use super::units::{count, quantity, rate};

/// The most core instances, memories and tables a plugin may be allowed per
/// component instance (`limits.instances`, …): the engine's instance pool is
/// sized for them.
pub const MAX_INSTANCES: usize = 64;
pub const MAX_MEMORIES: usize = 8;
pub const MAX_TABLES: usize = 64;

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

impl LimitsConfig {
    /// Checks a plugin's `limits` (paths relative to the plugin).
    pub(super) fn check(&self) -> Result<(), FieldProblem> {
        let check = |field: &str, r: Result<(), String>| r.map_err(|m| FieldProblem::new(field, m));
        let l = self;
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
        Ok(())
    }
}
