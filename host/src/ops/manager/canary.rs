//! Canaries: a candidate version reconciles a share of the keys for real,
//! both versions are measured over a sliding window, and the host rolls the
//! candidate back (or promotes it) on what it measured.
//!
//! # Which keys
//! A key goes to the candidate when the FNV-1a hash of `namespace/name`
//! modulo 100 is below `percent`: the same keys on every host and after
//! every restart, so a key does not flip between versions.
//!
//! # Rollback
//! Each version's reconciles within the last `window` are kept (time,
//! failed, duration), the last [`MAX_WINDOW_SAMPLES`] of them at most. Once the candidate has `minReconciles` in the window,
//! it is rolled back when its failure rate (errors, traps, timeouts) exceeds
//! the stable version's by more than `maxFailureRateIncrease`, or its p99
//! exceeds `maxP99Ratio` times the stable version's. Rolled back, the
//! stable version takes every key, the keys the candidate reconciled are
//! enqueued again (and those of the candidate's reconciles still running
//! then, as each ends), and the reason is logged, counted
//! (`wasmctrl_canary_rollbacks_total`) and shown in `/plugins`.
//!
//! # Promotion
//! `POST /plugins/{name}/promote`, or with `autoPromote` a whole window
//! since the canary began in which the candidate was judged and not rolled
//! back: the candidate becomes the plugin's running version and every key
//! the stable version reconciled is enqueued again. A promotion made through
//! the API lasts until the plugin is rebuilt from its config; make it
//! permanent by making the candidate's source the plugin's.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use crate::config::CanaryConfig;
pub use crate::control::metrics::Version;
use crate::control::metrics::{
    Metrics, PluginLabel, PluginVersionLabels, PluginVersionResultLabels,
};
use crate::control::reconcile::{Action, ObjectKey, ReconcileError};
use crate::control::workqueue::WorkQueue;
use crate::sandbox::Plugin;

/// FNV-1a of the key: stable across builds, hosts and restarts.
fn key_hash(key: &ObjectKey) -> u64 {
    key.to_string().bytes().fold(0xcbf29ce484222325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

/// Whether `key` is among the `percent` of keys a canary gets.
pub fn in_canary(key: &ObjectKey, percent: u32) -> bool {
    key_hash(key) % 100 < u64::from(percent)
}

/// The most reconciles of one version a window keeps: the newest, so a
/// window of hours over a busy plugin costs what a few seconds of it do.
pub const MAX_WINDOW_SAMPLES: usize = 10_000;

/// One version's reconciles within the window.
#[derive(Debug, Default)]
struct Window {
    samples: VecDeque<(Instant, bool, Duration)>,
}

/// What a window says about a version.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Measure {
    reconciles: usize,
    failure_rate: f64,
    p99: Duration,
}

impl Window {
    fn push(&mut self, at: Instant, failed: bool, took: Duration, window: Duration) {
        if self.samples.len() >= MAX_WINDOW_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back((at, failed, took));
        self.trim(at, window);
    }

    fn trim(&mut self, now: Instant, window: Duration) {
        while let Some((t, ..)) = self.samples.front() {
            if now.duration_since(*t) > window {
                self.samples.pop_front();
            } else {
                break;
            }
        }
    }

    fn measure(&self) -> Measure {
        let n = self.samples.len();
        let failed = self.samples.iter().filter(|(_, f, _)| *f).count();
        let mut times: Vec<Duration> = self.samples.iter().map(|(.., d)| *d).collect();
        // Measured on every reconcile: a selection, not a sort.
        let p99 = match n {
            0 => Duration::ZERO,
            n => {
                *times
                    .select_nth_unstable(((n * 99).div_ceil(100)).clamp(1, n) - 1)
                    .1
            }
        };
        Measure {
            reconciles: n,
            failure_rate: if n == 0 {
                0.0
            } else {
                failed as f64 / n as f64
            },
            p99,
        }
    }
}

/// Where a canary is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// The candidate reconciles its share of the keys.
    Running,
    /// The stable version took every key back, for this reason.
    RolledBack(String),
    /// The candidate became the running version.
    Promoted,
}

