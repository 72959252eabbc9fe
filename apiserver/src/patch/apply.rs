//! Server-side apply and the `metadata.managedFields` bookkeeping every
//! other write needs, modelled on `sigs.k8s.io/structured-merge-diff` and
//! the API server's field manager.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::PatchError;
use super::managed_fields::{
    FieldSet, applied_fields, compare, item_element, item_field, root_field, strip_unowned,
};
use super::merge_keys::{self, Field, ListKind};

const APPLY: &str = "Apply";
const UPDATE: &str = "Update";

/// A server-side apply request (`PATCH` with
/// `application/apply-patch+yaml`, body already decoded from YAML).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ApplyRequest<'a> {
    /// The stored object, or `None` when the apply creates it.
    pub(crate) live: Option<&'a Value>,
    /// The applied configuration: the fields this manager wants to own.
    pub(crate) applied: &'a Value,
    /// The `fieldManager` query parameter.
    pub(crate) manager: &'a str,
    /// The `force` query parameter: take conflicting fields instead of
    /// failing.
    pub(crate) force: bool,
    /// The request's API version, recorded in the managedFields entry.
    pub(crate) api_version: &'a str,
    /// The object's kind, which selects the schema used for list merging.
    pub(crate) kind: &'a str,
    /// A custom resource's `openAPIV3Schema`, whose list and map types
    /// say how its lists merge and who owns what.
    pub(crate) schema: Option<&'a Value>,
    /// `Some("status")` for an apply to the status subresource.
    pub(crate) subresource: Option<&'a str>,
    /// The request time, RFC 3339, recorded as the entry's `time`.
    pub(crate) now: &'a str,
}

/// Applies a configuration the way a Kubernetes API server does and
/// returns the object to store, with `metadata.managedFields` updated.
///
/// - The applied configuration merges into the live object: maps field by
///   field, keyed lists (containers by `name`, ports by `containerPort`
///   and `protocol`, …; a custom resource's lists of
///   `x-kubernetes-list-type: map` by their `x-kubernetes-list-map-keys`)
///   item by item, `finalizers` and lists of `x-kubernetes-list-type: set`
///   as sets, every other list as a whole. A `null` in the configuration
///   removes the field.
/// - The manager's `Apply` entry becomes exactly the set of fields in the
///   configuration. Fields it applied last time and omits now are removed
///   from the object unless another manager owns them (or something below
///   them).
/// - Changing a field another manager owns, whether it last wrote it with
///   `Apply` or an ordinary `Update`, is a [`PatchError::Conflict`] unless
///   `force` is set, in which case the other manager loses the field.
///   Applying the value a field already has is not a change: ownership is
///   then shared.
/// - `apiVersion`, `kind` and server-maintained metadata (`name`,
///   `namespace`, `uid`, `resourceVersion`, …) are never owned.
///
/// # Errors
///
/// [`PatchError::Conflict`] as above. [`PatchError::Invalid`] when the
/// configuration is not an object or carries `metadata.managedFields`.
/// Stored managedFields that cannot be decoded are discarded, not an
/// error.
pub(crate) fn server_side_apply(req: ApplyRequest<'_>) -> Result<Value, PatchError> {
    if !req.applied.is_object() {
        return Err(PatchError::Invalid(
            "apply configuration must be an object".to_owned(),
        ));
    }
    if req
        .applied
        .pointer("/metadata/managedFields")
        .is_some_and(|v| !v.is_null())
    {
        return Err(PatchError::Invalid(
            "metadata.managedFields must be nil".to_owned(),
        ));
    }
    let ty = merge_keys::root(req.api_version, req.kind, req.schema);
    let mut live = match req.live {
        Some(live @ Value::Object(_)) => live.clone(),
        Some(_) => {
            return Err(PatchError::Invalid(
                "live object is not an object".to_owned(),
            ));
        }
        None => Value::Object(Map::new()),
    };
    // Undecodable stored entries are dropped, as Kubernetes does, so one
    // bad write cannot make an object unappliable.
    let mut entries = decode(take_managed_fields(&mut live).as_ref()).unwrap_or_default();

    let mut applied = req.applied.clone();
    let mut nulls = Nulls::default();
    take_nulls(&mut applied, &mut nulls);
    let mut new_set = applied_fields(&applied, ty);
    strip_unowned(&mut new_set);

    let mut merged = live.clone();
    merge_applied(&mut merged, &applied, root_field(ty));
    remove_nulls(&mut merged, &nulls);

    let me = entries
        .iter()
        .position(|e| e.is(req.manager, APPLY, req.api_version, req.subresource));
    if let Some(me) = me {
        let mut stale = entries[me].set.clone();
        stale.difference(&new_set);
        let mut kept = new_set.clone();
        for (i, entry) in entries.iter().enumerate() {
            if i != me {
                kept.union(&entry.set);
            }
        }
        prune(&mut merged, root_field(ty), &stale, Some(&kept), &[]);
    }

    let mut cmp = compare(&live, &merged, ty);
    strip_unowned(&mut cmp.changed);
    strip_unowned(&mut cmp.removed);
    let mut conflicts = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        if Some(i) == me {
            continue;
        }
        let taken = entry.set.intersection(&cmp.changed);
        if !taken.is_empty() {
            conflicts.push((i, taken));
        }
    }
    if !conflicts.is_empty() && !req.force {
        return Err(conflict_error(&entries, &conflicts));
    }
    for (i, taken) in &conflicts {
        entries[*i].set.difference(taken);
    }
    for (i, entry) in entries.iter_mut().enumerate() {
        if Some(i) != me {
            entry.set.difference(&cmp.removed);
        }
    }

    let object_changed = merged != live;
    match me {
        Some(me) => {
            let entry = &mut entries[me];
            if object_changed || entry.set != new_set {
                entry.time = Some(req.now.to_owned());
            }
            entry.set = new_set;
            req.api_version.clone_into(&mut entry.api_version);
        }
        None => entries.push(Entry {
            manager: req.manager.to_owned(),
            operation: APPLY.to_owned(),
            api_version: req.api_version.to_owned(),
            time: Some(req.now.to_owned()),
            subresource: req.subresource.map(str::to_owned),
            set: new_set,
        }),
    }

    if let Value::Object(map) = &mut merged {
        for (key, value) in [("apiVersion", req.api_version), ("kind", req.kind)] {
            map.entry(key)
                .or_insert_with(|| Value::String(value.to_owned()));
        }
    }
    store_managed_fields(&mut merged, entries);
    Ok(merged)
}

