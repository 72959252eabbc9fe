//! Reconcile transcripts: what one reconcile asked the host and got back,
//! recorded as one JSON line (`record`), and replayed against another build
//! of the plugin with no cluster (`wasmctrl replay`).
//!
//! # The format (version 1)
//! One JSON object per line:
//!
//! ```json
//! {"version":1,"plugin":"webapp","digest":"sha256:…","key":{"namespace":"default","name":"web"},
//!  "attempt":0,"timeoutMs":30000,"settings":{},"recordedAt":"2026-12-03T12:00:00Z","durationMs":4,
//!  "calls":[{"request":{"verb":"get","kind":{"group":"demo.wasmctrl.dev","version":"v1alpha1","kind":"WebApp"},
//!                       "namespace":"default","name":"web"},
//!            "response":{"object":{…}}}],
//!  "context":[{"read":"deadline-remaining-ms","value":29996}],
//!  "result":{"outcome":"done"}}
//! ```
//!
//! - `calls`, in the order the guest made them. A request is the host
//!   API's [`KubeRequest`] as it serializes: its `verb` is one of `get`,
//!   `list`, `create`, `replace`, `patch`, `replace-status`,
//!   `patch-status`, `delete`, `record-event`; bodies are the guest's JSON
//!   as it wrote it (a body that is not JSON, or nests deeper than a
//!   reader parses, is kept as a string: see [`Body`]). A patch is
//!   `{"type":"merge"|"json", "body":…}` or
//!   `{"type":"apply","body":…,"fieldManager":…,"force":…}`.
//!   A response is `{"object":…}`, `{"objects":[…]}`, `"empty"` or
//!   `{"error":{"code":"not-found","message":…}}` (the codes of
//!   `wasmctrl_hostapi_calls_total`).
//! - `context`: the values read from the `context` interface that change
//!   between runs (see [`ContextRead`]).
//! - `result`: `{"outcome":"done"|"requeue"|"cancelled"}`,
//!   `{"outcome":"requeue-after","ms":N}`,
//!   `{"outcome":"transient"|"permanent"|"host","message":…}` or
//!   `{"outcome":"trap","kind":"deadline"|…,"message":…}`.

pub mod record;
pub mod replay;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use wasmctrl_apimachinery::json;

use crate::control::reconcile::{Action, ObjectKey, ReconcileError};
pub use crate::sandbox::ContextRead;
use crate::sandbox::hostapi::{ApiError, Body, KubeRequest, KubeResponse};
use crate::sandbox::outbound::HttpExchange;

/// The transcript format this host writes and reads.
pub const TRANSCRIPT_VERSION: u32 = 1;

/// One recorded reconcile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transcript {
    pub version: u32,
    /// The plugin's name in the host config.
    pub plugin: String,
    /// The digest of the component that ran.
    pub digest: String,
    pub key: Key,
    pub attempt: u32,
    /// The reconcile's context timeout.
    pub timeout_ms: u64,
    /// The plugin's settings as the guest got them.
    pub settings: Value,
    /// When the reconcile started (RFC 3339).
    pub recorded_at: String,
    pub duration_ms: u64,
    pub calls: Vec<HostCall>,
    pub context: Vec<ContextRead>,
    /// Context reads past the per-call bound that were not recorded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub context_dropped: u64,
    /// The outbound HTTP exchanges, as the guest saw them: a secret is its
    /// `${secret:NAME}` placeholder in a request and `<secret:NAME>` in an
    /// answer, never its value (`sandbox::outbound::HttpTape`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http: Vec<HttpExchange>,
    /// Exchanges past the per-call bound that were not recorded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub http_dropped: u64,
    pub result: Outcome,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The object key a transcript reconciled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

impl From<&ObjectKey> for Key {
    fn from(k: &ObjectKey) -> Self {
        Key {
            namespace: k.namespace.clone(),
            name: k.name.clone(),
        }
    }
}

