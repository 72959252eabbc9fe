//! Shadow runs: a candidate version reconciles each key after the stable
//! version did, against a capturing host API, and its writes are compared
//! with the writes the stable version actually made.
//!
//! # What the candidate sees
//! Its reads are answered with the responses the stable version's reads got
//! in that reconcile (the n-th read of an object gets the stable version's
//! n-th answer, or its last), so both versions decide on the same world;
//! reads the stable version did not make are served live (from the cache
//! for watched kinds), never counted as the plugin's calls. Its writes are
//! recorded and answered as the API server would (the object written;
//! patches applied to the object as read), never sent. Its outbound HTTP
//! requests the stable version made (same method and URL, in order) get
//! the stable version's answers, so the outside world is asked once per
//! reconcile; others are sent live, GET and HEAD only.
//!
//! # What is compared
//! The two reconciles' results, and their writes as normalized JSON
//! (`resourceVersion`, `managedFields` and every field whose name ends in
//! `Time` or `Timestamp` removed), as multisets: the order of writes is not
//! a divergence. Each divergence is counted per kind of object written (or
//! `result` when the results differ) in
//! `wasmctrl_shadow_divergences_total{plugin,kind}`; the last
//! `keepDivergences` are kept with both write sets and their difference
//! (each list its first 100 writes, each body its first 64 KiB, and all
//! of a plugin's kept divergences at most 32 MiB of bodies, the oldest
//! dropped first).
//!
//! # Never in the stable version's way
//! Shadow runs have their own `maxConcurrentShadows` permits, taken without
//! waiting: a key finished while all are busy gets no shadow run (counted in
//! `wasmctrl_shadow_skipped_total`), and so does one whose two runs read and
//! wrote more than [`MAX_RECORDED`](capture::MAX_RECORDED) bytes. They stop
//! when the plugin is unloaded.
//!
//! # Held to the same bounds
//! A candidate's write passes every check a real call of it would
//! ([`KubeApi::admit`](crate::sandbox::hostapi::KubeApi::admit)) before its
//! body is read, and its patches are applied by the embedded API server's
//! patch code, with that server's bounds on operations, bytes copied and
//! nesting.
//!
//! # Files
//! `capture.rs` holds the two host API layers (the stable version's
//! `Recording`, the candidate's `Capture`), `write.rs` a write as compared.

mod capture;
mod write;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::Serialize;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::control::metrics::{Metrics, PluginKindLabels, PluginLabel, Version};
use crate::control::reconcile::{Action, ObjectKey, ReconcileError, ReconcileRequest};
use crate::sandbox::hostapi::Layered;
use crate::sandbox::outbound::{HttpExchange, HttpTape};
use crate::sandbox::{Plugin, Through};
pub(crate) use capture::Recording;
use capture::{Capture, Seen};
pub use write::Write;
use write::{kept, minus};

/// A reconcile's result, as compared and shown.
fn outcome(result: &Result<Action, ReconcileError>) -> String {
    match result {
        Ok(a) if a.requeue_after.is_some_and(|d| !d.is_zero()) => {
            format!("requeue-after {:?}", a.requeue_after.unwrap())
        }
        Ok(a) if a.requeue => "requeue".into(),
        Ok(_) => "done".into(),
        Err(ReconcileError::Transient(_)) => "error: transient".into(),
        Err(ReconcileError::Permanent(_)) => "error: permanent".into(),
        Err(ReconcileError::Trap { kind, .. }) => format!("error: trap ({kind})"),
        Err(ReconcileError::Cancelled) => "error: cancelled".into(),
        Err(ReconcileError::Host(_)) => "error: host".into(),
    }
}

/// Bytes of write bodies the kept divergences of one plugin hold at most,
/// all together; past it the oldest are dropped.
const MAX_KEPT_DIVERGENCE_BYTES: usize = 32 << 20;

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One version's side of a divergence.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Side {
    pub result: String,
    /// The error message, when the result is an error.
    pub error: Option<String>,
    /// The first [`MAX_KEPT_WRITES`](write::MAX_KEPT_WRITES) writes.
    pub writes: Vec<Write>,
    /// How many writes past those were made.
    #[serde(skip_serializing_if = "is_zero")]
    pub writes_omitted: usize,
}

impl Side {
    fn new(result: &Result<Action, ReconcileError>, writes: &[Write]) -> Self {
        let (writes, writes_omitted) = kept(writes.iter());
        Side {
            result: outcome(result),
            error: result.as_ref().err().map(|e| e.to_string()),
            writes,
            writes_omitted,
        }
    }
}