/// Records a non-apply write (create, update, merge / JSON / strategic
/// patch) in `updated`'s `metadata.managedFields`.
///
/// `live` is the stored object (`None` on create) and `updated` the object
/// about to be stored, and `schema` a custom resource's `openAPIV3Schema`
/// (see [`server_side_apply`]). Every field the write added or changed
/// becomes owned by `manager`'s `Update` entry for (`api_version`,
/// `subresource`), and is taken away from every other manager; fields the
/// write removed leave every set. The entry's `time` moves to `now` only
/// when the write changed something, so no-op writes stay no-ops.
///
/// The starting point is the live object's managedFields, except that a
/// main-resource write may replace them: a non-empty list in `updated` is
/// taken as given, and `[{}]` clears them (as `kubectl` does to reset
/// ownership). Undecodable managedFields are dropped rather than failing
/// the write, as Kubernetes does.
pub(crate) fn record_update(
    live: Option<&Value>,
    updated: &mut Value,
    manager: &str,
    schema: Option<&Value>,
    api_version: &str,
    subresource: Option<&str>,
    now: &str,
) {
    let operation = UPDATE;
    if !updated.is_object() {
        return;
    }
    let object_version = updated
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or(api_version);
    let kind = updated.get("kind").and_then(Value::as_str).unwrap_or("");
    let ty = merge_keys::root(object_version, kind, schema);

    let mut old = live.cloned().unwrap_or_else(|| Value::Object(Map::new()));
    let live_entries = decode(take_managed_fields(&mut old).as_ref()).unwrap_or_default();
    let requested = take_managed_fields(updated);
    let mut entries = match (subresource, requested) {
        (None, Some(Value::Array(items)))
            if items.len() == 1 && items[0].as_object().is_some_and(Map::is_empty) =>
        {
            Vec::new()
        }
        (None, Some(requested)) => match decode(Some(&requested)) {
            Ok(entries) if !entries.is_empty() => entries,
            _ => live_entries,
        },
        _ => live_entries,
    };

    let mut cmp = compare(&old, updated, ty);
    strip_unowned(&mut cmp.changed);
    strip_unowned(&mut cmp.removed);
    let me = entries
        .iter()
        .position(|e| e.is(manager, operation, api_version, subresource));
    for (i, entry) in entries.iter_mut().enumerate() {
        entry.set.difference(&cmp.removed);
        if Some(i) != me {
            entry.set.difference(&cmp.changed);
        }
    }
    if !cmp.changed.is_empty() {
        match me {
            Some(me) => {
                entries[me].set.union(&cmp.changed);
                entries[me].time = Some(now.to_owned());
            }
            None => entries.push(Entry {
                manager: manager.to_owned(),
                operation: operation.to_owned(),
                api_version: api_version.to_owned(),
                time: Some(now.to_owned()),
                subresource: subresource.map(str::to_owned),
                set: cmp.changed,
            }),
        }
    }
    store_managed_fields(updated, entries);
}

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: Option<String>,
    subresource: Option<String>,
    set: FieldSet,
}

