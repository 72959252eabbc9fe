//! The collector's and the namespace controller's writes, made as a
//! client's: admission webhooks see them as the service accounts upstream
//! runs those controllers as, and may refuse them. A refusal is answered
//! as an error; the collector keeps what it was doing to try it again.

use std::sync::Arc;

use serde_json::Value;

use super::MANAGER;
use crate::admission::Caller;
use crate::registry::Objects;
use crate::registry::delete::DeleteOptions;
use crate::registry::resources::{GroupResource, ResourceInfo};
use crate::registry::views::to_view;
use crate::registry::writes::{
    MAX_RETRIES, NAMESPACE_FINALIZER, Subresource, WriteCtx, without_finalizer,
    without_spec_finalizer,
};

/// Who deletes, as admission webhooks see it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Deleter {
    /// Upstream's `generic-garbage-collector` service account.
    GarbageCollector,
    /// Upstream's `namespace-controller` service account.
    NamespaceController,
    /// The CRD finalizer, which upstream runs inside the API server
    /// against storage, past admission.
    CrdCleanup,
}

impl Deleter {
    pub(super) fn ctx(self) -> WriteCtx {
        let mut ctx = WriteCtx::system(MANAGER);
        let account = match self {
            Deleter::GarbageCollector => "generic-garbage-collector",
            Deleter::NamespaceController => "namespace-controller",
            Deleter::CrdCleanup => return ctx,
        };
        ctx.caller = Some(Arc::new(Caller {
            username: format!("system:serviceaccount:kube-system:{account}"),
            uid: String::new(),
            groups: vec![
                "system:serviceaccounts".into(),
                "system:serviceaccounts:kube-system".into(),
                "system:authenticated".into(),
            ],
            extra: Default::default(),
        }));
        ctx
    }
}

/// Deletes one object as `by`; the error, when it is still there because
/// the delete failed (a webhook refused it, or could not be called).
pub(super) fn delete(
    objects: &Objects,
    gr: &GroupResource,
    ns: &str,
    name: &str,
    policy: &str,
    by: Deleter,
) -> Result<(), String> {
    let Some(info) = objects.info_for(gr) else {
        return Ok(());
    };
    let opts = DeleteOptions {
        propagation: Some(policy.to_string()),
        ..Default::default()
    };
    let ctx = by.ctx();
    let result = match tokio::runtime::Handle::try_current() {
        Ok(runtime) if ctx.caller.is_some() && objects.admission.current().is_some() => {
            runtime.block_on(objects.delete_object(&info, ns, name, &opts, &ctx))
        }
        _ => objects.delete_now(&info, ns, name, &opts, &ctx),
    };
    match result {
        Ok(_) => Ok(()),
        Err(e) if e.code() == 404 => Ok(()),
        Err(e) => {
            tracing::warn!(error = %e, resource = ?gr, ns, name, deleter = ?by,
                "a controller's delete failed; it is tried again later");
            Err(e.to_string())
        }
    }
}

/// Changes one object as the collector with `f` (None: nothing to
/// change). With webhooks configured it is an UPDATE they admit, as
/// upstream's collector's patches are, read again and changed again after
/// a concurrent write; the error, when it was refused (or a webhook could
/// not be called), and nothing changed.
pub(super) fn update(
    objects: &Objects,
    gr: &GroupResource,
    ns: &str,
    name: &str,
    f: impl Fn(&Value) -> Option<Value>,
) -> Result<(), String> {
    let Some(info) = objects.info_for(gr) else {
        return Ok(());
    };
    let by = Deleter::GarbageCollector;
    admitted_update(objects, &info, ns, name, Subresource::Main, by, &f).unwrap_or_else(|| {
        objects.mutate_object(&info, ns, name, MANAGER, f);
        Ok(())
    })
}

/// Lets terminating namespace `name`, whose contents are gone, go as the
/// namespace controller: the `kubernetes` finalizer is taken out of its
/// `spec.finalizers` through `/finalize`, which deletes it when nothing
/// else holds it. With webhooks configured that is an UPDATE of
/// `namespaces/finalize` they admit, as upstream's controller's is; the
/// error, when it was refused.
pub(super) fn finalize_namespace(objects: &Objects, name: &str) -> Result<(), String> {
    let Some(info) = objects.info_for(&super::namespace_key()) else {
        return Ok(());
    };
    let by = Deleter::NamespaceController;
    let finalized = |cur: &Value| {
        cur["metadata"].get("deletionTimestamp")?;
        without_spec_finalizer(cur, NAMESPACE_FINALIZER)
    };
    admitted_update(
        objects,
        &info,
        "",
        name,
        Subresource::Finalize,
        by,
        &finalized,
    )
    .unwrap_or_else(|| {
        objects.finalize_namespace(name);
        Ok(())
    })
}

/// One object changed by `f` as `by` through `sub`, an UPDATE admission
/// webhooks see, retried after a concurrent write. None when no webhook is
/// configured (or no runtime runs): nothing would see the write, and the
/// caller makes it past admission.
fn admitted_update(
    objects: &Objects,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
    sub: Subresource,
    by: Deleter,
    f: &dyn Fn(&Value) -> Option<Value>,
) -> Option<Result<(), String>> {
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    objects.admission.current()?;
    let ctx = by.ctx();
    for _ in 0..MAX_RETRIES {
        let Some(cur) = objects.store.latest(&info.storage, ns, name) else {
            return Some(Ok(()));
        };
        let Some(new) = f(&cur.obj) else {
            return Some(Ok(()));
        };
        let mut view = to_view(info, &new);
        crate::values::metadata_mut(&mut view)
            .insert("resourceVersion".into(), cur.rv.to_string().into());
        let sent = objects.update_object(info, ns, name, view, sub, &ctx);
        match runtime.block_on(sent) {
            Ok(_) => return Some(Ok(())),
            Err(e) if e.code() == 404 => return Some(Ok(())),
            Err(e) if e.code() == 409 => continue,
            Err(e) => {
                tracing::warn!(error = %e, resource = ?info.storage, ns, name, writer = ?by,
                    "a controller's update failed; it is tried again later");
                return Some(Err(e.to_string()));
            }
        }
    }
    Some(Err(format!("{name} kept changing under {by:?}")))
}

/// Removes `finalizer` from an object being deleted, as the collector.
pub(super) fn release(
    objects: &Objects,
    gr: &GroupResource,
    ns: &str,
    name: &str,
    finalizer: &str,
) -> Result<(), String> {
    update(objects, gr, ns, name, |cur| {
        without_finalizer(cur, finalizer)
    })
}

pub(super) fn strip_owner(
    objects: &Objects,
    gr: &GroupResource,
    ns: &str,
    name: &str,
    owner_uid: &str,
) -> Result<(), String> {
    update(objects, gr, ns, name, |cur| {
        let refs = cur["metadata"]["ownerReferences"].as_array()?;
        let kept: Vec<Value> = refs
            .iter()
            .filter(|r| r["uid"].as_str() != Some(owner_uid))
            .cloned()
            .collect();
        if kept.len() == refs.len() {
            return None;
        }
        let mut new = cur.clone();
        let md = crate::values::metadata_mut(&mut new);
        if kept.is_empty() {
            md.remove("ownerReferences");
        } else {
            md.insert("ownerReferences".into(), Value::Array(kept));
        }
        Some(new)
    })
}