impl From<&Key> for ObjectKey {
    fn from(k: &Key) -> Self {
        ObjectKey {
            namespace: k.namespace.clone(),
            name: k.name.clone(),
        }
    }
}

/// One host call and its answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostCall {
    pub request: KubeRequest,
    pub response: CallResponse,
}

/// A call's answer as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallResponse {
    Object(Body),
    Objects(Vec<Body>),
    Empty,
    Error { code: String, message: String },
}

impl From<&Result<KubeResponse, ApiError>> for CallResponse {
    fn from(r: &Result<KubeResponse, ApiError>) -> Self {
        match r {
            Ok(KubeResponse::Object(o)) => CallResponse::Object(o.as_str().into()),
            Ok(KubeResponse::Objects(os)) => {
                CallResponse::Objects(os.iter().map(|o| o.as_str().into()).collect())
            }
            Ok(KubeResponse::Empty) => CallResponse::Empty,
            Err(e) => CallResponse::Error {
                code: e.code().to_string(),
                message: match e {
                    ApiError::NotFound(m)
                    | ApiError::Conflict(m)
                    | ApiError::AlreadyExists(m)
                    | ApiError::Forbidden(m)
                    | ApiError::Invalid(m)
                    | ApiError::Timeout(m)
                    | ApiError::Unavailable(m)
                    | ApiError::Other(m) => m.clone(),
                },
            },
        }
    }
}

impl CallResponse {
    /// The answer as the host API gives it.
    pub fn to_result(&self) -> Result<KubeResponse, ApiError> {
        match self {
            CallResponse::Object(o) => Ok(KubeResponse::Object(o.as_str().to_owned())),
            CallResponse::Objects(os) => Ok(KubeResponse::Objects(
                os.iter().map(|o| o.as_str().to_owned()).collect(),
            )),
            CallResponse::Empty => Ok(KubeResponse::Empty),
            CallResponse::Error { code, message } => Err(api_error(code, message.clone())),
        }
    }
}

/// The error of a recorded `code` (the inverse of [`ApiError::code`]).
fn api_error(code: &str, message: String) -> ApiError {
    match code {
        "not-found" => ApiError::NotFound(message),
        "conflict" => ApiError::Conflict(message),
        "already-exists" => ApiError::AlreadyExists(message),
        "forbidden" => ApiError::Forbidden(message),
        "invalid" => ApiError::Invalid(message),
        "timeout" => ApiError::Timeout(message),
        "unavailable" => ApiError::Unavailable(message),
        _ => ApiError::Other(message),
    }
}

/// How a reconcile ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Outcome {
    Done,
    Requeue,
    RequeueAfter { ms: u64 },
    Transient { message: String },
    Permanent { message: String },
    Trap { kind: String, message: String },
    Cancelled,
    Host { message: String },
}

impl From<&Result<Action, ReconcileError>> for Outcome {
    fn from(r: &Result<Action, ReconcileError>) -> Self {
        match r {
            Ok(a) => match a.requeue_after {
                Some(d) if !d.is_zero() => Outcome::RequeueAfter {
                    ms: u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
                },
                _ if a.requeue => Outcome::Requeue,
                _ => Outcome::Done,
            },
            Err(ReconcileError::Transient(m)) => Outcome::Transient { message: m.clone() },
            Err(ReconcileError::Permanent(m)) => Outcome::Permanent { message: m.clone() },
            Err(ReconcileError::Trap { kind, message }) => Outcome::Trap {
                kind: kind.to_string(),
                message: message.clone(),
            },
            Err(ReconcileError::Cancelled) => Outcome::Cancelled,
            Err(ReconcileError::Host(m)) => Outcome::Host { message: m.clone() },
        }
    }
}

