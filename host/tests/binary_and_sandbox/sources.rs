//! Plugin sources over the network, against a real registry (Debian's
//! `docker-registry`, the CNCF distribution registry) and a loopback HTTP
//! server: pushing and pulling wasm OCI artifacts, following a tag,
//! refusing a wrong digest, restarting from the disk cache with the
//! registry down, and `wasmctrl push` / `wasmctrl inspect oci://…`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use wasmctrl::config::{FetchLimits, OciSourceSpec, UrlSourceSpec};
use wasmctrl::ops::source::oci::{self, RegistryOptions};
use wasmctrl::ops::source::{DiskCache, OciSource, PluginSource, SourceError, UrlSource};
use wasmctrl::sandbox::digest;
use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::admin::metric_reaches;
use wasmctrl_testkit::eventually;
use wasmctrl_testkit::host::{
    RunningHost, file_digest, host_config, insecure_registry, push_component,
};
use wasmctrl_testkit::registry::{PASSWORD, Registry, USER, empty_docker_config};

use crate::binary::wasmctrl;
use crate::{runtime, spec};

fn insecure() -> RegistryOptions {
    insecure_registry()
}

async fn push(reference: &str, component: &str) -> String {
    push_component(reference, component, &insecure()).await
}

fn oci_source(reference: &str, poll: Option<Duration>, cache: &Path) -> OciSource {
    OciSource::new(
        OciSourceSpec {
            reference: reference.into(),
            poll_interval: poll,
            insecure: true,
            docker_config: Some(empty_docker_config()),
            limits: insecure().limits,
        },
        DiskCache::new(cache.to_path_buf()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oci_tag_source_loads_and_yields_when_the_tag_moves() {
    let registry = Registry::start();
    let cache = tempfile::tempdir().unwrap();
    let reference = registry.reference("plugins/stamp:live");
    push(&reference, artifacts::STAMP_V1).await;

    let source = oci_source(&reference, Some(Duration::from_secs(1)), cache.path());
    assert_eq!(source.origin(), format!("oci://{reference}"));
    let v1 = source.fetch().await.expect("v1 fetches");
    assert_eq!(v1.digest, file_digest(artifacts::STAMP_V1));
    let plugin = runtime()
        .load_bytes(source.origin(), v1.bytes, spec("stamp"))
        .await
        .expect("the pulled component loads");
    assert_eq!(plugin.metadata().version, "1.0.0");
    assert_eq!(plugin.origin(), format!("oci://{reference}"));

    // Polls that find the same digest stay silent.
    let mut changes = source.changes();
    assert!(
        tokio::time::timeout(Duration::from_millis(2500), changes.next())
            .await
            .is_err(),
        "the source reported a change while the tag did not move"
    );

    push(&reference, artifacts::STAMP_V2).await;
    tokio::time::timeout(Duration::from_secs(20), changes.next())
        .await
        .expect("the source reports the moved tag within 20s")
        .expect("the change stream is open");
    let v2 = source.fetch().await.expect("v2 fetches");
    assert_eq!(v2.digest, file_digest(artifacts::STAMP_V2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_reference_never_polls_and_a_non_wasm_artifact_is_refused() {
    let registry = Registry::start();
    let cache = tempfile::tempdir().unwrap();
    let reference = registry.reference("plugins/noop:1");
    let manifest = push(&reference, artifacts::NOOP).await;
    let pinned = registry.reference(&format!("plugins/noop@{manifest}"));
    let source = oci_source(&pinned, None, cache.path());
    assert_eq!(
        source.fetch().await.unwrap().digest,
        file_digest(artifacts::NOOP)
    );
    assert!(
        source.changes().next().await.is_none(),
        "a pinned source never changes"
    );

    // A container image's manifest (an OCI image config and a tar layer)
    // is not a wasm artifact: refused, saying why.
    let image = registry.reference("plugins/image:1");
    push_image(&image).await;
    let err = oci_source(&image, None, cache.path())
        .fetch()
        .await
        .unwrap_err();
    assert!(
        matches!(err, SourceError::NotWasmArtifact { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("application/vnd.wasm.config.v0+json"),
        "{err}"
    );

    // An unknown tag is an error naming the source, not a fallback.
    let missing = registry.reference("plugins/noop:missing");
    let err = oci_source(&missing, None, cache.path())
        .fetch()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&missing) && err.contains("no such repository, tag or digest"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_the_registry_down_starts_from_the_disk_cache() {
    let mut registry = Registry::start();
    let cache = tempfile::tempdir().unwrap();
    let reference = registry.reference("plugins/stamp:stable");
    let manifest = push(&reference, artifacts::STAMP_V1).await;
    let pinned = registry.reference(&format!("plugins/stamp@{manifest}"));
    let expected = file_digest(artifacts::STAMP_V1);
    let source = oci_source(&reference, None, cache.path());
    assert_eq!(source.fetch().await.unwrap().digest, expected);
    // The tag moves to v2 and back to v1's very manifest (a rollback by
    // retagging): the cache must remember v1 as what the tag names now.
    push(&reference, artifacts::STAMP_V2).await;
    assert_eq!(
        source.fetch().await.unwrap().digest,
        file_digest(artifacts::STAMP_V2)
    );
    retag(&pinned, &reference).await;
    assert_eq!(source.fetch().await.unwrap().digest, expected);

    // A registry that answers "no such tag" is believed, cache or not.
    let gone = registry.reference("plugins/noop:gone");
    let gone_manifest = push(&gone, artifacts::NOOP).await;
    oci_source(&gone, None, cache.path()).fetch().await.unwrap();
    let deleted = registry.delete_manifest("plugins/noop", &gone_manifest);
    assert_eq!(deleted, Some(202));
    let err = oci_source(&gone, None, cache.path())
        .fetch()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("no such repository, tag or digest"), "{err}");

    registry.stop();
    // New sources, as after a restart: the tag's last resolution and the
    // component are on disk.
    let by_tag = oci_source(&reference, Some(Duration::from_secs(1)), cache.path());
    let artifact = by_tag.fetch().await.expect("served from the cache");
    assert_eq!(artifact.digest, expected);
    runtime()
        .load_bytes(by_tag.origin(), artifact.bytes, spec("stamp"))
        .await
        .expect("the cached component loads");
    let by_digest = oci_source(&pinned, None, cache.path());
    assert_eq!(by_digest.fetch().await.unwrap().digest, expected);

    // Whoever can write the cache cannot change what runs for a digest: a
    // record pointing the pinned manifest at another cached component (v2)
    // is not believed, and neither is one naming another manifest.
    let record = cache.path().join("refs").join(format!(
        "{}.json",
        digest(pinned.as_bytes()).trim_start_matches("sha256:")
    ));
    let honest = std::fs::read(&record).unwrap();
    for (manifest, layer) in [
        (manifest.clone(), file_digest(artifacts::STAMP_V2)),
        (gone_manifest.clone(), expected.clone()),
    ] {
        let forged = serde_json::json!({
            "reference": pinned, "manifest": manifest, "layer": layer,
            "resolvedAt": "2026-01-01T00:00:00Z",
        });
        std::fs::write(&record, serde_json::to_vec(&forged).unwrap()).unwrap();
        let err = oci_source(&pinned, None, cache.path())
            .fetch()
            .await
            .expect_err("a forged record is not served");
        assert!(matches!(err, SourceError::Unavailable { .. }), "{err:?}");
    }
    std::fs::write(&record, honest).unwrap();

    // With nothing cached, the error says the registry is unreachable and
    // where the cache was looked for.
    let empty = tempfile::tempdir().unwrap();
    let err = oci_source(&reference, None, empty.path())
        .fetch()
        .await
        .unwrap_err();
    assert!(matches!(err, SourceError::Unavailable { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("unreachable") && msg.contains(&empty.path().display().to_string()),
        "{msg}"
    );

    // A cached component that was tampered with is not served.
    let blob = cache
        .path()
        .join("blobs/sha256")
        .join(expected.trim_start_matches("sha256:"));
    std::fs::write(&blob, b"tampered").unwrap();
    let err = oci_source(&reference, None, cache.path())
        .fetch()
        .await
        .unwrap_err();
    assert!(matches!(err, SourceError::Unavailable { .. }), "{err:?}");
}

/// Points tag `to` at the manifest `from` (pinned) names, as `crane tag`
/// or `oras tag` do.
async fn retag(from: &str, to: &str) {
    let client = oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    });
    let auth = oci_client::secrets::RegistryAuth::Anonymous;
    let (raw, _) = client
        .pull_manifest_raw(
            &from.parse().unwrap(),
            &auth,
            &["application/vnd.oci.image.manifest.v1+json"],
        )
        .await
        .unwrap();
    client
        .push_manifest_raw(
            &to.parse().unwrap(),
            raw,
            "application/vnd.oci.image.manifest.v1+json"
                .parse()
                .unwrap(),
        )
        .await
        .unwrap();
}

/// Pushes a container image (an OCI image config and a tar layer), which
/// is not a wasm artifact, to `reference`.
async fn push_image(reference: &str) {
    let client = oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    });
    let image: oci_client::Reference = reference.parse().unwrap();
    let layer = oci_client::client::ImageLayer::oci_v1(b"not a tarball".to_vec(), None);
    let config = oci_client::client::Config::oci_v1(b"{}".to_vec(), None);
    client
        .push(
            &image,
            &[layer],
            config,
            &oci_client::secrets::RegistryAuth::Anonymous,
            None,
        )
        .await
        .expect("image pushed");
}

/// The next change of `changes`, within 20 s.
async fn next_change(changes: &mut futures::stream::BoxStream<'static, ()>) {
    tokio::time::timeout(Duration::from_secs(20), changes.next())
        .await
        .expect("a change within 20s")
        .expect("the change stream is open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_source_retries_a_failed_fetch_but_not_a_refused_manifest() {
    let registry = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    let reference = registry.reference("plugins/stamp:retry");
    push(&reference, artifacts::STAMP_V1).await;
    let docker = dir.path().join("config.json");
    std::fs::write(&docker, r#"{"auths": {}}"#).unwrap();
    let source = OciSource::new(
        OciSourceSpec {
            reference: reference.clone(),
            poll_interval: Some(Duration::from_secs(1)),
            insecure: true,
            docker_config: Some(docker.clone()),
            limits: insecure().limits,
        },
        DiskCache::new(dir.path().join("cache")),
    );
    source.fetch().await.unwrap();
    let mut changes = source.changes();

    // The tag moves, but the fetch fails (the credentials file is being
    // rewritten): the next poll reports the change again.
    push(&reference, artifacts::STAMP_V2).await;
    next_change(&mut changes).await;
    std::fs::write(&docker, "{").unwrap();
    let err = source.fetch().await.unwrap_err();
    assert!(matches!(err, SourceError::Credentials { .. }), "{err:?}");
    std::fs::write(&docker, r#"{"auths": {}}"#).unwrap();
    next_change(&mut changes).await;
    assert_eq!(
        source.fetch().await.unwrap().digest,
        file_digest(artifacts::STAMP_V2)
    );

    // The tag moves to something that is not a wasm artifact: reported
    // once, refused, and not retried while the tag stays there.
    push_image(&reference).await;
    next_change(&mut changes).await;
    let err = source.fetch().await.unwrap_err();
    assert!(
        matches!(err, SourceError::NotWasmArtifact { .. }),
        "{err:?}"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(2500), changes.next())
            .await
            .is_err(),
        "a refused manifest was reported again"
    );
}

/// Serves `body` at every path over plain HTTP on loopback; returns the
/// address (the server stops with the runtime).
async fn serve(body: Vec<u8>) -> SocketAddr {
    let app = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move { body }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn url_source(url: String, sha256: &str, max_size: u64, cache: &Path) -> UrlSource {
    UrlSource::new(
        UrlSourceSpec {
            url,
            digest: format!("sha256:{}", sha256.trim_start_matches("sha256:")),
            limits: FetchLimits {
                max_size,
                timeout: Duration::from_secs(30),
            },
        },
        DiskCache::new(cache.to_path_buf()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_source_refuses_a_wrong_sha256_naming_both_digests() {
    let bytes = std::fs::read(artifacts::NOOP).unwrap();
    let actual = digest(&bytes);
    let addr = serve(bytes.clone()).await;
    let cache = tempfile::tempdir().unwrap();
    let url = format!("http://{addr}/noop.wasm?token=secret");

    let wrong = digest(b"what the reviewer approved");
    let source = url_source(url.clone(), &wrong, 256 << 20, cache.path());
    assert_eq!(source.origin(), format!("http://{addr}/noop.wasm?…"));
    let err = source.fetch().await.unwrap_err();
    assert!(matches!(err, SourceError::DigestMismatch { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("expected {wrong}")) && msg.contains(&format!("got {actual}")),
        "{msg}"
    );
    assert!(!msg.contains("secret"), "{msg}");

    // Too large for maxSize: refused before it is read whole.
    let err = url_source(url.clone(), &actual, 1024, cache.path())
        .fetch()
        .await
        .unwrap_err();
    assert!(matches!(err, SourceError::TooLarge { .. }), "{err:?}");

    // The right digest loads, and is then served from the cache alone.
    let source = url_source(url.clone(), &actual, 256 << 20, cache.path());
    let artifact = source.fetch().await.unwrap();
    assert_eq!(artifact.digest, actual);
    let gone = url_source(
        "http://127.0.0.1:9/noop.wasm".into(),
        &actual,
        256 << 20,
        cache.path(),
    );
    assert_eq!(gone.fetch().await.unwrap().bytes, bytes);
}

/// The embedded API server and a kube client for it.
async fn cluster() -> (wasmctrl_apiserver::ApiServer, kube::Client) {
    let server = wasmctrl_apiserver::ApiServer::start(wasmctrl_apiserver::Config::default())
        .await
        .expect("API server starts");
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&server.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    (server, kube::Client::try_from(config).unwrap())
}

async fn stamp_of(api: &Api<ConfigMap>, name: &str) -> Option<String> {
    api.get(name)
        .await
        .ok()?
        .metadata
        .labels?
        .get("wasmctrl.dev/stamp")
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_swaps_an_oci_plugin_when_its_tag_moves() {
    let registry = Registry::start();
    let reference = registry.reference("plugins/stamp:prod");
    push(&reference, artifacts::STAMP_V1).await;
    let (_server, client) = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
shutdownTimeout: 5s
runtime: {{ cacheDir: cache }}
plugins:
  - name: stamp
    source: {{ oci: "{reference}", pollInterval: 1s, insecure: true, dockerConfig: {docker} }}
    reconcileTimeout: 5s
    namespaces: [default]
    permissions:
      - {{ group: "", resources: [configmaps], verbs: [get, list, watch, patch] }}
"#,
        docker = empty_docker_config().display()
    );
    let host = RunningHost::start(host_config(&text, dir.path()), client.clone(), None).await;

    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("cm-oci".into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    api.create(&PostParams::default(), &cm).await.unwrap();
    eventually("the v1 stamp", Duration::from_secs(30), || async {
        (stamp_of(&api, "cm-oci").await.as_deref() == Some("v1")).then_some(())
    })
    .await;
    let status = host.plugin("stamp").await.expect("/plugins lists stamp");
    assert_eq!(status["source"], format!("oci://{reference}"));
    assert_eq!(status["digest"], file_digest(artifacts::STAMP_V1));
    assert!(dir.path().join("cache/sources/blobs/sha256").is_dir());

    push(&reference, artifacts::STAMP_V2).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = host.plugin("stamp").await;
        if let Some(p) = status
            .as_ref()
            .filter(|p| p["version"] == "2.0.0" && p["generation"] == 2)
        {
            assert_eq!(p["digest"], file_digest(artifacts::STAMP_V2));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "v2 not live in /plugins within 30s: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The swap re-enqueues every key: the object is stamped by v2.
    eventually("the v2 stamp", Duration::from_secs(30), || async {
        (stamp_of(&api, "cm-oci").await.as_deref() == Some("v2")).then_some(())
    })
    .await;

    tokio::time::timeout(Duration::from_secs(15), host.stop())
        .await
        .expect("the manager stops")
        .unwrap();
}

#[test]
fn wasmctrl_push_then_inspect_oci_through_the_binary() {
    let registry = Registry::start();
    let reference = registry.reference("cli/stamp:v1");
    let docker = empty_docker_config();
    let wasmctrl = |args: &[&str]| {
        let out = wasmctrl()
            .args(args)
            .arg("--docker-config")
            .arg(&docker)
            .env("RUST_LOG", "error")
            .output()
            .expect("wasmctrl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    let (ok, stdout, stderr) = wasmctrl(&["push", artifacts::STAMP_V1, &reference, "--insecure"]);
    assert!(ok, "push failed: {stderr}");
    let manifest = stdout.trim().to_string();
    assert!(
        manifest.starts_with("sha256:") && manifest.len() == 71,
        "push prints the manifest digest, not {stdout:?}"
    );

    let (ok, stdout, stderr) = wasmctrl(&["inspect", &format!("oci://{reference}"), "--insecure"]);
    assert!(ok, "inspect failed: {stderr}");
    let out: serde_json::Value = serde_json::from_str(&stdout).expect("inspect prints JSON");
    assert_eq!(out["name"], "stamp");
    assert_eq!(out["version"], "1.0.0");
    assert_eq!(out["digest"], file_digest(artifacts::STAMP_V1));
    let oci = &out["oci"];
    assert_eq!(oci["manifestDigest"], manifest.as_str());
    assert_eq!(
        oci["manifest"]["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    assert_eq!(
        oci["manifest"]["layers"][0]["mediaType"],
        "application/wasm"
    );
    assert_eq!(
        oci["manifest"]["annotations"]["org.opencontainers.image.version"],
        "1.0.0"
    );
    let config = &oci["config"];
    assert_eq!(config["architecture"], "wasm");
    assert_eq!(config["os"], "wasip2");
    assert_eq!(config["layerDigests"][0], file_digest(artifacts::STAMP_V1));
    assert_eq!(
        config["component"]["target"],
        "wasmctrl:reconciler/reconciler@0.1.3"
    );
    let exports = config["component"]["exports"].as_array().unwrap();
    assert!(
        exports.contains(&"reconcile".into()) && exports.contains(&"metadata".into()),
        "{exports:?}"
    );
    let imports = config["component"]["imports"].as_array().unwrap();
    assert!(
        imports.contains(&"wasmctrl:reconciler/kube@0.1.3".into()),
        "{imports:?}"
    );

    // By digest too.
    let pinned = format!(
        "oci://{}",
        registry.reference(&format!("cli/stamp@{manifest}"))
    );
    let (ok, stdout, stderr) = wasmctrl(&["inspect", &pinned, "--insecure"]);
    assert!(ok, "inspect by digest failed: {stderr}");
    assert!(stdout.contains(&manifest), "{stdout}");

    // A file that is not a plugin is not pushed.
    let not_a_plugin =
        std::env::temp_dir().join(format!("wasmctrl-not-a-plugin-{}.wasm", std::process::id()));
    std::fs::write(&not_a_plugin, b"\0asm\x01\0\0\0").unwrap();
    let (ok, _, stderr) = wasmctrl(&[
        "push",
        not_a_plugin.to_str().unwrap(),
        &registry.reference("cli/bad:v1"),
        "--insecure",
    ]);
    assert!(!ok && stderr.contains("not a component"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_come_from_a_docker_config() {
    let registry = Registry::start_with_auth();
    let dir = tempfile::tempdir().unwrap();
    let reference = registry.reference("private/noop:1");
    let auth = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        format!("{USER}:{PASSWORD}"),
    );
    let docker = dir.path().join("config.json");
    std::fs::write(
        &docker,
        format!(
            r#"{{"auths": {{"http://{}": {{"auth": "{auth}"}}}}}}"#,
            registry.addr
        ),
    )
    .unwrap();
    let with_credentials = RegistryOptions {
        docker_config: Some(docker.clone()),
        ..insecure()
    };

    // Without credentials the registry refuses, and the error says so.
    let err = oci::push(
        &reference,
        std::fs::read(artifacts::NOOP).unwrap(),
        Default::default(),
        &insecure(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(&reference) && err.contains("refused access"),
        "{err}"
    );

    oci::push(
        &reference,
        std::fs::read(artifacts::NOOP).unwrap(),
        Default::default(),
        &with_credentials,
    )
    .await
    .expect("push with the docker config's credentials");

    let anonymous = oci_source(&reference, None, dir.path())
        .fetch()
        .await
        .unwrap_err();
    assert!(
        anonymous.to_string().contains("refused access"),
        "{anonymous}"
    );
    let source = OciSource::new(
        OciSourceSpec {
            reference: reference.clone(),
            poll_interval: None,
            insecure: true,
            docker_config: Some(docker),
            limits: insecure().limits,
        },
        DiskCache::new(dir.path().join("cache")),
    );
    assert_eq!(
        source.fetch().await.expect("pull with credentials").digest,
        file_digest(artifacts::NOOP)
    );
}

/// A registry on loopback serving `component` as the tag `p/x:1`, until
/// the returned switch is set: from then on it answers the tag with an
/// error that never ends.
async fn turning_registry(component: &[u8]) -> (SocketAddr, Arc<AtomicBool>) {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    let packed = wasmctrl::ops::source::artifact::pack(
        component,
        "2026-12-05T00:00:00Z",
        Default::default(),
    )
    .unwrap();
    let manifest = packed.manifest.clone();
    let blobs = Arc::new(vec![
        (packed.config_digest.clone(), packed.config.clone()),
        (packed.layer_digest.clone(), component.to_vec()),
    ]);
    let hostile = Arc::new(AtomicBool::new(false));
    let turned = hostile.clone();
    let manifests = axum::routing::get(
        move |axum::extract::Path(_at): axum::extract::Path<String>| {
            let manifest = manifest.clone();
            let hostile = turned.load(Ordering::SeqCst);
            async move {
                if hostile {
                    let endless = futures::stream::repeat_with(|| {
                        Ok::<_, std::convert::Infallible>(bytes::Bytes::from(vec![b'e'; 64 << 10]))
                    });
                    (
                        StatusCode::BAD_REQUEST,
                        axum::body::Body::from_stream(endless),
                    )
                        .into_response()
                } else {
                    (
                        [(
                            header::CONTENT_TYPE,
                            "application/vnd.oci.image.manifest.v1+json",
                        )],
                        manifest,
                    )
                        .into_response()
                }
            }
        },
    )
    // No digest header: the tag is resolved by reading the manifest.
    .head(|| async { StatusCode::OK });
    let app = axum::Router::new()
        .route("/v2/", axum::routing::get(|| async { "{}" }))
        .route("/v2/p/x/manifests/{at}", manifests)
        .route(
            "/v2/p/x/blobs/{digest}",
            axum::routing::get(
                move |axum::extract::Path(digest): axum::extract::Path<String>| {
                    let found = blobs
                        .iter()
                        .find(|(d, _)| *d == digest)
                        .map(|(_, b)| b.clone());
                    async move { found.ok_or(StatusCode::NOT_FOUND) }
                },
            ),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, hostile)
}

/// A registry's error answer is read to its bound inside a running host
/// too (a tag poll), and each cut is counted where an operator looks: the
/// admin server's `/metrics`. The plugin keeps serving what it had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_error_answer_cut_in_a_poll_is_counted_on_the_admin_metrics() {
    let (addr, hostile) = turning_registry(&std::fs::read(artifacts::STAMP_V1).unwrap()).await;
    let (_server, client) = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
shutdownTimeout: 5s
runtime: {{ cacheDir: cache }}
plugins:
  - name: stamp
    source: {{ oci: "{addr}/p/x:1", pollInterval: 1s, insecure: true, dockerConfig: {docker} }}
    reconcileTimeout: 5s
    namespaces: [default]
    permissions:
      - {{ group: "", resources: [configmaps], verbs: [get, list, watch, patch] }}
"#,
        docker = empty_docker_config().display()
    );
    let host = RunningHost::start(host_config(&text, dir.path()), client, None).await;
    let serving = host.plugin("stamp").await.expect("/plugins lists stamp")["digest"].clone();
    assert_eq!(serving, file_digest(artifacts::STAMP_V1));
    hostile.store(true, Ordering::SeqCst);
    let cut = metric_reaches(
        "an error answer cut and counted",
        Duration::from_secs(30),
        host.admin,
        r#"wasmctrl_source_refusals_total{reason="errorAnswer"}"#,
        1.0,
    )
    .await;
    assert!(cut >= 1.0);
    assert_eq!(
        host.plugin("stamp").await.expect("still listed")["digest"],
        serving
    );
    tokio::time::timeout(Duration::from_secs(15), host.stop())
        .await
        .expect("the manager stops")
        .unwrap();
}
