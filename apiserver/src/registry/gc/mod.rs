//! The in-process controllers a real control plane runs next to the API
//! server: ownerReference garbage collection (background, foreground,
//! orphan), namespace termination and CRD instance cleanup, and ClusterRole
//! aggregation ([`super::aggregation`]). They react to every committed
//! event, delivered reliably over an unbounded channel.
//!
//! As on a real cluster, the collector's and the namespace controller's
//! deletes, and the collector's updates (an ownerReference taken out of an
//! orphaned dependent, an owner's `orphan` or `foregroundDeletion`
//! finalizer removed), are a client's ([`client`]): admission webhooks see
//! them, as the service accounts upstream runs those controllers as, and
//! may refuse them. A refused step is tried again later, with a growing
//! delay, so a webhook that comes back or changes its mind lets the
//! namespace, the owner or the dependents go. The collector's update that
//! lets an ownership cycle's references stop blocking
//! (`blockOwnerDeletion: false`) is admitted too, and so is the namespace
//! controller's finalization of an emptied namespace, an UPDATE of
//! `namespaces/finalize`, as upstream's are. The status conditions of a
//! terminating namespace stay the server's bookkeeping, past admission.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

mod client;

use client::{Deleter, delete, release, strip_owner};

use super::Objects;
use super::aggregation;
use super::delete::{FOREGROUND, ORPHAN};
use super::namespace_status::ContentReport;
use super::resources::GroupResource;
use super::storage::{self, Event, EventType};
use super::writes::{CRD_CLEANUP_FINALIZER, finalizers};
use crate::values::meta_str;

const MANAGER: &str = "garbage-collector";

/// The first delay before refused deletes are tried again, and the
/// longest it grows to.
const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(16);

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
    let mut delay = FIRST_RETRY;
    loop {
        let retry = !collector.refused.is_empty();
        let first = tokio::select! {
            first = rx.recv() => match first {
                Some(first) => Some(first),
                None => break,
            },
            () = tokio::time::sleep(delay), if retry => None,
        };
        let batch = first.map(|first| {
            let mut batch = vec![first];
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(ev) => batch.push(ev),
                    Err(_) => break,
                }
            }
            coalesce(batch)
        });
        if batch.is_none() {
            delay = (delay * 2).min(LAST_RETRY);
        }
        // Deletes (and so webhook calls) may block: off the async workers,
        // where a webhook's answer is awaited on the runtime's handle.
        let handled = tokio::task::spawn_blocking(move || {
            match batch {
                Some(batch) => collector.batch(&batch),
                None => collector.retry(),
            }
            collector
        })
        .await;
        collector = match handled {
            Ok(collector) => {
                if collector.refused.is_empty() {
                    delay = FIRST_RETRY;
                }
                collector
            }
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
    /// Work whose deletes admission refused, to be tried again. Each entry
    /// names an object being deleted (a namespace, an owner gone, a
    /// dependent of an owner waiting), so the store bounds it too.
    refused: BTreeSet<Refused>,
}

/// A collection a webhook refused part of.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Refused {
    /// The contents of a terminating namespace.
    Namespace(String),
    /// The dependents of an owner that is gone (background collection).
    Dependents(String),
    /// A dependent of an owner in foreground deletion.
    Dependent(GroupResource, String, String),
    /// An owner's finalizer (`orphan` or `foregroundDeletion`) whose
    /// removal, or the orphaning before it, a webhook refused.
    Finalizer(GroupResource, String, String, &'static str),
    /// A dependent in an ownership cycle whose references a webhook
    /// refused to let stop blocking.
    Unblock(GroupResource, String, String),
}

impl Refused {
    /// `finalizer` of the object of `ev`, to remove once allowed.
    fn finalizer_of(ev: &Event, finalizer: &'static str) -> Self {
        Refused::Finalizer(
            ev.resource.clone(),
            ev.namespace.clone(),
            ev.name.clone(),
            finalizer,
        )
    }
}

impl Collector {
    pub(crate) fn new(objects: Arc<Objects>) -> Self {
        Collector {
            objects,
            waiting: HashMap::new(),
            refused: BTreeSet::new(),
        }
    }

