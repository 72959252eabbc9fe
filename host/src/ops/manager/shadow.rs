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
//! patches applied to the object as read), never sent.
//!
//! # What is compared
//! The two reconciles' results, and their writes as normalized JSON
//! (`resourceVersion`, `managedFields` and every field whose name ends in
//! `Time` or `Timestamp` removed), as multisets: the order of writes is not
//! a divergence. Each divergence is counted per kind of object written (or
//! `result` when the results differ) in
//! `wasmctrl_shadow_divergences_total{plugin,kind}`; the last
//! `keepDivergences` are kept with both write sets and their difference.
//!
//! # Never in the stable version's way
//! Shadow runs have their own `maxConcurrentShadows` permits, taken without
//! waiting: a key finished while all are busy gets no shadow run (counted in
//! `wasmctrl_shadow_skipped_total`), and so does one whose two runs read and
//! wrote more than [`MAX_RECORDED`] bytes. They stop when the plugin is
//! unloaded.
//!
//! # Held to the same bounds
//! A candidate's write passes every check a real call of it would
//! ([`KubeApi::admit`]) before its body is read, and its patches are
//! applied by the embedded API server's patch code, with that server's
//! bounds on operations, bytes copied and nesting.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use wasmctrl_apiserver::patches;

use crate::control::metrics::{Metrics, PluginKindLabels, PluginLabel, Version};
use crate::control::reconcile::{Action, ObjectKey, ReconcileError, ReconcileRequest};
use crate::meta::normalized::{canonical, parse_body};
use crate::sandbox::hostapi::{
    ApiError, EventType, Gvk, KubeApi, KubeRequest, KubeResponse, ObjectPatch, check_size,
};
use crate::sandbox::{Plugin, Through};

/// Bytes of one write body kept in a divergence (the comparison uses all).
const MAX_KEPT_BODY: usize = 64 << 10;

/// Bytes of answers and writes one shadow run keeps, the stable version's
/// and the candidate's together. Each call is bounded (the payload and
/// list limits) and so is their number (`hostCalls`), but not their
/// product: past this, the key is counted as skipped instead of compared.
const MAX_RECORDED: usize = 64 << 20;

/// One write, as compared: what was written where, normalized.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Write {
    /// `create`, `replace`, `patch`, `apply`, `replace-status`,
    /// `patch-status`, `delete` or `event`.
    pub verb: String,
    /// `group/Kind` (`Kind` for the core group).
    pub kind: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// The object or patch, normalized; None for deletes.
    pub body: Option<Value>,
    /// Canonical JSON of all of the above: what equality means.
    #[serde(skip)]
    canonical: String,
}

fn kind_name(kind: &Gvk) -> String {
    if kind.group.is_empty() {
        kind.kind.clone()
    } else {
        format!("{}/{}", kind.group, kind.kind)
    }
}

impl Write {
    fn new(
        verb: &str,
        kind: &Gvk,
        namespace: Option<String>,
        name: Option<String>,
        body: Option<Value>,
    ) -> Self {
        let mut w = Write {
            verb: verb.into(),
            kind: kind_name(kind),
            namespace,
            name,
            body,
            canonical: String::new(),
        };
        w.canonical = format!(
            "{}|{}|{:?}|{:?}|{}",
            w.verb,
            w.kind,
            w.namespace,
            w.name,
            w.body.as_ref().map(canonical).unwrap_or_default()
        );
        w
    }