/// The difference of two write sets.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Diff {
    /// Writes the stable version made and the candidate would not (the
    /// first [`MAX_KEPT_WRITES`](write::MAX_KEPT_WRITES)).
    pub only_stable: Vec<Write>,
    #[serde(skip_serializing_if = "is_zero")]
    pub only_stable_omitted: usize,
    /// Writes the candidate would make and the stable version did not.
    pub only_candidate: Vec<Write>,
    #[serde(skip_serializing_if = "is_zero")]
    pub only_candidate_omitted: usize,
}

impl Diff {
    fn of(stable: &[Write], candidate: &[Write]) -> Self {
        let only_stable = minus(stable, candidate);
        let only_candidate = minus(candidate, stable);
        let (only_stable, only_stable_omitted) = kept(only_stable.into_iter());
        let (only_candidate, only_candidate_omitted) = kept(only_candidate.into_iter());
        Diff {
            only_stable,
            only_stable_omitted,
            only_candidate,
            only_candidate_omitted,
        }
    }
}

/// One key on which the candidate did not do what the stable version did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Divergence {
    pub key: String,
    /// When the shadow run finished (RFC 3339).
    pub at: String,
    /// What diverged: `result` and/or the kinds of the differing writes.
    pub kinds: Vec<String>,
    pub stable: Side,
    pub candidate: Side,
    pub diff: Diff,
}

impl Divergence {
    /// The bytes of the writes it keeps.
    fn bytes(&self) -> usize {
        [
            &self.stable.writes,
            &self.candidate.writes,
            &self.diff.only_stable,
            &self.diff.only_candidate,
        ]
        .iter()
        .flat_map(|list| list.iter())
        .map(Write::bytes)
        .sum()
    }
}

/// What `/plugins/{name}/shadow` shows.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowReport {
    pub plugin: String,
    pub candidate_digest: String,
    pub candidate_origin: String,
    /// Shadow runs compared so far.
    pub runs: u64,
    /// Runs that diverged.
    pub divergent: u64,
    /// Keys that got no shadow run because every permit was busy.
    pub skipped: u64,
    /// The last divergences, oldest first.
    pub divergences: Vec<Divergence>,
}

#[derive(Default)]
struct Tally {
    runs: u64,
    divergent: u64,
    skipped: u64,
    recent: VecDeque<Divergence>,
    /// What `recent` holds, as [`Divergence::bytes`] counts it.
    recent_bytes: usize,
}

impl Tally {
    /// Keeps `divergence` as the newest of at most `keep`, dropping the
    /// oldest past `keep` or past [`MAX_KEPT_DIVERGENCE_BYTES`].
    fn keep(&mut self, divergence: Divergence, keep: usize) {
        let bytes = divergence.bytes();
        while let Some(oldest) = self.recent.front()
            && (self.recent.len() >= keep || self.recent_bytes + bytes > MAX_KEPT_DIVERGENCE_BYTES)
        {
            self.recent_bytes -= oldest.bytes();
            self.recent.pop_front();
        }
        if keep > 0 {
            self.recent_bytes += bytes;
            self.recent.push_back(divergence);
        }
    }
}

/// The shadow runs of one plugin's candidate.
pub(crate) struct Shadow {
    plugin: String,
    candidate: Arc<Plugin>,
    permits: Arc<Semaphore>,
    keep: usize,
    metrics: Arc<Metrics>,
    tally: Mutex<Tally>,
    /// Cancelled when the plugin is unloaded: running shadows stop.
    stop: CancellationToken,
}

impl Drop for Shadow {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Shadow {
    pub(crate) fn new(
        plugin: &str,
        candidate: Arc<Plugin>,
        concurrency: usize,
        keep: usize,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            plugin: plugin.to_string(),
            candidate,
            permits: Arc::new(Semaphore::new(concurrency)),
            keep,
            metrics,
            tally: Mutex::new(Tally::default()),
            stop: CancellationToken::new(),
        }
    }

    pub(crate) fn candidate(&self) -> &Arc<Plugin> {
        &self.candidate
    }

    fn label(&self) -> PluginLabel {
        PluginLabel {
            plugin: self.plugin.clone(),
        }
    }

