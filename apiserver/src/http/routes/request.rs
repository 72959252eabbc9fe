//! A request as the handlers see it, and the state they leave for the
//! layer that answers it.

use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, Method};
use serde_json::Value;

use super::params::Query;
use crate::auth::identity::UserInfo;
use crate::registry::storage::Durable;
use crate::registry::writes::Warnings;

/// Per-request state the handlers leave for the layer that answers.
#[derive(Default)]
pub(super) struct RequestScope {
    /// Staged writes the response must wait for (see [`WriteCtx::pending`]).
    ///
    /// [`WriteCtx::pending`]: crate::registry::writes::WriteCtx::pending
    pub(super) pending: Arc<Mutex<Vec<Durable>>>,
    /// The name a create gave its object (for the audit).
    created: Mutex<Option<String>>,
    /// `Warning` headers of the response, whatever its status (see
    /// [`WriteCtx::warnings`]).
    ///
    /// [`WriteCtx::warnings`]: crate::registry::writes::WriteCtx::warnings
    pub(super) warnings: Arc<Mutex<Warnings>>,
    /// Audit annotations admission webhooks added.
    pub(super) audit_annotations: Arc<Mutex<Vec<(String, String)>>>,
}

impl RequestScope {
    pub(super) fn set_created(&self, obj: &Value) {
        if let Some(n) = crate::values::meta_str(obj, "name") {
            *self.created.lock().unwrap_or_else(|e| e.into_inner()) = Some(n.to_string());
        }
    }

    pub(super) fn created(&self) -> Option<String> {
        self.created
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(super) fn take_pending(&self) -> Vec<Durable> {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub(super) fn take_warnings(&self) -> Vec<String> {
        self.warnings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    pub(super) fn take_audit_annotations(&self) -> Vec<(String, String)> {
        std::mem::take(
            &mut *self
                .audit_annotations
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        )
    }
}

/// One request as the handlers see it.
#[derive(Clone, Copy)]
pub(super) struct Req<'a> {
    pub(super) method: &'a Method,
    pub(super) q: &'a Query,
    pub(super) headers: &'a HeaderMap,
    pub(super) body: &'a [u8],
    pub(super) scope: &'a RequestScope,
    /// Whom the request acts as (after impersonation).
    pub(super) user: &'a UserInfo,
    /// When the request must be answered (see [`super::deadline`]); None
    /// for a watch, which runs until its own `timeoutSeconds`.
    pub(super) deadline: Option<tokio::time::Instant>,
}
