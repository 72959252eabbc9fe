//! The checks and defaults of a configuration being written, with
//! upstream's field errors (`ValidateValidatingWebhookConfiguration`,
//! `SetDefaults_*`).

use serde_json::{Map, Value, json};
use wasmctrl_apimachinery::names;
use wasmctrl_apimachinery::selector::{LabelSelector, SelectorBounds};

use super::{
    ConfigKind, DEFAULT_TIMEOUT_SECONDS, MAX_WEBHOOKS_PER_CONFIGURATION, TIMEOUT_SECONDS,
    decode_ca_bundle,
};
use crate::error::Cause;
use crate::values::go_quote;

/// A field error as upstream's `field.Error` renders into a 422 cause.
fn cause(reason: &str, field: &str, message: String) -> Cause {
    Cause {
        reason: reason.into(),
        message,
        field: field.into(),
    }
}

fn required(field: &str, detail: &str) -> Cause {
    let message = if detail.is_empty() {
        "Required value".to_string()
    } else {
        format!("Required value: {detail}")
    };
    cause("FieldValueRequired", field, message)
}

fn invalid(field: &str, value: &Value, detail: &str) -> Cause {
    cause(
        "FieldValueInvalid",
        field,
        format!("Invalid value: {}: {detail}", shown(value)),
    )
}

fn not_supported(field: &str, value: &Value, supported: &[&str]) -> Cause {
    let list = supported
        .iter()
        .map(|s| go_quote(s))
        .collect::<Vec<_>>()
        .join(", ");
    cause(
        "FieldValueNotSupported",
        field,
        format!(
            "Unsupported value: {}: supported values: {list}",
            shown(value)
        ),
    )
}

/// A value as Go's `%#v`-ish rendering in field errors shows it.
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => go_quote(s),
        Value::Array(items) if items.iter().all(Value::is_string) => format!(
            "[]string{{{}}}",
            items
                .iter()
                .map(|i| go_quote(i.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

/// Fills in upstream's v1 defaults and checks `obj` (a configuration of
/// `kind` being written; `old` the stored one for an update), returning
/// the field errors. Defaults are written into `obj`, so reads show them.
pub(crate) fn prepare(kind: ConfigKind, obj: &mut Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let hooks = match obj.get_mut("webhooks") {
        None | Some(Value::Null) => return causes,
        Some(Value::Array(hooks)) => hooks,
        Some(other) => {
            causes.push(invalid("webhooks", other, "must be a list"));
            return causes;
        }
    };
    if hooks.len() > MAX_WEBHOOKS_PER_CONFIGURATION {
        causes.push(cause(
            "FieldValueTooMany",
            "webhooks",
            format!(
                "Too many: {}: must have at most {MAX_WEBHOOKS_PER_CONFIGURATION} items",
                hooks.len()
            ),
        ));
        return causes;
    }
    // Upstream relaxes the side-effect rule only for a configuration that
    // already had webhooks with side effects (written by an older API).
    let require_no_side_effects = old.is_none_or(|o| {
        o["webhooks"].as_array().into_iter().flatten().all(|h| {
            matches!(
                h["sideEffects"].as_str(),
                Some("None") | Some("NoneOnDryRun")
            )
        })
    });
    let mut names: Vec<String> = Vec::new();
    for (i, hook) in hooks.iter_mut().enumerate() {
        let path = format!("webhooks[{i}]");
        let Some(map) = hook.as_object_mut() else {
            causes.push(invalid(&path, hook, "must be an object"));
            continue;
        };
        default_webhook(kind, map);
        causes.extend(check_webhook(kind, map, &path, require_no_side_effects));
        if let Some(name) = map
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            if names.iter().any(|n| n == name) {
                causes.push(cause(
                    "FieldValueDuplicate",
                    &format!("{path}.name"),
                    format!("Duplicate value: {}", go_quote(name)),
                ));
            } else {
                names.push(name.to_string());
            }
        }
    }
    causes
}

/// Upstream's v1 defaults (`SetDefaults_*Webhook`, `SetDefaults_Rule`,
/// `SetDefaults_ServiceReference`).
fn default_webhook(kind: ConfigKind, hook: &mut Map<String, Value>) {
    let mut set = |key: &str, value: Value| {
        if hook.get(key).is_none_or(Value::is_null) {
            hook.insert(key.into(), value);
        }
    };
    set("failurePolicy", json!("Fail"));
    set("matchPolicy", json!("Equivalent"));
    set("namespaceSelector", json!({}));
    set("objectSelector", json!({}));
    set("timeoutSeconds", json!(DEFAULT_TIMEOUT_SECONDS));
    if kind == ConfigKind::Mutating {
        set("reinvocationPolicy", json!("Never"));
    }
    if let Some(Value::Array(rules)) = hook.get_mut("rules") {
        for rule in rules.iter_mut().filter_map(Value::as_object_mut) {
            if rule.get("scope").is_none_or(Value::is_null) {
                rule.insert("scope".into(), json!("*"));
            }
        }
    }
    if let Some(service) = hook
        .get_mut("clientConfig")
        .and_then(|c| c.get_mut("service"))
        .and_then(Value::as_object_mut)
        && service.get("port").is_none_or(Value::is_null)
    {
        service.insert("port".into(), json!(443));
    }
}

/// A list of strings at `key`, or the cause saying it is not one.
fn strings(
    map: &Map<String, Value>,
    key: &str,
    path: &str,
    causes: &mut Vec<Cause>,
) -> Vec<String> {
    match map.get(key) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_string))
            .collect(),
        Some(other) => {
            causes.push(invalid(
                &format!("{path}.{key}"),
                other,
                "must be a list of strings",
            ));
            Vec::new()
        }
    }
}

