//! `skipUnchanged`: a resync or a duplicate event does not re-run a
//! reconcile whose inputs are all unchanged (metacontroller's ETag idea
//! applied to reconcilers).
//!
//! # What a record holds
//! After a reconcile of a key returns done (no requeue, no requeue-after),
//! the host keeps, for that key, the plugin's digest and settings and what
//! the reconcile depended on:
//! - the resourceVersion of every object it read (`get`), or that it was
//!   absent;
//! - the names and resourceVersions of every `list` it made;
//! - the resourceVersion every write of it returned (an object it wrote is
//!   an input too: someone else changing it must re-run the reconcile);
//! - the key's own object, as the host saw it before the reconcile when the
//!   guest did not read it.
//!
//! # When a reconcile is skipped
//! Before each reconcile the host re-reads every dependency through the
//! plugin's API (from the informer cache for watched kinds, else from the
//! API server; these reads are not counted as the plugin's calls) and skips
//! only if each is exactly as recorded and the digest and settings match.
//! Anything else — an error, a failed or non-done reconcile, a read that
//! failed during the reconcile, more than [`MAX_DEPENDENCIES`] reads or
//! [`MAX_LISTED`] listed objects, the key's object gone, an outbound HTTP
//! request (whose answer no version vouches for) — runs the reconcile and
//! drops the record.
//!
//! # What records cost
//! A list is recorded as its object count and a SHA-256 of the sorted
//! names and versions, not as the list. A plugin's records hold at most
//! [`MAX_HELD_READS`] reads together; a reconcile whose record would pass
//! that is not recorded (its key is reconciled every time), and is counted
//! as the plugin's `skipRecords` ceiling.
//!
//! Versions the guest saw are never newer than the truth at the time, so a
//! change that raced a reconcile always makes the next check re-run it.

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde::Deserialize;

use crate::control::metrics::Metrics;
use crate::control::reconcile::{Action, ObjectKey, ReconcileError, ReconcileRequest};
use crate::sandbox::hostapi::{
    ApiError, Gvk, KubeApi, KubeRequest, KubeResponse, Layer, Layered, Next,
};
use crate::sandbox::{Plugin, Through};

/// A reconcile that read more objects (or lists) than this is never
/// skipped: re-checking would cost about as much as running it.
pub const MAX_DEPENDENCIES: usize = 256;

/// A reconcile whose lists returned more objects than this, all together,
/// is never skipped, and what it listed is not held while it runs.
pub const MAX_LISTED: usize = 100_000;

/// The reads one plugin's records hold at most, all keys together.
pub const MAX_HELD_READS: usize = 1 << 20;

/// Whether `read` (a `get` or `list`) is of `kind`, whatever its version.
fn same_kind(read: &KubeRequest, kind: &Gvk) -> bool {
    let of = read.address().kind;
    of.group == kind.group && of.kind == kind.kind
}

/// An object's namespace and name.
type Name = (Option<String>, String);

/// What a read returned, reduced to what identifies its version.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    /// The object's resourceVersion; None: it did not exist.
    Object(Option<String>),
    /// An object the reconcile wrote: the version its write left (None:
    /// deleted), and the version it read before writing, if it did. The
    /// informer cache may still show the latter for a moment after the
    /// write; it changes nothing the reconcile did not see.
    Written {
        after: Option<String>,
        before: Option<String>,
    },
    /// Every listed object's resourceVersion (while the reconcile runs:
    /// its own writes update it).
    List(BTreeMap<Name, String>),
    /// A list as a record keeps it: its length and digest.
    Listed { count: usize, digest: [u8; 32] },
}

/// The digest of a list's names and versions, in name order.
fn list_digest(items: &BTreeMap<Name, String>) -> [u8; 32] {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    for ((namespace, name), rv) in items {
        // Length-prefixed, so that no two lists write the same bytes.
        for part in [namespace.as_deref().unwrap_or(""), name, rv] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        h.update([u8::from(namespace.is_some())]);
    }
    h.finalize().into()
}

/// The metadata a fingerprint needs, parsed without the rest.
#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    metadata: HeadMeta,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct HeadMeta {
    name: Option<String>,
    namespace: Option<String>,
    resource_version: Option<String>,
}

fn head(json: &str) -> Option<HeadMeta> {
    serde_json::from_str::<Head>(json).ok().map(|h| h.metadata)
}