    /// The write `request` makes; None for reads.
    fn of(request: &KubeRequest) -> Option<Write> {
        let patch = |p: &ObjectPatch| match p {
            ObjectPatch::Merge(s) => ("merge", compared(s)),
            ObjectPatch::Json(s) => ("json", compared(s)),
            ObjectPatch::Apply(a) => ("apply", compared(&a.body)),
        };
        Some(match request {
            KubeRequest::Get { .. } | KubeRequest::List { .. } => return None,
            KubeRequest::Create {
                kind,
                namespace,
                object,
            } => {
                let body = compared(object);
                let name = body["metadata"]["name"].as_str().map(str::to_string);
                Write::new("create", kind, namespace.clone(), name, Some(body))
            }
            KubeRequest::Replace {
                kind,
                namespace,
                name,
                object,
            } => Write::new(
                "replace",
                kind,
                namespace.clone(),
                Some(name.clone()),
                Some(compared(object)),
            ),
            KubeRequest::ReplaceStatus {
                kind,
                namespace,
                name,
                object,
            } => Write::new(
                "replace-status",
                kind,
                namespace.clone(),
                Some(name.clone()),
                Some(compared(object)),
            ),
            KubeRequest::Patch {
                kind,
                namespace,
                name,
                patch: p,
            } => {
                let (how, body) = patch(p);
                let verb = if how == "apply" { "apply" } else { "patch" };
                Write::new(
                    verb,
                    kind,
                    namespace.clone(),
                    Some(name.clone()),
                    Some(body),
                )
            }
            KubeRequest::PatchStatus {
                kind,
                namespace,
                name,
                patch: p,
            } => {
                let (how, body) = patch(p);
                let verb = if how == "apply" {
                    "apply-status"
                } else {
                    "patch-status"
                };
                Write::new(
                    verb,
                    kind,
                    namespace.clone(),
                    Some(name.clone()),
                    Some(body),
                )
            }
            KubeRequest::Delete {
                kind,
                namespace,
                name,
            } => Write::new("delete", kind, namespace.clone(), Some(name.clone()), None),
            KubeRequest::RecordEvent(e) => Write::new(
                "event",
                &e.regarding_kind,
                e.regarding_namespace.clone(),
                Some(e.regarding_name.clone()),
                Some(serde_json::json!({
                    "type": match e.type_ {
                        EventType::Normal => "Normal",
                        EventType::Warning => "Warning",
                    },
                    "reason": e.reason,
                    "action": e.action,
                    "note": e.note,
                })),
            ),
        })
    }

    /// This write as kept in a divergence: a body past
    /// [`MAX_KEPT_BODY`] is replaced by its size.
    fn kept(&self) -> Write {
        let mut w = self.clone();
        if let Some(body) = &w.body {
            let len = body.to_string().len();
            if len > MAX_KEPT_BODY {
                w.body = Some(serde_json::json!({ "truncated": len }));
            }
        }
        w
    }
}

/// Write bodies past this many bytes are compared by their digest instead
/// of as normalized JSON, and a shadow run does not apply a patch this
/// large (or to an object this large): a tree of a body made of millions
/// of tiny values costs about 16 times its text.
const MAX_NORMALIZED: usize = 256 << 10;

/// A write body as compared: normalized JSON, or past
/// [`MAX_NORMALIZED`] its name, size and SHA-256.
fn compared(json: &str) -> Value {
    if json.len() <= MAX_NORMALIZED {
        return parse_body(json);
    }
    /// The name, read without building the rest.
    #[derive(serde::Deserialize)]
    struct Named {
        metadata: Option<Meta>,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        name: Option<String>,
    }
    use sha2::Digest as _;
    let name = serde_json::from_str::<Named>(json)
        .ok()
        .and_then(|n| n.metadata?.name);
    serde_json::json!({
        "metadata": { "name": name },
        "bytes": json.len(),
        "sha256": hex::encode(sha2::Sha256::digest(json.as_bytes())),
    })
}

/// What identifies a read, to answer the candidate's reads with the
/// stable version's answers.
fn read_id(request: &KubeRequest) -> Option<String> {
    match request {
        KubeRequest::Get {
            kind,
            namespace,
            name,
        } => Some(format!("get|{kind:?}|{namespace:?}|{name}")),
        KubeRequest::List {
            kind,
            namespace,
            label_selector,
        } => Some(format!("list|{kind:?}|{namespace:?}|{label_selector:?}")),
        _ => None,
    }
}

type Answer<T = KubeResponse> = Result<T, ApiError>;

/// Serves the stable version's calls through the plugin's API and keeps
/// its reads' answers and its writes that succeeded.
pub(crate) struct Recording {
    api: Arc<dyn KubeApi>,
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    reads: HashMap<String, VecDeque<Answer>>,
    writes: Vec<Write>,
    /// Bytes of answers and write bodies kept.
    bytes: usize,
    /// Past [`MAX_RECORDED`], or a patch too large to apply: nothing is
    /// kept, and the run is not compared.
    overflow: bool,
}

