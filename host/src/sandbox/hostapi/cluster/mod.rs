//! The `kube` imports served by a real API server (a cluster or the
//! embedded one).
//!
//! # One order for every call
//! 1. the body's size and nesting are checked before anything reads it,
//!    and every string against Kubernetes syntax (`check.rs`);
//! 2. the kind is resolved through discovery;
//! 3. the plugin's grant is checked against the *resolved* group and
//!    resource (`<plural>/status` for status writes — the only subresource
//!    the WIT names);
//! 4. the call is sent (`send.rs`): reads of watched kinds are served from
//!    the shared cache, everything else goes to the API server under the
//!    plugin's API rate limit and the leader's fence (`throttle.rs`), with
//!    the guest's body checked and passed on as written (`payload.rs`);
//! 5. it is counted in `wasmctrl_hostapi_calls_total` (`counters.rs`).
//!
//! A refusal at 1–3 never reaches the API server. Events take the same
//! steps with checks of their own (`events.rs`).

mod check;
mod counters;
mod events;
mod payload;
mod send;
mod throttle;

use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};

use super::api::{KubeApi, KubeResponse};
use super::error::ApiError;
use super::grant::Grant;
use super::request::KubeRequest;
use crate::control::discovery::Resolver;
use crate::control::informer::SharedCache;
use crate::control::leader::Fence;
use crate::control::metrics::Metrics;
use crate::control::workqueue::ratelimit::BucketRateLimiter;
use crate::meta::syntax::Invalid;
use counters::{CallCounters, code};

/// The `resource` label of a call refused before its kind was resolved:
/// guest strings never become metric labels.
const UNRESOLVED: &str = "<unresolved>";

/// Per-plugin ceilings of the host API.
#[derive(Debug, Clone)]
pub struct ApiLimits {
    /// Bytes of one `list` result (all objects' JSON together).
    pub list_bytes: usize,
    /// Requests per second to the API server (cache reads are free).
    pub qps: f64,
    /// Requests that may be made at once above `qps`.
    pub burst: u32,
    /// The host's API budget (`runtime.apiQps`) this plugin draws from
    /// besides its own `qps`, together with the other plugins sharing it:
    /// a request waits for both. None: its own bucket only.
    pub shared: Option<Arc<BucketRateLimiter>>,
    /// Events the plugin may record in [`EVENT_WINDOW`], at an even pace
    /// (a token bucket of this size refilled over the window).
    pub events: u32,
}

/// How long kube-rs's event recorder keeps an event to count its repeats,
/// and so the window [`ApiLimits::events`] counts over.
pub const EVENT_WINDOW: std::time::Duration = std::time::Duration::from_secs(360);

/// Events a plugin may record in [`EVENT_WINDOW`] by default: the recorder
/// keeps each new one for the window (about 1.5 KiB with its note), so this
/// bounds what a plugin holds there at about 1.5 MiB, where `apiQps` alone
/// allowed 18,000 of them at the default 50/s.
pub const DEFAULT_EVENTS_PER_WINDOW: u32 = 1024;

impl Default for ApiLimits {
    fn default() -> Self {
        Self {
            list_bytes: 16 << 20,
            qps: 50.0,
            burst: 100,
            shared: None,
            events: DEFAULT_EVENTS_PER_WINDOW,
        }
    }
}

/// What every plugin's [`ClusterApi`] shares: the client plugins' requests
/// go through, discovery, the informer cache, metrics and the leader fence.
#[derive(Clone)]
pub struct ClusterContext {
    pub client: Client,
    pub resolver: Arc<Resolver>,
    pub cache: Arc<SharedCache>,
    pub metrics: Arc<Metrics>,
    pub fence: Fence,
}

/// One plugin's view of the API server.
pub struct ClusterApi {
    plugin: String,
    client: Client,
    resolver: Arc<Resolver>,
    cache: Arc<SharedCache>,
    grant: Grant,
    metrics: Arc<Metrics>,
    recorder: Recorder,
    limits: ApiLimits,
    /// The plugin's API rate limit: a token bucket with reservations.
    bucket: BucketRateLimiter,
    /// The events it may record: [`ApiLimits::events`] per
    /// [`EVENT_WINDOW`].
    events: BucketRateLimiter,
    /// Open while this host is the leader (always, without election).
    fence: Fence,
    counters: CallCounters,
}

