//! Start-up: plugins load in the background, each reconciling as soon as
//! it has loaded; readiness is reported per plugin; a plugin that does not
//! load leaves the others running and loads once its source is fixed.

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use wasmctrl::ops::manager::{Manager, ManagerOptions};
use wasmctrl_cluster_tests::{Cluster, configmap};
use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::admin::{http, http_get};
use wasmctrl_testkit::eventually;
use wasmctrl_testkit::host::{file_digest, host_config};

/// A stamp plugin `name` in namespace `namespace`, its component from
/// `source` (a YAML source line).
fn plugin(name: &str, namespace: &str, source: &str) -> String {
    format!(
        r#"
  - name: {name}
    {source}
    namespaces: [{namespace}]
    permissions:
      - {{ group: "", resources: [configmaps], verbs: [get, list, watch, patch] }}"#
    )
}

fn config(plugins: &[String]) -> String {
    format!(
        "apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\nshutdownTimeout: 5s\nplugins:{}\n",
        plugins.concat()
    )
}

/// Serves `body` over plain HTTP on loopback to every request, each answer
/// held until `release` turns true; the receiver hears of each request as
/// soon as it is read.
pub(crate) async fn held_server(
    body: Vec<u8>,
    release: watch::Receiver<bool>,
) -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (asked_tx, asked) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let (body, asked) = (body.clone(), asked_tx.clone());
            let mut release = release.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = asked.send(());
                if release.wait_for(|r| *r).await.is_err() {
                    return;
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/wasm\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes()).await;
                let _ = conn.write_all(&body).await;
            });
        }
    });
    (addr, asked)
}

/// Starts a manager with `text` and runs it; returns its admin address, a
/// future of its load failures, and what stops it.
pub(crate) async fn run_host(
    cluster: &Cluster,
    text: &str,
) -> (
    SocketAddr,
    impl std::future::Future<Output = Vec<wasmctrl::ops::manager::LoadFailure>>,
    tokio::sync::oneshot::Sender<()>,
) {
    let manager = Manager::start(
        host_config(text, cluster.dir.path()),
        cluster.client.clone(),
        ManagerOptions {
            admin_bind: Some("127.0.0.1:0".parse().unwrap()),
            ..ManagerOptions::default()
        },
    )
    .await
    .expect("the host starts");
    let admin = manager.admin_addr();
    let loaded = manager.loaded();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(manager.run(async move {
        let _ = stopped.await;
    }));
    (admin, loaded, stop)
}

/// Waits until ConfigMap `name` in `namespace` carries the stamp.
async fn stamped(cluster: &Cluster, namespace: &str, name: &str) {
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), namespace);
    eventually(
        &format!("{namespace}/{name} stamped"),
        Duration::from_secs(60),
        || async {
            let cm = api.get(name).await.ok()?;
            cm.metadata.labels?.get("wasmctrl.dev/stamp").map(|_| ())
        },
    )
    .await;
}

async fn create(cluster: &Cluster, namespace: &str, name: &str) {
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), namespace);
    api.create(&PostParams::default(), &configmap(name))
        .await
        .unwrap();
}

