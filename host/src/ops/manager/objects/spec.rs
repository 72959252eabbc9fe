//! A WasmReconciler object as a plugin: its `spec` is a plugin entry of the
//! host config (the same type, [`PluginConfig`], read with the same strict
//! deserializer and the same checks), its name is the plugin's name, and
//! what an object may ask for is further limited (`maxGrant`, no host
//! files unless allowed, credentials only from a Secret).
//!
//! ```yaml
//! apiVersion: wasmctrl.dev/v1alpha1
//! kind: WasmReconciler
//! metadata: { name: stamp }
//! spec:
//!   source: { oci: "registry.example/plugins/stamp:1", pollInterval: 30s, imagePullSecret: regcred }
//!   namespaces: [default]
//!   permissions:
//!     - { group: "", resources: [configmaps], verbs: [get, list, watch, patch] }
//! ```

use std::fmt;

use kube::api::DynamicObject;
use serde_json::Value;

use super::ceiling;
use crate::config::{FieldProblem, PluginConfig, PluginsFrom, check_plugin_name};
use crate::ops::source::Reach;
use crate::sandbox::hostapi::PermissionRule;
use crate::sandbox::outbound::grant_covers;

/// The group, version and kind of the objects.
pub const GROUP: &str = "wasmctrl.dev";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "WasmReconciler";

/// The most bytes of a message put in a condition.
const MAX_MESSAGE: usize = 4096;

/// Why an object's spec does not run: a condition reason (CamelCase) and
/// a message naming what is wrong. `transient` refusals (a registry or
/// Secret not reachable yet) are retried with backoff; the others wait for
/// the object to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
    pub transient: bool,
}

impl Refusal {
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: bounded(message.into()),
            transient: false,
        }
    }

    pub fn transient(mut self) -> Self {
        self.transient = true;
        self
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason, self.message)
    }
}

