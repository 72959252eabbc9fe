//! Steps 1–3 of a call: the body's bounds, the strings' syntax, the
//! kind's resolution and the grant, each refusal counted.

use std::sync::Arc;

use super::{ClusterApi, UNRESOLVED};
use crate::control::discovery::Resolved;
use crate::meta::syntax::{self as validate, Invalid};
use crate::sandbox::hostapi::error::ApiError;
use crate::sandbox::hostapi::grant::Access;
use crate::sandbox::hostapi::request::{Address, KubeRequest};

/// Bytes of a label selector.
const MAX_SELECTOR: usize = 4096;

impl ClusterApi {
    /// Every check a call passes before it is served, in order: the
    /// body's size, the strings' syntax, the kind's resolution and the
    /// grant. A refusal is counted (when `counted`) and returned; what is
    /// admitted comes back resolved, with the namespace the call is in.
    pub(super) async fn check_call(
        &self,
        request: &KubeRequest,
        counted: bool,
    ) -> Result<CheckedCall, ApiError> {
        let verb = request.verb();
        let count = |resource: &str, code: &'static str| {
            if counted {
                self.count(verb, resource, code);
            }
        };
        // Before anything reads it: the body's size is the one bound that
        // does not depend on what it says.
        request.check_payload().inspect_err(|_| {
            count(UNRESOLVED, "invalid");
            self.limit_exceeded("payload");
        })?;
        request.check_nesting().inspect_err(|_| {
            count(UNRESOLVED, "invalid");
            self.limit_exceeded("nesting");
        })?;
        let address = request.address();
        valid(&address).map_err(|e| {
            count(UNRESOLVED, "invalid");
            ApiError::Invalid(e.to_string())
        })?;
        let resolved = self.resolver.resolve(address.kind).await.map_err(|e| {
            count(UNRESOLVED, "invalid");
            ApiError::Invalid(e.to_string())
        })?;
        let ar = &resolved.resource;
        let namespace = address
            .namespace
            .filter(|_| resolved.namespaced)
            .map(str::to_string);
        if resolved.namespaced
            && namespace.is_none()
            && !matches!(request, KubeRequest::List { .. })
        {
            count(&ar.plural, "invalid");
            return Err(ApiError::Invalid(format!(
                "{} is namespaced: the call needs a namespace",
                ar.plural
            )));
        }
        let status_resource = request.is_status().then(|| format!("{}/status", ar.plural));
        let call = CheckedCall {
            resolved,
            namespace,
            status_resource,
        };
        let access = Access {
            verb,
            group: &call.resolved.resource.group,
            resource: call.resource(),
            namespace: call.namespace.as_deref(),
        };
        if !self.grant.allows(&access) {
            count(call.resource(), "forbidden");
            tracing::warn!(plugin = %self.plugin, %access, "host API call denied by the plugin's grant");
            return Err(ApiError::Forbidden(format!(
                "plugin {:?} is not granted {access}",
                self.plugin
            )));
        }
        Ok(call)
    }
}

/// A call that passed [`ClusterApi::check_call`]: its kind resolved, the
/// namespace it is in, and for a status write its `<plural>/status`.
pub(super) struct CheckedCall {
    pub(super) resolved: Arc<Resolved>,
    pub(super) namespace: Option<String>,
    status_resource: Option<String>,
}

impl CheckedCall {
    /// The resource the grant was checked for and the call is counted as.
    pub(super) fn resource(&self) -> &str {
        self.status_resource
            .as_deref()
            .unwrap_or(&self.resolved.resource.plural)
    }
}

/// Refuses an address whose strings are not Kubernetes syntax. (An
/// event's are checked with its own fields' names: `events.rs`.)
fn valid(address: &Address<'_>) -> Result<(), Invalid> {
    validate::gvk(address.kind)?;
    if let Some(ns) = address.namespace {
        validate::namespace(ns)?;
    }
    if let Some(name) = address.name {
        validate::object_name("name", name)?;
    }
    if let Some(s) = address.label_selector
        && s.len() > MAX_SELECTOR
    {
        return Err(Invalid {
            field: "label selector",
            message: format!("is {} bytes; at most {MAX_SELECTOR} are allowed", s.len()),
        });
    }
    Ok(())
}
