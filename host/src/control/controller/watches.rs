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

/// The keys `object` enqueues for a controller reconciling `reconciled`.
pub fn keys(mapping: &KeyMapping, reconciled: &Gvk, object: &CachedObject) -> Vec<ObjectKey> {
    let key = |name: &str| ObjectKey {
        namespace: object.namespace().map(str::to_string),
        name: name.to_string(),
    };
    match mapping {
        KeyMapping::Itself | KeyMapping::SameName => vec![key(object.name())],
        KeyMapping::ControllerOwner | KeyMapping::Owner => {
            let controller_only = *mapping == KeyMapping::ControllerOwner;
            object
                .owner_references()
                .iter()
                .filter(|r| !controller_only || r.controller)
                .filter(|r| *r.kind == reconciled.kind && r.group() == reconciled.group)
                .map(|r| key(&r.name))
                .collect()
        }
        KeyMapping::Label(label) => object
            .label(label)
            .filter(|v| !v.is_empty())
            .map(key)
            .into_iter()
            .collect(),
    }
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
            keys(&KeyMapping::ControllerOwner, &webapp(), &o),
            [ObjectKey::namespaced("default", "hello")]
        );
        assert_eq!(
            keys(&KeyMapping::Owner, &webapp(), &o),
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
            keys(&KeyMapping::SameName, &webapp(), &o),
            [ObjectKey::namespaced("ns", "s")]
        );
        assert_eq!(
            keys(&KeyMapping::Label("demo/webapp".into()), &webapp(), &o),
            [ObjectKey::namespaced("ns", "hello")]
        );
        assert!(keys(&KeyMapping::Label("missing".into()), &webapp(), &o).is_empty());
    }
}