/// `message`, cut to [`MAX_MESSAGE`] bytes on a character boundary.
pub fn bounded(mut message: String) -> String {
    if message.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE - 3;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

/// Refuses what an object may not ask of a source (`config`'s, given at
/// `at`: the plugin's `spec`, or its `spec.candidate`): a docker config
/// file on the host (credentials come only from an `imagePullSecret`), and
/// files unless the host allows them, and an address that is not public
/// unless `pluginsFrom.allowHosts` names its host (a name is checked again
/// when it resolves, by the source itself).
fn check_source(config: &PluginConfig, at: &str, from: &PluginsFrom) -> Result<(), Refusal> {
    if let Some(source) = &config.source
        && let Err(p) = Reach::for_objects(from).check_source(source)
    {
        return Err(Refusal::new(
            "SourceNotAllowed",
            format!("{at}.source.{}: {}", p.field, p.message),
        ));
    }
    // What an object downloads is held in memory and compiled, on every
    // host: it may lower the fetch defaults, not raise them.
    if let Some(source) = &config.source {
        use crate::config::{DEFAULT_FETCH_TIMEOUT, DEFAULT_MAX_SIZE};
        if let Some(n) = source.max_size
            && n > DEFAULT_MAX_SIZE
        {
            return Err(Refusal::new(
                "SourceNotAllowed",
                format!(
                    "{at}.source.maxSize: {n} bytes is more than an object may download ({DEFAULT_MAX_SIZE} bytes, the default)"
                ),
            ));
        }
        if let Some(t) = source.timeout
            && t > DEFAULT_FETCH_TIMEOUT
        {
            return Err(Refusal::new(
                "SourceNotAllowed",
                format!(
                    "{at}.source.timeout: {t:?} is longer than an object's fetch may take ({DEFAULT_FETCH_TIMEOUT:?}, the default)"
                ),
            ));
        }
    }
    if let Some(source) = &config.source
        && source.docker_config.is_some()
    {
        return Err(Refusal::new(
            "InvalidSpec",
            format!(
                "{at}.source.dockerConfig: names a file on the host; give imagePullSecret: a Secret of type kubernetes.io/dockerconfigjson in namespace {:?}",
                from.namespace
            ),
        ));
    }
    if let Some(source) = &config.source
        && source.insecure
        && source.image_pull_secret.is_some()
        && !source.oci.as_deref().is_some_and(on_loopback)
    {
        return Err(Refusal::new(
            "InvalidSpec",
            format!(
                "{at}.source: insecure: true with imagePullSecret would send the Secret's credentials over plain HTTP, where the network between the host and the registry can read them; drop insecure (TLS), or use a registry on loopback"
            ),
        ));
    }
    if config.file(std::path::Path::new("")).is_some() && !from.allow_file_sources {
        let field = if config.path.is_some() {
            format!("{at}.path")
        } else {
            format!("{at}.source.file")
        };
        return Err(Refusal::new(
            "FileSourceNotAllowed",
            format!(
                "{field}: objects may not name files on the host (set pluginsFrom.allowFileSources: true in the host config to allow it); use an oci or url source"
            ),
        ));
    }
    Ok(())
}

/// Whether an OCI reference's registry is this machine (`localhost`, or a
/// loopback address literal), where plain HTTP crosses no network.
fn on_loopback(reference: &str) -> bool {
    let registry = reference.split('/').next().unwrap_or_default();
    let host = match registry.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or(v6, |(h, _)| h),
        None => registry.split_once(':').map_or(registry, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Refuses API limits above what the host lets an object ask for:
/// `limits.apiQps` above `max_qps` (`pluginsFrom.maxApiQps`, resolved),
/// `limits.apiBurst` above twice that.
fn check_api_rate(config: &PluginConfig, max_qps: f64) -> Result<(), Refusal> {
    let refuse = |message: String| Err(Refusal::new("LimitsExceedMaxApiQps", message));
    if let Some(qps) = config.limits.api_qps
        && qps > max_qps
    {
        return refuse(format!(
            "spec.limits.apiQps: {qps} requests/s is more than the host config lets an object ask for (pluginsFrom.maxApiQps, by default runtime.apiQps: {max_qps})"
        ));
    }
    let max_burst = (max_qps * 2.0).ceil();
    if let Some(burst) = config.limits.api_burst
        && f64::from(burst) > max_burst
    {
        return refuse(format!(
            "spec.limits.apiBurst: {burst} requests is more than the host config lets an object ask for (2 × pluginsFrom.maxApiQps, by default runtime.apiQps: {max_burst})"
        ));
    }
    Ok(())
}

/// An object's `outbound`: each rule within one of
/// `pluginsFrom.maxOutbound` (none by default: the network is the host
/// config's to grant).
fn check_outbound(config: &PluginConfig, from: &PluginsFrom) -> Result<(), Refusal> {
    let ceiling: Vec<_> = from
        .max_outbound
        .iter()
        .filter_map(|r| Some((r, r.target().ok()?)))
        .collect();
    for (i, rule) in config.outbound.iter().enumerate() {
        // Checked by `PluginConfig::check`.
        let Ok(target) = rule.target() else {
            continue;
        };
        let covered = ceiling.iter().any(|(c, t)| {
            grant_covers((t, &c.methods), (&target, &rule.methods)) && (c.private || !rule.private)
        });
        if !covered {
            let why = if ceiling.is_empty() {
                "the host config sets no pluginsFrom.maxOutbound, so objects may be granted no outbound HTTP"
            } else {
                "no rule of pluginsFrom.maxOutbound covers it"
            };
            return Err(Refusal::new(
                "GrantExceedsMaxGrant",
                format!("spec.outbound[{i}] ({rule}): {why}"),
            ));
        }
    }
    Ok(())
}

/// An object's `secrets`: only keys of Secrets in `pluginsFrom.namespace`
/// (a file or an environment variable is the host's own, and another
/// namespace is another team's) that `maxGrant` lets a plugin `get`. The
/// host reads them with its credentials, so without this check an object
/// would borrow the host's reach.
fn check_secrets(
    config: &PluginConfig,
    from: &PluginsFrom,
    ceiling: Option<&[PermissionRule]>,
) -> Result<(), Refusal> {
    for (i, secret) in config.secrets.iter().enumerate() {
        let at = format!("spec.secrets[{i}]");
        let Some(r) = &secret.secret_key_ref else {
            return Err(Refusal::new(
                "GrantExceedsMaxGrant",
                format!(
                    "{at}: a WasmReconciler's secrets come from Secrets only (secretKeyRef): files and environment variables are the host's"
                ),
            ));
        };
        if r.namespace != from.namespace {
            return Err(Refusal::new(
                "GrantExceedsMaxGrant",
                format!(
                    "{at}.secretKeyRef.namespace: {:?} is not {:?}: a WasmReconciler names only Secrets of pluginsFrom.namespace",
                    r.namespace, from.namespace
                ),
            ));
        }
        let read = PermissionRule {
            group: String::new(),
            resources: vec!["secrets".into()],
            verbs: vec!["get".into()],
            namespaces: Some(vec![r.namespace.clone()]),
        };
        if !ceiling::exceeding(&[read], None, ceiling.unwrap_or_default()).is_empty() {
            return Err(Refusal::new(
                "GrantExceedsMaxGrant",
                format!(
                    "{at}: Secret {}/{} may be used only where the host config's maxGrant allows get on core/secrets in namespace {}",
                    r.namespace, r.name, r.namespace
                ),
            ));
        }
    }
    Ok(())
}

/// The plugin `object` defines, checked like a plugin of the host config,
/// then against what objects may ask for: `from` (file sources, API rate:
/// its `maxApiQps` resolved, None: unbounded) and `ceiling` (the host's
/// `maxGrant`; None: no grant at all).
pub fn plugin_config(
    object: &DynamicObject,
    from: &PluginsFrom,
    ceiling: Option<&[PermissionRule]>,
) -> Result<PluginConfig, Refusal> {
    let invalid = |message: String| Refusal::new("InvalidSpec", message);
    let name = object.metadata.name.clone().unwrap_or_default();
    check_plugin_name(&name).map_err(|m| {
        Refusal::new(
            "InvalidName",
            format!("metadata.name {name:?} {m}: it is the plugin's name"),
        )
    })?;
    let mut spec = match object.data.get("spec") {
        Some(Value::Object(spec)) => spec.clone(),
        Some(_) => return Err(invalid("spec: must be a mapping".into())),
        None => return Err(invalid("spec: is required (at least spec.source)".into())),
    };
    if spec.contains_key("name") {
        return Err(invalid(
            "spec.name: not allowed: the object's metadata.name is the plugin's name".into(),
        ));
    }
    spec.insert("name".into(), Value::String(name));
    let config: PluginConfig =
        serde_path_to_error::deserialize(Value::Object(spec)).map_err(|e| {
            let path = e.path().to_string();
            let at = if path == "." {
                "spec".to_string()
            } else {
                format!("spec.{path}")
            };
            invalid(format!("{at}: {}", e.into_inner()))
        })?;
    config
        .check()
        .map_err(|FieldProblem { field, message }| invalid(format!("spec.{field}: {message}")))?;
    // An object's author must not choose where the host writes files.
    if config.record.is_some() {
        return Err(invalid(
            "spec.record: transcripts are written to the host's disk, so only the host config may turn recording on".into(),
        ));
    }
    check_outbound(&config, from)?;
    check_secrets(&config, from, ceiling)?;
    check_source(&config, "spec", from)?;
    // The candidate loads as the plugin with its own source and settings
    // (same name, grant and limits): its source gets the same checks.
    if let Some(candidate) = config.candidate_plugin() {
        check_source(&candidate, "spec.candidate", from)?;
    }
    let over = ceiling::exceeding(
        &config.permissions,
        config.namespaces.as_deref(),
        ceiling.unwrap_or_default(),
    );
    if !over.is_empty() {
        let why = if ceiling.is_none() {
            "the host config sets no maxGrant, so object plugins may be granted nothing"
        } else {
            "they exceed the host config's maxGrant"
        };
        return Err(Refusal::new(
            "GrantExceedsMaxGrant",
            format!("spec.permissions: {why}: {}", over.join("; ")),
        ));
    }
    if let Some(max) = from.max_api_qps {
        check_api_rate(&config, max)?;
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str, spec: Value) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "wasmctrl.dev/v1alpha1",
            "kind": "WasmReconciler",
            "metadata": {"name": name, "generation": 1},
            "spec": spec,
        }))
        .unwrap()
    }

    fn from(files: bool) -> PluginsFrom {
        PluginsFrom {
            kind: KIND.into(),
            namespace: "wasmctrl-system".into(),
            allow_file_sources: files,
            max_api_qps: Some(200.0),
            allow_hosts: vec!["127.0.0.1:5000".into()],
            max_outbound: Vec::new(),
            max_loading_bytes: crate::config::DEFAULT_MAX_LOADING_BYTES,
        }
    }

    fn ceiling() -> Vec<PermissionRule> {
        vec![PermissionRule {
            group: String::new(),
            resources: vec!["configmaps".into()],
            verbs: vec!["get".into(), "list".into(), "watch".into(), "patch".into()],
            namespaces: None,
        }]
    }

    fn refusal(name: &str, spec: Value) -> Refusal {
        plugin_config(&object(name, spec), &from(false), Some(&ceiling())).unwrap_err()
    }

    #[test]
    fn an_object_may_lower_the_fetch_defaults_not_raise_them() {
        let with = |extra: Value| {
            let mut source = serde_json::json!({"oci": "127.0.0.1:5000/p/stamp:1"});
            source
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            serde_json::json!({ "source": source })
        };
        let r = refusal("stamp", with(serde_json::json!({"maxSize": "4Gi"})));
        assert!(
            r.message.contains(
                "spec.source.maxSize: 4294967296 bytes is more than an object may download"
            ),
            "{r}"
        );
        let r = refusal("stamp", with(serde_json::json!({"timeout": "1h"})));
        assert!(
            r.message.contains("spec.source.timeout: 3600s is longer"),
            "{r}"
        );
        let lowered = with(serde_json::json!({"maxSize": "64Mi", "timeout": "1m"}));
        assert!(plugin_config(&object("stamp", lowered), &from(false), Some(&ceiling())).is_ok());
    }

    #[test]
    fn recording_is_refused_on_objects() {
        let r = refusal(
            "stamp",
            serde_json::json!({
                "source": {"oci": "127.0.0.1:5000/p/stamp:1"},
                "record": {"dir": "/etc"},
            }),
        );
        assert!(r.message.contains("spec.record"), "{r:?}");
    }

    #[test]
    fn an_objects_secrets_are_secrets_of_its_namespace_that_max_grant_lets_it_read() {
        let with = |secret: Value| serde_json::json!({"source": {"oci": "127.0.0.1:5000/p/stamp:1"}, "secrets": [secret]});
        let key_ref = |ns: &str| serde_json::json!({"name": "t", "secretKeyRef": {"namespace": ns, "name": "s", "key": "k"}, "hosts": ["https://x.example"]});
        let r = refusal(
            "stamp",
            with(serde_json::json!({"name": "t", "env": "HOME", "hosts": ["https://x.example"]})),
        );
        assert!(
            r.message.contains("spec.secrets[0]")
                && r.message
                    .contains("files and environment variables are the host's"),
            "{r}"
        );
        let r = refusal("stamp", with(key_ref("default")));
        assert!(r.message.contains("not \"wasmctrl-system\""), "{r}");
        // In its namespace, but the ceiling does not let plugins read Secrets.
        let r = refusal("stamp", with(key_ref("wasmctrl-system")));
        assert!(
            r.message
                .contains("maxGrant allows get on core/secrets in namespace wasmctrl-system"),
            "{r}"
        );
        let mut ceiling = ceiling();
        ceiling.push(PermissionRule {
            group: String::new(),
            resources: vec!["secrets".into()],
            verbs: vec!["get".into()],
            namespaces: Some(vec!["wasmctrl-system".into()]),
        });
        let config = plugin_config(
            &object("stamp", with(key_ref("wasmctrl-system"))),
            &from(false),
            Some(&ceiling),
        )
        .unwrap();
        assert_eq!(config.secrets.len(), 1);
    }

    #[test]
    fn outbound_http_on_objects_is_held_to_max_outbound() {
        let with = |outbound: Value| serde_json::json!({"source": {"oci": "127.0.0.1:5000/p/stamp:1"}, "outbound": outbound});
        // Without maxOutbound, none.
        let r = refusal(
            "stamp",
            with(serde_json::json!([{"url": "https://api.example.com"}])),
        );
        assert_eq!(r.reason, "GrantExceedsMaxGrant");
        assert!(
            r.message.contains("spec.outbound[0]")
                && r.message.contains("no pluginsFrom.maxOutbound"),
            "{r:?}"
        );
        let mut from = from(false);
        from.max_outbound = serde_norway::from_str(
            "[{url: 'https://*.example.com/v1', methods: [GET, PUT]}, {url: 'http://10.0.0.7:8080', private: true}]",
        )
        .unwrap();
        let check = |outbound: Value| {
            plugin_config(&object("stamp", with(outbound)), &from, Some(&ceiling()))
        };
        assert!(
            check(
                serde_json::json!([{"url": "https://api.example.com/v1/zones", "methods": ["GET"]}])
            )
            .is_ok()
        );
        assert!(
            check(serde_json::json!([{"url": "http://10.0.0.7:8080", "private": true}])).is_ok()
        );
        for (outbound, says) in [
            (
                serde_json::json!([{"url": "https://api.example.com/v2", "methods": ["GET"]}]),
                "spec.outbound[0]",
            ),
            (
                serde_json::json!([{"url": "https://api.example.com/v1"}]),
                "no rule of pluginsFrom.maxOutbound covers it",
            ),
            (
                serde_json::json!([{"url": "https://example.com/v1", "methods": ["GET"]}]),
                "spec.outbound[0]",
            ),
            (
                serde_json::json!([{"url": "https://a.example.com/v1", "methods": ["GET"], "private": true}]),
                "spec.outbound[0]",
            ),
        ] {
            let r = check(outbound.clone()).unwrap_err();
            assert!(
                r.reason == "GrantExceedsMaxGrant" && r.message.contains(says),
                "{outbound}: {r:?}"
            );
        }
    }

    #[test]
    fn a_candidate_source_gets_the_checks_of_the_plugins_own() {
        let with = |candidate: Value| {
            serde_json::json!({
                "source": {"oci": "127.0.0.1:5000/p/stamp:1"},
                "candidate": candidate,
            })
        };
        for (candidate, field) in [
            (
                serde_json::json!({"path": "/etc/passwd", "mode": "shadow"}),
                "spec.candidate.path: ",
            ),
            (
                serde_json::json!({"source": {"file": "v2.wasm"}, "mode": "shadow"}),
                "spec.candidate.source.file: ",
            ),
        ] {
            let r = refusal("stamp", with(candidate.clone()));
            assert_eq!(r.reason, "FileSourceNotAllowed", "{r}");
            assert!(r.message.starts_with(field), "{r}");
            let allowed = plugin_config(
                &object("stamp", with(candidate)),
                &from(true),
                Some(&ceiling()),
            );
            assert!(allowed.is_ok(), "{allowed:?}");
        }
        let r = refusal(
            "stamp",
            with(serde_json::json!({
                "source": {"oci": "127.0.0.1:5000/p/stamp:2", "dockerConfig": "/root/.docker/config.json"},
                "mode": "shadow",
            })),
        );
        assert!(
            r.message
                .starts_with("spec.candidate.source.dockerConfig: ")
                && r.message.contains("imagePullSecret"),
            "{r}"
        );
        let r = refusal(
            "stamp",
            with(serde_json::json!({"source": {"oci": "x/y"}, "mode": "shadow"})),
        );
        assert!(r.message.starts_with("spec.candidate.source.oci: "), "{r}");
        let r = refusal(
            "stamp",
            with(serde_json::json!({"source": {"oci": "x/y:2"}, "mode": "canary"})),
        );
        assert!(r.message.starts_with("spec.candidate.canary"), "{r}");
        // An oci candidate with its own pull Secret, as a canary.
        let c = plugin_config(
            &object(
                "stamp",
                with(serde_json::json!({
                    "source": {"oci": "127.0.0.1:5000/p/stamp:2", "imagePullSecret": "regcred2"},
                    "settings": {"v": 2},
                    "mode": "canary",
                    "canary": {"percent": 20},
                })),
            ),
            &from(false),
            Some(&ceiling()),
        )
        .unwrap();
        let candidate = c.candidate_plugin().unwrap();
        assert_eq!(
            candidate.source.unwrap().image_pull_secret.as_deref(),
            Some("regcred2")
        );
        assert_eq!(candidate.settings["v"], 2);
        assert_eq!(candidate.permissions, c.permissions);
    }

    #[test]
    fn pull_credentials_over_plain_http_are_refused_off_loopback() {
        for (oci, refused) in [
            ("registry.example:5000/p/stamp:1", true),
            ("registry.example/p/stamp:1", true),
            ("127.0.0.1:5000/p/stamp:1", false),
            ("localhost:5000/p/stamp:1", false),
        ] {
            let spec = serde_json::json!({
                "source": {"oci": oci, "insecure": true, "imagePullSecret": "regcred"},
            });
            let mut from = from(true);
            from.allow_hosts = ["127.0.0.1:5000", "localhost:5000"]
                .map(String::from)
                .to_vec();
            let got = plugin_config(&object("stamp", spec), &from, Some(&ceiling()));
            match got {
                Err(r) if refused => {
                    assert_eq!(r.reason, "InvalidSpec", "{oci}: {r}");
                    assert!(
                        r.message
                            .contains("spec.source: insecure: true with imagePullSecret"),
                        "{r}"
                    );
                }
                Ok(_) if !refused => {}
                other => panic!("{oci}: {:?}", other.map(|c| c.name)),
            }
        }
    }

    #[test]
    fn the_spec_is_a_plugin_entry_named_by_the_object() {
        let spec = serde_json::json!({
            "source": {"oci": "127.0.0.1:5000/p/stamp:1", "pollInterval": "2s", "insecure": true, "imagePullSecret": "regcred"},
            "reconcileTimeout": "5s",
            "memoryLimit": "32Mi",
            "namespaces": ["default"],
            "instanceMode": "reuse",
            "rateLimiter": {"baseDelay": "10ms", "maxDelay": "1m"},
            "settings": {"x": 1},
            "limits": {"hostCalls": 100},
            "permissions": [{"group": "", "resources": ["configmaps"], "verbs": ["get", "patch"]}],
        });
        let c = plugin_config(&object("stamp", spec), &from(false), Some(&ceiling())).unwrap();
        assert_eq!(c.name, "stamp");
        assert_eq!(c.reconcile_timeout, std::time::Duration::from_secs(5));
        assert_eq!(c.memory_limit, 32 << 20);
        assert_eq!(c.limits.host_calls, 100);
        assert_eq!(c.settings["x"], 1);
        assert_eq!(
            c.source.as_ref().unwrap().image_pull_secret.as_deref(),
            Some("regcred")
        );
    }

    #[test]
    fn a_bad_spec_is_refused_naming_the_field() {
        let r = refusal(
            "stamp",
            serde_json::json!({"source": {"oci": "x/y:1"}, "reconcileTimout": "5s"}),
        );
        assert_eq!(r.reason, "InvalidSpec");
        assert!(r.message.contains("reconcileTimout"), "{r}");
        let r = refusal(
            "stamp",
            serde_json::json!({"source": {"oci": "x/y:1"}, "memoryLimit": "lots"}),
        );
        assert!(r.message.starts_with("spec.memoryLimit: "), "{r}");
        let r = refusal("stamp", serde_json::json!({"source": {"oci": "x/y"}}));
        assert!(
            r.message.starts_with("spec.source.oci: ") && r.message.contains("no tag"),
            "{r}"
        );
        let r = refusal(
            "stamp",
            serde_json::json!({"source": {"oci": "x/y:1"}, "maxConcurrentReconciles": 0}),
        );
        assert!(
            r.message.starts_with("spec.maxConcurrentReconciles: "),
            "{r}"
        );
        let r = refusal(
            "stamp",
            serde_json::json!({"name": "other", "source": {"oci": "x/y:1"}}),
        );
        assert!(r.message.starts_with("spec.name: "), "{r}");
        let r = refusal(
            "stamp",
            serde_json::json!({"source": {"oci": "x/y:1", "dockerConfig": "/root/.docker/config.json"}}),
        );
        assert!(
            r.message.contains("imagePullSecret") && r.message.contains("wasmctrl-system"),
            "{r}"
        );
        let r = refusal("Stamp.v2", serde_json::json!({"source": {"oci": "x/y:1"}}));
        assert_eq!(r.reason, "InvalidName");
        let mut no_spec = object("stamp", Value::Null);
        no_spec.data = serde_json::json!({});
        let r = plugin_config(&no_spec, &from(false), None).unwrap_err();
        assert!(r.message.starts_with("spec: is required"), "{r}");
    }

    #[test]
    fn files_only_when_the_host_allows_them() {
        for spec in [
            serde_json::json!({"path": "/etc/shadow"}),
            serde_json::json!({"source": {"file": "plugin.wasm"}}),
        ] {
            let r = refusal("stamp", spec.clone());
            assert_eq!(r.reason, "FileSourceNotAllowed", "{r}");
            assert!(r.message.contains("allowFileSources"), "{r}");
            assert!(plugin_config(&object("stamp", spec), &from(true), Some(&ceiling())).is_ok());
        }
    }

    #[test]
    fn a_grant_beyond_max_grant_is_refused_with_what_exceeds() {
        let spec = serde_json::json!({
            "source": {"oci": "x/y:1"},
            "permissions": [
                {"group": "", "resources": ["configmaps"], "verbs": ["get"]},
                {"group": "", "resources": ["secrets"], "verbs": ["get"], "namespaces": ["default"]},
            ],
        });
        let r = refusal("stamp", spec.clone());
        assert_eq!(r.reason, "GrantExceedsMaxGrant");
        assert!(
            r.message
                .contains("permissions[1]: get core/secrets in namespace default"),
            "{r}"
        );
        assert!(!r.message.contains("permissions[0]"), "{r}");
        // Without maxGrant, any grant is refused.
        let r = plugin_config(&object("stamp", spec), &from(false), None).unwrap_err();
        assert!(
            r.message.contains("sets no maxGrant") && r.message.contains("permissions[0]"),
            "{r}"
        );
    }

    #[test]
    fn api_limits_beyond_max_api_qps_are_refused_naming_both_numbers() {
        let with =
            |limits: Value| serde_json::json!({"source": {"oci": "x/y:1"}, "limits": limits});
        let r = refusal("stamp", with(serde_json::json!({"apiQps": 20000})));
        assert_eq!(r.reason, "LimitsExceedMaxApiQps");
        assert!(
            r.message
                .starts_with("spec.limits.apiQps: 20000 requests/s")
                && r.message.contains("pluginsFrom.maxApiQps")
                && r.message.contains(": 200)"),
            "{r}"
        );
        let r = refusal(
            "stamp",
            with(serde_json::json!({"apiQps": 100, "apiBurst": 401})),
        );
        assert_eq!(r.reason, "LimitsExceedMaxApiQps");
        assert!(
            r.message.starts_with("spec.limits.apiBurst: 401 requests")
                && r.message.contains(": 400)"),
            "{r}"
        );
        for limits in [
            serde_json::json!({"apiQps": 200, "apiBurst": 400}),
            serde_json::json!({}),
        ] {
            let ok = plugin_config(
                &object("stamp", with(limits)),
                &from(false),
                Some(&ceiling()),
            );
            assert!(ok.is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn a_source_reaching_an_internal_address_is_refused_unless_allow_hosts_names_it() {
        let with = |source: Value, candidate: Option<Value>| {
            let mut spec = serde_json::json!({ "source": source });
            if let Some(c) = candidate {
                spec["candidate"] = serde_json::json!({"source": c, "mode": "shadow"});
            }
            spec
        };
        let admin = serde_json::json!({
            "url": "http://127.0.0.1:9090/metrics",
            "sha256": "0".repeat(64),
            "insecure": true,
        });
        let public = serde_json::json!({"oci": "ghcr.io/acme/stamp:1"});
        for (spec, at, allow) in [
            (
                with(admin.clone(), None),
                "spec.source.url: ",
                "127.0.0.1:9090",
            ),
            (
                with(
                    serde_json::json!({"oci": "169.254.169.254/p/stamp:1"}),
                    None,
                ),
                "spec.source.oci: ",
                "169.254.169.254:443",
            ),
            (
                with(public.clone(), Some(admin.clone())),
                "spec.candidate.source.url: ",
                "127.0.0.1:9090",
            ),
        ] {
            let r = refusal("stamp", spec.clone());
            assert_eq!(r.reason, "SourceNotAllowed", "{r}");
            assert!(
                r.message.starts_with(at)
                    && r.message.contains("public addresses")
                    && r.message
                        .contains(&format!("pluginsFrom.allowHosts (here {allow:?})")),
                "{r}"
            );
            assert!(!r.transient);
            let mut allowing = from(false);
            allowing.allow_hosts.push(allow.to_string());
            let ok = plugin_config(&object("stamp", spec), &allowing, Some(&ceiling()));
            assert!(ok.is_ok(), "{ok:?}");
        }
        assert!(plugin_config(&object("stamp", with(public, None)), &from(false), None).is_ok());
    }

    #[test]
    fn messages_are_bounded() {
        let long = bounded("é".repeat(5000));
        assert!(long.len() <= MAX_MESSAGE && long.ends_with('…'));
    }
}

#[cfg(test)]
#[path = "spec_fuzz.rs"]
mod spec_fuzz;
