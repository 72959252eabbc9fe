//! Strategic merge patch (`application/strategic-merge-patch+json`), the
//! patch type of client-side `kubectl apply` and default `kubectl patch`.
//!
//! Follows `k8s.io/apimachinery/pkg/util/strategicpatch` as the API server
//! runs it (parallel-list directives merged, unmatched nulls ignored).

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::PatchError;
use super::merge_keys::{self, Field, ListKind, Ty};
use crate::values::cut_message;

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

/// Applies a strategic merge patch to a built-in object.
///
/// Like a JSON merge patch (maps merge, `null` removes a key, scalars
/// replace) except that lists the Kubernetes schema marks with a patch
/// merge key merge item by item (containers and env by `name`, ports by
/// `containerPort`, conditions by `type`, …) and `finalizers` merge as a
/// set. Other lists are replaced. Supported directives:
///
/// - `$patch: replace` in a map replaces the map; as a list item, replaces
///   the list with the other items.
/// - `$patch: delete` in a map removes it; as a list item, removes the item
///   with that merge key.
/// - `$patch: merge` is the default and is accepted anywhere.
/// - `$deleteFromPrimitiveList/<field>: [..]` removes those values from a
///   primitive list.
/// - `$setElementOrder/<field>: [..]` fixes the order of the listed items
///   of a merged list; items it does not name keep their live position.
/// - `$retainKeys: [..]` drops every live key of the map not listed before
///   merging (kubectl sends it for `volumes` and `strategy`, which are
///   unions of mutually exclusive fields).
///
/// Merged lists are ordered as Kubernetes orders them: items the patch
/// names in the patch's order, live-only items slotted in by their live
/// position. Without `$setElementOrder` that puts a new item before the
/// live items that follow the first patched one (a patch naming only a new
/// container puts it first), exactly as `kubectl patch` does on a cluster.
///
/// # Errors
///
/// [`PatchError::Unsupported`] for kinds without a built-in schema, which
/// covers every custom resource; [`PatchError::Invalid`] for a malformed
/// patch (unknown `$patch` value, keyed list item without its merge key,
/// directive of the wrong shape).
pub(crate) fn strategic_merge_patch(
    target: &Value,
    patch: &Value,
    api_version: &str,
    kind: &str,
) -> Result<Value, PatchError> {
    let Some(root) = merge_keys::builtin_root(api_version, kind) else {
        return Err(PatchError::Unsupported(format!(
            "strategic merge patch is not supported for {kind} ({api_version}); \
             use application/merge-patch+json, application/json-patch+json \
             or application/apply-patch+yaml"
        )));
    };
    let Value::Object(patch) = patch else {
        return Err(PatchError::Invalid(
            "strategic merge patch must be a JSON object".to_owned(),
        ));
    };
    let original = match target {
        Value::Object(map) => map.clone(),
        Value::Null => Map::new(),
        _ => {
            return Err(PatchError::Invalid(
                "strategic merge patch target must be an object".to_owned(),
            ));
        }
    };
    // The one copy of the patch: below, each part is moved where it goes.
    Ok(Value::Object(
        merge_map(original, patch.clone(), root, &At::Root)?.unwrap_or_default(),
    ))
}

/// Where in the patch a merge is. Rendered only for an error, so that a
/// deep patch does not build a path string for every field.
#[derive(Clone, Copy)]
enum At<'a> {
    Root,
    Field(&'a At<'a>, &'a str),
    Index(&'a At<'a>, usize),
    Item(&'a At<'a>, &'a str, &'a str),
}

impl std::fmt::Display for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            At::Root => Ok(()),
            At::Field(parent, key) => write!(f, "{parent}.{key}"),
            At::Index(parent, i) => write!(f, "{parent}[{i}]"),
            At::Item(parent, key, id) => write!(f, "{parent}[{key}={id}]"),
        }
    }
}

/// The most of a path or a value an error quotes, in bytes.
const MAX_QUOTED: usize = 1024;

