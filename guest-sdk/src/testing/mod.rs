//! Unit-test a reconciler natively, against an in-memory fake API server
//! (feature `testing`; not available inside a wasm component).
//!
//! ```toml
//! [dev-dependencies]
//! wasmctrl-sdk = { path = "../../guest-sdk", features = ["testing"] }
//! ```
//!
//! ```
//! use wasmctrl_sdk::k8s_openapi::api::core::v1::ConfigMap;
//! use wasmctrl_sdk::serde_json::json;
//! use wasmctrl_sdk::testing::FakeCluster;
//! use wasmctrl_sdk::{Action, Api, Context, Error, Metadata, ObjectKey, Patch, Reconciler, Resource};
//!
//! /// Labels every ConfigMap `seen=yes`.
//! struct Labeler;
//!
//! impl Reconciler for Labeler {
//!     fn metadata() -> Metadata {
//!         Metadata::new("labeler", "0.1.0", ConfigMap::gvk())
//!             .permission("", &["configmaps"], &["list", "watch", "patch"])
//!     }
//!
//!     fn reconcile(key: ObjectKey, _ctx: &Context) -> Result<Action, Error> {
//!         let api = Api::<ConfigMap>::namespaced(key.require_namespace()?);
//!         api.patch(&key.name, &Patch::Merge(json!({"metadata": {"labels": {"seen": "yes"}}})))?;
//!         Ok(Action::done())
//!     }
//! }
//!
//! let cluster = FakeCluster::new();
//! let configmaps = Api::<ConfigMap>::namespaced("default");
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("app".into());
//! configmaps.create(&cm).unwrap();
//!
//! let key = ObjectKey::namespaced("default", "app");
//! assert_eq!(cluster.reconcile::<Labeler>(&key), Ok(Action::done()));
//! let labels = configmaps.get("app").unwrap().metadata.labels.unwrap();
//! assert_eq!(labels["seen"], "yes");
//! assert!(cluster.unused_permissions::<Labeler>().is_empty());
//! ```
//!
//! While a [`FakeCluster`] exists, every SDK call on its thread ([`Api`](crate::Api),
//! events, [`Context`](crate::Context), logging) goes to it; tests use the same `Api` to set
//! the scene and to look at the result. During [`FakeCluster::reconcile`],
//! each call is checked against the reconciler's declared permissions, as
//! the host checks it against the grant: a call the metadata does not cover
//! fails with `forbidden`.
//!
//! # What the fake models, and what it does not
//!
//! Objects are JSON, keyed by group, kind, namespace and name (one stored
//! version per kind). Writes assign `uid`, `resourceVersion`,
//! `creationTimestamp` and `generation` (bumped when anything outside
//! `metadata` and `status` changes); a write that changes nothing is a no-op.
//! Every kind behaves as if it had a status subresource: writes to the object
//! keep the stored `status`, status writes change only `status`. A
//! `resourceVersion` in a replace or patch body must match (else `conflict`).
//! Merge and JSON patches follow RFC 7386 and RFC 6902 as kube-apiserver
//! applies them (a failed `test` is `invalid`; `null` tests an absent
//! member), within its bounds on operations, copies and depth. Deleting an
//! object with finalizers sets its `deletionTimestamp`; it goes away when
//! the last finalizer is removed, and then objects whose ownerReferences
//! name its uid are deleted too (background garbage collection). Label
//! selectors take Kubernetes' full grammar
//! (`k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`), with
//! keys and values checked and the host's bounds of 64 requirements and 64
//! values per set; a selector that does not parse is `invalid`, whether or
//! not anything would match.
//!
//! Server-side apply is modelled as "create, or merge the applied object into
//! the stored one": there is no field ownership, so no apply conflicts and no
//! removal of fields a manager stopped setting. Lists are replaced whole. The
//! permission check derives plurals from kinds the way Kubernetes does by
//! default (`Deployment` → `deployments`, `Ingress` → `ingresses`, `Policy` →
//! `policies`).

pub(crate) mod fake;
mod permissions;
mod state;
mod transcript;

use std::marker::PhantomData;

use serde_json::Value;

use state::{State, with};
pub use transcript::TranscriptError;

use crate::{Action, ApiError, Error, ObjectKey, Reconciler};

/// One call the SDK made through the host's `kube` interface.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// `get`, `list`, `create`, `replace`, `patch`, `replace-status`,
    /// `patch-status`, `delete` or `record-event`.
    pub verb: &'static str,
    pub kind: crate::Gvk,
    pub namespace: Option<String>,
    /// "" for `list` and `create`.
    pub name: String,
    /// What was sent: the object, the patch, the label selector of a list
    /// (a string, or null), or for an event `{type, reason, action, note}`.
    pub body: Value,
    /// For patches: `merge`, `json`, or `apply <field manager> force=<bool>`.
    pub patch: String,
}

