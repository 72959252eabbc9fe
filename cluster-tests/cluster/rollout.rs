//! Rolling out a new version safely: `skipUnchanged` (resyncs of unchanged
//! objects run no reconcile), shadow runs and canaries with rollback.
//!
//! The `mirror` plugin is the reconciler throughout: it copies a
//! ConfigMap's `data.value` (or, with `data.ref`, the value of the
//! ConfigMap it names) into a label; its settings select the behaviours a
//! candidate version gets (delete every Deployment, fail half the keys,
//! stamp a version label).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use wasmctrl_cluster_tests::Cluster;
use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::{
    admin::{self, metric_value},
    eventually,
    host::RunningHost,
};

const CONVERGE: Duration = Duration::from_secs(180);
const LABEL: &str = "wasmctrl.dev/mirror";

fn configmaps(cluster: &Cluster) -> Api<ConfigMap> {
    Api::namespaced(cluster.client.clone(), "default")
}

fn configmap(name: &str, data: serde_json::Value, label: Option<&str>) -> ConfigMap {
    let labels = match label {
        Some(v) => serde_json::json!({ LABEL: v }),
        None => serde_json::json!({}),
    };
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": labels},
        "data": data,
    }))
    .unwrap()
}

/// Creates `objects`, 32 requests in flight at once.
async fn create_all(api: &Api<ConfigMap>, objects: Vec<ConfigMap>) {
    let mut objects = objects.into_iter();
    loop {
        let mut batch = tokio::task::JoinSet::new();
        for o in objects.by_ref().take(32) {
            let api = api.clone();
            batch.spawn(async move { api.create(&PostParams::default(), &o).await });
        }
        if batch.is_empty() {
            break;
        }
        while let Some(r) = batch.join_next().await {
            r.unwrap().unwrap();
        }
    }
}

/// The label of every object named in `names`, once each equals `value`.
async fn labelled(api: &Api<ConfigMap>, names: &[String], value: &str, what: &str) {
    eventually(what, CONVERGE, || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        let done = list
            .items
            .iter()
            .filter(|c| names.contains(c.metadata.name.as_ref().unwrap()))
            .filter(|c| {
                c.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL))
                    .map(String::as_str)
                    == Some(value)
            })
            .count();
        (done == names.len()).then_some(())
    })
    .await;
}

