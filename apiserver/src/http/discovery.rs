//! `/version`, legacy discovery (`/api`, `/apis`, `/api/v1`, `/apis/g[/v]`)
//! and aggregated discovery (v2 and v2beta1, chosen from Accept), plus the
//! minimal OpenAPI v3 documents kubectl's validation needs.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::http::media::MediaType;
use crate::registry::resources::{Registry, ResourceInfo};

/// Content type of aggregated discovery v2.
pub(crate) const AGGREGATED_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
/// Content type of aggregated discovery v2beta1 (kubectl ≤ 1.29 asks only for this).
pub(crate) const AGGREGATED_V2BETA1: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

/// The Kubernetes version reported; `/usr/bin/kubectl` dispatches on `minor`.
pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.0",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2024-12-11T00:00:00Z",
        "goVersion": "go1.23.3",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// Which aggregated flavour an Accept header asks for, if any (v2 wins
/// over v2beta1 whatever the order, as on a real server).
pub(crate) fn aggregated_flavour(accept: &str) -> Option<&'static str> {
    let mut found = None;
    for offer in MediaType::offers(accept) {
        if !offer.has("g", "apidiscovery.k8s.io") || !offer.has("as", "APIGroupDiscoveryList") {
            continue;
        }
        if offer.has("v", "v2") {
            return Some("v2");
        }
        if offer.has("v", "v2beta1") {
            found = Some("v2beta1");
        }
    }
    found
}

/// `/api` (legacy).
pub(crate) fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn gv(group: &str, version: &str) -> Value {
    json!({"groupVersion": format!("{group}/{version}"), "version": version})
}

fn api_group(g: &crate::registry::resources::GroupEntry) -> Value {
    let versions: Vec<Value> = g.versions.iter().map(|(v, _)| gv(&g.name, v)).collect();
    json!({
        "name": g.name,
        "versions": versions,
        "preferredVersion": versions.first().cloned().unwrap_or(Value::Null),
    })
}

