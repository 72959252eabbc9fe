//! A plugin's lifecycle in the manager: one [`PluginEntry`] per plugin, with
//! one method per transition.
//!
//! ```text
//!                 start (synced, leader)
//!     Starting ───────────────────────────► Running ◄──┐
//!      │    │  start (synced, standby)        │  ▲     │ swap
//!      │    └───────────────────► Standby ────┘  │     │ (same state,
//!      │ fail (not synced           │    lead    │     │  generation+1)
//!      │  within cacheSyncTimeout)  └────────────┘     │
//!      ▼                                               │
//!    Failed ── start (synced later: sync is retried) ──┘
//!
//!    any state ── drain ──► Draining ── stop ──► Stopped
//! ```
//!
//! - A swap (hot swap or rebuild) keeps the state and bumps the generation.
//! - A failed reload is recorded (`last_error`) without a transition: the
//!   running version stays.
//! - `Failed` is not final: the manager keeps waiting for the informers, and
//!   `start` leaves it once they sync.
//!
//! The pure state machine ([`Lifecycle`]) is tested here without a cluster;
//! [`PluginEntry`] adds the resources each state owns (workers, watch tasks,
//! informers).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use futures::stream::BoxStream;
use tokio::task::JoinHandle;

use crate::config::PluginConfig;
use crate::control::controller::{Controller, Workers};
use crate::control::informer::Informer;
use crate::control::shard::Shards;
use crate::ops::source::PluginSource;
use crate::ops::transcript::record::Recorder;
use crate::sandbox::outbound::HttpTape;
use crate::sandbox::{Plugin, Through};
use crate::{Action, ObjectKey, Reconcile, ReconcileError, ReconcileRequest};

use super::canary::{Canary, CanaryStatus, PromoteError, Version};
use super::shadow::{Recording, Shadow, ShadowReport};
use super::skip::SkipRecords;
use crate::sandbox::hostapi::{KubeApi, Layered};

/// Where a plugin is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginState {
    /// Loaded; its informers are syncing.
    Starting,
    /// Reconciling: workers run.
    Running,
    /// Synced, but another host leads: no workers.
    Standby,
    /// Its informers did not sync in time; still waiting for them.
    Failed,
    /// Being removed: workers finish their keys.
    Draining,
    /// Removed.
    Stopped,
}

impl PluginState {
    /// The `state` of `/plugins`.
    pub fn as_str(self) -> &'static str {
        match self {
            PluginState::Starting => "starting",
            PluginState::Running => "running",
            PluginState::Standby => "standby",
            PluginState::Failed => "failed",
            PluginState::Draining => "draining",
            PluginState::Stopped => "stopped",
        }
    }
}

/// A transition the state machine refused (a bug in the manager if seen).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plugin lifecycle: cannot {transition} from {from:?}")]
pub struct InvalidTransition {
    pub transition: &'static str,
    pub from: PluginState,
}

/// The pure state machine of a plugin: state, generation, last error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lifecycle {
    state: PluginState,
    generation: u64,
    last_error: Option<String>,
    loaded_at: SystemTime,
}

impl Lifecycle {
    /// A plugin loaded as generation `generation`, syncing.
    pub fn new(generation: u64) -> Self {
        Self {
            state: PluginState::Starting,
            generation,
            last_error: None,
            loaded_at: SystemTime::now(),
        }
    }

