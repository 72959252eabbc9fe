//! How a guest call ended when it did not return: one classification for
//! `metadata` and `reconcile` alike.

use std::fmt::{self, Write as _};

use wasmtime::Trap;
use wasmtime::component::ResourceTableError;

use super::limits::Ceiling;
use super::output::MAX_ERROR_MESSAGE;
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
    /// The kernel refused, for a moment, what a new instance needs (`EBUSY`
    /// or `EAGAIN`: sealing a memory image while something else holds its
    /// pages, as the kernel's page monitoring or reclaim may under memory
    /// pressure). Nothing of the guest ran; retried.
    #[error("the kernel refused the instance for a moment: {0}")]
    HostBusy(String),
}

impl CallFailure {
    /// Classifies an error returned by instantiation or a guest export.
    /// `refused` is the ceiling the store's limiter refused during the call:
    /// wasmtime has no trap code for a refused grow, and the guest then
    /// aborts (Rust prints "memory allocation failed" and hits `unreachable`).
    pub(crate) fn classify(error: &wasmtime::Error, refused: Option<Ceiling>) -> Self {
        let message = trap_message(error);
        if error.is::<Cancelled>() {
            return CallFailure::Cancelled;
        }
        if error.is::<wasmtime::PoolConcurrencyLimitError>() {
            return CallFailure::PoolExhausted(message);
        }
        if kernel_busy(error) {
            return CallFailure::HostBusy(message);
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

/// What ends a trap's message that was cut to [`MAX_ERROR_MESSAGE`].
pub(crate) const CUT: &str = " … [wasmctrl: the rest of this message was dropped]";

/// `error` with its causes, cut to [`MAX_ERROR_MESSAGE`] bytes while it is
/// written: a trap's wasm backtrace has a line per frame, with the guest's
/// own module and function names (up to 100,000 bytes each), and a stack
/// overflow has tens of thousands of frames. Written whole, that message
/// could take gigabytes.
fn trap_message(error: &wasmtime::Error) -> String {
    /// Keeps the first `MAX_ERROR_MESSAGE` bytes, then fails every write,
    /// so the formatter stops.
    struct Capped(String, bool);
    impl fmt::Write for Capped {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let room = MAX_ERROR_MESSAGE - self.0.len();
            if s.len() <= room {
                self.0.push_str(s);
                return Ok(());
            }
            let mut end = room;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            self.0.push_str(&s[..end]);
            self.1 = true;
            Err(fmt::Error)
        }
    }
    let mut capped = Capped(String::new(), false);
    if write!(capped, "{error:#}").is_err() && capped.1 {
        capped.0.push_str(CUT);
    }
    capped.0
}

/// Whether `error` comes from a system call the kernel refused for now
/// (`EBUSY`, `EAGAIN`), which the same call may pass a moment later.
fn kernel_busy(error: &wasmtime::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
            .is_some_and(|code| code == libc::EBUSY || code == libc::EAGAIN)
    })
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
            CallFailure::PoolExhausted(m) | CallFailure::HostBusy(m) => ReconcileError::Host(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_system_call_the_kernel_refused_for_now_is_host_busy() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot add seals to the memfd")]
        struct Seals(#[source] std::io::Error);
        let busy = wasmtime::Error::new(Seals(std::io::Error::from_raw_os_error(libc::EBUSY)))
            .context("creating the memory image");
        assert!(matches!(
            CallFailure::classify(&busy, None),
            CallFailure::HostBusy(m) if m.contains("cannot add seals")
        ));
        let denied = wasmtime::Error::new(Seals(std::io::Error::from_raw_os_error(libc::EPERM)));
        assert!(matches!(
            CallFailure::classify(&denied, None),
            CallFailure::Trap {
                kind: TrapKind::Other,
                ..
            }
        ));
    }

    #[test]
    fn a_trap_message_is_cut_while_it_is_written() {
        // Infinite recursion in a function with a 10,000-byte name: a stack
        // overflow whose backtrace names it once per frame.
        let name = "f".repeat(10_000);
        let wat = format!(r#"(module (func ${name} (export "run") (call ${name})))"#);
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, wat::parse_str(&wat).unwrap()).unwrap();
        let mut store = wasmtime::Store::new(&engine, ());
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let run = instance
            .get_typed_func::<(), ()>(&mut store, "run")
            .unwrap();
        let error = run.call(&mut store, ()).unwrap_err();
        let failure = CallFailure::classify(&error, None);
        let CallFailure::Trap { kind, message, .. } = failure else {
            panic!("{failure:?}");
        };
        assert_eq!(kind, TrapKind::Stack);
        assert!(
            message.len() <= MAX_ERROR_MESSAGE + CUT.len(),
            "{}",
            message.len()
        );
        assert!(message.ends_with(CUT));
        assert!(
            message.contains(&"f".repeat(1_000)),
            "the first frame is kept"
        );
    }
}