fn invalid(at: &At, msg: impl std::fmt::Display) -> PatchError {
    let (mut path, mut msg) = (at.to_string(), msg.to_string());
    cut_message(&mut path, MAX_QUOTED);
    cut_message(&mut msg, MAX_QUOTED);
    let path = if path.is_empty() { "." } else { &path };
    PatchError::Invalid(format!("strategic merge patch at {path}: {msg}"))
}

/// Merges `patch` into `original`; `None` means the map was deleted with
/// `$patch: delete`.
fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    ty: Ty,
    at: &At,
) -> Result<Option<Map<String, Value>>, PatchError> {
    match patch.remove(PATCH) {
        None => {}
        Some(Value::String(d)) if d == "merge" => {}
        Some(Value::String(d)) if d == "delete" => return Ok(None),
        // The patch map is the new value, but its own nested directives
        // still have to be resolved rather than stored.
        Some(Value::String(d)) if d == "replace" => return merge_map(Map::new(), patch, ty, at),
        Some(other) => return Err(invalid(at, format!("unknown $patch directive {other}"))),
    }

    if let Some(retain) = patch.remove(RETAIN_KEYS) {
        let keys = string_list(&retain)
            .ok_or_else(|| invalid(at, "$retainKeys must be a list of strings"))?;
        original.retain(|k, _| keys.contains(k));
    }

    // Deletions run before the merges of the same field so that one patch
    // can remove some values and add others.
    let mut orders = Map::new();
    let mut fields = Vec::new();
    for (key, value) in patch {
        if let Some(name) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            let Value::Array(remove) = value else {
                return Err(invalid(at, format!("{key} must be a list")));
            };
            if let Some(Value::Array(items)) = original.get_mut(name) {
                let remove: HashSet<String> = remove.iter().map(Value::to_string).collect();
                items.retain(|item| !remove.contains(&item.to_string()));
            }
        } else if let Some(name) = key.strip_prefix(SET_ELEMENT_ORDER) {
            let Value::Array(order) = value else {
                return Err(invalid(at, format!("{key} must be a list")));
            };
            orders.insert(name.to_owned(), Value::Array(order));
        } else {
            fields.push((key, value));
        }
    }

    for (key, patch_value) in fields {
        let field = merge_keys::field(ty, &key);
        let order = orders.remove(&key);
        if patch_value.is_null() {
            original.remove(&key);
            continue;
        }
        let child = At::Field(at, &key);
        let merged = match (original.remove(&key), patch_value) {
            (Some(Value::Object(o)), Value::Object(p)) => {
                merge_map(o, p, field.ty, &child)?.map(Value::Object)
            }
            (Some(Value::Array(o)), Value::Array(p)) => Some(Value::Array(merge_list(
                o,
                p,
                field,
                order.as_ref(),
                &child,
            )?)),
            // Absent or of another type: the patch value wins, minus its
            // directives and nulls.
            (_, p) => new_value(p, field, &child)?,
        };
        if let Some(merged) = merged {
            original.insert(key, merged);
        }
    }

    // An order directive without its list only reorders the live list.
    for (key, order) in orders {
        if let Some(Value::Array(items)) = original.remove(&key) {
            let field = merge_keys::field(ty, &key);
            let reordered =
                merge_list(items, Vec::new(), field, Some(&order), &At::Field(at, &key))?;
            original.insert(key, Value::Array(reordered));
        }
    }
    Ok(Some(original))
}

/// The value a patch introduces where there was nothing to merge with.
fn new_value(patch: Value, field: Field, at: &At) -> Result<Option<Value>, PatchError> {
    Ok(match patch {
        Value::Object(p) => merge_map(Map::new(), p, field.ty, at)?.map(Value::Object),
        Value::Array(p) => Some(Value::Array(merge_list(Vec::new(), p, field, None, at)?)),
        other => Some(other),
    })
}