    pub fn state(&self) -> PluginState {
        self.state
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    pub fn loaded_at(&self) -> SystemTime {
        self.loaded_at
    }

    /// Whether its informers synced (the plugin can reconcile).
    pub fn synced(&self) -> bool {
        matches!(self.state, PluginState::Running | PluginState::Standby)
    }

    /// Refuses `transition` unless it is `allowed` from the current state.
    fn require(&self, transition: &'static str, allowed: bool) -> Result<(), InvalidTransition> {
        if allowed {
            return Ok(());
        }
        Err(InvalidTransition {
            transition,
            from: self.state,
        })
    }

    /// Whether removal has not begun.
    fn live(&self) -> bool {
        !matches!(self.state, PluginState::Draining | PluginState::Stopped)
    }

    /// Informers synced: Starting or Failed → Running (leader) or Standby.
    pub fn start(&mut self, leader: bool) -> Result<(), InvalidTransition> {
        self.require(
            "start",
            matches!(self.state, PluginState::Starting | PluginState::Failed),
        )?;
        if self.state == PluginState::Failed {
            self.last_error = None;
        }
        self.state = if leader {
            PluginState::Running
        } else {
            PluginState::Standby
        };
        Ok(())
    }

    /// This host became leader: Standby → Running.
    pub fn lead(&mut self) -> Result<(), InvalidTransition> {
        self.require("lead", self.state == PluginState::Standby)?;
        self.state = PluginState::Running;
        Ok(())
    }

    /// A new version (or a rebuild) took over: same state, next generation.
    pub fn swap(&mut self) -> Result<(), InvalidTransition> {
        self.require("swap", self.live())?;
        self.generation += 1;
        self.loaded_at = SystemTime::now();
        self.last_error = None;
        Ok(())
    }

    /// Informers did not sync in time: Starting → Failed, with the reason.
    pub fn fail(&mut self, reason: String) -> Result<(), InvalidTransition> {
        self.require(
            "fail",
            matches!(self.state, PluginState::Starting | PluginState::Failed),
        )?;
        self.state = PluginState::Failed;
        self.last_error = Some(reason);
        Ok(())
    }

    /// A reload was refused: the running version stays, the reason is shown.
    pub fn record_error(&mut self, reason: String) {
        self.last_error = Some(reason);
    }

    /// Removal begins: any live state → Draining.
    pub fn drain(&mut self) -> Result<(), InvalidTransition> {
        self.require("drain", self.live())?;
        self.state = PluginState::Draining;
        Ok(())
    }

    /// Removal done: Draining → Stopped.
    pub fn stop(&mut self) -> Result<(), InvalidTransition> {
        self.require("stop", self.state == PluginState::Draining)?;
        self.state = PluginState::Stopped;
        Ok(())
    }
}

/// The reconciler a controller calls: the plugin's current version,
/// swapped atomically (in-flight reconciles keep the version they started
/// with), with what runs around it: `skipUnchanged` records and a
/// candidate, in shadow or as a canary.
pub struct PluginSlot {
    current: ArcSwap<Plugin>,
    /// With sharding: only keys of the shards this replica holds run.
    shards: Option<Arc<Shards>>,
    /// What each key's last done reconcile depended on (`skipUnchanged`).
    skip: Option<SkipRecords>,
    /// A candidate reconciling each key after the stable version, in shadow.
    shadow: Option<Arc<Shadow>>,
    /// A candidate reconciling a share of the keys.
    canary: Option<Arc<Canary>>,
    /// Writes matching reconciles' transcripts (`record`).
    recorder: Option<Arc<Recorder>>,
}

/// Why `POST /plugins/{name}/promote` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotPromoteError {
    #[error(
        "the plugin has no canary candidate (shadow candidates are promoted by making their source the plugin's)"
    )]
    NoCanary,
    #[error(transparent)]
    Refused(#[from] PromoteError),
}

impl PluginSlot {
    pub fn new(plugin: Arc<Plugin>) -> Self {
        Self {
            current: ArcSwap::new(plugin),
            skip: None,
            shadow: None,
            canary: None,
            recorder: None,
            shards: None,
        }
    }

    /// Records the transcripts of the reconciles `recorder` admits.
    pub(crate) fn recorded_by(mut self, recorder: Arc<Recorder>) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// Skips reconciles whose inputs are unchanged.
    pub(crate) fn skipping_unchanged(
        mut self,
        metrics: Arc<crate::control::metrics::Metrics>,
    ) -> Self {
        let for_kind = self.current().metadata().for_.clone();
        let name = self.current().name().to_string();
        self.skip = Some(SkipRecords::new(for_kind, Some((metrics, name))));
        self
    }

    /// Runs `shadow`'s candidate after each reconcile.
    pub(crate) fn shadowed_by(mut self, shadow: Arc<Shadow>) -> Self {
        self.shadow = Some(shadow);
        self
    }

    /// Gives `canary`'s candidate its share of the keys.
    pub(crate) fn with_canary(mut self, canary: Arc<Canary>) -> Self {
        self.canary = Some(canary);
        self
    }

    /// Reconciles only the keys `shards` admits (None: every key).
    pub fn with_shards(mut self, shards: Option<Arc<Shards>>) -> Self {
        self.shards = shards;
        self
    }

    /// Whether this replica reconciles `key` (always, without sharding).
    pub fn admits(&self, key: &crate::ObjectKey) -> bool {
        self.shards.as_ref().is_none_or(|s| s.admits(key))
    }

    pub fn current(&self) -> Arc<Plugin> {
        self.current.load_full()
    }

