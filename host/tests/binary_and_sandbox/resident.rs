//! A loaded plugin's compiled code stays out of memory until it runs.

use super::*;
use wasmctrl_testkit::residency::{disk_dir, resident_kib_under};

/// Loading runs the plugin's `metadata`, whose instance reads the mapped
/// copy into the page cache again (its data segments are mapped from it);
/// the load then pages the code out and drops that cache, so a loaded,
/// idle plugin holds none of its code resident. Without it, the
/// `metadata` call left ~330 KiB of `bench-status`'s code mapped.
#[tokio::test]
async fn a_loaded_plugin_holds_none_of_its_code_until_a_reconcile_runs() {
    // A tmpfs's pages cannot be dropped: the artifact is mapped from disk.
    let dir = disk_dir();
    let config = || RuntimeConfig {
        cache_dir: Some(dir.path().to_path_buf()),
        ..test_runtime_config()
    };
    // The first runtime compiles and stores the artifact; the second maps
    // it, as a restarted host does.
    {
        let first = runtime_with(config());
        load(
            &first,
            "b",
            wasmctrl_plugin_artifacts::BENCH_STATUS,
            Limits::default(),
        )
        .await;
    }
    let runtime = runtime_with(config());
    let _plugin = load(
        &runtime,
        "b",
        wasmctrl_plugin_artifacts::BENCH_STATUS,
        Limits::default(),
    )
    .await;
    let (resident, _) = resident_kib_under(dir.path());
    assert!(
        resident <= 64,
        "{resident} KiB of the loaded plugin's code resident before any reconcile"
    );
}
