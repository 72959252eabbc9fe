//! Bad input: every way a plugin file can be wrong gives an error naming the
//! file and what is wrong, and nothing is loaded.

use std::path::PathBuf;
use wasmctrl::control::metrics::DiskRefusal;

use wasmctrl::TrapKind;
use wasmctrl::sandbox::{CacheHit, Limits, LoadError, PluginSpec, RuntimeConfig};
use wasmctrl_plugin_artifacts as artifacts;

use crate::{load, runtime, runtime_with, spec};

fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("wasmctrl-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[tokio::test]
async fn loads_a_plugin_and_reads_its_metadata() {
    let rt = runtime();
    let plugin = load(&rt, "noop", artifacts::NOOP, Limits::default()).await;
    assert_eq!(plugin.metadata().name, "noop");
    assert_eq!(plugin.metadata().version, "0.1.0");
    assert_eq!(plugin.metadata().for_.kind, "ConfigMap");
    assert!(
        plugin.digest().starts_with("sha256:"),
        "{}",
        plugin.digest()
    );
}

#[tokio::test]
async fn a_file_that_is_not_wasm_is_refused_naming_the_file() {
    let path = temp_file("not-wasm.wasm", b"hello, I am not WebAssembly");
    let err = runtime().load_file(&path, spec("bad")).await.unwrap_err();
    assert!(matches!(err, LoadError::NotWasm { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("not-wasm.wasm") && msg.contains("not a WebAssembly file"),
        "{msg}"
    );
}

#[tokio::test]
async fn a_core_module_is_refused_as_not_a_component() {
    // The smallest valid core module: magic + version 1.
    let path = temp_file("core.wasm", b"\0asm\x01\0\0\0");
    let err = runtime().load_file(&path, spec("core")).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, LoadError::CoreModule { .. }), "{err:?}");
    assert!(
        msg.contains("core.wasm") && msg.contains("not a component"),
        "{msg}"
    );
}

#[tokio::test]
async fn a_truncated_component_is_refused_as_invalid() {
    let bytes = std::fs::read(artifacts::NOOP).unwrap();
    let path = temp_file("truncated.wasm", &bytes[..bytes.len() / 2]);
    let err = runtime()
        .load_file(&path, spec("truncated"))
        .await
        .unwrap_err();
    assert!(matches!(err, LoadError::Compile { .. }), "{err:?}");
    assert!(err.to_string().contains("truncated.wasm"), "{err}");
}

#[tokio::test]
async fn a_missing_file_is_refused_naming_the_file() {
    let err = runtime()
        .load_file("/nonexistent/gone.wasm", spec("gone"))
        .await
        .unwrap_err();
    assert!(matches!(err, LoadError::Read { .. }), "{err:?}");
    assert!(err.to_string().contains("/nonexistent/gone.wasm"), "{err}");
}

#[tokio::test]
async fn a_component_of_the_wrong_world_is_refused_naming_the_mismatch() {
    let err = runtime()
        .load_file(artifacts::WRONG_WORLD, spec("wrong"))
        .await
        .unwrap_err();
    assert!(matches!(err, LoadError::WrongWorld { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("wrong_world.wasm"), "{msg}");
    assert!(
        msg.contains(wasmctrl::ops::source::artifact::RECONCILER_WORLD),
        "{msg}"
    );
    assert!(
        msg.contains("metadata") || msg.contains("reconcile"),
        "names the export: {msg}"
    );
}

#[tokio::test]
async fn a_component_missing_an_export_is_refused_naming_it() {
    let err = runtime()
        .load_file(artifacts::MISSING_EXPORT, spec("missing"))
        .await
        .unwrap_err();
    match &err {
        LoadError::MissingExport { export, .. } => assert_eq!(*export, "metadata"),
        other => panic!("expected MissingExport, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("missing_export.wasm") && msg.contains("`metadata`"),
        "{msg}"
    );
}

#[tokio::test]
async fn compiled_components_are_reused_from_memory_and_across_restarts() {
    let dir = std::env::temp_dir().join(format!("wasmctrl-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = RuntimeConfig {
        max_instances: 8,
        cache_dir: Some(dir.clone()),
        ..RuntimeConfig::default()
    };
    let first = runtime_with(config.clone());
    let a = load(&first, "noop", artifacts::NOOP, Limits::default()).await;
    assert_eq!(a.cache_hit(), CacheHit::Compiled);
    let b = load(&first, "noop", artifacts::NOOP, Limits::default()).await;
    assert_eq!(b.cache_hit(), CacheHit::Memory);
    assert_eq!(a.digest(), b.digest());
    // A new runtime (a restarted host) finds the precompiled artifact on disk.
    let second = runtime_with(config);
    let c = load(&second, "noop", artifacts::NOOP, Limits::default()).await;
    assert_eq!(c.cache_hit(), CacheHit::Disk);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn metadata_blocked_in_a_wasi_poll_is_stopped_by_the_backstop() {
    // The guest sleeps an hour in `metadata`: it runs no wasm, so epochs
    // cannot interrupt it; the backstop timer must.
    let started = std::time::Instant::now();
    let err = runtime()
        .load_file(artifacts::HOSTILE_BLOCK_IN_METADATA, spec("blocked"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            LoadError::Metadata {
                kind: wasmctrl::TrapKind::Deadline,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_tampered_compiled_artifact_is_recompiled_not_loaded() {
    let dir = std::env::temp_dir().join(format!("wasmctrl-cache-mac-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = RuntimeConfig {
        max_instances: 8,
        cache_dir: Some(dir.clone()),
        ..RuntimeConfig::default()
    };
    let a = load(
        &runtime_with(config.clone()),
        "noop",
        artifacts::NOOP,
        Limits::default(),
    )
    .await;
    assert_eq!(a.cache_hit(), CacheHit::Compiled);
    let artifact = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .expect("a compiled artifact on disk");
    // Flip one byte of the machine code: the MAC no longer matches.
    let mut bytes = std::fs::read(&artifact).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&artifact, &bytes).unwrap();
    let refused = || wasmctrl::control::metrics::disk_refusals(DiskRefusal::CompiledArtifact);
    let before = refused();
    let b = load(
        &runtime_with(config.clone()),
        "noop",
        artifacts::NOOP,
        Limits::default(),
    )
    .await;
    assert_eq!(
        b.cache_hit(),
        CacheHit::Compiled,
        "a tampered artifact was loaded"
    );
    assert!(refused() > before, "the refusal is counted");
    // A new key (another host's cache) also refuses the rewritten artifact.
    std::fs::write(dir.join(".key"), [7u8; 32]).unwrap();
    let c = load(
        &runtime_with(config),
        "noop",
        artifacts::NOOP,
        Limits::default(),
    )
    .await;
    assert_eq!(c.cache_hit(), CacheHit::Compiled);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The MAC's key lives beside the artifacts, so an artifact is loaded only
/// from a directory no one but the host's user can write, and only from a
/// regular file.
#[tokio::test]
async fn an_artifact_in_a_directory_others_can_write_is_not_loaded() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("wasmctrl-cache-open-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = RuntimeConfig {
        max_instances: 8,
        cache_dir: Some(dir.clone()),
        ..RuntimeConfig::default()
    };
    let hit = || async {
        load(
            &runtime_with(config.clone()),
            "noop",
            artifacts::NOOP,
            Limits::default(),
        )
        .await
        .cache_hit()
    };
    assert_eq!(hit().await, CacheHit::Compiled);
    assert_eq!(hit().await, CacheHit::Disk);
    let refused = || wasmctrl::control::metrics::disk_refusals(DiskRefusal::CompiledArtifact);
    let before = refused();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(
        hit().await,
        CacheHit::Compiled,
        "an artifact was loaded from a directory anyone can write"
    );
    assert!(refused() > before, "the refusal is counted");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(hit().await, CacheHit::Disk);
    // An artifact that is a link to a device is refused, not read forever.
    let artifact = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .expect("a compiled artifact on disk");
    std::fs::remove_file(&artifact).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &artifact).unwrap();
    assert_eq!(hit().await, CacheHit::Compiled);
    assert!(
        std::fs::symlink_metadata(&artifact).unwrap().is_file(),
        "the link was replaced by the recompiled artifact"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_version_no_plugin_holds_is_evicted_from_memory() {
    let rt = runtime();
    let a = load(&rt, "noop", artifacts::NOOP, Limits::default()).await;
    let b = load(&rt, "misbehave", artifacts::MISBEHAVE, Limits::default()).await;
    assert_eq!(rt.resident_components(), 2);
    drop(a);
    assert_eq!(rt.resident_components(), 1, "the dropped version is freed");
    let again = load(&rt, "noop", artifacts::NOOP, Limits::default()).await;
    assert_eq!(again.cache_hit(), CacheHit::Compiled);
    drop((b, again));
    assert_eq!(rt.resident_components(), 0);
}

#[tokio::test]
async fn metadata_past_a_bound_is_refused_naming_it_and_counted() {
    let metrics = std::sync::Arc::new(wasmctrl::control::metrics::Metrics::new());
    let runtime = wasmctrl::sandbox::Runtime::new(crate::test_runtime_config(), metrics.clone())
        .expect("runtime starts");
    let err = runtime
        .load_file(artifacts::HOSTILE_HUGE_METADATA, spec("huge"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LoadError::InvalidMetadata { message, .. }
            if message.contains("owns (33)") && message.contains("at most 32")),
        "{err}"
    );
    let line = r#"wasmctrl_plugin_limit_exceeded_total{plugin="huge",limit="metadata",version="stable"} 1"#;
    let exposition = metrics.encode();
    assert!(
        exposition.lines().any(|l| l == line),
        "{line} not in\n{exposition}"
    );
}

#[tokio::test]
async fn a_component_past_its_tables_is_refused_at_load_naming_it_and_counted() {
    let metrics = std::sync::Arc::new(wasmctrl::control::metrics::Metrics::new());
    let runtime = wasmctrl::sandbox::Runtime::new(crate::test_runtime_config(), metrics.clone())
        .expect("runtime starts");
    let err = runtime
        .load_file(artifacts::MANY_TABLES, spec("tables"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LoadError::ExceedsLimits { message, .. }
            if message.contains("33 tables") && message.contains("limits.tables")),
        "{err}"
    );
    let line = r#"wasmctrl_plugin_limit_exceeded_total{plugin="tables",limit="tables",version="stable"} 1"#;
    let exposition = metrics.encode();
    assert!(
        exposition.lines().any(|l| l == line),
        "{line} not in\n{exposition}"
    );
}

/// Nothing counts a component's core instances before it runs, so the
/// store refuses the one past `limits.instances` while `metadata`'s
/// instance is being created, and the load fails naming the limit.
#[tokio::test]
async fn a_component_past_its_core_instances_is_refused_at_instantiation_and_counted() {
    let metrics = std::sync::Arc::new(wasmctrl::control::metrics::Metrics::new());
    let runtime = wasmctrl::sandbox::Runtime::new(crate::test_runtime_config(), metrics.clone())
        .expect("runtime starts");
    let err = runtime
        .load_file(artifacts::MANY_INSTANCES, spec("instances"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, LoadError::Metadata { kind: TrapKind::Limit, message, .. }
            if message.contains("instance count too high at 33")
                && message.contains("limits.instances")),
        "{err}"
    );
    let line = r#"wasmctrl_plugin_limit_exceeded_total{plugin="instances",limit="instances",version="stable"} 1"#;
    let exposition = metrics.encode();
    assert!(
        exposition.lines().any(|l| l == line),
        "{line} not in\n{exposition}"
    );
    // Within a ceiling raised past its count, the same component is
    // instantiated: it is refused for its count, not for what it is.
    let err = runtime
        .load_file(
            artifacts::MANY_INSTANCES,
            PluginSpec {
                limits: Limits {
                    instances: 64,
                    ..Limits::default()
                },
                ..spec("instances")
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            LoadError::Metadata {
                kind: TrapKind::Panic,
                ..
            }
        ),
        "{err}"
    );
}
