//! Reads of visible state: one object, lists, and the uid, owner and
//! namespace lookups.

use std::sync::Arc;

use serde_json::Value;

use super::state::{ObjKey, Stored};
use super::store::Store;
use crate::registry::resources::GroupResource;

impl Store {
    /// One visible object (what GET answers).
    pub(crate) fn get(&self, gr: &GroupResource, ns: &str, name: &str) -> Option<Stored> {
        self.lock()
            .tables
            .get(gr)?
            .get(&(ns.to_string(), name.to_string()))
            .map(|e| Stored {
                rv: e.rv,
                obj: e.obj.clone(),
                durable: None,
            })
    }

    /// The state the next write to an object must build on: a staged write
    /// if one is pending, else the visible object. Equal to [`Store::get`]
    /// without persistence.
    pub(crate) fn latest(&self, gr: &GroupResource, ns: &str, name: &str) -> Option<Stored> {
        self.lock().latest(gr, &(ns.to_string(), name.to_string()))
    }

    /// Where the object with this uid is stored.
    pub(crate) fn locate_uid(&self, uid: &str) -> Option<(GroupResource, ObjKey)> {
        self.lock().uids.get(uid).cloned()
    }

    /// Objects whose ownerReferences name `uid`.
    pub(crate) fn dependents(&self, uid: &str) -> Vec<(GroupResource, ObjKey)> {
        self.lock()
            .dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Keys of every object in namespace `ns`, across all resources.
    pub(crate) fn namespace_contents(&self, ns: &str) -> Vec<(GroupResource, String)> {
        let st = self.lock();
        let mut out = Vec::new();
        for (gr, table) in &st.tables {
            let start = (ns.to_string(), String::new());
            for ((kns, name), _) in table.range(start..) {
                if kns != ns {
                    break;
                }
                out.push((gr.clone(), name.clone()));
            }
        }
        out
    }

    /// Whether namespace `ns` holds no object (cheap: one range probe per
    /// resource, as the namespace controller asks after every deletion).
    pub(crate) fn namespace_is_empty(&self, ns: &str) -> bool {
        let st = self.lock();
        st.tables.values().all(|table| {
            table
                .range((ns.to_string(), String::new())..)
                .next()
                .is_none_or(|((kns, _), _)| kns != ns)
        })
    }

    /// Whether any object of a resource is stored.
    pub(crate) fn has_any(&self, gr: &GroupResource) -> bool {
        self.lock().tables.get(gr).is_some_and(|t| !t.is_empty())
    }

    /// Every object of a resource (all namespaces), for CRD cleanup and GC.
    pub(crate) fn keys(&self, gr: &GroupResource) -> Vec<ObjKey> {
        self.lock()
            .tables
            .get(gr)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// A filtered, ordered page of objects. `ns` None lists all namespaces;
    /// `after` is the exclusive start key of a continued list; at most `limit`
    /// matches are returned, with the key to continue from when more remain.
    pub(crate) fn list(
        &self,
        gr: &GroupResource,
        ns: Option<&str>,
        after: Option<&ObjKey>,
        limit: Option<usize>,
        filter: &dyn Fn(&Value) -> bool,
    ) -> (u64, Vec<Arc<Value>>, Option<ObjKey>) {
        let st = self.lock();
        let rv = st.rv;
        let Some(table) = st.tables.get(gr) else {
            return (rv, Vec::new(), None);
        };
        let mut out = Vec::new();
        let lower = match (after, ns) {
            (Some(k), _) => std::ops::Bound::Excluded(k.clone()),
            (None, Some(ns)) => std::ops::Bound::Included((ns.to_string(), String::new())),
            (None, None) => std::ops::Bound::Unbounded,
        };
        for (key, entry) in table.range((lower, std::ops::Bound::Unbounded)) {
            if let Some(ns) = ns
                && key.0 != ns
            {
                break;
            }
            if !filter(&entry.obj) {
                continue;
            }
            if let Some(limit) = limit
                && out.len() == limit
            {
                // The previous item is the last returned one.
                let last = out.last().map(|o: &Arc<Value>| {
                    (
                        crate::values::meta_str(o, "namespace")
                            .unwrap_or("")
                            .to_string(),
                        crate::values::meta_str(o, "name").unwrap_or("").to_string(),
                    )
                });
                return (rv, out, last);
            }
            out.push(entry.obj.clone());
        }
        (rv, out, None)
    }
}
