//! The two layers of a shadow run: [`Recording`] keeps what the stable
//! version read and wrote on its way to the API server, and [`Capture`]
//! answers the candidate from that recording, its writes answered in the
//! host and never sent.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::future::BoxFuture;
use serde_json::Value;

use wasmctrl_apiserver::patches;

use super::write::{MAX_NORMALIZED, Write};
use crate::control::metrics::Metrics;
use crate::sandbox::hostapi::{
    ApiError, KubeApi, KubeRequest, KubeResponse, Layer, Next, ObjectPatch, check_size,
};

/// Bytes of answers and writes one shadow run keeps, the stable version's
/// and the candidate's together. Each call is bounded (the payload and
/// list limits) and so is their number (`hostCalls`), but not their
/// product: past this, the key is counted as skipped instead of compared.
pub(super) const MAX_RECORDED: usize = 64 << 20;

pub(super) type Answer<T = KubeResponse> = Result<T, ApiError>;

/// What one version's run kept: the answers of its reads, by read, and
/// the writes that succeeded.
#[derive(Default)]
pub(super) struct Seen {
    pub(super) reads: HashMap<KubeRequest, VecDeque<Answer>>,
    pub(super) writes: Vec<Write>,
    /// Bytes of answers and write bodies kept.
    pub(super) bytes: usize,
    /// Past [`MAX_RECORDED`], or a patch too large to apply: nothing is
    /// kept, and the run is not compared.
    pub(super) overflow: bool,
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

/// The text a read's request holds.
fn read_bytes(read: &KubeRequest) -> usize {
    let at = read.address();
    let kind = at.kind.group.len() + at.kind.version.len() + at.kind.kind.len();
    let text = |s: Option<&str>| s.map_or(0, str::len);
    kind + text(at.namespace) + text(at.name) + text(at.label_selector)
}

/// Keeps the stable version's reads' answers and its writes that
/// succeeded, on their way to the plugin's API.
#[derive(Default)]
pub(crate) struct Recording {
    seen: Mutex<Seen>,
}

impl Recording {
    pub(super) fn take(&self) -> Seen {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

impl Layer for Recording {
    fn call<'a>(&'a self, next: Next<'a>) -> BoxFuture<'a, Answer> {
        Box::pin(async move {
            let request = &next.request;
            let read = request.is_read().then(|| request.clone());
            // A body past the payload limit is refused by the call below;
            // it is not parsed here first. Its nesting needs no check here:
            // a body too deep to parse is compared as its text.
            let write = match request.check_payload() {
                Ok(()) => Write::of(request),
                Err(_) => None,
            };
            let answer = next.pass().await;
            let mut seen = self.seen.lock().unwrap();
            match (read, write) {
                (Some(read), _) if seen.keep(read_bytes(&read) + answer_bytes(&answer)) => {
                    seen.reads
                        .entry(read)
                        .or_default()
                        .push_back(answer.clone());
                }
                (None, Some(w)) if answer.is_ok() && seen.keep(w.bytes()) => {
                    seen.writes.push(w);
                }
                _ => {}
            }
            answer
        })
    }
}

/// Serves a candidate's shadow run over the candidate's live API: reads
/// answered as the stable version's were (else live, not counted), writes
/// admitted by the live API and then captured and answered locally.
pub(super) struct Capture {
    pub(super) state: Mutex<Seen>,
    /// Where a patch refused for its size or shape is counted (as the
    /// candidate's `shadowPatch` limit); None in unit tests.
    pub(super) counted: Option<(Arc<Metrics>, String)>,
}

impl Capture {
    async fn read(&self, live: &dyn KubeApi, request: KubeRequest, deadline: Instant) -> Answer {
        let recorded = {
            let mut state = self.state.lock().unwrap();
            state.reads.get_mut(&request).and_then(|answers| {
                if answers.len() > 1 {
                    answers.pop_front()
                } else {
                    answers.front().cloned()
                }
            })
        };
        match recorded {
            Some(answer) => answer,
            None => live.peek(request, deadline).await,
        }
    }

    /// What the API server would answer `request` with, without sending it.
    ///
    /// Patches are applied by the embedded API server's own patch code,
    /// with its bounds (operations, bytes copied, nesting depth): a
    /// candidate's patch costs the host no more than the same patch sent
    /// for real would cost the API server, and never runs unbounded on the
    /// guest's stack.
    async fn answer(&self, live: &dyn KubeApi, request: &KubeRequest, deadline: Instant) -> Answer {
        match request {
            KubeRequest::Create { object, .. }
            | KubeRequest::Replace { object, .. }
            | KubeRequest::ReplaceStatus { object, .. } => {
                Ok(KubeResponse::Object(object.as_str().to_owned()))
            }
            KubeRequest::Patch { patch, .. } | KubeRequest::PatchStatus { patch, .. } => {
                let at = request.address();
                let current = KubeRequest::Get {
                    kind: at.kind.clone(),
                    namespace: at.namespace.map(str::to_string),
                    name: at.name.unwrap_or_default().to_string(),
                };
                match (self.read(live, current, deadline).await, patch) {
                    // Server-side apply creates what does not exist.
                    (Err(ApiError::NotFound(_)), ObjectPatch::Apply { body, .. }) => {
                        Ok(KubeResponse::Object(body.as_str().to_owned()))
                    }
                    (object, patch) => self.patched(object, patch),
                }
            }
            KubeRequest::Delete { .. } | KubeRequest::RecordEvent { .. } => Ok(KubeResponse::Empty),
            KubeRequest::Get { .. } | KubeRequest::List { .. } => {
                unreachable!("reads are served, not answered")
            }
        }
    }

    /// `patch` applied to `object` (the answer of a get of it).
    fn patched(&self, object: Answer, patch: &ObjectPatch) -> Answer {
        let KubeResponse::Object(json) = object? else {
            return Err(ApiError::Other("a get answered without an object".into()));
        };
        let text = patch.body();
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
        let patch_value: Value = serde_json::from_str(text)
            .map_err(|e| ApiError::Invalid(format!("patch is not valid JSON: {e}")))?;
        let result = match patch {
            ObjectPatch::Json { .. } => patches::json_patch(&object, &patch_value),
            ObjectPatch::Merge { .. } | ObjectPatch::Apply { .. } => {
                patches::merge_patch(&object, &patch_value)
            }
        };
        let object =
            result.map_err(|e| refused(ApiError::Invalid(format!("the patch fails: {e}"))))?;
        let json = object.to_string();
        check_size(&json).map_err(refused)?;
        Ok(KubeResponse::Object(json))
    }
}

impl Layer for Capture {
    fn call<'a>(&'a self, next: Next<'a>) -> BoxFuture<'a, Answer> {
        let Next {
            request,
            deadline,
            below: live,
        } = next;
        Box::pin(async move {
            if request.is_read() {
                return self.read(live, request, deadline).await;
            }
            // Refused as the real call would be, before the body is read:
            // a candidate's write past its grant or the payload limit is
            // no success to compare.
            live.admit(&request).await?;
            let answer = self.answer(live, &request, deadline).await;
            if answer.is_ok()
                && let Some(write) = Write::of(&request)
            {
                let mut state = self.state.lock().unwrap();
                if state.keep(write.bytes()) {
                    state.writes.push(write);
                }
            }
            answer
        })
    }
}