/// The in-memory API server of this thread's tests; see the [module
/// docs](self). Dropping it uninstalls it.
pub struct FakeCluster {
    // Thread-bound: the state lives in a thread-local.
    _not_send: PhantomData<*const ()>,
}

impl FakeCluster {
    /// An empty cluster, installed for the current thread (replacing any
    /// previous one).
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        state::install(Some(State::default()));
        crate::http::answer_with(fake::http::send);
        Self {
            _not_send: PhantomData,
        }
    }

    /// Runs `R::reconcile(key)` as the host would, with every call checked
    /// against `R::metadata()`'s permissions.
    pub fn reconcile<R: Reconciler>(&self, key: &ObjectKey) -> Result<Action, Error> {
        let permissions = R::metadata().into_wit().permissions;
        with(|s| s.permissions = Some(permissions));
        let result = R::reconcile(key.clone(), &crate::Context::current());
        with(|s| s.permissions = None);
        result
    }

    /// The value `Context::attempt` returns.
    pub fn set_attempt(&self, attempt: u32) {
        with(|s| s.attempt = attempt);
    }

    /// The JSON `Context::settings` returns.
    pub fn set_settings(&self, settings: Value) {
        with(|s| s.settings = settings.to_string());
    }

    /// Answers the next outbound `method url` request (`wasmctrl_sdk::http`)
    /// with `status` and `body`, once; a request without a canned answer
    /// fails as one the host refused.
    pub fn answer_http(&self, method: &str, url: &str, status: u16, body: &[u8]) {
        let answer = crate::http::Response {
            status,
            headers: Vec::new(),
            body: body.to_vec(),
        };
        with(|s| {
            s.http_answers
                .push((method.to_string(), url.to_string(), answer))
        });
    }

    /// Gives the plugin secret `name`: `secrets::reveal` answers `value`
    /// where `reveal` is true and refuses as the host does otherwise.
    /// Requests keep the `${secret:NAME}` placeholders as written
    /// ([`Self::http_requests`]): the host substitutes them, never the
    /// plugin.
    pub fn set_secret(&self, name: &str, value: &str, reveal: bool) {
        with(|s| {
            s.secrets
                .insert(name.to_string(), (value.to_string(), reveal))
        });
    }

    /// Every outbound HTTP request made since the cluster was created.
    pub fn http_requests(&self) -> Vec<crate::http::Request> {
        with(|s| s.http_sent.clone())
    }

    /// Makes the next call with `verb` fail with `error` (once).
    pub fn fail_next(&self, verb: &str, error: ApiError) {
        with(|s| s.faults.push((verb.to_string(), error)));
    }

    /// Every call made since the cluster was created or [`Self::clear_calls`].
    pub fn calls(&self) -> Vec<Call> {
        with(|s| s.calls.clone())
    }

    pub fn clear_calls(&self) {
        with(|s| s.calls.clear());
    }

    /// The events recorded: `(kind, namespace, name, body)` as in [`Call`].
    pub fn events(&self) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.verb == "record-event")
            .collect()
    }

    /// Each `(verb, group, resource)` the calls made inside
    /// [`Self::reconcile`] so far needed permission for (status writes name
    /// `<plural>/status`; events are `create` on `events.k8s.io/events`).
    pub fn permissions_used(&self) -> Vec<(String, String, String)> {
        with(|s| s.used.iter().cloned().collect())
    }

    /// The permissions `R::metadata()` declares that no reconcile so far
    /// needed, as `(verb, group, resource)`; `list` and `watch` are left out
    /// (the host's informers use them for `for`, `owns` and `watches`). After
    /// a test that walks every path, an empty result means the metadata asks
    /// for exactly what the plugin uses.
    pub fn unused_permissions<R: Reconciler>(&self) -> Vec<(String, String, String)> {
        let used = with(|s| s.used.clone());
        let mut unused = Vec::new();
        for p in R::metadata().into_wit().permissions {
            for resource in &p.resources {
                for verb in &p.verbs {
                    let need = (verb.clone(), p.group.clone(), resource.clone());
                    if verb != "list" && verb != "watch" && !used.contains(&need) {
                        unused.push(need);
                    }
                }
            }
        }
        unused
    }
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        state::install(None);
    }
}

mod admission;
#[cfg(test)]
mod tests;
