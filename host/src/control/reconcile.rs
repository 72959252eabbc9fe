//! The reconcile contract between the controller loop and a reconciler
//! (controller-runtime's `Request`, `Result` and `Reconciler`).

use std::fmt;
use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// The key a reconcile is asked for (controller-runtime's `Request`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// None for cluster-scoped objects.
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectKey {
    pub fn namespaced(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    pub fn cluster(name: impl Into<String>) -> Self {
        Self {
            namespace: None,
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// What to do with a key after a successful reconcile (controller-runtime's
/// `Result`).
///
/// # Requeue-after wins
/// A non-zero `requeue_after` re-adds the key after that delay and resets its
/// backoff, whatever `requeue` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Action {
    pub requeue: bool,
    pub requeue_after: Option<Duration>,
}

impl Action {
    /// Done: forget the key's backoff and wait for the next event.
    pub fn done() -> Self {
        Self::default()
    }

    /// Re-add the key with per-key backoff.
    pub fn requeue() -> Self {
        Self {
            requeue: true,
            requeue_after: None,
        }
    }

    /// Re-add the key after `delay`.
    pub fn requeue_after(delay: Duration) -> Self {
        Self {
            requeue: false,
            requeue_after: Some(delay),
        }
    }
}

/// One reconcile call: the key and its context.
#[derive(Debug, Clone)]
pub struct ReconcileRequest {
    pub key: ObjectKey,
    /// Retries of this key since its last success (0 on the first attempt).
    pub attempt: u32,
    /// The context timeout: the reconciler must return within it.
    pub timeout: Duration,
    /// Cancelled when the host stops this reconcile (shutdown, unload).
    pub cancel: CancellationToken,
}

/// Why a reconcile failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReconcileError {
    /// The reconciler reported a failure worth retrying.
    #[error("transient error: {0}")]
    Transient(String),
    /// The reconciler reported a failure retrying cannot fix.
    #[error("permanent error: {0}")]
    Permanent(String),
    /// The guest trapped (deadline, fuel, memory, stack, panic, other).
    #[error("guest trapped ({kind}): {message}")]
    Trap { kind: TrapKind, message: String },
    /// The host cancelled the reconcile (shutdown or unload).
    #[error("reconcile cancelled")]
    Cancelled,
    /// The host could not run the reconcile (instance pool exhausted, …).
    #[error("host error: {0}")]
    Host(String),
}

impl ReconcileError {
    /// Permanent errors are not retried.
    pub fn is_permanent(&self) -> bool {
        matches!(self, ReconcileError::Permanent(_))
    }

    /// The `result` label of `controller_runtime_reconcile_total`-style metrics.
    pub fn trap_kind(&self) -> Option<TrapKind> {
        match self {
            ReconcileError::Trap { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

/// Anything the controller loop can call for a key: a wasm plugin, or a
/// native Rust reconciler (tests, benchmarks).
pub trait Reconcile: Send + Sync + 'static {
    /// Reconciles `request.key`. Must return within `request.timeout`.
    fn reconcile(
        &self,
        request: ReconcileRequest,
    ) -> impl Future<Output = Result<Action, ReconcileError>> + Send;

    /// Whether the reconcile of `key` may be skipped because nothing it
    /// depends on changed since its last successful reconcile (the plugin's
    /// `skipUnchanged`); checked before each first attempt, bounded by
    /// `timeout`. Default: never.
    fn unchanged(&self, key: &ObjectKey, timeout: Duration) -> impl Future<Output = bool> + Send {
        let _ = (key, timeout);
        std::future::ready(false)
    }
}

impl<R: Reconcile> Reconcile for std::sync::Arc<R> {
    fn reconcile(
        &self,
        request: ReconcileRequest,
    ) -> impl Future<Output = Result<Action, ReconcileError>> + Send {
        (**self).reconcile(request)
    }

    fn unchanged(&self, key: &ObjectKey, timeout: Duration) -> impl Future<Output = bool> + Send {
        (**self).unchanged(key, timeout)
    }
}

/// Why a guest call stopped abnormally. Used for the
/// `wasmctrl_plugin_traps_total{reason}` metric and the controller's
/// timeout/panic counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TrapKind {
    /// The reconcile's deadline passed while the guest ran (epoch interruption).
    Deadline,
    /// The guest used its whole fuel budget.
    Fuel,
    /// The guest tried to grow memory (or tables) past its limit.
    Memory,
    /// The guest overflowed its stack.
    Stack,
    /// The guest aborted (`unreachable`, a Rust panic).
    Panic,
    /// The guest went past one of its plugin's ceilings (host calls,
    /// instances, tables, …); the message names which.
    Limit,
    /// Anything else (out-of-bounds access, bad cast, a host error).
    Other,
}

impl TrapKind {
    pub const ALL: [TrapKind; 7] = [
        TrapKind::Deadline,
        TrapKind::Fuel,
        TrapKind::Memory,
        TrapKind::Stack,
        TrapKind::Panic,
        TrapKind::Limit,
        TrapKind::Other,
    ];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            TrapKind::Deadline => "deadline",
            TrapKind::Fuel => "fuel",
            TrapKind::Memory => "memory",
            TrapKind::Stack => "stack",
            TrapKind::Panic => "panic",
            TrapKind::Limit => "limit",
            TrapKind::Other => "other",
        }
    }
}

impl fmt::Display for TrapKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