impl Entry {
    /// Whether this entry belongs to the given writer. As in Kubernetes,
    /// an `Update` entry is per API version, while an applier keeps one
    /// entry whatever version it applies with.
    fn is(
        &self,
        manager: &str,
        operation: &str,
        api_version: &str,
        subresource: Option<&str>,
    ) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
            && (operation == APPLY || self.api_version == api_version)
    }

    /// The manager as Kubernetes names it in conflict messages.
    fn describe(&self) -> String {
        let mut out = Value::String(self.manager.clone()).to_string();
        if let Some(sub) = &self.subresource {
            let _ = write!(out, " with subresource {}", Value::String(sub.clone()));
        }
        if self.operation != APPLY {
            let _ = write!(out, " using {}", self.api_version);
        }
        out
    }

    fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("manager".into(), self.manager.clone().into());
        map.insert("operation".into(), self.operation.clone().into());
        map.insert("apiVersion".into(), self.api_version.clone().into());
        if let Some(time) = &self.time {
            map.insert("time".into(), time.clone().into());
        }
        map.insert("fieldsType".into(), "FieldsV1".into());
        map.insert("fieldsV1".into(), self.set.to_fields_v1());
        if let Some(sub) = &self.subresource {
            map.insert("subresource".into(), sub.clone().into());
        }
        Value::Object(map)
    }

    fn from_json(value: &Value) -> Result<Entry, String> {
        let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
        if let Some(fields_type) = text("fieldsType")
            && fields_type != "FieldsV1"
        {
            return Err(format!("unsupported fieldsType {fields_type:?}"));
        }
        let set = match value.get("fieldsV1") {
            None | Some(Value::Null) => FieldSet::default(),
            Some(fields) => FieldSet::from_fields_v1(fields)?,
        };
        Ok(Entry {
            manager: text("manager").unwrap_or_default(),
            operation: text("operation").ok_or("entry without operation")?,
            api_version: text("apiVersion").unwrap_or_default(),
            time: text("time"),
            subresource: text("subresource").filter(|s| !s.is_empty()),
            set,
        })
    }
}

fn decode(value: Option<&Value>) -> Result<Vec<Entry>, String> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items.iter().map(Entry::from_json).collect(),
        Some(_) => Err("managedFields must be a list".to_owned()),
    }
}

/// Writes entries in Kubernetes' order: `Apply` before `Update`, then by
/// time, manager, apiVersion and subresource. Empty entries are dropped,
/// and so is the field when no entry is left.
fn store_managed_fields(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.set.is_empty());
    entries.sort_by(|a, b| {
        (
            &a.operation,
            &a.time,
            &a.manager,
            &a.api_version,
            &a.subresource,
        )
            .cmp(&(
                &b.operation,
                &b.time,
                &b.manager,
                &b.api_version,
                &b.subresource,
            ))
    });
    let Value::Object(map) = obj else { return };
    if entries.is_empty() {
        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
            meta.remove("managedFields");
        }
        return;
    }
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(meta) = meta {
        meta.insert(
            "managedFields".to_owned(),
            Value::Array(entries.iter().map(Entry::to_json).collect()),
        );
    }
}

fn take_managed_fields(obj: &mut Value) -> Option<Value> {
    obj.get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|meta| meta.remove("managedFields"))
}

/// The conflicting fields an apply's 409 lists; the rest are counted.
const MAX_SHOWN_CONFLICTS: usize = 100;

fn conflict_error(entries: &[Entry], conflicts: &[(usize, FieldSet)]) -> PatchError {
    let mut by_manager: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let (mut total, mut room) = (0, MAX_SHOWN_CONFLICTS);
    for (i, taken) in conflicts {
        let (shown, count) = taken.shown_paths(room);
        total += count;
        room -= shown.len();
        if !shown.is_empty() {
            by_manager
                .entry(entries[*i].describe())
                .or_default()
                .extend(shown);
        }
    }
    let fields: Vec<String> = by_manager.values().flatten().cloned().collect();
    let message = if total == 1 {
        let (manager, paths) = by_manager.iter().next().expect("one conflict");
        format!(
            "Apply failed with 1 conflict: conflict with {manager}: {}",
            paths[0]
        )
    } else {
        let mut lines = Vec::new();
        for (manager, paths) in &by_manager {
            lines.push(format!("conflicts with {manager}:"));
            lines.extend(paths.iter().map(|p| format!("- {p}")));
        }
        if total > fields.len() {
            lines.push(format!("and {} more", total - fields.len()));
        }
        format!("Apply failed with {total} conflicts: {}", lines.join("\n"))
    };
    PatchError::Conflict {
        message,
        conflicts: fields,
    }
}

/// Where an applied configuration set map members to `null`, outside
/// lists: a trie of keys, so that a key is held once however many nulls
/// are below it.
#[derive(Default)]
struct Nulls {
    /// The key holding this node is to be removed.
    here: bool,
    below: BTreeMap<String, Nulls>,
}

impl Nulls {
    fn is_empty(&self) -> bool {
        !self.here && self.below.is_empty()
    }
}

/// Removes `null` members of maps from an applied configuration, recording
/// those outside lists in `out` so they can be cleared in the result.
fn take_nulls(value: &mut Value, out: &mut Nulls) {
    match value {
        Value::Object(map) => {
            map.retain(|key, v| {
                if v.is_null() {
                    out.below.entry(key.clone()).or_default().here = true;
                    false
                } else {
                    true
                }
            });
            for (key, child) in map.iter_mut() {
                if !(child.is_object() || child.is_array()) {
                    continue;
                }
                let mut below = out.below.remove(key).unwrap_or_default();
                take_nulls(child, &mut below);
                if !below.is_empty() {
                    out.below.insert(key.clone(), below);
                }
            }
        }
        Value::Array(items) => {
            // Inside lists a null only means "unset"; there is nothing to
            // clear by position.
            for item in items {
                take_nulls(item, &mut Nulls::default());
            }
        }
        _ => {}
    }
}