    /// Makes `plugin` current; returns the version it replaced.
    pub fn swap(&self, plugin: Arc<Plugin>) -> Arc<Plugin> {
        self.current.swap(plugin)
    }

    /// Keys whose next resync may be skipped (0 without `skipUnchanged`).
    pub fn skip_records(&self) -> usize {
        self.skip.as_ref().map_or(0, SkipRecords::len)
    }

    /// The shadow runs' report, with a candidate in shadow.
    pub fn shadow_report(&self) -> Option<ShadowReport> {
        self.shadow.as_ref().map(|s| s.report())
    }

    /// The canary's state, with a canary candidate.
    pub fn canary_status(&self) -> Option<CanaryStatus> {
        self.canary.as_ref().map(|c| c.status())
    }

    /// The candidate version, if one runs (or ran) beside this one, and
    /// its mode.
    pub fn candidate(&self) -> Option<(Arc<Plugin>, &'static str)> {
        if let Some(s) = &self.shadow {
            return Some((s.candidate().clone(), "shadow"));
        }
        self.canary
            .as_ref()
            .map(|c| (c.candidate().clone(), "canary"))
    }

    /// Promotes the canary's candidate: it becomes the running version.
    pub fn promote(&self) -> Result<(), SlotPromoteError> {
        let canary = self.canary.as_ref().ok_or(SlotPromoteError::NoCanary)?;
        canary.promote()?;
        self.current.swap(canary.candidate().clone());
        canary.announce_decision();
        Ok(())
    }

    /// The version that reconciles `key`, and which one it is while a
    /// canary runs.
    fn route(&self, key: &ObjectKey) -> (Arc<Plugin>, Option<Version>) {
        match &self.canary {
            Some(c) => match c.promoted() {
                // Promoted: one version runs again (the candidate, now
                // current, or what a later swap put there).
                Some(true) => (self.current.load_full(), None),
                // Promoted but not swapped in yet: the candidate already
                // takes every key. The promotion queued the stable
                // version's keys again, and one routed to the stable
                // version now would spend that without the candidate
                // ever reconciling it.
                Some(false) => (c.candidate().clone(), None),
                None => match c.route(key) {
                    Version::Candidate => (c.candidate().clone(), Some(Version::Candidate)),
                    Version::Stable => (self.current.load_full(), Some(Version::Stable)),
                },
            },
            None => (self.current.load_full(), None),
        }
    }
}

impl PluginSlot {
    /// One reconcile of the key's version, with `skipUnchanged`, shadow and
    /// canary (under the shard gate with sharding).
    async fn reconcile_unsharded(
        &self,
        request: ReconcileRequest,
    ) -> Result<Action, ReconcileError> {
        let (plugin, version) = self.route(&request.key);
        if version == Some(Version::Candidate) {
            crate::control::metrics::ran_as(Version::Candidate);
        }
        let recording = self
            .shadow
            .as_ref()
            .map(|_| Arc::new(Layered::new(Recording::default(), plugin.kube().clone())));
        let api = recording.clone().map(|r| r as Arc<dyn KubeApi>);
        let shadow_request = self.shadow.as_ref().map(|_| request.clone());
        let key = request.key.clone();
        let session = match &self.recorder {
            Some(r) if r.admits(&plugin, &key, request.timeout).await => Some(r.session(
                &plugin,
                &request,
                api.clone().unwrap_or_else(|| plugin.kube().clone()),
            )),
            _ => None,
        };
        let mut through = match &session {
            Some(s) => s.through(),
            None => Through {
                kube: api,
                ..Through::default()
            },
        };
        // A shadow candidate gets the stable version's outbound answers.
        let exchanges = match (&self.shadow, &through.http_tape) {
            (Some(_), Some(tape)) => Some(tape.clone()),
            (Some(_), None) => {
                let tape = Arc::new(HttpTape::recording());
                through.http_tape = Some(tape.clone());
                Some(tape)
            }
            (None, _) => None,
        };
        let started = Instant::now();
        let result = match &self.skip {
            Some(records) => records.reconcile(&plugin, request, through).await,
            None => plugin.reconcile_through(request, through).await,
        };
        if let (Some(recorder), Some(session)) = (&self.recorder, session) {
            recorder.finish(session, &result);
        }
        if let (Some(canary), Some(version)) = (&self.canary, version)
            && canary.observe(&key, version, &result, started.elapsed())
        {
            self.current.swap(canary.candidate().clone());
            canary.announce_decision();
        }
        if let (Some(shadow), Some(recording), Some(request)) =
            (&self.shadow, recording, shadow_request)
        {
            let exchanges = exchanges.map(|t| t.exchanges()).unwrap_or_default();
            shadow.after_stable(&request, &result, recording.layer(), &exchanges);
        }
        result
    }
}

