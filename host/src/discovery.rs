//! Resolving a plugin's group/version/kind to an API resource (plural,
//! scope) through the API server's discovery, cached.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::Client;
use kube::api::{ApiResource, GroupVersionKind};
use kube::discovery::ApiCapabilities;

use crate::hostapi::Gvk;

/// Why a kind could not be resolved.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the API server does not serve {gvk}: {message}")]
pub struct ResolveError {
    pub gvk: String,
    pub message: String,
}

/// A resolved kind: its API resource and whether it is namespaced.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub resource: ApiResource,
    pub namespaced: bool,
}

/// Discovery results per kind. Misses are not cached, so a CRD created
/// after start-up is found on the next call.
pub struct Resolver {
    client: Client,
    known: Mutex<HashMap<(String, String, String), Resolved>>,
}

impl Resolver {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            known: Mutex::new(HashMap::new()),
        }
    }

    pub async fn resolve(&self, gvk: &Gvk) -> Result<Resolved, ResolveError> {
        let k = (gvk.group.clone(), gvk.version.clone(), gvk.kind.clone());
        if let Some(r) = self.known.lock().unwrap().get(&k) {
            return Ok(r.clone());
        }
        let query = GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
        let (resource, caps): (ApiResource, ApiCapabilities) =
            kube::discovery::pinned_kind(&self.client, &query)
                .await
                .map_err(|e| ResolveError {
                    gvk: display(gvk),
                    message: e.to_string(),
                })?;
        let resolved = Resolved {
            resource,
            namespaced: caps.scope == kube::discovery::Scope::Namespaced,
        };
        self.known.lock().unwrap().insert(k, resolved.clone());
        Ok(resolved)
    }
}

/// `apps/v1 Deployment`, `v1 ConfigMap`.
pub fn display(gvk: &Gvk) -> String {
    if gvk.group.is_empty() {
        format!("{} {}", gvk.version, gvk.kind)
    } else {
        format!("{}/{} {}", gvk.group, gvk.version, gvk.kind)
    }
}