/// One of `supported`, checked at `path.key` (absent is fine: defaults ran).
fn enumerated(
    map: &Map<String, Value>,
    key: &str,
    path: &str,
    supported: &[&str],
    causes: &mut Vec<Cause>,
) {
    if let Some(v) = map.get(key).filter(|v| !v.is_null())
        && !v.as_str().is_some_and(|s| supported.contains(&s))
    {
        causes.push(not_supported(&format!("{path}.{key}"), v, supported));
    }
}

fn check_webhook(
    kind: ConfigKind,
    hook: &Map<String, Value>,
    path: &str,
    require_no_side_effects: bool,
) -> Vec<Cause> {
    let mut causes = Vec::new();
    let name_path = format!("{path}.name");
    match hook.get("name").and_then(Value::as_str) {
        None | Some("") => causes.push(required(&name_path, "")),
        Some(name) => {
            if let Err(e) = names::dns1123_subdomain(name) {
                causes.push(invalid(&name_path, &json!(name), &e.to_string()));
            } else if name.split('.').count() < 3 {
                causes.push(invalid(
                    &name_path,
                    &json!(name),
                    "should be a domain with at least three segments separated by dots",
                ));
            }
        }
    }
    match hook.get("rules") {
        None | Some(Value::Null) => {}
        Some(Value::Array(rules)) => {
            for (i, rule) in rules.iter().enumerate() {
                causes.extend(check_rule(rule, &format!("{path}.rules[{i}]")));
            }
        }
        Some(other) => causes.push(invalid(&format!("{path}.rules"), other, "must be a list")),
    }
    enumerated(
        hook,
        "failurePolicy",
        path,
        &["Fail", "Ignore"],
        &mut causes,
    );
    enumerated(
        hook,
        "matchPolicy",
        path,
        &["Equivalent", "Exact"],
        &mut causes,
    );
    let side_effects: &[&str] = if require_no_side_effects {
        &["None", "NoneOnDryRun"]
    } else {
        &["None", "NoneOnDryRun", "Some", "Unknown"]
    };
    if hook.get("sideEffects").is_none_or(Value::is_null) {
        causes.push(required(
            &format!("{path}.sideEffects"),
            &format!("must specify one of {}", side_effects.join(", ")),
        ));
    }
    enumerated(hook, "sideEffects", path, side_effects, &mut causes);
    let timeout = &hook["timeoutSeconds"];
    if !timeout
        .as_i64()
        .is_some_and(|t| TIMEOUT_SECONDS.contains(&t))
    {
        causes.push(invalid(
            &format!("{path}.timeoutSeconds"),
            timeout,
            "the timeout value must be between 1 and 30 seconds",
        ));
    }
    for key in ["namespaceSelector", "objectSelector"] {
        if let Err(e) = LabelSelector::from_object(&hook[key], SelectorBounds::UNLIMITED) {
            causes.push(invalid(
                &format!("{path}.{key}"),
                &hook[key],
                &e.to_string(),
            ));
        }
    }
    if kind == ConfigKind::Mutating {
        enumerated(
            hook,
            "reinvocationPolicy",
            path,
            &["IfNeeded", "Never"],
            &mut causes,
        );
    }
    let versions_path = format!("{path}.admissionReviewVersions");
    let versions = strings(hook, "admissionReviewVersions", path, &mut causes);
    if versions.is_empty() {
        causes.push(required(&versions_path, "must specify one of v1"));
    } else if !versions.iter().any(|v| v == "v1") {
        causes.push(invalid(
            &versions_path,
            &hook["admissionReviewVersions"],
            "must include v1, the only AdmissionReview version this server speaks",
        ));
    }
    causes.extend(check_client_config(&hook["clientConfig"], path));
    causes
}