impl Reconcile for PluginSlot {
    async fn reconcile(&self, request: ReconcileRequest) -> Result<Action, ReconcileError> {
        match &self.shards {
            Some(shards) => {
                shards
                    .reconcile(request, |r| self.reconcile_unsharded(r))
                    .await
            }
            None => self.reconcile_unsharded(request).await,
        }
    }

    async fn unchanged(&self, key: &ObjectKey, timeout: Duration) -> bool {
        match &self.skip {
            Some(records) => {
                let (plugin, _) = self.route(key);
                records.unchanged(&plugin, key, timeout).await
            }
            None => false,
        }
    }
}

pub(crate) type PluginController = Controller<Arc<PluginSlot>>;

/// What feeds a plugin's queue: the informers it holds, and the tasks that
/// turn their stores once synced, their events and resyncs into keys.
#[derive(Default)]
pub(crate) struct Feeds {
    pub(crate) watched: Vec<Watched>,
    pub(crate) tasks: Vec<JoinHandle<()>>,
}

/// An informer a plugin holds, and whether its feed has queued the keys of
/// what the informer held when it synced.
pub(crate) struct Watched {
    pub(crate) informer: Arc<Informer>,
    pub(crate) primed: tokio::sync::watch::Receiver<bool>,
}

impl Feeds {
    fn abort(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        self.watched.clear();
    }
}

impl Drop for Feeds {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// One plugin in the manager: its config, current version, controller,
/// feeds and workers, and its [`Lifecycle`]. Fields are private: every
/// change goes through a transition method.
pub(crate) struct PluginEntry {
    config: PluginConfig,
    source: Arc<dyn PluginSource>,
    /// Reloads the plugin when its source changes.
    follower: Option<JoinHandle<()>>,
    /// The source's changes since before its component was fetched, until
    /// the entry is in the manager and a follower takes them: a change
    /// made while the plugin loads is never missed.
    changes: Option<BoxStream<'static, ()>>,
    /// Unloads the plugin's code while it is idle (`idleUnload`).
    idler: Option<JoinHandle<()>>,
    slot: Arc<PluginSlot>,
    controller: PluginController,
    feeds: Feeds,
    workers: Option<Workers<Arc<PluginSlot>>>,
    lifecycle: Lifecycle,
}

impl Drop for PluginEntry {
    fn drop(&mut self) {
        if let Some(f) = &self.follower {
            f.abort();
        }
        if let Some(i) = &self.idler {
            i.abort();
        }
    }
}

impl PluginEntry {
    /// A loaded plugin with its controller and feeds, Starting.
    pub(crate) fn new(
        config: PluginConfig,
        source: Arc<dyn PluginSource>,
        slot: Arc<PluginSlot>,
        controller: PluginController,
        feeds: Feeds,
        generation: u64,
    ) -> Self {
        Self {
            config,
            source,
            follower: None,
            changes: None,
            idler: None,
            slot,
            controller,
            feeds,
            workers: None,
            lifecycle: Lifecycle::new(generation),
        }
    }

    /// Keeps `changes`, the source's changes since before the load, for
    /// the follower [`take_changes`](Self::take_changes) hands them to.
    pub(crate) fn keep_changes(&mut self, changes: BoxStream<'static, ()>) {
        self.changes = Some(changes);
    }

    /// The source's changes kept since the load, once.
    pub(crate) fn take_changes(&mut self) -> Option<BoxStream<'static, ()>> {
        self.changes.take()
    }

    /// Sets the task that follows the plugin's source.
    pub(crate) fn follow(&mut self, follower: JoinHandle<()>) {
        if let Some(old) = self.follower.replace(follower) {
            old.abort();
        }
    }

    /// Sets the task that unloads the plugin's code while it is idle.
    pub(crate) fn unload_when_idle(&mut self, idler: JoinHandle<()>) {
        if let Some(old) = self.idler.replace(idler) {
            old.abort();
        }
    }

    pub(crate) fn config(&self) -> &PluginConfig {
        &self.config
    }

    pub(crate) fn source(&self) -> &Arc<dyn PluginSource> {
        &self.source
    }

    pub(crate) fn slot(&self) -> &Arc<PluginSlot> {
        &self.slot
    }

    pub(crate) fn controller(&self) -> &PluginController {
        &self.controller
    }

