//! PATCH: merge, JSON, strategic merge and server-side apply (which
//! creates an absent object).

use serde_json::{Value, json};

use super::context::{MAX_RETRIES, PatchKind, Subresource, WriteCtx};
use super::errors::{patch_error, smp_unsupported};
use crate::admission::Operation;
use crate::error::{ApiError, Cause};
use crate::patch::{self, ApplyRequest, PatchError};
use crate::registry::Objects;
use crate::registry::resources::ResourceInfo;
use crate::registry::storage::{Change, Expect, StoreError};
use crate::registry::views::{from_view, to_view};
use crate::values::{meta_str, metadata_mut, now_rfc3339};

impl Objects {
    /// PATCH (main resource or /status). Returns the object and whether an
    /// apply created it (201). Each attempt is admitted anew against the
    /// object it patched: as an UPDATE, or a CREATE when an apply creates.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn patch_object(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        kind: PatchKind,
        body: &[u8],
        sub: Subresource,
        ctx: &WriteCtx,
    ) -> Result<(Value, bool), ApiError> {
        let ns = self.ns_for(info, ns);
        if kind == PatchKind::Strategic && !info.builtin {
            return Err(smp_unsupported());
        }
        let doc: Value = match kind {
            PatchKind::Apply { .. } => crate::yaml::from_slice(body).map_err(|e| {
                self.metrics.exceeded_if(e.limit);
                ApiError::BadRequest(format!("error decoding YAML: {e}"))
            })?,
            _ => serde_json::from_slice(body).map_err(|e| {
                self.metrics.exceeded_if(crate::metrics::json_limit(&e));
                ApiError::BadRequest(format!("error decoding patch: {e}"))
            })?,
        };
        if let PatchKind::Apply { .. } = kind {
            self.check_apply_body(info, name, &doc, ctx)?;
        }
        let admitting = self.admitting(info, sub.name(), ctx);
        for _ in 0..MAX_RETRIES {
            let cur = self.store.latest(&info.storage, &ns, name);
            let cur_view = cur.as_ref().map(|c| to_view(info, &c.obj));
            let mut patched = match (kind, &cur_view) {
                (PatchKind::Apply { force }, _) => {
                    let now = now_rfc3339();
                    let api_version = info.api_version();
                    let mut live = cur_view.clone();
                    if let Some(l) = &mut live {
                        metadata_mut(l).remove("resourceVersion");
                    }
                    patch::server_side_apply(ApplyRequest {
                        live: live.as_ref(),
                        applied: &doc,
                        manager: &ctx.manager,
                        force,
                        api_version: &api_version,
                        kind: &info.kind,
                        schema: info.schema.as_ref(),
                        subresource: sub.name(),
                        now: &now,
                    })
                }
                (_, None) => return Err(ApiError::not_found(&info.group, &info.plural, name)),
                (PatchKind::Merge, Some(c)) => patch::merge_patch(c, &doc),
                (PatchKind::Json, Some(c)) => {
                    patch::json_patch_bounded(c, &doc).map_err(|(e, limit)| {
                        self.metrics.exceeded_if(limit);
                        e
                    })
                }
                (PatchKind::Strategic, Some(c)) => {
                    patch::strategic_merge_patch(c, &doc, &info.api_version(), &info.kind)
                }
            }
            .map_err(|e| match e {
                PatchError::Unsupported(_) if kind == PatchKind::Strategic => smp_unsupported(),
                e => patch_error(info, name, e, kind),
            })?;
            let Some(cur) = cur else {
                // Server-side apply of an absent object creates it.
                if sub == Subresource::Status {
                    return Err(ApiError::not_found(&info.group, &info.plural, name));
                }
                if let Some(refused) = &ctx.create_refusal {
                    return Err(refused.clone());
                }
                metadata_mut(&mut patched).insert("name".into(), json!(name));
                if let Some(a) = &admitting {
                    let options = a.write_options(Operation::Create);
                    a.mutate(
                        Operation::Create,
                        (&ns, name),
                        Some(&mut patched),
                        None,
                        options,
                    )
                    .await?;
                    self.check_type(info, &patched)?;
                }
                let obj = self.prepare_create(info, &ns, from_view(info, patched), ctx, false)?;
                if let Some(a) = &admitting {
                    let options = a.write_options(Operation::Create);
                    a.validate(
                        Operation::Create,
                        (&ns, name),
                        Some(&to_view(info, &obj)),
                        None,
                        options,
                    )
                    .await?;
                }
                match self.commit(info, &ns, name, Expect::Absent, Change::Put(obj), ctx) {
                    Ok(c) => return Ok((to_view(info, &c.object), true)),
                    Err(StoreError::Mismatch(_)) => continue,
                    Err(e) => return Err(self.store_error(info, name, e)),
                }
            };
            // A resourceVersion in the patched object is a precondition
            // (leader election relies on it).
            if let Some(rv) = meta_str(&patched, "resourceVersion")
                && !rv.is_empty()
                && rv != cur.rv.to_string()
            {
                return Err(ApiError::stale(&info.group, &info.plural, name));
            }
            if let (Some(a), Some(old_view)) = (&admitting, &cur_view) {
                a.mutate_update((&ns, name), &mut patched, old_view, &cur)
                    .await?;
                self.check_type(info, &patched)?;
            }
            let new = from_view(info, patched);
            let record = !matches!(kind, PatchKind::Apply { .. });
            let outcome = self.prepare_update(info, &cur.obj, new, sub, ctx, record)?;
            if let (Some(a), Some(old_view)) = (&admitting, &cur_view) {
                let new_view = to_view(info, outcome.object(&cur.obj));
                a.validate_update((&ns, name), &new_view, old_view).await?;
            }
            if let Some(v) = self.finish_update(info, &ns, name, &cur, outcome, ctx)? {
                return Ok((v, false));
            }
        }
        Err(ApiError::stale(&info.group, &info.plural, name))
    }

    pub(crate) fn check_apply_body(
        &self,
        info: &ResourceInfo,
        name: &str,
        doc: &Value,
        ctx: &WriteCtx,
    ) -> Result<(), ApiError> {
        if ctx.manager.is_empty() {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                vec![Cause {
                    reason: "FieldValueRequired".into(),
                    message: "Required value: is required for apply patch".into(),
                    field: "fieldManager".into(),
                }],
            ));
        }
        if !doc.is_object() {
            return Err(ApiError::BadRequest(
                "the object provided is unrecognized".into(),
            ));
        }
        let av = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
        if av.is_empty() || kind.is_empty() {
            return Err(ApiError::BadRequest(
                "invalid object type: apiVersion and kind must be set".into(),
            ));
        }
        self.check_type(info, doc)?;
        if let Some(n) = meta_str(doc, "name")
            && n != name
        {
            return Err(ApiError::BadRequest(
                "the name of the object does not match the name on the URL".into(),
            ));
        }
        if doc["metadata"]
            .get("managedFields")
            .is_some_and(|m| !m.is_null())
        {
            return Err(ApiError::BadRequest(
                "metadata.managedFields must be nil".into(),
            ));
        }
        Ok(())
    }
}
