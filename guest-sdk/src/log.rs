//! Structured logging into the host's `tracing`, inside the reconcile's span.
//!
//! Use the macros: `wasmctrl_sdk::info!("created {name}")`.

pub use crate::bindings::wasmctrl::reconciler::types::LogLevel as Level;
use crate::host::context as host;

/// Log `message` with `fields` (key/value pairs shown as structured fields).
pub fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
    let fields: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    host::log(level, message, &fields);
}

/// Whether a message at `level` would be kept now: the host's log filter
/// lets it through and this reconcile's log budget is not used up. The
/// macros check it before formatting, so a disabled `debug!` costs one host
/// call and no allocation. Needs a host of WIT 0.1.1 or later.
pub fn enabled(level: Level) -> bool {
    host::log_enabled(level)
}

#[doc(hidden)]
#[macro_export]
macro_rules! __log {
    ($level:ident, $($arg:tt)+) => {
        if $crate::log::enabled($crate::log::Level::$level) {
            $crate::log::log($crate::log::Level::$level, &::std::format!($($arg)+), &[])
        }
    };
}

/// Log at trace level.
#[macro_export]
macro_rules! trace { ($($arg:tt)+) => { $crate::__log!(Trace, $($arg)+) }; }
/// Log at debug level.
#[macro_export]
macro_rules! debug { ($($arg:tt)+) => { $crate::__log!(Debug, $($arg)+) }; }
/// Log at info level.
#[macro_export]
macro_rules! info { ($($arg:tt)+) => { $crate::__log!(Info, $($arg)+) }; }
/// Log at warn level.
#[macro_export]
macro_rules! warn { ($($arg:tt)+) => { $crate::__log!(Warn, $($arg)+) }; }
/// Log at error level.
#[macro_export]
macro_rules! error { ($($arg:tt)+) => { $crate::__log!(Error, $($arg)+) }; }
