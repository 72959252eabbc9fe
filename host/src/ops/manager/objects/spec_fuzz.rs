//! A WasmReconciler's `spec` is written by whoever may create the object:
//! any JSON there becomes a plugin config or a refusal with a reason,
//! never a panic, and a spec that is accepted is one the host config
//! would accept as a plugin entry, within `maxGrant` and `maxApiQps`.
//! `PROPTEST_CASES` scales the run (`scripts/fuzz-campaign.sh`).

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::config::HostConfig;

/// The reasons a refusal can give.
const REASONS: &[&str] = &[
    "InvalidName",
    "InvalidSpec",
    "FileSourceNotAllowed",
    "GrantExceedsMaxGrant",
    "LimitsExceedMaxApiQps",
    "SourceNotAllowed",
];

fn from() -> PluginsFrom {
    serde_json::from_value(
        json!({"kind": KIND, "namespace": "wasmctrl-system", "maxApiQps": 200.0}),
    )
    .unwrap()
}

fn ceiling() -> Vec<PermissionRule> {
    vec![PermissionRule {
        group: String::new(),
        resources: vec!["configmaps".into()],
        verbs: vec!["get".into(), "list".into(), "watch".into(), "patch".into()],
        namespaces: None,
    }]
}

/// The object as the host gets it: JSON from the API server, parsed as
/// the watcher parses it (serde_json's depth limit of 128 included, which
/// is what bounds the recursion of everything below); None when that
/// parse refuses it, so it never reaches the host.
fn object(name: &str, spec: Value) -> Option<DynamicObject> {
    let text = json!({
        "apiVersion": "wasmctrl.dev/v1alpha1", "kind": KIND,
        "metadata": {"name": name, "generation": 1},
        "spec": spec,
    })
    .to_string();
    serde_json::from_str(&text).ok()
}

/// A spec with every field the host reads.
fn sample() -> Value {
    json!({
        "source": {"oci": "registry.example.com/p/stamp:1", "pollInterval": "2s", "imagePullSecret": "regcred"},
        "maxConcurrentReconciles": 2,
        "reconcileTimeout": "5s",
        "fuel": 1_000_000,
        "memoryLimit": "32Mi",
        "maxRetries": 5,
        "rateLimiter": {"baseDelay": "10ms", "maxDelay": "1m", "qps": 10, "burst": 100},
        "namespaces": ["default"],
        "resyncPeriod": "1h",
        "permissions": [{"group": "", "resources": ["configmaps"], "verbs": ["get", "patch"]}],
        "settings": {"x": [1, {"y": null}]},
        "limits": {"hostCalls": 100, "apiQps": 50, "apiBurst": 100},
        "instanceMode": "reuse",
        "maxCallsPerInstance": 100,
        "maxInstanceAge": "10m",
        "skipUnchanged": true,
        "candidate": {"source": {"oci": "registry.example.com/p/stamp:2"}, "mode": "canary", "canary": {"percent": 20}},
    })
}

#[test]
fn the_sample_is_accepted() {
    let c = plugin_config(
        &object("stamp", sample()).unwrap(),
        &from(),
        Some(&ceiling()),
    );
    assert!(c.is_ok(), "{c:?}");
}

/// Arbitrary JSON, its keys and strings biased to a plugin entry's.
fn json() -> impl Strategy<Value = Value> {
    let words = vec![
        "source",
        "oci",
        "url",
        "file",
        "path",
        "pollInterval",
        "insecure",
        "imagePullSecret",
        "dockerConfig",
        "maxConcurrentReconciles",
        "reconcileTimeout",
        "fuel",
        "memoryLimit",
        "maxRetries",
        "rateLimiter",
        "baseDelay",
        "maxDelay",
        "qps",
        "burst",
        "namespaces",
        "resyncPeriod",
        "idleUnload",
        "permissions",
        "group",
        "resources",
        "verbs",
        "settings",
        "limits",
        "hostCalls",
        "apiQps",
        "apiBurst",
        "instanceMode",
        "maxCallsPerInstance",
        "maxInstanceAge",
        "maxInstanceMemory",
        "skipUnchanged",
        "candidate",
        "mode",
        "canary",
        "percent",
        "record",
        "dir",
        "name",
        "5s",
        "1h",
        "0s",
        "64Mi",
        "1Ei",
        "x/y:1",
        "127.0.0.1:5000/p/s:1",
        "https://example.com/p.wasm",
        "reuse",
        "fresh",
        "shadow",
        "get",
        "configmaps",
        "secrets",
        "*",
        "default",
        "",
    ];
    let extra = prop_oneof![
        "[0-9]{1,25}(\\.[0-9]{1,3})?(ns|ms|s|m|h|Ki|Mi|Gi|Ei|)".prop_map(Value::from),
        (1usize..100_000).prop_map(|n| Value::from("a".repeat(n))),
    ];
    crate::fuzz::json(words, 3, extra.boxed(), 6)
}

