//! The shared cache across a forced relist (410 Gone): every change made
//! around the expiry reaches subscribers, deletions included; and what it
//! keeps of each object.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DeleteParams, PostParams};
use wasmctrl::control::informer::{
    CacheOptions, Informer, InformerKey, Notification, SharedCache, Subscription,
};

use wasmctrl_cluster_tests::{Cluster, configmap};
use wasmctrl_testkit::eventually;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_missed_across_a_forced_relist() {
    let cluster = Cluster::start().await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    for name in ["keep", "gone-1", "gone-2"] {
        api.create(&PostParams::default(), &configmap(name))
            .await
            .unwrap();
    }
    let cache = SharedCache::new(cluster.client.clone());
    let resource = ApiResource::erase::<ConfigMap>(&());
    let key = InformerKey::new(&resource, Some("default"));
    let informer = cache.informer(key, resource);
    let mut events = informer.subscribe();
    tokio::time::timeout(Duration::from_secs(30), informer.wait_synced())
        .await
        .expect("the informer syncs");

    let seen = Arc::new(std::sync::Mutex::new(Vec::<(String, bool)>::new()));
    let collector = {
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Some(n) = events.next().await {
                if let Notification::Object(e) = n {
                    let name = e.object.name().to_string();
                    seen.lock().unwrap().push((name, e.deleted));
                }
            }
        })
    };

    // Every watch expires (as after an etcd compaction) while objects change.
    cluster.server().expire_watches();
    api.delete("gone-1", &DeleteParams::default())
        .await
        .unwrap();
    api.delete("gone-2", &DeleteParams::default())
        .await
        .unwrap();
    api.create(&PostParams::default(), &configmap("new"))
        .await
        .unwrap();
    cluster.server().expire_watches();

    eventually(
        "the deletions and the creation",
        Duration::from_secs(30),
        || async {
            let seen = seen.lock().unwrap();
            let deleted: HashSet<&str> =
                seen.iter().filter(|e| e.1).map(|e| e.0.as_str()).collect();
            let applied: HashSet<&str> =
                seen.iter().filter(|e| !e.1).map(|e| e.0.as_str()).collect();
            (deleted.contains("gone-1") && deleted.contains("gone-2") && applied.contains("new"))
                .then_some(())
        },
    )
    .await;
    let names: HashSet<String> = informer
        .objects()
        .iter()
        .map(|o| o.name().to_string())
        .collect();
    assert_eq!(
        names,
        HashSet::from(["keep".to_string(), "new".to_string()])
    );
    assert!(
        !seen.lock().unwrap().iter().any(|e| e.0 == "keep" && e.1),
        "keep was never deleted"
    );
    collector.abort();
}

/// An event hands subscribers the object the store holds, not a copy: a
/// relist's events were a second copy of every listed object.
/// ConfigMaps `names` created in `default`, then a synced informer of the
/// ConfigMaps there (with its cache), subscribed to before it could have
/// listed: it starts listing when made, over HTTP.
async fn synced(
    cluster: &Cluster,
    names: &[&str],
) -> (Api<ConfigMap>, SharedCache, Arc<Informer>, Subscription) {
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    for name in names {
        api.create(&PostParams::default(), &configmap(name))
            .await
            .unwrap();
    }
    let cache = SharedCache::new(cluster.client.clone());
    let resource = ApiResource::erase::<ConfigMap>(&());
    let informer = cache.informer(InformerKey::new(&resource, Some("default")), resource);
    let events = informer.subscribe();
    tokio::time::timeout(Duration::from_secs(30), informer.wait_synced())
        .await
        .expect("the informer syncs");
    (api, cache, informer, events)
}

/// A subscriber reads the first listing from the store once synced; it is
/// told only of what changes after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_listing_is_read_from_the_store_not_announced() {
    let cluster = Cluster::start().await;
    let (api, _cache, informer, mut events) = synced(&cluster, &["listed-1", "listed-2"]).await;
    assert!(informer.get(Some("default"), "listed-1").is_some());
    assert!(informer.get(Some("default"), "listed-2").is_some());
    api.create(&PostParams::default(), &configmap("changed"))
        .await
        .unwrap();
    // The first of our objects announced (the API server's own, such as a
    // root CA ConfigMap, may come and go).
    let first = loop {
        let next = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .expect("an event within 30 s");
        match next {
            Some(Notification::Object(e))
                if ["listed-1", "listed-2", "changed"].contains(&e.object.name()) =>
            {
                break e.object.name().to_string();
            }
            Some(Notification::Object(_)) => continue,
            other => panic!("expected an object's event, got {other:?}"),
        }
    };
    assert_eq!(first, "changed", "the first listing was announced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_carries_the_cached_object_itself() {
    let cluster = Cluster::start().await;
    let (api, _cache, informer, mut events) = synced(&cluster, &["listed"]).await;
    // The first listing is not announced; a relist announces every object.
    // Expiring the watches forces one only once the informer's watch is
    // open, so it is repeated until `listed` comes.
    cluster.server().expire_watches();
    api.create(&PostParams::default(), &configmap("watched"))
        .await
        .unwrap();
    let mut shared = HashSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while shared.len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "events within 30 s for {shared:?} only, not both listed and watched"
        );
        let Ok(next) = tokio::time::timeout(Duration::from_secs(1), events.next()).await else {
            cluster.server().expire_watches();
            continue;
        };
        let Some(Notification::Object(e)) = next else {
            continue;
        };
        let name = e.object.name().to_string();
        let cached = informer.get(Some("default"), &name).expect("cached");
        assert!(
            Arc::ptr_eq(&e.object, &cached),
            "the event for {name} carries a copy of the cached object"
        );
        shared.insert(name);
    }
}

