//! The fake API server's store: objects by group, kind, namespace and
//! name, and what the writes to them do (system fields, generations,
//! resource versions, finalizers and garbage collection).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use serde_json::{Map, Value, json};
use wasmctrl_apimachinery::time;

use super::Call;
use crate::ApiError;
use crate::bindings::wasmctrl::reconciler::types as wit;

/// Group, kind, namespace and name.
pub(super) type Key = (String, String, Option<String>, String);

/// Everything one thread's [`FakeCluster`](super::FakeCluster) holds.
#[derive(Default)]
pub(super) struct State {
    pub(super) objects: BTreeMap<Key, Value>,
    pub(super) revision: u64,
    pub(super) calls: Vec<Call>,
    pub(super) faults: Vec<(String, ApiError)>,
    /// The reconciler's permissions during [`FakeCluster::reconcile`](super::FakeCluster::reconcile).
    pub(super) permissions: Option<Vec<wit::Permission>>,
    /// `(verb, group, resource)` the calls inside a reconcile needed.
    pub(super) used: BTreeSet<(String, String, String)>,
    pub(super) attempt: u32,
    pub(super) settings: String,
    /// Canned outbound HTTP answers: method, URL, answer (used once each,
    /// in order).
    pub(super) http_answers: Vec<(String, String, crate::http::Response)>,
    /// Every outbound request the reconciler made.
    pub(super) http_sent: Vec<crate::http::Request>,
    /// The plugin's secrets: value, and whether `reveal` hands it out.
    pub(super) secrets: BTreeMap<String, (String, bool)>,
    /// During a review: the export under review (`validate`, `mutate`),
    /// whose writes are refused.
    pub(super) read_only: Option<&'static str>,
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

/// Installs `state` as this thread's cluster (`None` uninstalls it).
pub(super) fn install(state: Option<State>) {
    STATE.with(|s| *s.borrow_mut() = state);
}

/// Runs `f` on this thread's cluster.
///
/// # Panics
///
/// When no [`FakeCluster`](super::FakeCluster) exists on this thread.
pub(super) fn with<T>(f: impl FnOnce(&mut State) -> T) -> T {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        let state = s
            .as_mut()
            .expect("no wasmctrl_sdk::testing::FakeCluster on this thread");
        f(state)
    })
}

pub(super) fn not_found(kind: &wit::Gvk, ns: Option<&str>, name: &str) -> ApiError {
    let at = ns.map(|ns| format!("{ns}/")).unwrap_or_default();
    ApiError::NotFound(format!("{} {at}{name} not found", kind.kind))
}

impl State {
    fn next_revision(&mut self) -> String {
        self.revision += 1;
        self.revision.to_string()
    }

    pub(super) fn create(&mut self, key: Key, mut obj: Value) -> Result<Value, ApiError> {
        if self.objects.contains_key(&key) {
            return Err(ApiError::AlreadyExists(format!(
                "{} {} already exists",
                key.1, key.3
            )));
        }
        let revision = self.next_revision();
        let meta = meta_mut(&mut obj);
        meta.insert("name".into(), json!(key.3));
        if let Some(ns) = &key.2 {
            meta.insert("namespace".into(), json!(ns));
        }
        meta.insert("uid".into(), json!(format!("uid-{revision}")));
        meta.insert("resourceVersion".into(), json!(revision));
        meta.insert("generation".into(), json!(1));
        meta.insert(
            "creationTimestamp".into(),
            json!(time::format_seconds(SystemTime::now())),
        );
        meta.remove("deletionTimestamp");
        if let Value::Object(o) = &mut obj {
            o.remove("status");
        }
        self.objects.insert(key, obj.clone());
        Ok(obj)
    }

    /// Stores `new` as the next state of the object at `key` (which exists):
    /// system fields kept, generation and revision bumped as needed,
    /// deletion completed once no finalizer is left.
    pub(super) fn update(
        &mut self,
        key: &Key,
        mut new: Value,
        status_only: bool,
    ) -> Result<Value, ApiError> {
        let old = self.objects[key].clone();
        let old_meta = old["metadata"].as_object().cloned().unwrap_or_default();
        if let Some(rv) = new["metadata"].get("resourceVersion")
            && !rv.is_null()
            && Some(rv) != old_meta.get("resourceVersion")
        {
            return Err(ApiError::Conflict(format!(
                "the object has been modified (resourceVersion {rv} is stale)"
            )));
        }
        if status_only {
            let status = new.get("status").cloned();
            new = old.clone();
            set_field(&mut new, "status", status);
        } else {
            set_field(&mut new, "status", old.get("status").cloned());
        }
        let meta = meta_mut(&mut new);
        for system in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "generation",
            "resourceVersion",
        ] {
            match old_meta.get(system) {
                Some(v) => meta.insert(system.into(), v.clone()),
                None => meta.remove(system),
            };
        }
        if new == old {
            return Ok(old);
        }
        if without(&new, &["metadata", "status"]) != without(&old, &["metadata", "status"]) {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            meta_mut(&mut new).insert("generation".into(), json!(generation));
        }
        let revision = self.next_revision();
        meta_mut(&mut new).insert("resourceVersion".into(), json!(revision));
        self.objects.insert(key.clone(), new.clone());
        if is_deleting(&new) && finalizers(&new).is_empty() {
            self.remove(key);
        }
        Ok(new)
    }

    pub(super) fn delete(&mut self, key: &Key) {
        let obj = self.objects[key].clone();
        if finalizers(&obj).is_empty() {
            self.remove(key);
        } else if !is_deleting(&obj) {
            let mut new = obj;
            meta_mut(&mut new).insert(
                "deletionTimestamp".into(),
                json!(time::format_seconds(SystemTime::now())),
            );
            let revision = self.next_revision();
            meta_mut(&mut new).insert("resourceVersion".into(), json!(revision));
            self.objects.insert(key.clone(), new);
        }
    }

    /// Removes the object and garbage-collects its dependents.
    pub(super) fn remove(&mut self, key: &Key) {
        let Some(gone) = self.objects.remove(key) else {
            return;
        };
        let uid = gone["metadata"]["uid"].clone();
        let dependents: Vec<Key> = self
            .objects
            .iter()
            .filter(|(_, o)| {
                o["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for dependent in dependents {
            if self.objects.contains_key(&dependent) {
                self.delete(&dependent);
            }
        }
    }
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    let o = obj.as_object_mut().unwrap_or_else(|| unreachable!());
    let meta = o.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    meta.as_object_mut().unwrap_or_else(|| unreachable!())
}

fn set_field(obj: &mut Value, field: &str, value: Option<Value>) {
    if let Value::Object(o) = obj {
        match value {
            Some(v) => o.insert(field.into(), v),
            None => o.remove(field),
        };
    }
}

fn without(obj: &Value, fields: &[&str]) -> Value {
    let mut o = obj.clone();
    if let Value::Object(m) = &mut o {
        for f in fields {
            m.remove(*f);
        }
    }
    o
}

fn finalizers(obj: &Value) -> Vec<Value> {
    obj["metadata"]["finalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn is_deleting(obj: &Value) -> bool {
    !obj["metadata"]["deletionTimestamp"].is_null()
}