impl Outcome {
    /// Whether two runs ended the same way. A trap's message (a backtrace
    /// with code offsets) and a host error's differ between builds and
    /// runs; only their kind counts.
    pub fn same_as(&self, other: &Outcome) -> bool {
        match (self, other) {
            (Outcome::Trap { kind: a, .. }, Outcome::Trap { kind: b, .. }) => a == b,
            (Outcome::Host { .. }, Outcome::Host { .. }) => true,
            (a, b) => a == b,
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Done => f.write_str("done"),
            Outcome::Requeue => f.write_str("requeue"),
            Outcome::RequeueAfter { ms } => write!(f, "requeue after {ms} ms"),
            Outcome::Transient { message } => write!(f, "transient error: {message}"),
            Outcome::Permanent { message } => write!(f, "permanent error: {message}"),
            Outcome::Trap { kind, .. } => write!(f, "trap ({kind})"),
            Outcome::Cancelled => f.write_str("cancelled"),
            Outcome::Host { message } => write!(f, "host error: {message}"),
        }
    }
}

/// Why a transcript file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: not a transcript: {message}")]
    Parse {
        path: String,
        line: usize,
        message: String,
    },
    #[error(
        "{path}:{line}: transcript version {version}; this host reads version {TRANSCRIPT_VERSION}"
    )]
    Version {
        path: String,
        line: usize,
        version: u32,
    },
    #[error("{path}: {message}")]
    TooLarge { path: String, message: String },
}

/// Bytes of one transcript line a reader accepts: the largest
/// `record.maxBytes`.
pub const MAX_LINE: usize = crate::config::MAX_RECORD_BYTES as usize;

/// Bytes of one transcript file a reader accepts: the recorder rotates a
/// file before it passes `record.maxBytes`, whose largest value this is.
pub const MAX_FILE: u64 = crate::config::MAX_RECORD_BYTES;

/// Transcripts in one file a reader accepts: the largest `record.max`.
pub const MAX_TRANSCRIPTS: usize = 1_000_000;

/// Calls in one transcript a reader accepts: the largest
/// `limits.hostCalls`, so no live reconcile made more.
pub const MAX_CALLS: usize = 1_000_000;

/// The longest `timeoutMs` a reader accepts: the largest
/// `reconcileTimeout`. A replay gives the guest that long, so a larger one,
/// which no recording holds, would let a looping build hold the replay for
/// years.
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// Deepest nesting of arrays and objects a line may have: a recording
/// embeds bodies nested at most a few levels less than the host API
/// accepts ([`crate::sandbox::hostapi::MAX_NESTING`]).
pub const MAX_NESTING: usize = crate::sandbox::hostapi::MAX_NESTING;

/// JSON values (object keys included) one line may hold: one per 16 bytes
/// of the longest line. A line is parsed into a tree that costs tens of
/// bytes per value whatever its text, so this, not the line's bytes,
/// bounds a reader's memory; recorded Kubernetes objects average well over
/// 16 bytes a value.
pub const MAX_VALUES: usize = MAX_LINE / 16;

/// Bytes of the file's own text an error message quotes: a parse error can
/// echo a string of the line whole, and the line is the file's author's.
const MAX_QUOTED: usize = 512;

/// Reads the transcripts of a JSONL file (blank lines skipped), each with
/// its line number, reading at most [`MAX_FILE`] bytes of it and
/// [`MAX_LINE`] of any line (a device or a growing file included).
pub fn read_file(path: &std::path::Path) -> Result<Vec<(usize, Transcript)>, TranscriptError> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| TranscriptError::Read {
        path: shown.clone(),
        source,
    })?;
    read(&shown, std::io::BufReader::new(file))
}

/// The transcripts of several JSONL files (a replay's), each with its file
/// and line number: each file within the bounds of [`read_file`], and all
/// of them together within one file's transcripts and JSON values, so
/// that a directory of files at the bound costs what one file may.
pub fn read_files(
    paths: &[std::path::PathBuf],
) -> Result<Vec<(std::path::PathBuf, usize, Transcript)>, TranscriptError> {
    let mut left = Left::of(&BOUNDS);
    let mut out = Vec::new();
    for path in paths {
        let shown = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|source| TranscriptError::Read {
            path: shown.clone(),
            source,
        })?;
        let read = read_budgeted(&shown, std::io::BufReader::new(file), &BOUNDS, &mut left)?;
        out.extend(read.into_iter().map(|(line, t)| (path.clone(), line, t)));
    }
    Ok(out)
}

