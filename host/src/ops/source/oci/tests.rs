use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::routing::get;

use futures::future::BoxFuture;

use super::*;
use crate::config::{FetchLimits, OciSourceSpec};
use crate::control::metrics::{SourceRefusal, source_refusals};
use crate::ops::source::Reach;
use crate::ops::source::artifact;
use crate::ops::source::credentials::{self, RegistryCredentials};
use crate::ops::source::{DiskCache, PluginSource};
use crate::sandbox::digest;

/// A body that never ends.
fn endless() -> Body {
    Body::from_stream(futures::stream::repeat_with(|| {
        Ok::<_, std::convert::Infallible>(bytes::Bytes::from(vec![b'a'; 64 << 10]))
    }))
}

/// Serves `routes(addr)` on a loopback port.
async fn serve(routes: impl FnOnce(SocketAddr) -> Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = routes(addr);
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// A registry whose `/v2/` sends clients for a token to `/token`.
fn token_realm(addr: SocketAddr) -> Router {
    let challenge = format!("Bearer realm=\"http://{addr}/token\",service=\"test\"");
    Router::new().route(
        "/v2/",
        get(move || async move {
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, challenge)],
            )
        }),
    )
}

async fn fetch(reference: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let docker_config = dir.path().join("config.json");
    std::fs::write(&docker_config, "{}").unwrap();
    let spec = OciSourceSpec {
        reference: reference.to_string(),
        poll_interval: None,
        insecure: true,
        docker_config: Some(docker_config),
        limits: FetchLimits::default(),
    };
    let source = OciSource::new(spec, DiskCache::new(dir.path().join("cache")));
    source.fetch().await.unwrap_err().to_string()
}

const PINNED: &str = "p/x@sha256:0000000000000000000000000000000000000000000000000000000000000000";

#[tokio::test]
async fn an_endless_token_answer_is_refused_at_its_bound() {
    let addr = serve(|addr| token_realm(addr).route("/token", get(|| async { endless() }))).await;
    let e = fetch(&format!("{addr}/p/x:1")).await;
    assert!(
        e.contains("the registry's token answer exceeds 64 KiB"),
        "{e}"
    );
    // A length announced past the bound is refused before reading.
    let addr = serve(|addr| {
        token_realm(addr).route(
            "/token",
            get(|| async { ([(header::CONTENT_LENGTH, "2147483648")], endless()) }),
        )
    })
    .await;
    let e = fetch(&format!("{addr}/{PINNED}")).await;
    assert!(
        e.contains("the registry's token answer exceeds 64 KiB"),
        "{e}"
    );
}

#[tokio::test]
async fn an_endless_error_answer_is_read_only_to_its_bound() {
    let addr = serve(|addr| {
        token_realm(addr).route(
            "/token",
            get(|| async { (StatusCode::UNAUTHORIZED, endless()) }),
        )
    })
    .await;
    let e = fetch(&format!("{addr}/p/x:1")).await;
    assert!(
        e.contains("refused access") && e.contains("the rest was not read"),
        "{e}"
    );
    assert!(e.len() < 1024, "{} bytes: {e:.2000}", e.len());
    let addr = serve(|_| {
        Router::new().route("/v2/", get(|| async { "{}" })).route(
            "/v2/p/x/manifests/{at}",
            get(|| async { (StatusCode::BAD_REQUEST, endless()) }),
        )
    })
    .await;
    let e = fetch(&format!("{addr}/{PINNED}")).await;
    assert!(
        e.contains("answered 400") && e.contains("the rest was not read"),
        "{e}"
    );
    assert!(e.len() < 1024, "{} bytes: {e:.2000}", e.len());
}

/// What `push` of a component to `reference` on a plain-HTTP registry
/// says when it fails.
async fn push_refused(reference: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let docker_config = dir.path().join("config.json");
    std::fs::write(&docker_config, "{}").unwrap();
    let options = RegistryOptions {
        insecure: true,
        docker_config: Some(docker_config),
        credentials: None,
        limits: FetchLimits::default(),
    };
    let component = std::fs::read(wasmctrl_plugin_artifacts::NOOP).unwrap();
    match push(reference, component, Default::default(), &options).await {
        Ok(_) => panic!("pushed to a hostile registry"),
        Err(e) => e.to_string(),
    }
}

