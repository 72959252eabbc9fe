//! Unit-test a reconciler natively, against an in-memory fake API server
//! (feature `testing`; not available inside a wasm component).
//!
//! ```toml
//! [dev-dependencies]
//! wasmctrl-sdk = { path = "../../guest-sdk", features = ["testing"] }
//! ```
//!
//! ```
//! use wasmctrl_sdk::k8s_openapi::api::core::v1::ConfigMap;
//! use wasmctrl_sdk::serde_json::json;
//! use wasmctrl_sdk::testing::FakeCluster;
//! use wasmctrl_sdk::{Action, Api, Context, Error, Metadata, ObjectKey, Patch, Reconciler, Resource};
//!
//! /// Labels every ConfigMap `seen=yes`.
//! struct Labeler;
//!
//! impl Reconciler for Labeler {
//!     fn metadata() -> Metadata {
//!         Metadata::new("labeler", "0.1.0", ConfigMap::gvk())
//!             .permission("", &["configmaps"], &["list", "watch", "patch"])
//!     }
//!
//!     fn reconcile(key: ObjectKey, _ctx: &Context) -> Result<Action, Error> {
//!         let api = Api::<ConfigMap>::namespaced(key.require_namespace()?);
//!         api.patch(&key.name, &Patch::Merge(json!({"metadata": {"labels": {"seen": "yes"}}})))?;
//!         Ok(Action::done())
//!     }
//! }
//!
//! let cluster = FakeCluster::new();
//! let configmaps = Api::<ConfigMap>::namespaced("default");
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("app".into());
//! configmaps.create(&cm).unwrap();
//!
//! let key = ObjectKey::namespaced("default", "app");
//! assert_eq!(cluster.reconcile::<Labeler>(&key), Ok(Action::done()));
//! let labels = configmaps.get("app").unwrap().metadata.labels.unwrap();
//! assert_eq!(labels["seen"], "yes");
//! assert!(cluster.unused_permissions::<Labeler>().is_empty());
//! ```
//!
//! While a [`FakeCluster`] exists, every SDK call on its thread ([`Api`](crate::Api),
//! events, [`Context`], logging) goes to it; tests use the same `Api` to set
//! the scene and to look at the result. During [`FakeCluster::reconcile`],
//! each call is checked against the reconciler's declared permissions, as
//! the host checks it against the grant: a call the metadata does not cover
//! fails with `forbidden`.
//!
//! # What the fake models, and what it does not
//!
//! Objects are JSON, keyed by group, kind, namespace and name (one stored
//! version per kind). Writes assign `uid`, `resourceVersion`,
//! `creationTimestamp` and `generation` (bumped when anything outside
//! `metadata` and `status` changes); a write that changes nothing is a no-op.
//! Every kind behaves as if it had a status subresource: writes to the object
//! keep the stored `status`, status writes change only `status`. A
//! `resourceVersion` in a replace or patch body must match (else `conflict`).
//! Merge and JSON patches follow RFC 7386 and RFC 6902 (a failed `test` is
//! `invalid`). Deleting an object with finalizers sets its
//! `deletionTimestamp`; it goes away when the last finalizer is removed, and
//! then objects whose ownerReferences name its uid are deleted too (background
//! garbage collection). Label selectors support `k=v`, `k==v`, `k!=v`, `k`
//! and `!k`.
//!
//! Server-side apply is modelled as "create, or merge the applied object into
//! the stored one": there is no field ownership, so no apply conflicts and no
//! removal of fields a manager stopped setting. Lists are replaced whole. The
//! permission check derives plurals from kinds the way Kubernetes does by
//! default (`Deployment` → `deployments`, `Ingress` → `ingresses`, `Policy` →
//! `policies`).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::marker::PhantomData;

use serde_json::{Map, Value, json};

use crate::bindings::wasmctrl::reconciler::types as wit;
use crate::{Action, ApiError, Error, ObjectKey, Reconciler};

