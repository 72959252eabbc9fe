//! CustomResourceDefinitions: validation, the status a real server sets
//! (NamesAccepted, Established, acceptedNames, storedVersions) and the
//! registry entries each served version becomes.

use serde_json::{Value, json};
use wasmctrl_apimachinery::names;

use super::resources::{GroupResource, ResourceInfo, ScalePaths, View};
use crate::error::Cause;

fn cause(field: &str, message: String) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message,
        field: field.into(),
    }
}

/// The cause of a plural or version name that is not a DNS-1035 label, as
/// upstream words it.
fn dns1035_label(field: &str, value: &str) -> Option<Cause> {
    names::dns1035_label(value)
        .err()
        .map(|e| cause(field, format!("Invalid value: \"{value}\": {e}")))
}

/// Validates a CRD and sets its status. `old` is the stored CRD on update,
/// whose condition transition times are kept when nothing changed.
pub(crate) fn prepare(obj: &mut Value, old: Option<&Value>, now: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let group = spec["group"].as_str().unwrap_or("");
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or("");
    let kind = names["kind"].as_str().unwrap_or("");
    if group.is_empty() {
        causes.push(Cause::required("spec.group", ""));
    } else if let Err(e) = names::dns1123_subdomain(group) {
        causes.push(cause(
            "spec.group",
            format!("Invalid value: \"{group}\": {e}"),
        ));
    } else if !group.contains('.') {
        causes.push(cause(
            "spec.group",
            format!("Invalid value: \"{group}\": should be a domain with at least one dot"),
        ));
    }
    if plural.is_empty() {
        causes.push(Cause::required("spec.names.plural", ""));
    } else {
        causes.extend(dns1035_label("spec.names.plural", plural));
    }
    if kind.is_empty() {
        causes.push(Cause::required("spec.names.kind", ""));
    }
    // A CRD of a built-in resource would take over its storage: serve it
    // with the CRD's schema, and delete every object of it (RoleBindings,
    // webhook configurations, CRDs themselves) when the CRD goes.
    if !plural.is_empty()
        && super::resources::builtins()
            .iter()
            .any(|b| b.group == group && b.plural == plural)
    {
        causes.push(cause(
            "spec.names.plural",
            format!(
                "Forbidden: \"{plural}.{group}\" is a built-in resource; a CustomResourceDefinition cannot define it"
            ),
        ));
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let want = format!("{plural}.{group}");
    if name != want {
        causes.push(cause(
            "metadata.name",
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    match spec["scope"].as_str() {
        Some("Namespaced") | Some("Cluster") => {}
        _ => causes.push(cause(
            "spec.scope",
            format!(
                "Unsupported value: {}: supported values: \"Cluster\", \"Namespaced\"",
                spec["scope"]
            ),
        )),
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::required("spec.versions", ""));
    }
    let storage: Vec<&Value> = versions
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .collect();
    if !versions.is_empty() && storage.len() != 1 {
        causes.push(cause(
            "spec.versions",
            format!(
                "Invalid value: {}: must have exactly one version marked as storage version",
                versions.len()
            ),
        ));
    }
    for (i, v) in versions.iter().enumerate() {
        let vn = v["name"].as_str().unwrap_or("");
        causes.extend(dns1035_label(&format!("spec.versions[{i}].name"), vn));
        if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
            let at = format!("spec.versions[{i}].schema.openAPIV3Schema");
            list_and_map_types(schema, &at, &mut causes);
        }
    }
    if !causes.is_empty() {
        return causes;
    }
    let storage_version = storage[0]["name"].as_str().unwrap_or("").to_string();

    let mut accepted = names.clone();
    accepted["singular"] = json!(
        names["singular"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| kind.to_lowercase())
    );
    accepted["listKind"] = json!(
        names["listKind"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| format!("{kind}List"))
    );
    // Defaulted names are part of the stored spec on a real server too.
    obj["spec"]["names"] = accepted.clone();

    let old_conditions = old
        .and_then(|o| o["status"]["conditions"].as_array())
        .cloned()
        .unwrap_or_default();
    let condition = |ctype: &str, reason: &str, message: &str| {
        let since = old_conditions
            .iter()
            .find(|c| c["type"] == ctype && c["status"] == "True")
            .and_then(|c| c["lastTransitionTime"].as_str())
            .unwrap_or(now)
            .to_string();
        json!({"type": ctype, "status": "True", "lastTransitionTime": since, "reason": reason, "message": message})
    };
    let mut stored_versions: Vec<Value> = old
        .and_then(|o| o["status"]["storedVersions"].as_array())
        .cloned()
        .unwrap_or_default();
    if !stored_versions.iter().any(|v| *v == storage_version) {
        stored_versions.push(json!(storage_version));
    }
    let terminating = obj["metadata"].get("deletionTimestamp").is_some();
    let mut conditions = vec![
        condition("NamesAccepted", "NoConflicts", "no conflicts found"),
        condition(
            "Established",
            "InitialNamesAccepted",
            "the initial names have been accepted",
        ),
    ];
    if terminating {
        conditions.push(json!({"type": "Terminating", "status": "True", "lastTransitionTime": now,
            "reason": "InstanceDeletionInProgress", "message": "CustomResource deletion is in progress"}));
    }
    obj["status"] = json!({
        "conditions": conditions,
        "acceptedNames": accepted,
        "storedVersions": stored_versions,
    });
    causes
}

/// Checks the annotations that say how server-side apply merges a custom
/// resource's lists and maps, in `schema` and every schema below it, as
/// upstream's CRD validation does: a list type is `atomic`, `set` or
/// `map`; a `map` list names its keys, which are scalar properties of its
/// object items; a map type is `atomic` or `granular`.
fn list_and_map_types(schema: &Value, at: &str, causes: &mut Vec<Cause>) {
    let Some(node) = schema.as_object() else {
        return;
    };
    let list_type = node.get("x-kubernetes-list-type");
    let keys = node.get("x-kubernetes-list-map-keys");
    let items = node.get("items");
    match list_type.map(|t| (t, t.as_str())) {
        None | Some((_, Some("atomic" | "set"))) => {}
        Some((_, Some("map"))) => map_list(keys, items, at, causes),
        Some((shown, _)) => causes.push(Cause::not_supported(
            &format!("{at}.x-kubernetes-list-type"),
            shown.as_str().unwrap_or(&shown.to_string()),
            &["atomic", "set", "map"],
        )),
    }
    if keys.is_some() && list_type.and_then(Value::as_str) != Some("map") {
        causes.push(Cause::forbidden(
            &format!("{at}.x-kubernetes-list-map-keys"),
            "must only be used if x-kubernetes-list-type is \"map\"",
        ));
    }
    if let Some(shown) = node.get("x-kubernetes-map-type")
        && !matches!(shown.as_str(), Some("atomic" | "granular"))
    {
        causes.push(Cause::not_supported(
            &format!("{at}.x-kubernetes-map-type"),
            shown.as_str().unwrap_or(&shown.to_string()),
            &["atomic", "granular"],
        ));
    }
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            list_and_map_types(property, &format!("{at}.properties[{name}]"), causes);
        }
    }
    if let Some(items) = items {
        list_and_map_types(items, &format!("{at}.items"), causes);
    }
    if let Some(additional) = node.get("additionalProperties") {
        list_and_map_types(additional, &format!("{at}.additionalProperties"), causes);
    }
}

