//! `wasmctrl replay`: recorded reconciles re-run against another build of
//! the plugin, with every `kube` call answered from the transcript and no
//! cluster, reporting call by call where the new build does something else.
//!
//! # How calls are matched
//! The replayed reconcile's calls are walked against the recorded ones in
//! order. A call with the same target as the next recorded one (verb, kind,
//! namespace, name: see [`target`]) gets the recorded answer;
//! if its arguments differ (as normalized JSON, see
//! `meta::normalized`) that is a `different-arguments` divergence.
//! Any other call is a `different-call`: if the same target comes later in
//! the recording, the recorded calls in between count as skipped and it
//! gets that answer; otherwise it gets the answer of an earlier call with
//! the same target, or `unavailable` when the recording has none. Recorded
//! calls the replay never reached are `missing-call`s, and a different
//! ending (done, requeue, error kind; see [`Outcome::same_as`]) is a
//! `different-result`.
//!
//! The guest also reads its context as recorded (deadline left,
//! cancellation, log levels: see [`ContextTape`]), so the same build replays
//! to the same calls.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use serde_json::Value;

use super::{HostCall, Outcome, Transcript};
use crate::control::reconcile::{ObjectKey, ReconcileRequest};
use crate::meta::kind::Gvk;
use crate::meta::normalized::{canonical, differences};
use crate::sandbox::hostapi::{
    ApiError, KubeRequest, KubeResponse, Layer, Layered, Next, NoApiServer,
};
use crate::sandbox::outbound::HttpTape;
use crate::sandbox::{ContextTape, LoadError, Plugin, PluginSpec, Runtime, Through};

/// What kind of difference a replay found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DivergenceKind {
    /// A call to another target than the recorded one at that point.
    DifferentCall,
    /// The recorded call, with other arguments.
    DifferentArguments,
    /// A recorded call the replay did not make.
    MissingCall,
    /// The reconcile ended differently.
    DifferentResult,
}

impl fmt::Display for DivergenceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DivergenceKind::DifferentCall => "different call",
            DivergenceKind::DifferentArguments => "different arguments",
            DivergenceKind::MissingCall => "missing call",
            DivergenceKind::DifferentResult => "different result",
        })
    }
}

/// One place where the replayed reconcile did not do what the recorded one
/// did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Divergence {
    pub kind: DivergenceKind,
    /// The replayed call's number (1-based); for a missing call, the
    /// recorded call's number; None for the result.
    pub call: Option<usize>,
    /// What the recording has there (a call target, or the result).
    pub expected: Option<String>,
    /// What the replay did there.
    pub actual: Option<String>,
    /// For different arguments: each differing JSON path, `expected →
    /// actual`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub differences: Vec<String>,
}

/// One recorded reconcile, replayed.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReconcileReplay {
    /// Where the transcript came from (`file:line`).
    pub at: String,
    pub key: String,
    pub attempt: u32,
    pub recorded: Outcome,
    pub replayed: Outcome,
    /// The digest the transcript was recorded with.
    pub recorded_digest: String,
    pub divergences: Vec<Divergence>,
}

/// What a replay found.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayReport {
    /// The replayed component's digest.
    pub digest: String,
    pub reconciles: Vec<ReconcileReplay>,
}

impl ReplayReport {
    /// Reconciles with at least one divergence.
    pub fn diverged(&self) -> usize {
        self.reconciles
            .iter()
            .filter(|r| !r.divergences.is_empty())
            .count()
    }
}

impl fmt::Display for ReplayReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in &self.reconciles {
            if r.divergences.is_empty() {
                continue;
            }
            writeln!(
                f,
                "{} {} (attempt {}): {} divergence{}",
                r.at,
                r.key,
                r.attempt,
                r.divergences.len(),
                if r.divergences.len() == 1 { "" } else { "s" }
            )?;
            for d in &r.divergences {
                let at = d.call.map(|n| format!("call {n}: ")).unwrap_or_default();
                write!(f, "  {at}{}", d.kind)?;
                match (&d.expected, &d.actual) {
                    (Some(e), Some(a)) if e == a => writeln!(f, ": {e}")?,
                    (Some(e), Some(a)) => writeln!(f, ": recorded {e}; replayed {a}")?,
                    (Some(e), None) => writeln!(f, ": recorded {e}; the replay did not make it")?,
                    (None, Some(a)) => {
                        writeln!(f, ": replayed {a}; the recording has no more calls")?
                    }
                    (None, None) => writeln!(f)?,
                }
                for line in &d.differences {
                    writeln!(f, "      {line}")?;
                }
            }
        }
        write!(
            f,
            "{} reconcile{} replayed against {}: {} diverged",
            self.reconciles.len(),
            if self.reconciles.len() == 1 { "" } else { "s" },
            self.digest,
            self.diverged()
        )
    }
}