/// One call the SDK made through the host's `kube` interface.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// `get`, `list`, `create`, `replace`, `patch`, `replace-status`,
    /// `patch-status`, `delete` or `record-event`.
    pub verb: &'static str,
    pub kind: crate::Gvk,
    pub namespace: Option<String>,
    /// "" for `list` and `create`.
    pub name: String,
    /// What was sent: the object, the patch, the label selector of a list
    /// (a string, or null), or for an event `{type, reason, action, note}`.
    pub body: Value,
    /// For patches: `merge`, `json`, or `apply <field manager> force=<bool>`.
    pub patch: String,
}

/// The in-memory API server of this thread's tests; see the [module
/// docs](self). Dropping it uninstalls it.
pub struct FakeCluster {
    // Thread-bound: the state lives in a thread-local.
    _not_send: PhantomData<*const ()>,
}

impl FakeCluster {
    /// An empty cluster, installed for the current thread (replacing any
    /// previous one).
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        STATE.with(|s| *s.borrow_mut() = Some(State::default()));
        Self {
            _not_send: PhantomData,
        }
    }

    /// Runs `R::reconcile(key)` as the host would, with every call checked
    /// against `R::metadata()`'s permissions.
    pub fn reconcile<R: Reconciler>(&self, key: &ObjectKey) -> Result<Action, Error> {
        let permissions = R::metadata().into_wit().permissions;
        with(|s| s.permissions = Some(permissions));
        let result = R::reconcile(key.clone(), &crate::Context::current());
        with(|s| s.permissions = None);
        result
    }

    /// A cluster set up as a reconcile the host recorded saw it: `line`
    /// is one transcript line of a plugin's `record:` (see the host's
    /// `wasmctrl::transcript` for the format). Each object the recorded
    /// reconcile was answered with is stored as it was first seen, with its
    /// `resourceVersion`: the answers of `get` and `list`, and of writes to
    /// objects that existed (patch, apply, replace and their status forms;
    /// not `create`, whose object did not exist before). The attempt and
    /// settings are the recorded ones. Returns the cluster and the key to
    /// reconcile.
    ///
    /// ```
    /// use wasmctrl_sdk::testing::FakeCluster;
    /// let line = r#"{"version":1,"plugin":"p","digest":"sha256:00","key":{"namespace":"default","name":"web"},
    ///   "attempt":2,"timeoutMs":10000,"settings":{"replicas":3},"recordedAt":"2026-12-03T12:00:00.000Z",
    ///   "durationMs":1,"context":[],"result":{"outcome":"done"},
    ///   "calls":[{"request":{"verb":"get","kind":{"group":"","version":"v1","kind":"ConfigMap"},
    ///                        "namespace":"default","name":"web"},
    ///             "response":{"object":{"apiVersion":"v1","kind":"ConfigMap",
    ///                         "metadata":{"name":"web","namespace":"default","resourceVersion":"41"}}}}]}"#;
    /// let (_cluster, key) = FakeCluster::from_transcript(line).unwrap();
    /// assert_eq!(key.name, "web");
    /// ```
    pub fn from_transcript(line: &str) -> Result<(Self, ObjectKey), TranscriptError> {
        let t: Value = serde_json::from_str(line)
            .map_err(|e| TranscriptError(format!("not a transcript line: {e}")))?;
        if t["version"] != 1 {
            return Err(TranscriptError(format!(
                "transcript version {}; this SDK reads version 1",
                t["version"]
            )));
        }
        let key = ObjectKey {
            namespace: t["key"]["namespace"].as_str().map(str::to_string),
            name: t["key"]["name"]
                .as_str()
                .ok_or_else(|| TranscriptError("the transcript has no key.name".into()))?
                .to_string(),
        };
        let cluster = Self::new();
        let mut objects = Vec::new();
        for call in t["calls"].as_array().into_iter().flatten() {
            let verb = call["request"]["verb"].as_str().unwrap_or_default();
            let kind = &call["request"]["kind"];
            let response = &call["response"];
            match verb {
                "get" | "patch" | "replace" | "patch-status" | "replace-status" => {
                    if let Some(o) = response.get("object") {
                        objects.push((kind.clone(), o.clone()));
                    }
                }
                "list" => {
                    for o in response["objects"].as_array().into_iter().flatten() {
                        objects.push((kind.clone(), o.clone()));
                    }
                }
                _ => {}
            }
        }
        with(|s| {
            for (kind, object) in objects {
                s.seed(&kind, object)?;
            }
            s.attempt = t["attempt"].as_u64().unwrap_or(0) as u32;
            s.settings = t["settings"].to_string();
            Ok::<_, TranscriptError>(())
        })?;
        Ok((cluster, key))
    }

    /// The value `Context::attempt` returns.
    pub fn set_attempt(&self, attempt: u32) {
        with(|s| s.attempt = attempt);
    }

    /// The JSON `Context::settings` returns.
    pub fn set_settings(&self, settings: Value) {
        with(|s| s.settings = settings.to_string());
    }

    /// Makes the next call with `verb` fail with `error` (once).
    pub fn fail_next(&self, verb: &str, error: ApiError) {
        with(|s| s.faults.push((verb.to_string(), error)));
    }

    /// Every call made since the cluster was created or [`Self::clear_calls`].
    pub fn calls(&self) -> Vec<Call> {
        with(|s| s.calls.clone())
    }

    pub fn clear_calls(&self) {
        with(|s| s.calls.clear());
    }

    /// The events recorded: `(kind, namespace, name, body)` as in [`Call`].
    pub fn events(&self) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.verb == "record-event")
            .collect()
    }

    /// Each `(verb, group, resource)` the calls made inside
    /// [`Self::reconcile`] so far needed permission for (status writes name
    /// `<plural>/status`; events are `create` on `events.k8s.io/events`).
    pub fn permissions_used(&self) -> Vec<(String, String, String)> {
        with(|s| s.used.iter().cloned().collect())
    }

    /// The permissions `R::metadata()` declares that no reconcile so far
    /// needed, as `(verb, group, resource)`; `list` and `watch` are left out
    /// (the host's informers use them for `for`, `owns` and `watches`). After
    /// a test that walks every path, an empty result means the metadata asks
    /// for exactly what the plugin uses.
    pub fn unused_permissions<R: Reconciler>(&self) -> Vec<(String, String, String)> {
        let used = with(|s| s.used.clone());
        let mut unused = Vec::new();
        for p in R::metadata().into_wit().permissions {
            for resource in &p.resources {
                for verb in &p.verbs {
                    let need = (verb.clone(), p.group.clone(), resource.clone());
                    if verb != "list" && verb != "watch" && !used.contains(&need) {
                        unused.push(need);
                    }
                }
            }
        }
        unused
    }
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        STATE.with(|s| *s.borrow_mut() = None);
    }
}

