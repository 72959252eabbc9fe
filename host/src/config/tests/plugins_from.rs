//! `pluginsFrom` and `maxGrant`: plugins defined as objects.

use super::*;

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
fn plugins_from_max_loading_bytes_defaults_to_a_gibibyte_within_its_range() {
    let head = "apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\n";
    let c = parse(&format!("{head}pluginsFrom: {{ kind: WasmReconciler }}\n")).unwrap();
    assert_eq!(c.plugins_from.unwrap().max_loading_bytes, 1 << 30);
    let c = parse(&format!(
        "{head}pluginsFrom: {{ kind: WasmReconciler, maxLoadingBytes: 512Mi }}\n"
    ))
    .unwrap();
    assert_eq!(c.plugins_from.unwrap().max_loading_bytes, 512 << 20);
    for value in ["512Ki", "65Gi"] {
        let err = parse(&format!(
            "{head}pluginsFrom: {{ kind: WasmReconciler, maxLoadingBytes: {value} }}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("pluginsFrom.maxLoadingBytes") && err.contains("1Mi"),
            "{value}: {err}"
        );
    }
}
