//! Resolving a plugin's group/version/kind to an API resource (plural,
//! scope) through the API server's discovery, cached.
//!
//! # Bounded by what the server serves
//! Only kinds the server resolved are kept, so the cache holds at most the
//! server's kinds. A miss is remembered for [`MISS_TTL`] (and at most
//! [`MAX_MISSES`] of them), so a guest asking again and again for a kind
//! that does not exist costs the API server one discovery request per TTL,
//! while a CRD created after start-up is still found within it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{ApiResource, GroupVersionKind};
use kube::discovery::ApiCapabilities;

use crate::meta::kind::Gvk;

/// How long a kind the server did not serve is answered from memory.
pub const MISS_TTL: Duration = Duration::from_secs(1);
/// Misses remembered at once; past it the oldest are forgotten.
pub const MAX_MISSES: usize = 1024;

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

/// Discovery results per kind, shared by every plugin.
pub struct Resolver {
    client: Client,
    // Shared, not cloned: every guest host call resolves its kind, and an
    // `ApiResource` is six strings.
    known: Mutex<HashMap<Gvk, Arc<Resolved>>>,
    misses: Mutex<HashMap<Gvk, (Instant, ResolveError)>>,
}

impl Resolver {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            known: Mutex::new(HashMap::new()),
            misses: Mutex::new(HashMap::new()),
        }
    }

    /// The resource serving `gvk`. Callers validate `gvk`'s syntax first:
    /// its strings become a discovery URL.
    pub async fn resolve(&self, gvk: &Gvk) -> Result<Arc<Resolved>, ResolveError> {
        if let Some(r) = self.known.lock().unwrap().get(gvk) {
            return Ok(r.clone());
        }
        if let Some((at, e)) = self.misses.lock().unwrap().get(gvk)
            && at.elapsed() < MISS_TTL
        {
            return Err(e.clone());
        }
        let query = GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
        let found: Result<(ApiResource, ApiCapabilities), _> =
            kube::discovery::pinned_kind(&self.client, &query).await;
        match found {
            Ok((resource, caps)) => {
                let resolved = Arc::new(Resolved {
                    resource,
                    namespaced: caps.scope == kube::discovery::Scope::Namespaced,
                });
                self.known
                    .lock()
                    .unwrap()
                    .insert(gvk.clone(), resolved.clone());
                self.misses.lock().unwrap().remove(gvk);
                Ok(resolved)
            }
            Err(e) => {
                let error = ResolveError {
                    gvk: gvk.to_string(),
                    message: e.to_string(),
                };
                let mut misses = self.misses.lock().unwrap();
                if misses.len() >= MAX_MISSES {
                    misses.retain(|_, (at, _)| at.elapsed() < MISS_TTL);
                    if misses.len() >= MAX_MISSES {
                        misses.clear();
                    }
                }
                misses.insert(gvk.clone(), (Instant::now(), error.clone()));
                Err(error)
            }
        }
    }
}