type Key = (String, String, Option<String>, String);

/// Why [`FakeCluster::from_transcript`] could not read a transcript line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranscriptError(pub String);

impl std::fmt::Display for TranscriptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TranscriptError {}

#[derive(Default)]
struct State {
    objects: BTreeMap<Key, Value>,
    revision: u64,
    calls: Vec<Call>,
    faults: Vec<(String, ApiError)>,
    permissions: Option<Vec<wit::Permission>>,
    used: std::collections::BTreeSet<(String, String, String)>,
    attempt: u32,
    settings: String,
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

fn with<T>(f: impl FnOnce(&mut State) -> T) -> T {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        let state = s
            .as_mut()
            .expect("no wasmctrl_sdk::testing::FakeCluster on this thread");
        f(state)
    })
}

/// The verb, group and resource a call needs permission for.
fn needed(call: &Call) -> (&'static str, String, String) {
    let plural = plural(&call.kind.kind);
    match call.verb {
        "record-event" => ("create", "events.k8s.io".into(), "events".into()),
        "replace-status" => (
            "update",
            call.kind.group.clone(),
            format!("{plural}/status"),
        ),
        "patch-status" => ("patch", call.kind.group.clone(), format!("{plural}/status")),
        "replace" => ("update", call.kind.group.clone(), plural),
        verb => (verb, call.kind.group.clone(), plural),
    }
}

/// Kubernetes' default plural of a kind.
fn plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        return format!("{stem}ies");
    }
    if lower.ends_with(['s', 'x', 'z']) || lower.ends_with("ch") || lower.ends_with("sh") {
        return format!("{lower}es");
    }
    format!("{lower}s")
}