/// The transcripts of JSONL `text`, each with its line number.
pub fn parse_lines(path: &str, text: &str) -> Result<Vec<(usize, Transcript)>, TranscriptError> {
    read(path, text.as_bytes())
}

/// The transcripts of the JSONL that `reader` yields (named `path` in
/// errors), each with its line number, within the bounds of [`read_file`].
pub fn read(
    path: &str,
    reader: impl std::io::BufRead,
) -> Result<Vec<(usize, Transcript)>, TranscriptError> {
    read_within(path, reader, &BOUNDS)
}

/// How much a reader takes in.
struct Bounds {
    line: usize,
    file: u64,
    transcripts: usize,
    values: usize,
}

const BOUNDS: Bounds = Bounds {
    line: MAX_LINE,
    file: MAX_FILE,
    transcripts: MAX_TRANSCRIPTS,
    values: MAX_VALUES,
};

/// What the lines read so far left of the bounds' transcripts and values.
struct Left {
    transcripts: usize,
    values: usize,
}

impl Left {
    fn of(bounds: &Bounds) -> Self {
        Left {
            transcripts: bounds.transcripts,
            values: bounds.values,
        }
    }
}

fn read_within(
    path: &str,
    reader: impl std::io::BufRead,
    bounds: &Bounds,
) -> Result<Vec<(usize, Transcript)>, TranscriptError> {
    read_budgeted(path, reader, bounds, &mut Left::of(bounds))
}

