//! Resolving a plugin's group/version/kind to an API resource (plural,
//! scope) through the API server's discovery, cached.
//!
//! # One listing per group version
//! Discovery answers a whole group version at once (every resource in it),
//! so a listing resolves every kind it names, and they are all kept: a
//! thousand plugins whose CRDs share a group make one discovery request, not
//! a thousand, each answering with the thousand resources. Kinds of a group
//! version being listed wait for that listing instead of starting their
//! own; a listing of a big group version grows the read buffer of the
//! connection it arrives on, which the pool keeps (and a watch may go on to
//! hold for its life), so one grown connection instead of one per plugin.
//!
//! # Bounded by what the server serves, and as fresh as [`KNOWN_TTL`]
//! Only kinds the server served are kept, and a group version's kinds are
//! listed again once they are [`KNOWN_TTL`] old: a kind whose CRD was
//! deleted is forgotten then, and one recreated with another plural or
//! scope is found as it is now. Should that listing fail (the server is
//! restarting, say), the kinds last listed are used meanwhile. A miss is
//! remembered for [`MISS_TTL`] (and at most [`MAX_MISSES`] of them), so a
//! guest asking again and again for a kind that does not exist costs the
//! API server one discovery request per TTL, while a CRD created after
//! start-up is still found within it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{ApiResource, GroupVersionKind};
use kube::core::GroupVersion;

use crate::meta::kind::Gvk;

/// How long a kind the server did not serve is answered from memory.
pub const MISS_TTL: Duration = Duration::from_secs(1);
/// How long a kind the server served is answered from memory before its
/// group version is listed again.
pub const KNOWN_TTL: Duration = Duration::from_secs(300);
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

/// A group and version, the unit discovery answers.
type GroupVersionKey = (String, String);

/// One group version's listing: held while it runs, and the failure of
/// the last one (when and why), which the kinds that waited for it share.
type Listing = tokio::sync::Mutex<Option<(Instant, String)>>;

/// Discovery results per kind, shared by every plugin.
pub struct Resolver {
    client: Client,
    // Shared, not cloned: every guest host call resolves its kind, and an
    // `ApiResource` is six strings. With when its group version was listed.
    known: Mutex<HashMap<Gvk, (Instant, Arc<Resolved>)>>,
    known_ttl: Duration,
    misses: Mutex<HashMap<Gvk, (Instant, ResolveError)>>,
    /// The group versions being listed now, each behind the lock its
    /// listing holds (dropped from here when no one waits for it).
    listing: Mutex<HashMap<GroupVersionKey, Arc<Listing>>>,
}

impl Resolver {
    pub fn new(client: Client) -> Self {
        Self::with_known_ttl(client, KNOWN_TTL)
    }

    /// A resolver that lists a group version again once its kinds are
    /// `known_ttl` old.
    pub fn with_known_ttl(client: Client, known_ttl: Duration) -> Self {
        Self {
            client,
            known: Mutex::new(HashMap::new()),
            known_ttl,
            misses: Mutex::new(HashMap::new()),
            listing: Mutex::new(HashMap::new()),
        }
    }

    /// The resource serving `gvk`. Callers validate `gvk`'s syntax first:
    /// its strings become a discovery URL.
    pub async fn resolve(&self, gvk: &Gvk) -> Result<Arc<Resolved>, ResolveError> {
        if let Some(known) = self.remembered(gvk) {
            return known;
        }
        let key = (gvk.group.clone(), gvk.version.clone());
        let listing = self
            .listing
            .lock()
            .unwrap()
            .entry(key.clone())
            .or_default()
            .clone();
        let mut failed = listing.lock().await;
        // The listing waited for may have answered this kind, or failed.
        let result = match (self.remembered(gvk), &*failed) {
            (Some(known), _) => known,
            (None, Some((at, message))) if at.elapsed() < MISS_TTL => {
                Err(self.missed(gvk, message.clone()))
            }
            (None, _) => match self.list(gvk).await {
                Ok(Some(resolved)) => {
                    *failed = None;
                    self.misses.lock().unwrap().remove(gvk);
                    Ok(resolved)
                }
                Ok(None) => {
                    *failed = None;
                    let query = GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
                    let missing = kube::Error::Discovery(kube::error::DiscoveryError::MissingKind(
                        format!("{query:?}"),
                    ));
                    Err(self.missed(gvk, missing.to_string()))
                }
                Err(e) if not_served(&e) => {
                    *failed = None;
                    self.forget_group_version(gvk);
                    Err(self.missed(gvk, e.to_string()))
                }
                Err(e) => {
                    *failed = Some((Instant::now(), e.to_string()));
                    match self.last_listed(gvk) {
                        Some(stale) => {
                            tracing::debug!(%gvk, error = %e, "discovery failed; using the kind as last listed");
                            Ok(stale)
                        }
                        None => Err(self.missed(gvk, e.to_string())),
                    }
                }
            },
        };
        drop(failed);
        let mut listings = self.listing.lock().unwrap();
        // Only the map and this call hold it: no one waits for it.
        if listings.get(&key).is_some_and(|l| Arc::ptr_eq(l, &listing))
            && Arc::strong_count(&listing) == 2
        {
            listings.remove(&key);
        }
        result
    }