fn check_rule(rule: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(map) = rule.as_object() else {
        causes.push(invalid(path, rule, "must be an object"));
        return causes;
    };
    let operations = strings(map, "operations", path, &mut causes);
    let ops_path = format!("{path}.operations");
    if operations.is_empty() {
        causes.push(required(&ops_path, ""));
    }
    if operations.len() > 1 && operations.iter().any(|o| o == "*") {
        causes.push(invalid(
            &ops_path,
            &map["operations"],
            "if '*' is present, must not specify other operations",
        ));
    }
    for (i, op) in operations.iter().enumerate() {
        const OPERATIONS: [&str; 5] = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
        if !OPERATIONS.contains(&op.as_str()) {
            causes.push(not_supported(
                &format!("{ops_path}[{i}]"),
                &json!(op),
                &OPERATIONS,
            ));
        }
    }
    for (key, what) in [("apiGroups", "API groups"), ("apiVersions", "API versions")] {
        let list = strings(map, key, path, &mut causes);
        let list_path = format!("{path}.{key}");
        if list.is_empty() {
            causes.push(required(&list_path, ""));
        }
        if list.len() > 1 && list.iter().any(|v| v == "*") {
            causes.push(invalid(
                &list_path,
                &map[key],
                &format!("if '*' is present, must not specify other {what}"),
            ));
        }
        if key == "apiVersions" {
            for (i, _) in list.iter().enumerate().filter(|(_, v)| v.is_empty()) {
                causes.push(required(&format!("{list_path}[{i}]"), ""));
            }
        }
    }
    let resources = strings(map, "resources", path, &mut causes);
    causes.extend(check_resources(
        &resources,
        &map["resources"],
        &format!("{path}.resources"),
    ));
    enumerated(
        map,
        "scope",
        path,
        &["*", "Cluster", "Namespaced"],
        &mut causes,
    );
    causes
}