/// `/apis` (legacy).
pub(crate) fn api_group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .iter()
        .filter(|g| !g.name.is_empty())
        .map(api_group)
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}` (legacy APIGroup).
pub(crate) fn api_group_doc(reg: &Registry, group: &str) -> Option<Value> {
    let g = reg
        .groups()
        .iter()
        .find(|g| g.name == group && !group.is_empty())?;
    let mut doc = api_group(g);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// A subresource discovery lists with its resource.
struct Subresource {
    name: &'static str,
    /// The group, version and kind it answers with, when not its
    /// resource's own.
    other_kind: Option<[&'static str; 3]>,
    verbs: &'static [&'static str],
}

/// The subresources `r` serves, in discovery's order.
fn subresources(r: &ResourceInfo) -> Vec<Subresource> {
    const READ_WRITE: &[&str] = &["get", "patch", "update"];
    let mut subs = Vec::new();
    if crate::registry::writes::is_namespace(r) {
        subs.push(Subresource {
            name: "finalize",
            other_kind: None,
            verbs: &["update"],
        });
    }
    if r.status {
        subs.push(Subresource {
            name: "status",
            other_kind: None,
            verbs: READ_WRITE,
        });
    }
    if r.token_request {
        subs.push(Subresource {
            name: "token",
            other_kind: Some(["authentication.k8s.io", "v1", "TokenRequest"]),
            verbs: &["create"],
        });
    }
    if r.scale.is_some() {
        subs.push(Subresource {
            name: "scale",
            other_kind: Some(["autoscaling", "v1", "Scale"]),
            verbs: READ_WRITE,
        });
    }
    subs
}

/// Adds the short names and categories of `r` to its discovery entry,
/// if it has any.
fn add_aliases(entry: &mut Value, r: &ResourceInfo) {
    if !r.short_names.is_empty() {
        entry["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        entry["categories"] = json!(r.categories);
    }
}

fn legacy_entries(r: &ResourceInfo) -> Vec<Value> {
    let mut main = json!({
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": r.verbs(),
    });
    add_aliases(&mut main, r);
    let mut out = vec![main];
    for sub in subresources(r) {
        let mut entry = json!({
            "name": format!("{}/{}", r.plural, sub.name),
            "singularName": "",
            "namespaced": r.namespaced,
        });
        let mut kind = r.kind.as_str();
        if let Some([group, version, other]) = sub.other_kind {
            entry["group"] = json!(group);
            entry["version"] = json!(version);
            kind = other;
        }
        entry["kind"] = json!(kind);
        entry["verbs"] = json!(sub.verbs);
        out.push(entry);
    }
    out
}

/// `/api/v1` or `/apis/{g}/{v}` (legacy APIResourceList).
pub(crate) fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let resources = reg.resources(group, version)?;
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let entries: Vec<Value> = resources.iter().flat_map(|r| legacy_entries(r)).collect();
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": entries,
    }))
}

fn aggregated_resource(r: &ResourceInfo) -> Value {
    let mut res = json!({
        "resource": r.plural,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": r.verbs(),
    });
    add_aliases(&mut res, r);
    let subs: Vec<Value> = subresources(r)
        .iter()
        .map(|sub| {
            let [group, version, kind] = sub.other_kind.unwrap_or([&r.group, &r.version, &r.kind]);
            json!({
                "subresource": sub.name,
                "responseKind": {"group": group, "version": version, "kind": kind},
                "verbs": sub.verbs,
            })
        })
        .collect();
    if !subs.is_empty() {
        res["subresources"] = Value::Array(subs);
    }
    res
}

/// Aggregated discovery for `/api` (`core` true: only the core group) or
/// `/apis` (every named group), as `flavour` (`v2` or `v2beta1`).
pub(crate) fn aggregated(reg: &Registry, core: bool, flavour: &str) -> Value {
    let items: Vec<Value> = reg
        .groups()
        .iter()
        .filter(|g| g.name.is_empty() == core)
        .map(|g| {
            let versions: Vec<Value> = g
                .versions
                .iter()
                .map(|(v, list)| {
                    json!({
                        "version": v,
                        "freshness": "Current",
                        "resources": list.iter().map(|r| aggregated_resource(r)).collect::<Vec<_>>(),
                    })
                })
                .collect();
            json!({"metadata": {"name": g.name}, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{flavour}"),
        "metadata": {},
        "items": items,
    })
}

fn gv_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The hash of a group version's resources: taken from the list in hand,
/// not looked up again (a lookup per group made the root quadratic in the
/// groups, which any client may ask for).
fn gv_hash(resources: &[std::sync::Arc<ResourceInfo>], generation: u64) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    generation.hash(&mut h);
    for r in resources {
        r.plural.hash(&mut h);
        r.kind.hash(&mut h);
    }
    format!("{:016X}", h.finish())
}

/// `/openapi/v3`: one path per served group/version, with a hash that changes
/// whenever the registry does (so kubectl refetches after a CRD appears).
pub(crate) fn openapi_root(reg: &Registry, generation: u64) -> Value {
    let mut paths = serde_json::Map::new();
    for g in reg.groups() {
        for (v, resources) in &g.versions {
            let key = gv_key(&g.name, v);
            paths.insert(
                key.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={}", gv_hash(resources, generation))}),
            );
        }
    }
    json!({"paths": paths})
}

/// The `/openapi/v3/…` documents served, by group version, as sent: a
/// document is built (copying its CRDs' schemas) and encoded once per
/// registry generation, not once per request, which any client may send.
#[derive(Default)]
pub(crate) struct OpenApiDocs {
    built: std::sync::Mutex<(u64, HashMap<String, bytes::Bytes>)>,
}

impl OpenApiDocs {
    /// The document of `key` at registry `generation`, built by `build`
    /// (None: no such group version) unless already built at it. Documents
    /// of earlier generations are dropped, so at most one per served group
    /// version is held.
    pub(crate) fn get(
        &self,
        generation: u64,
        key: &str,
        build: impl FnOnce() -> Option<Value>,
    ) -> Option<bytes::Bytes> {
        {
            let mut built = self.built.lock().unwrap_or_else(|e| e.into_inner());
            if built.0 != generation {
                *built = (generation, HashMap::new());
            }
            if let Some(doc) = built.1.get(key) {
                return Some(doc.clone());
            }
        }
        // Built outside the lock: a slow build holds up no other document.
        let doc = bytes::Bytes::from(serde_json::to_vec(&build()?).unwrap_or_default());
        let mut built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        if built.0 == generation {
            built.1.insert(key.to_string(), doc.clone());
        }
        Some(doc)
    }
}

/// `/openapi/v3/{api/v1 | apis/g/v}`: a `patch` operation per resource with
/// its group-version-kind and the `fieldValidation` parameter, which is what
/// kubectl's field validation checks for; CRD schemas are included so
/// `kubectl explain` has something to show.
pub(crate) fn openapi_gv(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let resources = reg.resources(group, version)?;
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    for r in resources {
        let gvk = json!({"group": group, "version": version, "kind": r.kind});
        let op = json!({
            "x-kubernetes-group-version-kind": gvk,
            "parameters": [
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            ],
            "responses": {},
        });
        let item = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{prefix}/{}/{{name}}", r.plural)
        };
        let collection = item.trim_end_matches("/{name}").to_string();
        paths.insert(
            item,
            json!({"get": op.clone(), "put": op.clone(), "patch": op.clone(), "delete": op.clone()}),
        );
        paths.insert(collection, json!({"post": op.clone(), "get": op}));
        let schema_name = format!(
            "{}.{}.{}",
            if group.is_empty() {
                "io.k8s.api.core"
            } else {
                group
            },
            version,
            r.kind
        );
        let mut schema = r.schema.clone().unwrap_or_else(
            || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        );
        schema["x-kubernetes-group-version-kind"] = json!([gvk]);
        schemas.insert(schema_name, schema);
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_negotiation() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(aggregated_flavour(kubectl), Some("v2"));
        let old = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(aggregated_flavour(old), Some("v2beta1"));
        assert_eq!(aggregated_flavour("application/json, */*"), None);
        assert_eq!(aggregated_flavour(""), None);
    }

    #[test]
    fn legacy_has_subresources_and_categories() {
        let reg = Registry::new();
        let doc = resource_list(&reg, "apps", "v1").unwrap();
        let names: Vec<&str> = doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"deployments/status"));
        assert!(names.contains(&"deployments/scale"));
        let core = resource_list(&reg, "", "v1").unwrap();
        let entry = |name: &str| {
            core["resources"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["name"] == name)
                .cloned()
        };
        let finalize = entry("namespaces/finalize").expect("namespaces/finalize");
        assert_eq!(finalize["verbs"], json!(["update"]));
        assert_eq!(finalize["kind"], "Namespace");
        assert!(entry("configmaps/finalize").is_none());
        let agg = aggregated(&reg, true, "v2");
        assert_eq!(agg["items"][0]["metadata"]["name"], "");
        let groups = api_group_list(&reg);
        assert!(
            groups["groups"]
                .as_array()
                .unwrap()
                .iter()
                .all(|g| g["name"] != "")
        );
    }

    #[test]
    fn an_openapi_document_is_built_once_per_registry_generation() {
        let docs = OpenApiDocs::default();
        let builds = std::cell::Cell::new(0);
        let build = || {
            builds.set(builds.get() + 1);
            Some(json!({"n": builds.get()}))
        };
        let first = docs.get(1, "api/v1", build).unwrap();
        let again = docs.get(1, "api/v1", build).unwrap();
        assert_eq!(builds.get(), 1);
        assert_eq!(first, again);
        let next = docs.get(2, "api/v1", build).unwrap();
        assert_eq!(builds.get(), 2, "a new generation builds again");
        assert_ne!(first, next);
        assert!(docs.get(2, "apis/none/v1", || None).is_none());
    }
}
