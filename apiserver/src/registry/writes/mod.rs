//! Object semantics between HTTP and the store: system metadata, generation,
//! status-subresource rules, no-op detection, finalizer rules, patches
//! (through [`crate::patch`]) and the CRD hooks. Deletion is in
//! [`super::delete`], the scale subresource in [`super::scale`]. Writes follow the
//! real server's GuaranteedUpdate: read, compute outside the store lock,
//! commit at the read resourceVersion, retry if someone else got there first.

use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};

use super::Objects;
use super::resources::ResourceInfo;
use super::storage::{Change, Committed, Durable, EventType, Expect, StoreError, Stored};
use super::validation;
use super::views::{from_view, to_view};
use crate::error::{ApiError, Cause};
use crate::metrics::Limit;
use crate::patch::{self, ApplyRequest, PatchError};
use crate::values::{meta_str, metadata_mut, now_rfc3339, random_suffix};

/// How many times a write is recomputed when another writer commits first.
pub(crate) const MAX_RETRIES: usize = 64;

/// Per-request write parameters.
#[derive(Debug, Clone)]
pub(crate) struct WriteCtx {
    /// `fieldManager`, else the User-Agent up to the first `/`.
    pub(crate) manager: String,
    /// `dryRun=All`: compute and answer, store nothing, emit nothing.
    pub(crate) dry_run: bool,
    /// `fieldValidation=Strict`: unknown fields of a custom resource are a
    /// 400 instead of being pruned.
    pub(crate) strict: bool,
    /// `Warning` headers for the response (pruned unknown fields under the
    /// default `fieldValidation=Warn`).
    pub(crate) warnings: std::cell::RefCell<Vec<String>>,
    /// With persistence: the staged writes the response must wait for.
    /// Shared with the HTTP layer, which waits after the (synchronous)
    /// handler returns.
    pub(crate) pending: Arc<Mutex<Vec<Durable>>>,
}

