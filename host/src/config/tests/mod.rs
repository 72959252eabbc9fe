//! The config as a whole: parsing, defaults, errors naming file, line,
//! field and plugin; each section's own cases are in the files beside.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;

mod plugin;
mod plugins_from;
mod rollout;
mod sections;
mod source;
mod units;

const FILE: &str = "/etc/wasmctrl/wasmctrl.yaml";

fn parse(text: &str) -> Result<HostConfig, ConfigError> {
    HostConfig::parse(Path::new(FILE), text, PathBuf::from("/etc/wasmctrl"))
}

const FULL: &str = r#"
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
admin: { bind: "127.0.0.1:9191" }
shutdownTimeout: 45s
leaderElection: { enabled: true, namespace: kube-system, leaseName: ctl, leaseDuration: 10s, retryPeriod: 1s }
plugins:
  - name: webapp
    path: ../../target/wasm32-wasip2/release/webapp.wasm
    maxConcurrentReconciles: 2
    reconcileTimeout: 10s
    fuel: 500000000
    memoryLimit: 64Mi
    maxRetries: 20
    rateLimiter: { baseDelay: 5ms, maxDelay: 5m, qps: 10, burst: 100 }
    namespaces: [default]
    resyncPeriod: 1h30m
    permissions:
      - { group: apps, resources: [deployments], verbs: [get, list, watch, create, patch, delete] }
    settings: { replicasDefault: 2 }
"#;

#[test]
fn parses_every_field() {
    let c = parse(FULL).unwrap();
    assert_eq!(c.admin.bind, "127.0.0.1:9191".parse().unwrap());
    assert_eq!(c.shutdown_timeout, Duration::from_secs(45));
    assert!(c.leader_election.enabled);
    assert_eq!(c.leader_election.lease_duration, Duration::from_secs(10));
    let p = &c.plugins[0];
    assert_eq!(p.max_concurrent_reconciles, 2);
    assert_eq!(p.fuel, Some(500_000_000));
    assert_eq!(p.memory_limit, 64 << 20);
    assert_eq!(p.max_retries, Some(20));
    assert_eq!(p.rate_limiter.max_delay, Duration::from_secs(300));
    assert_eq!(p.resync_period, Some(Duration::from_secs(5400)));
    assert_eq!(p.settings["replicasDefault"], 2);
    assert_eq!(
        p.file(&c.base_dir).unwrap(),
        Path::new("/etc/wasmctrl/../../target/wasm32-wasip2/release/webapp.wasm")
    );
}

#[test]
fn defaults_are_client_go_like() {
    let c = parse(
        "apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\nplugins:\n  - { name: a, path: a.wasm }\n",
    )
    .unwrap();
    let p = &c.plugins[0];
    assert_eq!(c.shutdown_timeout, Duration::from_secs(30));
    assert_eq!(p.max_concurrent_reconciles, 1);
    assert_eq!(p.reconcile_timeout, Duration::from_secs(10));
    assert_eq!(p.rate_limiter, RateLimiterConfig::default());
    assert_eq!(p.rate_limiter.base_delay, Duration::from_millis(5));
    assert_eq!(p.memory_limit, 64 << 20);
    assert_eq!(p.settings, serde_json::json!({}));
}

#[test]
fn an_unknown_field_is_an_error_naming_file_line_and_path() {
    let text = FULL.replace("maxRetries: 20", "maxRetrys: 20");
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.starts_with(FILE), "{err}");
    assert!(err.contains("line 14 column 5"), "{err}");
    assert!(
        err.contains("plugins[0].maxRetrys: unknown field `maxRetrys`: did you mean `maxRetries`?"),
        "{err}"
    );
}

#[test]
fn a_bad_duration_names_the_field() {
    let text = FULL.replace("reconcileTimeout: 10s", "reconcileTimeout: 10x");
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.contains("plugins[0].reconcileTimeout"), "{err}");
    assert!(err.contains("unknown unit \"x\""), "{err}");
}

#[test]
fn a_bad_quantity_names_the_field() {
    let text = FULL.replace("memoryLimit: 64Mi", "memoryLimit: 64MB");
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.contains("plugins[0].memoryLimit"), "{err}");
    assert!(err.contains("unknown suffix \"MB\""), "{err}");
}

#[test]
fn semantic_errors_name_the_plugin() {
    let text = FULL.replace("verbs: [get, list", "verbs: [gett, list");
    let err = parse(&text).unwrap_err().to_string();
    assert!(
        err.contains("plugins[0].permissions[0].verbs (plugin \"webapp\")"),
        "{err}"
    );
    assert!(err.contains("unknown verb \"gett\""), "{err}");

    let text = FULL.replace("maxConcurrentReconciles: 2", "maxConcurrentReconciles: 0");
    let err = parse(&text).unwrap_err().to_string();
    assert!(
        err.contains(
            "maxConcurrentReconciles (plugin \"webapp\"): must be between 1 and 1024 (got 0)"
        ),
        "{err}"
    );
}

#[test]
fn wrong_kind_and_duplicate_names_are_refused() {
    let err = parse(&FULL.replace("kind: HostConfig", "kind: Config")).unwrap_err();
    assert!(
        err.to_string().contains("kind: must be \"HostConfig\""),
        "{err}"
    );
    let dup = format!("{FULL}  - {{ name: webapp, path: b.wasm }}\n");
    let err = parse(&dup).unwrap_err();
    assert!(
        err.to_string()
            .contains("plugins[1].name (plugin \"webapp\"): duplicate"),
        "{err}"
    );
}

