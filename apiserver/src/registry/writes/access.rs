//! What every verb shares: the namespace a resource's objects live in,
//! reading one object, checking a body's type, committing for a request,
//! and keeping the registry in step with CRDs.

use std::sync::Arc;

use serde_json::Value;

use super::context::WriteCtx;
use crate::error::ApiError;
use crate::registry::Objects;
use crate::registry::resources::ResourceInfo;
use crate::registry::storage::{Change, Committed, EventType, Expect, StoreError};
use crate::registry::views::to_view;

impl Objects {
    pub(crate) fn ns_for(&self, info: &ResourceInfo, ns: &str) -> String {
        if info.namespaced {
            ns.to_string()
        } else {
            String::new()
        }
    }

    /// GET of one object in the served version.
    pub(crate) fn get_object(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let ns = self.ns_for(info, ns);
        self.store
            .get(&info.storage, &ns, name)
            .map(|s| to_view(info, &s.obj))
            .ok_or_else(|| ApiError::not_found(&info.group, &info.plural, name))
    }

    /// Checks the body names the same apiVersion/kind as the URL (when set).
    pub(crate) fn check_type(&self, info: &ResourceInfo, body: &Value) -> Result<(), ApiError> {
        if !body.is_object() {
            return Err(ApiError::BadRequest(format!(
                "the object provided is unrecognized (must be of type {})",
                info.kind
            )));
        }
        let av = body.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = body.get("kind").and_then(Value::as_str).unwrap_or("");
        if !av.is_empty() && av != info.api_version() {
            return Err(ApiError::BadRequest(format!(
                "the API version in the data ({av}) does not match the expected API version ({})",
                info.api_version()
            )));
        }
        if !kind.is_empty() && kind != info.kind {
            return Err(ApiError::BadRequest(format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                info.kind
            )));
        }
        Ok(())
    }

    /// Keeps the registry in step with CRDs as their changes become visible
    /// (the store's apply hook; runs under the store lock).
    pub(crate) fn after_apply(&self, ev: &crate::registry::storage::Event) {
        if ev.resource.group == "rbac.authorization.k8s.io" {
            self.rbac_changed();
            return;
        }
        if let Some(kind) =
            crate::admission::ConfigKind::of(&ev.resource.group, &ev.resource.resource)
        {
            let stored = (ev.etype != EventType::Deleted).then(|| ev.value());
            self.admission.observe(kind, &ev.name, stored.as_ref());
            return;
        }
        if !(ev.resource.group == "apiextensions.k8s.io"
            && ev.resource.resource == "customresourcedefinitions")
        {
            return;
        }
        let (storage, infos) = crate::registry::crd::infos_for(&ev.value());
        let infos = if ev.etype == EventType::Deleted {
            Vec::new()
        } else {
            infos
        };
        self.registry_mut().set_custom(&storage, infos);
    }

    /// Takes the webhook configurations loaded from disk into admission
    /// (loading applies no events).
    pub(crate) fn observe_loaded_webhooks(&self) {
        for kind in [
            crate::admission::ConfigKind::Mutating,
            crate::admission::ConfigKind::Validating,
        ] {
            let plural = match kind {
                crate::admission::ConfigKind::Mutating => "mutatingwebhookconfigurations",
                crate::admission::ConfigKind::Validating => "validatingwebhookconfigurations",
            };
            let gr = crate::registry::resources::GroupResource::new(
                crate::admission::config::GROUP,
                plural,
            );
            let stored = self.store.list(&gr, None, None, None, None).items;
            for obj in stored
                .iter()
                .map(|o| crate::registry::storage::parse_json(o))
            {
                let name = crate::values::meta_str(&obj, "name").unwrap_or("");
                self.admission.observe(kind, name, Some(&obj));
            }
        }
    }

    /// Commits a change for a request; with persistence the request's
    /// response waits (in the HTTP layer) until the change is durable.
    pub(crate) fn commit(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        expect: Expect,
        change: Change,
        ctx: &WriteCtx,
    ) -> Result<Committed, StoreError> {
        let c = self
            .store
            .commit(&info.storage, ns, name, expect, change, ctx.dry_run)?;
        ctx.wait_for(c.durable.clone());
        Ok(c)
    }

    /// The info of the resource stored under `storage`.
    pub(crate) fn info_for(
        &self,
        storage: &crate::registry::resources::GroupResource,
    ) -> Option<Arc<ResourceInfo>> {
        self.registry().by_storage(storage)
    }
}
