//! Deletion: preconditions, finalizers and deletionTimestamp, propagation
//! policies (which the garbage collector in [`super::gc`] completes),
//! namespace termination, and the small internal writes the in-process
//! controllers make.

use serde_json::{Value, json};

use super::Objects;
use super::namespace_status::{self, ContentReport};
use super::resources::ResourceInfo;
use super::storage::{Change, Expect, StoreError, Stored};
use super::views::to_view;
use super::writes::{
    MAX_RETRIES, NAMESPACE_FINALIZER, Subresource, WriteCtx, finalizers, held_by_spec_finalizers,
    is_namespace, uid_precondition, without_finalizer, without_spec_finalizer,
};
use crate::admission::Operation;
use crate::error::ApiError;
use crate::values::{meta_str, metadata_mut, now_rfc3339};

/// The finalizer that holds an owner until its dependents are gone.
pub(crate) const FOREGROUND: &str = "foregroundDeletion";
/// The finalizer that holds an owner until its dependents are released.
pub(crate) const ORPHAN: &str = "orphan";

/// Namespaces the real server refuses to delete.
const UNDELETABLE_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

/// Parsed DeleteOptions (body and query merged).
#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOptions {
    pub(crate) propagation: Option<String>,
    pub(crate) grace_period: Option<i64>,
    pub(crate) precondition_uid: Option<String>,
    pub(crate) precondition_rv: Option<String>,
}

/// What deleting a namespace whose contents are still going answers.
const NAMESPACE_EMPTYING: &str = "The system is ensuring all content is removed from this namespace.  Upon completion, this namespace will automatically be purged by the system.";

/// The namespaces the real server refuses to delete answer 403.
fn refuse_undeletable(info: &ResourceInfo, name: &str) -> Result<(), ApiError> {
    if is_namespace(info) && UNDELETABLE_NAMESPACES.contains(&name) {
        return Err(ApiError::Forbidden {
            message: format!(
                "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
            ),
            name: name.to_string(),
            group: String::new(),
            kind: "namespaces".into(),
        });
    }
    Ok(())
}

/// The uid and resourceVersion preconditions of `opts` against `cur`.
fn check_preconditions(
    info: &ResourceInfo,
    name: &str,
    opts: &DeleteOptions,
    cur: &Stored,
) -> Result<(), ApiError> {
    uid_precondition(info, name, opts.precondition_uid.as_deref(), &cur.obj)?;
    if let Some(rv) = &opts.precondition_rv
        && *rv != cur.rv.to_string()
    {
        return Err(ApiError::conflict(
            &info.group,
            &info.plural,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                cur.rv
            ),
        ));
    }
    Ok(())
}

/// `DeleteOptions` (meta.k8s.io/v1) as admission sends them.
fn options_json(opts: &DeleteOptions, dry_run: bool) -> Value {
    let mut o = json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"});
    if let Some(p) = &opts.propagation {
        o["propagationPolicy"] = json!(p);
    }
    if let Some(g) = opts.grace_period {
        o["gracePeriodSeconds"] = json!(g);
    }
    let mut pre = serde_json::Map::new();
    if let Some(uid) = &opts.precondition_uid {
        pre.insert("uid".into(), json!(uid));
    }
    if let Some(rv) = &opts.precondition_rv {
        pre.insert("resourceVersion".into(), json!(rv));
    }
    if !pre.is_empty() {
        o["preconditions"] = Value::Object(pre);
    }
    if dry_run {
        o["dryRun"] = json!(["All"]);
    }
    o
}

impl Objects {
    /// DELETE of one object for a request. Returns the response body: the
    /// object while finalizers hold it (or for kinds that return it), else
    /// a Success status. Each attempt is admitted anew (as a DELETE with
    /// the object read as `oldObject`) once its preconditions hold.
    pub(crate) async fn delete_object(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
        ctx: &WriteCtx,
    ) -> Result<Value, ApiError> {
        let Some(admitting) = self.admitting(info, None, ctx) else {
            return self.delete_now(info, ns, name, opts, ctx);
        };
        let ns = self.ns_for(info, ns);
        refuse_undeletable(info, name)?;
        for _ in 0..MAX_RETRIES {
            let cur = self.load(info, &ns, name)?;
            check_preconditions(info, name, opts, &cur)?;
            let old = to_view(info, &cur.obj);
            let options = options_json(opts, ctx.dry_run);
            admitting
                .mutate(
                    Operation::Delete,
                    (&ns, name),
                    None,
                    Some(&old),
                    options.clone(),
                )
                .await?;
            admitting
                .validate(Operation::Delete, (&ns, name), None, Some(&old), options)
                .await?;
            if let Some(done) = self.delete_attempt(info, &ns, name, opts, &cur, ctx)? {
                return Ok(done);
            }
        }
        Err(ApiError::stale(&info.group, &info.plural, name))
    }

