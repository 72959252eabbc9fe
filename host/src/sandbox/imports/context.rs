//! `wasmctrl:reconciler/context`: deadline, cancellation, attempt, settings
//! and logging, on the call's context and output budget.

use std::time::Instant;

use wasmtime::component::HasData;

use crate::sandbox::outbound::OutboundHooks;
use crate::sandbox::output::OutputSink;
use crate::sandbox::store::{Budget, CallContext, StoreState};
use crate::sandbox::wit::wasmctrl::reconciler::{context, types};

/// Fields of one `log` call kept; the rest are dropped.
const MAX_LOG_FIELDS: usize = 32;
/// Bytes of a field's key and value kept.
const MAX_FIELD_KEY: usize = 128;
const MAX_FIELD_VALUE: usize = 1024;

/// The `context` interface's view of a store.
pub(super) struct Context;

impl HasData for Context {
    type Data<'a> = ContextView<'a>;
}

pub(super) struct ContextView<'a> {
    call: &'a CallContext,
    plugin: &'a str,
    settings: &'a str,
    output: &'a OutputSink,
    budget: &'a mut Budget,
    http: &'a OutboundHooks,
}

pub(super) fn view(s: &mut StoreState) -> ContextView<'_> {
    ContextView {
        call: &s.call.context,
        plugin: &s.plugin,
        settings: &s.settings,
        output: &s.output,
        budget: &mut s.budget,
        http: &s.http,
    }
}

impl context::Host for ContextView<'_> {
    async fn deadline_remaining_ms(&mut self) -> wasmtime::Result<u64> {
        let left = self.call.deadline.saturating_duration_since(Instant::now());
        let left = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
        Ok(match &self.call.tape {
            Some(tape) => tape.deadline_remaining_ms(left),
            None => left,
        })
    }

    async fn cancelled(&mut self) -> wasmtime::Result<bool> {
        let cancelled = self.call.cancel.is_cancelled();
        Ok(match &self.call.tape {
            Some(tape) => tape.cancelled(cancelled),
            None => cancelled,
        })
    }

    async fn attempt(&mut self) -> wasmtime::Result<u32> {
        Ok(self.call.attempt)
    }

    async fn settings(&mut self) -> wasmtime::Result<String> {
        Ok(self.settings.to_string())
    }

    async fn log(
        &mut self,
        level: types::LogLevel,
        message: String,
        fields: Vec<(String, String)>,
    ) -> wasmtime::Result<()> {
        let plugin = self.plugin;
        if self.budget.log_calls >= self.budget.log_call_limit {
            if !self.budget.log_exhausted {
                self.budget.log_exhausted = true;
                tracing::warn!(target: "wasmctrl::guest", plugin,
                    "[wasmctrl: the limit of {} log calls per call is reached; further log calls of this call are dropped]",
                    self.budget.log_call_limit);
            }
            return Ok(());
        }
        self.budget.log_calls += 1;
        // A secret the guest was revealed never reaches the host's log.
        let message = self.http.redact(&message);
        let fields: Vec<(String, String)> = fields
            .into_iter()
            .map(|(k, v)| (self.http.redact(&k), self.http.redact(&v)))
            .collect();
        let fields = format_fields(&fields);
        let Some((message, cut)) = self.output.admit_log(&message) else {
            return Ok(());
        };
        let more = if cut > 0 {
            format!("… [wasmctrl: {cut} more bytes of this message dropped]")
        } else {
            String::new()
        };
        match level {
            types::LogLevel::Trace => {
                tracing::trace!(target: "wasmctrl::guest", plugin, fields, "{message}{more}")
            }
            types::LogLevel::Debug => {
                tracing::debug!(target: "wasmctrl::guest", plugin, fields, "{message}{more}")
            }
            types::LogLevel::Info => {
                tracing::info!(target: "wasmctrl::guest", plugin, fields, "{message}{more}")
            }
            types::LogLevel::Warn => {
                tracing::warn!(target: "wasmctrl::guest", plugin, fields, "{message}{more}")
            }
            types::LogLevel::Error => {
                tracing::error!(target: "wasmctrl::guest", plugin, fields, "{message}{more}")
            }
        }
        Ok(())
    }

    async fn log_enabled(&mut self, level: types::LogLevel) -> wasmtime::Result<bool> {
        if self.budget.log_calls >= self.budget.log_call_limit {
            return Ok(false);
        }
        // The same target and levels `log` uses, so the answer is the
        // subscriber's filter for exactly those events.
        let enabled = match level {
            types::LogLevel::Trace => {
                tracing::enabled!(target: "wasmctrl::guest", tracing::Level::TRACE)
            }
            types::LogLevel::Debug => {
                tracing::enabled!(target: "wasmctrl::guest", tracing::Level::DEBUG)
            }
            types::LogLevel::Info => {
                tracing::enabled!(target: "wasmctrl::guest", tracing::Level::INFO)
            }
            types::LogLevel::Warn => {
                tracing::enabled!(target: "wasmctrl::guest", tracing::Level::WARN)
            }
            types::LogLevel::Error => {
                tracing::enabled!(target: "wasmctrl::guest", tracing::Level::ERROR)
            }
        };
        Ok(match &self.call.tape {
            Some(tape) => tape.log_enabled(level_name(level), enabled),
            None => enabled,
        })
    }
}

fn level_name(level: types::LogLevel) -> &'static str {
    match level {
        types::LogLevel::Trace => "trace",
        types::LogLevel::Debug => "debug",
        types::LogLevel::Info => "info",
        types::LogLevel::Warn => "warn",
        types::LogLevel::Error => "error",
    }
}

/// `k="v" k2="v2"`, bounded in count and size.
fn format_fields(fields: &[(String, String)]) -> String {
    let mut out = String::new();
    for (k, v) in fields.iter().take(MAX_LOG_FIELDS) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&format!(
            "{}={:?}",
            prefix(k, MAX_FIELD_KEY),
            prefix(v, MAX_FIELD_VALUE)
        ));
    }
    if fields.len() > MAX_LOG_FIELDS {
        out.push_str(&format!(
            " [{} more fields dropped]",
            fields.len() - MAX_LOG_FIELDS
        ));
    }
    out
}

/// The longest prefix of `s` of at most `max` bytes, on a char boundary.
fn prefix(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