/// `wasmctrl push` holds a registry to the bounds of a pull: an endless
/// token answer is refused at 64 KiB, an endless error answer to the
/// token request, the upload or the manifest is read to 64 KiB only.
#[tokio::test]
async fn a_push_reads_token_and_error_answers_only_to_their_bounds() {
    let addr = serve(|addr| token_realm(addr).route("/token", get(|| async { endless() }))).await;
    let e = push_refused(&format!("{addr}/p/x:1")).await;
    assert!(
        e.contains("the registry's token answer exceeds 64 KiB"),
        "{e:.2000}"
    );
    let addr = serve(|addr| {
        token_realm(addr).route(
            "/token",
            get(|| async { (StatusCode::FORBIDDEN, endless()) }),
        )
    })
    .await;
    let e = push_refused(&format!("{addr}/p/x:1")).await;
    assert!(
        e.contains("refused access") && e.contains("the rest was not read"),
        "{e:.2000}"
    );
    assert!(e.len() < 1024, "{} bytes: {e:.2000}", e.len());
    let addr = serve(|_| {
        Router::new().route("/v2/", get(|| async { "{}" })).route(
            "/v2/p/x/blobs/uploads/",
            axum::routing::post(|| async { (StatusCode::BAD_REQUEST, endless()) }),
        )
    })
    .await;
    let e = push_refused(&format!("{addr}/p/x:1")).await;
    assert!(
        e.contains("answered 400") && e.contains("the rest was not read"),
        "{e:.2000}"
    );
    assert!(e.len() < 1024, "{} bytes: {e:.2000}", e.len());
    // Blobs accepted, the manifest answered endlessly.
    let addr = serve(|_| {
        Router::new()
            .route("/v2/", get(|| async { "{}" }))
            .route(
                "/v2/p/x/blobs/uploads/",
                axum::routing::post(|| async {
                    (
                        StatusCode::ACCEPTED,
                        [(header::LOCATION, "/v2/p/x/blobs/uploads/u1?_state=s")],
                    )
                }),
            )
            .route(
                "/v2/p/x/blobs/uploads/u1",
                axum::routing::put(|| async { StatusCode::CREATED }),
            )
            .route(
                "/v2/p/x/manifests/1",
                axum::routing::put(|| async { (StatusCode::INTERNAL_SERVER_ERROR, endless()) }),
            )
    })
    .await;
    let e = push_refused(&format!("{addr}/p/x:1")).await;
    assert!(
        e.contains("cannot reach the registry")
            && e.contains("answered 500")
            && e.contains("the rest was not read"),
        "{e:.2000}"
    );
    assert!(e.len() < 1024, "{} bytes: {e:.2000}", e.len());
}

/// An upload location is a URL the registry names: it is held to the
/// conversation's rule, so a registry cannot have the component sent by a
/// scheme the rule does not allow.
#[tokio::test]
async fn a_push_is_not_sent_where_the_rule_forbids() {
    let addr = serve(|_| {
        Router::new().route("/v2/", get(|| async { "{}" })).route(
            "/v2/p/x/blobs/uploads/",
            axum::routing::post(|| async {
                (
                    StatusCode::ACCEPTED,
                    [(header::LOCATION, "file:///etc/passwd")],
                )
            }),
        )
    })
    .await;
    let e = push_refused(&format!("{addr}/p/x:1")).await;
    assert!(
        e.contains("refusing file:///etc/passwd: must be https://, not file://"),
        "{e:.2000}"
    );
}

#[tokio::test]
async fn an_endless_manifest_is_refused_at_its_bound() {
    let addr = serve(|_| {
        Router::new()
            .route("/v2/", get(|| async { "{}" }))
            .route("/v2/p/x/manifests/{at}", get(|| async { endless() }))
    })
    .await;
    let e = fetch(&format!("{addr}/{PINNED}")).await;
    assert!(e.contains("the manifest exceeds 4 MiB"), "{e}");
    // A tag whose HEAD lacks the digest header is resolved by reading
    // the manifest, under the same bound.
    let e = fetch(&format!("{addr}/p/x:1")).await;
    assert!(e.contains("the manifest exceeds 4 MiB"), "{e}");
}