    /// What is known of `gvk`: resolved within the known TTL, or missed
    /// within [`MISS_TTL`].
    fn remembered(&self, gvk: &Gvk) -> Option<Result<Arc<Resolved>, ResolveError>> {
        if let Some((at, r)) = self.known.lock().unwrap().get(gvk)
            && at.elapsed() < self.known_ttl
        {
            return Some(Ok(r.clone()));
        }
        match self.misses.lock().unwrap().get(gvk) {
            Some((at, e)) if at.elapsed() < MISS_TTL => Some(Err(e.clone())),
            _ => None,
        }
    }

    /// Forgets every kind of `gvk`'s group version: the server no longer
    /// serves it.
    fn forget_group_version(&self, gvk: &Gvk) {
        forget_group_version(&mut self.known.lock().unwrap(), gvk);
    }

    /// `gvk` as its group version was last listed, however long ago.
    fn last_listed(&self, gvk: &Gvk) -> Option<Arc<Resolved>> {
        self.known.lock().unwrap().get(gvk).map(|(_, r)| r.clone())
    }

    /// Lists `gvk`'s group version and keeps every kind it serves, in place
    /// of the kinds it served before; answers `gvk` from it (None: not
    /// served). A kind named by several resources is the first one's, as a
    /// lookup of that kind alone would find.
    async fn list(&self, gvk: &Gvk) -> Result<Option<Arc<Resolved>>, kube::Error> {
        let group_version = GroupVersion::gv(&gvk.group, &gvk.version);
        let group = kube::discovery::pinned_group(&self.client, &group_version).await?;
        let now = Instant::now();
        let mut known = self.known.lock().unwrap();
        forget_group_version(&mut known, gvk);
        for (resource, caps) in group.versioned_resources(&gvk.version) {
            known
                .entry(Gvk::new(&gvk.group, &gvk.version, &resource.kind))
                .or_insert_with(|| {
                    let namespaced = caps.scope == kube::discovery::Scope::Namespaced;
                    (
                        now,
                        Arc::new(Resolved {
                            resource,
                            namespaced,
                        }),
                    )
                });
        }
        Ok(known.get(gvk).map(|(_, r)| r.clone()))
    }

    /// Remembers that `gvk` is not served (`message` says why) for
    /// [`MISS_TTL`].
    fn missed(&self, gvk: &Gvk, message: String) -> ResolveError {
        let error = ResolveError {
            gvk: gvk.to_string(),
            message,
        };
        let mut misses = self.misses.lock().unwrap();
        if misses.len() >= MAX_MISSES {
            misses.retain(|_, (at, _)| at.elapsed() < MISS_TTL);
            if misses.len() >= MAX_MISSES {
                misses.clear();
            }
        }
        misses.insert(gvk.clone(), (Instant::now(), error.clone()));
        error
    }
}

/// Drops every kind of `gvk`'s group version from `known`.
fn forget_group_version(known: &mut HashMap<Gvk, (Instant, Arc<Resolved>)>, gvk: &Gvk) {
    known.retain(|k, _| k.group != gvk.group || k.version != gvk.version);
}