/// The canary as `/plugins` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CanaryStatus {
    /// `canary`, `rolled-back` or `promoted`.
    pub state: String,
    pub percent: u32,
    /// Why it was rolled back.
    pub reason: Option<String>,
    /// When it was rolled back or promoted (RFC 3339).
    pub decided_at: Option<String>,
    /// Keys enqueued again when it was rolled back or promoted.
    pub requeued: usize,
    /// Reconciles within the window, failure rate and p99 (ms), per version.
    pub stable: WindowStatus,
    pub candidate: WindowStatus,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowStatus {
    pub reconciles: usize,
    pub failure_rate: f64,
    pub p99_ms: f64,
}

impl From<Measure> for WindowStatus {
    fn from(m: Measure) -> Self {
        WindowStatus {
            reconciles: m.reconciles,
            failure_rate: m.failure_rate,
            p99_ms: m.p99.as_secs_f64() * 1000.0,
        }
    }
}

struct State {
    phase: Phase,
    decided_at: Option<SystemTime>,
    requeued: usize,
    stable: Window,
    candidate: Window,
    /// Keys each version reconciled: enqueued again when the other takes
    /// them over.
    stable_keys: HashSet<ObjectKey>,
    candidate_keys: HashSet<ObjectKey>,
    /// A promotion was announced: the slot has swapped the candidate in.
    handed_over: bool,
}

impl State {
    fn new() -> Self {
        State {
            handed_over: false,
            phase: Phase::Running,
            decided_at: None,
            requeued: 0,
            stable: Window::default(),
            candidate: Window::default(),
            stable_keys: HashSet::new(),
            candidate_keys: HashSet::new(),
        }
    }

    /// One reconcile of `key` by `version`. Its key is remembered only
    /// while the canary runs: once decided, no key changes hands again.
    fn record(
        &mut self,
        key: &ObjectKey,
        version: Version,
        sample: (Instant, bool, Duration),
        window: Duration,
    ) {
        let running = self.phase == Phase::Running;
        let (measured, keys) = match version {
            Version::Stable => (&mut self.stable, &mut self.stable_keys),
            Version::Candidate => (&mut self.candidate, &mut self.candidate_keys),
        };
        let (at, failed, took) = sample;
        measured.push(at, failed, took, window);
        if running {
            keys.insert(key.clone());
        }
    }
}

/// A candidate reconciling a share of one plugin's keys.
pub(crate) struct Canary {
    plugin: String,
    candidate: Arc<Plugin>,
    config: CanaryConfig,
    queue: WorkQueue<ObjectKey>,
    metrics: Arc<Metrics>,
    started: Instant,
    state: Mutex<State>,
    /// Called once the canary was rolled back, or promoted and the
    /// candidate swapped in (outside the canary's lock).
    decided: Box<dyn Fn() + Send + Sync>,
}

/// Why a promotion was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PromoteError {
    #[error("the canary was rolled back ({0}); change the candidate to try again")]
    RolledBack(String),
    #[error("the candidate was already promoted")]
    AlreadyPromoted,
}

impl Canary {
    pub(crate) fn new(
        plugin: &str,
        candidate: Arc<Plugin>,
        config: CanaryConfig,
        queue: WorkQueue<ObjectKey>,
        metrics: Arc<Metrics>,
        decided: Box<dyn Fn() + Send + Sync>,
    ) -> Self {
        Self {
            plugin: plugin.to_string(),
            candidate,
            config,
            queue,
            metrics,
            started: Instant::now(),
            state: Mutex::new(State::new()),
            decided,
        }
    }

    pub(crate) fn candidate(&self) -> &Arc<Plugin> {
        &self.candidate
    }

    /// The version that reconciles `key` now.
    pub(crate) fn route(&self, key: &ObjectKey) -> Version {
        let state = self.state.lock().unwrap();
        match state.phase {
            Phase::Running if in_canary(key, self.config.percent) => Version::Candidate,
            _ => Version::Stable,
        }
    }