/// The rules of a list of `x-kubernetes-list-type: map`.
fn map_list(keys: Option<&Value>, items: Option<&Value>, at: &str, causes: &mut Vec<Cause>) {
    let names: Vec<&Value> = keys
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    if names.is_empty() {
        causes.push(Cause::required(
            &format!("{at}.x-kubernetes-list-map-keys"),
            "must not be empty if x-kubernetes-list-type is map",
        ));
    }
    let Some(items) = items else {
        causes.push(Cause::required(
            &format!("{at}.items"),
            "must have a schema if x-kubernetes-list-type is map",
        ));
        return;
    };
    let item_type = items.get("type").unwrap_or(&Value::Null);
    if item_type.as_str() != Some("object") {
        causes.push(Cause::invalid(
            &format!("{at}.items.type"),
            &item_type.to_string(),
            "must be object if parent array's x-kubernetes-list-type is map",
        ));
        return;
    }
    let mut seen = Vec::new();
    for name in names {
        let key_at = format!("{at}.x-kubernetes-list-map-keys");
        let Some(name) = name.as_str() else {
            causes.push(Cause::invalid(
                &key_at,
                &name.to_string(),
                "must be a string",
            ));
            continue;
        };
        if seen.contains(&name) {
            causes.push(Cause::invalid(
                &key_at,
                &format!("{name:?}"),
                "must not contain duplicate entries",
            ));
        }
        seen.push(name);
        match items.get("properties").and_then(|p| p.get(name)) {
            None => causes.push(Cause::invalid(
                &key_at,
                &format!("{name:?}"),
                "entries must all be names of item properties",
            )),
            Some(property)
                if matches!(
                    property.get("type").and_then(Value::as_str),
                    Some("array" | "object")
                ) =>
            {
                causes.push(Cause::invalid(
                    &format!("{at}.items.properties[{name}].type"),
                    &property["type"].to_string(),
                    "must be a scalar type if parent array's x-kubernetes-list-type is map",
                ));
            }
            Some(_) => {}
        }
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// The store key and the registry entries (one per served version) of a CRD.
pub(crate) fn infos_for(crd: &Value) -> (GroupResource, Vec<ResourceInfo>) {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or("").to_string();
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or("").to_string();
    let kind = names["kind"].as_str().unwrap_or("").to_string();
    let singular = names["singular"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let storage = GroupResource::new(&group, &plural);
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    let storage_version = versions
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))
        .and_then(|v| v["name"].as_str())
        .unwrap_or("v1")
        .to_string();
    let infos = versions
        .iter()
        .filter(|v| v["served"].as_bool() == Some(true))
        .map(|v| {
            let subs = &v["subresources"];
            ResourceInfo {
                group: group.clone(),
                version: v["name"].as_str().unwrap_or("").to_string(),
                plural: plural.clone(),
                singular: singular.clone(),
                kind: kind.clone(),
                namespaced: spec["scope"].as_str() != Some("Cluster"),
                short_names: strings(&names["shortNames"]),
                categories: strings(&names["categories"]),
                status: subs.get("status").is_some_and(|s| !s.is_null()),
                scale: subs
                    .get("scale")
                    .filter(|s| !s.is_null())
                    .map(|s| ScalePaths {
                        spec_replicas: s["specReplicasPath"]
                            .as_str()
                            .unwrap_or(".spec.replicas")
                            .to_string(),
                        status_replicas: s["statusReplicasPath"]
                            .as_str()
                            .unwrap_or(".status.replicas")
                            .to_string(),
                        label_selector: s["labelSelectorPath"].as_str().map(str::to_string),
                    }),
                generation: true,
                builtin: false,
                delete_returns_object: true,
                review: false,
                token_request: false,
                storage: storage.clone(),
                storage_api_version: format!("{group}/{storage_version}"),
                view: View::Plain,
                printer_columns: v
                    .get("additionalPrinterColumns")
                    .and_then(Value::as_array)
                    .cloned(),
                schema: v
                    .get("schema")
                    .and_then(|s| s.get("openAPIV3Schema"))
                    .cloned(),
            }
        })
        .collect();
    (storage, infos)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widget() -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [
                    {"name": "v1", "served": true, "storage": true,
                     "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}},
                     "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                    {"name": "v1beta1", "served": true, "storage": false}]}})
    }

    #[test]
    fn sets_established_status() {
        let mut crd = widget();
        assert!(prepare(&mut crd, None, "2025-01-01T00:00:00Z").is_empty());
        let conds = crd["status"]["conditions"].as_array().unwrap();
        assert!(
            conds
                .iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        );
        assert_eq!(crd["status"]["acceptedNames"]["singular"], "widget");
        assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
        let (gr, infos) = infos_for(&crd);
        assert_eq!(gr, GroupResource::new("example.com", "widgets"));
        assert_eq!(infos.len(), 2);
        assert!(infos[0].status);
        assert_eq!(infos[0].scale.as_ref().unwrap().spec_replicas, ".spec.size");
        assert_eq!(infos[1].storage_api_version, "example.com/v1");
    }

    #[test]
    fn list_and_map_types_are_validated_as_upstream() {
        let mut crd = widget();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = json!({
            "type": "object", "properties": {"spec": {"type": "object", "properties": {
                "odd": {"type": "array", "x-kubernetes-list-type": "bag", "items": {"type": "string"}},
                "keyed": {"type": "array", "x-kubernetes-list-map-keys": ["a"],
                          "items": {"type": "object"}},
                "scalars": {"type": "array", "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["a"], "items": {"type": "string"}},
                "keys": {"type": "array", "x-kubernetes-list-type": "map",
                         "x-kubernetes-list-map-keys": ["a", "a", "missing", "nested"],
                         "items": {"type": "object", "properties": {
                             "a": {"type": "string"}, "nested": {"type": "object"}}}},
                "labels": {"type": "object", "x-kubernetes-map-type": "fine"}}}}});
        let causes = prepare(&mut crd, None, "t");
        let at = "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties";
        let shown: Vec<(String, String)> = causes
            .iter()
            .map(|c| (c.field.clone(), c.message.clone()))
            .collect();
        for (field, message) in [
            (
                format!("{at}[odd].x-kubernetes-list-type"),
                r#"Unsupported value: "bag": supported values: "atomic", "set", "map""#,
            ),
            (
                format!("{at}[keyed].x-kubernetes-list-map-keys"),
                r#"Forbidden: must only be used if x-kubernetes-list-type is "map""#,
            ),
            (
                format!("{at}[scalars].items.type"),
                r#"Invalid value: "string": must be object if parent array's x-kubernetes-list-type is map"#,
            ),
            (
                format!("{at}[keys].x-kubernetes-list-map-keys"),
                r#"Invalid value: "a": must not contain duplicate entries"#,
            ),
            (
                format!("{at}[keys].x-kubernetes-list-map-keys"),
                r#"Invalid value: "missing": entries must all be names of item properties"#,
            ),
            (
                format!("{at}[keys].items.properties[nested].type"),
                r#"Invalid value: "object": must be a scalar type if parent array's x-kubernetes-list-type is map"#,
            ),
            (
                format!("{at}[labels].x-kubernetes-map-type"),
                r#"Unsupported value: "fine": supported values: "atomic", "granular""#,
            ),
        ] {
            assert!(
                shown.contains(&(field.clone(), message.to_owned())),
                "{field}: {message} not in {shown:#?}"
            );
        }
        assert_eq!(shown.len(), 7, "{shown:#?}");
    }

    #[test]
    fn rejects_bad_names_and_storage() {
        let mut crd = widget();
        crd["metadata"]["name"] = json!("wrong");
        crd["spec"]["versions"][1]["storage"] = json!(true);
        let causes = prepare(&mut crd, None, "t");
        assert!(causes.iter().any(|c| c.field == "metadata.name"));
        assert!(causes.iter().any(|c| c.field == "spec.versions"));
    }
}
