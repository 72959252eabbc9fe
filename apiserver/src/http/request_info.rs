//! What a request addresses, read from its method, path and query alone (no
//! registry lookup), as the real server's RequestInfoFactory does: the verb,
//! group, resource, namespace and name. Authorization decides on it, routing
//! dispatches on it, fault injection matches on it and the write audit
//! records it: one reading of the path, so a request is never served as
//! something other than what was authorized.

/// Subresources of a namespace that are addressed as
/// `/api/v1/namespaces/{name}/{sub}` rather than naming a namespace scope.
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

/// The parsed target of one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RequestInfo {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`; the lowercased method for non-resource paths.
    pub(crate) verb: String,
    /// False for `/version`, discovery, OpenAPI and health paths.
    pub(crate) is_resource: bool,
    pub(crate) group: String,
    pub(crate) version: String,
    /// The plural resource name, e.g. `configmaps`.
    pub(crate) resource: String,
    pub(crate) subresource: Option<String>,
    pub(crate) namespace: Option<String>,
    /// From the path, or for a list or watch from a `metadata.name=`
    /// field selector (so `resourceNames` rules can allow watching one
    /// object, as upstream).
    pub(crate) name: Option<String>,
    /// The decoded URL path (what non-resource rules match).
    pub(crate) path: String,
    /// The path after the version with a `namespaces/{ns}/` scope taken
    /// off (upstream's `Parts`): resource, name, subresource, then parts
    /// nothing serves. Routing takes the name from here because `name`
    /// may come from a field selector.
    pub(crate) parts: Vec<String>,
    /// Whether `namespace` is a `namespaces/{ns}/` scope; false when the
    /// path addresses the namespace itself (`namespaces/{ns}`, optionally
    /// with `status` or `finalize`), which upstream authorizes in its own
    /// namespace.
    pub(crate) namespace_scope: bool,
}

