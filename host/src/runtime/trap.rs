//! Telling guest failures apart: which limit stopped a reconcile.

use std::fmt;

use wasmtime::Trap;

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
    /// Anything else (out-of-bounds access, bad cast, a host error).
    Other,
}

impl TrapKind {
    pub const ALL: [TrapKind; 6] = [
        TrapKind::Deadline,
        TrapKind::Fuel,
        TrapKind::Memory,
        TrapKind::Stack,
        TrapKind::Panic,
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
            TrapKind::Other => "other",
        }
    }

    /// Classifies an error returned by a guest call. `memory_denied` tells
    /// whether the store's limiter refused a grow during the call: wasmtime
    /// has no trap code for it, and the guest then aborts (Rust prints
    /// "memory allocation failed" and hits `unreachable`).
    pub fn classify(error: &wasmtime::Error, memory_denied: bool) -> TrapKind {
        if memory_denied {
            return TrapKind::Memory;
        }
        match error.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => TrapKind::Deadline,
            Some(Trap::OutOfFuel) => TrapKind::Fuel,
            Some(Trap::StackOverflow) => TrapKind::Stack,
            Some(Trap::UnreachableCodeReached) => TrapKind::Panic,
            Some(Trap::AllocationTooLarge) => TrapKind::Memory,
            _ => TrapKind::Other,
        }
    }
}

impl fmt::Display for TrapKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