fn string_list(value: &Value) -> Option<HashSet<String>> {
    value
        .as_array()?
        .iter()
        .map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// Merges two lists according to the field's list kind, then orders the
/// result: items named by the patch (or by `$setElementOrder`) in that
/// order, live-only items interleaved by their live position.
fn merge_list(
    original: Vec<Value>,
    patch: Vec<Value>,
    field: Field,
    order: Option<&Value>,
    at: &At,
) -> Result<Vec<Value>, PatchError> {
    match field.list {
        ListKind::Atomic => {
            if order.is_some() && patch.is_empty() {
                return Ok(original);
            }
            // Replaced wholesale; items are only cleaned of nulls the way
            // new map values are.
            patch
                .into_iter()
                .enumerate()
                .filter_map(|(i, item)| {
                    new_value(item, field_of_item(field), &At::Index(at, i)).transpose()
                })
                .collect()
        }
        ListKind::Set => merge_set(original, patch, order, at),
        ListKind::Map { merge_key, .. } => {
            merge_keyed(original, patch, field, merge_key, order, at)
        }
    }
}

/// Items of an atomic list are values of the list's item type.
fn field_of_item(field: Field) -> Field {
    Field {
        list: ListKind::Atomic,
        ..field
    }
}

fn is_replace_marker(item: &Value) -> bool {
    item.get(PATCH).and_then(Value::as_str) == Some("replace")
}

fn merge_set(
    original: Vec<Value>,
    patch: Vec<Value>,
    order: Option<&Value>,
    at: &At,
) -> Result<Vec<Value>, PatchError> {
    let replace = patch.iter().any(is_replace_marker);
    let additions: Vec<Value> = patch
        .into_iter()
        .filter(|item| item.get(PATCH).is_none())
        .collect();
    if additions.iter().any(|v| v.is_object() || v.is_array()) {
        return Err(invalid(at, "a merged primitive list may only hold scalars"));
    }
    let id = |v: &Value| Some(v.to_string());
    let order_ids: Vec<String> = match order {
        Some(Value::Array(order)) => order.iter().map(Value::to_string).collect(),
        Some(_) => return Err(invalid(at, "$setElementOrder must be a list")),
        None => additions.iter().map(Value::to_string).collect(),
    };
    let live_ids: Vec<String> = original.iter().map(Value::to_string).collect();
    let mut merged: Vec<Value> = Vec::new();
    let mut seen = HashSet::new();
    let base = if replace { Vec::new() } else { original };
    for item in base.into_iter().chain(additions) {
        if seen.insert(item.to_string()) {
            merged.push(item);
        }
    }
    Ok(order_items(merged, id, &order_ids, &live_ids))
}

fn merge_keyed(
    original: Vec<Value>,
    patch: Vec<Value>,
    field: Field,
    merge_key: &str,
    order: Option<&Value>,
    at: &At,
) -> Result<Vec<Value>, PatchError> {
    let key_of = |item: &Value| item.get(merge_key).map(Value::to_string);
    let live_ids: Vec<String> = original.iter().filter_map(key_of).collect();
    let mut plain = Vec::new();
    let mut deleted = HashSet::new();
    let mut replace = false;
    for item in patch {
        let Value::Object(map) = item else {
            return Err(invalid(at, format!("list item {item} is not an object")));
        };
        match map.get(PATCH).and_then(Value::as_str) {
            Some("delete") => {
                let id = map.get(merge_key).map(Value::to_string);
                deleted.insert(id.ok_or_else(|| missing_key(at, &map, merge_key))?);
            }
            Some("replace") => replace = true,
            Some("merge") | None => plain.push(map),
            Some(other) => return Err(invalid(at, format!("unknown $patch directive {other}"))),
        }
    }
    // Each item's key is read once, and found again by a map: a list of
    // hundreds of thousands of items costs its length, not its square.
    let mut merged: Vec<Option<Value>> = if replace {
        Vec::new()
    } else {
        original
            .into_iter()
            .filter(|m| key_of(m).is_none_or(|id| !deleted.contains(&id)))
            .map(Some)
            .collect()
    };
    let mut at_key: HashMap<String, usize> = HashMap::new();
    for (i, item) in merged.iter().enumerate() {
        if let Some(id) = item.as_ref().and_then(key_of) {
            at_key.entry(id).or_insert(i);
        }
    }
    let mut order_ids = Vec::new();
    for map in plain {
        let id = map
            .get(merge_key)
            .map(Value::to_string)
            .ok_or_else(|| missing_key(at, &map, merge_key))?;
        let item_at = At::Item(at, merge_key, &id);
        match at_key.get(&id).copied() {
            Some(pos) => {
                let live = match merged[pos].take() {
                    Some(Value::Object(live)) => live,
                    _ => Map::new(),
                };
                merged[pos] = merge_map(live, map, field.ty, &item_at)?.map(Value::Object);
            }
            None => {
                if let Some(m) = merge_map(Map::new(), map, field.ty, &item_at)? {
                    at_key.insert(id.clone(), merged.len());
                    merged.push(Some(Value::Object(m)));
                }
            }
        }
        order_ids.push(id);
    }
    if let Some(order) = order {
        let Value::Array(order) = order else {
            return Err(invalid(at, "$setElementOrder must be a list"));
        };
        order_ids = order
            .iter()
            .map(|item| {
                key_of(item).ok_or_else(|| {
                    let shown = item.as_object().cloned().unwrap_or_default();
                    missing_key(at, &shown, merge_key)
                })
            })
            .collect::<Result<_, _>>()?;
    }
    let merged = merged.into_iter().flatten().collect();
    Ok(order_items(merged, key_of, &order_ids, &live_ids))
}

fn missing_key(at: &At, item: &Map<String, Value>, merge_key: &str) -> PatchError {
    invalid(
        at,
        format!(
            "map {} does not contain declared merge key: {merge_key}",
            Value::Object(item.clone())
        ),
    )
}

/// Orders merged list items the way `strategicpatch.normalizeElementOrder`
/// does: items named in `order` come in that order; the others keep their
/// live order and are slotted in before the first ordered item that comes
/// after them in the live list.
fn order_items(
    items: Vec<Value>,
    id: impl Fn(&Value) -> Option<String>,
    order: &[String],
    live: &[String],
) -> Vec<Value> {
    // Positions by id (the first of equal ids), each item's id read once.
    let positions = |ids: &[String]| {
        let mut at: HashMap<String, usize> = HashMap::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            at.entry(id.clone()).or_insert(i);
        }
        at
    };
    let (order_at, live_at) = (positions(order), positions(live));
    // Each item with its position in `order` and in `live`.
    type Placed = (Option<usize>, Option<usize>, Value);
    let (mut ordered, mut rest): (Vec<Placed>, Vec<Placed>) = items
        .into_iter()
        .map(|item| {
            let id = id(&item);
            let at = |map: &HashMap<String, usize>| id.as_ref().and_then(|id| map.get(id).copied());
            (at(&order_at), at(&live_at), item)
        })
        .partition(|(in_order, _, _)| in_order.is_some());
    ordered.sort_by_key(|(in_order, _, _)| *in_order);
    // Stable: items unknown to the live list keep their merged position.
    rest.sort_by_key(|(_, in_live, _)| in_live.unwrap_or(usize::MAX));

    let mut out = Vec::with_capacity(ordered.len() + rest.len());
    let mut ordered = ordered.into_iter().peekable();
    let mut rest = rest.into_iter().peekable();
    loop {
        match (rest.peek(), ordered.peek()) {
            (Some(left), Some(right)) => {
                let before = matches!((left.1, right.1), (Some(l), Some(r)) if l < r);
                let next = if before { rest.next() } else { ordered.next() };
                out.extend(next.map(|(_, _, item)| item));
            }
            (Some(_), None) => out.extend(rest.next().map(|(_, _, item)| item)),
            (None, Some(_)) => out.extend(ordered.next().map(|(_, _, item)| item)),
            (None, None) => return out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn long_lists_are_merged_by_maps_not_searches() {
        // 3 MiB of finalizers or owner references is a few hundred thousand
        // items: merged in one pass, not one search per item.
        let n = 50_000;
        let names = |step: usize| -> Vec<String> {
            (0..n).step_by(step).map(|i| format!("f{i}")).collect()
        };
        let target = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "finalizers": names(2)}});
        let mut patch_names = names(1);
        patch_names.extend(names(3));
        let merged = strategic_merge_patch(
            &target,
            &json!({"metadata": {"finalizers": patch_names}}),
            "v1",
            "ConfigMap",
        )
        .unwrap();
        let finalizers = merged["metadata"]["finalizers"].as_array().unwrap();
        assert_eq!(finalizers.len(), n, "each once");
        assert_eq!(
            (finalizers[0].as_str(), finalizers[n - 1].as_str()),
            (Some("f0"), Some("f49999"))
        );

        let owners = |range: std::ops::Range<usize>, name: &str| -> Vec<Value> {
            range
                .map(|i| json!({"apiVersion": "v1", "kind": "X", "name": name, "uid": format!("u{i}")}))
                .collect()
        };
        let target = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "ownerReferences": owners(0..n, "old")}});
        let mut patch = owners(n / 2..n + n / 2, "new");
        patch.push(json!({"uid": "u0", "$patch": "delete"}));
        let merged = strategic_merge_patch(
            &target,
            &json!({"metadata": {"ownerReferences": patch}}),
            "v1",
            "ConfigMap",
        )
        .unwrap();
        let refs = merged["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(refs.len(), n + n / 2 - 1, "u0 deleted");
        assert_eq!(refs[0]["uid"], "u1");
        assert_eq!(refs.iter().filter(|r| r["name"] == "new").count(), n);
    }

    /// An error quotes at most a kilobyte of its path and of the value it
    /// names, however long the patch's keys and values are.
    #[test]
    fn an_errors_path_and_value_are_cut() {
        let long = "k".repeat(100 << 10);
        let target = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        for patch in [
            json!({"metadata": {long.clone(): {"$patch": "bogus"}}}),
            json!({"metadata": {"x": {"$patch": long.clone()}}}),
        ] {
            let e = strategic_merge_patch(&target, &patch, "v1", "ConfigMap")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("unknown $patch directive") || e.contains('…'),
                "{}",
                &e[..200]
            );
            assert!(e.len() < 2 * MAX_QUOTED + 200, "{} bytes", e.len());
        }
    }

    fn smp(target: &Value, patch: Value) -> Value {
        strategic_merge_patch(target, &patch, "apps/v1", "Deployment").unwrap()
    }

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"},
                         "finalizers": ["a.example.com/f", "b.example.com/f"]},
            "spec": {
                "replicas": 2,
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [
                            {"name": "app", "image": "app:1",
                             "args": ["--a", "--b"],
                             "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                             "ports": [{"containerPort": 80}]},
                            {"name": "sidecar", "image": "side:1"}
                        ],
                        "volumes": [{"name": "data", "emptyDir": {}}],
                        "tolerations": [{"key": "k1", "operator": "Exists"}]
                    }
                }
            }
        })
    }

    fn pod_spec(obj: &Value) -> &Value {
        &obj["spec"]["template"]["spec"]
    }

    #[test]
    fn containers_merge_by_name_and_env_by_name() {
        let out = smp(
            &deployment(),
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "app", "image": "app:2", "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]}
            ]}}}}),
        );
        let containers = &pod_spec(&out)["containers"];
        assert_eq!(containers.as_array().unwrap().len(), 2);
        assert_eq!(containers[0]["image"], "app:2");
        assert_eq!(containers[0]["args"], json!(["--a", "--b"]));
        assert_eq!(
            containers[0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}])
        );
        assert_eq!(containers[1], json!({"name": "sidecar", "image": "side:1"}));
    }

    #[test]
    fn new_container_is_appended_and_ports_merge_by_container_port() {
        let out = smp(
            &deployment(),
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "app", "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 9090}]},
                {"name": "extra", "image": "extra:1"}
            ]}}}}),
        );
        let containers = &pod_spec(&out)["containers"];
        let names: Vec<&str> = containers
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        // As in Kubernetes: without `$setElementOrder`, items named by the
        // patch keep the patch's order and live-only items are slotted in
        // by live position, which lands `sidecar` after the new item.
        assert_eq!(names, ["app", "extra", "sidecar"]);
        assert_eq!(
            containers[0]["ports"],
            json!([{"containerPort": 80, "name": "http"}, {"containerPort": 9090}])
        );
    }

    #[test]
    fn lists_without_merge_key_are_replaced() {
        let out = smp(
            &deployment(),
            json!({"spec": {"template": {"spec": {
                "tolerations": [{"key": "k2", "operator": "Exists"}],
                "containers": [{"name": "app", "args": ["--c"]}]
            }}}}),
        );
        assert_eq!(
            pod_spec(&out)["tolerations"],
            json!([{"key": "k2", "operator": "Exists"}])
        );
        assert_eq!(pod_spec(&out)["containers"][0]["args"], json!(["--c"]));
    }

    #[test]
    fn patch_delete_removes_list_item_and_map() {
        let out = smp(
            &deployment(),
            json!({"spec": {
                "strategy": {"rollingUpdate": {"$patch": "delete"}},
                "template": {"spec": {"containers": [
                    {"name": "sidecar", "$patch": "delete"},
                    {"name": "app", "env": [{"name": "A", "$patch": "delete"}]}
                ]}}
            }}),
        );
        let containers = pod_spec(&out)["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 1);
        assert_eq!(containers[0]["env"], json!([{"name": "B", "value": "2"}]));
        assert_eq!(out["spec"]["strategy"], json!({"type": "RollingUpdate"}));
    }

    #[test]
    fn patch_replace_in_map_and_list() {
        let out = smp(
            &deployment(),
            json!({"metadata": {"labels": {"$patch": "replace", "tier": "front"}},
            "spec": {"template": {"spec": {"containers": [
                {"$patch": "replace"}, {"name": "only", "image": "only:1"}
            ]}}}}),
        );
        assert_eq!(out["metadata"]["labels"], json!({"tier": "front"}));
        assert_eq!(
            pod_spec(&out)["containers"],
            json!([{"name": "only", "image": "only:1"}])
        );
    }

    #[test]
    fn null_removes_map_key() {
        let out = smp(
            &deployment(),
            json!({"metadata": {"labels": {"app": null}}, "spec": {"replicas": null, "paused": null}}),
        );
        assert_eq!(out["metadata"]["labels"], json!({}));
        assert!(out["spec"].get("replicas").is_none());
        assert!(out["spec"].get("paused").is_none());
    }

    #[test]
    fn finalizers_merge_as_a_set_and_delete_from_primitive_list() {
        let out = smp(
            &deployment(),
            json!({"metadata": {
                "finalizers": ["c.example.com/f", "a.example.com/f"],
                "$deleteFromPrimitiveList/finalizers": ["b.example.com/f"]
            }}),
        );
        assert_eq!(
            out["metadata"]["finalizers"],
            json!(["c.example.com/f", "a.example.com/f"])
        );
        let out = smp(
            &deployment(),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.example.com/f"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["b.example.com/f"]));
    }

    /// The shape client-side `kubectl apply` sends after reordering and
    /// removing a container.
    #[test]
    fn set_element_order_orders_merged_list() {
        let out = smp(
            &deployment(),
            json!({"spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "app"}],
                "containers": [{"name": "sidecar", "image": "side:2"}]
            }}}}),
        );
        let containers = &pod_spec(&out)["containers"];
        assert_eq!(containers[0]["name"], "sidecar");
        assert_eq!(containers[0]["image"], "side:2");
        assert_eq!(containers[1]["name"], "app");

        // The directive alone reorders the live list.
        let out = smp(
            &deployment(),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "app"}]}}},
                   "metadata": {"$setElementOrder/finalizers": ["b.example.com/f", "a.example.com/f"]}}),
        );
        assert_eq!(
            out["metadata"]["finalizers"],
            json!(["b.example.com/f", "a.example.com/f"])
        );
    }

    #[test]
    fn retain_keys_drops_unlisted_live_keys() {
        let out = smp(
            &deployment(),
            json!({"spec": {
                "strategy": {"$retainKeys": ["type"], "type": "Recreate"},
                "template": {"spec": {
                    "$setElementOrder/volumes": [{"name": "data"}],
                    "volumes": [{"$retainKeys": ["name", "configMap"], "name": "data", "configMap": {"name": "cm"}}]
                }}
            }}),
        );
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
        assert_eq!(
            pod_spec(&out)["volumes"],
            json!([{"name": "data", "configMap": {"name": "cm"}}])
        );
    }

    /// The body of a client-side `kubectl apply` that changes an image,
    /// drops an env var and updates the last-applied annotation.
    #[test]
    fn kubectl_client_side_apply_body() {
        let out = smp(
            &deployment(),
            json!({
                "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}\n"}},
                "spec": {"template": {"spec": {
                    "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
                    "containers": [{
                        "$setElementOrder/env": [{"name": "A"}],
                        "env": [{"$patch": "delete", "name": "B"}],
                        "image": "app:3",
                        "name": "app"
                    }]
                }}}
            }),
        );
        let app = &pod_spec(&out)["containers"][0];
        assert_eq!(app["image"], "app:3");
        assert_eq!(app["env"], json!([{"name": "A", "value": "1"}]));
        assert_eq!(
            out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"],
            "{}\n"
        );
    }

    #[test]
    fn new_items_are_stored_without_directives() {
        let out = smp(
            &deployment(),
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "new", "env": [{"name": "X", "value": "1"}, {"name": "Y", "$patch": "delete"}],
                 "resources": {"limits": {"cpu": null, "memory": "1Gi"}}}
            ]}}}}),
        );
        // A patch naming only a new item puts it first, as Kubernetes does.
        assert_eq!(
            pod_spec(&out)["containers"][0],
            json!({"name": "new", "env": [{"name": "X", "value": "1"}],
                   "resources": {"limits": {"memory": "1Gi"}}})
        );
    }

    #[test]
    fn conditions_merge_by_type_and_service_ports_by_port() {
        let pod = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}
        ]}});
        let out = strategic_merge_patch(
            &pod,
            &json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            "v1",
            "Pod",
        )
        .unwrap();
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}])
        );
        let svc = json!({"spec": {"ports": [{"port": 80, "name": "http"}]}});
        let out = strategic_merge_patch(
            &svc,
            &json!({"spec": {"ports": [{"port": 443, "name": "https"}]}}),
            "v1",
            "Service",
        )
        .unwrap();
        assert_eq!(out["spec"]["ports"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn owner_references_merge_by_uid() {
        let cm = json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]}, "data": {"k": "v"}});
        let out = strategic_merge_patch(
            &cm,
            &json!({"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}]}, "data": {"k2": "v2"}}),
            "v1",
            "ConfigMap",
        )
        .unwrap();
        assert_eq!(
            out["metadata"]["ownerReferences"].as_array().unwrap().len(),
            2
        );
        assert_eq!(out["data"], json!({"k": "v", "k2": "v2"}));
    }

    #[test]
    fn custom_resources_are_unsupported() {
        let e =
            strategic_merge_patch(&json!({}), &json!({}), "example.com/v1", "Widget").unwrap_err();
        assert!(matches!(e, PatchError::Unsupported(_)));
    }

    #[test]
    fn malformed_patches_are_invalid() {
        let target = deployment();
        for patch in [
            json!([1]),
            json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}}),
            json!({"spec": {"template": {"spec": {"containers": ["app"]}}}}),
            json!({"spec": {"$patch": "explode"}}),
            json!({"spec": {"$retainKeys": "type"}}),
        ] {
            let e = strategic_merge_patch(&target, &patch, "apps/v1", "Deployment").unwrap_err();
            assert!(matches!(e, PatchError::Invalid(_)), "{patch}: {e:?}");
        }
    }

    #[test]
    fn top_level_delete_empties_the_object() {
        assert_eq!(smp(&deployment(), json!({"$patch": "delete"})), json!({}));
    }
}
