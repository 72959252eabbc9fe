//! Plugins written in Python and TypeScript (`plugins/webapp-py`,
//! `plugins/webapp-ts`, built by `plugins/artifacts` through the host's
//! `tools::build` module) load through the real host like the Rust webapp: they
//! implement the same world, declare the same metadata, and a reconcile
//! without an API server comes back as the same transient `unavailable`
//! error — an error value crossing the boundary, not a trap.

use tokio_util::sync::CancellationToken;
use wasmctrl::sandbox::Limits;
use wasmctrl::{ObjectKey, ReconcileError, ReconcileRequest};
use wasmctrl_plugin_artifacts as artifacts;

use crate::{TIMEOUT, load, runtime_with_disk_cache as runtime};

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

    // The same metadata: kinds, watches, permissions and webhooks, field by
    // field.
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

/// Runs `program args` in `dir` (relative to the workspace root) as a user
/// of the SDK would, and fails with its output if it fails.
fn run_in(dir: &str, program: &str, args: &[&str], env: &[(&str, String)]) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = std::process::Command::new(program)
        .args(args)
        .current_dir(root.join(dir))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap_or_else(|e| {
            panic!("{dir}: cannot run {program} ({e}); install it to test the guest SDKs")
        });
    assert!(
        output.status.success(),
        "{dir}: `{program} {}` failed:\n{}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The Python SDK's unit tests and those of the Python plugins, against the
/// SDK's `FakeCluster`: `cargo test` runs every language's tests.
#[test]
fn the_python_sdk_and_plugins_pass_their_unit_tests() {
    let sdk = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../guest-sdk-python")
        .display()
        .to_string();
    for dir in [
        "guest-sdk-python",
        "plugins/webapp-py",
        "plugins/hello-py",
        "plugins/dns-py",
    ] {
        run_in(
            dir,
            "python3",
            &["-m", "unittest", "discover", "-s", "tests", "-t", "."],
            &[("PYTHONPATH", sdk.clone())],
        );
    }
}

/// The TypeScript SDK's unit tests and those of the TypeScript plugins
/// (`npm ci` from their lockfiles, npm's cache outside the repository).
#[test]
fn the_typescript_sdk_and_plugins_pass_their_unit_tests() {
    for dir in [
        "guest-sdk-js",
        "plugins/webapp-ts",
        "plugins/hello-ts",
        "plugins/dns-ts",
    ] {
        run_in(
            dir,
            "npm",
            &["ci", "--prefer-offline", "--no-audit", "--no-fund"],
            &[],
        );
        run_in(dir, "npm", &["test"], &[]);
    }
}