/// Values no field should meet.
fn hostile() -> impl Strategy<Value = Value> {
    prop_oneof![
        json(),
        Just(json!(-1)),
        Just(json!(0)),
        Just(json!(u64::MAX)),
        Just(json!(1e300)),
        Just(json!(f64::MIN_POSITIVE)),
        Just(json!("18446744073709551616s")),
        Just(json!("99999999999999999999h")),
        Just(json!("1e308Ei")),
        Just(json!("/etc/shadow")),
        (100usize..300).prop_map(|n| {
            let mut v = json!(0);
            for _ in 0..n {
                v = json!([v]);
            }
            v
        }),
        (0usize..2_000).prop_map(|n| {
            Value::Array(vec![
                json!({"group": "", "resources": ["configmaps"], "verbs": ["get"]});
                n
            ])
        }),
        (1usize..500_000).prop_map(|n| json!("\n".repeat(n))),
    ]
}

/// The sample, with one field replaced or one key added.
fn mutated() -> impl Strategy<Value = Value> {
    let mut at = Vec::new();
    crate::fuzz::pointers(&sample(), String::new(), &mut at);
    at.retain(|p| !p.is_empty());
    prop_oneof![
        (prop::sample::select(at), hostile()).prop_map(|(at, new)| {
            let mut v = sample();
            *v.pointer_mut(&at).unwrap() = new;
            v
        }),
        (json(), hostile()).prop_map(|(k, new)| {
            let mut v = sample();
            let key = k
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| k.to_string());
            v[key] = new;
            v
        }),
    ]
}

/// The host config that has `spec`'s entry as its only plugin, less the
/// Secret an object's sources may name (a host config names a file
/// instead).
fn host_config_with(spec: &Value, name: &str) -> Result<HostConfig, String> {
    let mut entry = spec.clone();
    entry["name"] = Value::from(name);
    for source in ["/source", "/candidate/source"] {
        if let Some(Value::Object(s)) = entry.pointer_mut(source) {
            s.remove("imagePullSecret");
        }
    }
    let text =
        json!({"apiVersion": "wasmctrl.dev/v1alpha1", "kind": "HostConfig", "plugins": [entry]});
    // JSON is YAML, but a YAML file may not hold control characters raw:
    // every character past ASCII goes in as a YAML escape.
    let mut yaml = String::new();
    for c in text.to_string().chars() {
        match c as u32 {
            0x20..0x7f => yaml.push(c),
            n @ ..=0xffff => yaml.push_str(&format!("\\u{n:04x}")),
            n => yaml.push_str(&format!("\\U{n:08x}")),
        }
    }
    HostConfig::parse(Path::new("wasmctrl.yaml"), &yaml, PathBuf::from("/"))
        .map_err(|e| e.to_string())
}

fn config_or_refusal(name: &str, spec: Value) -> Result<(), TestCaseError> {
    let ceiling = ceiling();
    let Some(object) = object(name, spec.clone()) else {
        return Ok(());
    };
    match plugin_config(&object, &from(), Some(&ceiling)) {
        Ok(c) => {
            prop_assert_eq!(&c.name, name);
            prop_assert!(check_plugin_name(&c.name).is_ok());
            prop_assert!(c.check().is_ok(), "{:?}", c.check());
            prop_assert!(c.record.is_none());
            prop_assert!(c.file(Path::new("")).is_none());
            prop_assert!(
                ceiling::exceeding(&c.permissions, c.namespaces.as_deref(), &ceiling).is_empty()
            );
            prop_assert!(c.limits.api_qps.is_none_or(|q| q <= 200.0));
            prop_assert!(c.limits.api_burst.is_none_or(|b| b <= 400));
            prop_assert!(c.reconcile_timeout <= std::time::Duration::from_secs(3600));
            // The same entry in the host config: the same checks. One
            // difference in reading, not in checking: serde reads a struct
            // from a JSON array positionally (`limits: []` is the
            // defaults), which the YAML reader of the host config refuses;
            // the values read are checked the same either way (above).
            let host = host_config_with(&spec, name);
            if host
                .as_ref()
                .is_err_and(|e| e.contains("invalid type: sequence, expected struct"))
            {
                return Ok(());
            }
            prop_assert!(
                host.is_ok(),
                "accepted as an object, refused as a host entry: {:?}",
                host.err()
            );
            let mut expected = c.clone();
            if let Some(s) = &mut expected.source {
                s.image_pull_secret = None;
            }
            if let Some(s) = expected.candidate.as_mut().and_then(|c| c.source.as_mut()) {
                s.image_pull_secret = None;
            }
            // Settings go to the guest unchecked, and the YAML reader
            // rounds some extreme floats one unit differently.
            let mut host = host.unwrap().plugins.remove(0);
            host.settings = Value::Null;
            expected.settings = Value::Null;
            if let (Some(h), Some(e)) = (&mut host.candidate, &mut expected.candidate) {
                (h.settings, e.settings) = (None, None);
            }
            prop_assert_eq!(&host, &expected);
        }
        Err(r) => {
            prop_assert!(REASONS.contains(&r.reason), "{r}");
            prop_assert!(!r.message.is_empty());
            prop_assert!(r.message.len() <= MAX_MESSAGE, "{} bytes", r.message.len());
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn any_json_spec_is_a_plugin_config_or_refused(spec in json()) {
        config_or_refusal("stamp", spec)?;
    }

    #[test]
    fn a_mutated_spec_is_a_plugin_config_or_refused(spec in mutated()) {
        config_or_refusal("stamp", spec)?;
    }

    #[test]
    fn any_object_name_is_a_plugin_name_or_refused(name in ".{0,80}|[a-z0-9-]{0,70}") {
        config_or_refusal(&name, sample())?;
    }
}