impl Seen {
    /// Whether `now` (a fresh read) shows what this saw.
    fn matches(&self, now: &Seen) -> bool {
        match (self, now) {
            (Seen::Written { after, before }, Seen::Object(v)) => {
                v == after || (v.is_some() && v == before)
            }
            (Seen::Listed { count, digest }, Seen::List(items)) => {
                *count == items.len() && *digest == list_digest(items)
            }
            (recorded, now) => recorded == now,
        }
    }

    /// This as a record keeps it.
    fn kept(self) -> Seen {
        match self {
            Seen::List(items) => Seen::Listed {
                count: items.len(),
                digest: list_digest(&items),
            },
            other => other,
        }
    }

    /// The fingerprint of a read's outcome; None when it cannot be
    /// compared (an error other than not-found, an object without a
    /// resourceVersion).
    fn of(read: &KubeRequest, result: &Result<KubeResponse, ApiError>) -> Option<Seen> {
        match (read, result) {
            (KubeRequest::Get { .. }, Ok(KubeResponse::Object(json))) => {
                Some(Seen::Object(Some(head(json)?.resource_version?)))
            }
            (KubeRequest::Get { .. }, Err(ApiError::NotFound(_))) => Some(Seen::Object(None)),
            (KubeRequest::List { .. }, Ok(KubeResponse::Objects(items))) => {
                let mut seen = BTreeMap::new();
                for json in items {
                    let m = head(json)?;
                    seen.insert((m.namespace, m.name?), m.resource_version?);
                }
                Some(Seen::List(seen))
            }
            _ => None,
        }
    }
}

/// What one reconcile depended on so far: each read (a `get` or `list`
/// request, repeated to see whether it changed) and what it saw.
#[derive(Debug, Default)]
struct Dependencies {
    reads: Vec<(KubeRequest, Seen)>,
    /// Objects the lists in `reads` hold.
    listed: usize,
    /// A read or write failed, or there were too many: never skip.
    unusable: bool,
}

impl Dependencies {
    /// Never skippable: what was noted goes, and nothing more is noted.
    fn give_up(&mut self) {
        self.unusable = true;
        self.reads = Vec::new();
        self.listed = 0;
    }

    fn set(&mut self, read: KubeRequest, seen: Seen) {
        if self.unusable {
            return;
        }
        let size = |seen: &Seen| match seen {
            Seen::List(items) => items.len(),
            _ => 0,
        };
        let replaced = self
            .reads
            .iter()
            .find(|(r, _)| *r == read)
            .map_or(0, |(_, s)| size(s));
        let listed = self.listed - replaced + size(&seen);
        if listed > MAX_LISTED {
            self.give_up();
            return;
        }
        self.listed = listed;
        if let Some(slot) = self.reads.iter_mut().find(|(r, _)| *r == read) {
            slot.1 = seen;
        } else if self.reads.len() >= MAX_DEPENDENCIES {
            self.give_up();
        } else {
            self.reads.push((read, seen));
        }
    }

    /// A write of object `name` of `kind` left it at `version` (None:
    /// deleted): it is an input of the reconcile from now on, and lists
    /// that held it hold the new version.
    fn wrote(&mut self, kind: &Gvk, name: Name, version: Option<String>) {
        for (read, seen) in &mut self.reads {
            if let (true, Seen::List(items)) = (same_kind(read, kind), seen) {
                match &version {
                    Some(v) => {
                        if let Some(rv) = items.get_mut(&name) {
                            *rv = v.clone();
                        }
                    }
                    None => {
                        if items.remove(&name).is_some() {
                            self.listed -= 1;
                        }
                    }
                }
            }
        }
        let read = KubeRequest::Get {
            kind: kind.clone(),
            namespace: name.0,
            name: name.1,
        };
        let before = self
            .reads
            .iter()
            .find(|(r, _)| *r == read)
            .and_then(|(_, s)| match s {
                Seen::Object(v) => v.clone(),
                Seen::Written { before, .. } => before.clone(),
                Seen::List(_) | Seen::Listed { .. } => None,
            });
        self.set(
            read,
            Seen::Written {
                after: version,
                before,
            },
        );
    }

    /// Notes a call the guest made and what it returned.
    fn note(&mut self, call: Call, result: &Result<KubeResponse, ApiError>) {
        match call {
            Call::Read(_) if self.unusable => {}
            Call::Read(read) => match Seen::of(&read, result) {
                Some(seen) => self.set(read, seen),
                None => self.give_up(),
            },
            Call::Write {
                kind,
                namespace,
                name,
            } => match result {
                Ok(KubeResponse::Object(json)) => match head(json) {
                    Some(HeadMeta {
                        name: Some(written),
                        namespace: own,
                        resource_version: Some(rv),
                    }) => self.wrote(&kind, (own.or(namespace), written), Some(rv)),
                    _ => self.give_up(),
                },
                Ok(_) => match name {
                    Some(name) => self.wrote(&kind, (namespace, name), None),
                    None => self.give_up(),
                },
                Err(_) => self.give_up(),
            },
            Call::Event => {}
        }
    }
}

