//! The service a plugin's `kube` calls reach: [`KubeApi`], and the host
//! with no API server.

use std::time::Instant;

use futures::future::BoxFuture;

use super::error::ApiError;
use super::request::KubeRequest;

/// What a successful call returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeResponse {
    Object(String),
    Objects(Vec<String>),
    Empty,
}

/// Serves a plugin's `kube` calls. Each call must finish by `deadline` (the
/// reconcile's context deadline) or return [`ApiError::Timeout`].
pub trait KubeApi: Send + Sync + 'static {
    fn call(
        &self,
        request: KubeRequest,
        deadline: Instant,
    ) -> BoxFuture<'_, Result<KubeResponse, ApiError>>;

    /// A read (`get` or `list`) the host makes for the plugin, e.g. to see
    /// whether what a reconcile read has changed: served and checked like
    /// [`KubeApi::call`], but not counted as one of the plugin's calls.
    fn peek(
        &self,
        request: KubeRequest,
        deadline: Instant,
    ) -> BoxFuture<'_, Result<KubeResponse, ApiError>> {
        self.call(request, deadline)
    }

    /// Whether [`KubeApi::call`] would let `request` through to the API
    /// server: every check it makes before sending (the body's size, the
    /// strings' syntax, the kind's resolution, the grant), counted as the
    /// plugin's call when refused, and nothing sent. Shadow runs answer
    /// their writes in the host and must refuse exactly what a real call
    /// would. The default checks the body's size and nesting only.
    fn admit<'a>(&'a self, request: &'a KubeRequest) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(async move {
            request.check_payload()?;
            request.check_nesting()
        })
    }
}

/// A host with no API server: every call is `unavailable`. Used where a
/// plugin runs without a cluster (benchmarks, `inspect`, sandbox tests,
/// under a replay).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoApiServer;

impl KubeApi for NoApiServer {
    fn call(
        &self,
        request: KubeRequest,
        _deadline: Instant,
    ) -> BoxFuture<'_, Result<KubeResponse, ApiError>> {
        let verb = request.verb();
        Box::pin(async move {
            Err(ApiError::Unavailable(format!(
                "no API server is configured for this host ({verb} refused)"
            )))
        })
    }
}