/// A registry serving `manifest` under its own digest, counting the
/// requests for anything else.
async fn serving(manifest: Vec<u8>) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let pinned = format!("p/x@{}", digest(&manifest));
    let others = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = others.clone();
    let addr = serve(move |_| {
        Router::new()
            .route("/v2/", get(|| async { "{}" }))
            .route(
                "/v2/p/x/manifests/{at}",
                get(move || async move { manifest }),
            )
            .fallback(move || async move {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                StatusCode::NOT_FOUND
            })
    })
    .await;
    (format!("{addr}/{pinned}"), others)
}

#[tokio::test]
async fn a_hostile_manifest_is_refused_in_one_bounded_line_asking_nothing_more() {
    let dir = tempfile::tempdir().unwrap();
    let docker_config = dir.path().join("config.json");
    std::fs::write(&docker_config, "{}").unwrap();
    let options = RegistryOptions {
        insecure: true,
        docker_config: Some(docker_config),
        credentials: None,
        limits: FetchLimits::default(),
    };
    let layer =
        serde_json::json!({"mediaType": "application/wasm", "digest": digest(b"c"), "size": 1});
    let manifest = |config_digest: serde_json::Value, layers: serde_json::Value| {
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "config": {"mediaType": artifact::WASM_CONFIG_MEDIA_TYPE, "digest": config_digest, "size": 2},
            "layers": layers,
        }))
        .unwrap()
    };
    let cases = [
        // A config digest that is a path on the registry.
        (
            manifest(
                "../../../v2/_catalog?n=1".into(),
                serde_json::json!([layer]),
            ),
            "its config digest \"../../../v2/_catalog?n=1\" is not sha256",
        ),
        // Nested 3 million deep, within the 4 MiB bound: skipped without
        // recursing, never built.
        ("[".repeat(3 << 20).into_bytes(), "EOF while parsing a list"),
        // A media type of 1.5 MiB of newlines (3 MiB as JSON).
        (
            manifest(
                digest(b"{}").into(),
                serde_json::json!([{"mediaType": "\n".repeat(3 << 19), "digest": digest(b"c"), "size": 1}]),
            ),
            "its layer media type is \"\\n\\n",
        ),
        (
            manifest(digest(b"{}").into(), serde_json::json!(vec![layer; 30_000])),
            "it has 30000 layers; a wasm OCI artifact has exactly one",
        ),
    ];
    let counted = || source_refusals(SourceRefusal::NotAnArtifact);
    for (raw, expected) in cases {
        let before = counted();
        let (reference, others) = serving(raw).await;
        let e = match describe_artifact(&reference, &options).await {
            Ok(_) => panic!("accepted: {expected}"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(expected), "{e:.2000}");
        assert!(e.len() < 1024 && !e.contains('\n'), "{e:.2000}");
        assert_eq!(others.load(std::sync::atomic::Ordering::SeqCst), 0, "{e}");
        assert!(counted() > before, "not counted: {e:.200}");
    }
}

#[tokio::test]
async fn an_objects_registry_on_loopback_is_refused_unless_allowed() {
    let addr = serve(|_| Router::new().route("/v2/", get(|| async { "{}" }))).await;
    let dir = tempfile::tempdir().unwrap();
    let source = |reach: Reach| {
        let spec = OciSourceSpec {
            reference: format!("{addr}/{PINNED}"),
            poll_interval: None,
            insecure: true,
            docker_config: None,
            limits: FetchLimits::default(),
        };
        OciSource::with_credentials(
            spec,
            DiskCache::new(dir.path().join("cache")),
            Arc::new(NoCredentials),
        )
        .reaching(reach)
    };
    let e = source(Reach::public([]))
        .fetch()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("refusing to connect to 127.0.0.1") && e.contains("public addresses"),
        "{e}"
    );
    // Allowed by name, it gets as far as the (missing) manifest.
    let e = source(Reach::public([addr.to_string()]))
        .fetch()
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("no such repository"), "{e}");
}