/// A guest call as far as dependencies go.
enum Call {
    Read(KubeRequest),
    Write {
        kind: Gvk,
        namespace: Option<String>,
        /// None for a create (the name comes from the response).
        name: Option<String>,
    },
    Event,
}

impl Call {
    /// What `request` reads or writes; a write's body is not kept.
    fn of(request: &KubeRequest) -> Call {
        if request.is_read() {
            return Call::Read(request.clone());
        }
        if let KubeRequest::RecordEvent { .. } = request {
            return Call::Event;
        }
        let at = request.address();
        Call::Write {
            kind: at.kind.clone(),
            namespace: at.namespace.map(str::to_string),
            name: at.name.map(str::to_string),
        }
    }
}

/// Notes what a reconcile's `kube` calls read and wrote, on their way to
/// the plugin's API.
#[derive(Default)]
struct Tracker {
    dependencies: Mutex<Dependencies>,
}

impl Layer for Tracker {
    fn call<'a>(&'a self, next: Next<'a>) -> BoxFuture<'a, Result<KubeResponse, ApiError>> {
        Box::pin(async move {
            let call = Call::of(&next.request);
            let result = next.pass().await;
            self.dependencies.lock().unwrap().note(call, &result);
            result
        })
    }
}

/// What the last done reconcile of a key depended on.
#[derive(Debug)]
struct Record {
    digest: String,
    settings: u64,
    reads: Vec<(KubeRequest, Seen)>,
}

/// The records of one plugin's keys (one per key whose object exists and
/// whose last reconcile was done).
#[derive(Debug)]
pub(crate) struct SkipRecords {
    /// The kind the plugin reconciles: a key's own object.
    for_kind: Gvk,
    records: Mutex<Held>,
    /// Where a record refused past [`MAX_HELD_READS`] is counted.
    counted: Option<(Arc<Metrics>, String)>,
}

#[derive(Debug, Default)]
struct Held {
    by_key: HashMap<ObjectKey, Arc<Record>>,
    /// The reads of every record.
    reads: usize,
}

fn settings_hash(plugin: &Plugin) -> u64 {
    let mut h = DefaultHasher::new();
    plugin.settings().hash(&mut h);
    h.finish()
}

fn is_done(action: &Action) -> bool {
    !action.requeue && action.requeue_after.is_none_or(|d| d.is_zero())
}

impl SkipRecords {
    /// The records of plugin `name`, whose refused records `metrics`
    /// counts (None: not counted).
    pub(crate) fn new(for_kind: Gvk, counted: Option<(Arc<Metrics>, String)>) -> Self {
        Self {
            for_kind,
            records: Mutex::new(Held::default()),
            counted,
        }
    }

    /// Keys with a record.
    pub(crate) fn len(&self) -> usize {
        self.records.lock().unwrap().by_key.len()
    }

    /// Keeps `record` for `key` (None: drops the key's), within
    /// [`MAX_HELD_READS`]; whether it was kept.
    fn set(&self, key: ObjectKey, record: Option<Record>) -> bool {
        self.set_within(key, record, MAX_HELD_READS)
    }

    fn set_within(&self, key: ObjectKey, record: Option<Record>, max_reads: usize) -> bool {
        let mut held = self.records.lock().unwrap();
        if let Some(old) = held.by_key.remove(&key) {
            held.reads -= old.reads.len();
        }
        let Some(record) = record else {
            return false;
        };
        if held.reads + record.reads.len() > max_reads {
            drop(held);
            if let Some((metrics, plugin)) = &self.counted {
                metrics.count_limit(plugin, "skipRecords");
            }
            return false;
        }
        held.reads += record.reads.len();
        held.by_key.insert(key, Arc::new(record));
        true
    }

    fn own_object(&self, key: &ObjectKey) -> KubeRequest {
        KubeRequest::Get {
            kind: self.for_kind.clone(),
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        }
    }

