//! What a resource request addresses: the served resource, the namespace,
//! the name and the subresource, resolved against the registry.

use std::sync::Arc;

use crate::error::ApiError;
use crate::http::request_info::RequestInfo;
use crate::registry::resources::{Registry, ResourceInfo};
use crate::registry::writes::is_namespace;

/// What a resource request addresses, as served.
pub(super) struct Target<'a> {
    pub(super) info: Arc<ResourceInfo>,
    /// None for cluster-scoped resources and all-namespace lists.
    pub(super) namespace: Option<&'a str>,
    pub(super) name: Option<&'a str>,
    pub(super) sub: Option<&'a str>,
}

/// The resource, scope, name and subresource `req` (a resource request)
/// was authorized for, resolved against the registry; 404 when nothing is
/// served there.
pub(super) fn target<'a>(
    registry: &Registry,
    req: &'a RequestInfo,
) -> Result<Target<'a>, ApiError> {
    let (name, sub) = match req.parts.as_slice() {
        [_] => (None, None),
        [_, n] => (Some(n.as_str()), None),
        [_, n, s] => (Some(n.as_str()), Some(s.as_str())),
        _ => return Err(ApiError::no_route()),
    };
    let info = registry
        .find(&req.group, &req.version, &req.resource)
        .ok_or_else(ApiError::no_route)?;
    let namespace = match req.namespace.as_deref() {
        Some(ns) if info.namespaced => Some(ns),
        // `/api/v1/namespaces/{name}`: the namespace in the request is the
        // object itself. Only for the built-in kind, as upstream: a
        // cluster-scoped custom resource called `namespaces` must not be
        // reachable through a Role in a namespace of the same name.
        Some(_) if !req.namespace_scope && is_namespace(&info) => None,
        Some(_) => return Err(ApiError::no_route()),
        None => None,
    };
    if info.namespaced && namespace.is_none() && name.is_some() {
        return Err(ApiError::no_route());
    }
    Ok(Target {
        info,
        namespace,
        name,
        sub,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// Where routing takes a GET of `path`: `plural ns=.. name=.. sub=..`
    /// with only what is set, or None for 404.
    fn routed(registry: &Registry, path: &str) -> Option<String> {
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let info = RequestInfo::parse("GET", &segs, false, None);
        let t = target(registry, &info).ok()?;
        let mut out = t.info.plural.clone();
        for (k, v) in [("ns", t.namespace), ("name", t.name), ("sub", t.sub)] {
            if let Some(v) = v {
                out.push_str(&format!(" {k}={v}"));
            }
        }
        Some(out)
    }

    fn crd(plural: &str, scope: &str) -> Value {
        json!({"metadata": {"name": format!("{plural}.example.com")},
            "spec": {"group": "example.com", "scope": scope,
                "names": {"plural": plural, "kind": "K"},
                "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}}]}})
    }

    #[test]
    fn routing_serves_what_the_request_info_names() {
        let mut registry = Registry::new();
        for (plural, scope) in [
            ("status", "Namespaced"),
            ("finalize", "Namespaced"),
            ("namespaces", "Cluster"),
        ] {
            let (storage, infos) = crate::registry::crd::infos_for(&crd(plural, scope));
            registry.set_custom(&storage, infos);
        }
        // A namespace's subresource, never an object of `status` or
        // `finalize`, with or without a trailing part.
        assert_eq!(
            routed(&registry, "/api/v1/namespaces/ns/status").as_deref(),
            Some("namespaces name=ns sub=status")
        );
        for path in [
            "/api/v1/namespaces/ns/status/obj",
            "/api/v1/namespaces/ns/finalize/obj",
            "/apis/example.com/v1/namespaces/ns/status/obj",
            "/apis/example.com/v1/namespaces/ns/finalize/obj",
            "/apis/example.com/v1/namespaces/ns/status",
            // The cluster-scoped custom `namespaces` is not reached
            // through a namespace of its own name.
            "/apis/example.com/v1/namespaces/ns",
            "/api/v1/namespaces/ns/namespaces/ns",
            "/api/v1/namespaces/ns/configmaps/c/status/extra",
        ] {
            assert_eq!(routed(&registry, path), None, "{path}");
        }
        // What the resources called `status` and `finalize` still serve.
        for (path, want) in [
            ("/apis/example.com/v1/status", "status"),
            ("/apis/example.com/v1/finalize", "finalize"),
            ("/apis/example.com/v1/namespaces", "namespaces"),
            ("/api/v1/namespaces/ns", "namespaces name=ns"),
            (
                "/api/v1/namespaces/ns/configmaps/c",
                "configmaps ns=ns name=c",
            ),
        ] {
            assert_eq!(routed(&registry, path).as_deref(), Some(want), "{path}");
        }
    }
}