    /// Records one reconcile of `key` by `version`; judges the candidate.
    /// Returns true when this promoted the candidate (the caller swaps it
    /// in, then [`Canary::announce_decision`]); a rollback is announced
    /// here.
    pub(crate) fn observe(
        &self,
        key: &ObjectKey,
        version: Version,
        result: &Result<Action, ReconcileError>,
        took: Duration,
    ) -> bool {
        let failed = matches!(result, Err(e) if *e != ReconcileError::Cancelled);
        self.metrics
            .versioned_reconciles
            .get_or_create(&PluginVersionResultLabels {
                plugin: self.plugin.clone(),
                version: version.as_str().into(),
                result: if failed { "error" } else { "success" }.into(),
            })
            .inc();
        self.metrics
            .versioned_reconcile_time
            .get_or_create(&PluginVersionLabels {
                plugin: self.plugin.clone(),
                version: version.as_str().into(),
            })
            .observe(took.as_secs_f64());
        let now = Instant::now();
        let window = self.config.window;
        let mut state = self.state.lock().unwrap();
        let lost = matches!(
            (&state.phase, version),
            (Phase::RolledBack(_), Version::Candidate) | (Phase::Promoted, Version::Stable)
        );
        if lost {
            // A reconcile that began before the decision, by the version
            // that lost: the winner must redo its key too, as it redoes
            // the keys the loser had when the decision was made.
            state.requeued += 1;
            self.queue.add(key.clone());
            return false;
        }
        state.record(key, version, (now, failed, took), window);
        if state.phase != Phase::Running {
            return false;
        }
        state.stable.trim(now, window);
        state.candidate.trim(now, window);
        let (s, c) = (state.stable.measure(), state.candidate.measure());
        if c.reconciles < self.config.min_reconciles as usize {
            return false;
        }
        if let Some(reason) = self.verdict(s, c) {
            self.roll_back(&mut state, reason);
            drop(state);
            (self.decided)();
            return false;
        }
        if self.config.auto_promote && now.duration_since(self.started) >= window {
            self.promote_locked(&mut state);
            return true;
        }
        false
    }

    /// Why the candidate is worse than the stable version, if it is.
    fn verdict(&self, s: Measure, c: Measure) -> Option<String> {
        let window = crate::config::show_duration(self.config.window);
        if c.failure_rate - s.failure_rate > self.config.max_failure_rate_increase {
            return Some(format!(
                "the candidate failed {:.0}% of {} reconciles in the last {window}, the stable version {:.0}% of {} (maxFailureRateIncrease {:.0}%)",
                c.failure_rate * 100.0,
                c.reconciles,
                s.failure_rate * 100.0,
                s.reconciles,
                self.config.max_failure_rate_increase * 100.0
            ));
        }
        if let Some(ratio) = self.config.max_p99_ratio
            && s.reconciles >= self.config.min_reconciles as usize
            && c.p99.as_secs_f64() > ratio * s.p99.as_secs_f64()
        {
            return Some(format!(
                "the candidate's p99 reconcile time {:?} in the last {window} is over {ratio} times the stable version's {:?} (maxP99Ratio)",
                c.p99, s.p99
            ));
        }
        None
    }

    fn roll_back(&self, state: &mut State, reason: String) {
        tracing::error!(plugin = %self.plugin, candidate = %self.candidate.digest(), %reason, "canary rolled back: the stable version takes every key");
        self.metrics
            .canary_rollbacks
            .get_or_create(&PluginLabel {
                plugin: self.plugin.clone(),
            })
            .inc();
        state.phase = Phase::RolledBack(reason);
        state.decided_at = Some(SystemTime::now());
        state.requeued = state.candidate_keys.len();
        for key in state.candidate_keys.drain() {
            self.queue.add(key);
        }
    }

    fn promote_locked(&self, state: &mut State) {
        tracing::info!(plugin = %self.plugin, candidate = %self.candidate.digest(), "canary promoted: the candidate takes every key");
        self.metrics
            .canary_promotions
            .get_or_create(&PluginLabel {
                plugin: self.plugin.clone(),
            })
            .inc();
        state.phase = Phase::Promoted;
        state.decided_at = Some(SystemTime::now());
        state.requeued = state.stable_keys.len();
        for key in state.stable_keys.drain() {
            self.queue.add(key);
        }
    }

    /// Tells whoever shows the canary's state that it was decided: the
    /// caller of a promotion, once it swapped the candidate in.
    pub(crate) fn announce_decision(&self) {
        self.state.lock().unwrap().handed_over = true;
        (self.decided)();
    }

