//! `wasmctrl:reconciler/kube`: every call counted against the call's
//! host-call budget, bounded by its deadline, and served by the plugin's
//! [`KubeApi`] (which validates it and holds it to the grant).

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::HasData;

use crate::sandbox::failure::OverBudget;
use crate::sandbox::hostapi::{self, ApiError, KubeApi, KubeRequest, KubeResponse};
use crate::sandbox::limits::Ceiling;
use crate::sandbox::store::{Budget, ResumeMark, StoreState};
use crate::sandbox::wit::wasmctrl::reconciler::{kube, types};

/// The `kube` interface's view of a store.
pub(super) struct Kube;

impl HasData for Kube {
    type Data<'a> = KubeView<'a>;
}

pub(super) struct KubeView<'a> {
    api: &'a Arc<dyn KubeApi>,
    deadline: Instant,
    budget: &'a mut Budget,
    resumed: &'a Arc<ResumeMark>,
}

pub(super) fn view(s: &mut StoreState) -> KubeView<'_> {
    KubeView {
        api: s.call.context.kube.as_ref().unwrap_or(&s.kube),
        deadline: s.call.context.deadline,
        budget: &mut s.budget,
        resumed: &s.resumed,
    }
}

type ApiResult<T> = wasmtime::Result<Result<T, types::ApiError>>;

impl KubeView<'_> {
    /// Counts the call against the budget, then runs it bounded by the
    /// call's deadline. Past the budget the guest traps: a plugin that
    /// loops over host calls is stopped, not served.
    fn call(
        &mut self,
        request: KubeRequest,
    ) -> wasmtime::Result<impl Future<Output = Result<KubeResponse, ApiError>> + Send + 'static>
    {
        if self.budget.host_calls >= self.budget.host_call_limit {
            return Err(wasmtime::Error::new(OverBudget {
                ceiling: Ceiling::HostCalls,
                message: format!(
                    "the plugin made more than {} host calls in one call (limits.hostCalls)",
                    self.budget.host_call_limit
                ),
            }));
        }
        self.budget.host_calls += 1;
        let api = self.api.clone();
        let deadline = self.deadline;
        let resumed = self.resumed.clone();
        Ok(async move {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let verb = request.verb();
            let response = match tokio::time::timeout(remaining, api.call(request, deadline)).await
            {
                Ok(r) => r,
                Err(_) => Err(ApiError::Timeout(format!(
                    "{verb} did not finish before the reconcile's deadline"
                ))),
            };
            // The wait was the API's, not the guest's CPU (sandbox/share.rs).
            resumed.set(Instant::now());
            response
        })
    }

    /// Serves `request` and takes what `answer` finds in its response; any
    /// other response is an error naming it.
    async fn answer<T>(
        &mut self,
        request: KubeRequest,
        answer: impl FnOnce(KubeResponse) -> Result<T, KubeResponse>,
    ) -> ApiResult<T> {
        let call = self.call(request)?;
        Ok(call
            .await
            .and_then(|r| {
                answer(r).map_err(|other| ApiError::Other(format!("unexpected response {other:?}")))
            })
            .map_err(to_wit_error))
    }

    async fn object(&mut self, request: KubeRequest) -> ApiResult<String> {
        self.answer(request, |r| match r {
            KubeResponse::Object(o) => Ok(o),
            other => Err(other),
        })
        .await
    }

    async fn objects(&mut self, request: KubeRequest) -> ApiResult<Vec<String>> {
        self.answer(request, |r| match r {
            KubeResponse::Objects(o) => Ok(o),
            other => Err(other),
        })
        .await
    }

    async fn empty(&mut self, request: KubeRequest) -> ApiResult<()> {
        let call = self.call(request)?;
        Ok(call.await.map(|_| ()).map_err(to_wit_error))
    }
}

/// The imports that address a kind in a namespace: each sends the request
/// its arguments make and answers with `object`, `objects` or `empty`.
macro_rules! addressed_imports {
    ($(
        $import:ident($($arg:ident: $ty:ty),*) -> $out:ty =
            $answer:ident $request:ident { $($field:tt)* };
    )*) => {$(
        async fn $import(
            &mut self,
            kind: types::Gvk,
            namespace: Option<String>,
            $($arg: $ty),*
        ) -> ApiResult<$out> {
            self.$answer(KubeRequest::$request {
                kind: kind.into(),
                namespace,
                $($field)*
            })
            .await
        }
    )*};
}

impl kube::Host for KubeView<'_> {
    addressed_imports! {
        get(name: String) -> String = object Get { name };
        list(label_selector: Option<String>) -> Vec<String> = objects List { label_selector };
        create(object: String) -> String = object Create { object: object.into() };
        replace(name: String, object: String) -> String = object Replace { name, object: object.into() };
        patch(name: String, patch: kube::ObjectPatch) -> String =
            object Patch { name, patch: patch.into() };
        replace_status(name: String, object: String) -> String =
            object ReplaceStatus { name, object: object.into() };
        patch_status(name: String, patch: kube::ObjectPatch) -> String =
            object PatchStatus { name, patch: patch.into() };
        delete(name: String) -> () = empty Delete { name };
    }

    async fn record_event(&mut self, event: kube::Event) -> ApiResult<()> {
        self.empty(KubeRequest::RecordEvent {
            event: event.into(),
        })
        .await
    }
}

impl From<types::Gvk> for hostapi::Gvk {
    fn from(g: types::Gvk) -> Self {
        hostapi::Gvk {
            group: g.group,
            version: g.version,
            kind: g.kind,
        }
    }
}

impl From<kube::ObjectPatch> for hostapi::ObjectPatch {
    fn from(p: kube::ObjectPatch) -> Self {
        match p {
            kube::ObjectPatch::Merge(s) => hostapi::ObjectPatch::merge(s),
            kube::ObjectPatch::Json(s) => hostapi::ObjectPatch::json(s),
            kube::ObjectPatch::Apply(a) => hostapi::ObjectPatch::Apply {
                body: a.body.into(),
                field_manager: a.field_manager,
                force: a.force,
            },
        }
    }
}

impl From<kube::Event> for hostapi::Event {
    fn from(e: kube::Event) -> Self {
        hostapi::Event {
            regarding_kind: e.regarding_kind.into(),
            regarding_namespace: e.regarding_namespace,
            regarding_name: e.regarding_name,
            type_: match e.type_ {
                kube::EventType::Normal => hostapi::EventType::Normal,
                kube::EventType::Warning => hostapi::EventType::Warning,
            },
            reason: e.reason,
            action: e.action,
            note: e.note,
        }
    }
}

pub(super) fn to_wit_error(e: ApiError) -> types::ApiError {
    match e {
        ApiError::NotFound(m) => types::ApiError::NotFound(m),
        ApiError::Conflict(m) => types::ApiError::Conflict(m),
        ApiError::AlreadyExists(m) => types::ApiError::AlreadyExists(m),
        ApiError::Forbidden(m) => types::ApiError::Forbidden(m),
        ApiError::Invalid(m) => types::ApiError::Invalid(m),
        ApiError::Timeout(m) => types::ApiError::Timeout(m),
        ApiError::Unavailable(m) => types::ApiError::Unavailable(m),
        ApiError::Other(m) => types::ApiError::Other(m),
    }
}