/// The cache drops `metadata.managedFields` from listed and watched objects
/// (the API server keeps them, and a live read returns them), unless told
/// to keep them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_fields_are_dropped_from_the_cache_unless_kept() {
    // An object whose writer set no field gets no managedFields entry.
    let with_data = |name: &str| ConfigMap {
        data: Some([("k".to_string(), "v".to_string())].into()),
        ..configmap(name)
    };
    let cluster = Cluster::start().await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    let writer = PostParams {
        field_manager: Some("e2e".into()),
        ..PostParams::default()
    };
    api.create(&writer, &with_data("listed")).await.unwrap();
    let live = api.get("listed").await.unwrap();
    assert!(
        live.metadata.managed_fields.is_some_and(|m| !m.is_empty()),
        "the API server records who wrote the object"
    );
    let resource = ApiResource::erase::<ConfigMap>(&());
    let key = InformerKey::new(&resource, Some("default"));
    let stripping = SharedCache::new(cluster.client.clone());
    let keeping = SharedCache::with_options(
        cluster.client.clone(),
        CacheOptions {
            strip_managed_fields: false,
        },
    );
    let informers = [
        (false, stripping.informer(key.clone(), resource.clone())),
        (true, keeping.informer(key, resource)),
    ];
    for (_, informer) in &informers {
        tokio::time::timeout(Duration::from_secs(30), informer.wait_synced())
            .await
            .expect("the informer syncs");
    }
    api.create(&writer, &with_data("watched")).await.unwrap();
    for (kept, informer) in &informers {
        for name in ["listed", "watched"] {
            let cached = eventually(
                &format!("{name} cached"),
                Duration::from_secs(30),
                || async { informer.get(Some("default"), name) },
            )
            .await;
            let json: serde_json::Value = serde_json::from_str(cached.json()).unwrap();
            assert_eq!(json["metadata"]["name"], name, "{}", cached.json());
            assert_eq!(
                json["metadata"].get("managedFields").is_some(),
                *kept,
                "{name} (kept: {kept}): {}",
                cached.json()
            );
            assert!(json["metadata"]["resourceVersion"].is_string());
        }
    }
}

