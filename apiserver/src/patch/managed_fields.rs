//! Field sets and their `FieldsV1` encoding, as kept in
//! `metadata.managedFields`.
//!
//! A field set is a trie of path elements. Each element is stored in its
//! `FieldsV1` spelling, which is also a total order:
//!
//! - `f:<name>`: a field of a map;
//! - `k:{"name":"app"}`: the item of a keyed list whose key fields have
//!   those values (compact JSON, fields sorted by name);
//! - `v:"value"`: the item of a set list with that value;
//! - `i:<n>`: an item of a list addressed by position.
//!
//! A node is a *member* when the path to it is itself owned; in `FieldsV1`
//! that is an empty object for a leaf and a `".": {}` entry for a node that
//! also has owned children.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::merge_keys::{self, Field, ListKind, Ty};

/// A set of field paths.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FieldSet {
    /// Whether the path leading to this node is in the set.
    pub(crate) member: bool,
    pub(crate) children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    /// True when the set holds no path at all, here or below.
    pub(crate) fn is_empty(&self) -> bool {
        !self.member && self.children.values().all(FieldSet::is_empty)
    }

    pub(crate) fn child(&self, element: &str) -> Option<&FieldSet> {
        self.children.get(element)
    }

    /// The node of `element` below this one, made if missing. The walkers
    /// below descend the trie with it, so a path's elements are never
    /// copied or compared again for each member under them (a field name
    /// of a megabyte with a hundred thousand fields below it).
    fn child_mut(&mut self, element: String) -> &mut FieldSet {
        self.children.entry(element).or_default()
    }

    /// Drops the nodes that hold no member, here or below; whether any
    /// member is left.
    fn prune(&mut self) -> bool {
        self.children.retain(|_, child| child.prune());
        self.member || !self.children.is_empty()
    }

    #[cfg(test)]
    pub(crate) fn insert(&mut self, path: &[String]) {
        let node = path
            .iter()
            .fold(self, |node, element| node.child_mut(element.clone()));
        node.member = true;
    }

    pub(crate) fn union(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (element, child) in &other.children {
            self.children
                .entry(element.clone())
                .or_default()
                .union(child);
        }
    }

    /// Removes every member of `other` (only the members: descendants of a
    /// removed path stay unless `other` names them too).
    pub(crate) fn difference(&mut self, other: &FieldSet) {
        if other.member {
            self.member = false;
        }
        for (element, theirs) in &other.children {
            if let Some(ours) = self.children.get_mut(element) {
                ours.difference(theirs);
            }
        }
        self.children.retain(|_, child| !child.is_empty());
    }

    /// The members present in both sets.
    pub(crate) fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (element, ours) in &self.children {
            if let Some(theirs) = other.children.get(element) {
                let both = ours.intersection(theirs);
                if !both.is_empty() {
                    out.children.insert(element.clone(), both);
                }
            }
        }
        out
    }

    /// The first `max` member paths in trie order, displayed (each at
    /// most [`MAX_SHOWN_PATH`] bytes), and how many members there are in
    /// all.
    pub(crate) fn shown_paths(&self, max: usize) -> (Vec<String>, usize) {
        fn walk<'a>(
            set: &'a FieldSet,
            prefix: &mut Vec<&'a str>,
            max: usize,
            shown: &mut Vec<String>,
            count: &mut usize,
        ) {
            if set.member {
                *count += 1;
                if shown.len() < max {
                    shown.push(display_path(prefix));
                }
            }
            for (element, child) in &set.children {
                prefix.push(element);
                walk(child, prefix, max, shown, count);
                prefix.pop();
            }
        }
        let (mut shown, mut count) = (Vec::new(), 0);
        walk(self, &mut Vec::new(), max, &mut shown, &mut count);
        (shown, count)
    }

    #[cfg(test)]
    fn member_count(&self) -> usize {
        self.shown_paths(0).1
    }

    /// Encodes the set as a `fieldsV1` object.
    pub(crate) fn to_fields_v1(&self) -> Value {
        let mut map = Map::new();
        // A member with children is marked with ".", which sorts first.
        if self.member && !self.children.is_empty() {
            map.insert(".".to_owned(), Value::Object(Map::new()));
        }
        for (element, child) in &self.children {
            if !child.is_empty() {
                map.insert(element.clone(), child.to_fields_v1());
            }
        }
        Value::Object(map)
    }

    /// Decodes a `fieldsV1` object. Every non-root node is a member unless
    /// it has children and no `"."` entry.
    pub(crate) fn from_fields_v1(value: &Value) -> Result<FieldSet, String> {
        let Value::Object(map) = value else {
            return Err("fieldsV1 must be an object".to_owned());
        };
        let mut set = FieldSet::default();
        for (element, child) in map {
            if element == "." {
                set.member = true;
                continue;
            }
            if !["f:", "k:", "v:", "i:"]
                .iter()
                .any(|p| element.starts_with(p))
            {
                return Err(format!("fieldsV1 has an invalid path element {element:?}"));
            }
            let mut node = FieldSet::from_fields_v1(child)?;
            if node.children.is_empty() {
                node.member = true;
            }
            set.children.insert(element.clone(), node);
        }
        Ok(set)
    }
}

