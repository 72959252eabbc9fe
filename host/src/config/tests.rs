use super::*;

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
        p.resolved_path(&c.base_dir),
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
        err.contains("plugins[0].maxRetrys: unknown field `maxRetrys`"),
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
        err.contains("maxConcurrentReconciles (plugin \"webapp\"): must be at least 1"),
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
fn durations_and_quantities() {
    assert_eq!(parse_duration("5ms"), Ok(Duration::from_millis(5)));
    assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
    assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
    assert!(parse_duration("10").is_err());
    assert!(parse_duration("").is_err());
    assert_eq!(parse_quantity("64Mi"), Ok(64 << 20));
    assert_eq!(parse_quantity("1Gi"), Ok(1 << 30));
    assert_eq!(parse_quantity("500M"), Ok(500_000_000));
    assert_eq!(parse_quantity("4096"), Ok(4096));
    assert!(parse_quantity("-1").is_err());
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