fn allowed(permissions: &[wit::Permission], verb: &str, group: &str, resource: &str) -> bool {
    permissions.iter().any(|p| {
        p.group == group
            && p.resources.iter().any(|r| r == resource || r == "*")
            && p.verbs.iter().any(|v| v == verb || v == "*")
    })
}

fn not_found(kind: &wit::Gvk, ns: Option<&str>, name: &str) -> ApiError {
    let at = ns.map(|ns| format!("{ns}/")).unwrap_or_default();
    ApiError::NotFound(format!("{} {at}{name} not found", kind.kind))
}

impl State {
    /// Records the call, then applies an injected fault or the permission check.
    fn admit(&mut self, call: Call) -> Result<(), ApiError> {
        let verb = call.verb;
        let denied = self.permissions.as_deref().and_then(|p| {
            let (v, group, resource) = needed(&call);
            self.used
                .insert((v.to_string(), group.clone(), resource.clone()));
            (!allowed(p, v, &group, &resource)).then(|| {
                ApiError::Forbidden(format!(
                    "{v} on {}/{resource} is not in the plugin's permissions",
                    if group.is_empty() { "core" } else { &group }
                ))
            })
        });
        self.calls.push(call);
        if let Some(i) = self.faults.iter().position(|(v, _)| v == verb) {
            return Err(self.faults.remove(i).1);
        }
        denied.map_or(Ok(()), Err)
    }

