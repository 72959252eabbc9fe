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
fn limits_have_defaults_and_ranges() {
    let c = parse(FULL).unwrap();
    let l = &c.plugins[0].limits;
    assert_eq!(l.host_calls, 10_000);
    assert_eq!(l.output_bytes, 1 << 20);
    let text = FULL.replace(
        "    settings: { replicasDefault: 2 }",
        "    settings: { replicasDefault: 2 }\n    limits: { hostCalls: 5, outputBytes: 4Ki, apiQps: 5, instances: 999 }",
    );
    let err = parse(&text).unwrap_err().to_string();
    assert!(
        err.contains("limits.instances") && err.contains("between 1 and 64"),
        "{err}"
    );
    let ok = text.replace("instances: 999", "instances: 16");
    let c = parse(&ok).unwrap();
    assert_eq!(c.plugins[0].limits.host_calls, 5);
    assert_eq!(c.plugins[0].limits.output_bytes, 4096);
    assert_eq!(c.plugins[0].limits.api_qps, Some(5.0));
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

#[test]
fn a_source_is_a_path_or_a_file_source_but_not_both() {
    let source = FULL.replace(
        "path: ../../target/wasm32-wasip2/release/webapp.wasm",
        "source: { file: ../../target/wasm32-wasip2/release/webapp.wasm }",
    );
    let c = parse(&source).unwrap();
    assert_eq!(
        c.plugins[0].source(),
        parse(FULL).unwrap().plugins[0].source()
    );
    let both = FULL.replace(
        "    maxConcurrentReconciles: 2",
        "    source: { file: x.wasm }\n    maxConcurrentReconciles: 2",
    );
    assert!(parse(&both).unwrap_err().to_string().contains("not both"));
    let neither = FULL.replace(
        "    path: ../../target/wasm32-wasip2/release/webapp.wasm\n",
        "",
    );
    assert!(
        parse(&neither)
            .unwrap_err()
            .to_string()
            .contains("plugins[0].source")
    );
}

#[test]
fn lease_timings_default_in_client_go_proportions() {
    let c = parse(&FULL.replace("retryPeriod: 1s ", "")).unwrap();
    let le = &c.leader_election;
    assert_eq!(le.lease_duration, Duration::from_secs(10));
    assert!(le.retry_period < le.renew_deadline && le.renew_deadline < le.lease_duration);
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

#[test]
fn idle_unload_is_off_by_default_and_needs_the_compiled_cache() {
    let head = "apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\n";
    let off = parse(&format!(
        "{head}plugins:\n  - {{ name: a, path: a.wasm }}\n"
    ))
    .unwrap();
    assert_eq!(off.plugins[0].idle_unload, None);
    let on = parse(&format!(
        "{head}runtime: {{ cacheDir: cache }}\nplugins:\n  - {{ name: a, path: a.wasm, idleUnload: 5m }}\n"
    ))
    .unwrap();
    assert_eq!(on.plugins[0].idle_unload, Some(Duration::from_secs(300)));
    let e = parse(&format!(
        "{head}plugins:\n  - {{ name: a, path: a.wasm, idleUnload: 5m }}\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("plugins[0].idleUnload") && e.contains("runtime.cacheDir"),
        "{e}"
    );
    let e = parse(&format!(
        "{head}runtime: {{ cacheDir: cache }}\nplugins:\n  - {{ name: a, path: a.wasm, idleUnload: 0s }}\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("idleUnload"), "{e}");
}

#[test]
fn plugins_from_objects_and_their_max_grant() {
    let c = parse(
        r#"
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
pluginsFrom: { kind: WasmReconciler, namespace: wasmctrl-system, allowFileSources: true }
maxGrant:
  - { group: "", resources: [configmaps], verbs: [get, list, watch, patch], namespaces: [default] }
"#,
    )
    .unwrap();
    let from = c.plugins_from.unwrap();
    assert_eq!(from.namespace, "wasmctrl-system");
    assert!(from.allow_file_sources);
    assert_eq!(
        c.max_grant.unwrap()[0].namespaces.as_deref(),
        Some(&["default".to_string()][..])
    );
    // Defaults: the `default` namespace, no files; maxGrant unset.
    let c = parse("apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\npluginsFrom: { kind: WasmReconciler }\n").unwrap();
    let from = c.plugins_from.unwrap();
    assert_eq!(
        (from.namespace.as_str(), from.allow_file_sources),
        ("default", false)
    );
    assert_eq!(c.max_grant, None);
    for (text, words) in [
        (
            "pluginsFrom: { kind: ConfigMap }",
            "pluginsFrom.kind: must be \"WasmReconciler\"",
        ),
        (
            "pluginsFrom: { kind: WasmReconciler, namespace: Bad_NS }",
            "pluginsFrom.namespace",
        ),
        (
            "maxGrant: [ { resources: [configmaps], verbs: [steal] } ]",
            "maxGrant[0].verbs: unknown verb",
        ),
        (
            "maxGrant: [ { resources: [], verbs: [get] } ]",
            "maxGrant[0]: needs at least one resource",
        ),
        (
            "plugins: [ { name: p, source: { oci: \"r.example/p:1\", imagePullSecret: regcred } } ]",
            "plugins[0].source.imagePullSecret (plugin \"p\"): only applies to WasmReconciler objects",
        ),
    ] {
        let err = parse(&format!(
            "apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\n{text}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains(words), "{text}: {err}");
    }
}

#[test]
fn plugins_from_max_api_qps_defaults_to_the_host_budget_and_cannot_exceed_it() {
    let head = "apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\n";
    let c = parse(&format!("{head}pluginsFrom: {{ kind: WasmReconciler }}\n")).unwrap();
    let from = c.plugins_from.unwrap();
    assert_eq!(from.max_api_qps, None);
    assert_eq!(from.max_api_qps(&c.runtime), 200.0);
    let c = parse(&format!(
        "{head}runtime: {{ apiQps: 100 }}\npluginsFrom: {{ kind: WasmReconciler, maxApiQps: 2.5 }}\n"
    ))
    .unwrap();
    let from = c.plugins_from.unwrap();
    assert_eq!(from.max_api_qps, Some(2.5));
    assert_eq!(from.max_api_qps(&c.runtime), 2.5);
    for (text, words) in [
        (
            "pluginsFrom: { kind: WasmReconciler, maxApiQps: 0 }",
            "pluginsFrom.maxApiQps: must be a positive number",
        ),
        (
            "pluginsFrom: { kind: WasmReconciler, maxApiQps: .nan }",
            "pluginsFrom.maxApiQps: must be a positive number",
        ),
        (
            "pluginsFrom: { kind: WasmReconciler, maxApiQps: 201 }",
            "pluginsFrom.maxApiQps: must be at most runtime.apiQps (200): object plugins draw their API requests from that budget (got 201)",
        ),
        (
            "runtime: { apiQps: 10 }\npluginsFrom: { kind: WasmReconciler, maxApiQps: 20 }",
            "must be at most runtime.apiQps (10)",
        ),
        (
            "pluginsFrom: { kind: WasmReconciler, maxApiQPS: 20 }",
            "maxApiQPS",
        ),
    ] {
        let err = parse(&format!("{head}{text}\n")).unwrap_err().to_string();
        assert!(err.contains(words), "{text}: {err}");
    }
}

#[test]
fn plugins_from_allow_hosts_are_checked() {
    let head = "apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\n";
    let c = parse(&format!("{head}pluginsFrom: {{ kind: WasmReconciler }}\n")).unwrap();
    assert!(c.plugins_from.unwrap().allow_hosts.is_empty());
    let c = parse(&format!(
        "{head}pluginsFrom: {{ kind: WasmReconciler, allowHosts: [\"registry.internal:5000\", 10.0.0.7, \"[fd00::7]:443\", \"[::1]\"] }}\n"
    ))
    .unwrap();
    let from = c.plugins_from.unwrap();
    assert_eq!(
        from.allow_hosts,
        [
            "registry.internal:5000",
            "10.0.0.7",
            "[fd00::7]:443",
            "[::1]"
        ]
    );
    let many = (0..65)
        .map(|i| format!("\"h{i}.internal\""))
        .collect::<Vec<_>>()
        .join(", ");
    let long = format!("{}.internal", "a".repeat(250));
    for (list, words) in [
        (
            many.as_str(),
            "pluginsFrom.allowHosts: names 65 hosts; at most 64",
        ),
        (
            "\"\"",
            "pluginsFrom.allowHosts[0]: \"\": not a host name or address",
        ),
        (
            "ok.internal, \"r:0\"",
            "pluginsFrom.allowHosts[1]: \"r:0\": the port must be a number from 1 to 65535",
        ),
        ("\"r:http\"", "the port must be a number"),
        (
            "\"r:5000:1\"",
            "allowHosts[0]: \"r:5000:1\": not a host name",
        ),
        (
            "\"Registry.Internal\"",
            "write the host as a URL shows it: \"registry.internal\"",
        ),
        (
            "\"[0:0::1]:5000\"",
            "write the host as a URL shows it: \"[::1]\"",
        ),
        ("\"::1\"", "allowHosts[0]: \"::1\""),
        ("\"https://r.internal\"", "allowHosts[0]"),
        ("\"r.internal/v2\"", "allowHosts[0]"),
        ("\"user@r.internal\"", "allowHosts[0]"),
        ("\"r_1.internal\"", "letters, digits, '-' and '.' only"),
        ("\"999.0.0.1\"", "allowHosts[0]"),
        (long.as_str(), "is 259 bytes; at most 253"),
    ] {
        let err = parse(&format!(
            "{head}pluginsFrom: {{ kind: WasmReconciler, allowHosts: [{list}] }}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(err.contains(words), "{list}: {err}");
    }
}

#[test]
fn a_candidate_is_checked_like_a_plugin_and_its_mode_like_its_section() {
    let with = |candidate: &str| {
        FULL.replace(
            "    settings: { replicasDefault: 2 }\n",
            &format!(
                "    settings: {{ replicasDefault: 2 }}\n    skipUnchanged: true\n{candidate}"
            ),
        )
    };
    let shadow = parse(&with(
        "    candidate: { path: v2.wasm, mode: shadow, maxConcurrentShadows: 3 }\n",
    ))
    .unwrap();
    let p = &shadow.plugins[0];
    assert!(p.skip_unchanged);
    assert_eq!(p.concurrency(), 2 + 3, "shadow runs take instance slots");
    let c = p.candidate_plugin().unwrap();
    assert_eq!(c.path, Some(PathBuf::from("v2.wasm")));
    assert_eq!(c.settings, p.settings, "the plugin's settings by default");
    assert_eq!(c.candidate, None);

    let canary = parse(&with(
        "    candidate: { path: v2.wasm, mode: canary, settings: { v: 2 }, canary: { percent: 10, maxP99Ratio: 2 } }\n",
    ))
    .unwrap();
    let k = canary.plugins[0]
        .candidate
        .as_ref()
        .unwrap()
        .canary
        .clone()
        .unwrap();
    assert_eq!(
        (k.percent, k.window, k.min_reconciles),
        (10, Duration::from_secs(60), 20)
    );
    assert_eq!(k.max_failure_rate_increase, 0.1);
    assert_eq!(
        canary.plugins[0].concurrency(),
        2,
        "a canary shares the workers"
    );
    assert_eq!(
        canary.plugins[0].candidate_plugin().unwrap().settings,
        serde_json::json!({ "v": 2 })
    );

    for (candidate, expected) in [
        (
            "{ mode: shadow }",
            "plugins[0].candidate.source (plugin \"webapp\"): is required",
        ),
        (
            "{ path: v2.wasm, mode: canary }",
            "candidate.canary (plugin \"webapp\"): is required with mode: canary",
        ),
        (
            "{ path: v2.wasm, mode: shadow, canary: { percent: 5 } }",
            "only applies to mode: canary",
        ),
        (
            "{ path: v2.wasm, mode: canary, canary: { percent: 100 } }",
            "candidate.canary.percent (plugin \"webapp\"): must be between 1 and 99",
        ),
        (
            "{ path: v2.wasm, mode: canary, canary: { percent: 5, maxFailureRateIncrease: 2 } }",
            "must be between 0 and 1",
        ),
        (
            "{ path: v2.wasm, mode: shadow, settings: [1] }",
            "candidate.settings (plugin \"webapp\"): must be a mapping",
        ),
        (
            "{ path: v2.wasm, mode: shadow, maxConcurrentShadows: 0 }",
            "candidate.maxConcurrentShadows",
        ),
        ("{ path: v2.wasm, mode: blue }", "unknown variant"),
    ] {
        let err = parse(&with(&format!("    candidate: {candidate}\n")))
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "{candidate}: {err}");
    }
}

#[test]
fn cpu_quantities_are_millicores() {
    assert_eq!(parse_cpu("100m"), Ok(100));
    assert_eq!(parse_cpu("0.5"), Ok(500));
    assert_eq!(parse_cpu("2"), Ok(2000));
    for bad in [
        "",
        "m",
        "-1",
        "1.2.3",
        "1e3",
        "0",
        "0.0001",
        "10k",
        "99999999999",
    ] {
        let err = parse_cpu(bad).unwrap_err();
        assert!(err.contains(&format!("{bad:?}")), "{bad}: {err}");
    }
}

#[test]
fn guest_cpu_has_defaults_and_is_bounded() {
    let c = parse(FULL).unwrap();
    assert_eq!(c.runtime.guest_cpu.burst, Duration::from_millis(50));
    assert_eq!(c.runtime.guest_cpu.share, 100);
    let with = |guest_cpu: &str| {
        let text = FULL.replace(
            "shutdownTimeout: 45s",
            &format!("shutdownTimeout: 45s\nruntime: {{ guestCpu: {guest_cpu} }}"),
        );
        parse(&text)
    };
    let c = with("{ burst: 20ms, share: 0.25 }").unwrap();
    assert_eq!(c.runtime.guest_cpu.burst, Duration::from_millis(20));
    assert_eq!(c.runtime.guest_cpu.share, 250);
    assert_eq!(with("{ share: 2 }").unwrap().runtime.guest_cpu.share, 2000);
    for (bad, named) in [
        ("{ share: 1m }", "runtime.guestCpu.share"),
        ("{ share: lots }", "invalid CPU quantity"),
        ("{ burst: 0 }", "runtime.guestCpu.burst"),
        ("{ bursts: 1s }", "bursts"),
    ] {
        let err = with(bad).unwrap_err().to_string();
        assert!(err.contains(named), "{bad}: {err}");
    }
}

#[test]
fn the_cache_strips_managed_fields_unless_told_to_keep_them() {
    let c = parse(FULL).unwrap();
    assert!(c.cache.strip_managed_fields);
    assert!(c.cache.options().strip_managed_fields);
    let with = |cache: &str| {
        let text = FULL.replace(
            "shutdownTimeout: 45s",
            &format!("shutdownTimeout: 45s\ncache: {cache}"),
        );
        parse(&text)
    };
    let keep = with("{ stripManagedFields: false }").unwrap();
    assert!(!keep.cache.options().strip_managed_fields);
    for (bad, named) in [
        ("{ stripManagedFields: sometimes }", "stripManagedFields"),
        ("{ managedFields: false }", "managedFields"),
    ] {
        let err = with(bad).unwrap_err().to_string();
        assert!(err.contains(named), "{bad}: {err}");
    }
}