/// Every reconcile of `plugin` so far, whatever its result.
async fn reconciles(host: &RunningHost, plugin: &str) -> f64 {
    let (_, body) = admin::http_get(host.admin, "/metrics").await;
    let prefix = format!("controller_runtime_reconcile_total{{controller=\"{plugin}\"");
    body.lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

async fn skipped(host: &RunningHost, plugin: &str) -> f64 {
    metric_value(
        host.admin,
        &format!("wasmctrl_reconcile_skipped_total{{plugin=\"{plugin}\"}}"),
    )
    .await
    .unwrap_or(0.0)
}

/// Waits until `keys` more keys were skipped than `from`.
async fn skips_reach(host: &RunningHost, from: f64, keys: usize, what: &str) {
    eventually(what, CONVERGE, || async {
        (skipped(host, "mirror").await >= from + keys as f64).then_some(())
    })
    .await;
}

/// Objects of the skip test; `AFFECTED` of them read `shared-a`, the rest
/// `shared-b`.
const OBJECTS: usize = 1000;
const AFFECTED: usize = 10;

fn reader(i: usize) -> String {
    format!("reader-{i}")
}

fn reads_shared_a(i: usize) -> bool {
    i.is_multiple_of(OBJECTS / AFFECTED)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_unchanged_resyncs_run_no_reconciles_and_a_read_change_reruns_its_keys() {
    let cluster = Cluster::start().await;
    let api = configmaps(&cluster);
    // The shared objects carry their mirror label already: reconciling
    // them writes nothing, so only the readers' versions move.
    let mut objects = vec![
        configmap("shared-a", serde_json::json!({"value": "1"}), Some("1")),
        configmap("shared-b", serde_json::json!({"value": "1"}), Some("1")),
    ];
    objects.extend((0..OBJECTS).map(|i| {
        let shared = if reads_shared_a(i) {
            "shared-a"
        } else {
            "shared-b"
        };
        configmap(&reader(i), serde_json::json!({"ref": shared}), None)
    }));
    create_all(&api, objects).await;
    let host = cluster
        .host(&format!(
            r#"
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
shutdownTimeout: 5s
plugins:
  - name: mirror
    path: {}
    maxConcurrentReconciles: 4
    resyncPeriod: 1s
    skipUnchanged: true
    namespaces: [default]
    limits: {{ apiQps: 5000, apiBurst: 5000 }}
    permissions:
      - {{ group: "", resources: [configmaps], verbs: [get, list, watch, patch] }}
"#,
            artifacts::MIRROR
        ))
        .await;
    let readers: Vec<String> = (0..OBJECTS).map(reader).collect();
    labelled(&api, &readers, "1", "every reader mirrors its shared value").await;

    // Settled: one whole resync of every key went by without a reconcile.
    let keys = OBJECTS + 2;
    let settled = eventually("a resync without reconciles", CONVERGE, || async {
        let before = reconciles(&host, "mirror").await;
        let from = skipped(&host, "mirror").await;
        skips_reach(&host, from, keys, "a resync's skips").await;
        (reconciles(&host, "mirror").await == before).then_some(before)
    })
    .await;
    let from = skipped(&host, "mirror").await;
    skips_reach(&host, from, 3 * keys, "three resyncs' skips").await;
    assert_eq!(
        reconciles(&host, "mirror").await,
        settled,
        "resyncs of {keys} unchanged objects ran reconciles"
    );

    // A change to what some reconciles read re-runs exactly those keys
    // (and the changed object's own key).
    api.patch(
        "shared-a",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({
            "data": {"value": "2"},
            "metadata": {"labels": {LABEL: "2"}},
        })),
    )
    .await
    .unwrap();
    let affected: Vec<String> = (0..OBJECTS)
        .filter(|i| reads_shared_a(*i))
        .map(reader)
        .collect();
    assert_eq!(affected.len(), AFFECTED);
    labelled(
        &api,
        &affected,
        "2",
        "the readers of shared-a mirror its new value",
    )
    .await;
    let from = skipped(&host, "mirror").await;
    skips_reach(&host, from, 2 * keys, "two more resyncs' skips").await;
    assert_eq!(
        reconciles(&host, "mirror").await - settled,
        (AFFECTED + 1) as f64,
        "exactly the readers of shared-a and shared-a itself ran again"
    );
    let unaffected: Vec<String> = (0..OBJECTS)
        .filter(|i| !reads_shared_a(*i))
        .map(reader)
        .collect();
    labelled(
        &api,
        &unaffected,
        "1",
        "the readers of shared-b keep its value",
    )
    .await;
    host.stop().await.unwrap();
}

fn mirror_with_candidate(candidate: &str, permissions: &str) -> String {
    format!(
        r#"
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
shutdownTimeout: 5s
plugins:
  - name: mirror
    path: {mirror}
    maxConcurrentReconciles: 2
    namespaces: [default]
    limits: {{ apiQps: 5000, apiBurst: 5000 }}
    permissions:
      - {{ group: "", resources: [configmaps], verbs: [get, list, watch, patch] }}
{permissions}
    candidate:
      path: {mirror}
{candidate}
"#,
        mirror = artifacts::MIRROR
    )
}

async fn shadow_report(host: &RunningHost) -> serde_json::Value {
    let (status, body) = admin::http_get(host.admin, "/plugins/mirror/shadow").await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn values(n: usize, prefix: &str) -> Vec<ConfigMap> {
    (0..n)
        .map(|i| {
            configmap(
                &format!("{prefix}-{i}"),
                serde_json::json!({"value": format!("v{i}")}),
                None,
            )
        })
        .collect()
}

/// Every object of `names` mirrors its own `data.value`.
async fn mirrored(api: &Api<ConfigMap>, names: &[String], what: &str) {
    eventually(what, CONVERGE, || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        let done = list
            .items
            .iter()
            .filter(|c| names.contains(c.metadata.name.as_ref().unwrap()))
            .filter(|c| {
                let value = c.data.as_ref().and_then(|d| d.get("value"));
                value.is_some() && c.metadata.labels.as_ref().and_then(|l| l.get(LABEL)) == value
            })
            .count();
        (done == names.len()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_candidate_that_deletes_every_deployment_writes_nothing() {
    let cluster = Cluster::start().await;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(cluster.client.clone(), "default");
    let names: Vec<String> = (0..3).map(|i| format!("web-{i}")).collect();
    for name in &names {
        let d = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "web", "image": "nginx"}]},
                },
            },
        }))
        .unwrap();
        deployments
            .create(&PostParams::default(), &d)
            .await
            .unwrap();
    }
    let api = configmaps(&cluster);
    const KEYS: usize = 10;
    create_all(&api, values(KEYS, "cm")).await;
    cluster.server().audit().clear();
    let host = cluster
        .host(&mirror_with_candidate(
            "      mode: shadow\n      maxConcurrentShadows: 2\n      settings: { deleteDeployments: true }",
            "      - { group: apps, resources: [deployments], verbs: [list, delete] }",
        ))
        .await;
    let keys: Vec<String> = (0..KEYS).map(|i| format!("cm-{i}")).collect();
    mirrored(&api, &keys, "the stable version mirrors every object").await;
    // Shadow runs that found every permit busy are skipped, never waited
    // for: every key got one or was counted as skipped.
    let report = eventually("a shadow run or skip of every key", CONVERGE, || async {
        let r = shadow_report(&host).await;
        let (runs, skipped) = (r["runs"].as_u64()?, r["skipped"].as_u64()?);
        (runs >= 1 && runs + skipped >= KEYS as u64).then_some(r)
    })
    .await;

    // Nothing the candidate wrote reached the API server.
    let left = deployments.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        left.items.len(),
        names.len(),
        "every Deployment is still there"
    );
    let deletes: Vec<_> = cluster
        .server()
        .audit()
        .records()
        .into_iter()
        .filter(|r| r.verb == "delete")
        .collect();
    assert!(deletes.is_empty(), "the shadow sent deletes: {deletes:?}");

    // Its divergences show the deletes it would have made, beside the
    // stable version's writes.
    assert_eq!(report["divergent"], report["runs"], "{report:#}");
    let divergences = report["divergences"].as_array().unwrap();
    assert!(!divergences.is_empty());
    for d in divergences {
        let would: Vec<&str> = d["diff"]["onlyCandidate"]
            .as_array()
            .unwrap()
            .iter()
            .inspect(|w| {
                assert_eq!(w["verb"], "delete", "{d:#}");
                assert_eq!(w["kind"], "apps/Deployment", "{d:#}");
            })
            .map(|w| w["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            would,
            names.iter().map(String::as_str).collect::<Vec<_>>(),
            "{d:#}"
        );
        assert_eq!(
            d["candidate"]["writes"], d["diff"]["onlyCandidate"],
            "{d:#}"
        );
        assert!(
            d["kinds"]
                .as_array()
                .unwrap()
                .contains(&"apps/Deployment".into())
        );
    }
    let first_of = |key: &str| {
        divergences
            .iter()
            .find(|d| d["key"] == format!("default/{key}"))
    };
    if let Some(d) = first_of("cm-0") {
        // The stable version's label patch, if this was its first reconcile.
        for w in d["stable"]["writes"].as_array().unwrap() {
            assert_eq!(w["verb"], "patch", "{d:#}");
            assert_eq!(w["kind"], "ConfigMap", "{d:#}");
        }
    }
    let counted = metric_value(
        host.admin,
        "wasmctrl_shadow_divergences_total{plugin=\"mirror\",kind=\"apps/Deployment\"}",
    )
    .await
    .unwrap();
    assert!(
        counted >= report["runs"].as_u64().unwrap() as f64,
        "every run diverged on Deployments: {counted}"
    );
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_candidate_identical_to_stable_reports_no_divergence() {
    const KEYS: usize = 1000;
    let cluster = Cluster::start().await;
    let api = configmaps(&cluster);
    create_all(&api, values(KEYS, "same")).await;
    let host = cluster
        .host(&mirror_with_candidate(
            "      mode: shadow\n      maxConcurrentShadows: 8",
            "",
        ))
        .await;
    let keys: Vec<String> = (0..KEYS).map(|i| format!("same-{i}")).collect();
    mirrored(&api, &keys, "the stable version mirrors every object").await;
    let report = eventually("a shadow run per key", CONVERGE, || async {
        let r = shadow_report(&host).await;
        (r["runs"].as_u64()? >= KEYS as u64).then_some(r)
    })
    .await;
    assert_eq!(report["divergent"], 0, "{report:#}");
    assert_eq!(report["divergences"], serde_json::json!([]));
    let (_, metrics) = admin::http_get(host.admin, "/metrics").await;
    assert!(
        !metrics.contains("wasmctrl_shadow_divergences_total{"),
        "no divergence counted"
    );
    // Shadow runs are the candidate's calls, not the controller's
    // reconciles: they show in the plugin's call metrics only.
    assert!(
        series_sum(
            &metrics,
            "wasmctrl_plugin_instantiate_seconds_count",
            &[r#"plugin="mirror""#, r#"version="candidate""#]
        )
        .is_some_and(|runs| runs >= KEYS as f64),
        "{metrics}"
    );
    assert_eq!(
        series_sum(
            &metrics,
            "controller_runtime_reconcile_total",
            &[r#"version="candidate""#]
        ),
        None
    );
    host.stop().await.unwrap();
}

fn canary_config(dir: &std::path::Path, candidate: &str) -> String {
    std::fs::write(dir.join("admin-token"), "s3cret-admin-token\n").unwrap();
    format!(
        r#"
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
shutdownTimeout: 5s
admin: {{ bind: "127.0.0.1:0", tokenFile: admin-token }}
plugins:
  - name: mirror
    path: {mirror}
    maxConcurrentReconciles: 2
    namespaces: [default]
    resyncPeriod: 1s
    rateLimiter: {{ baseDelay: 20ms, maxDelay: 200ms }}
    limits: {{ apiQps: 5000, apiBurst: 5000 }}
    permissions:
      - {{ group: "", resources: [configmaps], verbs: [get, list, watch, patch] }}
    candidate:
      path: {mirror}
      mode: canary
{candidate}
"#,
        mirror = artifacts::MIRROR
    )
}

async fn candidate_status(host: &RunningHost) -> serde_json::Value {
    host.plugin("mirror").await.unwrap()["candidate"].clone()
}

fn canary_reconciles(metrics: &str, version: &str) -> f64 {
    let prefix =
        format!("wasmctrl_canary_reconciles_total{{plugin=\"mirror\",version=\"{version}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_failing_half_its_keys_is_rolled_back_and_stable_reconciles_every_key() {
    const KEYS: usize = 60;
    let cluster = Cluster::start().await;
    let api = configmaps(&cluster);
    create_all(&api, values(KEYS, "cm")).await;
    let host = cluster
        .host(&canary_config(
            cluster.dir.path(),
            "      settings: { failHalf: true }\n      canary: { percent: 50, window: 60s, minReconciles: 6, maxFailureRateIncrease: 0.2 }",
        ))
        .await;
    let candidate_keys: Vec<String> = (0..KEYS)
        .map(|i| format!("cm-{i}"))
        .filter(|n| {
            wasmctrl::ops::manager::in_canary(&wasmctrl::ObjectKey::namespaced("default", n), 50)
        })
        .collect();
    assert!(!candidate_keys.is_empty());
    let status = eventually("the canary rolled back", CONVERGE, || async {
        let c = candidate_status(&host).await;
        (c["canary"]["state"] == "rolled-back").then_some(c)
    })
    .await;
    let reason = status["canary"]["reason"].as_str().unwrap();
    assert!(reason.contains("the candidate failed"), "{reason}");
    assert!(reason.contains("maxFailureRateIncrease"), "{reason}");
    assert_eq!(
        metric_value(
            host.admin,
            "wasmctrl_canary_rollbacks_total{plugin=\"mirror\"}"
        )
        .await,
        Some(1.0)
    );
    let requeued = status["canary"]["requeued"].as_u64().unwrap() as f64;
    assert!(
        (1.0..=candidate_keys.len() as f64).contains(&requeued),
        "{requeued} of {} keys",
        candidate_keys.len()
    );
    let keys: Vec<String> = (0..KEYS).map(|i| format!("cm-{i}")).collect();
    stable_takes_every_key(&host, &api, &keys, &status).await;
    host.stop().await.unwrap();
}

/// After a rollback (`status` is the candidate's in `/plugins`): every key
/// ends reconciled by the stable version, which took at least the keys the
/// rollback requeued; the candidate's reconciles still running at the
/// rollback end (at most one per worker), and then it reconciles nothing
/// more, not even in a whole resync.
async fn stable_takes_every_key(
    host: &RunningHost,
    api: &Api<ConfigMap>,
    keys: &[String],
    status: &serde_json::Value,
) {
    const WORKERS: f64 = 2.0; // canary_config's maxConcurrentReconciles
    let requeued = status["canary"]["requeued"].as_u64().unwrap() as f64;
    let (_, metrics) = admin::http_get(host.admin, "/metrics").await;
    let stable_before = canary_reconciles(&metrics, "stable");
    let candidate_at_rollback = canary_reconciles(&metrics, "candidate");
    mirrored(api, keys, "every key mirrored after the rollback").await;
    eventually(
        "the stable version took the candidate's keys",
        CONVERGE,
        || async {
            let (_, metrics) = admin::http_get(host.admin, "/metrics").await;
            (canary_reconciles(&metrics, "stable") >= stable_before + requeued).then_some(())
        },
    )
    .await;
    let resync = || async {
        let from = canary_reconciles_now(host, "stable").await;
        eventually("a resync after the rollback", CONVERGE, || async {
            (canary_reconciles_now(host, "stable").await >= from + keys.len() as f64).then_some(())
        })
        .await;
    };
    let settled = eventually(
        "the candidate's last reconciles ended",
        CONVERGE,
        || async {
            let before = canary_reconciles_now(host, "candidate").await;
            resync().await;
            (canary_reconciles_now(host, "candidate").await == before).then_some(before)
        },
    )
    .await;
    assert!(
        settled - candidate_at_rollback <= WORKERS,
        "the candidate reconciled {} keys after the rollback",
        settled - candidate_at_rollback
    );
    resync().await;
    assert_eq!(
        canary_reconciles_now(host, "candidate").await,
        settled,
        "the rolled-back candidate reconciled again"
    );
    let plugin = host.plugin("mirror").await.unwrap();
    assert_ne!(plugin["digest"], serde_json::Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_slower_at_p99_is_rolled_back_and_stable_reconciles_every_key() {
    const KEYS: usize = 40;
    let cluster = Cluster::start().await;
    let api = configmaps(&cluster);
    create_all(&api, values(KEYS, "cm")).await;
    // The candidate is the same code sleeping 300 ms per reconcile: it
    // never fails, so only its p99 (over 3x stable's, a few ms) can roll
    // it back.
    let host = cluster
        .host(&canary_config(
            cluster.dir.path(),
            "      settings: { delayMs: 300 }\n      canary: { percent: 50, window: 60s, minReconciles: 6, maxP99Ratio: 3 }",
        ))
        .await;
    let status = eventually("the canary rolled back", CONVERGE, || async {
        let c = candidate_status(&host).await;
        (c["canary"]["state"] == "rolled-back").then_some(c)
    })
    .await;
    let reason = status["canary"]["reason"].as_str().unwrap();
    assert!(reason.contains("p99 reconcile time"), "{reason}");
    assert!(reason.contains("maxP99Ratio"), "{reason}");
    assert_eq!(
        status["canary"]["candidate"]["failure_rate"], 0.0,
        "{status:#}"
    );
    let candidate_p99 = status["canary"]["candidate"]["p99_ms"].as_f64().unwrap();
    assert!(candidate_p99 >= 300.0, "{status:#}");
    assert_eq!(
        metric_value(
            host.admin,
            "wasmctrl_canary_rollbacks_total{plugin=\"mirror\"}"
        )
        .await,
        Some(1.0)
    );
    let keys: Vec<String> = (0..KEYS).map(|i| format!("cm-{i}")).collect();
    stable_takes_every_key(&host, &api, &keys, &status).await;
    host.stop().await.unwrap();
}

/// The `value` of each series of `family` whose labels include `labels`.
fn series_sum(metrics: &str, family: &str, labels: &[&str]) -> Option<f64> {
    let found: Vec<f64> = metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .collect();
    (!found.is_empty()).then(|| found.iter().sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reconcile_metric_carries_the_version_while_a_canary_runs() {
    const KEYS: usize = 20;
    let cluster = Cluster::start().await;
    let api = configmaps(&cluster);
    create_all(&api, values(KEYS, "cm")).await;
    let host = cluster
        .host(&canary_config(
            cluster.dir.path(),
            "      settings: { version: v2 }\n      canary: { percent: 50, window: 1h }",
        ))
        .await;
    let keys: Vec<String> = (0..KEYS).map(|i| format!("cm-{i}")).collect();
    let candidate_keys: Vec<String> = keys
        .iter()
        .filter(|n| {
            wasmctrl::ops::manager::in_canary(&wasmctrl::ObjectKey::namespaced("default", *n), 50)
        })
        .cloned()
        .collect();
    assert!(!candidate_keys.is_empty() && candidate_keys.len() < KEYS);
    mirrored(&api, &keys, "every key mirrored during the canary").await;
    versioned(
        &api,
        &candidate_keys,
        "v2",
        "the candidate reconciled its keys",
    )
    .await;

    let (_, metrics) = admin::http_get(host.admin, "/metrics").await;
    for version in ["stable", "candidate"] {
        let v = format!("version=\"{version}\"");
        for (family, name) in [
            (
                "controller_runtime_reconcile_total",
                r#"controller="mirror""#,
            ),
            (
                "controller_runtime_reconcile_time_seconds_count",
                r#"controller="mirror""#,
            ),
            ("wasmctrl_plugin_guest_seconds_total", r#"plugin="mirror""#),
            ("wasmctrl_plugin_host_calls_total", r#"plugin="mirror""#),
            (
                "wasmctrl_plugin_instantiate_seconds_count",
                r#"plugin="mirror""#,
            ),
        ] {
            let value = series_sum(&metrics, family, &[name, &v]);
            assert!(
                value.is_some_and(|x| x > 0.0),
                "{family} has no {version} series: {value:?}\n{metrics}"
            );
        }
    }
    // The families' label sets never change: every series has `version`,
    // the same label the canary's own families use.
    for line in metrics.lines().filter(|l| {
        l.starts_with("controller_runtime_reconcile") || l.starts_with("wasmctrl_plugin_guest")
    }) {
        assert!(line.contains("version=\""), "{line}");
    }
    host.stop().await.unwrap();
}

async fn canary_reconciles_now(host: &RunningHost, version: &str) -> f64 {
    let (_, metrics) = admin::http_get(host.admin, "/metrics").await;
    canary_reconciles(&metrics, version)
}

/// Every object of `names` carries the candidate's version label.
async fn versioned(api: &Api<ConfigMap>, names: &[String], version: &str, what: &str) {
    eventually(what, CONVERGE, || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        let done = list
            .items
            .iter()
            .filter(|c| names.contains(c.metadata.name.as_ref().unwrap()))
            .filter(|c| {
                c.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("wasmctrl.dev/mirror-version"))
                    .map(String::as_str)
                    == Some(version)
            })
            .count();
        (done == names.len()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_canary_is_promoted_after_a_clean_window() {
    const KEYS: usize = 40;
    let cluster = Cluster::start().await;
    let api = configmaps(&cluster);
    create_all(&api, values(KEYS, "cm")).await;
    let host = cluster
        .host(&canary_config(
            cluster.dir.path(),
            "      settings: { version: v2 }\n      canary: { percent: 30, window: 3s, minReconciles: 5, autoPromote: true }",
        ))
        .await;
    let stable_digest = host.plugin("mirror").await.unwrap()["digest"].clone();
    let status = eventually("the canary promoted", CONVERGE, || async {
        let c = candidate_status(&host).await;
        (c["canary"]["state"] == "promoted").then_some(c)
    })
    .await;
    assert_eq!(status["canary"]["reason"], serde_json::Value::Null);
    let keys: Vec<String> = (0..KEYS).map(|i| format!("cm-{i}")).collect();
    versioned(
        &api,
        &keys,
        "v2",
        "the promoted version reconciled every key",
    )
    .await;
    mirrored(&api, &keys, "every key still mirrors its value").await;
    assert_eq!(
        metric_value(
            host.admin,
            "wasmctrl_canary_promotions_total{plugin=\"mirror\"}"
        )
        .await,
        Some(1.0)
    );
    assert_eq!(
        host.plugin("mirror").await.unwrap()["digest"],
        stable_digest,
        "the same component, with the candidate's settings"
    );
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_is_promoted_through_the_admin_api_with_the_token() {
    const KEYS: usize = 20;
    let cluster = Cluster::start().await;
    let api = configmaps(&cluster);
    create_all(&api, values(KEYS, "cm")).await;
    let host = cluster
        .host(&canary_config(
            cluster.dir.path(),
            "      settings: { version: v2 }\n      canary: { percent: 20, window: 1h }",
        ))
        .await;
    let keys: Vec<String> = (0..KEYS).map(|i| format!("cm-{i}")).collect();
    mirrored(&api, &keys, "every key mirrored during the canary").await;
    let (status, body) = admin::http(host.admin, "POST", "/plugins/mirror/promote", &[]).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(candidate_status(&host).await["canary"]["state"], "canary");
    let (status, body) = admin::http(
        host.admin,
        "POST",
        "/plugins/mirror/promote",
        &[("Authorization", "Bearer s3cret-admin-token")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let promoted: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(promoted["candidate"]["canary"]["state"], "promoted");
    versioned(
        &api,
        &keys,
        "v2",
        "the promoted version reconciled every key",
    )
    .await;
    let (status, body) = admin::http(
        host.admin,
        "POST",
        "/plugins/mirror/promote",
        &[("Authorization", "Bearer s3cret-admin-token")],
    )
    .await;
    assert_eq!(status, 409, "a second promotion is refused: {body}");
    host.stop().await.unwrap();
}