impl WriteCtx {
    /// A server-internal writer (garbage collector, namespace controller).
    pub(crate) fn system(manager: &str) -> Self {
        WriteCtx {
            manager: manager.to_string(),
            dry_run: false,
            strict: false,
            warnings: Default::default(),
            pending: Default::default(),
        }
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

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Subresource {
    Main,
    Status,
}

impl Subresource {
    pub(crate) fn name(self) -> Option<&'static str> {
        match self {
            Subresource::Main => None,
            Subresource::Status => Some("status"),
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

/// What an update comes to once the update rules ran.
pub(crate) enum Outcome {
    /// Nothing changed: answer with the stored object, write nothing.
    NoOp,
    /// Store this object.
    Put(Value),
    /// The last finalizer of a deleting object is gone: delete it.
    Delete,
}

/// The finalizer a CRD carries until its custom resources are gone.
pub(crate) const CRD_CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

pub(crate) fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(e.to_string())
}

pub(crate) fn obj_name(obj: &Value) -> String {
    meta_str(obj, "name").unwrap_or("").to_string()
}

/// Maps a patch engine error to the real server's status.
pub(crate) fn patch_error(
    info: &ResourceInfo,
    name: &str,
    e: PatchError,
    kind: PatchKind,
) -> ApiError {
    match e {
        PatchError::Invalid(m) => match kind {
            PatchKind::Json => ApiError::invalid(
                &info.group,
                &info.kind,
                name,
                vec![Cause {
                    reason: "FieldValueInvalid".into(),
                    message: m,
                    field: String::new(),
                }],
            ),
            _ => ApiError::BadRequest(m),
        },
        PatchError::TestFailed(m) => ApiError::invalid(
            &info.group,
            &info.kind,
            name,
            vec![Cause {
                reason: "FieldValueInvalid".into(),
                message: m,
                field: String::new(),
            }],
        ),
        PatchError::Conflict { message, conflicts } => ApiError::Conflict {
            message,
            name: name.to_string(),
            group: info.group.clone(),
            kind: info.plural.clone(),
            causes: conflicts
                .into_iter()
                .map(|field| Cause {
                    reason: "FieldManagerConflict".into(),
                    message: format!("conflict with field {field}"),
                    field,
                })
                .collect(),
        },
        PatchError::Unsupported(m) => ApiError::UnsupportedMediaType(m),
        PatchError::TooLarge(m) => ApiError::RequestEntityTooLarge(m),
    }
}

/// The 415 the real server gives a strategic merge patch of a custom resource.
pub(crate) fn smp_unsupported() -> ApiError {
    ApiError::UnsupportedMediaType("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into())
}

/// Drops an empty finalizer list (stored as absent so a JSON patch
/// `test /metadata/finalizers == null` behaves as kube-runtime expects).
pub(crate) fn normalize_finalizers(obj: &mut Value) {
    let md = metadata_mut(obj);
    if md
        .get("finalizers")
        .is_some_and(|f| f.is_null() || f.as_array().is_some_and(Vec::is_empty))
    {
        md.remove("finalizers");
    }
    for f in ["labels", "annotations", "ownerReferences"] {
        if md.get(f).is_some_and(Value::is_null) {
            md.remove(f);
        }
    }
}

pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// A copy without what a no-op check must ignore: the resourceVersion and
/// the timestamps of managedFields entries.
fn comparable(obj: &Value) -> Value {
    let mut o = obj.clone();
    let md = metadata_mut(&mut o);
    md.remove("resourceVersion");
    if let Some(Value::Array(mf)) = md.get_mut("managedFields") {
        for e in mf {
            if let Some(m) = e.as_object_mut() {
                m.remove("time");
            }
        }
    }
    o
}

/// The part of an object whose change bumps `metadata.generation`.
fn spec_part(info: &ResourceInfo, obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
        if info.status {
            m.remove("status");
        }
    }
    o
}

/// Prunes, defaults and validates a custom resource against its schema.
fn apply_schema(
    info: &ResourceInfo,
    obj: &mut Value,
    ctx: &WriteCtx,
    causes: &mut Vec<Cause>,
) -> Result<(), ApiError> {
    let Some(schema) = &info.schema else {
        return Ok(());
    };
    let out = super::schema::apply(obj, schema);
    if ctx.strict && !out.pruned.is_empty() {
        let fields = out
            .pruned
            .iter()
            .map(|p| format!("unknown field \"{p}\""))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(ApiError::BadRequest(format!(
            "strict decoding error: {fields}"
        )));
    }
    ctx.warnings
        .borrow_mut()
        .extend(out.pruned.iter().map(|p| format!("unknown field \"{p}\"")));
    causes.extend(out.causes);
    Ok(())
}

/// The handful of built-in defaults clients commonly read back (the real
/// server defaults far more; these are the ones controllers and kubectl
/// output rely on). Applied on every write, as the real server defaults on
/// every decode, so they never show up as changes.
fn apply_builtin_defaults(info: &ResourceInfo, obj: &mut Value) {
    if !info.builtin {
        return;
    }
    let set_if_absent = |v: &mut Value, key: &str, default: Value| {
        if let Some(m) = v.as_object_mut()
            && m.get(key).is_none_or(Value::is_null)
        {
            m.insert(key.to_string(), default);
        }
    };
    match (info.group.as_str(), info.kind.as_str()) {
        ("", "Secret") => set_if_absent(obj, "type", json!("Opaque")),
        ("", "Service") => {
            set_if_absent(obj, "spec", json!({}));
            let spec = &mut obj["spec"];
            set_if_absent(spec, "type", json!("ClusterIP"));
            set_if_absent(spec, "sessionAffinity", json!("None"));
            if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                for p in ports {
                    set_if_absent(p, "protocol", json!("TCP"));
                    let port = p.get("port").cloned();
                    if let Some(port) = port {
                        set_if_absent(p, "targetPort", port);
                    }
                }
            }
        }
        ("apps", "Deployment" | "StatefulSet" | "ReplicaSet")
            if obj.get("spec").is_some_and(Value::is_object) =>
        {
            set_if_absent(&mut obj["spec"], "replicas", json!(1));
        }
        ("", "Pod") if obj.get("spec").is_some_and(Value::is_object) => {
            set_if_absent(&mut obj["spec"], "restartPolicy", json!("Always"));
        }
        _ => {}
    }
}

/// Folds a Secret's write-only `stringData` into base64 `data`, as the real
/// server does on every write.
fn fold_string_data(info: &ResourceInfo, obj: &mut Value) {
    if !(info.group.is_empty() && info.plural == "secrets") {
        return;
    }
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let Some(Value::Object(sd)) = map.remove("stringData") else {
        return;
    };
    use base64::Engine;
    let data = map
        .entry("data")
        .or_insert_with(|| Value::Object(Map::new()));
    if !data.is_object() {
        *data = Value::Object(Map::new());
    }
    if let Some(d) = data.as_object_mut() {
        for (k, v) in sd {
            let text = v
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string());
            d.insert(
                k,
                json!(base64::engine::general_purpose::STANDARD.encode(text)),
            );
        }
    }
}

pub(crate) fn is_crd(info: &ResourceInfo) -> bool {
    info.group == "apiextensions.k8s.io" && info.plural == "customresourcedefinitions"
}

pub(crate) fn is_namespace(info: &ResourceInfo) -> bool {
    info.group.is_empty() && info.plural == "namespaces"
}

impl Objects {
    pub(crate) fn store_error(&self, info: &ResourceInfo, name: &str, e: StoreError) -> ApiError {
        match e {
            StoreError::NamespaceMissing(ns) => ApiError::not_found("", "namespaces", &ns),
            StoreError::NamespaceTerminating(ns) => ApiError::Forbidden {
                message: format!(
                    "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    crate::error::qualified(&info.group, &info.plural)
                ),
                name: name.to_string(),
                group: info.group.clone(),
                kind: info.plural.clone(),
            },
            StoreError::Mismatch(Some(_)) => ApiError::stale(&info.group, &info.plural, name),
            StoreError::Mismatch(None) => ApiError::not_found(&info.group, &info.plural, name),
            StoreError::Expired { requested, oldest } => {
                ApiError::Expired(format!("too old resource version: {requested} ({oldest})"))
            }
            e @ StoreError::ShuttingDown => ApiError::Internal(e.to_string()),
            e @ StoreError::TooLarge { .. } => {
                self.metrics.exceeded(Limit::ObjectSize);
                ApiError::RequestEntityTooLarge(e.to_string())
            }
        }
    }