    /// Tries the refused collections again; what is refused again stays.
    fn retry(&mut self) {
        let objects = Arc::clone(&self.objects);
        let objects = &*objects;
        for work in std::mem::take(&mut self.refused) {
            match work {
                Refused::Namespace(ns) => {
                    let terminating = objects
                        .store
                        .get(&namespace_key(), "", &ns)
                        .is_some_and(|n| deleting(&n.obj));
                    if terminating && !terminate_namespace(objects, &ns) {
                        self.refused.insert(Refused::Namespace(ns));
                    }
                }
                Refused::Dependents(uid) => {
                    if !live_owner(objects, &uid) && !collect_dependents(objects, &uid) {
                        self.refused.insert(Refused::Dependents(uid));
                    }
                }
                Refused::Finalizer(gr, ns, name, finalizer) => {
                    let Some(owner) = objects.store.get(&gr, &ns, &name) else {
                        continue;
                    };
                    if !deleting(&owner.obj) || !has_finalizer(&owner.obj, finalizer) {
                        continue;
                    }
                    let uid = meta_str(&owner.obj, "uid").unwrap_or("").to_string();
                    let done = if finalizer == ORPHAN {
                        orphan(objects, &gr, &ns, &name, &uid)
                    } else {
                        // Dependents that block it let it go when they do.
                        objects.store.blocks_deletion(&uid, &ns)
                            || release(objects, &gr, &ns, &name, finalizer).is_ok()
                    };
                    if !done {
                        self.refused
                            .insert(Refused::Finalizer(gr, ns, name, finalizer));
                    }
                }
                Refused::Unblock(gr, ns, name) => {
                    let cycle = objects
                        .store
                        .get(&gr, &ns, &name)
                        .is_some_and(|d| in_a_cycle(objects, &d.obj));
                    if cycle && unblock(objects, &gr, &ns, &name).is_err() {
                        self.refused.insert(Refused::Unblock(gr, ns, name));
                    }
                }
                Refused::Dependent(gr, ns, name) => {
                    let pending = objects
                        .store
                        .get(&gr, &ns, &name)
                        .is_some_and(|d| !deleting(&d.obj));
                    if pending {
                        delete_dependent(objects, &mut self.refused, gr, ns, name);
                    }
                }
            }
        }
    }

    /// Handles `events` in order, then the owners whose last blocking
    /// dependent went meanwhile, then aggregation if a ClusterRole changed.
    pub(crate) fn batch(&mut self, events: &[Arc<Event>]) {
        for ev in events {
            self.handle(ev);
        }
        for uid in self.objects.store.take_released() {
            if let Some(refused) = check_foreground_by_uid(&self.objects, &uid) {
                self.refused.insert(refused);
            }
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
                    if !collect_dependents(objects, &uid) {
                        self.refused.insert(Refused::Dependents(uid));
                    }
                }
                if !ev.namespace.is_empty() && !check_namespace(objects, &ev.namespace) {
                    self.refused
                        .insert(Refused::Namespace(ev.namespace.clone()));
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
                if has_finalizer(obj, ORPHAN)
                    && !orphan(objects, &ev.resource, &ev.namespace, &ev.name, &uid)
                {
                    self.refused.insert(Refused::finalizer_of(ev, ORPHAN));
                }
                if has_finalizer(obj, FOREGROUND) {
                    self.foreground(ev, &uid);
                } else {
                    self.waiting.remove(&uid);
                }
                // A namespace whose refused contents wait for a retry is left
                // to it: the conditions written about them change it too,
                // and must not set off another pass at once.
                let namespace = Refused::Namespace(ev.name.clone());
                if ev.resource == namespace_key()
                    && !self.refused.contains(&namespace)
                    && !terminate_namespace(objects, &ev.name)
                {
                    self.refused.insert(namespace);
                }
                if ev.resource == crd_key() && has_finalizer(obj, CRD_CLEANUP_FINALIZER) {
                    cleanup_crd(objects, obj);
                }
            }
        }
    }

    /// An object written while an owner it names waits in foreground
    /// deletion goes too, as the owner's dependents did.
    fn late_dependent(&mut self, ev: &Event) {
        let (_, owners) = storage::uid_and_owners(&ev.object);
        let owned = owners.iter().any(|o| {
            self.waiting
                .get(&o.uid)
                .is_some_and(|owner_ns| owns(owner_ns, &ev.namespace))
        });
        if owned && !storage::is_deleting(&ev.object) {
            delete_dependent(
                &self.objects,
                &mut self.refused,
                ev.resource.clone(),
                ev.namespace.clone(),
                ev.name.clone(),
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
                    delete_dependent(objects, &mut self.refused, gr, ns, name);
                } else if in_a_cycle(objects, &dep.obj)
                    && unblock(objects, &gr, &ns, &name).is_err()
                {
                    self.refused.insert(Refused::Unblock(gr, ns, name));
                }
            }
        }
        if !objects.store.blocks_deletion(uid, &ev.namespace)
            && release(objects, &ev.resource, &ev.namespace, &ev.name, FOREGROUND).is_err()
        {
            self.refused.insert(Refused::finalizer_of(ev, FOREGROUND));
        }
    }
}

/// Whether an owner in `owner_ns` (empty: cluster-scoped) may own an
/// object in `dependent_ns`: a namespaced owner's reference from another
/// namespace is invalid, as in Kubernetes.
fn owns(owner_ns: &str, dependent_ns: &str) -> bool {
    owner_ns.is_empty() || owner_ns == dependent_ns
}