#[test]
fn a_missing_file_is_named() {
    let err = HostConfig::load(Path::new("/nonexistent/wasmctrl.yaml")).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("/nonexistent/wasmctrl.yaml: cannot read"),
        "{err}"
    );
}

#[test]
fn a_config_path_naming_a_device_a_huge_file_or_binary_is_refused() {
    let err = HostConfig::load(Path::new("/dev/zero"))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("/dev/zero: cannot read") && err.contains("character device"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let huge = dir.path().join("huge.yaml");
    let file = std::fs::File::create(&huge).unwrap();
    file.set_len(crate::config::MAX_CONFIG_BYTES + 1).unwrap();
    let err = HostConfig::load(&huge).unwrap_err().to_string();
    assert!(err.contains("larger than 4194304 bytes"), "{err}");
    let binary = dir.path().join("binary.yaml");
    std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
    let err = HostConfig::load(&binary).unwrap_err().to_string();
    assert!(err.contains("not UTF-8"), "{err}");
}

/// Values that once panicked the host or a task are refused at parse time,
/// naming the field.
#[test]
fn out_of_range_values_are_refused_not_panicked_on() {
    for (from, to, field) in [
        (
            "reconcileTimeout: 10s",
            "reconcileTimeout: 999999999999h",
            "reconcileTimeout",
        ),
        (
            "reconcileTimeout: 10s",
            "reconcileTimeout: 18446744073709551615",
            "reconcileTimeout",
        ),
        ("resyncPeriod: 1h30m", "resyncPeriod: 0", "resyncPeriod"),
        (
            "leaseDuration: 10s",
            "leaseDuration: 9999999999s",
            "leaseDuration",
        ),
        ("retryPeriod: 1s", "retryPeriod: 20s", "retryPeriod"),
        (
            "shutdownTimeout: 45s",
            "shutdownTimeout: 3h",
            "shutdownTimeout",
        ),
        ("memoryLimit: 64Mi", "memoryLimit: 64Gi", "memoryLimit"),
        ("qps: 10", "qps: .inf", "rateLimiter.qps"),
        ("maxDelay: 5m", "maxDelay: 1000000h", "maxDelay"),
        (
            "namespaces: [default]",
            "namespaces: [\"a/b\"]",
            "namespaces",
        ),
        ("namespaces: [default]", "namespaces: []", "namespaces"),
        (
            "group: apps,",
            "group: \"apps/v1?\",",
            "permissions[0].group",
        ),
    ] {
        let text = FULL.replace(from, to);
        assert_ne!(text, FULL, "{from} not in the fixture");
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains(field), "{to}: {err}");
    }
}

#[test]
fn an_admin_address_beyond_loopback_needs_a_token() {
    let open = FULL.replace("127.0.0.1:9191", "0.0.0.0:9191");
    let err = parse(&open).unwrap_err().to_string();
    assert!(
        err.contains("admin.tokenFile") && err.contains("0.0.0.0:9191"),
        "{err}"
    );
    let with_token = open.replace(
        "admin: { bind: \"0.0.0.0:9191\" }",
        "admin: { bind: \"0.0.0.0:9191\", tokenFile: admin-token }",
    );
    assert!(parse(&with_token).is_ok());
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    // Bounded for CI (256 cases each); PROPTEST_CASES=100000 for a long run.
    proptest! {
        /// Any text: an error or a config, never a panic.
        #[test]
        fn any_text_parses_or_is_refused(text in "\\PC{0,300}") {
            let _ = parse(&text);
        }

        /// Any value in any duration, quantity or count field: refused with
        /// the field named, or accepted within its range — never a panic, and
        /// never a value whose arithmetic could overflow.
        #[test]
        fn any_value_in_any_field_is_checked(
            field in prop::sample::select(vec![
                "reconcileTimeout: 10s", "resyncPeriod: 1h30m", "leaseDuration: 10s",
                "retryPeriod: 1s", "shutdownTimeout: 45s", "memoryLimit: 64Mi",
                "maxConcurrentReconciles: 2", "fuel: 500000000", "maxRetries: 20",
                "qps: 10", "burst: 100", "baseDelay: 5ms", "maxDelay: 5m",
            ]),
            value in "[0-9]{1,25}(\\.[0-9]{1,5})?(ns|us|ms|s|m|h|Ki|Mi|Gi|k|M|G|e9|)|-[0-9]{1,5}|\\PC{0,12}",
        ) {
            let key = field.split(':').next().unwrap();
            let text = FULL.replace(field, &format!("{key}: {value:?}"));
            match parse(&text) {
                Ok(c) => {
                    let p = &c.plugins[0];
                    prop_assert!(p.reconcile_timeout <= Duration::from_secs(3600));
                    prop_assert!(p.max_concurrent_reconciles >= 1);
                    prop_assert!(c.leader_election.retry_period < c.leader_election.lease_duration);
                    let _ = std::time::Instant::now() + p.reconcile_timeout + c.shutdown_timeout;
                }
                Err(e) => {
                    let message = e.to_string();
                    prop_assert!(message.contains(FILE), "{message}");
                }
            }
        }
    }
}
