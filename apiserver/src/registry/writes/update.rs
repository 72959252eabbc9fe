//! PUT, and committing an update's outcome at the resourceVersion it was
//! computed against.

use serde_json::Value;

use super::context::{MAX_RETRIES, Subresource, WriteCtx};
use super::prepare::Outcome;
use crate::error::ApiError;
use crate::registry::Objects;
use crate::registry::resources::ResourceInfo;
use crate::registry::storage::{Change, Expect, StoreError, Stored};
use crate::registry::views::{from_view, to_view};
use crate::values::meta_str;

impl Objects {
    pub(crate) fn load(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
    ) -> Result<Stored, ApiError> {
        self.store
            .latest(&info.storage, ns, name)
            .ok_or_else(|| ApiError::not_found(&info.group, &info.plural, name))
    }

    /// Commits the outcome of `prepare_update` against `cur`; `Ok(None)` means
    /// the store moved on and the caller should recompute.
    pub(crate) fn finish_update(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        cur: &Stored,
        outcome: Outcome,
        ctx: &WriteCtx,
    ) -> Result<Option<Value>, ApiError> {
        let change = match outcome {
            Outcome::NoOp => {
                // Answering with a staged state promises it is durable.
                ctx.wait_for(cur.durable.clone());
                return Ok(Some(to_view(info, &cur.obj)));
            }
            Outcome::Put(v) => Change::Put(v),
            Outcome::Delete(_) => Change::Delete,
        };
        match self.commit(info, ns, name, Expect::Rv(cur.rv), change, ctx) {
            Ok(c) => Ok(Some(to_view(info, &c.object))),
            Err(StoreError::Mismatch(_)) => Ok(None),
            Err(e) => Err(self.store_error(info, name, e)),
        }
    }

    /// PUT (main resource or /status). Each attempt is admitted anew
    /// against the object it read: mutating webhooks see the object as
    /// sent, validating ones the object as it would be stored.
    pub(crate) async fn update_object(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        mut body: Value,
        sub: Subresource,
        ctx: &WriteCtx,
    ) -> Result<Value, ApiError> {
        self.check_type(info, &body)?;
        let ns = self.ns_for(info, ns);
        let want_rv = meta_str(&body, "resourceVersion")
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        // As upstream, a uid in the body is a precondition: a replace from
        // a stale copy never overwrites an object recreated under the
        // same name.
        let want_uid = meta_str(&body, "uid")
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let admitting = self.admitting(info, sub.name(), ctx);
        if let Some(a) = &admitting {
            a.typed(&mut body);
        }
        for _ in 0..MAX_RETRIES {
            let cur = self.load(info, &ns, name)?;
            super::rules::uid_precondition(info, name, want_uid.as_deref(), &cur.obj)?;
            if let Some(rv) = &want_rv
                && *rv != cur.rv.to_string()
            {
                return Err(ApiError::stale(&info.group, &info.plural, name));
            }
            let mut view = body.clone();
            let old_view = match &admitting {
                Some(a) => {
                    let old_view = to_view(info, &cur.obj);
                    a.mutate_update((&ns, name), &mut view, &old_view, &cur)
                        .await?;
                    self.check_type(info, &view)?;
                    Some(old_view)
                }
                None => None,
            };
            let new = from_view(info, view);
            let outcome = self.prepare_update(info, &cur.obj, new, sub, ctx, true)?;
            if let (Some(a), Some(old_view)) = (&admitting, &old_view) {
                let new_view = to_view(info, outcome.object(&cur.obj));
                a.validate_update((&ns, name), &new_view, old_view).await?;
            }
            if let Some(v) = self.finish_update(info, &ns, name, &cur, outcome, ctx)? {
                return Ok(v);
            }
            if want_rv.is_some() {
                return Err(ApiError::stale(&info.group, &info.plural, name));
            }
        }
        Err(ApiError::stale(&info.group, &info.plural, name))
    }
}
