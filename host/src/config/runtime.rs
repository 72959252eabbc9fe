//! `runtime`: the engine-wide wasm settings, fixed when the host starts.

use std::path::PathBuf;
use std::time::Duration;

use super::shape::mapping;
use serde::Deserialize;

use super::error::FieldProblem;
use super::units::{bytes_within, count, cpu, duration, quantity, rate, show_duration};
use crate::sandbox::{GuestCpu, RuntimeConfig};

/// Engine-wide wasm settings. They are fixed when the host starts: a plugin
/// added later that needs more (fuel, instance slots) is refused with the
/// reason.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RuntimeSection {
    /// Where compiled components are cached across restarts (relative to
    /// the config file). Default: none (memory only). Components pulled by
    /// URL and registry sources are kept under `sources/` in it (see
    /// [`HostConfig::source_cache_dir`](super::HostConfig::source_cache_dir)).
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
    /// PEM certificates plugins' outbound HTTPS trusts besides the
    /// platform's roots (an internal CA), relative to the config file.
    #[serde(default)]
    pub ca_bundle: Option<PathBuf>,
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
    #[serde(default, deserialize_with = "mapping")]
    pub guest_cpu: GuestCpuSection,
    /// Compiled functions kept in memory for later compiles (`0`: none): a
    /// hot swap of a rebuilt plugin, or a second plugin of the same
    /// language, compiles only the functions that differ. Default 128Mi.
    #[serde(default = "default_function_cache", deserialize_with = "quantity")]
    pub function_cache: u64,
}

fn default_function_cache() -> u64 {
    RuntimeConfig::default().function_cache_bytes as u64
}

impl Default for RuntimeSection {
    fn default() -> Self {
        Self {
            cache_dir: None,
            ca_bundle: None,
            fuel: None,
            max_instances: None,
            api_qps: default_host_api_qps(),
            guest_cpu: GuestCpuSection::default(),
            function_cache: default_function_cache(),
        }
    }
}

/// `runtime.guestCpu`: while another plugin has work, a plugin's guests,
/// past the first 5 ms of each call, may use `burst` of CPU at once and then
/// `share` of one core, all its calls together. Ordinary reconciles never
/// run that long, and a plugin alone is never held back.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct GuestCpuSection {
    /// CPU time beyond the share taken at once (the bucket's depth).
    /// Default 50ms.
    #[serde(deserialize_with = "duration")]
    pub burst: Duration,
    /// A CPU quantity (`100m`, `0.5`, `1`), in millicores. Default 100m.
    #[serde(deserialize_with = "cpu")]
    pub share: u32,
}

impl Default for GuestCpuSection {
    /// The sandbox's default.
    fn default() -> Self {
        GuestCpu::default().into()
    }
}

impl From<GuestCpu> for GuestCpuSection {
    fn from(cpu: GuestCpu) -> Self {
        Self {
            burst: cpu.burst,
            share: cpu.share_millicores,
        }
    }
}

impl From<GuestCpuSection> for GuestCpu {
    fn from(section: GuestCpuSection) -> Self {
        Self {
            burst: section.burst,
            share_millicores: section.share,
        }
    }
}

fn default_host_api_qps() -> f64 {
    200.0
}

impl RuntimeSection {
    /// Checks `runtime` (paths from the document's root).
    pub(super) fn check(&self) -> Result<(), FieldProblem> {
        let check = |field: &str, r: Result<(), String>| r.map_err(|m| FieldProblem::new(field, m));
        check("runtime.apiQps", rate(self.api_qps, 1e6))?;
        let cpu = &self.guest_cpu;
        check(
            "runtime.guestCpu.share",
            count(u64::from(cpu.share), GuestCpu::SHARE_MILLICORES)
                .map_err(|e| format!("{e} (millicores)")),
        )?;
        if cpu.burst < GuestCpu::MIN_BURST {
            return Err(FieldProblem::new(
                "runtime.guestCpu.burst",
                format!(
                    "must be at least {} (one epoch tick)",
                    show_duration(GuestCpu::MIN_BURST)
                ),
            ));
        }
        check(
            "runtime.functionCache",
            bytes_within(self.function_cache, RuntimeConfig::FUNCTION_CACHE_BYTES),
        )?;
        if let Some(n) = self.max_instances {
            check(
                "runtime.maxInstances",
                count(u64::from(n), RuntimeConfig::INSTANCES),
            )?;
        }
        Ok(())
    }
}