impl Seen {
    /// Whether `bytes` more may be kept; past [`MAX_RECORDED`] everything
    /// kept is dropped at once and nothing more is.
    fn keep(&mut self, bytes: usize) -> bool {
        if self.overflow {
            return false;
        }
        self.bytes += bytes;
        if self.bytes > MAX_RECORDED {
            self.give_up();
            return false;
        }
        true
    }

    /// Drops what was kept: this run is not compared.
    fn give_up(&mut self) {
        self.overflow = true;
        self.reads = HashMap::new();
        self.writes = Vec::new();
    }
}

/// The text an answer holds.
fn answer_bytes(answer: &Answer) -> usize {
    match answer {
        Ok(KubeResponse::Object(s)) => s.len(),
        Ok(KubeResponse::Objects(list)) => list.iter().map(String::len).sum(),
        Ok(KubeResponse::Empty) => 0,
        Err(e) => e.to_string().len(),
    }
}

impl Recording {
    pub(crate) fn new(api: Arc<dyn KubeApi>) -> Self {
        Self {
            api,
            seen: Mutex::new(Seen::default()),
        }
    }

    fn take(&self) -> Seen {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

impl KubeApi for Recording {
    fn call(&self, request: KubeRequest, deadline: Instant) -> BoxFuture<'_, Answer> {
        Box::pin(async move {
            let id = read_id(&request);
            // A body past the payload limit is refused by the call below;
            // it is not parsed here first. Its nesting needs no check here:
            // a body too deep to parse is compared as its text.
            let write = match request.check_payload() {
                Ok(()) => Write::of(&request),
                Err(_) => None,
            };
            let answer = self.api.call(request, deadline).await;
            let mut seen = self.seen.lock().unwrap();
            match (id, write) {
                (Some(id), _) if seen.keep(id.len() + answer_bytes(&answer)) => {
                    seen.reads.entry(id).or_default().push_back(answer.clone());
                }
                (None, Some(w)) if answer.is_ok() && seen.keep(w.canonical.len()) => {
                    seen.writes.push(w);
                }
                _ => {}
            }
            answer
        })
    }

    fn admit<'a>(&'a self, request: &'a KubeRequest) -> BoxFuture<'a, Answer<()>> {
        self.api.admit(request)
    }
}

/// Serves a candidate's shadow run: reads answered as the stable version's
/// were (else live), writes captured and answered locally.
struct Capture {
    live: Arc<dyn KubeApi>,
    state: Mutex<Seen>,
    /// Where a patch refused for its size or shape is counted (as the
    /// candidate's `shadowPatch` limit); None in unit tests.
    counted: Option<(Arc<Metrics>, String)>,
}

impl Capture {
    async fn read(&self, request: KubeRequest, deadline: Instant) -> Answer {
        let recorded = read_id(&request).and_then(|id| {
            let mut state = self.state.lock().unwrap();
            let answers = state.reads.get_mut(&id)?;
            if answers.len() > 1 {
                answers.pop_front()
            } else {
                answers.front().cloned()
            }
        });
        match recorded {
            Some(answer) => answer,
            None => self.live.peek(request, deadline).await,
        }
    }