    /// [`Objects::delete_object`] without admission: the server's own
    /// deletes (garbage collection), and requests when no webhook is
    /// configured.
    pub(crate) fn delete_now(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
        ctx: &WriteCtx,
    ) -> Result<Value, ApiError> {
        let ns = self.ns_for(info, ns);
        refuse_undeletable(info, name)?;
        for _ in 0..MAX_RETRIES {
            let cur = self.load(info, &ns, name)?;
            if let Some(done) = self.delete_attempt(info, &ns, name, opts, &cur, ctx)? {
                return Ok(done);
            }
        }
        Err(ApiError::stale(&info.group, &info.plural, name))
    }

    /// One attempt at deleting `cur`: its preconditions, the finalizers and
    /// deletionTimestamp it gets or its removal, committed at the version
    /// read. `None`: someone else wrote first; read again.
    fn delete_attempt(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
        cur: &Stored,
        ctx: &WriteCtx,
    ) -> Result<Option<Value>, ApiError> {
        check_preconditions(info, name, opts, cur)?;
        let mut fins = finalizers(&cur.obj);
        match opts.propagation.as_deref() {
            Some("Foreground") if !fins.iter().any(|f| f == FOREGROUND) => {
                fins.push(FOREGROUND.into())
            }
            Some("Orphan") if !fins.iter().any(|f| f == ORPHAN) => fins.push(ORPHAN.into()),
            _ => {}
        }
        let already = cur.obj["metadata"].get("deletionTimestamp").is_some();
        // A terminating namespace goes only once its spec.finalizers are
        // empty: until then a delete is refused, in upstream's words.
        let namespace_held = is_namespace(info) && held_by_spec_finalizers(&cur.obj);
        if already && namespace_held {
            return Err(ApiError::conflict(
                &info.group,
                &info.plural,
                name,
                NAMESPACE_EMPTYING,
            ));
        }
        let change = if fins.is_empty() && !namespace_held {
            Change::Delete
        } else if already && fins == finalizers(&cur.obj) {
            // Deletion already in progress; nothing new to record.
            return Ok(Some(to_view(info, &cur.obj)));
        } else {
            let mut obj = (*cur.obj).clone();
            let gen_bump = info.generation && !already;
            {
                let md = metadata_mut(&mut obj);
                if !already {
                    md.insert("deletionTimestamp".into(), json!(now_rfc3339()));
                    md.insert(
                        "deletionGracePeriodSeconds".into(),
                        json!(opts.grace_period.unwrap_or(0)),
                    );
                }
                if fins.is_empty() {
                    md.remove("finalizers");
                } else {
                    md.insert("finalizers".into(), json!(fins));
                }
                if gen_bump && let Some(g) = md.get("generation").and_then(Value::as_i64) {
                    md.insert("generation".into(), json!(g + 1));
                }
                md.remove("resourceVersion");
            }
            if is_namespace(info) {
                obj["status"] = json!({"phase": "Terminating"});
            }
            Change::Put(obj)
        };
        let deleted_now = matches!(change, Change::Delete);
        match self.commit(info, ns, name, Expect::Rv(cur.rv), change, ctx) {
            Ok(c) => {
                if !deleted_now || info.delete_returns_object {
                    return Ok(Some(to_view(info, &c.object)));
                }
                let mut details = json!({
                    "name": name,
                    "kind": info.plural,
                    "uid": meta_str(&c.object, "uid").unwrap_or(""),
                });
                if !info.group.is_empty() {
                    details["group"] = json!(info.group);
                }
                Ok(Some(json!({
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": details,
                })))
            }
            Err(StoreError::Mismatch(Some(_))) => Ok(None),
            Err(e) => Err(self.store_error(info, name, e)),
        }
    }

