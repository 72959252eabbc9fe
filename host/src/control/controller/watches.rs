//! Watches → keys: which reconcile key an object event enqueues.

use crate::ObjectKey;
use crate::control::informer::CachedObject;
use crate::meta::kind::Gvk;

/// How events of one watched kind map to keys of the reconciled kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyMapping {
    /// The reconciled kind itself: the object's own key.
    Itself,
    /// An owned kind: the owner named by the object's *controller*
    /// ownerReference, when it is of the reconciled kind.
    ControllerOwner,
    /// Any ownerReference to the reconciled kind.
    Owner,
    /// The reconciled object with the same namespace and name.
    SameName,
    /// The reconciled object (same namespace) named by this label's value.
    Label(String),
}

/// Owner references of one object mapped to keys at most; the others are
/// refused. Not an upstream bound: upstream checks an ownerReference's
/// name only for being non-empty, and each one naming the reconciled kind
/// is a reconcile, so one object holding thousands of them (any writer of
/// an owned kind can make one) would queue thousands of keys.
pub const MAX_OWNER_KEYS: usize = 64;

/// The keys an object enqueues, and how many of its owner references were
/// refused: a name that is not an object name (it becomes the key a guest
/// is handed and the host logs), or past [`MAX_OWNER_KEYS`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MappedKeys {
    pub keys: Vec<ObjectKey>,
    pub refused: usize,
}

/// The keys `object` enqueues for a controller reconciling `reconciled`.
pub fn keys(mapping: &KeyMapping, reconciled: &Gvk, object: &CachedObject) -> MappedKeys {
    let key = |name: &str| ObjectKey {
        namespace: object.namespace().map(str::to_string),
        name: name.to_string(),
    };
    let mut mapped = MappedKeys::default();
    match mapping {
        KeyMapping::Itself | KeyMapping::SameName => mapped.keys.push(key(object.name())),
        KeyMapping::ControllerOwner | KeyMapping::Owner => {
            let controller_only = *mapping == KeyMapping::ControllerOwner;
            let owners = object
                .owner_references()
                .iter()
                .filter(|r| !controller_only || r.controller)
                .filter(|r| *r.kind == reconciled.kind && r.group() == reconciled.group);
            for owner in owners {
                let named = crate::meta::syntax::object_name("ownerReference name", &owner.name);
                if named.is_ok() && mapped.keys.len() < MAX_OWNER_KEYS {
                    mapped.keys.push(key(&owner.name));
                } else {
                    mapped.refused += 1;
                }
            }
        }
        KeyMapping::Label(label) => {
            mapped
                .keys
                .extend(object.label(label).filter(|v| !v.is_empty()).map(key));
        }
    }
    mapped
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(json: serde_json::Value) -> CachedObject {
        CachedObject::from_json(&json.to_string()).unwrap()
    }

    fn webapp() -> Gvk {
        Gvk {
            group: "demo.wasmctrl.dev".into(),
            version: "v1alpha1".into(),
            kind: "WebApp".into(),
        }
    }

    #[test]
    fn owned_objects_map_to_their_controller() {
        let o = object(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "hello", "namespace": "default", "ownerReferences": [
                {"apiVersion": "demo.wasmctrl.dev/v1alpha1", "kind": "WebApp", "name": "hello", "uid": "1", "controller": true},
                {"apiVersion": "demo.wasmctrl.dev/v1alpha1", "kind": "WebApp", "name": "other", "uid": "2"},
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "3", "controller": false}
            ]}
        }));
        assert_eq!(
            keys(&KeyMapping::ControllerOwner, &webapp(), &o).keys,
            [ObjectKey::namespaced("default", "hello")]
        );
        assert_eq!(
            keys(&KeyMapping::Owner, &webapp(), &o).keys,
            [
                ObjectKey::namespaced("default", "hello"),
                ObjectKey::namespaced("default", "other")
            ]
        );
    }

    #[test]
    fn same_name_and_label_mappings() {
        let o = object(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "ns", "labels": {"demo/webapp": "hello"}}
        }));
        assert_eq!(
            keys(&KeyMapping::SameName, &webapp(), &o).keys,
            [ObjectKey::namespaced("ns", "s")]
        );
        assert_eq!(
            keys(&KeyMapping::Label("demo/webapp".into()), &webapp(), &o).keys,
            [ObjectKey::namespaced("ns", "hello")]
        );
        assert!(
            keys(&KeyMapping::Label("missing".into()), &webapp(), &o)
                .keys
                .is_empty()
        );
    }

    #[test]
    fn owner_references_map_to_at_most_their_bound_of_valid_names() {
        let mut references: Vec<serde_json::Value> = (0..100)
            .map(|i| serde_json::json!({"apiVersion": "demo.wasmctrl.dev/v1alpha1", "kind": "WebApp", "name": format!("app-{i}"), "uid": i.to_string()}))
            .collect();
        for bad in ["", "a/b", "..", "line\nbreak", &"x".repeat(254)] {
            references.insert(0, serde_json::json!({"apiVersion": "demo.wasmctrl.dev/v1alpha1", "kind": "WebApp", "name": bad, "uid": "bad"}));
        }
        let o = object(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "default", "ownerReferences": references}
        }));
        let mapped = keys(&KeyMapping::Owner, &webapp(), &o);
        assert_eq!(mapped.keys.len(), MAX_OWNER_KEYS);
        assert_eq!(mapped.keys[0], ObjectKey::namespaced("default", "app-0"));
        assert_eq!(mapped.refused, 5 + 100 - MAX_OWNER_KEYS);
    }
}
