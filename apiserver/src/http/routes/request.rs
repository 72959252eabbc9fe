//! A request as the synchronous handlers see it, and the state they leave
//! for the async layer.

use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, Method};
use serde_json::Value;

use super::params::Query;
use crate::auth::identity::UserInfo;
use crate::registry::storage::Durable;

/// Per-request state the synchronous handlers leave for the async layer.
#[derive(Default)]
pub(super) struct RequestScope {
    /// Staged writes the response must wait for (see [`WriteCtx::pending`]).
    ///
    /// [`WriteCtx::pending`]: crate::registry::writes::WriteCtx::pending
    pub(super) pending: Arc<Mutex<Vec<Durable>>>,
    /// The name a create gave its object (for the audit).
    created: Mutex<Option<String>>,
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
}

/// One request as the synchronous handlers see it.
#[derive(Clone, Copy)]
pub(super) struct Req<'a> {
    pub(super) method: &'a Method,
    pub(super) q: &'a Query,
    pub(super) headers: &'a HeaderMap,
    pub(super) body: &'a [u8],
    pub(super) scope: &'a RequestScope,
    /// Whom the request acts as (after impersonation).
    pub(super) user: &'a UserInfo,
}
