//! Every injectable fault, driven through a real kube-rs watcher that must
//! recover from it, and the audit of writes (feature `testing`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use wasmctrl_apiserver::ApiServer;
use wasmctrl_apiserver::testing::Scope;
use wasmctrl_testkit::client::client_for;
use wasmctrl_testkit::eventually;

use crate::common::Harness;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

/// A kube-rs reflector over ConfigMaps in `default`, counting how often it
/// (re)listed.
struct Follower {
    store: Store<ConfigMap>,
    lists: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Follower {
    fn start(client: Client) -> Follower {
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        let (store, writer) = reflector::store();
        let lists = Arc::new(AtomicUsize::new(0));
        let counter = lists.clone();
        let stream = reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff()
            .inspect(move |ev| {
                if matches!(ev, Ok(watcher::Event::Init)) {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
            });
        let task = tokio::spawn(async move {
            futures::pin_mut!(stream);
            while stream.next().await.is_some() {}
        });
        Follower { store, lists, task }
    }

    fn has(&self, name: &str) -> bool {
        self.store.state().iter().any(|o| o.name_any() == name)
    }

    async fn sees(&self, name: &str, secs: u64) {
        let store = self.store.clone();
        let name = name.to_string();
        eventually(
            &format!("the watcher sees {name}"),
            Duration::from_secs(secs),
            move || {
                let found = store.state().iter().any(|o| o.name_any() == name);
                async move { found }
            },
        )
        .await;
    }

    fn lists(&self) -> usize {
        self.lists.load(Ordering::SeqCst)
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn create(client: &Client, name: &str) {
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &cm(name))
        .await
        .unwrap();
}

#[tokio::test]
async fn dropped_watch_connections_are_reopened() {
    let h = Harness::start().await;
    let client = h.client().await;
    let f = Follower::start(client.clone());
    create(&client, "a").await;
    f.sees("a", 10).await;
    h.server.faults().drop_watches();
    create(&client, "b").await;
    f.sees("b", 20).await;
    assert_eq!(f.lists(), 1, "a cut connection resumes without relisting");
}

#[tokio::test]
async fn expired_watches_make_clients_relist() {
    let h = Harness::start().await;
    let client = h.client().await;
    let f = Follower::start(client.clone());
    create(&client, "a").await;
    f.sees("a", 10).await;
    let faults = h.server.faults();
    faults.expire_next_watches(Scope::resource("", "configmaps"), 2);
    faults.close_watches();
    create(&client, "b").await;
    f.sees("b", 30).await;
    assert!(f.lists() >= 2, "410 made the watcher relist");

    // For a duration: every watch is refused meanwhile, then it recovers.
    faults.expire_watches_for(Scope::All, Duration::from_secs(2));
    faults.close_watches();
    create(&client, "c").await;
    f.sees("c", 30).await;
}

#[tokio::test]
async fn failing_and_slow_requests_are_survived() {
    let h = Harness::start().await;
    let client = h.client().await;
    let f = Follower::start(client.clone());
    create(&client, "a").await;
    f.sees("a", 10).await;
    let faults = h.server.faults();

    // 500 for one resource only.
    faults.fail_requests(Scope::resource("", "configmaps"), Duration::from_secs(2));
    let (code, status) = h
        .raw("GET", "/api/v1/namespaces/default/configmaps", None, "")
        .await;
    assert_eq!(code, 500, "{status}");
    assert_eq!(status["reason"], "InternalError");
    assert_eq!(h.raw("GET", "/api/v1/namespaces", None, "").await.0, 200);
    faults.close_watches();
    eventually(
        "configmaps answer again",
        Duration::from_secs(10),
        || async {
            h.raw("GET", "/api/v1/namespaces/default/configmaps", None, "")
                .await
                .0
                == 200
        },
    )
    .await;
    create(&client, "b").await;
    f.sees("b", 30).await;

    // 500 for everything, discovery included.
    faults.fail_requests(Scope::All, Duration::from_secs(1));
    assert_eq!(h.raw("GET", "/version", None, "").await.0, 500);
    eventually(
        "everything answers again",
        Duration::from_secs(10),
        || async { h.raw("GET", "/version", None, "").await.0 == 200 },
    )
    .await;

    // A slow server.
    faults.delay_responses(Some(Duration::from_millis(500)));
    let started = Instant::now();
    create(&client, "slow").await;
    assert!(started.elapsed() >= Duration::from_millis(500));
    f.sees("slow", 30).await;
    faults.delay_responses(None);
}

async fn next(
    lines: &mut (impl futures::Stream<Item = std::io::Result<String>> + Unpin),
) -> serde_json::Value {
    let line = tokio::time::timeout(Duration::from_secs(10), lines.try_next())
        .await
        .expect("a watch line in time")
        .unwrap()
        .expect("watch open");
    serde_json::from_str(&line).unwrap()
}

/// Creates, retrying while a restarted server's old connections drain
/// from the client's pool.
async fn create_after_restart(client: &Client, name: &str) {
    let api = Api::<ConfigMap>::namespaced(client.clone(), "default");
    eventually(
        &format!("{name} is created"),
        Duration::from_secs(30),
        || {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &cm(name)).await.is_ok() }
        },
    )
    .await;
}

#[tokio::test]
async fn withheld_events_arrive_in_order_once_released() {
    let h = Harness::start().await;
    let client = h.client().await;
    let f = Follower::start(client.clone());
    create(&client, "a").await;
    f.sees("a", 10).await;
    // A raw watch, to see exactly what is delivered while withholding.
    let rv = h.server.resource_version();
    let req = http::Request::get(format!(
        "/api/v1/namespaces/default/configmaps?watch=true&allowWatchBookmarks=true&resourceVersion={rv}"
    ))
    .body(Vec::new())
    .unwrap();
    let mut lines = client.request_stream(req).await.unwrap().lines();

    let faults = h.server.faults();
    faults.withhold_watch_events(true);
    let bookmark = next(&mut lines).await;
    assert_eq!(bookmark["type"], "BOOKMARK");
    for name in ["w1", "w2"] {
        create(&client, name).await;
        let ev = next(&mut lines).await;
        assert_eq!(
            ev["type"], "BOOKMARK",
            "only bookmarks while withholding: {ev}"
        );
        assert_eq!(
            ev["object"]["metadata"]["resourceVersion"],
            rv.to_string(),
            "bookmarks do not skip withheld events"
        );
    }
    assert!(!f.has("w1") && !f.has("w2"));

    faults.withhold_watch_events(false);
    let (e1, e2) = (next(&mut lines).await, next(&mut lines).await);
    assert_eq!(
        (
            &e1["object"]["metadata"]["name"],
            &e2["object"]["metadata"]["name"]
        ),
        (&json!("w1"), &json!("w2"))
    );
    f.sees("w1", 10).await;
    f.sees("w2", 10).await;
    assert_eq!(f.lists(), 1);
}

#[tokio::test]
async fn first_status_write_of_each_object_conflicts() {
    let h = Harness::start().await;
    let client = h.client().await;
    let api: Api<Deployment> = Api::namespaced(client, "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &d).await.unwrap();
    h.server.faults().conflict_first_status_writes(true);
    let status = Patch::Merge(json!({"status": {"replicas": 1}}));
    let err = api
        .patch_status("d", &PatchParams::default(), &status)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"),
        "{err:?}"
    );
    let d = api
        .patch_status("d", &PatchParams::default(), &status)
        .await
        .unwrap();
    assert_eq!(d.status.unwrap().replicas, Some(1));
    // Main-resource writes are not affected.
    api.patch(
        "d",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn restarts_keep_credentials_and_clients_recover() {
    // In memory: state is lost, kubeconfigs stay valid.
    let server = ApiServer::start(Default::default()).await.unwrap();
    let client = client_for(&server.kubeconfig()).await;
    let f = Follower::start(client.clone());
    create(&client, "before").await;
    f.sees("before", 10).await;
    let config = server.config();
    server.shutdown().await;
    let server = ApiServer::start(config).await.unwrap();
    create_after_restart(&client, "after").await;
    f.sees("after", 30).await;
    let store = f.store.clone();
    eventually(
        "the relisted store lost `before`",
        Duration::from_secs(30),
        move || {
            let gone = !store.state().iter().any(|o| o.name_any() == "before");
            async move { gone }
        },
    )
    .await;
    drop(f);
    server.shutdown().await;

    // With a data directory: state is kept.
    let data = tempfile::tempdir().unwrap();
    let server = ApiServer::start(wasmctrl_apiserver::Config {
        data_dir: Some(data.path().to_path_buf()),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = client_for(&server.kubeconfig()).await;
    let f = Follower::start(client.clone());
    create(&client, "kept").await;
    f.sees("kept", 10).await;
    let config = server.config();
    server.shutdown().await;
    let server = ApiServer::start(config).await.unwrap();
    create_after_restart(&client, "new").await;
    f.sees("new", 30).await;
    assert!(f.has("kept"));
    drop(f);
    server.shutdown().await;
}

#[tokio::test]
async fn the_audit_records_every_write_with_its_caller() {
    let h = Harness::start().await;
    let audit = h.server.audit();
    audit.clear();
    let admin = h.client().await;
    let other = client_for(&h.server.kubeconfig_for_user("host-b")).await;
    create(&admin, "by-admin").await;
    create(&other, "by-b").await;
    let api: Api<ConfigMap> = Api::namespaced(other.clone(), "default");
    api.patch(
        "by-admin",
        &PatchParams::apply("host-b-manager"),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"x": "y"}})),
    )
    .await
    .unwrap();
    let _ = api.create(&PostParams::default(), &cm("by-b")).await; // 409
    api.get("by-b").await.unwrap(); // reads are not audited

    let records = audit.records();
    let summary: Vec<(String, String, Option<String>, u16)> = records
        .iter()
        .map(|r| (r.user.clone(), r.verb.clone(), r.name.clone(), r.code))
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "wasmctrl-admin".into(),
                "create".into(),
                Some("by-admin".into()),
                201
            ),
            ("host-b".into(), "create".into(), Some("by-b".into()), 201),
            (
                "host-b".into(),
                "patch".into(),
                Some("by-admin".into()),
                200
            ),
            ("host-b".into(), "create".into(), None, 409),
        ]
    );
    let patch = &records[2];
    assert_eq!(patch.resource, "configmaps");
    assert_eq!(patch.namespace.as_deref(), Some("default"));
    assert_eq!(patch.field_manager.as_deref(), Some("host-b-manager"));
    assert!(patch.peer.is_some());
    assert!(records.windows(2).all(|w| w[0].time <= w[1].time));
    assert_eq!(audit.dropped(), 0);
}

/// Held requests wait, unanswered, while others are served, and are
/// answered once the hold is lifted (here by `clear`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_requests_wait_until_the_hold_is_lifted() {
    let h = Harness::start().await;
    let client = h.client().await;
    let faults = h.server.faults();
    faults.hold_requests(Some(Scope::NonResource));
    let held = tokio::spawn({
        let client = client.clone();
        async move { client.apiserver_version().await }
    });
    // A resource request passes the hold.
    create(&client, "passes").await;
    assert!(!held.is_finished(), "discovery answered while held");
    faults.clear();
    let version = tokio::time::timeout(Duration::from_secs(30), held)
        .await
        .expect("answered once lifted")
        .unwrap()
        .unwrap();
    assert_eq!(version.major, "1");
}