    /// What the API server would answer `request` with, without sending it.
    ///
    /// Patches are applied by the embedded API server's own patch code,
    /// with its bounds (operations, bytes copied, nesting depth): a
    /// candidate's patch costs the host no more than the same patch sent
    /// for real would cost the API server, and never runs unbounded on the
    /// guest's stack.
    async fn answer(&self, request: &KubeRequest, deadline: Instant) -> Answer {
        let current = |kind: &Gvk, namespace: &Option<String>, name: &String| KubeRequest::Get {
            kind: kind.clone(),
            namespace: namespace.clone(),
            name: name.clone(),
        };
        let patched = |object: Answer, patch: &ObjectPatch| -> Answer {
            let KubeResponse::Object(json) = object? else {
                return Err(ApiError::Other("a get answered without an object".into()));
            };
            let text = match patch {
                ObjectPatch::Merge(s) | ObjectPatch::Json(s) => s,
                ObjectPatch::Apply(a) => &a.body,
            };
            let refused = |e: ApiError| {
                if let Some((metrics, plugin)) = &self.counted {
                    metrics.count_limit(plugin, "shadowPatch");
                }
                e
            };
            if json.len().max(text.len()) > MAX_NORMALIZED {
                // Applying it would build trees of both, about 16 times
                // their text; the run is not compared.
                self.state.lock().unwrap().give_up();
                return Err(refused(ApiError::Invalid(format!(
                    "a shadow run applies patches of at most {MAX_NORMALIZED} bytes to objects of at most as many; this one ({} bytes to {} bytes) is not applied and the run is not compared",
                    text.len(),
                    json.len()
                ))));
            }
            let object: Value = serde_json::from_str(&json)
                .map_err(|e| ApiError::Other(format!("the current object is not JSON: {e}")))?;
            let parse = |s: &str| -> Result<Value, ApiError> {
                serde_json::from_str(s)
                    .map_err(|e| ApiError::Invalid(format!("patch is not valid JSON: {e}")))
            };
            let result = match patch {
                ObjectPatch::Merge(s) => patches::merge_patch(&object, &parse(s)?),
                ObjectPatch::Json(s) => patches::json_patch(&object, &parse(s)?),
                ObjectPatch::Apply(a) => patches::merge_patch(&object, &parse(&a.body)?),
            };
            let object =
                result.map_err(|e| refused(ApiError::Invalid(format!("the patch fails: {e}"))))?;
            let json = object.to_string();
            check_size(&json).map_err(refused)?;
            Ok(KubeResponse::Object(json))
        };
        match request {
            KubeRequest::Create { object, .. }
            | KubeRequest::Replace { object, .. }
            | KubeRequest::ReplaceStatus { object, .. } => Ok(KubeResponse::Object(object.clone())),
            KubeRequest::Patch {
                kind,
                namespace,
                name,
                patch,
            }
            | KubeRequest::PatchStatus {
                kind,
                namespace,
                name,
                patch,
            } => {
                let object = self.read(current(kind, namespace, name), deadline).await;
                match (object, patch) {
                    // Server-side apply creates what does not exist.
                    (Err(ApiError::NotFound(_)), ObjectPatch::Apply(a)) => {
                        Ok(KubeResponse::Object(a.body.clone()))
                    }
                    (object, patch) => patched(object, patch),
                }
            }
            KubeRequest::Delete { .. } | KubeRequest::RecordEvent(_) => Ok(KubeResponse::Empty),
            KubeRequest::Get { .. } | KubeRequest::List { .. } => {
                unreachable!("reads are served, not answered")
            }
        }
    }
}

impl KubeApi for Capture {
    fn call(&self, request: KubeRequest, deadline: Instant) -> BoxFuture<'_, Answer> {
        Box::pin(async move {
            if read_id(&request).is_some() {
                return self.read(request, deadline).await;
            }
            // Refused as the real call would be, before the body is read:
            // a candidate's write past its grant or the payload limit is
            // no success to compare.
            self.live.admit(&request).await?;
            let answer = self.answer(&request, deadline).await;
            if answer.is_ok()
                && let Some(write) = Write::of(&request)
            {
                let mut state = self.state.lock().unwrap();
                if state.keep(write.canonical.len()) {
                    state.writes.push(write);
                }
            }
            answer
        })
    }
}

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

/// One version's side of a divergence.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Side {
    pub result: String,
    /// The error message, when the result is an error.
    pub error: Option<String>,
    pub writes: Vec<Write>,
}

impl Side {
    fn new(result: &Result<Action, ReconcileError>, writes: &[Write]) -> Self {
        Side {
            result: outcome(result),
            error: result.as_ref().err().map(|e| e.to_string()),
            writes: writes.iter().map(Write::kept).collect(),
        }
    }
}