/// Whether discovery answered that the group version is not served (as
/// opposed to not answering).
fn not_served(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 404)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests the API server answered so far (its own metrics).
    async fn answered(client: &Client) -> f64 {
        let text = wasmctrl_testkit::client::metrics_text(client).await;
        text.lines()
            .filter(|l| l.starts_with("wasmctrl_apiserver_requests_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_kinds_of_a_group_version_share_one_listing() {
        let server = wasmctrl_apiserver::ApiServer::start(wasmctrl_apiserver::Config::default())
            .await
            .unwrap();
        let client = wasmctrl_testkit::client::client_for(&server.kubeconfig()).await;
        let resolver = Resolver::new(client.clone());
        let before = answered(&client).await;
        let kinds = ["Pod", "ConfigMap", "Secret", "Namespace"].map(|k| Gvk::new("", "v1", k));
        let resolved = futures::future::join_all(kinds.iter().map(|k| resolver.resolve(k))).await;
        let resolved: Vec<_> = resolved.into_iter().map(Result::unwrap).collect();
        assert_eq!(resolved[0].resource.plural, "pods");
        assert!(resolved[0].namespaced);
        assert_eq!(resolved[3].resource.plural, "namespaces");
        assert!(!resolved[3].namespaced);
        // The listing and the first scrape.
        assert_eq!(answered(&client).await - before, 2.0);

        let before = answered(&client).await;
        let missing = Gvk::new("", "v1", "NoSuchKind");
        let e = resolver.resolve(&missing).await.unwrap_err();
        assert!(e.message.contains("Missing Kind"), "{e}");
        assert!(resolver.resolve(&missing).await.is_err());
        assert!(resolver.resolve(&Gvk::new("", "v1", "Pod")).await.is_ok());
        assert_eq!(
            answered(&client).await - before,
            2.0,
            "a miss is remembered and a listed kind is known"
        );

        let e = resolver
            .resolve(&Gvk::new("example.com", "v1", "Widget"))
            .await
            .unwrap_err();
        assert!(e.message.contains("404"), "{e}");
        assert!(resolver.listing.lock().unwrap().is_empty());
    }

    /// A CRD of kind `Widget` in example.com/v1, as `plural` in `scope`.
    async fn widget_crd(client: &Client, plural: &str, scope: &str) {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.example.com")},
            "spec": {
                "group": "example.com",
                "scope": scope,
                "names": {"plural": plural, "singular": "widget", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
            },
        }))
        .unwrap();
        kube::Api::<CustomResourceDefinition>::all(client.clone())
            .create(&Default::default(), &crd)
            .await
            .unwrap();
    }

    /// Deletes CRD `name` and waits until it is gone: a CRD is removed,
    /// and its resources leave discovery, once its objects are cleaned up.
    async fn delete_crd(client: &Client, name: &str) {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let crds = kube::Api::<CustomResourceDefinition>::all(client.clone());
        crds.delete(name, &Default::default()).await.unwrap();
        wasmctrl_testkit::eventually("the CRD gone", Duration::from_secs(30), || async {
            matches!(crds.get_opt(name).await, Ok(None))
        })
        .await;
    }

    /// A server serving the namespaced kind Widget (CRD
    /// `widgets.example.com`), and a resolver that lists again at every
    /// resolve.
    async fn resolving_widgets_afresh() -> (wasmctrl_apiserver::ApiServer, Client, Resolver, Gvk) {
        let server = wasmctrl_apiserver::ApiServer::start(wasmctrl_apiserver::Config::default())
            .await
            .unwrap();
        let client = wasmctrl_testkit::client::client_for(&server.kubeconfig()).await;
        let resolver = Resolver::with_known_ttl(client.clone(), Duration::ZERO);
        widget_crd(&client, "widgets", "Namespaced").await;
        (
            server,
            client,
            resolver,
            Gvk::new("example.com", "v1", "Widget"),
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_kind_is_listed_again_once_old_and_served_as_last_listed_if_that_fails() {
        let (server, client, resolver, widget) = resolving_widgets_afresh().await;
        let first = resolver.resolve(&widget).await.unwrap();
        assert_eq!(
            (first.resource.plural.as_str(), first.namespaced),
            ("widgets", true)
        );

        // Recreated under another plural and scope: found as it is now.
        delete_crd(&client, "widgets.example.com").await;
        widget_crd(&client, "gadgets", "Cluster").await;
        let now = resolver.resolve(&widget).await.unwrap();
        assert_eq!(
            (now.resource.plural.as_str(), now.namespaced),
            ("gadgets", false)
        );

        // The server gone: the kind as last listed.
        server.shutdown().await;
        let stale = resolver.resolve(&widget).await.unwrap();
        assert_eq!(stale.resource.plural, "gadgets");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_kind_whose_crd_is_deleted_is_forgotten_at_the_next_listing() {
        let (_server, client, resolver, widget) = resolving_widgets_afresh().await;
        resolver.resolve(&widget).await.unwrap();
        delete_crd(&client, "widgets.example.com").await;
        let e = resolver.resolve(&widget).await.unwrap_err();
        assert!(
            e.to_string().contains("does not serve example.com/v1"),
            "{e}"
        );
        assert!(
            resolver
                .known
                .lock()
                .unwrap()
                .keys()
                .all(|k| k.kind != "Widget")
        );
    }
}