    /// Stores `object` (of recorded `kind`) unless the object is already
    /// stored; later writes get revisions above every recorded one.
    fn seed(&mut self, kind: &Value, object: Value) -> Result<(), TranscriptError> {
        let meta = &object["metadata"];
        let name = meta["name"].as_str().ok_or_else(|| {
            TranscriptError(format!("a recorded object has no metadata.name: {object}"))
        })?;
        let key = (
            kind["group"].as_str().unwrap_or_default().to_string(),
            kind["kind"].as_str().unwrap_or_default().to_string(),
            meta["namespace"].as_str().map(str::to_string),
            name.to_string(),
        );
        if let Some(rv) = meta["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
        {
            self.revision = self.revision.max(rv);
        }
        self.objects.entry(key).or_insert(object);
        Ok(())
    }

    fn next_revision(&mut self) -> String {
        self.revision += 1;
        self.revision.to_string()
    }

    fn create(&mut self, key: Key, mut obj: Value) -> Result<Value, ApiError> {
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
            serde_json::to_value(crate::conditions::now()).unwrap_or(Value::Null),
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
    fn update(&mut self, key: &Key, mut new: Value, status_only: bool) -> Result<Value, ApiError> {
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

    fn delete(&mut self, key: &Key) {
        let obj = self.objects[key].clone();
        if finalizers(&obj).is_empty() {
            self.remove(key);
        } else if !is_deleting(&obj) {
            let mut new = obj;
            meta_mut(&mut new).insert(
                "deletionTimestamp".into(),
                serde_json::to_value(crate::conditions::now()).unwrap_or(Value::Null),
            );
            let revision = self.next_revision();
            meta_mut(&mut new).insert("resourceVersion".into(), json!(revision));
            self.objects.insert(key.clone(), new);
        }
    }

    /// Removes the object and garbage-collects its dependents.
    fn remove(&mut self, key: &Key) {
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

/// RFC 7386.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Value::Object(t) = target else {
        return;
    };
    for (k, v) in patch {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// RFC 6902, atomically.
fn json_patch(target: &Value, ops: &Value) -> Result<Value, ApiError> {
    let invalid = |i: usize, m: &str| ApiError::Invalid(format!("json patch operation {i}: {m}"));
    let ops = ops
        .as_array()
        .ok_or_else(|| ApiError::Invalid("a json patch is an array of operations".into()))?;
    let mut doc = target.clone();
    for (i, op) in ops.iter().enumerate() {
        let path = op["path"].as_str().ok_or_else(|| invalid(i, "no path"))?;
        let tokens = pointer(path).ok_or_else(|| invalid(i, "bad path"))?;
        match op["op"].as_str().unwrap_or_default() {
            "test" => {
                let found = resolve(&doc, &tokens);
                let parent_exists =
                    tokens.len() <= 1 || resolve(&doc, &tokens[..tokens.len() - 1]).is_some();
                let ok = match found {
                    Some(v) => *v == op["value"],
                    None => op["value"].is_null() && parent_exists,
                };
                if !ok {
                    return Err(invalid(i, &format!("test failed at {path}")));
                }
            }
            "add" | "replace" => {
                let (last, parent) = tokens.split_last().ok_or_else(|| invalid(i, "root"))?;
                let parent =
                    resolve_mut(&mut doc, parent).ok_or_else(|| invalid(i, "no parent"))?;
                let value = op
                    .get("value")
                    .cloned()
                    .ok_or_else(|| invalid(i, "no value"))?;
                let replace = op["op"] == "replace";
                match parent {
                    Value::Object(m) => {
                        if replace && !m.contains_key(last) {
                            return Err(invalid(i, "replace of a missing key"));
                        }
                        m.insert(last.clone(), value);
                    }
                    Value::Array(a) => {
                        let index = if last == "-" && !replace {
                            a.len()
                        } else {
                            last.parse::<usize>().map_err(|_| invalid(i, "bad index"))?
                        };
                        if replace && index < a.len() {
                            a[index] = value;
                        } else if !replace && index <= a.len() {
                            a.insert(index, value);
                        } else {
                            return Err(invalid(i, "index out of range"));
                        }
                    }
                    _ => return Err(invalid(i, "parent is not a container")),
                }
            }
            "remove" => {
                let (last, parent) = tokens.split_last().ok_or_else(|| invalid(i, "root"))?;
                let parent =
                    resolve_mut(&mut doc, parent).ok_or_else(|| invalid(i, "no parent"))?;
                let removed = match parent {
                    Value::Object(m) => m.remove(last).is_some(),
                    Value::Array(a) => match last.parse::<usize>() {
                        Ok(index) if index < a.len() => {
                            a.remove(index);
                            true
                        }
                        _ => false,
                    },
                    _ => false,
                };
                if !removed {
                    return Err(invalid(i, &format!("nothing to remove at {path}")));
                }
            }
            other => return Err(invalid(i, &format!("unsupported op {other:?}"))),
        }
    }
    Ok(doc)
}

fn pointer(path: &str) -> Option<Vec<String>> {
    if path.is_empty() {
        return Some(Vec::new());
    }
    let rest = path.strip_prefix('/')?;
    Some(
        rest.split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect(),
    )
}

fn resolve<'a>(doc: &'a Value, tokens: &[String]) -> Option<&'a Value> {
    tokens.iter().try_fold(doc, |v, t| match v {
        Value::Object(m) => m.get(t),
        Value::Array(a) => a.get(t.parse::<usize>().ok()?),
        _ => None,
    })
}

fn resolve_mut<'a>(doc: &'a mut Value, tokens: &[String]) -> Option<&'a mut Value> {
    tokens.iter().try_fold(doc, |v, t| match v {
        Value::Object(m) => m.get_mut(t),
        Value::Array(a) => a.get_mut(t.parse::<usize>().ok()?),
        _ => None,
    })
}

fn matches_selector(obj: &Value, selector: &str) -> Result<bool, ApiError> {
    let labels = &obj["metadata"]["labels"];
    let label = |k: &str| labels.get(k.trim()).and_then(Value::as_str);
    for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let ok = if let Some((k, v)) = term.split_once("!=") {
            label(k) != Some(v.trim())
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            label(k) == Some(v.trim())
        } else if let Some(k) = term.strip_prefix('!') {
            label(k).is_none()
        } else if term.contains([' ', '(']) {
            return Err(ApiError::Invalid(format!(
                "the fake API server does not support the selector term {term:?}"
            )));
        } else {
            label(term).is_some()
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The fakes behind `crate::host`.
pub(crate) mod fake {
    pub(crate) mod context {
        pub use crate::bindings::wasmctrl::reconciler::types::LogLevel;

        pub fn deadline_remaining_ms() -> u64 {
            10_000
        }

        pub fn cancelled() -> bool {
            false
        }

        pub fn attempt() -> u32 {
            super::super::with(|s| s.attempt)
        }

        pub fn settings() -> String {
            super::super::with(|s| {
                if s.settings.is_empty() {
                    "{}".to_string()
                } else {
                    s.settings.clone()
                }
            })
        }

        pub fn log(level: LogLevel, message: &str, fields: &[(String, String)]) {
            eprintln!("[{level:?}] {message} {fields:?}");
        }

        /// The fake prints every level.
        pub fn log_enabled(_level: LogLevel) -> bool {
            true
        }
    }

    pub(crate) mod kube {
        use serde_json::{Value, json};

        use super::super::{
            Call, Key, State, json_patch, matches_selector, merge_patch, not_found, with,
        };
        use crate::ApiError;
        pub(crate) use crate::bindings::wasmctrl::reconciler::kube::{
            ApplyPatch, Event, EventType, ObjectPatch,
        };
        use crate::bindings::wasmctrl::reconciler::types as wit;

        type Reply<T> = Result<T, wit::ApiError>;

        fn to_wit(e: ApiError) -> wit::ApiError {
            match e {
                ApiError::NotFound(m) => wit::ApiError::NotFound(m),
                ApiError::Conflict(m) => wit::ApiError::Conflict(m),
                ApiError::AlreadyExists(m) => wit::ApiError::AlreadyExists(m),
                ApiError::Forbidden(m) => wit::ApiError::Forbidden(m),
                ApiError::Invalid(m) | ApiError::Serialization(m) => wit::ApiError::Invalid(m),
                ApiError::Timeout(m) => wit::ApiError::Timeout(m),
                ApiError::Unavailable(m) => wit::ApiError::Unavailable(m),
                ApiError::Other(m) => wit::ApiError::Other(m),
            }
        }

        fn key(kind: &wit::Gvk, ns: Option<&str>, name: &str) -> Key {
            (
                kind.group.clone(),
                kind.kind.clone(),
                ns.map(str::to_string),
                name.to_string(),
            )
        }

        fn parse(text: &str) -> Result<Value, ApiError> {
            serde_json::from_str(text).map_err(|e| ApiError::Invalid(format!("invalid JSON: {e}")))
        }

        fn patch_parts(patch: &ObjectPatch) -> Result<(Value, String), ApiError> {
            Ok(match patch {
                ObjectPatch::Merge(s) => (parse(s)?, "merge".into()),
                ObjectPatch::Json(s) => (parse(s)?, "json".into()),
                ObjectPatch::Apply(a) => (
                    parse(&a.body)?,
                    format!("apply {} force={}", a.field_manager, a.force),
                ),
            })
        }

        /// Records and admits a call, then runs `op` on the state.
        fn serve<T>(
            verb: &'static str,
            kind: &wit::Gvk,
            ns: Option<&str>,
            name: &str,
            body: Value,
            patch: String,
            op: impl FnOnce(&mut State, Value) -> Result<T, ApiError>,
        ) -> Reply<T> {
            let call = Call {
                verb,
                kind: crate::Gvk::new(&kind.group, &kind.version, &kind.kind),
                namespace: ns.map(str::to_string),
                name: name.to_string(),
                body: body.clone(),
                patch,
            };
            with(|s| {
                s.admit(call)?;
                op(s, body)
            })
            .map_err(to_wit)
        }

        fn existing(
            s: &State,
            kind: &wit::Gvk,
            ns: Option<&str>,
            name: &str,
        ) -> Result<Key, ApiError> {
            let k = key(kind, ns, name);
            if s.objects.contains_key(&k) {
                Ok(k)
            } else {
                Err(not_found(kind, ns, name))
            }
        }

        pub fn get(kind: &wit::Gvk, ns: Option<&str>, name: &str) -> Reply<String> {
            serve("get", kind, ns, name, Value::Null, String::new(), |s, _| {
                let k = existing(s, kind, ns, name)?;
                Ok(s.objects[&k].to_string())
            })
        }

        pub fn list(
            kind: &wit::Gvk,
            ns: Option<&str>,
            selector: Option<&str>,
        ) -> Reply<Vec<String>> {
            let body = selector.map_or(Value::Null, |s| json!(s));
            serve("list", kind, ns, "", body, String::new(), |s, _| {
                let mut items = Vec::new();
                for ((group, k, obj_ns, _), obj) in &s.objects {
                    if *group != kind.group
                        || *k != kind.kind
                        || (ns.is_some() && obj_ns.as_deref() != ns)
                    {
                        continue;
                    }
                    if selector.map(|sel| matches_selector(obj, sel)).transpose()? != Some(false) {
                        items.push(obj.to_string());
                    }
                }
                Ok(items)
            })
        }

        pub fn create(kind: &wit::Gvk, ns: Option<&str>, object: &str) -> Reply<String> {
            let body = parse(object).map_err(to_wit)?;
            serve("create", kind, ns, "", body, String::new(), |s, body| {
                let name = body["metadata"]["name"]
                    .as_str()
                    .ok_or_else(|| ApiError::Invalid("metadata.name is required".into()))?
                    .to_string();
                Ok(s.create(key(kind, ns, &name), body)?.to_string())
            })
        }

        pub fn replace(
            kind: &wit::Gvk,
            ns: Option<&str>,
            name: &str,
            object: &str,
        ) -> Reply<String> {
            let body = parse(object).map_err(to_wit)?;
            serve("replace", kind, ns, name, body, String::new(), |s, body| {
                let k = existing(s, kind, ns, name)?;
                Ok(s.update(&k, body, false)?.to_string())
            })
        }

        pub fn replace_status(
            kind: &wit::Gvk,
            ns: Option<&str>,
            name: &str,
            object: &str,
        ) -> Reply<String> {
            let body = parse(object).map_err(to_wit)?;
            serve(
                "replace-status",
                kind,
                ns,
                name,
                body,
                String::new(),
                |s, body| {
                    let k = existing(s, kind, ns, name)?;
                    Ok(s.update(&k, body, true)?.to_string())
                },
            )
        }

        fn patch_any(
            verb: &'static str,
            kind: &wit::Gvk,
            ns: Option<&str>,
            name: &str,
            patch: &ObjectPatch,
        ) -> Reply<String> {
            let (body, how) = patch_parts(patch).map_err(to_wit)?;
            let status_only = verb == "patch-status";
            let is_apply = matches!(patch, ObjectPatch::Apply(_));
            serve(verb, kind, ns, name, body, how, |s, body| {
                let k = key(kind, ns, name);
                let Some(current) = s.objects.get(&k).cloned() else {
                    if is_apply && !status_only {
                        return Ok(s.create(k, body)?.to_string());
                    }
                    return Err(not_found(kind, ns, name));
                };
                let next = if matches!(patch, ObjectPatch::Json(_)) {
                    json_patch(&current, &body)?
                } else {
                    let mut next = current.clone();
                    merge_patch(&mut next, &body);
                    next
                };
                Ok(s.update(&k, next, status_only)?.to_string())
            })
        }

        pub fn patch(
            kind: &wit::Gvk,
            ns: Option<&str>,
            name: &str,
            patch: &ObjectPatch,
        ) -> Reply<String> {
            patch_any("patch", kind, ns, name, patch)
        }

        pub fn patch_status(
            kind: &wit::Gvk,
            ns: Option<&str>,
            name: &str,
            patch: &ObjectPatch,
        ) -> Reply<String> {
            patch_any("patch-status", kind, ns, name, patch)
        }

        pub fn delete(kind: &wit::Gvk, ns: Option<&str>, name: &str) -> Reply<()> {
            serve(
                "delete",
                kind,
                ns,
                name,
                Value::Null,
                String::new(),
                |s, _| {
                    let k = existing(s, kind, ns, name)?;
                    s.delete(&k);
                    Ok(())
                },
            )
        }

        pub fn record_event(event: &Event) -> Reply<()> {
            let body = json!({
                "type": match event.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                },
                "reason": event.reason,
                "action": event.action,
                "note": event.note,
            });
            serve(
                "record-event",
                &event.regarding_kind,
                event.regarding_namespace.as_deref(),
                &event.regarding_name,
                body,
                String::new(),
                |_, _| Ok(()),
            )
        }
    }
}
