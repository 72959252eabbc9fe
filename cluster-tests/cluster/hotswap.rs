//! Hot swap: a new component file replaces a running reconciler without a
//! restart and without losing work; a bad one changes nothing; plugins come
//! and go with the config file.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use wasmctrl_cluster_tests::{Cluster, configmap};
use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::{
    admin::{http, http_get, metric_line},
    eventually,
    host::RunningHost,
};

const STAMP_LABEL: &str = "wasmctrl.dev/stamp";

fn stamp_config() -> &'static str {
    r#"
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
shutdownTimeout: 10s
plugins:
  - name: stamp
    path: stamp.wasm
    maxConcurrentReconciles: 2
    reconcileTimeout: 5s
    namespaces: [default]
    permissions:
      - { group: "", resources: [configmaps], verbs: [get, list, watch, patch] }
"#
}

/// Replaces `to` with `from` atomically (write aside, then rename), as a
/// deploy tool would.
fn install(from: &str, to: &Path) {
    let tmp = to.with_extension("partial");
    std::fs::copy(from, &tmp).unwrap();
    std::fs::rename(&tmp, to).unwrap();
}

async fn start(cluster: &Cluster, text: &str, watch_config: bool) -> RunningHost {
    if watch_config {
        cluster.host_watching_config(text).await
    } else {
        cluster.host(text).await
    }
}

/// Names of the ConfigMaps `cm-*` not stamped `stamp`.
async fn unstamped(api: &Api<ConfigMap>, stamp: &str) -> Vec<String> {
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|c| c.metadata.name.as_deref().unwrap_or("").starts_with("cm-"))
        .filter(|c| {
            c.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(STAMP_LABEL))
                .map(String::as_str)
                != Some(stamp)
        })
        .map(|c| c.metadata.name.unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_v2_over_v1_converges_every_object_to_v2_while_objects_change() {
    v2_over_v1(stamp_config()).await;
}

/// With warm instances, a swap must drop them all: a v1 instance left in the
/// pool would stamp v1 again and the objects would never all show v2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_empties_the_pool_of_warm_instances() {
    let config = stamp_config().replace(
        "    maxConcurrentReconciles: 2\n",
        "    maxConcurrentReconciles: 2\n    instanceMode: reuse\n",
    );
    assert!(config.contains("instanceMode: reuse"));
    v2_over_v1(&config).await;
}