    /// Removes `finalizer` from an object if present (controllers inside the
    /// server: GC, namespace and CRD cleanup).
    pub(crate) fn remove_finalizer(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        finalizer: &str,
    ) {
        let ctx = WriteCtx::system("wasmctrl-apiserver");
        let without = |cur: &Value| without_finalizer(cur, finalizer);
        if let Err(e) = self.rewrite(info, ns, name, &ctx, false, without) {
            tracing::warn!(error = %e, "removing finalizer");
        }
    }

    /// Rewrites an object with `f` (no-op if `f` returns None), retrying on
    /// concurrent writes; used by the garbage collector.
    pub(crate) fn mutate_object(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        manager: &str,
        f: impl Fn(&Value) -> Option<Value>,
    ) {
        let ctx = WriteCtx::system(manager);
        if let Err(e) = self.rewrite(info, ns, name, &ctx, true, f) {
            tracing::warn!(error = %e, "internal update");
        }
    }

    /// Rewrites an object with `f` as `ctx` (no-op if the object is gone or
    /// `f` returns None), retrying on concurrent writes up to
    /// [`MAX_RETRIES`] times; `record` says whether managedFields record
    /// the write. Err: the update was refused.
    fn rewrite(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        ctx: &WriteCtx,
        record: bool,
        f: impl Fn(&Value) -> Option<Value>,
    ) -> Result<(), ApiError> {
        for _ in 0..MAX_RETRIES {
            let Some(cur) = self.store.latest(&info.storage, ns, name) else {
                return Ok(());
            };
            let Some(new) = f(&cur.obj) else {
                return Ok(());
            };
            let outcome =
                self.prepare_update(info, &cur.obj, new, Subresource::Main, ctx, record)?;
            if self
                .finish_update(info, ns, name, &cur, outcome, ctx)?
                .is_some()
            {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Writes on terminating namespace `name` the conditions that say why it
    /// is not gone yet, from `report` (see [`super::namespace_status`]);
    /// nothing when they say that already.
    pub(crate) fn note_namespace_contents(&self, name: &str, report: &ContentReport) {
        self.change_terminating_namespace(name, |cur| {
            let old = cur.get("status").and_then(|s| s.get("conditions"));
            let conditions = namespace_status::conditions(old, report, &now_rfc3339())?;
            let mut obj = cur.clone();
            obj["status"]["conditions"] = conditions;
            metadata_mut(&mut obj).remove("resourceVersion");
            Some(Change::Put(obj))
        });
    }

    /// Takes the namespace controller's `kubernetes` finalizer out of
    /// terminating namespace `name`'s `spec.finalizers` once its contents
    /// are gone, past admission, and deletes it when no finalizer (of its
    /// metadata or its spec) still holds it.
    pub(crate) fn finalize_namespace(&self, name: &str) {
        self.change_terminating_namespace(name, |cur| {
            let next = without_spec_finalizer(cur, NAMESPACE_FINALIZER);
            let after = next.as_ref().unwrap_or(cur);
            if finalizers(after).is_empty() && !held_by_spec_finalizers(after) {
                return Some(Change::Delete);
            }
            let mut obj = next?;
            metadata_mut(&mut obj).remove("resourceVersion");
            Some(Change::Put(obj))
        });
    }

    /// Commits `change` of terminating namespace `name` as the namespace
    /// controller, at the resourceVersion it read, reading it again after
    /// a concurrent write; nothing once it is gone or not terminating, or
    /// when `change` says None.
    fn change_terminating_namespace(&self, name: &str, change: impl Fn(&Value) -> Option<Change>) {
        let Some(info) = self.registry().find("", "v1", "namespaces") else {
            return;
        };
        let ctx = WriteCtx::system("namespace-controller");
        for _ in 0..MAX_RETRIES {
            let Some(cur) = self.store.latest(&info.storage, "", name) else {
                return;
            };
            if cur.obj["metadata"].get("deletionTimestamp").is_none() {
                return;
            }
            let Some(change) = change(&cur.obj) else {
                return;
            };
            match self.commit(&info, "", name, Expect::Rv(cur.rv), change, &ctx) {
                Ok(_) => return,
                Err(StoreError::Mismatch(Some(_))) => continue,
                Err(_) => return,
            }
        }
    }
}