/// Replays `transcripts` (each with where it came from, `file:line`)
/// against the component `bytes` (from `origin`), loaded once per distinct
/// recorded settings with default limits.
pub async fn replay(
    runtime: &Runtime,
    origin: &str,
    bytes: Vec<u8>,
    transcripts: &[(String, Transcript)],
) -> Result<ReplayReport, LoadError> {
    let mut plugins: BTreeMap<String, Arc<Plugin>> = BTreeMap::new();
    let mut digest = crate::sandbox::digest(&bytes);
    let mut reconciles = Vec::with_capacity(transcripts.len());
    for (at, t) in transcripts {
        let settings = canonical(&t.settings);
        let plugin = match plugins.get(&settings) {
            Some(p) => p.clone(),
            None => {
                let spec = PluginSpec {
                    settings: t.settings.clone(),
                    ..PluginSpec::new(t.plugin.clone())
                };
                let p = runtime.load_bytes(origin, bytes.clone(), spec).await?;
                digest = p.digest().to_string();
                plugins.insert(settings, p.clone());
                p
            }
        };
        reconciles.push(replay_one(&plugin, at, t).await);
    }
    Ok(ReplayReport { digest, reconciles })
}

/// Replays one transcript against a loaded plugin.
pub async fn replay_one(plugin: &Plugin, at: &str, t: &Transcript) -> ReconcileReplay {
    // Every call is answered from the recording: there is no cluster below.
    let replayer = Arc::new(Layered::new(
        Replayer::new(t.calls.clone()),
        Arc::new(NoApiServer),
    ));
    let key = ObjectKey::from(&t.key);
    let request = ReconcileRequest {
        key: key.clone(),
        attempt: t.attempt,
        timeout: Duration::from_millis(t.timeout_ms.max(1)),
        cancel: CancellationToken::new(),
    };
    let through = Through {
        kube: Some(replayer.clone()),
        tape: Some(Arc::new(ContextTape::replaying(&t.context))),
        // Outbound requests are answered from the recording too: a replay
        // sends nothing.
        http_tape: Some(Arc::new(HttpTape::replaying(&t.http))),
        ..Through::default()
    };
    let invocation = plugin.invoke_through(request, through).await;
    let replayed = Outcome::from(&invocation.result);
    let mut divergences = replayer.layer().finish();
    if !replayed.same_as(&t.result) {
        divergences.push(Divergence {
            kind: DivergenceKind::DifferentResult,
            call: None,
            expected: Some(t.result.to_string()),
            actual: Some(replayed.to_string()),
            differences: Vec::new(),
        });
    }
    ReconcileReplay {
        at: at.to_string(),
        key: key.to_string(),
        attempt: t.attempt,
        recorded: t.result.clone(),
        replayed,
        recorded_digest: t.digest.clone(),
        divergences,
    }
}

/// Answers a replayed reconcile's calls from its recording (see the
/// [module docs](self)).
pub struct Replayer {
    recorded: Vec<HostCall>,
    /// Where each target is in the recording (ascending): a recording may
    /// hold a million calls and a replay make ten thousand, too many to
    /// scan the recording for each.
    positions: HashMap<String, Vec<usize>>,
    state: Mutex<Walk>,
}

#[derive(Default)]
struct Walk {
    /// The next recorded call to match.
    cursor: usize,
    /// Calls the replay made so far.
    made: usize,
    divergences: Vec<Divergence>,
}