/// `wasmctrl_plugins{state}` as the admin server reports it.
async fn plugins_in(admin: SocketAddr, state: &str) -> u64 {
    let line = format!("wasmctrl_plugins{{state=\"{state}\"}} ");
    let (_, text) = http_get(admin, "/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(line.as_str()))
        .unwrap_or_else(|| panic!("no {line} in the metrics"))
        .trim()
        .parse()
        .unwrap()
}

/// The `/plugins` entry of `name`.
async fn status(admin: SocketAddr, name: &str) -> serde_json::Value {
    let (_, body) = http_get(admin, "/plugins").await;
    let plugins: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    plugins
        .into_iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in /plugins: {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_reconciles_while_another_still_loads_and_readiness_is_per_plugin() {
    let cluster = Cluster::start().await;
    cluster.kubectl(&["create", "namespace", "later"]);
    create(&cluster, "default", "cm-first").await;
    create(&cluster, "later", "cm-later").await;
    let (release, gate) = watch::channel(false);
    let (held, _) = held_server(std::fs::read(artifacts::STAMP_V1).unwrap(), gate).await;
    let digest = file_digest(artifacts::STAMP_V1);
    let url_source = format!(
        "source: {{ url: \"http://{held}/stamp.wasm\", sha256: \"{}\", insecure: true }}",
        digest.trim_start_matches("sha256:")
    );
    let text = config(&[
        plugin(
            "first",
            "default",
            &format!("path: {}", artifacts::STAMP_V1),
        ),
        plugin("later", "later", &url_source),
    ]);
    let (admin, loaded, stop) = run_host(&cluster, &text).await;

    // The first plugin serves while the second's component is held back.
    stamped(&cluster, "default", "cm-first").await;
    let first = status(admin, "first").await;
    assert_eq!(
        (&first["state"], &first["ready"]),
        (&"running".into(), &true.into())
    );
    let later = status(admin, "later").await;
    assert_eq!(
        (&later["state"], &later["ready"]),
        (&"loading".into(), &false.into())
    );
    assert!(
        later["source"].as_str().unwrap().contains("stamp.wasm"),
        "{later}"
    );

    let (code, body) = http_get(admin, "/readyz").await;
    assert_eq!((code, body.as_str()), (503, "later: loading\n"));
    let (code, body) = http_get(admin, "/readyz?verbose").await;
    assert_eq!(code, 503);
    assert_eq!(
        body,
        "[+]plugin/first ok\n[-]plugin/later loading\nreadyz check failed\n"
    );
    assert_eq!(
        http_get(admin, "/readyz/plugin/first").await,
        (200, "ok\n".into())
    );
    assert_eq!(
        http_get(admin, "/readyz/plugin/later").await,
        (503, "loading\n".into())
    );
    assert_eq!(plugins_in(admin, "loading").await, 1);
    assert_eq!(plugins_in(admin, "running").await, 1);
    let (code, body) = http_get(admin, "/readyz/plugin/nobody").await;
    assert_eq!((code, body.as_str()), (404, "no plugin named \"nobody\"\n"));
    // A reload of a plugin still loading is refused, not queued.
    let (code, body) = http(admin, "POST", "/plugins/later/reload", &[]).await;
    assert_eq!(code, 409, "{body}");
    assert!(body.contains("still loading"), "{body}");

    release.send_replace(true);
    assert_eq!(loaded.await, Vec::new());
    stamped(&cluster, "later", "cm-later").await;
    eventually("the host ready", Duration::from_secs(60), || async {
        (http_get(admin, "/readyz").await.0 == 200).then_some(())
    })
    .await;
    let (_, body) = http_get(admin, "/readyz?verbose").await;
    assert_eq!(
        body,
        "[+]plugin/first ok\n[+]plugin/later ok\nreadyz check passed\n"
    );
    let _ = stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_does_not_load_leaves_the_others_running_and_loads_once_fixed() {
    let cluster = Cluster::start().await;
    cluster.kubectl(&["create", "namespace", "broken"]);
    create(&cluster, "default", "cm-good").await;
    create(&cluster, "broken", "cm-broken").await;
    let broken = cluster.dir.path().join("broken.wasm");
    std::fs::write(&broken, b"not a component").unwrap();
    let text = config(&[
        plugin("good", "default", &format!("path: {}", artifacts::STAMP_V1)),
        plugin("broken", "broken", "path: broken.wasm"),
    ]);
    let (admin, loaded, stop) = run_host(&cluster, &text).await;

    let failures = loaded.await;
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].plugin, "broken");
    assert!(failures[0].error.contains("broken.wasm"), "{failures:?}");
    stamped(&cluster, "default", "cm-good").await;
    let status_of_broken = status(admin, "broken").await;
    assert_eq!(status_of_broken["state"], "failed");
    assert_eq!(status_of_broken["ready"], false);
    assert_eq!(
        status_of_broken["last_error"].as_str(),
        Some(failures[0].error.as_str())
    );
    let (code, body) = http_get(admin, "/readyz").await;
    assert_eq!(code, 503);
    assert!(
        body.starts_with("broken: not loaded: ") && body.contains("broken.wasm"),
        "{body}"
    );
    assert_eq!(
        http_get(admin, "/readyz/plugin/good").await,
        (200, "ok\n".into())
    );
    assert_eq!(plugins_in(admin, "failed").await, 1);
    assert_eq!(plugins_in(admin, "running").await, 1);
    // The status page shows it too, with why.
    let (code, page) = http_get(admin, "/status/fragment").await;
    assert_eq!(code, 200);
    assert!(
        page.contains(r#"data-plugin="broken" data-state="failed""#)
            && page.contains(r#"data-plugin="good" data-state="running""#),
        "{page}"
    );

    // An admin reload tries again, and says why it still fails.
    let (code, body) = http(admin, "POST", "/plugins/broken/reload", &[]).await;
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("broken.wasm"), "{body}");

    // Writing a good component where the source points loads it.
    let partial = broken.with_extension("partial");
    std::fs::copy(artifacts::STAMP_V1, &partial).unwrap();
    std::fs::rename(&partial, &broken).unwrap();
    stamped(&cluster, "broken", "cm-broken").await;
    eventually("the host ready", Duration::from_secs(60), || async {
        (http_get(admin, "/readyz").await.0 == 200).then_some(())
    })
    .await;
    let fixed = status(admin, "broken").await;
    assert_eq!(
        (&fixed["state"], &fixed["ready"]),
        (&"running".into(), &true.into())
    );
    assert_eq!(fixed["last_error"], serde_json::Value::Null);
    let _ = stop.send(());
}

/// The API server's count of answered requests with `verb` and `code`.
async fn requests(cluster: &Cluster, verb: &str, code: u16) -> u64 {
    let text = wasmctrl_testkit::client::metrics_text(&cluster.client).await;
    let series = format!("wasmctrl_apiserver_requests_total{{verb=\"{verb}\",code=\"{code}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// How many lists a host with `plugins` stamp plugins (all reconciling
/// ConfigMaps in `default`) makes before it is ready.
async fn lists_of_a_host_with(cluster: &Cluster, plugins: usize) -> u64 {
    let source = format!("path: {}", artifacts::STAMP_V1);
    let all: Vec<String> = (0..plugins)
        .map(|i| plugin(&format!("stamp-{i}"), "default", &source))
        .collect();
    let before = requests(cluster, "list", 200).await;
    let host = cluster.host(&config(&all)).await;
    let after = requests(cluster, "list", 200).await;
    host.stop().await.unwrap();
    after - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_reconciling_one_kind_share_one_informer() {
    let cluster = Cluster::start().await;
    create(&cluster, "default", "cm-shared").await;
    let one = lists_of_a_host_with(&cluster, 1).await;
    stamped(&cluster, "default", "cm-shared").await;
    let many = lists_of_a_host_with(&cluster, 40).await;
    assert!(one >= 1, "the host listed ConfigMaps: {one}");
    assert_eq!(many, one, "40 plugins of one kind list it as often as one");
}

/// The keys of the first listing are queued at low priority, behind any
/// change, as controller-runtime's priority queue queues its initial list.
/// A standby runs no workers (the Lease is held by another host for the
/// test's length), so its queue shows every key it queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_listing_is_queued_at_low_priority() {
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    use k8s_openapi::jiff::Timestamp;
    use wasmctrl::control::workqueue::Priority;
    use wasmctrl_testkit::host::RunningHost;

    let cluster = Cluster::start().await;
    for name in ["listed-1", "listed-2", "listed-3"] {
        create(&cluster, "default", name).await;
    }
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "default");
    let held = Lease {
        metadata: ObjectMeta {
            name: Some("first-listing".into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("another-host".into()),
            lease_duration_seconds: Some(3600),
            acquire_time: Some(MicroTime(Timestamp::now())),
            renew_time: Some(MicroTime(Timestamp::now())),
            ..LeaseSpec::default()
        }),
    };
    leases.create(&PostParams::default(), &held).await.unwrap();
    let text = format!(
        r#"
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
shutdownTimeout: 5s
leaderElection: {{ enabled: true, leaseName: first-listing, namespace: default, leaseDuration: 60s, renewDeadline: 40s, retryPeriod: 200ms }}
plugins:
  - name: mirror
    path: {}
    maxConcurrentReconciles: 2
    namespaces: [default]
    permissions:
      - {{ group: "", resources: [configmaps], verbs: [get, list, watch, patch] }}
"#,
        artifacts::MIRROR
    );
    let config = host_config(&text, std::path::Path::new("/"));
    let host = RunningHost::start(config, cluster.client.clone(), None).await;
    let queue = host.queue("mirror");
    let depth = eventually("the listed keys queued", Duration::from_secs(30), || {
        let depth = queue.depth_by_priority();
        let queued: usize = depth.iter().map(|(_, n)| n).sum();
        async move { (queued >= 3).then_some(depth) }
    })
    .await;
    assert!(
        depth.iter().all(|(p, _)| *p == Priority::LOW),
        "keys of the first listing queued above low priority: {depth:?}"
    );
    host.stop().await.unwrap();
}