/// The difference of two write sets.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Diff {
    /// Writes the stable version made and the candidate would not.
    pub only_stable: Vec<Write>,
    /// Writes the candidate would make and the stable version did not.
    pub only_candidate: Vec<Write>,
}

/// Multiset difference: each write of `a` not matched by one of `b`.
fn minus(a: &[Write], b: &[Write]) -> Vec<Write> {
    let mut left: HashMap<&str, usize> = HashMap::new();
    for w in b {
        *left.entry(&w.canonical).or_default() += 1;
    }
    a.iter()
        .filter(|w| match left.get_mut(w.canonical.as_str()) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .map(Write::kept)
        .collect()
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
    /// calls in `recording`: starts the candidate's shadow run if a permit
    /// is free, without waiting.
    pub(crate) fn after_stable(
        self: &Arc<Self>,
        request: &ReconcileRequest,
        result: &Result<Action, ReconcileError>,
        recording: &Recording,
    ) {
        let seen = recording.take();
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) if !seen.overflow => permit,
            _ => return self.skip(),
        };
        let stable_writes = seen.writes;
        let capture = Arc::new(Capture {
            counted: Some((self.metrics.clone(), self.plugin.clone())),
            live: self.candidate.kube().clone(),
            state: Mutex::new(Seen {
                reads: seen.reads,
                bytes: seen.bytes,
                ..Seen::default()
            }),
        });
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
        tokio::spawn(async move {
            let _permit = permit;
            let key = request.key.clone();
            // The candidate's host calls (a ceiling it runs into) count
            // as the candidate's too.
            let (invocation, _) = crate::control::metrics::with_version(async {
                crate::control::metrics::ran_as(Version::Candidate);
                candidate
                    .invoke_through(request, Through::kube(capture.clone()))
                    .await
            })
            .await;
            let Some(this) = this.upgrade() else { return };
            this.metrics
                .observe_call_as(&this.plugin, Version::Candidate, &invocation.usage);
            let (writes, overflow) = {
                let mut state = capture.state.lock().unwrap();
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
    /// kept more than [`MAX_RECORDED`] bytes.
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
        let diff = Diff {
            only_stable: minus(stable_writes, writes),
            only_candidate: minus(writes, stable_writes),
        };
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
        if tally.recent.len() >= self.keep {
            tally.recent.pop_front();
        }
        tally.recent.push_back(Divergence {
            key: key.to_string(),
            at: wasmctrl_apimachinery::time::format_seconds(SystemTime::now()),
            kinds,
            stable,
            candidate: Side::new(result, writes),
            diff,
        });
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
mod tests {
    use super::*;

    use proptest::prelude::*;

    /// A live API that serves one object for every get and admits only
    /// bodies within the payload limit, like the default `admit`.
    struct OneObject(String);

    impl KubeApi for OneObject {
        fn call(&self, _: KubeRequest, _: Instant) -> BoxFuture<'_, Answer> {
            Box::pin(async move { Ok(KubeResponse::Object(self.0.clone())) })
        }
    }

    fn configmap() -> Gvk {
        Gvk {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
        }
    }

    fn capture(object: &str) -> Capture {
        Capture {
            live: Arc::new(OneObject(object.into())),
            state: Mutex::new(Seen::default()),
            counted: None,
        }
    }

    fn json_patch(patch: String) -> KubeRequest {
        KubeRequest::Patch {
            kind: configmap(),
            namespace: Some("default".into()),
            name: "cm".into(),
            patch: ObjectPatch::Json(patch),
        }
    }

    fn answer_of(capture: &Capture, request: KubeRequest) -> Answer {
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        futures::executor::block_on(capture.call(request, deadline))
    }

    /// Nesting depth, without recursion (the value may be deep).
    fn depth(value: &Value) -> usize {
        let mut deepest = 0;
        let mut stack = vec![(value, 0)];
        while let Some((v, d)) = stack.pop() {
            deepest = deepest.max(d);
            match v {
                Value::Object(m) => stack.extend(m.values().map(|v| (v, d + 1))),
                Value::Array(a) => stack.extend(a.iter().map(|v| (v, d + 1))),
                _ => {}
            }
        }
        deepest
    }

    #[test]
    fn a_patch_that_would_nest_past_the_bound_is_refused_not_applied() {
        let mut ops = vec![r#"{"op":"add","path":"/spec","value":{"a":{}}}"#.to_string()];
        let mut chain = 1;
        for _ in 0..15 {
            let path = format!("/spec{}", "/a".repeat(chain + 1));
            ops.push(format!(r#"{{"op":"copy","from":"/spec","path":"{path}"}}"#));
            chain = 2 * chain + 1;
        }
        let c = capture(r#"{"metadata":{"name":"cm"}}"#);
        let answer = answer_of(&c, json_patch(format!("[{}]", ops.join(","))));
        let Err(ApiError::Invalid(m)) = &answer else {
            panic!("{answer:?}")
        };
        assert!(m.contains("levels deep"), "{m}");
        assert!(c.state.lock().unwrap().writes.is_empty());
    }

    #[test]
    fn copies_past_the_api_server_s_copy_bytes_are_refused() {
        let mut ops = vec![format!(
            r#"{{"op":"add","path":"/spec","value":{{"x":"{}"}}}}"#,
            "y".repeat(512)
        )];
        ops.extend(
            (0..30).map(|i| format!(r#"{{"op":"copy","from":"/spec","path":"/spec/c{i}"}}"#)),
        );
        let answer = answer_of(
            &capture(r#"{"metadata":{"name":"cm"}}"#),
            json_patch(format!("[{}]", ops.join(","))),
        );
        let Err(ApiError::Invalid(m)) = &answer else {
            panic!("{answer:?}")
        };
        assert!(m.contains("copy"), "{m}");
    }

    #[test]
    fn a_body_past_the_payload_limit_is_refused_before_it_is_read() {
        let huge = format!(
            r#"{{"data":"{}"}}"#,
            "x".repeat(crate::sandbox::hostapi::MAX_PAYLOAD)
        );
        let c = capture("{}");
        for request in [
            KubeRequest::Create {
                kind: configmap(),
                namespace: Some("default".into()),
                object: huge.clone(),
            },
            KubeRequest::Patch {
                kind: configmap(),
                namespace: Some("default".into()),
                name: "cm".into(),
                patch: ObjectPatch::Merge(huge.clone()),
            },
        ] {
            let answer = answer_of(&c, request);
            let Err(ApiError::Invalid(m)) = &answer else {
                panic!("{answer:?}")
            };
            assert!(m.contains("payload limit"), "{m}");
        }
        assert!(c.state.lock().unwrap().writes.is_empty());
    }

    #[test]
    fn a_recording_past_its_bytes_keeps_nothing_and_is_not_compared() {
        let big = format!(r#"{{"data":"{}"}}"#, "x".repeat(1 << 20));
        let recording = Recording::new(Arc::new(OneObject(big)));
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        for i in 0..(MAX_RECORDED >> 20) + 1 {
            let get = KubeRequest::Get {
                kind: configmap(),
                namespace: Some("default".into()),
                name: format!("cm-{i}"),
            };
            futures::executor::block_on(recording.call(get, deadline)).unwrap();
        }
        let seen = recording.take();
        assert!(seen.overflow);
        assert!(seen.reads.is_empty() && seen.writes.is_empty());
    }

    #[test]
    fn a_large_write_is_compared_by_digest_without_a_tree() {
        let object = |value: &str| {
            format!(
                r#"{{"metadata":{{"name":"big"}},"data":[{}{value}]}}"#,
                "0,".repeat(MAX_NORMALIZED)
            )
        };
        let create = |object: String| {
            Write::of(&KubeRequest::Create {
                kind: configmap(),
                namespace: Some("default".into()),
                object,
            })
            .unwrap()
        };
        let (a, b, c) = (
            create(object("0")),
            create(object("0")),
            create(object("1")),
        );
        assert_eq!(a.name.as_deref(), Some("big"));
        assert_eq!(a.canonical, b.canonical);
        assert_ne!(a.canonical, c.canonical);
        assert!(a.canonical.len() < 300, "{}", a.canonical);
    }

    #[test]
    fn a_patch_within_the_bounds_is_answered_and_captured() {
        let c = capture(r#"{"metadata":{"name":"cm"},"data":{"a":"1"}}"#);
        let answer = answer_of(
            &c,
            json_patch(r#"[{"op":"copy","from":"/data/a","path":"/data/b"}]"#.into()),
        );
        let Ok(KubeResponse::Object(json)) = answer else {
            panic!("{answer:?}")
        };
        let object: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(object["data"]["b"], "1");
        assert_eq!(c.state.lock().unwrap().writes.len(), 1);
    }

    /// One JSON patch operation over a small vocabulary of paths, so that
    /// copies into themselves, moves and removes of what exists are
    /// likely.
    fn operation() -> impl Strategy<Value = String> {
        let path = prop::collection::vec(prop::sample::select(vec!["a", "b", "0", "-"]), 0..6)
            .prop_map(|parts| parts.iter().map(|p| format!("/{p}")).collect::<String>());
        let op = prop::sample::select(vec!["add", "copy", "move", "remove", "replace", "test"]);
        let value = prop::sample::select(vec![r#"{}"#, r#"[]"#, r#""x""#, r#"{"a":{"b":[1]}}"#]);
        (op, path.clone(), path, value).prop_map(|(op, path, from, value)| {
            format!(r#"{{"op":"{op}","path":"/spec{path}","from":"/spec{from}","value":{value}}}"#)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Whatever a candidate patches, the capture answers within the
        /// API server's bounds or refuses: never a panic, never an object
        /// deeper than the depth bound or past the payload limit.
        #[test]
        fn any_json_patch_is_answered_within_the_bounds(ops in prop::collection::vec(operation(), 1..64)) {
            let c = capture(r#"{"metadata":{"name":"cm"},"spec":{"a":{"b":[1]}}}"#);
            let patch = format!("[{}]", ops.join(","));
            match answer_of(&c, json_patch(patch)) {
                Ok(KubeResponse::Object(json)) => {
                    prop_assert!(json.len() <= crate::sandbox::hostapi::MAX_PAYLOAD);
                    let object: Value = serde_json::from_str(&json).unwrap();
                    prop_assert!(depth(&object) <= patches::MAX_DEPTH);
                }
                Ok(other) => prop_assert!(false, "{other:?}"),
                Err(ApiError::Invalid(_)) => {}
                Err(e) => prop_assert!(false, "{e:?}"),
            }
        }
    }

    fn deployment() -> Gvk {
        Gvk {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
        }
    }

    #[test]
    fn writes_compare_as_normalized_json_in_any_order() {
        let a = Write::of(&KubeRequest::Replace {
            kind: deployment(),
            namespace: Some("ns".into()),
            name: "web".into(),
            object: r#"{"metadata":{"name":"web","resourceVersion":"7","managedFields":[],"creationTimestamp":"2026-01-01T00:00:00Z"},"spec":{"replicas":2},"status":{"conditions":[{"type":"Ready","lastTransitionTime":"x"}]}}"#.into(),
        })
        .unwrap();
        let b = Write::of(&KubeRequest::Replace {
            kind: deployment(),
            namespace: Some("ns".into()),
            name: "web".into(),
            object: r#"{"status":{"conditions":[{"lastTransitionTime":"y","type":"Ready"}]},"spec":{"replicas":2},"metadata":{"resourceVersion":"9","name":"web"}}"#.into(),
        })
        .unwrap();
        assert_eq!(a.canonical, b.canonical);
        let delete = Write::of(&KubeRequest::Delete {
            kind: deployment(),
            namespace: Some("ns".into()),
            name: "web".into(),
        })
        .unwrap();
        assert!(minus(&[a.clone(), delete.clone()], &[delete.clone(), b.clone()]).is_empty());
        let only = minus(&[a.clone(), delete.clone()], std::slice::from_ref(&b));
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].verb, "delete");
        assert_eq!(only[0].kind, "apps/Deployment");
        assert_eq!(minus(&[a.clone(), a.clone()], &[b]).len(), 1, "a multiset");
    }
}