    /// The informers the plugin holds, each with its feed's progress.
    pub(crate) fn watched(&self) -> &[Watched] {
        &self.feeds.watched
    }

    pub(crate) fn lifecycle(&self) -> &Lifecycle {
        &self.lifecycle
    }

    /// Informers synced: workers start if `leader`.
    pub(crate) fn start(&mut self, leader: bool) -> Result<(), InvalidTransition> {
        self.lifecycle.start(leader)?;
        if leader {
            self.start_workers();
        }
        Ok(())
    }

    /// This host became leader: a synced standby starts its workers.
    pub(crate) fn lead(&mut self) {
        if self.lifecycle.lead().is_ok() {
            self.start_workers();
        }
    }

    fn start_workers(&mut self) {
        if self.workers.is_none() {
            self.workers = Some(self.controller.start());
        }
    }

    /// A new version of the same plugin: swapped into the slot; `feeds`
    /// replaces the old ones when the watched kinds changed.
    pub(crate) fn swap(
        &mut self,
        plugin: Arc<Plugin>,
        feeds: Option<Feeds>,
    ) -> Result<Arc<Plugin>, InvalidTransition> {
        self.lifecycle.swap()?;
        if let Some(feeds) = feeds {
            self.feeds.abort();
            self.feeds = feeds;
        }
        Ok(self.slot.swap(plugin))
    }

    /// A rebuilt entry (changed settings) takes over this one's queue: the
    /// new entry keeps this one's state and the next generation; this one's
    /// workers are returned to be detached.
    pub(crate) fn succeed(
        &mut self,
        mut next: PluginEntry,
    ) -> (PluginEntry, Option<Workers<Arc<PluginSlot>>>) {
        next.lifecycle = self.lifecycle.clone();
        let _ = next.lifecycle.swap();
        if self.lifecycle.state() == PluginState::Running {
            next.start_workers();
        }
        self.feeds.abort();
        (next, self.workers.take())
    }

    /// Informers did not sync in time.
    pub(crate) fn fail(&mut self, reason: String) -> Result<(), InvalidTransition> {
        self.lifecycle.fail(reason)
    }

    /// A reload was refused; the running version stays.
    pub(crate) fn record_error(&mut self, reason: String) {
        self.lifecycle.record_error(reason);
    }

    /// Stops the feeds, then lets the workers finish their keys for up to
    /// `timeout` (cancelling what still runs); the queue shuts down.
    pub(crate) async fn drain(&mut self, timeout: Duration) -> Result<bool, InvalidTransition> {
        let drained = match self.begin_drain()? {
            Some(w) => w.shutdown(timeout).await,
            None => true,
        };
        self.lifecycle.stop()?;
        Ok(drained)
    }