    pub(crate) fn ns_for(&self, info: &ResourceInfo, ns: &str) -> String {
        if info.namespaced {
            ns.to_string()
        } else {
            String::new()
        }
    }

    /// GET of one object in the served version.
    pub(crate) fn get_object(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let ns = self.ns_for(info, ns);
        self.store
            .get(&info.storage, &ns, name)
            .map(|s| to_view(info, &s.obj))
            .ok_or_else(|| ApiError::not_found(&info.group, &info.plural, name))
    }

    /// Checks the body names the same apiVersion/kind as the URL (when set).
    pub(crate) fn check_type(&self, info: &ResourceInfo, body: &Value) -> Result<(), ApiError> {
        if !body.is_object() {
            return Err(ApiError::BadRequest(format!(
                "the object provided is unrecognized (must be of type {})",
                info.kind
            )));
        }
        let av = body.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = body.get("kind").and_then(Value::as_str).unwrap_or("");
        if !av.is_empty() && av != info.api_version() {
            return Err(ApiError::BadRequest(format!(
                "the API version in the data ({av}) does not match the expected API version ({})",
                info.api_version()
            )));
        }
        if !kind.is_empty() && kind != info.kind {
            return Err(ApiError::BadRequest(format!(
                "the kind in the data ({kind}) does not match the expected kind ({})",
                info.kind
            )));
        }
        Ok(())
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
        if info.group.is_empty() && info.kind == "Pod" {
            // No kubelet will ever run it; Pending is where a real pod starts.
            obj["status"] = json!({"phase": "Pending"});
        }
        if is_namespace(info) {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
            obj["status"] = json!({"phase": "Active"});
        }
        if is_crd(info) {
            causes.extend(super::crd::prepare(&mut obj, None, &now));
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
                "Update",
                &info.api_version(),
                None,
                &now,
            );
        }
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
                    vec![Cause {
                        reason: "FieldValueForbidden".into(),
                        message: format!(
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{\"{added}\"}}"
                        ),
                        field: "metadata.finalizers".into(),
                    }],
                ));
            }
        }
        let mut causes = validation::validate_metadata(&new);
        apply_schema(info, &mut new, ctx, &mut causes)?;
        if is_namespace(info) {
            // spec.finalizers and status belong to the namespace lifecycle.
            for f in ["spec", "status"] {
                if let Some(v) = old.get(f) {
                    new[f] = v.clone();
                }
            }
        }
        if is_crd(info) {
            causes.extend(super::crd::prepare(&mut new, Some(old), &now));
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
                "Update",
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
        if deleting && finalizers(&new).is_empty() {
            return Ok(Outcome::Delete);
        }
        Ok(Outcome::Put(new))
    }

    /// Keeps the registry in step with CRDs as their changes become visible
    /// (the store's apply hook; runs under the store lock).
    pub(crate) fn after_apply(&self, ev: &super::storage::Event) {
        if !(ev.resource.group == "apiextensions.k8s.io"
            && ev.resource.resource == "customresourcedefinitions")
        {
            return;
        }
        let (storage, infos) = super::crd::infos_for(&ev.object);
        let infos = if ev.etype == EventType::Deleted {
            Vec::new()
        } else {
            infos
        };
        self.registry_mut().set_custom(&storage, infos);
    }

    /// Commits a change for a request; with persistence the request's
    /// response waits (in the HTTP layer) until the change is durable.
    pub(crate) fn commit(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        expect: Expect,
        change: Change,
        ctx: &WriteCtx,
    ) -> Result<Committed, StoreError> {
        let c = self
            .store
            .commit(&info.storage, ns, name, expect, change, ctx.dry_run)?;
        ctx.wait_for(c.durable.clone());
        Ok(c)
    }

    /// POST: creates the object (201 in the caller).
    pub(crate) fn create_object(
        &self,
        info: &ResourceInfo,
        ns: &str,
        body: Value,
        ctx: &WriteCtx,
    ) -> Result<Value, ApiError> {
        self.check_type(info, &body)?;
        let ns = self.ns_for(info, ns);
        let generate = meta_str(&body, "name").is_none_or(str::is_empty)
            && meta_str(&body, "generateName").is_some_and(|g| !g.is_empty());
        let attempts = if generate { 8 } else { 1 };
        let mut last_err = None;
        for _ in 0..attempts {
            let mut obj = from_view(info, body.clone());
            if generate {
                let prefix = meta_str(&obj, "generateName").unwrap_or("").to_string();
                metadata_mut(&mut obj)
                    .insert("name".into(), json!(format!("{prefix}{}", random_suffix())));
            }
            let obj = self.prepare_create(info, &ns, obj, ctx, true)?;
            let name = obj_name(&obj);
            match self.commit(info, &ns, &name, Expect::Absent, Change::Put(obj), ctx) {
                Ok(c) => return Ok(to_view(info, &c.object)),
                Err(StoreError::Mismatch(_)) => {
                    last_err = Some(ApiError::already_exists(&info.group, &info.plural, &name))
                }
                Err(e) => return Err(self.store_error(info, &name, e)),
            }
        }
        Err(last_err.unwrap_or_else(|| internal("create failed")))
    }

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
            Outcome::Delete => Change::Delete,
        };
        match self.commit(info, ns, name, Expect::Rv(cur.rv), change, ctx) {
            Ok(c) => Ok(Some(to_view(info, &c.object))),
            Err(StoreError::Mismatch(_)) => Ok(None),
            Err(e) => Err(self.store_error(info, name, e)),
        }
    }

    /// PUT (main resource or /status).
    pub(crate) fn update_object(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        body: Value,
        sub: Subresource,
        ctx: &WriteCtx,
    ) -> Result<Value, ApiError> {
        self.check_type(info, &body)?;
        let ns = self.ns_for(info, ns);
        let want_rv = meta_str(&body, "resourceVersion")
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        for _ in 0..MAX_RETRIES {
            let cur = self.load(info, &ns, name)?;
            if let Some(rv) = &want_rv
                && *rv != cur.rv.to_string()
            {
                return Err(ApiError::stale(&info.group, &info.plural, name));
            }
            let new = from_view(info, body.clone());
            let outcome = self.prepare_update(info, &cur.obj, new, sub, ctx, true)?;
            if let Some(v) = self.finish_update(info, &ns, name, &cur, outcome, ctx)? {
                return Ok(v);
            }
            if want_rv.is_some() {
                return Err(ApiError::stale(&info.group, &info.plural, name));
            }
        }
        Err(ApiError::stale(&info.group, &info.plural, name))
    }

    /// PATCH (main resource or /status). Returns the object and whether an
    /// apply created it (201).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn patch_object(
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
        for _ in 0..MAX_RETRIES {
            let cur = self.store.latest(&info.storage, &ns, name);
            let cur_view = cur.as_ref().map(|c| to_view(info, &c.obj));
            let patched = match (kind, &cur_view) {
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
                let mut obj = from_view(info, patched);
                metadata_mut(&mut obj).insert("name".into(), json!(name));
                if sub == Subresource::Status {
                    return Err(ApiError::not_found(&info.group, &info.plural, name));
                }
                let obj = self.prepare_create(info, &ns, obj, ctx, false)?;
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
            let new = from_view(info, patched);
            let record = !matches!(kind, PatchKind::Apply { .. });
            let outcome = self.prepare_update(info, &cur.obj, new, sub, ctx, record)?;
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

    /// The info of the resource stored under `storage`.
    pub(crate) fn info_for(
        &self,
        storage: &super::resources::GroupResource,
    ) -> Option<Arc<ResourceInfo>> {
        self.registry().by_storage(storage)
    }
}
