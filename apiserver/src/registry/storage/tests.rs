use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::durable::DurableSender;
use super::*;
use crate::registry::resources::GroupResource;

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default", "uid": format!("u-{name}")}})
}

fn rv_of(c: &Committed) -> u64 {
    c.object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn store() -> Store {
    let s = Store::new();
    let ns = GroupResource::new("", "namespaces");
    s.commit(
        &ns,
        "",
        "default",
        Expect::Absent,
        Change::Put(json!({"metadata": {"name": "default"}})),
        false,
    )
    .unwrap();
    s
}

#[test]
fn commit_checks_expectations_and_bumps_rv() {
    let s = store();
    let gr = GroupResource::new("", "configmaps");
    let c = s
        .commit(
            &gr,
            "default",
            "a",
            Expect::Absent,
            Change::Put(cm("a")),
            false,
        )
        .unwrap();
    assert_eq!(rv_of(&c), 2);
    assert_eq!(c.object["metadata"]["resourceVersion"], "2");
    assert_eq!(
        s.commit(
            &gr,
            "default",
            "a",
            Expect::Absent,
            Change::Put(cm("a")),
            false
        )
        .unwrap_err(),
        StoreError::Mismatch(Some(2))
    );
    assert_eq!(
        s.commit(
            &gr,
            "nope",
            "a",
            Expect::Absent,
            Change::Put(cm("a")),
            false
        )
        .unwrap_err(),
        StoreError::NamespaceMissing("nope".into())
    );
    let dry = s
        .commit(&gr, "default", "a", Expect::Rv(2), Change::Delete, true)
        .unwrap();
    assert_eq!(rv_of(&dry), 2);
    assert!(s.get(&gr, "default", "a").is_some());
    let del = s
        .commit(&gr, "default", "a", Expect::Rv(2), Change::Delete, false)
        .unwrap();
    assert_eq!(del.object["metadata"]["resourceVersion"], "3");
    assert!(s.get(&gr, "default", "a").is_none());
}

fn names(page: &[super::Json]) -> Vec<String> {
    page.iter()
        .map(|o| {
            super::json::decode(o)["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

#[test]
fn list_pages_in_key_order_and_counts_what_follows_a_first_page() {
    let s = store();
    let other = json!({"metadata": {"name": "other"}});
    let namespaces = GroupResource::new("", "namespaces");
    s.commit(
        &namespaces,
        "",
        "other",
        Expect::Absent,
        Change::Put(other),
        false,
    )
    .unwrap();
    let gr = GroupResource::new("", "configmaps");
    for (ns, n) in [("default", "c"), ("default", "a"), ("default", "b")]
        .into_iter()
        .chain([("other", "x"), ("other", "y")])
    {
        s.commit(&gr, ns, n, Expect::Absent, Change::Put(cm(n)), false)
            .unwrap();
    }
    let first = s.list(&gr, Some("default"), None, Some(2), None);
    assert_eq!(names(&first.items), ["a", "b"]);
    // The other namespace's objects follow in the table, not in the list.
    assert_eq!(first.remaining, Some(1));
    let next = first.next.unwrap();
    let last = s.list(&gr, Some("default"), Some(&next), Some(2), None);
    assert_eq!(names(&last.items), ["c"]);
    assert!(last.next.is_none());
    assert_eq!(last.remaining, None);
    // Across namespaces; a continued page is not counted again.
    let all = s.list(&gr, None, None, Some(1), None);
    assert_eq!(
        (names(&all.items), all.remaining),
        (vec!["a".into()], Some(4))
    );
    let second = s.list(&gr, None, all.next.as_ref(), Some(1), None);
    assert_eq!(names(&second.items), ["b"]);
    assert_eq!(second.remaining, None);
    // Under a filter the count is unknown, as upstream's.
    let some = |raw: &[u8]| super::json::decode(raw)["metadata"]["name"] != "b";
    let filtered = s.list(&gr, None, None, Some(1), Some(&some));
    assert!(filtered.next.is_some());
    assert_eq!(filtered.remaining, None);
}

#[test]
fn a_continued_list_shows_the_objects_as_they_stood_at_its_first_page() {
    let s = store();
    let gr = GroupResource::new("", "configmaps");
    for n in ["a", "b", "c", "d"] {
        s.commit(&gr, "default", n, Expect::Absent, Change::Put(cm(n)), false)
            .unwrap();
    }
    let first = s.list(&gr, Some("default"), None, Some(2), None);
    let at = first.rv;
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.remaining, Some(2));
    let next = first.next.unwrap();
    let mut changed = cm("c");
    changed["data"] = json!({"k": "later"});
    let rv = |n: &str| Expect::Rv(s.get(&gr, "default", n).unwrap().rv);
    s.commit(&gr, "default", "c", rv("c"), Change::Put(changed), false)
        .unwrap();
    s.commit(&gr, "default", "d", rv("d"), Change::Delete, false)
        .unwrap();
    for n in ["bb", "e", "f"] {
        s.commit(&gr, "default", n, Expect::Absent, Change::Put(cm(n)), false)
            .unwrap();
    }
    let rest = s
        .list_at(&gr, Some("default"), at, Some(&next), None, None)
        .unwrap();
    assert_eq!(names(&rest.items), ["c", "d"]);
    let c = super::json::decode(&rest.items[0]);
    assert!(c.get("data").is_none(), "c as it was: {c}");
    assert!(rest.next.is_none());
    // Paged one by one, the same.
    let one = s
        .list_at(&gr, Some("default"), at, Some(&next), Some(1), None)
        .unwrap();
    assert_eq!(names(&one.items), ["c"]);
    let two = s
        .list_at(&gr, Some("default"), at, one.next.as_ref(), Some(1), None)
        .unwrap();
    assert_eq!((names(&two.items), two.next), (vec!["d".to_string()], None));
    // A first page at `at` counts the objects as they stood then: c and d,
    // not bb, e and f.
    let then = s
        .list_at(&gr, Some("default"), at, None, Some(2), None)
        .unwrap();
    assert_eq!(
        (names(&then.items), then.remaining),
        (vec!["a".into(), "b".into()], Some(2))
    );
    // A list at the current resourceVersion sees everything.
    let now = s.list(&gr, Some("default"), None, None, None).rv;
    let all = s
        .list_at(&gr, Some("default"), now, None, None, None)
        .unwrap();
    assert_eq!(names(&all.items), ["a", "b", "bb", "c", "e", "f"]);
    let counted = s
        .list_at(&gr, Some("default"), now, None, Some(2), None)
        .unwrap();
    assert_eq!(counted.remaining, Some(4));
    // Past the history, or from the future: Expired.
    s.expire_history();
    let expired = s.list_at(&gr, Some("default"), at, Some(&next), None, None);
    assert!(
        matches!(expired, Err(StoreError::Expired { requested, .. }) if requested == at),
        "{expired:?}"
    );
    let future = s.list_at(&gr, Some("default"), u64::MAX, None, None, None);
    assert!(matches!(future, Err(StoreError::Expired { .. })));
}

#[test]
fn watch_resumes_and_expires() {
    let s = store();
    let gr = GroupResource::new("", "configmaps");
    for n in ["a", "b"] {
        s.commit(&gr, "default", n, Expect::Absent, Change::Put(cm(n)), false)
            .unwrap();
    }
    let w = s.watch(&gr, None, WatchFrom::Rv(2)).unwrap();
    assert_eq!(w.backlog.len(), 1);
    assert_eq!(w.backlog[0].name, "b");
    let rv = s.expire_history();
    assert!(matches!(
        s.watch(&gr, None, WatchFrom::Rv(3)),
        Err(StoreError::Expired { .. })
    ));
    assert!(s.watch(&gr, None, WatchFrom::Rv(rv)).is_ok());
    assert!(matches!(
        s.watch(&gr, None, WatchFrom::Rv(rv + 1)),
        Err(StoreError::Expired { .. })
    ));
}

#[test]
fn tracks_dependents() {
    let s = store();
    let gr = GroupResource::new("", "configmaps");
    let mut child = cm("child");
    child["metadata"]["ownerReferences"] = json!([{"uid": "u-parent"}]);
    s.commit(
        &gr,
        "default",
        "child",
        Expect::Absent,
        Change::Put(child),
        false,
    )
    .unwrap();
    assert_eq!(s.dependents("u-parent").len(), 1);
    assert!(s.locate_uid("u-child").is_some());
}

#[test]
fn updates_and_deletes_move_the_indexes() {
    let s = store();
    let gr = GroupResource::new("", "configmaps");
    let owned_by = |owner: &str, data: &str| {
        let mut child = cm("child");
        child["metadata"]["ownerReferences"] = json!([{"uid": owner}]);
        child["data"] = json!({"k": data});
        child
    };
    let put = |expect, obj| {
        s.commit(&gr, "default", "child", expect, Change::Put(obj), false)
            .unwrap()
    };
    let rv = |c: Committed| Expect::Rv(rv_of(&c));
    let c = put(Expect::Absent, owned_by("u-a", "1"));
    // The same owner: the indexes stay.
    let c = put(rv(c), owned_by("u-a", "2"));
    assert_eq!(s.dependents("u-a").len(), 1);
    assert!(s.locate_uid("u-child").is_some());
    // Another owner: the dependent moves.
    let c = put(rv(c), owned_by("u-b", "2"));
    assert!(s.dependents("u-a").is_empty());
    assert_eq!(s.dependents("u-b").len(), 1);
    s.commit(&gr, "default", "child", rv(c), Change::Delete, false)
        .unwrap();
    assert!(s.dependents("u-b").is_empty());
    assert!(s.locate_uid("u-child").is_none());
}

fn add_namespaces(s: &Store, names: &[&str]) {
    for ns in names {
        s.commit(
            &GroupResource::new("", "namespaces"),
            "",
            ns,
            Expect::Absent,
            Change::Put(json!({"metadata": {"name": ns}})),
            false,
        )
        .unwrap();
    }
}

#[test]
fn blocking_dependents_are_counted_by_namespace_and_their_owners_released() {
    let s = store();
    let (gc, _rx) = mpsc::unbounded_channel();
    s.set_gc(gc);
    add_namespaces(&s, &["a", "b"]);
    let gr = GroupResource::new("", "configmaps");
    let put = |ns: &str, name: &str, refs: Value| {
        let mut child = cm(name);
        child["metadata"]["uid"] = json!(format!("u-{ns}-{name}"));
        child["metadata"]["ownerReferences"] = refs;
        let expect = match s.get(&gr, ns, name) {
            Some(cur) => Expect::Rv(cur.rv),
            None => Expect::Absent,
        };
        s.commit(&gr, ns, name, expect, Change::Put(child), false)
            .unwrap();
    };
    let blocking = json!([{"uid": "u-owner", "blockOwnerDeletion": true}]);
    put("a", "one", blocking.clone());
    put("b", "two", blocking.clone());
    put("a", "free", json!([{"uid": "u-owner"}]));
    assert!(s.blocks_deletion("u-owner", "a"));
    assert!(s.blocks_deletion("u-owner", ""), "a cluster-scoped owner");
    assert!(!s.blocks_deletion("u-owner", "c"), "no dependent in c");
    assert!(s.take_released().is_empty());

    put(
        "a",
        "one",
        json!([{"uid": "u-owner", "blockOwnerDeletion": false}]),
    );
    assert!(!s.blocks_deletion("u-owner", "a"));
    assert!(s.blocks_deletion("u-owner", "b"));
    assert_eq!(s.take_released(), vec!["u-owner".to_string()]);
    assert!(s.take_released().is_empty(), "taken once");
    assert_eq!(s.dependents("u-owner").len(), 3);

    let cur = s.get(&gr, "b", "two").unwrap();
    s.commit(&gr, "b", "two", Expect::Rv(cur.rv), Change::Delete, false)
        .unwrap();
    assert!(!s.blocks_deletion("u-owner", ""));
    assert_eq!(s.take_released(), vec!["u-owner".to_string()]);
}

#[test]
fn a_namespaces_watch_starts_from_that_namespace_only() {
    let s = store();
    add_namespaces(&s, &["a", "b"]);
    let gr = GroupResource::new("", "configmaps");
    let from = s.current_rv();
    for (ns, name) in [("a", "one"), ("b", "two"), ("b", "three"), ("a", "four")] {
        let mut obj = cm(name);
        obj["metadata"]["namespace"] = json!(ns);
        s.commit(&gr, ns, name, Expect::Absent, Change::Put(obj), false)
            .unwrap();
    }
    let snapshot = s
        .watch(&gr, Some("a"), WatchFrom::Snapshot)
        .unwrap()
        .snapshot;
    assert_eq!(snapshot.len(), 2);
    assert!(snapshot.iter().all(|(ns, _)| ns == "a"));
    assert_eq!(
        s.watch(&gr, None, WatchFrom::Snapshot)
            .unwrap()
            .snapshot
            .len(),
        4
    );
    let backlog = s
        .watch(&gr, Some("b"), WatchFrom::Rv(from))
        .unwrap()
        .backlog;
    let names: Vec<&str> = backlog.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["two", "three"]);
}

fn durable_store() -> (Store, mpsc::UnboundedReceiver<PersistOp>) {
    let s = store();
    let (tx, rx) = mpsc::unbounded_channel();
    s.set_persist(tx);
    (s, rx)
}

fn events(rx: &mut mpsc::UnboundedReceiver<PersistOp>) -> Vec<(Arc<Event>, DurableSender)> {
    let mut out = Vec::new();
    while let Ok(op) = rx.try_recv() {
        if let PersistOp::Write { event, done, .. } = op {
            out.push((event, done));
        }
    }
    out
}

#[tokio::test]
async fn staged_writes_are_invisible_until_durable() {
    let (s, mut rx) = durable_store();
    let gr = GroupResource::new("", "configmaps");
    let c = s
        .commit(
            &gr,
            "default",
            "a",
            Expect::Absent,
            Change::Put(cm("a")),
            false,
        )
        .unwrap();
    assert!(s.get(&gr, "default", "a").is_none(), "not visible yet");
    let latest = s.latest(&gr, "default", "a").expect("writers see it");
    assert_eq!(latest.rv, rv_of(&c));
    // A second writer builds on the staged state without waiting.
    s.commit(
        &gr,
        "default",
        "a",
        Expect::Rv(rv_of(&c)),
        Change::Put(cm("a")),
        false,
    )
    .unwrap();
    let staged = events(&mut rx);
    assert_eq!(staged.len(), 2);
    let mut watch = s.watch(&gr, None, WatchFrom::Rv(s.current_rv())).unwrap();
    let (evs, dones): (Vec<_>, Vec<_>) = staged.into_iter().unzip();
    s.apply_durable(evs);
    for d in dones {
        d.resolve(Ok(()));
    }
    assert_eq!(s.get(&gr, "default", "a").unwrap().rv, rv_of(&c) + 1);
    assert_eq!(watch.rx.recv().await.unwrap().etype, EventType::Added);
    assert_eq!(watch.rx.recv().await.unwrap().etype, EventType::Modified);
    c.durable.unwrap().wait().await.unwrap();
}

#[tokio::test]
async fn an_aborted_batch_discards_every_staged_write() {
    let (s, mut rx) = durable_store();
    let gr = GroupResource::new("", "configmaps");
    s.commit(
        &gr,
        "default",
        "a",
        Expect::Absent,
        Change::Put(cm("a")),
        false,
    )
    .unwrap();
    let rv_before = s.current_rv();
    let c = s
        .commit(
            &gr,
            "default",
            "b",
            Expect::Absent,
            Change::Put(cm("b")),
            false,
        )
        .unwrap();
    let old_epoch = s.epoch();
    assert_eq!(s.abort_staged(), old_epoch + 1);
    for (_, done) in events(&mut rx) {
        done.resolve(Err("disk full".into()));
    }
    let c_rv = rv_of(&c);
    assert_eq!(&*c.durable.unwrap().wait().await.unwrap_err(), "disk full");
    assert!(s.latest(&gr, "default", "a").is_none());
    assert!(s.get(&gr, "default", "b").is_none());
    assert_eq!(s.current_rv(), rv_before, "nothing became visible");
    // Later writes start from durable state again, with fresh versions.
    let again = s
        .commit(
            &gr,
            "default",
            "a",
            Expect::Absent,
            Change::Put(cm("a")),
            false,
        )
        .unwrap();
    assert!(rv_of(&again) > c_rv, "discarded versions are not reused");
    s.detach();
    assert_eq!(
        s.commit(
            &gr,
            "default",
            "z",
            Expect::Absent,
            Change::Put(cm("z")),
            false
        )
        .unwrap_err(),
        StoreError::ShuttingDown
    );
}