/// The `FieldsV1` element for a field.
pub(crate) fn field_element(name: &str) -> String {
    format!("f:{name}")
}

/// The `FieldsV1` element that identifies `item` at `index` of a list of
/// the given kind, or `None` for atomic lists, whose items are not tracked.
pub(crate) fn item_element(item: &Value, list: ListKind<'_>, index: usize) -> Option<String> {
    match list {
        ListKind::Atomic => None,
        ListKind::Set => Some(format!("v:{item}")),
        ListKind::Map { keys, .. } => {
            let mut fields = BTreeMap::new();
            for (name, default) in keys.fields() {
                match (item.get(name), default) {
                    (Some(value), _) => {
                        fields.insert(name, value.clone());
                    }
                    (None, Some(default)) => {
                        fields.insert(name, default.into_owned());
                    }
                    (None, None) => {}
                }
            }
            if fields.is_empty() {
                // No key at all: fall back to the position so the item is
                // still tracked rather than silently dropped.
                return Some(format!("i:{index}"));
            }
            let mut out = String::from("k:{");
            for (i, (name, value)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{}:{value}", Value::String((*name).to_owned()));
            }
            out.push('}');
            Some(out)
        }
    }
}

/// The longest path [`display_path`] renders, in bytes; the rest is
/// replaced by `…`.
pub(crate) const MAX_SHOWN_PATH: usize = 1024;

/// Renders a path the way Kubernetes prints one in conflict messages:
/// `.spec.containers[name="app"].image`, `.metadata.finalizers[="x"]`, in
/// at most [`MAX_SHOWN_PATH`] bytes.
pub(crate) fn display_path(path: &[&str]) -> String {
    let mut out = String::new();
    for element in path {
        if out.len() > MAX_SHOWN_PATH {
            break;
        }
        if element.len() > MAX_SHOWN_PATH {
            // Not parsed: only its first bytes can be shown.
            out.push_str(&element[..element.floor_char_boundary(MAX_SHOWN_PATH)]);
        } else if let Some(name) = element.strip_prefix("f:") {
            out.push('.');
            out.push_str(name);
        } else if let Some(key) = element.strip_prefix("k:") {
            let fields: Map<String, Value> = serde_json::from_str(key).unwrap_or_default();
            let parts: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = write!(out, "[{}]", parts.join(","));
        } else if let Some(value) = element.strip_prefix("v:") {
            let _ = write!(out, "[={value}]");
        } else if let Some(index) = element.strip_prefix("i:") {
            let _ = write!(out, "[{index}]");
        }
    }
    if out.len() > MAX_SHOWN_PATH {
        out.truncate(out.floor_char_boundary(MAX_SHOWN_PATH));
        out.push('…');
    }
    out
}

/// The fields nobody owns: identity and server-maintained metadata, which
/// every write carries but no manager should conflict over. This is
/// Kubernetes' list plus the deletion fields, which only the server sets.
pub(crate) fn strip_unowned(set: &mut FieldSet) {
    let f = field_element;
    for top in ["apiVersion", "kind"] {
        set.children.remove(&f(top));
    }
    // `spec` and `status` are always-present structs in the Go types, so
    // Kubernetes never records them as owned in their own right.
    for top in ["metadata", "spec", "status"] {
        if let Some(node) = set.children.get_mut(&f(top)) {
            node.member = false;
        }
    }
    if let Some(meta) = set.children.get_mut(&f("metadata")) {
        for name in [
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "clusterName",
            "managedFields",
        ] {
            meta.children.remove(&f(name));
        }
    }
    set.children.retain(|_, child| !child.is_empty());
}