    /// Marks the entry Draining and hands out what the drain needs, so the
    /// caller can wait for it without holding the manager's lock.
    pub(crate) fn begin_drain(
        &mut self,
    ) -> Result<Option<Workers<Arc<PluginSlot>>>, InvalidTransition> {
        self.lifecycle.drain()?;
        self.feeds.abort();
        if let Some(f) = self.follower.take() {
            f.abort();
        }
        if let Some(i) = self.idler.take() {
            i.abort();
        }
        let workers = self.workers.take();
        if workers.is_none() {
            self.controller.queue().shut_down();
        }
        Ok(workers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Between a promotion and the slot swapping the candidate in, a key
    /// routed goes to the candidate; after it, to whatever is current.
    #[tokio::test]
    async fn a_promoted_candidate_takes_every_key_before_the_slot_swaps_it_in() {
        use crate::sandbox::{PluginSpec, Runtime, RuntimeConfig};
        let runtime = Runtime::new(
            RuntimeConfig {
                max_instances: 4,
                ..RuntimeConfig::default()
            },
            Arc::new(crate::control::metrics::Metrics::new()),
        )
        .unwrap();
        let bytes = std::fs::read(wasmctrl_plugin_artifacts::NOOP).unwrap();
        let load =
            |origin: &'static str| runtime.load_bytes(origin, bytes.clone(), PluginSpec::new("p"));
        let (stable, candidate, later) = (
            load("stable").await.unwrap(),
            load("candidate").await.unwrap(),
            load("later").await.unwrap(),
        );
        let queue = crate::control::workqueue::WorkQueue::new(
            "p",
            Box::new(crate::control::workqueue::ratelimit::default_controller_rate_limiter()),
            Arc::new(crate::control::workqueue::NoopQueueMetrics),
        );
        let config: crate::config::CanaryConfig =
            serde_json::from_value(serde_json::json!({"percent": 50})).unwrap();
        let canary = Arc::new(Canary::new(
            "p",
            candidate.clone(),
            config,
            queue,
            Arc::new(crate::control::metrics::Metrics::new()),
            Box::new(|| {}),
        ));
        let slot = PluginSlot::new(stable.clone()).with_canary(canary.clone());
        let keys: Vec<ObjectKey> = (0..40)
            .map(|i| ObjectKey::namespaced("default", format!("k{i}")))
            .collect();
        let runs = |plugin: &Arc<Plugin>| {
            keys.iter()
                .filter(|k| Arc::ptr_eq(&slot.route(k).0, plugin))
                .count()
        };
        assert!(runs(&stable) > 0 && runs(&candidate) > 0, "the keys split");

        canary.promote().unwrap();
        assert_eq!(runs(&candidate), keys.len(), "before the swap");
        assert!(keys.iter().all(|k| slot.route(k).1.is_none()));

        slot.current.swap(candidate.clone());
        canary.announce_decision();
        assert_eq!(runs(&candidate), keys.len(), "after the swap");
        slot.current.swap(later.clone());
        assert_eq!(runs(&later), keys.len(), "a later swap takes over");
    }

    #[test]
    fn a_plugin_starts_running_when_leader_and_standby_otherwise() {
        let mut l = Lifecycle::new(1);
        assert_eq!(l.state(), PluginState::Starting);
        assert!(!l.synced());
        l.start(true).unwrap();
        assert_eq!(l.state(), PluginState::Running);
        assert!(l.synced());

        let mut s = Lifecycle::new(1);
        s.start(false).unwrap();
        assert_eq!(s.state(), PluginState::Standby);
        s.lead().unwrap();
        assert_eq!(s.state(), PluginState::Running);
        assert!(s.lead().is_err(), "a running plugin does not lead again");
        assert!(
            s.start(true).is_err(),
            "a running plugin does not start again"
        );
    }

    #[test]
    fn a_missed_sync_fails_and_a_later_sync_recovers() {
        let mut l = Lifecycle::new(1);
        l.fail("informers did not sync".into()).unwrap();
        assert_eq!(l.state(), PluginState::Failed);
        assert_eq!(l.last_error(), Some("informers did not sync"));
        assert!(!l.synced());
        l.fail("still not".into()).unwrap();
        l.start(true).unwrap();
        assert_eq!(l.state(), PluginState::Running);
        assert_eq!(l.last_error(), None);
        assert!(
            l.fail("late".into()).is_err(),
            "a running plugin cannot fail sync"
        );
    }

    #[test]
    fn a_swap_keeps_the_state_and_bumps_the_generation() {
        let mut l = Lifecycle::new(1);
        l.start(false).unwrap();
        l.record_error("v3 refused".into());
        l.swap().unwrap();
        assert_eq!(l.state(), PluginState::Standby);
        assert_eq!(l.generation(), 2);
        assert_eq!(l.last_error(), None);
        let mut starting = Lifecycle::new(1);
        starting.swap().unwrap();
        assert_eq!(starting.state(), PluginState::Starting);
    }

    #[test]
    fn a_refused_reload_is_recorded_without_a_transition() {
        let mut l = Lifecycle::new(4);
        l.start(true).unwrap();
        l.record_error("wrong world".into());
        assert_eq!(l.state(), PluginState::Running);
        assert_eq!(l.generation(), 4);
        assert_eq!(l.last_error(), Some("wrong world"));
    }

    #[test]
    fn drain_then_stop_ends_every_state() {
        for setup in [
            |_: &mut Lifecycle| {},
            |l: &mut Lifecycle| l.start(true).unwrap(),
            |l: &mut Lifecycle| l.start(false).unwrap(),
            |l: &mut Lifecycle| l.fail("x".into()).unwrap(),
        ] {
            let mut l = Lifecycle::new(1);
            setup(&mut l);
            l.drain().unwrap();
            assert_eq!(l.state(), PluginState::Draining);
            assert!(l.swap().is_err(), "no swap while draining");
            assert!(l.drain().is_err(), "no second drain");
            l.stop().unwrap();
            assert_eq!(l.state(), PluginState::Stopped);
            assert!(l.start(true).is_err(), "a stopped plugin stays stopped");
        }
        assert!(
            Lifecycle::new(1).stop().is_err(),
            "stop needs a drain first"
        );
    }
}
