//! The in-process controllers a real control plane runs next to the API
//! server: ownerReference garbage collection (background, foreground,
//! orphan), namespace termination and CRD instance cleanup. They react to
//! every committed event, delivered reliably over an unbounded channel.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::delete::{DeleteOptions, FOREGROUND, ORPHAN};
use crate::resources::GroupResource;
use crate::server::ServerState;
use crate::storage::{Event, EventType};
use crate::values::meta_str;
use crate::writes::{CRD_CLEANUP_FINALIZER, WriteCtx};

const MANAGER: &str = "garbage-collector";

/// Runs until the channel closes (server shutdown).
pub(crate) async fn run(shared: Arc<ServerState>, mut rx: mpsc::UnboundedReceiver<Arc<Event>>) {
    while let Some(ev) = rx.recv().await {
        handle(&shared, &ev);
    }
}

fn has_finalizer(obj: &Value, f: &str) -> bool {
    obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|l| l.iter().any(|x| x == f))
}

fn deleting(obj: &Value) -> bool {
    obj["metadata"].get("deletionTimestamp").is_some()
}

fn crd_key() -> GroupResource {
    GroupResource::new("apiextensions.k8s.io", "customresourcedefinitions")
}

fn namespace_key() -> GroupResource {
    GroupResource::new("", "namespaces")
}

/// Reacts to one event.
pub(crate) fn handle(shared: &ServerState, ev: &Event) {
    let obj = &ev.object;
    let uid = meta_str(obj, "uid").unwrap_or("").to_string();
    match ev.etype {
        EventType::Deleted => {
            if !uid.is_empty() {
                collect_dependents(shared, &uid);
            }
            // Owners waiting in foreground deletion may now be free.
            for owner in obj["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if let Some(ouid) = owner["uid"].as_str() {
                    check_foreground_by_uid(shared, ouid);
                }
            }
            if !ev.namespace.is_empty() {
                check_namespace(shared, &ev.namespace);
            }
            // A custom resource gone may free its terminating CRD.
            let crd_name = format!("{}.{}", ev.resource.resource, ev.resource.group);
            if !ev.resource.group.is_empty()
                && !shared.store.has_any(&ev.resource)
                && let Some(crd) = shared.store.get(&crd_key(), "", &crd_name)
                && deleting(&crd.obj)
                && let Some(info) = shared.info_for(&crd_key())
            {
                shared.remove_finalizer(&info, "", &crd_name, CRD_CLEANUP_FINALIZER);
            }
        }
        EventType::Added | EventType::Modified => {
            if !deleting(obj) {
                return;
            }
            if has_finalizer(obj, ORPHAN) {
                orphan(shared, ev, &uid);
            }
            if has_finalizer(obj, FOREGROUND) {
                foreground(shared, ev, &uid);
            }
            if ev.resource == namespace_key() {
                terminate_namespace(shared, &ev.name);
            }
            if ev.resource == crd_key() && has_finalizer(obj, CRD_CLEANUP_FINALIZER) {
                cleanup_crd(shared, obj);
            }
        }
    }
}

fn delete(shared: &ServerState, gr: &GroupResource, ns: &str, name: &str, policy: &str) {
    let Some(info) = shared.info_for(gr) else {
        return;
    };
    let opts = DeleteOptions {
        propagation: Some(policy.to_string()),
        ..Default::default()
    };
    if let Err(e) = shared.delete_object(&info, ns, name, &opts, &WriteCtx::system(MANAGER))
        && e.code() != 404
    {
        tracing::warn!(error = %e, resource = ?gr, ns, name, "garbage collection delete");
    }
}

fn live_owner(shared: &ServerState, uid: &str) -> bool {
    shared.store.locate_uid(uid).is_some()
}

/// Background collection after an owner is gone: dependents with no other
/// live owner are deleted; the others just lose the reference.
fn collect_dependents(shared: &ServerState, owner_uid: &str) {
    for (gr, (ns, name)) in shared.store.dependents(owner_uid) {
        let Some(dep) = shared.store.get(&gr, &ns, &name) else {
            continue;
        };
        let other_live = dep.obj["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["uid"].as_str())
            .any(|u| u != owner_uid && live_owner(shared, u));
        if other_live {
            strip_owner(shared, &gr, &ns, &name, owner_uid);
        } else {
            delete(shared, &gr, &ns, &name, "Background");
        }
    }
}

fn strip_owner(shared: &ServerState, gr: &GroupResource, ns: &str, name: &str, owner_uid: &str) {
    let Some(info) = shared.info_for(gr) else {
        return;
    };
    shared.mutate_object(&info, ns, name, MANAGER, |cur| {
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
    });
}

fn orphan(shared: &ServerState, ev: &Event, uid: &str) {
    for (gr, (ns, name)) in shared.store.dependents(uid) {
        strip_owner(shared, &gr, &ns, &name, uid);
    }
    if let Some(info) = shared.info_for(&ev.resource) {
        shared.remove_finalizer(&info, &ev.namespace, &ev.name, ORPHAN);
    }
}

fn foreground(shared: &ServerState, ev: &Event, uid: &str) {
    let deps = shared.store.dependents(uid);
    if deps.is_empty() {
        if let Some(info) = shared.info_for(&ev.resource) {
            shared.remove_finalizer(&info, &ev.namespace, &ev.name, FOREGROUND);
        }
        return;
    }
    for (gr, (ns, name)) in deps {
        if let Some(dep) = shared.store.get(&gr, &ns, &name)
            && !deleting(&dep.obj)
        {
            delete(shared, &gr, &ns, &name, "Foreground");
        }
    }
}

fn check_foreground_by_uid(shared: &ServerState, uid: &str) {
    let Some((gr, (ns, name))) = shared.store.locate_uid(uid) else {
        return;
    };
    let Some(owner) = shared.store.get(&gr, &ns, &name) else {
        return;
    };
    if deleting(&owner.obj)
        && has_finalizer(&owner.obj, FOREGROUND)
        && shared.store.dependents(uid).is_empty()
        && let Some(info) = shared.info_for(&gr)
    {
        shared.remove_finalizer(&info, &ns, &name, FOREGROUND);
    }
}

fn terminate_namespace(shared: &ServerState, ns: &str) {
    for (gr, name) in shared.store.namespace_contents(ns) {
        if let Some(obj) = shared.store.get(&gr, ns, &name)
            && !deleting(&obj.obj)
        {
            delete(shared, &gr, ns, &name, "Background");
        }
    }
    check_namespace(shared, ns);
}

fn check_namespace(shared: &ServerState, ns: &str) {
    let Some(n) = shared.store.get(&namespace_key(), "", ns) else {
        return;
    };
    if deleting(&n.obj) && shared.store.namespace_is_empty(ns) {
        shared.finalize_namespace(ns);
    }
}

fn cleanup_crd(shared: &ServerState, crd: &Value) {
    let (storage, _) = crate::crd::infos_for(crd);
    let keys = shared.store.keys(&storage);
    if keys.is_empty() {
        if let Some(info) = shared.info_for(&crd_key()) {
            let name = meta_str(crd, "name").unwrap_or("");
            shared.remove_finalizer(&info, "", name, CRD_CLEANUP_FINALIZER);
        }
        return;
    }
    for (ns, name) in keys {
        if let Some(obj) = shared.store.get(&storage, &ns, &name)
            && !deleting(&obj.obj)
        {
            delete(shared, &storage, &ns, &name, "Background");
        }
    }
}