async fn v2_over_v1(config: &str) {
    let cluster = Cluster::start().await;
    let file = cluster.dir.path().join("stamp.wasm");
    install(artifacts::STAMP_V1, &file);
    let host = start(&cluster, config, false).await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    for i in 0..30 {
        api.create(&PostParams::default(), &configmap(&format!("cm-{i}")))
            .await
            .unwrap();
    }
    eventually(
        "every ConfigMap stamped v1",
        Duration::from_secs(60),
        || async { unstamped(&api, "v1").await.is_empty().then_some(()) },
    )
    .await;

    // Objects keep changing while the new version is written.
    let writer = {
        let api = api.clone();
        tokio::spawn(async move {
            for round in 0..20 {
                for i in 0..30 {
                    let patch = serde_json::json!({"data": {"round": round.to_string()}});
                    let _ = api
                        .patch(
                            &format!("cm-{i}"),
                            &PatchParams::default(),
                            &Patch::Merge(&patch),
                        )
                        .await;
                }
            }
        })
    };
    install(artifacts::STAMP_V2, &file);
    eventually("the new version live", Duration::from_secs(30), || async {
        host.plugin("stamp")
            .await
            .filter(|p| p["version"] == "2.0.0" && p["generation"] == 2)
    })
    .await;
    writer.await.unwrap();
    // Every object's last change was reconciled, by the new version.
    eventually(
        "every ConfigMap stamped v2",
        Duration::from_secs(60),
        || async { unstamped(&api, "v2").await.is_empty().then_some(()) },
    )
    .await;
    let (_, metrics) = http_get(host.admin, "/metrics").await;
    assert!(
        metrics.contains(r#"wasmctrl_plugin_reloads_total{plugin="stamp",result="success"} 2"#),
        "{metrics}"
    );
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_swap_keeps_the_old_version_serving_and_reports_why() {
    let cluster = Cluster::start().await;
    let file = cluster.dir.path().join("stamp.wasm");
    install(artifacts::STAMP_V1, &file);
    let host = start(&cluster, stamp_config(), false).await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");

    let cases: [(&str, &[u8]); 3] = [
        ("not a WebAssembly file", b"garbage, half a deploy"),
        (
            "wrong world",
            &std::fs::read(artifacts::WRONG_WORLD).unwrap(),
        ),
        (
            "missing export `metadata`",
            &std::fs::read(artifacts::MISSING_EXPORT).unwrap(),
        ),
    ];
    for (n, (reason, bytes)) in cases.iter().enumerate() {
        let tmp = file.with_extension("partial");
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, &file).unwrap();
        let status = eventually(
            "the failed swap reported",
            Duration::from_secs(30),
            || async {
                host.plugin("stamp")
                    .await
                    .filter(|p| p["last_error"].as_str().is_some_and(|e| e.contains(reason)))
            },
        )
        .await;
        assert_eq!(status["version"], "1.0.0", "{status}");
        assert_eq!(status["generation"], 1, "{status}");
        // The admin endpoint reports the same reason.
        let (code, body) = http(host.admin, "POST", "/plugins/stamp/reload", &[]).await;
        assert_eq!(code, 422, "{body}");
        assert!(body.contains(reason), "{body}");
        // v1 still serves.
        let name = format!("cm-after-{n}");
        api.create(&PostParams::default(), &configmap(&name))
            .await
            .unwrap();
        eventually("v1 still reconciling", Duration::from_secs(30), || async {
            let c = api.get(&name).await.ok()?;
            (c.metadata.labels?.get(STAMP_LABEL)? == "v1").then_some(())
        })
        .await;
    }
    let (_, metrics) = http_get(host.admin, "/metrics").await;
    let errors = metrics
        .lines()
        .find(|l| l.starts_with(r#"wasmctrl_plugin_reloads_total{plugin="stamp",result="error"}"#))
        .unwrap_or_default();
    let count: u64 = errors
        .rsplit(' ')
        .next()
        .unwrap_or("0")
        .parse()
        .unwrap_or(0);
    assert!(
        count >= 6,
        "three file changes and three reload requests failed: {errors}"
    );

    // A good version after bad ones swaps normally.
    let (code, _) = http(host.admin, "POST", "/plugins/nope/reload", &[]).await;
    assert_eq!(code, 404);
    install(artifacts::STAMP_V2, &file);
    eventually("v2 live", Duration::from_secs(30), || async {
        host.plugin("stamp")
            .await
            .filter(|p| p["version"] == "2.0.0" && p["last_error"].is_null())
    })
    .await;
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adding_and_removing_a_plugin_in_the_config_starts_and_drains_it() {
    let cluster = Cluster::start().await;
    install(artifacts::STAMP_V1, &cluster.dir.path().join("stamp.wasm"));
    let host = start(&cluster, stamp_config(), true).await;

    let with_misbehave = format!(
        "{}  - {{ name: misbehave, path: {}, namespaces: [default], permissions: [{{ resources: [configmaps], verbs: [list, watch] }}] }}\n",
        stamp_config(),
        artifacts::MISBEHAVE
    );
    cluster.file("wasmctrl.yaml", &with_misbehave);
    eventually("misbehave started", Duration::from_secs(30), || async {
        host.plugin("misbehave")
            .await
            .filter(|p| p["state"] == "running")
    })
    .await;

    // Changed settings rebuild the controller on the same queue.
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    let changed =
        with_misbehave.replace("maxConcurrentReconciles: 2", "maxConcurrentReconciles: 3");
    cluster.file("wasmctrl.yaml", &changed);
    eventually(
        "stamp rebuilt with the new settings",
        Duration::from_secs(30),
        || async {
            host.plugin("stamp")
                .await
                .filter(|p| p["generation"] == 2 && p["state"] == "running")
        },
    )
    .await;
    let (_, metrics) = http_get(host.admin, "/metrics").await;
    assert!(
        metrics.contains(r#"controller_runtime_max_concurrent_reconciles{controller="stamp"} 3"#),
        "{metrics}"
    );
    api.create(&PostParams::default(), &configmap("cm-after-change"))
        .await
        .unwrap();
    eventually(
        "the rebuilt controller reconciling",
        Duration::from_secs(30),
        || async {
            let c = api.get("cm-after-change").await.ok()?;
            (c.metadata.labels?.get(STAMP_LABEL)? == "v1").then_some(())
        },
    )
    .await;
    let with_misbehave = changed;

    // A config that does not validate changes nothing.
    cluster.file(
        "wasmctrl.yaml",
        &with_misbehave.replace("reconcileTimeout: 5s", "reconcileTimeout: 5x"),
    );
    eventually(
        "the invalid config refused",
        Duration::from_secs(30),
        || {
            metric_line(
                host.admin,
                r#"wasmctrl_config_reloads_total{result="error"} 1"#,
            )
        },
    )
    .await;
    assert!(host.plugin("stamp").await.is_some());

    let only_misbehave = with_misbehave.replace(
        "  - name: stamp\n    path: stamp.wasm\n    maxConcurrentReconciles: 3\n    reconcileTimeout: 5s\n    namespaces: [default]\n    permissions:\n      - { group: \"\", resources: [configmaps], verbs: [get, list, watch, patch] }\n",
        "",
    );
    assert_ne!(only_misbehave, with_misbehave);
    cluster.file("wasmctrl.yaml", &only_misbehave);
    eventually(
        "stamp drained and removed",
        Duration::from_secs(30),
        || async { host.plugin("stamp").await.is_none().then_some(()) },
    )
    .await;
    assert!(host.plugin("misbehave").await.is_some());
    host.stop().await.unwrap();
}

/// `idleUnload`: an idle plugin's compiled code is dropped while its
/// informers and queue stay; its next key loads it again from the on-disk
/// compiled cache and is reconciled; a plugin without it stays resident.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_unloaded_plugin_reconciles_its_next_key() {
    let cluster = Cluster::start().await;
    install(artifacts::STAMP_V1, &cluster.dir.path().join("stamp.wasm"));
    let config = stamp_config()
        .replace(
            "shutdownTimeout: 10s\n",
            "shutdownTimeout: 10s\nruntime: { cacheDir: compiled }\n",
        )
        .replace(
            "    reconcileTimeout: 5s\n",
            "    reconcileTimeout: 5s\n    idleUnload: 300ms\n",
        );
    let host = start(&cluster, &config, false).await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    let stamped = |name: &'static str| {
        let api = api.clone();
        async move {
            let c = api.get(name).await.ok()?;
            (c.metadata.labels?.get(STAMP_LABEL)? == "v1").then_some(())
        }
    };
    for round in 1..=2u64 {
        // Unloaded after 300 ms without a key; the queue and informers stay.
        let status = eventually(
            "the idle plugin unloaded",
            Duration::from_secs(30),
            || async {
                host.plugin("stamp")
                    .await
                    .filter(|p| p["resident"] == false && p["unloads"] == round)
            },
        )
        .await;
        assert_eq!(status["state"], "running", "{status}");
        let name: &'static str = if round == 1 { "cm-wake-1" } else { "cm-wake-2" };
        api.create(&PostParams::default(), &configmap(name))
            .await
            .unwrap();
        eventually(
            "the woken plugin reconciled",
            Duration::from_secs(30),
            || stamped(name),
        )
        .await;
    }
    // The artifact it came back from is the compiled cache's.
    let artifacts = std::fs::read_dir(cluster.dir.path().join("compiled"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        .count();
    assert_eq!(artifacts, 1);
    host.stop().await.unwrap();

    // Without idleUnload the plugin stays resident.
    let host = start(&cluster, stamp_config(), false).await;
    api.create(&PostParams::default(), &configmap("cm-resident"))
        .await
        .unwrap();
    eventually("reconciled", Duration::from_secs(30), || {
        stamped("cm-resident")
    })
    .await;
    let status = host.plugin("stamp").await.unwrap();
    assert_eq!(status["resident"], true, "{status}");
    assert_eq!(status["unloads"], 0, "{status}");
    host.stop().await.unwrap();
}

/// A settings change that adds a namespace rebuilds the plugin on its
/// queue with a new informer for it: the objects already there are
/// reconciled, though a first listing is not announced as events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_added_by_a_settings_change_has_its_objects_reconciled() {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::ObjectMeta;

    let cluster = Cluster::start().await;
    install(artifacts::STAMP_V1, &cluster.dir.path().join("stamp.wasm"));
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    let extra = Namespace {
        metadata: ObjectMeta {
            name: Some("extra".into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    namespaces
        .create(&PostParams::default(), &extra)
        .await
        .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "extra");
    api.create(&PostParams::default(), &configmap("cm-extra"))
        .await
        .unwrap();
    let host = start(&cluster, stamp_config(), true).await;
    assert_eq!(
        unstamped(&api, "v1").await,
        ["cm-extra"],
        "outside the plugin's namespaces"
    );
    cluster.file(
        "wasmctrl.yaml",
        &stamp_config().replace("namespaces: [default]", "namespaces: [default, extra]"),
    );
    eventually(
        "the object of the added namespace stamped",
        Duration::from_secs(30),
        || async { unstamped(&api, "v1").await.is_empty().then_some(()) },
    )
    .await;
    host.stop().await.unwrap();
}