/// What a guest's `kube` calls hand back has no managedFields either when
/// the host drops them: live gets, lists, and the answers to writes (the
/// API server's own JSON, with that one member cut). A host that keeps
/// them hands them on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_reads_no_managed_fields_from_the_api_server_either_unless_kept() {
    use std::time::Instant;

    use wasmctrl::control::discovery::Resolver;
    use wasmctrl::control::leader::Fence;
    use wasmctrl::control::metrics::Metrics;
    use wasmctrl::sandbox::hostapi::PermissionRule;
    use wasmctrl::sandbox::hostapi::{
        ApiLimits, ClusterApi, ClusterContext, Grant, Gvk, KubeApi, KubeRequest, KubeResponse,
        ObjectPatch,
    };

    let cluster = Cluster::start().await;
    let configmaps = Gvk {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
    };
    let deadline = || Instant::now() + Duration::from_secs(30);
    for kept in [false, true] {
        let context = ClusterContext {
            client: cluster.client.clone(),
            resolver: Arc::new(Resolver::new(cluster.client.clone())),
            cache: Arc::new(SharedCache::with_options(
                cluster.client.clone(),
                CacheOptions {
                    strip_managed_fields: !kept,
                },
            )),
            metrics: Arc::new(Metrics::new()),
            fence: Fence::open(),
        };
        let grant = Grant::new(
            vec![PermissionRule {
                group: String::new(),
                resources: vec!["configmaps".into()],
                verbs: ["get", "list", "create", "patch"].map(String::from).into(),
                namespaces: None,
            }],
            None,
        );
        let api = ClusterApi::new("guest", &context, grant, ApiLimits::default());
        let name = format!("answers-{kept}");
        let ns = Some("default".to_string());
        let object = |answer: Result<KubeResponse, _>| match answer {
            Ok(KubeResponse::Object(json)) => json,
            other => panic!("not one object: {other:?}"),
        };
        let answers = [
            object(
                api.call(
                    KubeRequest::Create {
                        kind: configmaps.clone(),
                        namespace: ns.clone(),
                        object: format!(
                            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}},"data":{{"a":"1"}}}}"#
                        )
                        .into(),
                    },
                    deadline(),
                )
                .await,
            ),
            object(
                api.call(
                    KubeRequest::Patch {
                        kind: configmaps.clone(),
                        namespace: ns.clone(),
                        name: name.clone(),
                        patch: ObjectPatch::merge(r#"{"data":{"b":"2"}}"#),
                    },
                    deadline(),
                )
                .await,
            ),
            object(
                api.call(
                    KubeRequest::Get {
                        kind: configmaps.clone(),
                        namespace: ns.clone(),
                        name: name.clone(),
                    },
                    deadline(),
                )
                .await,
            ),
        ];
        let Ok(KubeResponse::Objects(listed)) = api
            .call(
                KubeRequest::List {
                    kind: configmaps.clone(),
                    namespace: ns.clone(),
                    label_selector: None,
                },
                deadline(),
            )
            .await
        else {
            panic!("the list failed");
        };
        let listed: Vec<String> = listed.into_iter().filter(|o| o.contains(&name)).collect();
        assert_eq!(listed.len(), 1);
        for answer in answers.iter().chain(&listed) {
            let v: serde_json::Value = serde_json::from_str(answer).unwrap();
            assert_eq!(v["metadata"]["name"], name.as_str(), "{answer}");
            assert_eq!(v["data"]["a"], "1", "{answer}");
            assert_eq!(
                v["metadata"].get("managedFields").is_some(),
                kept,
                "kept: {kept}: {answer}"
            );
        }
        // The server itself still records them.
        let live: ConfigMap = Api::namespaced(cluster.client.clone(), "default")
            .get(&name)
            .await
            .unwrap();
        assert!(live.metadata.managed_fields.is_some_and(|m| !m.is_empty()));
    }
}

/// A guest's list of a kind no informer holds is read from the API server
/// in pages: every object comes back, and a list past the plugin's
/// `listBytes` is refused, counted, after reading about that much.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_list_of_an_unwatched_kind_is_read_in_pages_within_list_bytes() {
    use std::time::Instant;

    use futures::StreamExt;
    use wasmctrl::control::discovery::Resolver;
    use wasmctrl::control::leader::Fence;
    use wasmctrl::control::metrics::Metrics;
    use wasmctrl::sandbox::hostapi::{
        ApiLimits, ClusterApi, ClusterContext, Grant, Gvk, KubeApi, KubeRequest, KubeResponse,
        PermissionRule,
    };

    let cluster = Cluster::start().await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    futures::stream::iter(0..250)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &configmap(&format!("paged-{i}")))
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let metrics = Arc::new(Metrics::new());
    let context = ClusterContext {
        client: cluster.client.clone(),
        resolver: Arc::new(Resolver::new(cluster.client.clone())),
        cache: Arc::new(SharedCache::new(cluster.client.clone())),
        metrics: metrics.clone(),
        fence: Fence::open(),
    };
    let grant = || {
        Grant::new(
            vec![PermissionRule {
                group: String::new(),
                resources: vec!["configmaps".into()],
                verbs: ["list"].map(String::from).into(),
                namespaces: None,
            }],
            None,
        )
    };
    let list = || KubeRequest::List {
        kind: Gvk {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
        },
        namespace: Some("default".into()),
        label_selector: None,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let whole = ClusterApi::new("guest", &context, grant(), ApiLimits::default());
    let Ok(KubeResponse::Objects(objects)) = whole.call(list(), deadline).await else {
        panic!("the list failed");
    };
    let paged = objects.iter().filter(|o| o.contains("\"paged-")).count();
    assert_eq!(paged, 250, "every page read");

    let small = ApiLimits {
        list_bytes: 4 << 10,
        ..ApiLimits::default()
    };
    let bounded = ClusterApi::new("guest", &context, grant(), small);
    let refused = bounded.call(list(), deadline).await.unwrap_err();
    assert!(refused.to_string().contains("4096"), "{refused}");
    assert!(
        metrics
            .encode()
            .contains(r#"wasmctrl_plugin_limit_exceeded_total{plugin="guest",limit="listBytes""#),
        "counted"
    );
}