/// The field of a whole object of type `ty`.
pub(crate) fn root_field(ty: Ty<'_>) -> Field<'_> {
    Field {
        ty,
        list: ListKind::Atomic,
        atomic_map: false,
    }
}

/// The field of an item of the list `field`: the list's item type, itself
/// neither a list nor an atomic map.
pub(crate) fn item_field(field: Field<'_>) -> Field<'_> {
    Field {
        list: ListKind::Atomic,
        atomic_map: matches!(field.ty, Ty::Schema(items) if merge_keys::is_atomic_map(items)),
        ..field
    }
}

/// The fields an applied configuration sets, as server-side apply records
/// them: scalars, atomic lists and maps, and keyed or set list items.
/// Granular maps are not members themselves, so an empty map owns nothing.
pub(crate) fn applied_fields(value: &Value, ty: Ty) -> FieldSet {
    let mut set = FieldSet::default();
    if let Value::Object(map) = value {
        for (name, child) in map {
            let field = merge_keys::field(ty, name);
            walk_applied(child, field, set.child_mut(field_element(name)));
        }
    }
    set.prune();
    set
}

fn walk_applied(value: &Value, field: Field, node: &mut FieldSet) {
    // A list's items are members themselves; a granular map is not, only
    // what is in it.
    let items = value.is_array();
    let granular = for_each_child(value, field, node, |child, child_field, child_node| {
        if items {
            child_node.member = true;
        }
        walk_applied(child, child_field, child_node);
    });
    if !granular {
        node.member = true;
    }
}

/// Calls `visit` for each child of `value` that field sets track, with its
/// field and its node below `node`: the members of a granular map and the
/// addressable items of a list that is not atomic. False when `value` is
/// owned as a whole instead. Nodes made for children that end up holding
/// no member are left for [`FieldSet::prune`].
fn for_each_child(
    value: &Value,
    field: Field,
    node: &mut FieldSet,
    mut visit: impl FnMut(&Value, Field, &mut FieldSet),
) -> bool {
    match value {
        Value::Object(map) if !field.atomic_map => {
            for (name, child) in map {
                let child_node = node.child_mut(field_element(name));
                visit(child, merge_keys::field(field.ty, name), child_node);
            }
            true
        }
        Value::Array(items) if field.list != ListKind::Atomic => {
            for (index, item) in items.iter().enumerate() {
                if let Some(element) = item_element(item, field.list, index) {
                    visit(item, item_field(field), node.child_mut(element));
                }
            }
            true
        }
        _ => false,
    }
}

/// What changed between two versions of an object.
#[derive(Debug, Default)]
pub(crate) struct Comparison {
    /// Paths added or given a new value, including maps and lists that did
    /// not exist before (their own path as well as everything below).
    pub(crate) changed: FieldSet,
    /// Paths that existed before and are gone.
    pub(crate) removed: FieldSet,
}

/// Compares two objects of type `ty` field by field.
pub(crate) fn compare(old: &Value, new: &Value, ty: Ty) -> Comparison {
    let mut out = Comparison::default();
    compare_maps(old, new, root_field(ty), &mut out.changed, &mut out.removed);
    out.changed.prune();
    out.removed.prune();
    out
}

fn compare_maps(
    old: &Value,
    new: &Value,
    field: Field,
    changed: &mut FieldSet,
    removed: &mut FieldSet,
) {
    let empty = Map::new();
    let old = old.as_object().unwrap_or(&empty);
    let new = new.as_object().unwrap_or(&empty);
    let names: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    for name in names {
        let (before, after) = (old.get(name), new.get(name));
        if before == after {
            continue;
        }
        let element = field_element(name);
        compare_values(
            before,
            after,
            merge_keys::field(field.ty, name),
            changed.child_mut(element.clone()),
            removed.child_mut(element),
        );
    }
}

fn compare_values(
    old: Option<&Value>,
    new: Option<&Value>,
    field: Field,
    changed: &mut FieldSet,
    removed: &mut FieldSet,
) {
    match (old, new) {
        (None, None) => {}
        (None, Some(new)) => mark_all(new, field, changed),
        (Some(old), None) => mark_all(old, field, removed),
        (Some(old), Some(new)) if old == new => {}
        (Some(old @ Value::Object(_)), Some(new @ Value::Object(_))) if !field.atomic_map => {
            compare_maps(old, new, field, changed, removed);
        }
        (Some(Value::Array(old)), Some(Value::Array(new))) if field.list != ListKind::Atomic => {
            fn index<'v>(items: &'v [Value], list: ListKind<'_>) -> BTreeMap<String, &'v Value> {
                items
                    .iter()
                    .enumerate()
                    .filter_map(|(i, item)| Some((item_element(item, list, i)?, item)))
                    .collect()
            }
            let (old, new) = (index(old, field.list), index(new, field.list));
            let elements: std::collections::BTreeSet<&String> =
                old.keys().chain(new.keys()).collect();
            let item = item_field(field);
            for element in elements {
                let (before, after) = (old.get(element).copied(), new.get(element).copied());
                if before == after {
                    continue;
                }
                compare_values(
                    before,
                    after,
                    item,
                    changed.child_mut(element.clone()),
                    removed.child_mut(element.clone()),
                );
            }
        }
        // A changed scalar, atomic value or type: the path itself changed,
        // and anything below the new value is new.
        (Some(old), Some(new)) => {
            changed.member = true;
            mark_below(old, field, removed);
            mark_below(new, field, changed);
        }
    }
}

/// Marks `node` and every path below `value` as members.
fn mark_all(value: &Value, field: Field, node: &mut FieldSet) {
    node.member = true;
    mark_below(value, field, node);
}

fn mark_below(value: &Value, field: Field, node: &mut FieldSet) {
    for_each_child(value, field, node, |child, child_field, child_node| {
        mark_all(child, child_field, child_node)
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set_of(paths: &[&[&str]]) -> FieldSet {
        let mut set = FieldSet::default();
        for path in paths {
            let path: Vec<String> = path.iter().map(|s| (*s).to_owned()).collect();
            set.insert(&path);
        }
        set
    }

    #[test]
    fn fields_v1_round_trips() {
        let encoded = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}, "f:name": {}}}}
        });
        let set = FieldSet::from_fields_v1(&encoded).unwrap();
        assert_eq!(set.to_fields_v1(), encoded);
        assert_eq!(set.member_count(), 5);
    }

    #[test]
    fn invalid_fields_v1_is_rejected() {
        assert!(FieldSet::from_fields_v1(&json!({"x:y": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!([])).is_err());
    }

    #[test]
    fn set_algebra_works_on_members() {
        let mut a = set_of(&[&["f:a"], &["f:b", "f:c"], &["f:b"]]);
        let b = set_of(&[&["f:b"], &["f:a"]]);
        assert_eq!(a.intersection(&b), set_of(&[&["f:a"], &["f:b"]]));
        a.difference(&b);
        assert_eq!(a, set_of(&[&["f:b", "f:c"]]));
        a.union(&b);
        assert_eq!(a.member_count(), 3);
    }

    #[test]
    fn item_elements_use_sorted_keys_and_defaults() {
        let ports = merge_keys::field(merge_keys::Ty::Container, "ports");
        assert_eq!(
            item_element(&json!({"containerPort": 80}), ports.list, 0).unwrap(),
            r#"k:{"containerPort":80,"protocol":"TCP"}"#
        );
        assert_eq!(
            item_element(&json!("x"), ListKind::Set, 0).unwrap(),
            r#"v:"x""#
        );
        assert_eq!(
            display_path(&[
                "f:spec",
                r#"k:{"containerPort":80,"protocol":"TCP"}"#,
                "f:name"
            ]),
            r#".spec[containerPort=80,protocol="TCP"].name"#
        );
    }

    #[test]
    fn compare_reports_new_maps_as_members() {
        let cmp = compare(
            &json!({"data": {"a": "1", "b": "2"}}),
            &json!({"data": {"a": "9"}, "metadata": {"labels": {"x": "y"}}}),
            merge_keys::root("v1", "ConfigMap", None),
        );
        assert_eq!(
            cmp.changed.to_fields_v1(),
            json!({"f:data": {"f:a": {}}, "f:metadata": {".": {}, "f:labels": {".": {}, "f:x": {}}}})
        );
        assert_eq!(cmp.removed.to_fields_v1(), json!({"f:data": {"f:b": {}}}));
    }
}
