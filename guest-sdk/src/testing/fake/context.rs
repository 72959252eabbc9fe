//! The `context` import: deadline, cancellation, attempt, settings and
//! logging, answered from the cluster's state (logs go to stderr).

pub use crate::bindings::wasmctrl::reconciler::types::LogLevel;

use crate::testing::state::with;

pub fn deadline_remaining_ms() -> u64 {
    10_000
}

pub fn cancelled() -> bool {
    false
}

pub fn attempt() -> u32 {
    with(|s| s.attempt)
}

pub fn settings() -> String {
    with(|s| {
        if s.settings.is_empty() {
            "{}".to_string()
        } else {
            s.settings.clone()
        }
    })
}

pub fn log(level: LogLevel, message: &str, fields: &[(String, String)]) {
    eprintln!("[{level:?}] {message} {fields:?}");
}

/// The fake prints every level.
pub fn log_enabled(_level: LogLevel) -> bool {
    true
}
