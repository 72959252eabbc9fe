//! `wasmctrl dev` keeps the functions it compiles in the user's cache, so
//! that a restart after a rebuild (a new component whose functions are
//! mostly the same) compiles only what changed.

use std::path::{Path, PathBuf};

use crate::binary::{Dev, QUICKSTART, wasmctrl};

/// The packs of compiled functions under the user cache `cache`, with
/// their sizes.
fn packs(cache: &Path) -> Vec<(PathBuf, u64)> {
    let functions = cache.join("wasmctrl").join("compiled").join("functions");
    let mut found = Vec::new();
    for engine in std::fs::read_dir(functions).into_iter().flatten().flatten() {
        for pack in std::fs::read_dir(engine.path()).unwrap().flatten() {
            found.push((pack.path(), pack.metadata().unwrap().len()));
        }
    }
    found
}

/// `dev` on the quick start with its plugin at `component`, the user's
/// cache at `cache`; stopped once the host runs (its plugins loaded).
async fn start_and_stop(dir: &Path, component: &Path, cache: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(format!("{QUICKSTART}/wasmctrl.yaml"))
        .unwrap()
        .replace(
            "../../target/wasm32-wasip2/release/webapp.wasm",
            component.to_str().unwrap(),
        )
        .replace("127.0.0.1:9443", "127.0.0.1:0");
    let config = dir.join("wasmctrl.yaml");
    std::fs::write(&config, text).unwrap();
    let mut command = wasmctrl();
    command.env("XDG_CACHE_HOME", cache);
    let dev = Dev::start_with(
        command,
        &["--config".as_ref(), config.as_os_str()],
        dir.join("kubeconfig"),
    )
    .await;
    let (code, status) = wasmctrl_testkit::admin::http_get(dev.admin, "/plugins").await;
    assert_eq!(code, 200);
    assert!(status.contains("\"webapp\""), "{status}");
    dev.printed.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_dev_compiles_a_rebuilt_plugin_from_the_functions_it_kept() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let component = dir.path().join("webapp.wasm");
    let bytes = std::fs::read(wasmctrl_plugin_artifacts::WEBAPP).unwrap();
    std::fs::write(&component, &bytes).unwrap();

    let printed = start_and_stop(dir.path(), &component, &cache).await;
    let kept = cache.join("wasmctrl").join("compiled");
    assert!(
        printed
            .iter()
            .any(|l| l.contains("compiled functions are kept in")
                && l.contains(kept.to_str().unwrap())),
        "{printed:?}"
    );
    let first = packs(&cache);
    let compiled: u64 = first.iter().map(|(_, len)| len).sum();
    assert!(compiled > 0, "the first start keeps what it compiled");

    // A rebuild: other bytes (a custom section more), the same functions.
    let mut rebuilt = bytes;
    rebuilt.extend_from_slice(&[0, 7, 5, b'b', b'u', b'i', b'l', b'd', 1]);
    std::fs::write(&component, &rebuilt).unwrap();
    start_and_stop(dir.path(), &component, &cache).await;
    let again: u64 = packs(&cache)
        .iter()
        .filter(|(p, _)| !first.iter().any(|(f, _)| f == p))
        .map(|(_, len)| len)
        .sum();
    // A few of wasmtime's trampolines differ from compile to compile.
    assert!(
        again * 3 < compiled,
        "the restart compiled {again} bytes of functions again, of {compiled}"
    );
}
