//! The in-process controllers a real control plane runs next to the API
//! server: ownerReference garbage collection (background, foreground,
//! orphan), namespace termination and CRD instance cleanup, and ClusterRole
//! aggregation ([`super::aggregation`]). They react to every committed
//! event, delivered reliably over an unbounded channel.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;

use super::Objects;
use super::aggregation;
use super::delete::{DeleteOptions, FOREGROUND, ORPHAN};
use super::resources::GroupResource;
use super::storage::{self, Event, EventType};
use super::writes::{CRD_CLEANUP_FINALIZER, WriteCtx};
use crate::values::meta_str;

const MANAGER: &str = "garbage-collector";

/// Events handled together, at most.
const BATCH: usize = 4096;

/// Runs until the channel closes (server shutdown). What is queued is
/// taken in batches, each object's superseded events dropped
/// ([`coalesce`]), and handled off the async workers: a slow collection
/// (a foreground deletion with many dependents) neither stalls requests
/// nor lets every update queued meanwhile be handled, and held, one by one.
pub(crate) async fn run(objects: Arc<Objects>, mut rx: mpsc::UnboundedReceiver<Arc<Event>>) {
    // Aggregated roles loaded from a data directory, or bootstrapped, are
    // brought up to date before any change arrives.
    let start = objects.clone();
    if let Err(e) = tokio::task::spawn_blocking(move || aggregation::aggregate(&start)).await {
        tracing::error!(error = %e, "ClusterRole aggregation failed");
    }
    let mut collector = Collector::new(objects.clone());
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(ev) => batch.push(ev),
                Err(_) => break,
            }
        }
        let batch = coalesce(batch);
        let handled = tokio::task::spawn_blocking(move || {
            collector.batch(&batch);
            collector
        })
        .await;
        collector = match handled {
            Ok(collector) => collector,
            Err(e) => {
                // What it remembered is an optimization: owners still
                // deleting are walked again on their next change.
                tracing::error!(error = %e, "garbage collection batch failed");
                Collector::new(objects.clone())
            }
        };
    }
}