impl ClusterApi {
    pub fn new(plugin: &str, context: &ClusterContext, grant: Grant, limits: ApiLimits) -> Self {
        let ClusterContext {
            client,
            resolver,
            cache,
            metrics,
            fence,
        } = context.clone();
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: format!("wasmctrl/{plugin}"),
                instance: std::env::var("HOSTNAME").ok(),
            },
        );
        Self {
            plugin: plugin.into(),
            client,
            resolver,
            cache,
            grant,
            metrics,
            recorder,
            bucket: BucketRateLimiter::new(limits.qps, limits.burst),
            events: BucketRateLimiter::new(
                f64::from(limits.events) / EVENT_WINDOW.as_secs_f64(),
                limits.events,
            ),
            limits,
            fence,
            counters: CallCounters::default(),
        }
    }

    /// The grant every call of this plugin is checked against.
    pub fn grant(&self) -> &Grant {
        &self.grant
    }

    fn count(&self, verb: &'static str, resource: &str, code: &'static str) {
        self.counters.inc(
            &self.metrics.hostapi_calls,
            &self.plugin,
            verb,
            resource,
            code,
        );
    }

    fn limit_exceeded(&self, limit: &str) {
        self.metrics.count_limit(&self.plugin, limit);
    }

    /// Refuses a call whose strings are not Kubernetes syntax.
    fn refuse_invalid(&self, verb: &'static str, e: Invalid) -> ApiError {
        self.count(verb, UNRESOLVED, "invalid");
        ApiError::Invalid(e.to_string())
    }

    /// One call through the steps of the [module docs](self), counted as
    /// the plugin's when `counted`.
    async fn serve(
        &self,
        request: KubeRequest,
        deadline: Instant,
        counted: bool,
    ) -> Result<KubeResponse, ApiError> {
        if let KubeRequest::RecordEvent { event } = request {
            return self.record_event(event, deadline).await;
        }
        let verb = request.verb();
        let call = self.check_call(&request, counted).await?;
        let result = self
            .execute(request, &call.resolved, call.namespace.as_deref(), deadline)
            .await;
        if counted {
            self.count(verb, call.resource(), code(&result));
        }
        result
    }
}

impl KubeApi for ClusterApi {
    fn call(
        &self,
        request: KubeRequest,
        deadline: Instant,
    ) -> BoxFuture<'_, Result<KubeResponse, ApiError>> {
        Box::pin(async move {
            if Instant::now() >= deadline {
                return Err(ApiError::Timeout(
                    "the reconcile's deadline has passed".into(),
                ));
            }
            self.serve(request, deadline, true).await
        })
    }

    fn peek(
        &self,
        request: KubeRequest,
        deadline: Instant,
    ) -> BoxFuture<'_, Result<KubeResponse, ApiError>> {
        Box::pin(async move {
            if !request.is_read() {
                return Err(ApiError::Invalid(format!(
                    "the host only peeks with reads, not {}",
                    request.verb()
                )));
            }
            if Instant::now() >= deadline {
                return Err(ApiError::Timeout(
                    "the reconcile's deadline has passed".into(),
                ));
            }
            self.serve(request, deadline, false).await
        })
    }

    fn admit<'a>(&'a self, request: &'a KubeRequest) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move {
            if let KubeRequest::RecordEvent { event } = request {
                return self.check_event(event);
            }
            self.check_call(request, true).await.map(|_| ())
        })
    }
}

/// Maps a kube-rs error onto the WIT `api-error`.
pub fn map_error(e: kube::Error) -> ApiError {
    match e {
        kube::Error::Api(status) => {
            let message = status.message.clone();
            match (status.code, status.reason.as_str()) {
                (404, _) | (_, "NotFound") => ApiError::NotFound(message),
                (409, "AlreadyExists") => ApiError::AlreadyExists(message),
                (409, _) | (_, "Conflict") => ApiError::Conflict(message),
                (403, _) | (401, _) => ApiError::Forbidden(message),
                (400, _) | (422, _) | (415, _) => ApiError::Invalid(message),
                (504, _) | (_, "Timeout") => ApiError::Timeout(message),
                (500..=599, _) => ApiError::Unavailable(message),
                _ => ApiError::Other(format!("{} {}: {message}", status.code, status.reason)),
            }
        }
        e @ (kube::Error::HyperError(_) | kube::Error::Service(_)) => {
            ApiError::Unavailable(e.to_string())
        }
        other => ApiError::Other(other.to_string()),
    }
}

#[cfg(test)]
mod fuzz;
