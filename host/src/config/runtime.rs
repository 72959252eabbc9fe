//! `runtime`: the engine-wide wasm settings, fixed when the host starts.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::error::FieldProblem;
use super::units::{count, cpu, duration, rate};

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
            count(
                u64::from(cpu.share),
                u64::from(MIN_GUEST_SHARE_MILLICORES),
                u64::from(MAX_GUEST_SHARE_MILLICORES),
            )
            .map_err(|e| format!("{e} (millicores)")),
        )?;
        if cpu.burst < Duration::from_millis(1) {
            return Err(FieldProblem::new(
                "runtime.guestCpu.burst",
                "must be at least 1ms (one epoch tick)",
            ));
        }
        if let Some(n) = self.max_instances {
            check("runtime.maxInstances", count(u64::from(n), 1, 10_000))?;
        }
        Ok(())
    }
}