/// Upstream's `validateResources`: wildcards may not overlap what they
/// already cover.
fn check_resources(resources: &[String], raw: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if resources.is_empty() {
        causes.push(required(path, ""));
    }
    let mut wildcard_subs: Vec<&str> = Vec::new();
    let mut wildcard_res: Vec<&str> = Vec::new();
    let (mut double, mut single, mut plain) = (false, false, false);
    for (i, entry) in resources.iter().enumerate() {
        let at = format!("{path}[{i}]");
        if entry.is_empty() {
            causes.push(required(&at, ""));
            continue;
        }
        double |= entry == "*/*";
        single |= entry == "*";
        let Some((res, sub)) = entry.split_once('/') else {
            plain = entry != "*";
            continue;
        };
        if wildcard_subs.contains(&res) {
            causes.push(invalid(
                &at,
                &json!(entry),
                &format!("if '{res}/*' is present, must not specify {entry}"),
            ));
        }
        if wildcard_res.contains(&sub) {
            causes.push(invalid(
                &at,
                &json!(entry),
                &format!("if '*/{sub}' is present, must not specify {entry}"),
            ));
        }
        if sub == "*" {
            wildcard_subs.push(res);
        }
        if res == "*" {
            wildcard_res.push(sub);
        }
    }
    if resources.len() > 1 && double {
        causes.push(invalid(
            path,
            raw,
            "if '*/*' is present, must not specify other resources",
        ));
    }
    if single && plain {
        causes.push(invalid(
            path,
            raw,
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
    causes
}

fn check_client_config(cc: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let path = format!("{path}.clientConfig");
    let url = cc.get("url").filter(|v| !v.is_null());
    let service = cc.get("service").filter(|v| !v.is_null());
    match (url, service) {
        (Some(url), None) => causes.extend(check_url(url, &format!("{path}.url"))),
        (None, Some(service)) => causes.extend(check_service(service, &format!("{path}.service"))),
        _ => causes.push(required(&path, "exactly one of url or service is required")),
    }
    if let Some(ca) = cc.get("caBundle").filter(|v| !v.is_null()) {
        let at = format!("{path}.caBundle");
        match ca.as_str().map(decode_ca_bundle) {
            None => causes.push(invalid(&at, ca, "must be a base64 string")),
            Some(Err(e)) => causes.push(invalid(&at, &json!("<caBundle>"), &e)),
            Some(Ok(_)) => {}
        }
    }
    causes
}

const URL_FORM: &str = "; desired format: https://host[/path]";

fn check_url(url: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(text) = url.as_str() else {
        causes.push(invalid(path, url, "must be a string"));
        return causes;
    };
    let parsed = match url::Url::parse(text) {
        Ok(u) => u,
        Err(e) => {
            causes.push(required(
                path,
                &format!("url must be a valid URL: {e}{URL_FORM}"),
            ));
            return causes;
        }
    };
    if parsed.scheme() != "https" {
        causes.push(invalid(
            path,
            &json!(parsed.scheme()),
            &format!("'https' is the only allowed URL scheme{URL_FORM}"),
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        causes.push(invalid(
            path,
            &json!(""),
            &format!("host must be specified{URL_FORM}"),
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        causes.push(invalid(
            path,
            &json!(parsed.username()),
            "user information is not permitted in the URL",
        ));
    }
    if let Some(fragment) = parsed.fragment() {
        causes.push(invalid(
            path,
            &json!(fragment),
            "fragments are not permitted in the URL",
        ));
    }
    if let Some(query) = parsed.query() {
        causes.push(invalid(
            path,
            &json!(query),
            "query parameters are not permitted in the URL",
        ));
    }
    causes
}

fn check_service(service: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    for key in ["name", "namespace"] {
        if service[key].as_str().is_none_or(str::is_empty) {
            causes.push(required(&format!("{path}.{key}"), ""));
        }
    }
    let port = &service["port"];
    if !port.as_i64().is_some_and(|p| (1..=65535).contains(&p)) {
        causes.push(invalid(
            &format!("{path}.port"),
            port,
            "port is not valid: must be between 1 and 65535, inclusive",
        ));
    }
    let Some(url_path) = service.get("path").filter(|p| !p.is_null()) else {
        return causes;
    };
    let at = format!("{path}.path");
    let Some(p) = url_path.as_str() else {
        causes.push(invalid(&at, url_path, "must be a string"));
        return causes;
    };
    if p.is_empty() || p == "/" {
        return causes;
    }
    if p == "//" {
        causes.push(invalid(&at, url_path, "segment[0] may not be empty"));
        return causes;
    }
    if !p.starts_with('/') {
        causes.push(invalid(&at, url_path, "must start with a '/'"));
    }
    let rest = p.strip_prefix('/').unwrap_or(p);
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    for (i, step) in rest.split('/').enumerate() {
        if step.is_empty() {
            causes.push(invalid(
                &at,
                url_path,
                &format!("segment[{i}] may not be empty"),
            ));
        } else if let Err(e) = names::dns1123_subdomain(step) {
            causes.push(invalid(&at, url_path, &format!("segment[{i}]: {e}")));
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook() -> Value {
        json!({
            "name": "deny.example.com",
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://127.0.0.1:8443/validate"},
        })
    }

    fn prepared(kind: ConfigKind, hooks: Vec<Value>) -> (Value, Vec<Cause>) {
        let mut obj = json!({"webhooks": hooks});
        let causes = prepare(kind, &mut obj, None);
        (obj, causes)
    }

    fn fields(causes: &[Cause]) -> Vec<String> {
        causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn writes_get_upstream_s_defaults() {
        let mut h = hook();
        h["clientConfig"] = json!({"service": {"namespace": "ns", "name": "svc"}});
        let (obj, causes) = prepared(ConfigKind::Mutating, vec![h]);
        assert!(causes.is_empty(), "{:?}", fields(&causes));
        let w = &obj["webhooks"][0];
        assert_eq!(w["failurePolicy"], "Fail");
        assert_eq!(w["matchPolicy"], "Equivalent");
        assert_eq!(w["timeoutSeconds"], 10);
        assert_eq!(w["reinvocationPolicy"], "Never");
        assert_eq!(w["namespaceSelector"], json!({}));
        assert_eq!(w["objectSelector"], json!({}));
        assert_eq!(w["rules"][0]["scope"], "*");
        assert_eq!(w["clientConfig"]["service"]["port"], 443);
        let (obj, _) = prepared(ConfigKind::Validating, vec![hook()]);
        assert!(obj["webhooks"][0].get("reinvocationPolicy").is_none());
    }

    #[test]
    fn bad_fields_are_named_as_upstream_names_them() {
        let mut bad = hook();
        bad["name"] = json!("two.parts");
        bad["sideEffects"] = json!("Some");
        bad["timeoutSeconds"] = json!(31);
        bad["failurePolicy"] = json!("Sometimes");
        bad["admissionReviewVersions"] = json!(["v1beta1"]);
        bad["clientConfig"] = json!({"url": "http://u:p@host/x?q=1#f"});
        bad["rules"][0]["operations"] = json!(["*", "CREATE"]);
        bad["rules"][0]["resources"] = json!(["*/*", "pods"]);
        let (_, causes) = prepared(ConfigKind::Validating, vec![bad, hook(), hook()]);
        let got = fields(&causes);
        for want in [
            "webhooks[0].name: Invalid value: \"two.parts\": should be a domain with at least three segments separated by dots",
            "webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\"",
            "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
            "webhooks[0].failurePolicy: Unsupported value: \"Sometimes\": supported values: \"Fail\", \"Ignore\"",
            "webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]",
            "webhooks[0].clientConfig.url: Invalid value: \"u\": user information is not permitted in the URL",
            "webhooks[0].clientConfig.url: Invalid value: \"f\": fragments are not permitted in the URL",
            "webhooks[0].clientConfig.url: Invalid value: \"q=1\": query parameters are not permitted in the URL",
            "webhooks[0].rules[0].operations: Invalid value: []string{\"*\", \"CREATE\"}: if '*' is present, must not specify other operations",
            "webhooks[0].rules[0].resources: Invalid value: []string{\"*/*\", \"pods\"}: if '*/*' is present, must not specify other resources",
            "webhooks[2].name: Duplicate value: \"deny.example.com\"",
        ] {
            assert!(got.iter().any(|g| g == want), "missing {want}\nin {got:#?}");
        }
        assert!(
            got.iter()
                .any(|g| g.starts_with("webhooks[0].admissionReviewVersions: Invalid value")),
            "{got:#?}"
        );
    }

    #[test]
    fn required_fields_and_client_config_shape() {
        let mut h = hook();
        for key in ["sideEffects", "admissionReviewVersions"] {
            h.as_object_mut().unwrap().remove(key);
        }
        h["clientConfig"] =
            json!({"url": "https://x/", "service": {"namespace": "a", "name": "b"}});
        let mut s = hook();
        s["clientConfig"] = json!({"service": {"namespace": "", "name": "b", "port": 0, "path": "no-slash"}, "caBundle": "!!"});
        let (_, causes) = prepared(ConfigKind::Mutating, vec![h, s]);
        let got = fields(&causes);
        for want in [
            "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun",
            "webhooks[0].admissionReviewVersions: Required value: must specify one of v1",
            "webhooks[0].clientConfig: Required value: exactly one of url or service is required",
            "webhooks[1].clientConfig.service.namespace: Required value",
            "webhooks[1].clientConfig.service.port: Invalid value: 0: port is not valid: must be between 1 and 65535, inclusive",
            "webhooks[1].clientConfig.service.path: Invalid value: \"no-slash\": must start with a '/'",
        ] {
            assert!(got.iter().any(|g| g == want), "missing {want}\nin {got:#?}");
        }
        assert!(
            got.iter()
                .any(|g| g.starts_with("webhooks[1].clientConfig.caBundle: Invalid value")),
            "{got:#?}"
        );
    }

    #[test]
    fn the_number_of_webhooks_is_bounded() {
        let hooks = (0..=MAX_WEBHOOKS_PER_CONFIGURATION)
            .map(|i| {
                let mut h = hook();
                h["name"] = json!(format!("h{i}.example.com"));
                h
            })
            .collect();
        let (_, causes) = prepared(ConfigKind::Validating, hooks);
        assert_eq!(
            fields(&causes),
            vec!["webhooks: Too many: 65: must have at most 64 items".to_string()]
        );
    }
}