/// Removes from `value` the members `nulls` names.
fn remove_nulls(value: &mut Value, nulls: &Nulls) {
    let Value::Object(map) = value else {
        return;
    };
    for (key, below) in &nulls.below {
        if below.here {
            map.remove(key);
        } else if let Some(child) = map.get_mut(key) {
            remove_nulls(child, below);
        }
    }
}

/// Merges an applied configuration into the live object.
fn merge_applied(live: &mut Value, applied: &Value, field: Field) {
    match (live, applied) {
        (Value::Object(live), Value::Object(applied)) if !field.atomic_map => {
            for (key, value) in applied {
                let child = merge_keys::field(field.ty, key);
                match live.get_mut(key) {
                    Some(existing) => merge_applied(existing, value, child),
                    None => {
                        live.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (Value::Array(live), Value::Array(applied)) if field.list != ListKind::Atomic => {
            merge_applied_list(live, applied, field);
        }
        (live, applied) => *live = applied.clone(),
    }
}

/// Merges a keyed or set list the way structured-merge-diff walks it:
/// live items the configuration does not mention keep their place, and
/// the configured items follow the configuration's order.
fn merge_applied_list(live: &mut Vec<Value>, applied: &[Value], field: Field) {
    let id = |item: &Value| item_element(item, field.list, 0);
    let live_ids: Vec<Option<String>> = live.iter().map(id).collect();
    let applied_ids: Vec<Option<String>> = applied.iter().map(id).collect();
    // Found by maps, not searched: a list of hundreds of thousands of items
    // costs its length, not its square.
    let applied_set: HashSet<&Option<String>> = applied_ids.iter().collect();
    let mut live_at: HashMap<&Option<String>, usize> = HashMap::with_capacity(live_ids.len());
    for (i, id) in live_ids.iter().enumerate() {
        live_at.entry(id).or_insert(i);
    }
    let mut live_items: Vec<Option<Value>> = std::mem::take(live).into_iter().map(Some).collect();
    let mut seen = HashSet::new();
    let (mut l, mut r) = (0, 0);
    while l < live_items.len() || r < applied.len() {
        if l < live_items.len() && r < applied.len() && live_ids[l] == applied_ids[r] {
            let mut item = live_items[l].take().unwrap_or(Value::Null);
            merge_applied(&mut item, &applied[r], item_field(field));
            live.push(item);
            seen.insert(applied_ids[r].clone());
            l += 1;
            r += 1;
            continue;
        }
        if l < live_items.len() {
            if !applied_set.contains(&live_ids[l]) {
                live.extend(live_items[l].take());
                l += 1;
                continue;
            }
            if seen.contains(&live_ids[l]) || r >= applied.len() {
                l += 1;
                continue;
            }
        }
        let pe = &applied_ids[r];
        let mut item = match live_at.get(pe) {
            Some(&at) => live_items[at].take().unwrap_or(Value::Null),
            None => Value::Null,
        };
        merge_applied(&mut item, &applied[r], item_field(field));
        live.push(item);
        seen.insert(pe.clone());
        r += 1;
    }
}

/// Removes from `value` the members of `stale` that nobody in `kept` owns,
/// neither the path itself nor anything below it. `key_names` are the key
/// fields of the list item `value` is, which stay while the item does.
fn prune(
    value: &mut Value,
    field: Field,
    stale: &FieldSet,
    kept: Option<&FieldSet>,
    key_names: &[&str],
) {
    let orphaned = |element: &str, child: &FieldSet| {
        child.member
            && kept
                .and_then(|k| k.child(element))
                .is_none_or(FieldSet::is_empty)
    };
    match value {
        Value::Object(map) if !field.atomic_map => {
            for (element, child) in &stale.children {
                let Some(name) = element.strip_prefix("f:") else {
                    continue;
                };
                if key_names.contains(&name) {
                    continue;
                }
                if orphaned(element, child) {
                    map.remove(name);
                } else if let Some(inner) = map.get_mut(name) {
                    let kept = kept.and_then(|k| k.child(element));
                    prune(inner, merge_keys::field(field.ty, name), child, kept, &[]);
                }
            }
        }
        Value::Array(items) if field.list != ListKind::Atomic => {
            let mut at_element: HashMap<String, usize> = HashMap::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                if let Some(element) = item_element(item, field.list, i) {
                    at_element.entry(element).or_insert(i);
                }
            }
            let mut removed = HashSet::new();
            for (element, child) in &stale.children {
                let Some(&at) = at_element.get(element.as_str()) else {
                    continue;
                };
                if orphaned(element, child) {
                    removed.insert(at);
                } else {
                    let kept = kept.and_then(|k| k.child(element));
                    prune(
                        &mut items[at],
                        item_field(field),
                        child,
                        kept,
                        &field.key_names(),
                    );
                }
            }
            if !removed.is_empty() {
                let mut i = 0;
                items.retain(|_| {
                    i += 1;
                    !removed.contains(&(i - 1))
                });
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T1: &str = "2025-01-02T03:04:05Z";
    const T2: &str = "2025-01-02T03:05:00Z";
    const T3: &str = "2025-01-02T03:06:00Z";

    fn apply(
        live: Option<&Value>,
        applied: Value,
        manager: &str,
        force: bool,
        now: &str,
    ) -> Result<Value, PatchError> {
        let kind = applied["kind"].as_str().unwrap().to_owned();
        let api_version = applied["apiVersion"].as_str().unwrap().to_owned();
        server_side_apply(ApplyRequest {
            live,
            applied: &applied,
            manager,
            force,
            api_version: &api_version,
            kind: &kind,
            schema: None,
            subresource: None,
            now,
        })
    }

    /// A non-forced apply of the ConfigMap holding `data`.
    fn apply_configmap(
        live: Option<&Value>,
        data: Value,
        manager: &str,
        now: &str,
    ) -> Result<Value, PatchError> {
        apply(live, configmap(data), manager, false, now)
    }

    /// The fields `manager` owns in `obj` (its entry's `fieldsV1`).
    fn owned_by<'a>(obj: &'a Value, manager: &str) -> &'a Value {
        &entry(obj, manager)["fieldsV1"]
    }

    fn managed(obj: &Value) -> &Vec<Value> {
        obj["metadata"]["managedFields"].as_array().unwrap()
    }

    fn entry<'a>(obj: &'a Value, manager: &str) -> &'a Value {
        managed(obj)
            .iter()
            .find(|e| e["manager"] == manager)
            .unwrap_or_else(|| panic!("no entry for {manager} in {obj}"))
    }

    fn configmap(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "c", "namespace": "default"}, "data": data})
    }

    fn deployment(replicas: i64, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "nginx", "namespace": "default", "labels": {"app": "nginx"}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "nginx"}},
                "template": {
                    "metadata": {"labels": {"app": "nginx"}},
                    "spec": {"containers": [
                        {"name": "nginx", "image": image, "ports": [{"containerPort": 80}]}
                    ]}
                }
            }
        })
    }

    /// `kubectl apply --server-side` of the nginx Deployment from the
    /// Kubernetes docs stores exactly this entry (the time aside).
    #[test]
    fn apply_creates_object_with_kubernetes_shaped_entry() {
        let out = apply(None, deployment(3, "nginx:1.14.2"), "kubectl", false, T1).unwrap();
        assert_eq!(out["spec"]["replicas"], 3);
        assert_eq!(out["metadata"]["name"], "nginx");
        assert_eq!(
            out["metadata"]["managedFields"],
            json!([{
                "apiVersion": "apps/v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {
                        "f:replicas": {},
                        "f:selector": {},
                        "f:template": {
                            "f:metadata": {"f:labels": {"f:app": {}}},
                            "f:spec": {"f:containers": {"k:{\"name\":\"nginx\"}": {
                                ".": {},
                                "f:image": {},
                                "f:name": {},
                                "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                                    ".": {}, "f:containerPort": {}
                                }}
                            }}}
                        }
                    }
                },
                "manager": "kubectl",
                "operation": "Apply",
                "time": T1
            }])
        );
    }

    #[test]
    fn reapply_updates_values_and_removes_dropped_fields() {
        let first = apply_configmap(None, json!({"a": "1", "b": "2"}), "mgr", T1).unwrap();
        let second = apply_configmap(Some(&first), json!({"a": "9"}), "mgr", T2).unwrap();
        assert_eq!(second["data"], json!({"a": "9"}));
        assert_eq!(owned_by(&second, "mgr"), &json!({"f:data": {"f:a": {}}}));
        assert_eq!(entry(&second, "mgr")["time"], T2);
        assert_eq!(managed(&second).len(), 1);
    }

    #[test]
    fn dropped_container_is_removed_and_dropped_env_too() {
        let mut two = deployment(1, "nginx:1");
        two["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "side", "image": "side:1", "env": [{"name": "X", "value": "1"}]}));
        let first = apply(None, two, "mgr", false, T1).unwrap();
        let second = apply(Some(&first), deployment(1, "nginx:2"), "mgr", false, T2).unwrap();
        let containers = second["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        assert_eq!(containers.len(), 1);
        assert_eq!(containers[0]["image"], "nginx:2");
    }

    #[test]
    fn fields_also_owned_by_another_manager_survive_removal() {
        let first = apply_configmap(None, json!({"a": "1", "b": "2"}), "one", T1).unwrap();
        let shared = apply_configmap(Some(&first), json!({"b": "2"}), "two", T2).unwrap();
        let out = apply_configmap(Some(&shared), json!({"a": "1"}), "one", T3).unwrap();
        assert_eq!(out["data"], json!({"a": "1", "b": "2"}));
        assert_eq!(owned_by(&out, "one"), &json!({"f:data": {"f:a": {}}}));
        assert_eq!(owned_by(&out, "two"), &json!({"f:data": {"f:b": {}}}));
    }

    #[test]
    fn same_value_is_shared_ownership_not_a_conflict() {
        let first = apply_configmap(None, json!({"a": "1"}), "one", T1).unwrap();
        let out = apply_configmap(Some(&first), json!({"a": "1"}), "two", T2).unwrap();
        assert_eq!(owned_by(&out, "one"), &json!({"f:data": {"f:a": {}}}));
        assert_eq!(owned_by(&out, "two"), &json!({"f:data": {"f:a": {}}}));
        // Apply entries sort by time before manager.
        assert_eq!(managed(&out)[0]["manager"], "one");
    }

    #[test]
    fn conflicting_apply_fails_and_force_takes_ownership() {
        let first = apply_configmap(None, json!({"a": "1", "b": "1"}), "one", T1).unwrap();
        let err = apply_configmap(Some(&first), json!({"a": "2"}), "two", T2).unwrap_err();
        assert_eq!(
            err,
            PatchError::Conflict {
                message: "Apply failed with 1 conflict: conflict with \"one\": .data.a".to_owned(),
                conflicts: vec![".data.a".to_owned()],
            }
        );
        let err =
            apply_configmap(Some(&first), json!({"a": "2", "b": "2"}), "two", T2).unwrap_err();
        let PatchError::Conflict { message, conflicts } = err else {
            panic!("expected a conflict")
        };
        assert_eq!(
            message,
            "Apply failed with 2 conflicts: conflicts with \"one\":\n- .data.a\n- .data.b"
        );
        assert_eq!(conflicts, [".data.a", ".data.b"]);

        let forced = apply(Some(&first), configmap(json!({"a": "2"})), "two", true, T2).unwrap();
        assert_eq!(forced["data"], json!({"a": "2", "b": "1"}));
        assert_eq!(owned_by(&forced, "one"), &json!({"f:data": {"f:b": {}}}));
        assert_eq!(owned_by(&forced, "two"), &json!({"f:data": {"f:a": {}}}));
        // "one" no longer owns `a`, so dropping it later leaves it alone.
        let out = apply_configmap(Some(&forced), json!({"b": "1"}), "one", T3).unwrap();
        assert_eq!(out["data"], json!({"a": "2", "b": "1"}));
    }

    #[test]
    fn update_managers_conflict_with_appliers() {
        let created = apply(None, deployment(3, "nginx:1"), "kubectl", false, T1).unwrap();
        let mut scaled = created.clone();
        scaled["spec"]["replicas"] = json!(5);
        record_update(
            Some(&created),
            &mut scaled,
            "kube-controller-manager",
            None,
            "apps/v1",
            None,
            T2,
        );
        assert_eq!(
            owned_by(&scaled, "kube-controller-manager"),
            &json!({"f:spec": {"f:replicas": {}}})
        );
        // The applier lost `.spec.replicas` to the updater.
        assert!(
            owned_by(&scaled, "kubectl")["f:spec"]
                .get("f:replicas")
                .is_none()
        );

        let err = apply(
            Some(&scaled),
            deployment(3, "nginx:1"),
            "kubectl",
            false,
            T3,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"kube-controller-manager\" using apps/v1: .spec.replicas"
        );
        // Re-applying without replicas neither conflicts nor removes it.
        let mut without = deployment(3, "nginx:2");
        without["spec"].as_object_mut().unwrap().remove("replicas");
        let out = apply(Some(&scaled), without, "kubectl", false, T3).unwrap();
        assert_eq!(out["spec"]["replicas"], 5);
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"][0]["image"],
            "nginx:2"
        );
        let order: Vec<&str> = managed(&out)
            .iter()
            .map(|e| e["operation"].as_str().unwrap())
            .collect();
        assert_eq!(order, ["Apply", "Update"]);
    }

    #[test]
    fn keyed_list_items_merge_across_managers() {
        let first = apply(None, deployment(1, "nginx:1"), "one", false, T1).unwrap();
        let mut sidecar = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "nginx"},
            "spec": {"template": {"spec": {"containers": [{"name": "side", "image": "side:1"}]}}}
        });
        let out = apply(Some(&first), sidecar.clone(), "two", false, T2).unwrap();
        let names: Vec<&str> = out["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["nginx", "side"]);
        // "two" stops applying its container: only that one goes.
        sidecar["spec"]["template"]["spec"]["containers"] = json!([]);
        let out = apply(Some(&out), sidecar, "two", false, T3).unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn applied_list_order_follows_structured_merge_diff() {
        let svc = |ports: Value| {
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                   "spec": {"ports": ports}})
        };
        let live = apply(
            None,
            svc(json!([{"port": 1}, {"port": 2}, {"port": 3}])),
            "one",
            false,
            T1,
        )
        .unwrap();
        let out = apply(
            Some(&live),
            svc(json!([{"port": 3, "name": "c"}, {"port": 1}])),
            "two",
            false,
            T2,
        )
        .unwrap();
        assert_eq!(
            out["spec"]["ports"],
            json!([{"port": 3, "name": "c"}, {"port": 1}, {"port": 2}])
        );
    }

    #[test]
    fn custom_resource_lists_are_atomic_and_null_removes() {
        let widget = |items: Value, extra: Value| {
            json!({"apiVersion": "example.com/v1", "kind": "Widget",
                   "metadata": {"name": "w", "finalizers": ["example.com/f"]},
                   "spec": {"items": items, "extra": extra}})
        };
        let first = apply(
            None,
            widget(json!([{"name": "a"}, {"name": "b"}]), json!(1)),
            "m",
            false,
            T1,
        )
        .unwrap();
        assert_eq!(
            owned_by(&first, "m"),
            &json!({"f:metadata": {"f:finalizers": {"v:\"example.com/f\"": {}}},
                   "f:spec": {"f:extra": {}, "f:items": {}}})
        );
        let out = apply(
            Some(&first),
            widget(json!([{"name": "c"}]), Value::Null),
            "m",
            false,
            T2,
        )
        .unwrap();
        assert_eq!(out["spec"], json!({"items": [{"name": "c"}]}));
    }

    /// A `Widget` schema as a CRD would carry it: conditions keyed by
    /// `type`, tags a set, a selector map owned whole, ports keyed by port
    /// and a protocol that defaults to TCP.
    fn widget_schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "tags": {"type": "array", "items": {"type": "string"},
                         "x-kubernetes-list-type": "set"},
                "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                             "additionalProperties": {"type": "string"}},
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["port", "protocol"],
                          "items": {"type": "object", "required": ["port"], "properties": {
                              "port": {"type": "integer"},
                              "protocol": {"type": "string", "default": "TCP"},
                              "name": {"type": "string"}}}}}},
            "status": {"type": "object", "properties": {
                "conditions": {"type": "array", "x-kubernetes-list-type": "map",
                               "x-kubernetes-list-map-keys": ["type"],
                               "items": {"type": "object", "required": ["type"], "properties": {
                                   "type": {"type": "string"},
                                   "status": {"type": "string"}}}}}}}})
    }

    fn apply_widget(
        live: Option<&Value>,
        body: Value,
        manager: &str,
        force: bool,
        now: &str,
    ) -> Result<Value, PatchError> {
        let mut applied = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                                 "metadata": {"name": "w"}});
        applied
            .as_object_mut()
            .unwrap()
            .extend(body.as_object().unwrap().clone());
        let schema = widget_schema();
        server_side_apply(ApplyRequest {
            live,
            applied: &applied,
            manager,
            force,
            api_version: "example.com/v1",
            kind: "Widget",
            schema: Some(&schema),
            subresource: None,
            now,
        })
    }

    #[test]
    fn a_custom_resource_schema_keys_its_lists_for_every_manager() {
        let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let first = apply_widget(None, ready, "ready-controller", false, T1).unwrap();
        let synced = json!({"status": {"conditions": [{"type": "Synced", "status": "False"}]}});
        let both = apply_widget(Some(&first), synced, "sync-controller", false, T2).unwrap();
        assert_eq!(
            both["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "False"}])
        );
        assert_eq!(
            owned_by(&both, "sync-controller"),
            &json!({"f:status": {"f:conditions": {"k:{\"type\":\"Synced\"}": {
                ".": {}, "f:status": {}, "f:type": {}}}}})
        );

        // Changing another manager's condition conflicts on that item only.
        let taken = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        let Err(PatchError::Conflict { conflicts, .. }) =
            apply_widget(Some(&both), taken.clone(), "sync-controller", false, T3)
        else {
            panic!("expected a conflict");
        };
        assert_eq!(conflicts, [".status.conditions[type=\"Ready\"].status"]);

        // A manager that stops applying its condition removes only its own.
        let none = json!({"status": {"conditions": []}});
        let out = apply_widget(Some(&both), none, "sync-controller", false, T3).unwrap();
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}])
        );
    }

    #[test]
    fn a_custom_resource_schema_gives_sets_atomic_maps_and_key_defaults() {
        let first = json!({"spec": {"tags": ["a"], "selector": {"app": "w", "tier": "web"},
                                    "ports": [{"port": 80, "name": "http"}]}});
        let first = apply_widget(None, first, "one", false, T1).unwrap();
        assert_eq!(
            owned_by(&first, "one")["f:spec"],
            json!({"f:ports": {"k:{\"port\":80,\"protocol\":\"TCP\"}": {
                       ".": {}, "f:name": {}, "f:port": {}}},
                   "f:selector": {}, "f:tags": {"v:\"a\"": {}}})
        );
        let second = json!({"spec": {"tags": ["b"], "ports": [{"port": 80, "protocol": "UDP"}]}});
        let out = apply_widget(Some(&first), second, "two", false, T2).unwrap();
        assert_eq!(out["spec"]["tags"], json!(["a", "b"]));
        assert_eq!(
            out["spec"]["ports"],
            json!([{"port": 80, "name": "http"}, {"port": 80, "protocol": "UDP"}])
        );
        // The selector is one field: a second manager's key conflicts with
        // the whole map, and with force replaces it.
        let selector = json!({"spec": {"selector": {"app": "other"}}});
        assert!(matches!(
            apply_widget(Some(&out), selector.clone(), "two", false, T3),
            Err(PatchError::Conflict { .. })
        ));
        let forced = apply_widget(Some(&out), selector, "two", true, T3).unwrap();
        assert_eq!(forced["spec"]["selector"], json!({"app": "other"}));
    }

    #[test]
    fn managed_fields_in_the_configuration_are_rejected() {
        let mut cm = configmap(json!({}));
        cm["metadata"]["managedFields"] = json!([]);
        assert!(matches!(
            apply(None, cm, "m", false, T1),
            Err(PatchError::Invalid(_))
        ));
    }

    #[test]
    fn noop_apply_keeps_time() {
        let first = apply_configmap(None, json!({"a": "1"}), "m", T1).unwrap();
        let again = apply_configmap(Some(&first), json!({"a": "1"}), "m", T2).unwrap();
        assert_eq!(again, first);
    }

    /// What `kubectl create configmap c --from-literal=a=1` then a label
    /// edit record on a real cluster.
    #[test]
    fn record_update_matches_kubernetes_entries() {
        let mut created = configmap(json!({"a": "1"}));
        created["metadata"]["uid"] = json!("u-1");
        created["metadata"]["resourceVersion"] = json!("1");
        created["metadata"]["creationTimestamp"] = json!(T1);
        record_update(None, &mut created, "kubectl-create", None, "v1", None, T1);
        assert_eq!(
            created["metadata"]["managedFields"],
            json!([{"apiVersion": "v1", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:data": {".": {}, "f:a": {}}},
                    "manager": "kubectl-create", "operation": "Update", "time": T1}])
        );

        let mut labelled = created.clone();
        labelled["metadata"]["labels"] = json!({"env": "prod"});
        labelled["data"]["a"] = json!("2");
        record_update(
            Some(&created),
            &mut labelled,
            "kubectl-label",
            None,
            "v1",
            None,
            T2,
        );
        assert_eq!(
            owned_by(&labelled, "kubectl-label"),
            &json!({"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {".": {}, "f:env": {}}}})
        );
        // Kubernetes prints an owned map with no owned children as `{}`.
        assert_eq!(
            owned_by(&labelled, "kubectl-create"),
            &json!({"f:data": {}})
        );
        assert_eq!(entry(&labelled, "kubectl-create")["time"], T1);

        // A write that changes nothing leaves managedFields alone.
        let mut same = labelled.clone();
        record_update(
            Some(&labelled),
            &mut same,
            "kubectl-label",
            None,
            "v1",
            None,
            T3,
        );
        assert_eq!(same, labelled);

        // Removing a field drops it from every owner, and empty entries go.
        let mut removed = labelled.clone();
        removed["data"] = json!({});
        removed["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("labels");
        record_update(
            Some(&labelled),
            &mut removed,
            "editor",
            None,
            "v1",
            None,
            T3,
        );
        assert_eq!(owned_by(&removed, "kubectl-create"), &json!({"f:data": {}}));
        assert!(
            managed(&removed)
                .iter()
                .all(|e| e["manager"] != "kubectl-label")
        );
    }

    #[test]
    fn record_update_tracks_status_subresource_and_reset() {
        let created = apply_configmap(None, json!({"a": "1"}), "m", T1).unwrap();
        let mut status = created.clone();
        status["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}]});
        // A status writer cannot rewrite managedFields through the request.
        status["metadata"]["managedFields"] = json!([{}]);
        record_update(
            Some(&created),
            &mut status,
            "ctrl",
            None,
            "v1",
            Some("status"),
            T2,
        );
        let ctrl = entry(&status, "ctrl");
        assert_eq!(ctrl["subresource"], "status");
        assert_eq!(
            ctrl["fieldsV1"],
            json!({"f:status": {"f:conditions": {".": {}, "k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}, "f:type": {}}}}})
        );
        assert_eq!(managed(&status).len(), 2);

        let mut reset = status.clone();
        reset["metadata"]["managedFields"] = json!([{}]);
        record_update(Some(&status), &mut reset, "m2", None, "v1", None, T3);
        assert!(reset["metadata"].get("managedFields").is_none());
    }

    #[test]
    fn record_update_takes_managed_fields_written_by_the_client() {
        let live = apply_configmap(None, json!({"a": "1"}), "m", T1).unwrap();
        let mut put = live.clone();
        put["metadata"]["managedFields"] = json!([{
            "manager": "other", "operation": "Apply", "apiVersion": "v1", "time": T1,
            "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}
        }]);
        record_update(Some(&live), &mut put, "m", None, "v1", None, T2);
        assert_eq!(managed(&put).len(), 1);
        assert_eq!(owned_by(&put, "other"), &json!({"f:data": {"f:a": {}}}));
    }

    #[test]
    fn finalizer_ownership_uses_value_elements() {
        let created = configmap(json!({}));
        let mut with = created.clone();
        with["metadata"]["finalizers"] = json!(["example.com/f"]);
        record_update(Some(&created), &mut with, "ctrl", None, "v1", None, T1);
        assert_eq!(
            owned_by(&with, "ctrl"),
            &json!({"f:metadata": {"f:finalizers": {".": {}, "v:\"example.com/f\"": {}}}})
        );
    }
}
