//! What one call's outbound requests share with the futures that send
//! them: the deadline, the count, and the first refusal.

use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use wasmtime_wasi_http::Error;

use super::secret::Redactor;
use super::tape::HttpTape;
use super::{DenyReason, Refusal};
use crate::control::metrics::{Metrics, Version, current_version};

/// What one call's requests share, with the futures that send them.
pub(crate) struct HttpCall {
    pub(crate) plugin: Arc<str>,
    pub(crate) metrics: Arc<Metrics>,
    /// The plugin version the call runs as (the futures run in tasks of
    /// their own, outside the reconcile's task-local version).
    pub(crate) version: Version,
    pub(crate) deadline: Instant,
    /// Requests the guest made this call, refused or not.
    pub(super) requests: AtomicU32,
    /// The first refusal of this call.
    pub(super) refused: Mutex<Option<Refusal>>,
    /// Records this call's exchanges, or answers them from a recording.
    pub(super) tape: Option<Arc<HttpTape>>,
    /// The secrets this call revealed, by name: redacted from what the
    /// guest hands the host (its log lines and its error).
    pub(super) revealed: Mutex<Vec<(String, Vec<u8>)>>,
    /// The redactor of `revealed`, built once per set of values rather
    /// than for each line the guest writes.
    redactor: Mutex<Option<Arc<Redactor>>>,
    /// The call is an admission review: only GET and HEAD may be sent, as
    /// its webhook is registered without side effects.
    pub(super) reviewing: bool,
}

impl HttpCall {
    /// A call of `plugin` ending at `deadline`: no requests yet, no refusal.
    pub(crate) fn new(
        plugin: Arc<str>,
        metrics: Arc<Metrics>,
        deadline: Instant,
        tape: Option<Arc<HttpTape>>,
        reviewing: bool,
    ) -> Self {
        Self {
            plugin,
            metrics,
            version: current_version(),
            deadline,
            requests: AtomicU32::new(0),
            refused: Mutex::new(None),
            tape,
            revealed: Mutex::default(),
            redactor: Mutex::default(),
            reviewing,
        }
    }

    /// Notes that secret `name` was revealed to the guest as `value`.
    pub(crate) fn revealed(&self, name: &str, value: &[u8]) {
        let mut revealed = self.revealed.lock().unwrap_or_else(|e| e.into_inner());
        if !value.is_empty() && !revealed.iter().any(|(n, _)| n == name) {
            revealed.push((name.to_string(), value.to_vec()));
            *self.redactor.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// Takes on the secrets an earlier call of the same instance revealed.
    pub(super) fn inherit_revealed(&self, earlier: &HttpCall) {
        let theirs = earlier
            .revealed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for (name, value) in theirs {
            self.revealed(&name, &value);
        }
    }

    /// `text` with every value this call revealed as `<secret:NAME>`.
    pub(crate) fn redact(&self, text: &str) -> String {
        let revealed = self.revealed.lock().unwrap_or_else(|e| e.into_inner());
        if revealed.is_empty() {
            return text.to_string();
        }
        let mut cached = self.redactor.lock().unwrap_or_else(|e| e.into_inner());
        let redactor = cached.get_or_insert_with(|| Arc::new(Redactor::new(revealed.clone())));
        String::from_utf8(redactor.redact(text.as_bytes()))
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// Keeps (the first) refusal, counts it, and logs it if it is the
    /// call's first (a guest looping on refused requests must not flood
    /// the host's log); returns the error the guest's request fails with.
    pub(crate) fn refuse(&self, refusal: Refusal) -> Error {
        // A ceiling is counted in `…limit_exceeded_total` with the call
        // it fails (`Sandbox::call`).
        self.metrics
            .count_http_denied(&self.plugin, refusal.reason.as_str());
        let error = match refusal.reason {
            DenyReason::RequestBytes => Error::HttpRequestBodySize(None),
            DenyReason::ResponseBytes => Error::HttpResponseBodySize(None),
            DenyReason::Connections => Error::ConnectionLimitReached,
            DenyReason::Deadline => Error::ConnectionTimeout,
            _ => Error::HttpRequestDenied,
        };
        let mut kept = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        if kept.is_none() {
            tracing::warn!(plugin = %self.plugin, reason = refusal.reason.as_str(), "{refusal}");
            *kept = Some(refusal);
        }
        error
    }
}
