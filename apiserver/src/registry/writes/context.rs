//! A request's write parameters, and what a write addresses.

use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::warnings::Warnings;
use crate::admission::{Caller, Sink};
use crate::error::ApiError;
use crate::registry::storage::{Durable, Store};

/// How many times a write is recomputed when another writer commits first.
pub(crate) const MAX_RETRIES: usize = 64;

/// Per-request write parameters.
#[derive(Debug, Clone)]
pub(crate) struct WriteCtx {
    /// `fieldManager`, else the User-Agent up to the first `/`.
    pub(crate) manager: String,
    /// `dryRun=All`: compute and answer, store nothing, emit nothing.
    pub(crate) dry_run: bool,
    /// The write options the request's query set, as admission webhooks
    /// are shown them.
    pub(crate) query: QueryOptions,
    /// When the request must be answered: admission webhooks are called
    /// with no more than the time left. None for the server's own writes.
    pub(crate) deadline: Option<tokio::time::Instant>,
    /// `Warning` headers for the response (pruned unknown fields under the
    /// default `fieldValidation=Warn`, admission webhooks' warnings).
    /// Shared with the HTTP layer, which adds them to the response whether
    /// the write succeeded or not.
    pub(crate) warnings: Arc<Mutex<Warnings>>,
    /// Audit annotations admission webhooks added, for the audit log.
    pub(crate) audit_annotations: Arc<Mutex<Vec<(String, String)>>>,
    /// Who asks, for admission; `None` for the server's own writes, which
    /// webhooks never see.
    pub(crate) caller: Option<Arc<Caller>>,
    /// With persistence: the staged writes the response must wait for.
    /// Shared with the HTTP layer, which waits after the (synchronous)
    /// handler returns.
    pub(crate) pending: Arc<Mutex<Vec<Durable>>>,
    /// For an author RBAC authorizes, the check of what its writes of RBAC
    /// objects grant; `None` for the admin and the server's own writes.
    pub(crate) grants: Option<Arc<dyn GrantCheck>>,
    /// Why the author may not create what its write would create (a
    /// server-side apply of an absent object, authorized as a `patch`);
    /// `None` when it may.
    pub(crate) create_refusal: Option<ApiError>,
}

/// A check of what a write of a Role, ClusterRole, RoleBinding or
/// ClusterRoleBinding grants (`auth::escalation`), run on the object as it
/// would be stored.
pub(crate) trait GrantCheck: Send + Sync + std::fmt::Debug {
    /// `Ok` when `new`, an object of `resource` named `name` in
    /// `namespace` (empty: cluster scope) replacing `old` (None: being
    /// created), grants nothing its author may not grant; else the 403 to
    /// answer.
    fn check(
        &self,
        store: &Store,
        resource: &str,
        namespace: &str,
        name: &str,
        old: Option<&Value>,
        new: &Value,
    ) -> Result<(), ApiError>;
}

/// What a request's query said of its write options (`None`: nothing):
/// upstream decodes a review's `options` from the query alone, so a
/// field manager taken from the User-Agent is not shown.
#[derive(Clone, Debug, Default)]
pub(crate) struct QueryOptions {
    pub(crate) field_manager: Option<String>,
    /// `Strict`, `Warn` or `Ignore`.
    pub(crate) field_validation: Option<&'static str>,
}

impl WriteCtx {
    /// `fieldValidation=Strict`: unknown fields of a custom resource are a
    /// 400 instead of being pruned.
    pub(crate) fn strict(&self) -> bool {
        self.query.field_validation == Some("Strict")
    }

    /// A server-internal writer (garbage collector, namespace controller).
    pub(crate) fn system(manager: &str) -> Self {
        WriteCtx {
            manager: manager.to_string(),
            dry_run: false,
            query: QueryOptions::default(),
            deadline: None,
            warnings: Default::default(),
            audit_annotations: Default::default(),
            caller: None,
            pending: Default::default(),
            grants: None,
            create_refusal: None,
        }
    }

    /// Adds a `Warning` header to the response.
    pub(crate) fn warn(&self, text: String) {
        self.warnings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .add(text);
    }

    /// Makes the response wait until `durable` resolves (no-op for None).
    pub(crate) fn wait_for(&self, durable: Option<Durable>) {
        if let Some(d) = durable {
            self.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(d);
        }
    }
}

impl Sink for WriteCtx {
    fn warn(&self, text: String) {
        WriteCtx::warn(self, text);
    }

    fn annotate(&self, key: String, value: String) -> bool {
        let mut kept = self
            .audit_annotations
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if kept.len() >= crate::admission::MAX_REQUEST_ANNOTATIONS {
            return false;
        }
        kept.push((key, value));
        true
    }
}

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Subresource {
    Main,
    Status,
    /// A namespace's `spec.finalizers`, which only the namespace
    /// controller, or someone standing in for it, writes.
    Finalize,
}

impl Subresource {
    pub(crate) fn name(self) -> Option<&'static str> {
        match self {
            Subresource::Main => None,
            Subresource::Status => Some("status"),
            Subresource::Finalize => Some("finalize"),
        }
    }
}

/// A PATCH content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchKind {
    Merge,
    Json,
    Strategic,
    Apply { force: bool },
}
