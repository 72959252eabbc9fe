//! The create and update rules: what the server owns in an object's
//! metadata, what a write may change, and what an update comes to.

use serde_json::{Value, json};

use super::context::{Subresource, WriteCtx};
use super::defaults::{apply_builtin_defaults, fold_string_data};
use super::rbac;
use super::rules::{
    CRD_CLEANUP_FINALIZER, NAMESPACE_FINALIZER, apply_schema, comparable, finalizers,
    held_by_spec_finalizers, is_crd, is_namespace, normalize_finalizers, obj_name, spec_part,
    webhook_configuration,
};
use crate::error::{ApiError, Cause};
use crate::metrics::Limit;
use crate::patch;
use crate::registry::Objects;
use crate::registry::resources::ResourceInfo;
use crate::registry::validation;
use crate::values::{meta_str, metadata_mut, now_rfc3339};

/// What an update comes to once the update rules ran.
pub(crate) enum Outcome {
    /// Nothing changed: answer with the stored object, write nothing.
    NoOp,
    /// Store this object.
    Put(Value),
    /// The last finalizer of a deleting object is gone: delete it (the
    /// object as the update left it, which admission still sees).
    Delete(Value),
}

impl Outcome {
    /// The object the update comes to, `stored` when nothing changed.
    pub(crate) fn object<'a>(&'a self, stored: &'a Value) -> &'a Value {
        match self {
            Outcome::NoOp => stored,
            Outcome::Put(v) | Outcome::Delete(v) => v,
        }
    }
}

impl Objects {
    /// Defaults and checks a webhook configuration; a configuration over
    /// its bound of webhooks is counted.
    fn prepare_webhooks(
        &self,
        kind: crate::admission::ConfigKind,
        obj: &mut Value,
        old: Option<&Value>,
        ctx: &WriteCtx,
    ) -> Vec<Cause> {
        let causes = crate::admission::config::prepare(kind, obj, old);
        if causes.iter().any(|c| c.reason == "FieldValueTooMany") {
            self.metrics.exceeded(Limit::AdmissionWebhooks);
        }
        for name in crate::admission::config::with_match_conditions(obj) {
            ctx.warn(format!(
                "webhook {name:?}: matchConditions are not evaluated by this server; the webhook is called for every request its rules and selectors match"
            ));
        }
        causes
    }