impl Replayer {
    pub fn new(recorded: Vec<HostCall>) -> Self {
        let mut positions: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, c) in recorded.iter().enumerate() {
            positions.entry(target(&c.request)).or_default().push(i);
        }
        Self {
            recorded,
            positions,
            state: Mutex::new(Walk::default()),
        }
    }

    /// The answer to the replay's next call, noting how it diverges.
    pub fn answer(&self, request: &KubeRequest) -> Result<KubeResponse, ApiError> {
        let actual = target(request);
        let mut walk = self.state.lock().unwrap();
        walk.made += 1;
        let n = walk.made;
        let cursor = walk.cursor;
        let at = self.positions.get(&actual).map_or(&[][..], Vec::as_slice);
        let ahead = at.partition_point(|&i| i < cursor);
        let found = at.get(ahead).map(|&i| i - cursor);
        if found != Some(0) {
            walk.divergences.push(Divergence {
                kind: DivergenceKind::DifferentCall,
                call: Some(n),
                expected: self.recorded.get(cursor).map(|c| target(&c.request)),
                actual: Some(actual.clone()),
                differences: Vec::new(),
            });
        }
        let Some(k) = found else {
            // Not ahead in the recording: a call repeated, or new.
            return match ahead.checked_sub(1).map(|j| &self.recorded[at[j]]) {
                Some(c) => c.response.to_result(),
                None => Err(ApiError::Unavailable(format!(
                    "replay: the recorded reconcile made no `{actual}` call, so there is no answer to replay"
                ))),
            };
        };
        let recorded = &self.recorded[cursor + k];
        let (expected, got) = (arguments(&recorded.request), arguments(request));
        if canonical(&expected) != canonical(&got) {
            walk.divergences.push(Divergence {
                kind: DivergenceKind::DifferentArguments,
                call: Some(n),
                expected: Some(actual.clone()),
                actual: Some(actual),
                differences: differences(&expected, &got),
            });
        }
        walk.cursor = cursor + k + 1;
        recorded.response.to_result()
    }

    /// The divergences found, with the recorded calls never reached.
    pub fn finish(&self) -> Vec<Divergence> {
        let mut walk = self.state.lock().unwrap();
        let cursor = walk.cursor;
        let missing: Vec<Divergence> = self.recorded[cursor..]
            .iter()
            .enumerate()
            .map(|(i, c)| Divergence {
                kind: DivergenceKind::MissingCall,
                call: Some(cursor + i + 1),
                expected: Some(target(&c.request)),
                actual: None,
                differences: Vec::new(),
            })
            .collect();
        walk.divergences.extend(missing);
        std::mem::take(&mut walk.divergences)
    }
}

impl Layer for Replayer {
    /// Every call the guest makes is answered here, never by the inner API.
    fn call<'a>(&'a self, next: Next<'a>) -> BoxFuture<'a, Result<KubeResponse, ApiError>> {
        let answer = self.answer(&next.request);
        Box::pin(std::future::ready(answer))
    }
}

/// What a call is about, without its arguments: `patch (apply) apps/v1
/// Deployment default/web`. Two calls with the same target are the same
/// call, possibly with different arguments.
pub fn target(request: &KubeRequest) -> String {
    let at = |kind: &Gvk, ns: Option<&str>, name: &str| {
        let gv = if kind.group.is_empty() {
            kind.version.clone()
        } else {
            format!("{}/{}", kind.group, kind.version)
        };
        let ns = ns.map(|n| format!("{n}/")).unwrap_or_default();
        format!("{gv} {} {ns}{name}", kind.kind)
    };
    let address = request.address();
    let object = |name: Option<&str>| at(address.kind, address.namespace, name.unwrap_or(""));
    match request {
        KubeRequest::List { .. } => format!("list {}", object(None).trim_end_matches('/')),
        KubeRequest::Create { object: body, .. } => {
            format!("create {}", object(body.object_name().as_deref()))
        }
        KubeRequest::Patch { patch, .. } | KubeRequest::PatchStatus { patch, .. } => format!(
            "{} ({}) {}",
            request.operation(),
            patch.type_name(),
            object(address.name)
        ),
        KubeRequest::RecordEvent { event } => {
            format!("record-event {} on {}", event.reason, object(address.name))
        }
        _ => format!("{} {}", request.operation(), object(address.name)),
    }
}

/// A call's arguments as compared: its JSON, normalized (see
/// [`crate::meta::normalized`]).
fn arguments(request: &KubeRequest) -> Value {
    let mut v = serde_json::to_value(request).unwrap_or(Value::Null);
    crate::meta::normalized::normalize(&mut v);
    v
}