    /// Whether `plugin` may skip `key`: its last reconcile was done with
    /// this digest and these settings, and everything it depended on reads
    /// the same now.
    pub(crate) async fn unchanged(
        &self,
        plugin: &Plugin,
        key: &ObjectKey,
        timeout: Duration,
    ) -> bool {
        let Some(record) = self.records.lock().unwrap().by_key.get(key).cloned() else {
            return false;
        };
        if record.digest != plugin.digest() || record.settings != settings_hash(plugin) {
            return false;
        }
        let deadline = Instant::now() + timeout;
        for (read, seen) in &record.reads {
            let now = plugin.kube().peek(read.clone(), deadline).await;
            if !Seen::of(read, &now).is_some_and(|now| seen.matches(&now)) {
                return false;
            }
        }
        true
    }

    /// Runs one reconcile of `plugin`, noting what it depends on, and keeps
    /// the record if it returned done.
    /// `through` serves the guest's imports (default: the plugin's API).
    pub(crate) async fn reconcile(
        &self,
        plugin: &Plugin,
        request: ReconcileRequest,
        through: Through,
    ) -> Result<Action, ReconcileError> {
        let key = request.key.clone();
        let own = self.own_object(&key);
        // Before the guest runs: a change during the reconcile then shows
        // up as a different version at the next check.
        let before = plugin
            .kube()
            .peek(own.clone(), Instant::now() + request.timeout)
            .await;
        let tracker = Arc::new(Layered::new(
            Tracker::default(),
            through.kube.unwrap_or_else(|| plugin.kube().clone()),
        ));
        let http_made = Arc::new(AtomicU32::new(0));
        let result = plugin
            .reconcile_through(
                request,
                Through {
                    kube: Some(tracker.clone() as Arc<dyn KubeApi>),
                    tape: through.tape,
                    http_made: Some(http_made.clone()),
                    http_tape: through.http_tape,
                },
            )
            .await;
        let mut deps = std::mem::take(&mut *tracker.layer().dependencies.lock().unwrap());
        // The world outside the cluster has no resourceVersion: a
        // reconcile that asked it anything depends on what cannot be
        // re-checked.
        let asked_outside = http_made.load(Ordering::Relaxed) > 0;
        let keep = match (&result, Seen::of(&own, &before)) {
            (Ok(action), Some(Seen::Object(Some(rv))))
                if is_done(action) && !deps.unusable && !asked_outside =>
            {
                // The guest's own reads, when it made them, say what it saw.
                if !deps.reads.iter().any(|(r, _)| *r == own) {
                    deps.set(own, Seen::Object(Some(rv)));
                }
                !deps.unusable
            }
            _ => false,
        };
        let record = keep.then(|| Record {
            digest: plugin.digest().to_string(),
            settings: settings_hash(plugin),
            reads: deps
                .reads
                .into_iter()
                .map(|(read, seen)| (read, seen.kept()))
                .collect(),
        });
        self.set(key, record);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm() -> Gvk {
        Gvk {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
        }
    }

    fn object(name: &str, rv: &str) -> String {
        serde_json::json!({"metadata": {"name": name, "namespace": "default", "resourceVersion": rv}})
            .to_string()
    }

    fn get(name: &str) -> Call {
        Call::of(&KubeRequest::Get {
            kind: cm(),
            namespace: Some("default".into()),
            name: name.into(),
        })
    }

    #[test]
    fn reads_are_recorded_by_version_and_a_write_updates_them() {
        let mut d = Dependencies::default();
        d.note(get("a"), &Ok(KubeResponse::Object(object("a", "1"))));
        d.note(get("gone"), &Err(ApiError::NotFound("gone".into())));
        let list = Call::of(&KubeRequest::List {
            kind: cm(),
            namespace: Some("default".into()),
            label_selector: Some("x=y".into()),
        });
        d.note(
            list,
            &Ok(KubeResponse::Objects(vec![
                object("a", "1"),
                object("b", "7"),
            ])),
        );
        let patch = Call::of(&KubeRequest::Patch {
            kind: cm(),
            namespace: Some("default".into()),
            name: "a".into(),
            patch: crate::sandbox::hostapi::ObjectPatch::merge("{}"),
        });
        d.note(patch, &Ok(KubeResponse::Object(object("a", "2"))));
        assert!(!d.unusable);
        assert_eq!(d.reads.len(), 3);
        assert_eq!(
            d.reads[0].1,
            Seen::Written {
                after: Some("2".into()),
                before: Some("1".into())
            }
        );
        assert!(d.reads[0].1.matches(&Seen::Object(Some("1".into()))));
        assert!(d.reads[0].1.matches(&Seen::Object(Some("2".into()))));
        assert!(!d.reads[0].1.matches(&Seen::Object(Some("3".into()))));
        assert!(!d.reads[0].1.matches(&Seen::Object(None)));
        assert_eq!(d.reads[1].1, Seen::Object(None));
        let Seen::List(items) = &d.reads[2].1 else {
            panic!("a list")
        };
        assert_eq!(items[&(Some("default".into()), "a".into())], "2");
        let delete = Call::of(&KubeRequest::Delete {
            kind: cm(),
            namespace: Some("default".into()),
            name: "b".into(),
        });
        d.note(delete, &Ok(KubeResponse::Empty));
        let Seen::List(items) = &d.reads[2].1 else {
            panic!("a list")
        };
        assert_eq!(items.len(), 1);
        assert_eq!(
            d.reads[3].1,
            Seen::Written {
                after: None,
                before: None
            }
        );
    }

    fn list_call() -> Call {
        Call::of(&KubeRequest::List {
            kind: cm(),
            namespace: Some("default".into()),
            label_selector: None,
        })
    }

    fn listed(n: usize, rv: &str) -> Result<KubeResponse, ApiError> {
        Ok(KubeResponse::Objects(
            (0..n).map(|i| object(&format!("o{i}"), rv)).collect(),
        ))
    }

    #[test]
    fn a_record_keeps_a_list_as_its_count_and_digest() {
        let mut d = Dependencies::default();
        d.note(list_call(), &listed(1000, "1"));
        let (_, seen) = d.reads.pop().unwrap();
        let kept = seen.clone().kept();
        let Seen::Listed { count, .. } = &kept else {
            panic!("{kept:?}")
        };
        assert_eq!(*count, 1000);
        let read = |result| {
            let Call::Read(read) = list_call() else {
                unreachable!()
            };
            Seen::of(&read, &result).unwrap()
        };
        assert!(kept.matches(&read(listed(1000, "1"))));
        assert!(!kept.matches(&read(listed(1000, "2"))), "a version changed");
        assert!(!kept.matches(&read(listed(999, "1"))), "an object went");
    }

    #[test]
    fn lists_past_the_listed_bound_make_a_reconcile_unskippable_and_are_not_held() {
        let mut d = Dependencies::default();
        d.note(list_call(), &listed(MAX_LISTED / 2, "1"));
        d.note(list_call(), &listed(MAX_LISTED / 2, "2"));
        assert!(!d.unusable, "the same list read again counts once");
        let other = Call::of(&KubeRequest::List {
            kind: cm(),
            namespace: Some("default".into()),
            label_selector: Some("a!=1".into()),
        });
        d.note(other, &listed(MAX_LISTED / 2 + 1, "1"));
        assert!(d.unusable);
        assert!(d.reads.is_empty() && d.listed == 0);
        d.note(list_call(), &listed(10, "1"));
        assert!(d.reads.is_empty(), "nothing is noted once unusable");
    }

    #[test]
    fn records_past_the_held_reads_are_not_kept() {
        let records = SkipRecords::new(cm(), None);
        let record = |reads: usize| Record {
            digest: "d".into(),
            settings: 0,
            reads: (0..reads)
                .map(|i| {
                    let Call::Read(read) = get(&format!("o{i}")) else {
                        unreachable!()
                    };
                    (read, Seen::Object(Some("1".into())))
                })
                .collect(),
        };
        let key = |i: usize| ObjectKey::namespaced("default", format!("k{i}"));
        for i in 0..4 {
            assert!(records.set_within(key(i), Some(record(256)), 1024));
        }
        assert!(!records.set_within(key(4), Some(record(1)), 1024));
        assert!(
            records.set_within(key(0), Some(record(100)), 1024),
            "a key's own record makes room for its next"
        );
        assert!(records.set_within(key(4), Some(record(156)), 1024));
        assert_eq!(records.len(), 5);
        assert_eq!(records.records.lock().unwrap().reads, 1024);
        records.set_within(key(1), None, 1024);
        assert_eq!(records.records.lock().unwrap().reads, 768);
    }

    #[test]
    fn a_failed_call_or_too_many_reads_make_a_reconcile_unskippable() {
        let mut d = Dependencies::default();
        d.note(get("a"), &Err(ApiError::Unavailable("down".into())));
        assert!(d.unusable);
        let mut many = Dependencies::default();
        for i in 0..=MAX_DEPENDENCIES {
            let name = format!("o{i}");
            many.note(get(&name), &Ok(KubeResponse::Object(object(&name, "1"))));
        }
        assert!(many.unusable);
        let mut same = Dependencies::default();
        for _ in 0..=MAX_DEPENDENCIES {
            same.note(get("a"), &Ok(KubeResponse::Object(object("a", "1"))));
        }
        assert!(!same.unusable, "one object read again is one dependency");
    }
}