fn read_budgeted(
    path: &str,
    reader: impl std::io::BufRead,
    bounds: &Bounds,
    left: &mut Left,
) -> Result<Vec<(usize, Transcript)>, TranscriptError> {
    use std::io::{BufRead, Read};
    let too_large = |message: String| TranscriptError::TooLarge {
        path: path.into(),
        message,
    };
    // One byte past each bound tells an input at the bound from one over.
    let mut reader = reader.take(bounds.file + 1);
    let mut out = Vec::new();
    let mut line = Vec::new();
    let mut total = 0u64;
    for line_no in 1usize.. {
        line.clear();
        // A line may end in `\r\n`: two bytes past its text.
        let n = (&mut reader)
            .take(bounds.line as u64 + 2)
            .read_until(b'\n', &mut line)
            .map_err(|source| TranscriptError::Read {
                path: path.into(),
                source,
            })?;
        if n == 0 {
            break;
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.len() > bounds.line {
            return Err(TranscriptError::Parse {
                path: path.into(),
                line: line_no,
                message: format!(
                    "the line is over {} bytes, more than any transcript the recorder writes (the largest record.maxBytes)",
                    bounds.line
                ),
            });
        }
        total += n as u64;
        if total > bounds.file {
            return Err(too_large(format!(
                "the file is over {} bytes, more than the recorder writes to one file (the largest record.maxBytes)",
                bounds.file
            )));
        }
        if text.trim_ascii().is_empty() {
            continue;
        }
        if left.transcripts == 0 {
            return Err(too_large(format!(
                "more than {} transcripts, more than the recorder writes to one file (the largest record.max)",
                bounds.transcripts
            )));
        }
        // The parsed transcripts are all kept: the file's lines together
        // hold at most as many values as one line may.
        let values =
            shape_within(text, MAX_NESTING, bounds.values, left.values).map_err(|message| {
                TranscriptError::Parse {
                    path: path.into(),
                    line: line_no,
                    message,
                }
            })?;
        left.values -= values;
        left.transcripts -= 1;
        out.push((line_no, parse_line(path, line_no, text)?));
    }
    Ok(out)
}

/// One line's transcript.
fn parse_line(path: &str, line: usize, text: &[u8]) -> Result<Transcript, TranscriptError> {
    let parse = |message: String| TranscriptError::Parse {
        path: path.into(),
        line,
        message: quoted(message),
    };
    let value: Value = serde_json::from_slice(text).map_err(|e| parse(e.to_string()))?;
    let version = value["version"].as_u64().unwrap_or(0);
    if version != u64::from(TRANSCRIPT_VERSION) {
        return Err(TranscriptError::Version {
            path: path.into(),
            line,
            version: u32::try_from(version).unwrap_or(u32::MAX),
        });
    }
    let t: Transcript = serde_json::from_value(value).map_err(|e| parse(e.to_string()))?;
    t.check().map_err(parse)?;
    Ok(t)
}

/// Refuses a line whose arrays and objects nest deeper than `depth`, or
/// that holds more than `values` JSON values (keys included), or more than
/// the `left` of them the file's earlier lines left, in one pass over its
/// bytes before anything is parsed; the values it holds. Brackets, commas
/// and colons inside strings do not count; whether it is JSON at all is
/// the parser's business.
fn shape_within(text: &[u8], depth: usize, values: usize, left: usize) -> Result<usize, String> {
    json::check_shape(text, depth, left).map_err(|exceeded| match exceeded {
        json::Exceeded::Values if left < values => format!(
            "with this line the file's lines hold more than {values} JSON values together, more than the recorder writes to one file (one per 16 bytes of the longest line)"
        ),
        json::Exceeded::Values => format!(
            "the line holds more than {values} JSON values, more than any transcript the recorder writes (one per 16 bytes of the longest line)"
        ),
        json::Exceeded::Depth => format!(
            "the line nests arrays and objects more than {depth} levels deep, more than any transcript the recorder writes"
        ),
    })
}

impl Transcript {
    /// Refuses what no recording holds and a replay could not run on.
    fn check(&self) -> Result<(), String> {
        if self.timeout_ms > MAX_TIMEOUT_MS {
            return Err(format!(
                "timeoutMs is {}, more than the largest reconcileTimeout ({MAX_TIMEOUT_MS})",
                self.timeout_ms
            ));
        }
        if self.calls.len() > MAX_CALLS {
            return Err(format!(
                "{} calls, more than the largest limits.hostCalls ({MAX_CALLS})",
                self.calls.len()
            ));
        }
        if self.context.len() > crate::sandbox::MAX_CONTEXT_READS {
            return Err(format!(
                "{} context reads, more than the recorder keeps ({})",
                self.context.len(),
                crate::sandbox::MAX_CONTEXT_READS
            ));
        }
        use crate::sandbox::outbound::{MAX_EXCHANGES, MAX_RECORDED_BODY, MAX_RECORDED_HEADERS};
        if self.http.len() > MAX_EXCHANGES {
            return Err(format!(
                "{} HTTP exchanges, more than the recorder keeps ({MAX_EXCHANGES})",
                self.http.len()
            ));
        }
        for (i, e) in self.http.iter().enumerate() {
            if e.body.len() > MAX_RECORDED_BODY
                || e.request_headers.len() > MAX_RECORDED_HEADERS
                || e.response_headers.len() > MAX_RECORDED_HEADERS
            {
                return Err(format!(
                    "http[{i}] holds more than the recorder keeps ({MAX_RECORDED_BODY} body bytes, {MAX_RECORDED_HEADERS} headers each way)"
                ));
            }
        }
        Ok(())
    }
}

/// `message` as one line of at most [`MAX_QUOTED`] bytes (plus a marker),
/// control characters escaped.
fn quoted(message: String) -> String {
    let mut out = String::new();
    for c in message.chars() {
        if out.len() >= MAX_QUOTED {
            out.push_str(&format!("… ({} bytes in all)", message.len()));
            return out;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod tests;
