//! Which informer: the key the shared cache keeps its informers by, and a
//! borrowed view of it, so that a lookup by a resource and a namespace the
//! caller holds as `&str`s builds no key (four `String`s) first.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

use kube::api::ApiResource;

/// Which informer: a resolved resource (as discovery names it, so two
/// spellings of one kind share an informer), cluster-wide or in one
/// namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InformerKey {
    pub group: String,
    pub version: String,
    /// The resource's plural (`deployments`).
    pub resource: String,
    pub namespace: Option<String>,
}

impl InformerKey {
    /// The informer of `resource` in `namespace` (None: all namespaces).
    pub fn new(resource: &ApiResource, namespace: Option<&str>) -> Self {
        Self {
            group: resource.group.clone(),
            version: resource.version.clone(),
            resource: resource.plural.clone(),
            namespace: namespace.map(str::to_string),
        }
    }
}

impl std::fmt::Display for InformerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}/{}", self.version, self.resource)?;
        } else {
            write!(f, "{}/{}/{}", self.group, self.version, self.resource)?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " in {ns}"),
            None => Ok(()),
        }
    }
}

/// An informer key's parts, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyParts<'a> {
    group: &'a str,
    version: &'a str,
    resource: &'a str,
    namespace: Option<&'a str>,
}

impl<'a> KeyParts<'a> {
    /// The key [`InformerKey::new`] builds for the same arguments, borrowed.
    pub(crate) fn of(resource: &'a ApiResource, namespace: Option<&'a str>) -> Self {
        Self {
            group: &resource.group,
            version: &resource.version,
            resource: &resource.plural,
            namespace,
        }
    }
}

/// What a key is, owned or borrowed: the map hashes and compares through
/// this, so both agree by construction.
pub(crate) trait AsParts {
    fn parts(&self) -> KeyParts<'_>;
}

impl AsParts for InformerKey {
    fn parts(&self) -> KeyParts<'_> {
        KeyParts {
            group: &self.group,
            version: &self.version,
            resource: &self.resource,
            namespace: self.namespace.as_deref(),
        }
    }
}

impl AsParts for KeyParts<'_> {
    fn parts(&self) -> KeyParts<'_> {
        *self
    }
}

impl Hash for KeyParts<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.group.hash(state);
        self.version.hash(state);
        self.resource.hash(state);
        self.namespace.hash(state);
    }
}

impl Hash for InformerKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.parts().hash(state);
    }
}

impl Hash for dyn AsParts + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.parts().hash(state);
    }
}

impl PartialEq for dyn AsParts + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn AsParts + '_ {}

impl<'a> Borrow<dyn AsParts + 'a> for InformerKey {
    fn borrow(&self) -> &(dyn AsParts + 'a) {
        self
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn resource(group: &str, plural: &str) -> ApiResource {
        ApiResource {
            group: group.into(),
            version: "v1".into(),
            api_version: if group.is_empty() {
                "v1".into()
            } else {
                format!("{group}/v1")
            },
            kind: "K".into(),
            plural: plural.into(),
        }
    }

    #[test]
    fn a_borrowed_key_finds_exactly_the_informer_its_owned_key_names() {
        let cm = resource("", "configmaps");
        let bench = resource("bench.wasmctrl.dev", "configmaps");
        let mut map = HashMap::new();
        map.insert(InformerKey::new(&cm, Some("a")), 1);
        map.insert(InformerKey::new(&cm, None), 2);
        map.insert(InformerKey::new(&bench, Some("a")), 3);
        let get = |r: &ApiResource, ns: Option<&str>| {
            map.get(&KeyParts::of(r, ns) as &dyn AsParts).copied()
        };
        assert_eq!(get(&cm, Some("a")), Some(1));
        assert_eq!(get(&cm, None), Some(2));
        assert_eq!(get(&bench, Some("a")), Some(3));
        assert_eq!(get(&cm, Some("b")), None);
        assert_eq!(get(&bench, None), None);
        assert_eq!(get(&resource("", "secrets"), Some("a")), None);
        // Parts that only concatenate alike are different keys.
        let mut split = HashMap::new();
        split.insert(InformerKey::new(&resource("ab", "c"), None), 1);
        assert_eq!(
            split.get(&KeyParts::of(&resource("a", "bc"), None) as &dyn AsParts),
            None
        );
    }
}