    /// The stable version finished `request`'s key with `result`, its
    /// calls in `recording` and its outbound exchanges in `exchanges`:
    /// starts the candidate's shadow run if a permit is free, without
    /// waiting. The candidate's outbound requests the stable version made
    /// are answered with what it got; others are sent (GET and HEAD only).
    pub(crate) fn after_stable(
        self: &Arc<Self>,
        request: &ReconcileRequest,
        result: &Result<Action, ReconcileError>,
        recording: &Recording,
        exchanges: &[HttpExchange],
    ) {
        let seen = recording.take();
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) if !seen.overflow => permit,
            _ => return self.skip(),
        };
        let stable_writes = seen.writes;
        let capture = Capture {
            counted: Some((self.metrics.clone(), self.plugin.clone())),
            state: Mutex::new(Seen {
                reads: seen.reads,
                bytes: seen.bytes,
                ..Seen::default()
            }),
        };
        let capture = Arc::new(Layered::new(capture, self.candidate.kube().clone()));
        let request = ReconcileRequest {
            key: request.key.clone(),
            attempt: request.attempt,
            timeout: request.timeout,
            cancel: self.stop.child_token(),
        };
        let stable = Side::new(result, &stable_writes);
        let stable_result = outcome(result);
        let this = Arc::downgrade(self);
        let candidate = self.candidate.clone();
        let answers = Arc::new(HttpTape::answering(exchanges));
        tokio::spawn(async move {
            let _permit = permit;
            let key = request.key.clone();
            // The candidate's host calls (a ceiling it runs into) count
            // as the candidate's too.
            let (invocation, _) = crate::control::metrics::with_version(async {
                crate::control::metrics::ran_as(Version::Candidate);
                let through = Through {
                    http_tape: Some(answers),
                    ..Through::kube(capture.clone())
                };
                candidate.invoke_through(request, through).await
            })
            .await;
            let Some(this) = this.upgrade() else { return };
            this.metrics
                .observe_call_as(&this.plugin, Version::Candidate, &invocation.usage);
            let (writes, overflow) = {
                let mut state = capture.layer().state.lock().unwrap();
                (std::mem::take(&mut state.writes), state.overflow)
            };
            if overflow {
                return this.skip();
            }
            this.compare(
                &key,
                stable,
                stable_result,
                &stable_writes,
                &invocation.result,
                &writes,
            );
        });
    }

    /// A key that gets no comparison: every permit was busy, or its run
    /// kept more than [`MAX_RECORDED`](capture::MAX_RECORDED) bytes.
    fn skip(&self) {
        self.tally.lock().unwrap().skipped += 1;
        self.metrics
            .shadow_skipped
            .get_or_create(&self.label())
            .inc();
    }

    fn compare(
        &self,
        key: &ObjectKey,
        stable: Side,
        stable_result: String,
        stable_writes: &[Write],
        result: &Result<Action, ReconcileError>,
        writes: &[Write],
    ) {
        self.metrics.shadow_runs.get_or_create(&self.label()).inc();
        let diff = Diff::of(stable_writes, writes);
        let mut kinds: Vec<String> = diff
            .only_stable
            .iter()
            .chain(&diff.only_candidate)
            .map(|w| w.kind.clone())
            .collect();
        if outcome(result) != stable_result {
            kinds.push("result".into());
        }
        kinds.sort();
        kinds.dedup();
        let mut tally = self.tally.lock().unwrap();
        tally.runs += 1;
        if kinds.is_empty() {
            return;
        }
        tally.divergent += 1;
        for kind in &kinds {
            self.metrics
                .shadow_divergences
                .get_or_create(&PluginKindLabels {
                    plugin: self.plugin.clone(),
                    kind: kind.clone(),
                })
                .inc();
        }
        tracing::info!(plugin = %self.plugin, %key, kinds = ?kinds, "the candidate diverged from the stable version");
        let divergence = Divergence {
            key: key.to_string(),
            at: wasmctrl_apimachinery::time::format_seconds(SystemTime::now()),
            kinds,
            stable,
            candidate: Side::new(result, writes),
            diff,
        };
        tally.keep(divergence, self.keep);
    }

    pub(crate) fn report(&self) -> ShadowReport {
        let tally = self.tally.lock().unwrap();
        ShadowReport {
            plugin: self.plugin.clone(),
            candidate_digest: self.candidate.digest().to_string(),
            candidate_origin: self.candidate.origin().to_string(),
            runs: tally.runs,
            divergent: tally.divergent,
            skipped: tally.skipped,
            divergences: tally.recent.iter().cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests;
