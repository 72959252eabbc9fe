//! The `/scale` subresource: an autoscaling/v1 Scale view built from the
//! resource's replica and selector paths, written back through the normal
//! update rules.

use serde_json::{Map, Value, json};

use super::Objects;
use super::resources::ResourceInfo;
use super::views::from_view;
use super::writes::{MAX_RETRIES, PatchKind, Subresource, WriteCtx, patch_error};
use crate::admission::Operation;
use crate::error::{ApiError, Cause};
use crate::patch;
use crate::values::meta_str;

impl Objects {
    /// Scale subresource view of an object.
    pub(crate) fn scale_of(&self, info: &ResourceInfo, obj: &Value) -> Result<Value, ApiError> {
        let Some(paths) = &info.scale else {
            return Err(ApiError::no_route());
        };
        let get_i = |p: &str| {
            crate::values::get_path(obj, p)
                .and_then(Value::as_i64)
                .unwrap_or(0)
        };
        let mut status = Map::new();
        status.insert("replicas".into(), json!(get_i(&paths.status_replicas)));
        match &paths.label_selector {
            Some(p) => {
                if let Some(s) = crate::values::get_path(obj, p).and_then(Value::as_str) {
                    status.insert("selector".into(), json!(s));
                }
            }
            None => {
                if let Some(sel) = obj
                    .get("spec")
                    .and_then(|s| s.get("selector"))
                    .and_then(super::selectors::LabelSelector::from_object)
                {
                    status.insert("selector".into(), json!(sel.to_selector_string()));
                }
            }
        }
        let md = &obj["metadata"];
        let mut smd = Map::new();
        for f in [
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "creationTimestamp",
        ] {
            if let Some(v) = md.get(f) {
                smd.insert(f.into(), v.clone());
            }
        }
        Ok(json!({
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": smd,
            "spec": {"replicas": get_i(&paths.spec_replicas)},
            "status": status,
        }))
    }

    /// Writes a Scale (PUT or the result of a PATCH of the Scale view).
    /// Admission sees Scales: the one sent and, to validate, the one the
    /// write comes to.
    pub(crate) async fn write_scale(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        kind: Option<PatchKind>,
        body: &[u8],
        ctx: &WriteCtx,
    ) -> Result<Value, ApiError> {
        let Some(paths) = info.scale.clone() else {
            return Err(ApiError::no_route());
        };
        let ns = self.ns_for(info, ns);
        let doc: Value = serde_json::from_slice(body).map_err(|e| {
            self.metrics.exceeded_if(crate::metrics::json_limit(&e));
            ApiError::BadRequest(format!("error decoding body: {e}"))
        })?;
        let admitting = self.admitting(info, Some("scale"), ctx);
        for _ in 0..MAX_RETRIES {
            let cur = self.load(info, &ns, name)?;
            let scale = self.scale_of(info, &cur.obj)?;
            let mut new_scale = match kind {
                None => doc.clone(),
                Some(PatchKind::Merge) | Some(PatchKind::Strategic) => {
                    patch::merge_patch(&scale, &doc)
                        .map_err(|e| patch_error(info, name, e, PatchKind::Merge))?
                }
                Some(PatchKind::Json) => {
                    patch::json_patch_bounded(&scale, &doc).map_err(|(e, limit)| {
                        self.metrics.exceeded_if(limit);
                        patch_error(info, name, e, PatchKind::Json)
                    })?
                }
                Some(PatchKind::Apply { .. }) => {
                    return Err(ApiError::UnsupportedMediaType(
                        "apply is not supported on the scale subresource".into(),
                    ));
                }
            };
            if let Some(rv) = meta_str(&new_scale, "resourceVersion")
                && !rv.is_empty()
                && rv != cur.rv.to_string()
            {
                return Err(ApiError::stale(&info.group, &info.plural, name));
            }
            if let Some(a) = &admitting {
                a.typed(&mut new_scale);
                let options = a.write_options(Operation::Update);
                a.mutate(
                    Operation::Update,
                    (&ns, name),
                    Some(&mut new_scale),
                    Some(&scale),
                    options,
                )
                .await?;
            }
            let Some(replicas) = new_scale["spec"]["replicas"].as_i64() else {
                return Err(ApiError::invalid(
                    "autoscaling",
                    "Scale",
                    name,
                    vec![Cause {
                        reason: "FieldValueRequired".into(),
                        message: "Required value".into(),
                        field: "spec.replicas".into(),
                    }],
                ));
            };
            let mut obj = (*cur.obj).clone();
            crate::values::set_path(&mut obj, &paths.spec_replicas, json!(replicas));
            let outcome = self.prepare_update(info, &cur.obj, obj, Subresource::Main, ctx, true)?;
            if let Some(a) = &admitting {
                let options = a.write_options(Operation::Update);
                let after = self.scale_of(info, outcome.object(&cur.obj))?;
                a.validate(
                    Operation::Update,
                    (&ns, name),
                    Some(&after),
                    Some(&scale),
                    options,
                )
                .await?;
            }
            if let Some(v) = self.finish_update(info, &ns, name, &cur, outcome, ctx)? {
                let stored = from_view(info, v);
                return self.scale_of(info, &stored);
            }
        }
        Err(ApiError::stale(&info.group, &info.plural, name))
    }
}