impl RequestInfo {
    /// Parses decoded path segments (`["api", "v1", "namespaces", ...]`);
    /// `watch` is the `watch` query flag, `field_selector` the
    /// `fieldSelector` query parameter.
    pub(crate) fn parse(
        method: &str,
        segments: &[&str],
        watch: bool,
        field_selector: Option<&str>,
    ) -> RequestInfo {
        let lower = method.to_ascii_lowercase();
        let path = format!("/{}", segments.join("/"));
        let non_resource = || RequestInfo {
            verb: lower.clone(),
            path: path.clone(),
            ..Default::default()
        };
        let (group, version, rest) = match segments {
            ["api", v, rest @ ..] => ("", *v, rest),
            ["apis", g, v, rest @ ..] => (*g, *v, rest),
            _ => return non_resource(),
        };
        if rest.is_empty() {
            return non_resource();
        }
        let mut info = RequestInfo {
            is_resource: true,
            group: group.to_string(),
            version: version.to_string(),
            path: path.clone(),
            ..Default::default()
        };
        let mut parts = rest;
        if parts[0] == "namespaces" && parts.len() > 1 {
            info.namespace = Some(parts[1].to_string());
            // Upstream decides on the third part alone, so
            // `namespaces/{ns}/status/{name}` is namespace {ns}'s status
            // with a trailing part, never object {name} of a resource
            // called `status`.
            if parts.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&parts[2]) {
                parts = &parts[2..];
                info.namespace_scope = true;
            }
        }
        info.parts = parts.iter().map(|s| s.to_string()).collect();
        info.resource = parts[0].to_string();
        info.name = parts.get(1).map(|s| s.to_string());
        info.subresource = parts.get(2).map(|s| s.to_string());
        info.verb = match (method, info.name.is_some()) {
            // A named GET is a get even with ?watch (upstream only watches
            // collections this way).
            ("GET" | "HEAD", false) if watch => "watch",
            ("GET" | "HEAD", false) => "list",
            ("GET" | "HEAD", true) => "get",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", false) => "deletecollection",
            ("DELETE", true) => "delete",
            _ => {
                return RequestInfo {
                    verb: lower,
                    ..info
                };
            }
        }
        .to_string();
        if matches!(info.verb.as_str(), "list" | "watch") {
            info.name = field_selector.and_then(crate::registry::selectors::exact_name_of);
        }
        info
    }

    /// The attributes authorization decides on.
    pub(crate) fn attributes(&self) -> crate::auth::rbac::Attributes {
        crate::auth::rbac::Attributes {
            verb: self.verb.clone(),
            resource_request: self.is_resource,
            group: self.group.clone(),
            resource: self.resource.clone(),
            subresource: self.subresource.clone().unwrap_or_default(),
            name: self.name.clone().unwrap_or_default(),
            namespace: self.namespace.clone().unwrap_or_default(),
            path: self.path.clone(),
        }
    }

    /// Whether the request may change stored state.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn is_mutating(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(method: &str, path: &str) -> RequestInfo {
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        RequestInfo::parse(method, &segs, false, None)
    }

    #[test]
    fn resources_namespaces_and_subresources() {
        let i = parse("PUT", "/apis/apps/v1/namespaces/ns/deployments/d/status");
        assert_eq!(
            (i.verb.as_str(), i.group.as_str(), i.resource.as_str()),
            ("update", "apps", "deployments")
        );
        assert_eq!(i.namespace.as_deref(), Some("ns"));
        assert_eq!(i.name.as_deref(), Some("d"));
        assert_eq!(i.subresource.as_deref(), Some("status"));
        let i = parse("PUT", "/api/v1/namespaces/ns/finalize");
        assert_eq!(i.resource, "namespaces");
        assert_eq!(i.name.as_deref(), Some("ns"));
        assert_eq!(i.subresource.as_deref(), Some("finalize"));
        let i = parse("DELETE", "/api/v1/namespaces/ns/configmaps");
        assert_eq!(i.verb, "deletecollection");
        assert!(i.is_mutating());
        let i = parse("POST", "/api/v1/namespaces");
        assert_eq!(
            (i.verb.as_str(), i.resource.as_str()),
            ("create", "namespaces")
        );
        assert_eq!(i.namespace, None);
    }

    #[test]
    fn lists_and_watches_name_the_object_a_field_selector_pins() {
        let segs = ["api", "v1", "namespaces", "ns", "configmaps"];
        let i = RequestInfo::parse("GET", &segs, true, Some("metadata.name=c1"));
        assert_eq!((i.verb.as_str(), i.name.as_deref()), ("watch", Some("c1")));
        let i = RequestInfo::parse("GET", &segs, false, Some("metadata.name!=c1"));
        assert_eq!((i.verb.as_str(), i.name.as_deref()), ("list", None));
        // Not for deletecollection, and a named GET with ?watch is a get.
        let i = RequestInfo::parse("DELETE", &segs, false, Some("metadata.name=c1"));
        assert_eq!((i.verb.as_str(), i.name), ("deletecollection", None));
        let segs = ["api", "v1", "namespaces", "ns", "configmaps", "c1"];
        assert_eq!(RequestInfo::parse("GET", &segs, true, None).verb, "get");
        let a = RequestInfo::parse("GET", &segs, false, None).attributes();
        assert_eq!((a.namespace.as_str(), a.name.as_str()), ("ns", "c1"));
        assert_eq!(a.path, "/api/v1/namespaces/ns/configmaps/c1");
    }

    /// `resource ns=.. name=.. sub=..`, with only what is set, and how
    /// many parts the path has from the resource on.
    fn summary(i: &RequestInfo) -> (String, usize) {
        let mut out = i.resource.clone();
        for (k, v) in [
            ("ns", &i.namespace),
            ("name", &i.name),
            ("sub", &i.subresource),
        ] {
            if let Some(v) = v {
                out.push_str(&format!(" {k}={v}"));
            }
        }
        (out, i.parts.len())
    }

    #[test]
    fn namespace_subresources_are_decided_by_the_third_part_alone() {
        // (path, what it addresses, parts from the resource on, whether
        // the namespace is a scope rather than the object addressed)
        let cases = [
            (
                "/api/v1/namespaces/ns",
                "namespaces ns=ns name=ns",
                2,
                false,
            ),
            (
                "/api/v1/namespaces/ns/status",
                "namespaces ns=ns name=ns sub=status",
                3,
                false,
            ),
            // A trailing part does not make `status` a resource: upstream
            // reads the namespace's status, and routing refuses the rest.
            (
                "/api/v1/namespaces/ns/status/obj",
                "namespaces ns=ns name=ns sub=status",
                4,
                false,
            ),
            (
                "/apis/example.com/v1/namespaces/ns/status/obj",
                "namespaces ns=ns name=ns sub=status",
                4,
                false,
            ),
            (
                "/apis/example.com/v1/namespaces/ns/finalize/obj/status",
                "namespaces ns=ns name=ns sub=finalize",
                5,
                false,
            ),
            (
                "/apis/example.com/v1/namespaces/ns/statuses/obj",
                "statuses ns=ns name=obj",
                2,
                true,
            ),
            (
                "/apis/example.com/v1/namespaces/ns/widgets/status",
                "widgets ns=ns name=status",
                2,
                true,
            ),
            (
                "/apis/example.com/v1/status/obj",
                "status name=obj",
                2,
                false,
            ),
            ("/apis/example.com/v1/status", "status", 1, false),
            (
                "/api/v1/namespaces/ns/namespaces/other",
                "namespaces ns=ns name=other",
                2,
                true,
            ),
        ];
        for (path, want, parts, scope) in cases {
            let i = parse("GET", path);
            assert_eq!(summary(&i), (want.to_string(), parts), "{path}");
            assert_eq!(i.parts[0], i.resource, "{path}");
            assert_eq!(i.namespace_scope, scope, "{path}");
        }
        let a = parse("PATCH", "/apis/example.com/v1/namespaces/ns/status/obj").attributes();
        assert_eq!(
            (a.verb.as_str(), a.group.as_str(), a.resource.as_str()),
            ("patch", "example.com", "namespaces")
        );
        assert_eq!(
            (
                a.subresource.as_str(),
                a.name.as_str(),
                a.namespace.as_str()
            ),
            ("status", "ns", "ns")
        );
    }

    #[test]
    fn non_resource_paths() {
        let i = parse("GET", "/version");
        assert!(!i.is_resource);
        assert_eq!(i.verb, "get");
        assert!(!parse("GET", "/apis/apps/v1").is_resource);
        assert!(!parse("GET", "/api").is_resource);
    }
}
