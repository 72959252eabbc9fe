//! A plugin entry: its source, its limits, unloading it when idle.

use super::*;

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
fn a_plugin_left_at_its_defaults_runs_with_the_sandboxs_defaults() {
    use crate::sandbox::{InstanceMode, Limits, ReuseLimits};
    let c = parse(
        "apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\nplugins:\n  - { name: a, path: a.wasm }\n",
    )
    .unwrap();
    let p = &c.plugins[0];
    assert_eq!(p.sandbox_limits(), Limits::default());
    assert_eq!(InstanceMode::from(p.instance_mode), InstanceMode::Fresh);
    let reuse = p.reuse_limits();
    let defaults = ReuseLimits::default();
    assert_eq!(
        (reuse.max_calls, reuse.max_age),
        (defaults.max_calls, defaults.max_age)
    );
    assert_eq!(reuse.max_memory, 48 << 20, "¾ of the 64Mi memoryLimit");
    assert_eq!(p.limits.list_bytes, 16 << 20);
}

#[test]
fn outbound_rules_are_denied_by_default_checked_and_limited() {
    let head = "apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\n";
    let c = parse(&format!(
        "{head}plugins:\n  - {{ name: a, path: a.wasm }}\n"
    ))
    .unwrap();
    assert!(c.plugins[0].outbound.is_empty());
    assert_eq!(c.plugins[0].outbound_grant().rules().count(), 0);
    let l = &c.plugins[0].limits;
    assert_eq!(
        (
            l.http_requests,
            l.http_request_bytes,
            l.http_response_bytes,
            l.http_connections
        ),
        (100, 1 << 20, 4 << 20, 16)
    );
    let granted = format!(
        "{head}plugins:\n  - name: a\n    path: a.wasm\n    outbound:\n      - {{ url: \"https://api.dns.example/v1\", methods: [GET, PUT] }}\n      - {{ url: \"http://127.0.0.1:8080\", private: true }}\n    limits: {{ httpRequests: 5, httpResponseBytes: 64Ki }}\n"
    );
    let c = parse(&granted).unwrap();
    let grant = c.plugins[0].outbound_grant();
    assert_eq!(grant.rules().count(), 2);
    assert_eq!(grant.limits().requests, 5);
    assert_eq!(grant.limits().response_bytes, 64 << 10);
    for (bad, names) in [
        ("ftp://x.example", "plugins[0].outbound[0]"),
        ("https://user@x.example", "plugins[0].outbound[0]"),
        ("https://a.*.example", "plugins[0].outbound[0]"),
    ] {
        let text = granted.replace("https://api.dns.example/v1", bad);
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains(names), "{bad}: {err}");
    }
    let over = granted.replace("httpRequests: 5", "httpRequests: 0");
    let err = parse(&over).unwrap_err().to_string();
    assert!(err.contains("limits.httpRequests"), "{err}");
}

#[test]
fn secrets_are_checked_naming_the_entry_and_never_widen_the_grant() {
    let head = "apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\n";
    let text = format!(
        "{head}plugins:\n  - name: dns\n    path: a.wasm\n    outbound: [{{ url: \"https://api.dns.example\" }}]\n    secrets:\n      - name: dns-token\n        secretKeyRef: {{ namespace: default, name: dns-provider, key: token }}\n        hosts: [\"https://api.dns.example\"]\n"
    );
    let c = parse(&text).unwrap();
    let grant = c.plugins[0].outbound_grant_with(None);
    let names: Vec<&str> = grant
        .secrets()
        .bindings()
        .map(|b| b.name.as_str())
        .collect();
    assert_eq!(names, ["dns-token"]);
    for (from, to, says) in [
        (
            "name: dns-token",
            "name: Dns_Token",
            "plugins[0].secrets[0]",
        ),
        (
            "secretKeyRef: { namespace: default, name: dns-provider, key: token }",
            "env: TOKEN\n        file: /t",
            "several sources",
        ),
        (
            "\"https://api.dns.example\"]\n",
            "\"https://*.dns.example\"]\n",
            "wildcard",
        ),
        ("secretKeyRef:", "secretRef:", "unknown field `secretRef`"),
    ] {
        let bad = text.replacen(from, to, 1);
        let err = parse(&bad).unwrap_err().to_string();
        assert!(err.contains(says), "{to}: {err}");
    }
    let twice = text.replace(
        "    secrets:\n",
        "    secrets:\n      - { name: dns-token, env: T, hosts: [\"https://x.example\"] }\n",
    );
    let err = parse(&twice).unwrap_err().to_string();
    assert!(
        err.contains("plugins[0].secrets[1].name") && err.contains("second secret"),
        "{err}"
    );
}

#[test]
fn a_grant_names_at_most_64_namespaces_rules_and_entries_per_list() {
    let head = "apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\n";
    let plugin = |extra: &str| {
        parse(&format!(
            "{head}plugins:\n  - {{ name: a, path: a.wasm{extra} }}\n"
        ))
    };
    let list = |n: usize, prefix: &str| {
        (0..n)
            .map(|i| format!("{prefix}{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    assert!(plugin(&format!(", namespaces: [{}]", list(64, "n"))).is_ok());
    let e = plugin(&format!(", namespaces: [{}]", list(65, "n")))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("names 65 namespaces; a plugin names at most 64"),
        "{e}"
    );

    let rule = "{ group: \"\", resources: [configmaps], verbs: [get] }";
    let rules = |n: usize| vec![rule; n].join(", ");
    assert!(plugin(&format!(", permissions: [{}]", rules(64))).is_ok());
    let e = plugin(&format!(", permissions: [{}]", rules(65)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("names 65 rules; at most 64"), "{e}");

    let e = plugin(&format!(
        ", permissions: [{{ group: \"\", resources: [{}], verbs: [get] }}]",
        list(65, "r")
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("permissions[0].resources")
            && e.contains("names 65 entries; a rule names at most 64"),
        "{e}"
    );
}
