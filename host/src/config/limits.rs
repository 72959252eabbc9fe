//! `limits` of a plugin: what one reconcile may consume.

use serde::Deserialize;

use super::error::FieldProblem;
use super::units::{count, quantity, rate};
use crate::sandbox::Limits;
use crate::sandbox::hostapi::ApiLimits;
use crate::sandbox::outbound::OutboundLimits;

/// A plugin's ceilings (docs/SECURITY.md lists them with their defaults):
/// the sandbox's [`Limits`] and the host API's [`ApiLimits`], whose
/// defaults and ranges they take.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LimitsConfig {
    /// Bytes of output (stdout, stderr, log messages) kept per reconcile.
    #[serde(deserialize_with = "quantity")]
    pub output_bytes: u64,
    /// Bytes of one output line or log message kept.
    #[serde(deserialize_with = "quantity")]
    pub output_line: u64,
    /// `log` calls per reconcile.
    pub log_calls: u32,
    /// `kube` calls per reconcile; one more fails the reconcile.
    pub host_calls: u32,
    /// Bytes of one `list` result.
    #[serde(deserialize_with = "quantity")]
    pub list_bytes: u64,
    /// API requests per second (default: an equal share of
    /// `runtime.apiQps` for a config plugin, `runtime.apiQps` for an
    /// object's, which `pluginsFrom.maxApiQps` bounds).
    pub api_qps: Option<f64>,
    /// API requests allowed at once above `apiQps` (default: 2 × apiQps).
    pub api_burst: Option<u32>,
    /// Core instances one instance of the component may create.
    pub instances: u32,
    /// Linear memories one instance may define (`memoryLimit` is their sum).
    pub memories: u32,
    /// Tables one instance may define.
    pub tables: u32,
    /// Outbound HTTP requests per reconcile.
    pub http_requests: u32,
    /// Bytes of one outbound request's body.
    #[serde(deserialize_with = "quantity")]
    pub http_request_bytes: u64,
    /// Bytes of one outbound response's body.
    #[serde(deserialize_with = "quantity")]
    pub http_response_bytes: u64,
    /// Outbound connections the plugin's reconciles hold at once.
    pub http_connections: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let sandbox = Limits::default();
        let http = OutboundLimits::default();
        Self {
            output_bytes: sandbox.output_bytes as u64,
            output_line: sandbox.output_line as u64,
            log_calls: sandbox.log_calls,
            host_calls: sandbox.host_calls,
            list_bytes: ApiLimits::default().list_bytes as u64,
            api_qps: None,
            api_burst: None,
            instances: sandbox.instances as u32,
            memories: sandbox.memories as u32,
            tables: sandbox.tables as u32,
            http_requests: http.requests,
            http_request_bytes: http.request_bytes,
            http_response_bytes: http.response_bytes,
            http_connections: http.connections,
        }
    }
}

impl LimitsConfig {
    /// Checks a plugin's `limits` (paths relative to the plugin).
    pub(super) fn check(&self) -> Result<(), FieldProblem> {
        let check = |field: &str, r: Result<(), String>| r.map_err(|m| FieldProblem::new(field, m));
        check(
            "limits.outputBytes",
            count(self.output_bytes, Limits::OUTPUT_BYTES),
        )?;
        check(
            "limits.outputLine",
            count(self.output_line, Limits::OUTPUT_LINE),
        )?;
        check(
            "limits.logCalls",
            count(u64::from(self.log_calls), Limits::LOG_CALLS),
        )?;
        check(
            "limits.hostCalls",
            count(u64::from(self.host_calls), Limits::HOST_CALLS),
        )?;
        check(
            "limits.listBytes",
            count(self.list_bytes, (1 << 10)..=(1 << 30)),
        )?;
        if let Some(qps) = self.api_qps {
            check("limits.apiQps", rate(qps, 1e5))?;
        }
        if let Some(burst) = self.api_burst {
            check("limits.apiBurst", count(u64::from(burst), 1..=100_000))?;
        }
        check(
            "limits.instances",
            count(u64::from(self.instances), Limits::INSTANCES),
        )?;
        check(
            "limits.memories",
            count(u64::from(self.memories), Limits::MEMORIES),
        )?;
        check(
            "limits.tables",
            count(u64::from(self.tables), Limits::TABLES),
        )?;
        check(
            "limits.httpRequests",
            count(u64::from(self.http_requests), OutboundLimits::REQUESTS),
        )?;
        check(
            "limits.httpRequestBytes",
            count(self.http_request_bytes, OutboundLimits::BODY_BYTES),
        )?;
        check(
            "limits.httpResponseBytes",
            count(self.http_response_bytes, OutboundLimits::BODY_BYTES),
        )?;
        check(
            "limits.httpConnections",
            count(
                u64::from(self.http_connections),
                OutboundLimits::CONNECTIONS,
            ),
        )
    }
}