    /// Metadata the server owns on create, plus type-specific defaults.
    pub(crate) fn prepare_create(
        &self,
        info: &ResourceInfo,
        ns: &str,
        mut obj: Value,
        ctx: &WriteCtx,
        record: bool,
    ) -> Result<Value, ApiError> {
        let now = now_rfc3339();
        let name = obj_name(&obj);
        {
            let md = metadata_mut(&mut obj);
            if info.namespaced {
                match md.get("namespace").and_then(Value::as_str) {
                    Some(n) if !n.is_empty() && n != ns => {
                        return Err(ApiError::BadRequest(
                            "the namespace of the provided object does not match the namespace sent on the request".into(),
                        ));
                    }
                    _ => {
                        md.insert("namespace".into(), json!(ns));
                    }
                }
            } else {
                md.remove("namespace");
            }
            for f in [
                "resourceVersion",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "selfLink",
            ] {
                md.remove(f);
            }
            // Apply computed field ownership already; other writers get
            // theirs from record_update below.
            if record {
                md.remove("managedFields");
            }
            md.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
            md.insert("creationTimestamp".into(), json!(now));
            if info.generation {
                md.insert("generation".into(), json!(1));
            } else {
                md.remove("generation");
            }
        }
        let mut causes = Vec::new();
        if name.is_empty() {
            causes.push(Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value: name or generateName is required".into(),
                field: "metadata.name".into(),
            });
        } else if is_crd(info) {
            // CRD names are checked against spec.names by the CRD hook.
        } else {
            causes.extend(validation::validate_name(
                &name,
                validation::name_rule(&info.group, &info.kind),
                "metadata.name",
            ));
        }
        if info.namespaced {
            causes.extend(validation::validate_namespace(ns));
        }
        causes.extend(validation::validate_metadata(&obj));
        if info.status && !is_crd(info) && !is_namespace(info) {
            // Status is written through /status only; creates start empty,
            // as the real strategies reset it.
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
        }
        apply_schema(info, &mut obj, ctx, &mut causes)?;
        normalize_finalizers(&mut obj);
        fold_string_data(info, &mut obj);
        apply_builtin_defaults(info, &mut obj);
        rbac::default(info, &mut obj);
        causes.extend(rbac::validate(info, &obj, None));
        if info.group.is_empty() && info.kind == "Pod" {
            // No kubelet will ever run it; Pending is where a real pod starts.
            obj["status"] = json!({"phase": "Pending"});
        }
        if is_namespace(info) {
            obj["spec"] = json!({"finalizers": [NAMESPACE_FINALIZER]});
            obj["status"] = json!({"phase": "Active"});
        }
        if is_crd(info) {
            causes.extend(crate::registry::crd::prepare(&mut obj, None, &now));
            let md = metadata_mut(&mut obj);
            let mut fins: Vec<Value> = md
                .get("finalizers")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if !fins.iter().any(|f| f == CRD_CLEANUP_FINALIZER) {
                fins.push(json!(CRD_CLEANUP_FINALIZER));
            }
            md.insert("finalizers".into(), Value::Array(fins));
        }
        if let Some(kind) = webhook_configuration(info) {
            causes.extend(self.prepare_webhooks(kind, &mut obj, None, ctx));
        }
        if !causes.is_empty() {
            // A missing name is a required field, not the name rules.
            let refused = |field: &str| {
                causes
                    .iter()
                    .any(|c| c.field == field && c.reason != "FieldValueRequired")
            };
            if refused("metadata.name") {
                self.metrics.exceeded(Limit::Name);
            }
            if refused("metadata.namespace") {
                self.metrics.exceeded(Limit::Namespace);
            }
            return Err(ApiError::invalid(&info.group, &info.kind, &name, causes));
        }
        if record {
            patch::record_update(
                None,
                &mut obj,
                &ctx.manager,
                info.schema.as_ref(),
                &info.api_version(),
                None,
                &now,
            );
        }
        self.check_grants(info, ns, &name, &obj, None, ctx)?;
        Ok(obj)
    }

    /// Applies the update rules to `new` (stored form) against `old`.
    pub(crate) fn prepare_update(
        &self,
        info: &ResourceInfo,
        old: &Value,
        mut new: Value,
        sub: Subresource,
        ctx: &WriteCtx,
        record: bool,
    ) -> Result<Outcome, ApiError> {
        let now = now_rfc3339();
        let name = obj_name(old);
        if !new.is_object() {
            return Err(ApiError::BadRequest(format!(
                "the object provided is unrecognized (must be of type {})",
                info.kind
            )));
        }
        match meta_str(&new, "name") {
            Some(n) if n == name => {}
            None | Some("") => {
                metadata_mut(&mut new).insert("name".into(), json!(name));
            }
            Some(_) => {
                return Err(ApiError::BadRequest(
                    "the name of the object does not match the name on the URL".into(),
                ));
            }
        }
        if info.namespaced {
            let old_ns = meta_str(old, "namespace").unwrap_or("").to_string();
            match meta_str(&new, "namespace") {
                Some(n) if !n.is_empty() && n != old_ns => {
                    return Err(ApiError::BadRequest(
                        "the namespace of the provided object does not match the namespace sent on the request".into(),
                    ));
                }
                _ => {
                    metadata_mut(&mut new).insert("namespace".into(), json!(old_ns));
                }
            }
        }
        if sub == Subresource::Status {
            // Only .status changes through /status; metadata edits other than
            // field ownership are dropped.
            let mut merged = old.clone();
            match new.get("status") {
                Some(s) => merged["status"] = s.clone(),
                None => {
                    if let Some(m) = merged.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            if let Some(mf) = new["metadata"].get("managedFields") {
                metadata_mut(&mut merged).insert("managedFields".into(), mf.clone());
            }
            new = merged;
        } else if info.status && !is_crd(info) {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
        // Server-owned metadata always comes from the stored object.
        {
            let old_md = old["metadata"].as_object().cloned().unwrap_or_default();
            let md = metadata_mut(&mut new);
            for f in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match old_md.get(f) {
                    Some(v) => {
                        md.insert(f.into(), v.clone());
                    }
                    None => {
                        md.remove(f);
                    }
                }
            }
            md.remove("resourceVersion");
            md.remove("selfLink");
        }
        normalize_finalizers(&mut new);
        fold_string_data(info, &mut new);
        apply_builtin_defaults(info, &mut new);
        let deleting = old["metadata"].get("deletionTimestamp").is_some();
        if deleting {
            let before = finalizers(old);
            if let Some(added) = finalizers(&new).into_iter().find(|f| !before.contains(f)) {
                return Err(ApiError::invalid(
                    &info.group,
                    &info.kind,
                    &name,
                    vec![Cause::forbidden(
                        "metadata.finalizers",
                        &format!(
                            "no new finalizers can be added if the object is being deleted, found new finalizers []string{{\"{added}\"}}"
                        ),
                    )],
                ));
            }
        }
        rbac::default(info, &mut new);
        let mut causes = validation::validate_metadata(&new);
        causes.extend(rbac::validate(info, &new, Some(old)));
        apply_schema(info, &mut new, ctx, &mut causes)?;
        if is_namespace(info) {
            // spec.finalizers and status belong to the namespace lifecycle:
            // each is written through its own subresource alone.
            let kept: &[&str] = match sub {
                Subresource::Main => &["spec", "status"],
                Subresource::Status => &["spec"],
                Subresource::Finalize => &["status"],
            };
            for f in kept {
                match old.get(*f) {
                    Some(v) => new[*f] = v.clone(),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove(*f);
                        }
                    }
                }
            }
            if sub == Subresource::Status {
                causes.extend(validation::validate_namespace_phase(&new, deleting));
            }
            if sub == Subresource::Finalize {
                causes.extend(validation::validate_namespace_finalizers(&new));
                // Upstream's serialization omits an empty list.
                if new["spec"]["finalizers"]
                    .as_array()
                    .is_some_and(Vec::is_empty)
                    && let Some(spec) = new["spec"].as_object_mut()
                {
                    spec.remove("finalizers");
                }
            }
        }
        if is_crd(info) {
            causes.extend(crate::registry::crd::prepare(&mut new, Some(old), &now));
        }
        if let Some(kind) = webhook_configuration(info) {
            causes.extend(self.prepare_webhooks(kind, &mut new, Some(old), ctx));
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid(&info.group, &info.kind, &name, causes));
        }
        if record {
            let mut old_view = old.clone();
            metadata_mut(&mut old_view).remove("resourceVersion");
            patch::record_update(
                Some(&old_view),
                &mut new,
                &ctx.manager,
                info.schema.as_ref(),
                &info.api_version(),
                sub.name(),
                &now,
            );
        }
        if comparable(&new) == comparable(old) {
            return Ok(Outcome::NoOp);
        }
        if info.generation && spec_part(info, &new) != spec_part(info, old) {
            let g = old["metadata"]["generation"].as_i64().unwrap_or(0);
            metadata_mut(&mut new).insert("generation".into(), json!(g + 1));
        }
        let ns = meta_str(old, "namespace").unwrap_or("");
        self.check_grants(info, ns, &name, &new, Some(old), ctx)?;
        // A namespace also waits for its spec.finalizers: the namespace
        // controller's, until its contents are gone.
        let held_by_spec = is_namespace(info) && held_by_spec_finalizers(&new);
        if deleting && finalizers(&new).is_empty() && !held_by_spec {
            return Ok(Outcome::Delete(new));
        }
        Ok(Outcome::Put(new))
    }
}
