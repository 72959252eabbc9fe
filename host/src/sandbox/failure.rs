//! How a guest call ended when it did not return: one classification for
//! `metadata` and `reconcile` alike.

use wasmtime::Trap;
use wasmtime::component::ResourceTableError;

use super::limits::Ceiling;
use crate::control::reconcile::{ReconcileError, TrapKind};

/// Raised from the epoch callback when the host cancels a running guest.
#[derive(Debug, thiserror::Error)]
#[error("call cancelled by the host")]
pub(crate) struct Cancelled;

/// Raised from a host call when the guest exceeds a per-call budget.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct OverBudget {
    pub(crate) ceiling: Ceiling,
    pub(crate) message: String,
}

/// Why a guest call produced no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallFailure {
    /// The guest trapped, or the host stopped it at a limit.
    #[error("guest trapped ({kind}): {message}")]
    Trap {
        kind: TrapKind,
        /// The ceiling it ran into, for [`TrapKind::Memory`] and
        /// [`TrapKind::Limit`] traps.
        ceiling: Option<Ceiling>,
        message: String,
    },
    /// The host cancelled the call (shutdown, unload) and the guest did not
    /// return within the cancellation grace.
    #[error("call cancelled by the host")]
    Cancelled,
    /// No instance slot was free in the engine's pool: back-pressure, retried.
    #[error("the instance pool is exhausted: {0}")]
    PoolExhausted(String),
}

impl CallFailure {
    /// Classifies an error returned by instantiation or a guest export.
    /// `refused` is the ceiling the store's limiter refused during the call:
    /// wasmtime has no trap code for a refused grow, and the guest then
    /// aborts (Rust prints "memory allocation failed" and hits `unreachable`).
    pub(crate) fn classify(error: &wasmtime::Error, refused: Option<Ceiling>) -> Self {
        let message = format!("{error:#}");
        if error.is::<Cancelled>() {
            return CallFailure::Cancelled;
        }
        if error.is::<wasmtime::PoolConcurrencyLimitError>() {
            return CallFailure::PoolExhausted(message);
        }
        // A WASI call that would hold one resource more than the store's
        // table allows (`store.rs`, MAX_RESOURCES) fails with this.
        if matches!(
            error.downcast_ref::<ResourceTableError>(),
            Some(ResourceTableError::Full)
        ) {
            return CallFailure::Trap {
                kind: TrapKind::Limit,
                ceiling: Some(Ceiling::WasiResources),
                message,
            };
        }
        if let Some(over) = error.downcast_ref::<OverBudget>() {
            return CallFailure::Trap {
                kind: TrapKind::Limit,
                ceiling: Some(over.ceiling),
                message,
            };
        }
        if let Some(ceiling) = refused {
            let kind = match ceiling {
                Ceiling::Memory => TrapKind::Memory,
                _ => TrapKind::Limit,
            };
            return CallFailure::Trap {
                kind,
                ceiling: Some(ceiling),
                message,
            };
        }
        if let Some(ceiling) = count_limit(&message) {
            // wasmtime's words name the count, not the setting that bounds it.
            return CallFailure::Trap {
                kind: TrapKind::Limit,
                ceiling: Some(ceiling),
                message: format!(
                    "{message}: more than the plugin's limits.{} allows",
                    ceiling.as_str()
                ),
            };
        }
        let kind = match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => TrapKind::Deadline,
            Some(Trap::OutOfFuel) => TrapKind::Fuel,
            Some(Trap::StackOverflow) => TrapKind::Stack,
            Some(Trap::UnreachableCodeReached) => TrapKind::Panic,
            Some(Trap::AllocationTooLarge) => TrapKind::Memory,
            _ => TrapKind::Other,
        };
        CallFailure::Trap {
            kind,
            ceiling: None,
            message,
        }
    }

    /// A deadline trap for a guest that did not return from a host call.
    pub(crate) fn backstop(message: String) -> Self {
        CallFailure::Trap {
            kind: TrapKind::Deadline,
            ceiling: None,
            message,
        }
    }

    /// The trap kind, if the guest trapped.
    pub fn trap_kind(&self) -> Option<TrapKind> {
        match self {
            CallFailure::Trap { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

/// wasmtime refuses a store's count limits (`ResourceLimiter::instances`,
/// `memories`, `tables`) with "resource limit exceeded: {what} count too
/// high at {n}", not with a typed error.
fn count_limit(message: &str) -> Option<Ceiling> {
    let (_, rest) = message.split_once("resource limit exceeded: ")?;
    if rest.starts_with("instance count") {
        Some(Ceiling::Instances)
    } else if rest.starts_with("memory count") {
        Some(Ceiling::Memories)
    } else if rest.starts_with("table count") {
        Some(Ceiling::Tables)
    } else {
        None
    }
}

impl From<CallFailure> for ReconcileError {
    fn from(f: CallFailure) -> Self {
        match f {
            CallFailure::Trap { kind, message, .. } => ReconcileError::Trap { kind, message },
            CallFailure::Cancelled => ReconcileError::Cancelled,
            CallFailure::PoolExhausted(m) => ReconcileError::Host(m),
        }
    }
}
