//! Reads of visible state: one object, lists, and the uid, owner and
//! namespace lookups.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::ops::RangeBounds;

use super::commit::StoreError;
use super::json::Json;
use super::state::{ObjKey, Stored, TableKey};
use super::store::Store;
use crate::registry::resources::GroupResource;

/// Which objects a list keeps, judged from each one's stored JSON: the
/// filter parses it if it must.
pub(crate) type Filter<'a> = &'a dyn Fn(&[u8]) -> bool;

impl Store {
    /// One visible object (what GET answers).
    pub(crate) fn get(&self, gr: &GroupResource, ns: &str, name: &str) -> Option<Stored> {
        let (rv, json) = self
            .lock()
            .tables
            .get(gr)?
            .get(&TableKey::new(ns, name))
            .map(|e| (e.rv, e.obj.clone()))?;
        // Parsed outside the lock.
        Some(Stored::parse((rv, json, None)))
    }

    /// The state the next write to an object must build on: a staged write
    /// if one is pending, else the visible object. Equal to [`Store::get`]
    /// without persistence.
    pub(crate) fn latest(&self, gr: &GroupResource, ns: &str, name: &str) -> Option<Stored> {
        let found = self
            .lock()
            .latest_json(gr, &(ns.to_string(), name.to_string()))?;
        // Parsed outside the lock.
        Some(Stored::parse(found))
    }

    /// Where the object with this uid is stored.
    pub(crate) fn locate_uid(&self, uid: &str) -> Option<(GroupResource, ObjKey)> {
        self.lock().uids.get(uid)
    }

    /// Whether a foreground deletion of the owner `uid`, in namespace
    /// `owner_ns` (empty: cluster-scoped), still waits: some object names
    /// it with `blockOwnerDeletion: true`, from the owner's namespace if it
    /// has one. Counted, not copied: a cascade asks once per dependent.
    pub(crate) fn blocks_deletion(&self, uid: &str, owner_ns: &str) -> bool {
        self.lock()
            .dependents
            .get(uid)
            .is_some_and(|d| d.block(owner_ns))
    }

