//! Record and replay: the webapp operator recorded through its acceptance
//! in a cluster, then replayed with no cluster against the same build (no
//! divergence) and against a build that labels Deployments differently
//! (the divergent apply is reported, call by call).

use std::sync::Arc;
use std::time::Duration;

use wasmctrl::config::RecordConfig;
use wasmctrl::control::metrics::Metrics;
use wasmctrl::ops::transcript::Transcript;
use wasmctrl::ops::transcript::replay::{DivergenceKind, replay};
use wasmctrl::sandbox::hostapi::KubeRequest;
use wasmctrl::sandbox::{Runtime, RuntimeConfig};
use wasmctrl_cluster_tests::{Cluster, quickstart_config};
use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::{admin, eventually, host::RunningHost};

use crate::webapp::converges_heals_and_cleans_up;

fn applies_a_deployment(t: &Transcript) -> bool {
    t.calls
        .iter()
        .any(|c| matches!(&c.request, KubeRequest::Patch { kind, .. } if kind.kind == "Deployment"))
}

/// The quick start's webapp operator on a new cluster, recording the
/// reconciles of `keys` into the returned directory.
async fn recording_webapp(keys: &str) -> (Cluster, RunningHost, tempfile::TempDir) {
    let cluster = Cluster::start().await;
    cluster.apply_webapp_crd();
    let dir = tempfile::tempdir().unwrap();
    let mut config = quickstart_config(artifacts::WEBAPP);
    config.plugins[0].record = Some(RecordConfig {
        dir: dir.path().to_path_buf(),
        keys: keys.into(),
        max: 1000,
        max_bytes: 16 << 20,
        files: 4,
    });
    let host = RunningHost::start(config, cluster.client.clone(), None).await;
    (cluster, host, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recorded_webapp_replays_without_divergence_and_a_relabelled_build_is_caught() {
    let (cluster, host, dir) = recording_webapp("all").await;
    converges_heals_and_cleans_up(&cluster, host).await;

    // The writer thread finishes the queue after the host stopped.
    let file = dir.path().join("webapp.jsonl");
    let transcripts = eventually(
        "transcripts that apply a Deployment",
        Duration::from_secs(30),
        || {
            let file = file.clone();
            async move {
                let read = wasmctrl::ops::transcript::read_file(&file).ok()?;
                (read.iter().filter(|(_, t)| applies_a_deployment(t)).count() >= 2).then_some(read)
            }
        },
    )
    .await;
    // How plugins/webapp/src/testdata/recorded.jsonl was made (its line 3).
    if let Ok(out) = std::env::var("WASMCTRL_KEEP_TRANSCRIPT") {
        std::fs::copy(&file, out).unwrap();
    }
    let first = &transcripts[0].1;
    assert_eq!(first.plugin, "webapp");
    assert_eq!(first.key.name, "hello");
    assert!(first.digest.starts_with("sha256:"), "{first:?}");
    assert!(
        matches!(&first.calls[0].request, KubeRequest::Get { kind, .. } if kind.kind == "WebApp"),
        "the reconcile reads its WebApp first: {:?}",
        first.calls[0]
    );
    let located: Vec<(String, Transcript)> = transcripts
        .iter()
        .map(|(line, t)| (format!("webapp.jsonl:{line}"), t.clone()))
        .collect();

    let runtime = Runtime::new(RuntimeConfig::default(), Arc::new(Metrics::new())).unwrap();
    let same = replay(
        &runtime,
        artifacts::WEBAPP,
        std::fs::read(artifacts::WEBAPP).unwrap(),
        &located,
    )
    .await
    .unwrap();
    assert_eq!(same.reconciles.len(), located.len());
    assert_eq!(same.diverged(), 0, "the same build diverged:\n{same}");

    let relabelled = replay(
        &runtime,
        artifacts::WEBAPP_RELABEL,
        std::fs::read(artifacts::WEBAPP_RELABEL).unwrap(),
        &located,
    )
    .await
    .unwrap();
    let report = relabelled.to_string();
    for (r, (_, t)) in relabelled.reconciles.iter().zip(&located) {
        if !applies_a_deployment(t) {
            assert!(r.divergences.is_empty(), "{report}");
            continue;
        }
        assert_eq!(r.divergences.len(), 1, "{report}");
        let d = &r.divergences[0];
        assert_eq!(d.kind, DivergenceKind::DifferentArguments, "{report}");
        assert!(
            d.expected
                .as_deref()
                .unwrap()
                .starts_with("patch (apply) apps/v1 Deployment default/hello"),
            "{report}"
        );
        assert_eq!(
            d.differences,
            vec![r#"/patch/body/metadata/labels/app.kubernetes.io~1version: ∅ → "relabelled""#],
            "{report}"
        );
    }
    assert!(relabelled.diverged() >= 2, "{report}");
    assert!(
        report.contains("different arguments: patch (apply) apps/v1 Deployment default/hello"),
        "{report}"
    );
}

/// `record.keys` as a label selector: only the keys whose object matches
/// are recorded, and what is written is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_keys_the_selector_picks_are_recorded() {
    let (cluster, host, dir) = recording_webapp("record=yes").await;
    let manifest = |name: &str, labels: &str| {
        format!(
            "apiVersion: demo.wasmctrl.dev/v1alpha1\nkind: WebApp\nmetadata:\n  name: {name}\n  namespace: default\n  labels: {labels}\nspec:\n  image: nginx:1.27\n  replicas: 1\n  port: 80\n"
        )
    };
    let picked = cluster.file("picked.yaml", &manifest("picked", "{record: \"yes\"}"));
    let other = cluster.file("other.yaml", &manifest("other", "{record: \"no\"}"));
    cluster.kubectl(&["apply", "-f", other.to_str().unwrap()]);
    cluster.kubectl(&["apply", "-f", picked.to_str().unwrap()]);
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(cluster.client.clone(), "default");
    for name in ["picked", "other"] {
        eventually(name, Duration::from_secs(60), || async {
            deployments.get(name).await.ok()
        })
        .await;
    }
    let written = admin::metric_reaches(
        "a transcript counted",
        Duration::from_secs(30),
        host.admin,
        r#"wasmctrl_record_transcripts_total{plugin="webapp"}"#,
        1.0,
    )
    .await;
    host.stop().await.unwrap();
    let file = dir.path().join("webapp.jsonl");
    let transcripts = wasmctrl::ops::transcript::read_file(&file).unwrap();
    assert!(
        transcripts.len() as f64 >= written,
        "{} < {written}",
        transcripts.len()
    );
    assert!(
        transcripts.iter().all(|(_, t)| t.key.name == "picked"),
        "{:?}",
        transcripts
            .iter()
            .map(|(_, t)| &t.key.name)
            .collect::<Vec<_>>()
    );
}
