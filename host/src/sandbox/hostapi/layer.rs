//! Cross-cutting features of the host API as layers, tower-style: a
//! [`Layer`] wraps an inner [`KubeApi`] and changes only the calls it is
//! about; [`Layered`] is the one place that makes a layer and its inner API
//! a `KubeApi` again, so layers stack in any order.

use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;

use super::api::{KubeApi, KubeResponse};
use super::error::ApiError;
use super::request::KubeRequest;

/// One cross-cutting feature around an inner [`KubeApi`]: it sees every
/// call the guest makes and may change it, note it, answer it itself, or
/// hand it on with [`Next::pass`]. The host's own reads (`peek`) and the
/// admission check (`admit`) are not the guest's calls and go straight to
/// the inner API.
pub trait Layer: Send + Sync + 'static {
    /// A call the guest makes (see [`KubeApi::call`]).
    fn call<'a>(&'a self, next: Next<'a>) -> BoxFuture<'a, Result<KubeResponse, ApiError>>;
}

/// A guest's call as it reaches a layer: the request, its deadline, and the
/// API beneath the layer.
pub struct Next<'a> {
    pub request: KubeRequest,
    pub deadline: Instant,
    /// The API beneath the layer: the next layer, or the cluster.
    pub below: &'a dyn KubeApi,
}

impl<'a> Next<'a> {
    /// Hands the call on to the API beneath, as it is.
    pub fn pass(self) -> BoxFuture<'a, Result<KubeResponse, ApiError>> {
        self.below.call(self.request, self.deadline)
    }
}

/// A [`Layer`] over an inner API: itself a [`KubeApi`], which may be the
/// inner API of the next layer.
pub struct Layered<L> {
    layer: L,
    inner: Arc<dyn KubeApi>,
}

impl<L: Layer> Layered<L> {
    pub fn new(layer: L, inner: Arc<dyn KubeApi>) -> Self {
        Self { layer, inner }
    }

    /// The layer, to read what it kept.
    pub fn layer(&self) -> &L {
        &self.layer
    }
}

impl<L: Layer> KubeApi for Layered<L> {
    fn call(
        &self,
        request: KubeRequest,
        deadline: Instant,
    ) -> BoxFuture<'_, Result<KubeResponse, ApiError>> {
        self.layer.call(Next {
            request,
            deadline,
            below: &*self.inner,
        })
    }

    fn peek(
        &self,
        request: KubeRequest,
        deadline: Instant,
    ) -> BoxFuture<'_, Result<KubeResponse, ApiError>> {
        self.inner.peek(request, deadline)
    }

    fn admit<'a>(&'a self, request: &'a KubeRequest) -> BoxFuture<'a, Result<(), ApiError>> {
        self.inner.admit(request)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::meta::kind::Gvk;
    use crate::sandbox::hostapi::api::NoApiServer;

    /// Notes each call's operation, then hands it on.
    #[derive(Default)]
    struct Notes(Mutex<Vec<&'static str>>);

    impl Layer for Notes {
        fn call<'a>(&'a self, next: Next<'a>) -> BoxFuture<'a, Result<KubeResponse, ApiError>> {
            self.0.lock().unwrap().push(next.request.operation());
            next.pass()
        }
    }

    /// Answers every get itself.
    struct Gets;

    impl Layer for Gets {
        fn call<'a>(&'a self, next: Next<'a>) -> BoxFuture<'a, Result<KubeResponse, ApiError>> {
            match next.request {
                KubeRequest::Get { .. } => Box::pin(async { Ok(KubeResponse::Empty) }),
                _ => next.pass(),
            }
        }
    }

    #[test]
    fn layers_stack_and_each_sees_only_what_reaches_it() {
        let gets = Arc::new(Layered::new(Gets, Arc::new(NoApiServer)));
        let outer = Layered::new(Notes::default(), gets);
        let kind = Gvk::new("", "v1", "ConfigMap");
        let get = KubeRequest::Get {
            kind: kind.clone(),
            namespace: None,
            name: "a".into(),
        };
        let delete = KubeRequest::Delete {
            kind,
            namespace: None,
            name: "a".into(),
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        let run = |r| futures::executor::block_on(outer.call(r, deadline));
        assert_eq!(run(get.clone()), Ok(KubeResponse::Empty));
        assert!(matches!(run(delete), Err(ApiError::Unavailable(_))));
        assert_eq!(*outer.layer().0.lock().unwrap(), ["get", "delete"]);
        // The host's own reads go to the inner API, past the layers.
        let peeked = futures::executor::block_on(outer.peek(get, deadline));
        assert!(matches!(peeked, Err(ApiError::Unavailable(_))));
        assert_eq!(outer.layer().0.lock().unwrap().len(), 2);
    }
}