    /// Objects whose ownerReferences name `uid`.
    pub(crate) fn dependents(&self, uid: &str) -> Vec<(GroupResource, ObjKey)> {
        self.lock()
            .dependents
            .get(uid)
            .map(|d| d.all.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Owners whose blocking dependents of some namespace all went since
    /// the last call (each once; see [`Store::blocks_deletion`]).
    pub(crate) fn take_released(&self) -> Vec<String> {
        let mut released = std::mem::take(&mut self.lock().released);
        released.sort_unstable();
        released.dedup();
        released
    }

    /// Keys of every object in namespace `ns`, across all resources.
    pub(crate) fn namespace_contents(&self, ns: &str) -> Vec<(GroupResource, String)> {
        let st = self.lock();
        let mut out = Vec::new();
        for (gr, table) in &st.tables {
            for (key, _) in table.range(TableKey::namespace_start(ns)..) {
                let (kns, name) = key.parts();
                if kns != ns {
                    break;
                }
                out.push((gr.clone(), name.to_string()));
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
                .range(TableKey::namespace_start(ns)..)
                .next()
                .is_none_or(|(key, _)| key.parts().0 != ns)
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
            .map(|t| t.keys().map(TableKey::to_obj_key).collect())
            .unwrap_or_default()
    }

    /// A filtered, ordered page of objects, as their JSON, at the store's
    /// current resourceVersion. `ns` None lists all namespaces; `after` is
    /// the exclusive start key of a continued list; at most `limit` matches
    /// are returned. A `filter` is given each object's JSON, to parse if it
    /// must: without one, nothing is parsed.
    pub(crate) fn list(
        &self,
        gr: &GroupResource,
        ns: Option<&str>,
        after: Option<&ObjKey>,
        limit: Option<usize>,
        filter: Option<Filter<'_>>,
    ) -> Page {
        let st = self.lock();
        let rv = st.rv;
        let Some(table) = st.tables.get(gr) else {
            return Page::last(rv, Vec::new());
        };
        let objects = table
            .range(lower_bound(ns, after))
            .map(|(k, e)| (k.parts(), &e.obj));
        let Some(filter) = filter else {
            // Across namespaces a first page is the table's first keys:
            // the rest is counted without walking it.
            let whole_table = after.is_none() && ns.is_none();
            let mut first = page(
                rv,
                objects,
                ns,
                limit,
                None,
                after.is_none() && !whole_table,
            );
            if whole_table && first.next.is_some() {
                first.remaining = Some((table.len() - first.items.len()) as u64);
            }
            return first;
        };
        let candidates = candidates(objects, ns);
        drop(st);
        page_owned(rv, &candidates, ns, limit, filter)
    }

    /// [`Store::list`] as the objects stood at resourceVersion `at`: what a
    /// continued list answers, so that its pages add up to one consistent
    /// list, as kube-apiserver's do. The current objects are rolled back
    /// through the watch history: the first change after `at` to a key
    /// carries the key's state at `at`. Expired once that history no longer
    /// reaches back to `at`.
    pub(crate) fn list_at(
        &self,
        gr: &GroupResource,
        ns: Option<&str>,
        at: u64,
        after: Option<&ObjKey>,
        limit: Option<usize>,
        filter: Option<Filter<'_>>,
    ) -> Result<Page, StoreError> {
        let st = self.lock();
        if at < st.floor || at > st.rv {
            return Err(StoreError::Expired {
                requested: at,
                oldest: st.floor,
            });
        }
        let lower = lower_bound(ns, after);
        // The same bounds over the history's borrowed keys.
        let borrowed = (
            lower.0.as_ref().map(TableKey::parts),
            std::ops::Bound::Unbounded,
        );
        // Each key changed since `at`, with its state then (None: it did not
        // exist). The history is in resourceVersion order: walking back, the
        // last event seen for a key is its first change after `at`.
        let mut then: BTreeMap<(&str, &str), Option<&Json>> = BTreeMap::new();
        for ev in st.history.iter().rev().take_while(|ev| ev.rv > at) {
            let key = (ev.namespace.as_str(), ev.name.as_str());
            if ev.resource == *gr && borrowed.contains(&key) {
                then.insert(key, ev.prev.as_ref());
            }
        }
        let empty = BTreeMap::new();
        let table = st.tables.get(gr).unwrap_or(&empty);
        let mut current = table
            .range(lower.clone())
            .map(|(k, e)| (k.parts(), &e.obj))
            .peekable();
        let mut changed = then.into_iter().peekable();
        let merged = std::iter::from_fn(move || {
            loop {
                let order = match (current.peek(), changed.peek()) {
                    (None, None) => return None,
                    (Some(_), None) => Ordering::Less,
                    (None, Some(_)) => Ordering::Greater,
                    (Some((c, _)), Some((k, _))) => c.cmp(k),
                };
                if order == Ordering::Less {
                    return current.next();
                }
                if order == Ordering::Equal {
                    current.next();
                }
                let (key, state) = changed.next()?;
                if let Some(obj) = state {
                    return Some((key, obj));
                }
            }
        });
        let Some(filter) = filter else {
            return Ok(page(at, merged, ns, limit, None, after.is_none()));
        };
        let candidates = candidates(merged, ns);
        drop(st);
        Ok(page_owned(at, &candidates, ns, limit, filter))
    }
}

/// The objects of `objects` in `ns`, copied (their JSON shared) so that a
/// filter, which parses each, runs after the store's lock is released:
/// writes wait for that lock, and parsing every object of a large resource
/// takes seconds.
fn candidates<'a>(
    objects: impl Iterator<Item = ((&'a str, &'a str), &'a Json)>,
    ns: Option<&str>,
) -> Vec<(String, String, Json)> {
    objects
        .take_while(|((kns, _), _)| ns.is_none_or(|ns| *kns == ns))
        .map(|((kns, name), obj)| (kns.to_string(), name.to_string(), obj.clone()))
        .collect()
}

/// [`page`] over [`candidates`].
fn page_owned(
    rv: u64,
    candidates: &[(String, String, Json)],
    ns: Option<&str>,
    limit: Option<usize>,
    filter: Filter<'_>,
) -> Page {
    let objects = candidates
        .iter()
        .map(|(kns, name, obj)| ((kns.as_str(), name.as_str()), obj));
    page(rv, objects, ns, limit, Some(filter), false)
}

fn lower_bound(
    ns: Option<&str>,
    after: Option<&ObjKey>,
) -> (std::ops::Bound<TableKey>, std::ops::Bound<TableKey>) {
    let lower = match (after, ns) {
        (Some(k), _) => std::ops::Bound::Excluded(TableKey::of(k)),
        (None, Some(ns)) => std::ops::Bound::Included(TableKey::namespace_start(ns)),
        (None, None) => std::ops::Bound::Unbounded,
    };
    (lower, std::ops::Bound::Unbounded)
}

/// The first `limit` objects of `objects` (in key order, from the lower
/// bound) that are in `ns` and pass `filter`, the key to continue from
/// when more remain, and, with `count_rest`, how many more there are.
fn page<'a>(
    rv: u64,
    mut objects: impl Iterator<Item = ((&'a str, &'a str), &'a Json)>,
    ns: Option<&str>,
    limit: Option<usize>,
    filter: Option<Filter<'_>>,
    count_rest: bool,
) -> Page {
    let in_ns = |key: &(&str, &str)| ns.is_none_or(|ns| key.0 == ns);
    let mut items = Vec::new();
    let mut last: Option<(&str, &str)> = None;
    let mut more = false;
    for (key, obj) in objects.by_ref() {
        if !in_ns(&key) {
            break;
        }
        if let Some(filter) = filter
            && !filter(obj)
        {
            continue;
        }
        if limit.is_some_and(|limit| items.len() == limit) {
            more = true;
            break;
        }
        items.push(obj.clone());
        last = Some(key);
    }
    let Some((kns, name)) = last.filter(|_| more) else {
        return Page::last(rv, items);
    };
    // The object that showed more remain was taken from `objects` already.
    let remaining = count_rest
        .then(|| 1 + objects.take_while(|(key, _)| in_ns(key)).count())
        .map(|n| n as u64);
    Page {
        rv,
        items,
        next: Some((kns.to_string(), name.to_string())),
        remaining,
    }
}

/// One page of a list.
#[derive(Debug)]
pub(crate) struct Page {
    /// The resourceVersion the page shows the objects at.
    pub(crate) rv: u64,
    /// The objects' stored JSON, in key order.
    pub(crate) items: Vec<Json>,
    /// The exclusive start key of the next page, when more objects remain.
    pub(crate) next: Option<ObjKey>,
    /// How many objects follow this page, where the store counted them: on
    /// a first page (no `after`) without a filter that has more, as
    /// kube-apiserver's `remainingItemCount` is unknown under a selector.
    /// Later pages of the same list are not counted again: the count is the
    /// first page's, less what each page since returned, so that a listing
    /// read in many pages walks the rest of its objects once.
    pub(crate) remaining: Option<u64>,
}

impl Page {
    /// A page with nothing after it.
    fn last(rv: u64, items: Vec<Json>) -> Self {
        Page {
            rv,
            items,
            next: None,
            remaining: None,
        }
    }
}