    /// None while the candidate is not promoted; once it is, whether the
    /// slot has swapped it in yet ([`Canary::announce_decision`]).
    pub(crate) fn promoted(&self) -> Option<bool> {
        let state = self.state.lock().unwrap();
        (state.phase == Phase::Promoted).then_some(state.handed_over)
    }

    /// Promotes the candidate now (the caller swaps it in, then
    /// [`Canary::announce_decision`]).
    pub(crate) fn promote(&self) -> Result<(), PromoteError> {
        let mut state = self.state.lock().unwrap();
        match &state.phase {
            Phase::RolledBack(reason) => Err(PromoteError::RolledBack(reason.clone())),
            Phase::Promoted => Err(PromoteError::AlreadyPromoted),
            Phase::Running => {
                self.promote_locked(&mut state);
                Ok(())
            }
        }
    }

    pub(crate) fn status(&self) -> CanaryStatus {
        let mut state = self.state.lock().unwrap();
        let now = Instant::now();
        state.stable.trim(now, self.config.window);
        state.candidate.trim(now, self.config.window);
        let (phase, reason) = match &state.phase {
            Phase::Running => ("canary", None),
            Phase::RolledBack(r) => ("rolled-back", Some(r.clone())),
            Phase::Promoted => ("promoted", None),
        };
        CanaryStatus {
            state: phase.into(),
            percent: self.config.percent,
            reason,
            decided_at: state
                .decided_at
                .map(wasmctrl_apimachinery::time::format_seconds),
            requeued: state.requeued,
            stable: state.stable.measure().into(),
            candidate: state.candidate.measure().into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_always_goes_to_the_same_version_and_percent_is_the_share() {
        let keys: Vec<ObjectKey> = (0..10_000)
            .map(|i| ObjectKey::namespaced("default", format!("obj-{i}")))
            .collect();
        let share = keys.iter().filter(|k| in_canary(k, 20)).count();
        assert!((1_700..2_300).contains(&share), "{share}");
        for k in &keys[..100] {
            assert_eq!(in_canary(k, 20), in_canary(k, 20));
            assert!(
                !in_canary(k, 20) || in_canary(k, 50),
                "a larger share keeps its keys"
            );
        }
    }

    #[test]
    fn a_window_keeps_its_newest_samples_and_a_decided_canary_no_keys() {
        let mut w = Window::default();
        let t0 = Instant::now();
        let year = Duration::from_secs(365 * 24 * 3600);
        for i in 0..3 * MAX_WINDOW_SAMPLES as u64 {
            w.push(t0, false, Duration::from_micros(i), year);
        }
        assert_eq!(w.samples.len(), MAX_WINDOW_SAMPLES);
        let m = w.measure();
        assert_eq!(m.reconciles, MAX_WINDOW_SAMPLES);
        let oldest = 2 * MAX_WINDOW_SAMPLES as u64;
        assert_eq!(
            m.p99,
            Duration::from_micros(oldest + (MAX_WINDOW_SAMPLES as u64 * 99 / 100) - 1),
            "the p99 of the newest samples"
        );

        let mut state = State::new();
        let key = |i: usize| ObjectKey::namespaced("default", format!("k{i}"));
        let sample = (t0, false, Duration::from_millis(1));
        state.record(&key(0), Version::Stable, sample, year);
        state.phase = Phase::RolledBack("worse".into());
        state.stable_keys.clear();
        for i in 0..1000 {
            state.record(&key(i), Version::Stable, sample, year);
        }
        assert!(state.stable_keys.is_empty() && state.candidate_keys.is_empty());
        assert_eq!(state.stable.samples.len(), 1001);
    }

    #[test]
    fn the_window_forgets_old_reconciles_and_reports_p99() {
        let mut w = Window::default();
        let t0 = Instant::now();
        let window = Duration::from_secs(10);
        for i in 0..100u64 {
            w.push(t0, i % 4 == 0, Duration::from_millis(i + 1), window);
        }
        let m = w.measure();
        assert_eq!(m.reconciles, 100);
        assert!((m.failure_rate - 0.25).abs() < 1e-9);
        assert_eq!(m.p99, Duration::from_millis(99));
        w.push(
            t0 + Duration::from_secs(11),
            false,
            Duration::from_millis(1),
            window,
        );
        assert_eq!(w.measure().reconciles, 1);
    }
}
