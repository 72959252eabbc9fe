//! Plugins written in Python and TypeScript (`plugins/webapp-py`,
//! `plugins/webapp-ts`, built by `plugins/artifacts` through the host's
//! `build` module) load through the real host like the Rust webapp: they
//! implement the same world, declare the same metadata, and a reconcile
//! without an API server comes back as the same transient `unavailable`
//! error — an error value crossing the boundary, not a trap.

use tokio_util::sync::CancellationToken;
use wasmctrl::runtime::Limits;
use wasmctrl::{ObjectKey, ReconcileError, ReconcileRequest};
use wasmctrl_plugin_artifacts as artifacts;

use crate::{TIMEOUT, load, runtime};

fn request(attempt: u32) -> ReconcileRequest {
    ReconcileRequest {
        key: ObjectKey::namespaced("default", "hello"),
        attempt,
        timeout: TIMEOUT,
        cancel: CancellationToken::new(),
    }
}

/// Loads the Rust webapp and `path`, and checks that `path` behaves the same.
async fn behaves_like_the_rust_webapp(name: &str, path: &str) {
    let rt = runtime();
    let rust = load(&rt, "webapp", artifacts::WEBAPP, Limits::default()).await;
    let guest = rt
        .load_file(path, crate::spec(name))
        .await
        .unwrap_or_else(|e| panic!("{name} does not load: {e}"));

    // The same metadata: kinds, watches and permissions, field by field.
    assert_eq!(
        format!("{:#?}", guest.metadata()),
        format!("{:#?}", rust.metadata()),
        "{name}'s metadata differs from the Rust webapp's"
    );

    // Its first call, `get` of the WebApp, is refused by NoApiServer: the SDK
    // turns the host's `unavailable` into a transient reconcile error with
    // the same message as the Rust SDK's.
    let expected = rust.invoke(request(0)).await.result;
    assert_eq!(
        expected,
        Err(ReconcileError::Transient(
            "unavailable: no API server is configured for this host (get refused)".into()
        ))
    );
    for attempt in [0, 1] {
        let result = guest.invoke(request(attempt)).await.result;
        assert_eq!(result, expected, "{name}, attempt {attempt}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_webapp_behaves_like_the_rust_one() {
    behaves_like_the_rust_webapp("webapp-py", artifacts::WEBAPP_PY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_webapp_behaves_like_the_rust_one() {
    behaves_like_the_rust_webapp("webapp-ts", artifacts::WEBAPP_TS).await;
}