#[derive(Debug)]
struct NoCredentials;

impl RegistryCredentials for NoCredentials {
    fn credentials<'a>(
        &'a self,
        _registry: &'a str,
    ) -> BoxFuture<'a, Result<Option<credentials::Credentials>, credentials::CredentialsError>>
    {
        Box::pin(async { Ok(None) })
    }
}

/// A tag's new version refused for the loading budget is an error tried
/// again later: the version the tag named before (cached) does not stand
/// in for it, as it would for a registry that cannot be reached.
#[tokio::test]
async fn a_load_past_its_budget_is_not_answered_by_the_tags_cached_version() {
    use prometheus_client::metrics::gauge::Gauge;
    use std::sync::atomic::{AtomicBool, Ordering};

    use crate::ops::source::{SourceError, held};

    // The smallest component, and the same with a custom section.
    let v1 = b"\0asm\x0d\0\x01\0".to_vec();
    let v2 = [&v1[..], &[0, 4, 1, b'x', b'y', b'z']].concat();
    let versions: Vec<(Vec<u8>, artifact::Packed)> = [v1, v2]
        .into_iter()
        .map(|c| {
            let packed = artifact::pack(&c, "2026-01-01T00:00:00Z", Default::default()).unwrap();
            (c, packed)
        })
        .collect();
    let versions = Arc::new(versions);
    let moved = Arc::new(AtomicBool::new(false));
    let (served, now) = (versions.clone(), moved.clone());
    let addr = serve(move |_| {
        let blobs = served.clone();
        Router::new()
            .route("/v2/", get(|| async { "{}" }))
            .route(
                "/v2/p/x/manifests/{at}",
                get(
                    move |axum::extract::Path(at): axum::extract::Path<String>| {
                        let served = served.clone();
                        let now = now.clone();
                        async move {
                            let current = &served[usize::from(now.load(Ordering::SeqCst))].1;
                            let packed = served
                                .iter()
                                .map(|v| &v.1)
                                .find(|p| p.manifest_digest == at)
                                .unwrap_or(current);
                            (
                                [
                                    (
                                        header::CONTENT_TYPE,
                                        artifact::OCI_MANIFEST_MEDIA_TYPE.to_string(),
                                    ),
                                    (
                                        header::HeaderName::from_static("docker-content-digest"),
                                        packed.manifest_digest.clone(),
                                    ),
                                ],
                                packed.manifest.clone(),
                            )
                        }
                    },
                ),
            )
            .route(
                "/v2/p/x/blobs/{digest}",
                get(move |axum::extract::Path(d): axum::extract::Path<String>| {
                    let blobs = blobs.clone();
                    async move {
                        match blobs.iter().find(|v| v.1.layer_digest == d) {
                            Some(v) => (StatusCode::OK, v.0.clone()),
                            None => (StatusCode::NOT_FOUND, Vec::new()),
                        }
                    }
                }),
            )
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let docker_config = dir.path().join("config.json");
    std::fs::write(&docker_config, "{}").unwrap();
    let spec = OciSourceSpec {
        reference: format!("{addr}/p/x:t"),
        poll_interval: None,
        insecure: true,
        docker_config: Some(docker_config),
        limits: FetchLimits::default(),
    };
    let source = OciSource::new(spec, DiskCache::new(dir.path().join("cache")));
    assert_eq!(source.fetch().await.unwrap().bytes, versions[0].0);

    moved.store(true, Ordering::SeqCst);
    let small = held::Budget::new(4, Gauge::default());
    let e = held::holding(small, source.fetch()).await.unwrap_err();
    assert!(
        matches!(e, SourceError::Busy { .. }) && e.to_string().contains("maxLoadingBytes"),
        "{e}"
    );
    assert_eq!(source.fetch().await.unwrap().bytes, versions[1].0);
}
