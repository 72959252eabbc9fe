//! `candidate` of a plugin: a second version run beside it, in shadow or
//! as a canary.

use std::path::PathBuf;
use std::time::Duration;

use super::shape::optional_mapping;
use serde::Deserialize;

use super::error::FieldProblem;
use super::settings;
use super::source::{self, SourceConfig};
use super::units::{SECOND, YEAR, count, duration, rate, within};

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
    #[serde(default, deserialize_with = "optional_mapping")]
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
    #[serde(default, deserialize_with = "optional_mapping")]
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

fn one() -> usize {
    1
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

impl CandidateConfig {
    /// Checks a plugin's `candidate` (fields relative to the plugin).
    pub(super) fn check(&self) -> Result<(), FieldProblem> {
        let check = |field: &str, r: Result<(), String>| {
            r.map_err(|m| FieldProblem::new(format!("candidate.{field}"), m))
        };
        source::check_origin(
            "candidate.source",
            "the candidate's component",
            self.path.as_ref(),
            self.source.as_ref(),
        )?;
        if let Some(settings) = &self.settings {
            settings::check("candidate.settings", settings)?;
        }
        check(
            "maxConcurrentShadows",
            count(self.max_concurrent_shadows as u64, 1..=64),
        )?;
        check(
            "keepDivergences",
            count(self.keep_divergences as u64, 1..=1000),
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
                check("canary.percent", count(u64::from(k.percent), 1..=99))?;
                check("canary.window", within(k.window, SECOND..=YEAR))?;
                check(
                    "canary.minReconciles",
                    count(u64::from(k.min_reconciles), 1..=1_000_000),
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