/// Whether `obj`, waiting in the foreground for its dependents, has one
/// that waits for its own too: an ownership cycle, which ends only once
/// its references stop blocking.
fn in_a_cycle(objects: &Objects, obj: &Value) -> bool {
    if !deleting(obj) || !has_finalizer(obj, FOREGROUND) {
        return false;
    }
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

/// Sets `blockOwnerDeletion` to false in every ownerReference of an
/// object, as the collector (an UPDATE webhooks admit); the error when it
/// was refused.
fn unblock(objects: &Objects, gr: &GroupResource, ns: &str, name: &str) -> Result<(), String> {
    client::update(objects, gr, ns, name, |cur| {
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
    })
}

/// Deletes a dependent in the foreground as the collector; one that is
/// refused is kept in `refused` to be tried again.
fn delete_dependent(
    objects: &Objects,
    refused: &mut BTreeSet<Refused>,
    gr: GroupResource,
    ns: String,
    name: String,
) {
    if delete(
        objects,
        &gr,
        &ns,
        &name,
        "Foreground",
        Deleter::GarbageCollector,
    )
    .is_err()
    {
        refused.insert(Refused::Dependent(gr, ns, name));
    }
}

fn live_owner(objects: &Objects, uid: &str) -> bool {
    objects.store.locate_uid(uid).is_some()
}

/// Background collection after an owner is gone: dependents with no other
/// live owner are deleted; the others just lose the reference. False when
/// a delete or a reference's removal failed.
fn collect_dependents(objects: &Objects, owner_uid: &str) -> bool {
    let mut done = true;
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
            done &= strip_owner(objects, &gr, &ns, &name, owner_uid).is_ok();
        } else {
            done &= delete(
                objects,
                &gr,
                &ns,
                &name,
                "Background",
                Deleter::GarbageCollector,
            )
            .is_ok();
        }
    }
    done
}

/// Takes the owner `gr` `ns`/`name` (uid `uid`) out of its dependents'
/// references, then lets it go; false when a webhook refused a step (the
/// `orphan` finalizer stays until it is tried again).
fn orphan(objects: &Objects, gr: &GroupResource, ns: &str, name: &str, uid: &str) -> bool {
    let mut done = true;
    for (dgr, (dns, dname)) in objects.store.dependents(uid) {
        done &= strip_owner(objects, &dgr, &dns, &dname, uid).is_ok();
    }
    done && release(objects, gr, ns, name, ORPHAN).is_ok()
}

/// Lets an owner in foreground deletion go once nothing blocks it; what to
/// try again when a webhook refused that.
fn check_foreground_by_uid(objects: &Objects, uid: &str) -> Option<Refused> {
    let (gr, (ns, name)) = objects.store.locate_uid(uid)?;
    let owner = objects.store.get(&gr, &ns, &name)?;
    let refused = deleting(&owner.obj)
        && has_finalizer(&owner.obj, FOREGROUND)
        && !objects.store.blocks_deletion(uid, &ns)
        && release(objects, &gr, &ns, &name, FOREGROUND).is_err();
    refused.then_some(Refused::Finalizer(gr, ns, name, FOREGROUND))
}

/// Deletes what a terminating namespace holds, and says on the namespace
/// what failed and what is left ([`super::namespace_status`]); false when
/// a delete failed.
fn terminate_namespace(objects: &Objects, ns: &str) -> bool {
    let mut report = ContentReport::default();
    for (gr, name) in objects.store.namespace_contents(ns) {
        let Some(obj) = objects.store.get(&gr, ns, &name) else {
            continue;
        };
        if !deleting(&obj.obj)
            && let Err(e) = delete(
                objects,
                &gr,
                ns,
                &name,
                "Background",
                Deleter::NamespaceController,
            )
        {
            report.failures.entry(shown(&gr)).or_insert(e);
        }
        // What the deletion left: an object its finalizers hold, or one
        // that could not be deleted.
        if let Some(left) = objects.store.get(&gr, ns, &name) {
            *report.remaining.entry(shown(&gr)).or_default() += 1;
            for f in finalizers(&left.obj) {
                *report.finalizers.entry(f).or_default() += 1;
            }
        }
    }
    let finalized = check_namespace(objects, ns);
    let done = report.failures.is_empty() && finalized;
    objects.note_namespace_contents(ns, &report);
    done
}

/// A resource as upstream's messages name it: `configmaps`,
/// `deployments.apps`.
fn shown(gr: &GroupResource) -> String {
    if gr.group.is_empty() {
        gr.resource.clone()
    } else {
        format!("{}.{}", gr.resource, gr.group)
    }
}

/// Lets terminating namespace `ns` go once it is empty; false when a
/// webhook refused that, to be tried again.
fn check_namespace(objects: &Objects, ns: &str) -> bool {
    let Some(n) = objects.store.get(&namespace_key(), "", ns) else {
        return true;
    };
    !(deleting(&n.obj) && objects.store.namespace_is_empty(ns))
        || client::finalize_namespace(objects, ns).is_ok()
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
            // Upstream's CRD finalizer deletes past admission: nothing
            // refuses it, and a failure is logged and left to the next pass.
            let _ = delete(
                objects,
                &storage,
                &ns,
                &name,
                "Background",
                Deleter::CrdCleanup,
            );
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
