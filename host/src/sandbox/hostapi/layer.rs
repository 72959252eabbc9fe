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

/// One cross-cutting feature around an inner [`KubeApi`]. Each hook gets
/// the inner API and, by default, hands the request on unchanged; a layer
/// overrides the hooks it is about, and may answer without the inner API.
pub trait Layer: Send + Sync + 'static {
    /// A call the guest makes (see [`KubeApi::call`]).
    fn call<'a>(
        &'a self,
        inner: &'a dyn KubeApi,
        request: KubeRequest,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<KubeResponse, ApiError>> {
        inner.call(request, deadline)
    }

    /// A read the host makes for the plugin (see [`KubeApi::peek`]).
    fn peek<'a>(
        &'a self,
        inner: &'a dyn KubeApi,
        request: KubeRequest,
        deadline: Instant,
    ) -> BoxFuture<'a, Result<KubeResponse, ApiError>> {
        inner.peek(request, deadline)
    }

    /// Whether a call would be let through (see [`KubeApi::admit`]).
    fn admit<'a>(
        &'a self,
        inner: &'a dyn KubeApi,
        request: &'a KubeRequest,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        inner.admit(request)
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
        self.layer.call(&*self.inner, request, deadline)
    }

    fn peek(
        &self,
        request: KubeRequest,
        deadline: Instant,
    ) -> BoxFuture<'_, Result<KubeResponse, ApiError>> {
        self.layer.peek(&*self.inner, request, deadline)
    }

    fn admit<'a>(&'a self, request: &'a KubeRequest) -> BoxFuture<'a, Result<(), ApiError>> {
        self.layer.admit(&*self.inner, request)
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
        fn call<'a>(
            &'a self,
            inner: &'a dyn KubeApi,
            request: KubeRequest,
            deadline: Instant,
        ) -> BoxFuture<'a, Result<KubeResponse, ApiError>> {
            self.0.lock().unwrap().push(request.operation());
            inner.call(request, deadline)
        }
    }

    /// Answers every get itself.
    struct Gets;

    impl Layer for Gets {
        fn call<'a>(
            &'a self,
            inner: &'a dyn KubeApi,
            request: KubeRequest,
            deadline: Instant,
        ) -> BoxFuture<'a, Result<KubeResponse, ApiError>> {
            match request {
                KubeRequest::Get { .. } => Box::pin(async { Ok(KubeResponse::Empty) }),
                other => inner.call(other, deadline),
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
        // Hooks a layer leaves alone go to the inner API.
        let peeked = futures::executor::block_on(outer.peek(get, deadline));
        assert!(matches!(peeked, Err(ApiError::Unavailable(_))));
        assert_eq!(outer.layer().0.lock().unwrap().len(), 2);
    }
}