/// `events` (in commit order) without those a later event of the same
/// object supersedes: collection reacts to an object's latest state, so
/// of its additions and modifications only the last counts, and a
/// deletion makes the ones before it moot. Deletions are all kept (each
/// frees its dependents and owners).
fn coalesce(events: Vec<Arc<Event>>) -> Vec<Arc<Event>> {
    let mut latest: HashMap<(&GroupResource, &str, &str), usize> = HashMap::new();
    let mut superseded = vec![false; events.len()];
    for (i, ev) in events.iter().enumerate() {
        let key = (&ev.resource, ev.namespace.as_str(), ev.name.as_str());
        if let Some(before) = latest.insert(key, i)
            && events[before].etype != EventType::Deleted
        {
            superseded[before] = true;
        }
    }
    drop(latest);
    events
        .into_iter()
        .zip(superseded)
        .filter(|(_, gone)| !gone)
        .map(|(ev, _)| ev)
        .collect()
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

/// The garbage collector, with what it remembers between batches.
pub(crate) struct Collector {
    objects: Arc<Objects>,
    /// Owners in foreground deletion whose dependents were already asked
    /// to go, with the owner's namespace: a later change to such an owner
    /// (its other finalizers, a patch loop) does not walk its dependents
    /// again, and a dependent that names it afterwards is deleted as it
    /// arrives. Holds only objects being deleted, so the store bounds it.
    waiting: HashMap<String, String>,
}

impl Collector {
    pub(crate) fn new(objects: Arc<Objects>) -> Self {
        Collector {
            objects,
            waiting: HashMap::new(),
        }
    }

    /// Handles `events` in order, then the owners whose last blocking
    /// dependent went meanwhile, then aggregation if a ClusterRole changed.
    pub(crate) fn batch(&mut self, events: &[Arc<Event>]) {
        for ev in events {
            self.handle(ev);
        }
        for uid in self.objects.store.take_released() {
            check_foreground_by_uid(&self.objects, &uid);
        }
        if aggregation::touches(events) {
            aggregation::aggregate(&self.objects);
        }
    }

    /// Reacts to one event. Most events are of objects not being deleted:
    /// those are passed over without parsing their JSON.
    fn handle(&mut self, ev: &Event) {
        let objects = Arc::clone(&self.objects);
        let objects = &*objects;
        match ev.etype {
            EventType::Deleted => {
                let (uid, _) = storage::uid_and_owners(&ev.object);
                if let Some(uid) = uid.filter(|u| !u.is_empty()) {
                    self.waiting.remove(&uid);
                    collect_dependents(objects, &uid);
                }
                if !ev.namespace.is_empty() {
                    check_namespace(objects, &ev.namespace);
                }
                // A custom resource gone may free its terminating CRD.
                let crd_name = format!("{}.{}", ev.resource.resource, ev.resource.group);
                if !ev.resource.group.is_empty()
                    && !objects.store.has_any(&ev.resource)
                    && let Some(crd) = objects.store.get(&crd_key(), "", &crd_name)
                    && deleting(&crd.obj)
                    && let Some(info) = objects.info_for(&crd_key())
                {
                    objects.remove_finalizer(&info, "", &crd_name, CRD_CLEANUP_FINALIZER);
                }
            }
            EventType::Added | EventType::Modified => {
                if !self.waiting.is_empty() && storage::mentions(&ev.object, b"\"ownerReferences\"")
                {
                    self.late_dependent(ev);
                }
                if !storage::mentions(&ev.object, b"\"deletionTimestamp\"") {
                    return;
                }
                let obj = &ev.value();
                if !deleting(obj) {
                    return;
                }
                let uid = meta_str(obj, "uid").unwrap_or("").to_string();
                if has_finalizer(obj, ORPHAN) {
                    orphan(objects, ev, &uid);
                }
                if has_finalizer(obj, FOREGROUND) {
                    self.foreground(ev, &uid);
                } else {
                    self.waiting.remove(&uid);
                }
                if ev.resource == namespace_key() {
                    terminate_namespace(objects, &ev.name);
                }
                if ev.resource == crd_key() && has_finalizer(obj, CRD_CLEANUP_FINALIZER) {
                    cleanup_crd(objects, obj);
                }
            }
        }
    }

    /// An object written while an owner it names waits in foreground
    /// deletion goes too, as the owner's dependents did.
    fn late_dependent(&self, ev: &Event) {
        let (_, owners) = storage::uid_and_owners(&ev.object);
        let owned = owners.iter().any(|o| {
            self.waiting
                .get(&o.uid)
                .is_some_and(|owner_ns| owns(owner_ns, &ev.namespace))
        });
        if owned && !storage::is_deleting(&ev.object) {
            delete(
                &self.objects,
                &ev.resource,
                &ev.namespace,
                &ev.name,
                "Foreground",
            );
        }
    }

    /// A foreground deletion: the owner's dependents are deleted (once per
    /// owner), and it goes when none that blocks it is left. A dependent
    /// that waits for its own dependents while one of those waits too is
    /// in an ownership cycle: its references stop blocking, as
    /// kube-apiserver's collector does, so the cycle can end.
    fn foreground(&mut self, ev: &Event, uid: &str) {
        let objects = &*self.objects;
        if !self.waiting.contains_key(uid) {
            self.waiting.insert(uid.to_string(), ev.namespace.clone());
            for (gr, (ns, name)) in objects.store.dependents(uid) {
                if !owns(&ev.namespace, &ns) {
                    continue;
                }
                let Some(dep) = objects.store.get(&gr, &ns, &name) else {
                    continue;
                };
                if !deleting(&dep.obj) {
                    delete(objects, &gr, &ns, &name, "Foreground");
                } else if has_finalizer(&dep.obj, FOREGROUND)
                    && waits_on_a_waiter(objects, &dep.obj)
                {
                    unblock(objects, &gr, &ns, &name);
                }
            }
        }
        if !objects.store.blocks_deletion(uid, &ev.namespace)
            && let Some(info) = objects.info_for(&ev.resource)
        {
            objects.remove_finalizer(&info, &ev.namespace, &ev.name, FOREGROUND);
        }
    }
}

/// Whether an owner in `owner_ns` (empty: cluster-scoped) may own an
/// object in `dependent_ns`: a namespaced owner's reference from another
/// namespace is invalid, as in Kubernetes.
fn owns(owner_ns: &str, dependent_ns: &str) -> bool {
    owner_ns.is_empty() || owner_ns == dependent_ns
}

/// Whether one of `obj`'s dependents is itself waiting for its own.
fn waits_on_a_waiter(objects: &Objects, obj: &Value) -> bool {
    let Some(uid) = meta_str(obj, "uid") else {
        return false;
    };
    objects
        .store
        .dependents(uid)
        .into_iter()
        .any(|(gr, (ns, name))| {
            objects
                .store
                .get(&gr, &ns, &name)
                .is_some_and(|d| deleting(&d.obj) && has_finalizer(&d.obj, FOREGROUND))
        })
}

/// Sets `blockOwnerDeletion` to false in every ownerReference of an object.
fn unblock(objects: &Objects, gr: &GroupResource, ns: &str, name: &str) {
    let Some(info) = objects.info_for(gr) else {
        return;
    };
    objects.mutate_object(&info, ns, name, MANAGER, |cur| {
        let refs = cur["metadata"]["ownerReferences"].as_array()?;
        if !refs.iter().any(|r| r["blockOwnerDeletion"] == true) {
            return None;
        }
        let unblocked: Vec<Value> = refs
            .iter()
            .map(|r| {
                let mut r = r.clone();
                if r["blockOwnerDeletion"] == true {
                    r["blockOwnerDeletion"] = Value::Bool(false);
                }
                r
            })
            .collect();
        let mut new = cur.clone();
        crate::values::metadata_mut(&mut new)
            .insert("ownerReferences".into(), Value::Array(unblocked));
        Some(new)
    });
}

fn delete(objects: &Objects, gr: &GroupResource, ns: &str, name: &str, policy: &str) {
    let Some(info) = objects.info_for(gr) else {
        return;
    };
    let opts = DeleteOptions {
        propagation: Some(policy.to_string()),
        ..Default::default()
    };
    if let Err(e) = objects.delete_now(&info, ns, name, &opts, &WriteCtx::system(MANAGER))
        && e.code() != 404
    {
        tracing::warn!(error = %e, resource = ?gr, ns, name, "garbage collection delete");
    }
}

fn live_owner(objects: &Objects, uid: &str) -> bool {
    objects.store.locate_uid(uid).is_some()
}

/// Background collection after an owner is gone: dependents with no other
/// live owner are deleted; the others just lose the reference.
fn collect_dependents(objects: &Objects, owner_uid: &str) {
    for (gr, (ns, name)) in objects.store.dependents(owner_uid) {
        let Some(dep) = objects.store.get(&gr, &ns, &name) else {
            continue;
        };
        let other_live = dep.obj["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["uid"].as_str())
            .any(|u| u != owner_uid && live_owner(objects, u));
        if other_live {
            strip_owner(objects, &gr, &ns, &name, owner_uid);
        } else {
            delete(objects, &gr, &ns, &name, "Background");
        }
    }
}

fn strip_owner(objects: &Objects, gr: &GroupResource, ns: &str, name: &str, owner_uid: &str) {
    let Some(info) = objects.info_for(gr) else {
        return;
    };
    objects.mutate_object(&info, ns, name, MANAGER, |cur| {
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

fn orphan(objects: &Objects, ev: &Event, uid: &str) {
    for (gr, (ns, name)) in objects.store.dependents(uid) {
        strip_owner(objects, &gr, &ns, &name, uid);
    }
    if let Some(info) = objects.info_for(&ev.resource) {
        objects.remove_finalizer(&info, &ev.namespace, &ev.name, ORPHAN);
    }
}

fn check_foreground_by_uid(objects: &Objects, uid: &str) {
    let Some((gr, (ns, name))) = objects.store.locate_uid(uid) else {
        return;
    };
    let Some(owner) = objects.store.get(&gr, &ns, &name) else {
        return;
    };
    if deleting(&owner.obj)
        && has_finalizer(&owner.obj, FOREGROUND)
        && !objects.store.blocks_deletion(uid, &ns)
        && let Some(info) = objects.info_for(&gr)
    {
        objects.remove_finalizer(&info, &ns, &name, FOREGROUND);
    }
}

fn terminate_namespace(objects: &Objects, ns: &str) {
    for (gr, name) in objects.store.namespace_contents(ns) {
        if let Some(obj) = objects.store.get(&gr, ns, &name)
            && !deleting(&obj.obj)
        {
            delete(objects, &gr, ns, &name, "Background");
        }
    }
    check_namespace(objects, ns);
}

fn check_namespace(objects: &Objects, ns: &str) {
    let Some(n) = objects.store.get(&namespace_key(), "", ns) else {
        return;
    };
    if deleting(&n.obj) && objects.store.namespace_is_empty(ns) {
        objects.finalize_namespace(ns);
    }
}

fn cleanup_crd(objects: &Objects, crd: &Value) {
    let (storage, _) = super::crd::infos_for(crd);
    let keys = objects.store.keys(&storage);
    if keys.is_empty() {
        if let Some(info) = objects.info_for(&crd_key()) {
            let name = meta_str(crd, "name").unwrap_or("");
            objects.remove_finalizer(&info, "", name, CRD_CLEANUP_FINALIZER);
        }
        return;
    }
    for (ns, name) in keys {
        if let Some(obj) = objects.store.get(&storage, &ns, &name)
            && !deleting(&obj.obj)
        {
            delete(objects, &storage, &ns, &name, "Background");
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(rv: u64, etype: EventType, name: &str) -> Arc<Event> {
        let object = json!({"metadata": {"name": name}});
        Event::added(rv, GroupResource::new("", "configmaps"), object).retyped(etype)
    }

    #[test]
    fn an_objects_superseded_events_are_dropped_and_deletions_kept() {
        let events = vec![
            event(1, EventType::Added, "a"),
            event(2, EventType::Modified, "a"),
            event(3, EventType::Modified, "b"),
            event(4, EventType::Modified, "a"),
            event(5, EventType::Deleted, "b"),
            event(6, EventType::Added, "b"),
            event(7, EventType::Deleted, "c"),
        ];
        let kept: Vec<u64> = coalesce(events).iter().map(|e| e.rv).collect();
        assert_eq!(kept, vec![4, 5, 6, 7]);
        let many: Vec<Arc<Event>> = (0..1000)
            .map(|rv| event(rv, EventType::Modified, "hot"))
            .collect();
        assert_eq!(
            coalesce(many).len(),
            1,
            "a thousand updates of one object are one"
        );
    }
}
