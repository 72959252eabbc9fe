//! Role-based access control evaluated exactly as upstream's RBAC
//! authorizer (`plugin/pkg/auth/authorizer/rbac`) does, over the Roles,
//! ClusterRoles, RoleBindings and ClusterRoleBindings in the store:
//!
//! - ClusterRoleBindings are visited first, then (for a namespaced request)
//!   the RoleBindings of the request's namespace; a RoleBinding grants its
//!   Role, or the ClusterRole it names, in its own namespace only.
//! - A subject applies by kind: `User` by name, `Group` by membership,
//!   `ServiceAccount` by `system:serviceaccount:NS:NAME` (a RoleBinding's
//!   subject without a namespace means the binding's namespace).
//! - A rule allows a resource request when its verbs, apiGroups, resources
//!   (`*`, `res`, `res/sub`, `*/sub`) and resourceNames (empty = all) match;
//!   a non-resource request when its verbs and nonResourceURLs (`*`, exact,
//!   or a `prefix*`) match.
//! - Rules are additive; a binding whose role is missing contributes an
//!   error that a denial reports, never a denial of its own.
//!
//! Every decision sees the store as it is now, so binding changes take
//! effect with the next request: what it reads is parsed once per change
//! to any RBAC object ([`RbacCache`]). Only the `rules` stored in a role
//! count: those of an aggregated ClusterRole are written into it by
//! `registry::aggregation`, as upstream's controller does.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Value, json};

use super::identity::{self, UserInfo};
use crate::registry::resources::GroupResource;
use crate::registry::storage::Store;
use crate::values::go_quote;

/// The RBAC API group.
pub(crate) use crate::registry::writes::RBAC_GROUP as GROUP;

/// What a request (or an access review) asks to do, upstream's
/// `authorizer.Attributes`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Attributes {
    pub(crate) verb: String,
    /// False for non-resource paths (`/version`, discovery, `/healthz`).
    pub(crate) resource_request: bool,
    pub(crate) group: String,
    pub(crate) resource: String,
    pub(crate) subresource: String,
    /// Empty when the request names no object (list, create, ...).
    pub(crate) name: String,
    /// Empty for cluster-scoped requests.
    pub(crate) namespace: String,
    /// The URL path of a non-resource request.
    pub(crate) path: String,
}

impl Attributes {
    /// A resource request: `verb` on `group`'s `resource`, or on its
    /// `subresource` unless that is empty, naming the object `name` (empty:
    /// none) in `namespace` (empty: cluster scope).
    pub(crate) fn resource(
        verb: &str,
        group: &str,
        resource: &str,
        subresource: &str,
        namespace: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource_request: true,
            group: group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            name: name.into(),
            namespace: namespace.into(),
            path: String::new(),
        }
    }

    /// A non-resource request: `verb` on the URL `path`.
    pub(crate) fn non_resource(verb: &str, path: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            path: path.into(),
            ..Default::default()
        }
    }
}

/// One rule of a Role or ClusterRole.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PolicyRule {
    pub(crate) verbs: Vec<String>,
    pub(crate) api_groups: Vec<String>,
    pub(crate) resources: Vec<String>,
    pub(crate) resource_names: Vec<String>,
    pub(crate) non_resource_urls: Vec<String>,
}

fn strings(v: &Value, field: &str) -> Vec<String> {
    v.get(field)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

impl PolicyRule {
    pub(crate) fn from_json(v: &Value) -> PolicyRule {
        PolicyRule {
            verbs: strings(v, "verbs"),
            api_groups: strings(v, "apiGroups"),
            resources: strings(v, "resources"),
            resource_names: strings(v, "resourceNames"),
            non_resource_urls: strings(v, "nonResourceURLs"),
        }
    }

    /// Whether this rule allows the request (upstream's `RuleAllows`).
    pub(crate) fn allows(&self, a: &Attributes) -> bool {
        if !self.verbs.iter().any(|v| v == "*" || *v == a.verb) {
            return false;
        }
        if !a.resource_request {
            return self.non_resource_urls.iter().any(|u| {
                u == "*"
                    || *u == a.path
                    || (u.ends_with('*') && a.path.starts_with(u.trim_end_matches('*')))
            });
        }
        let combined = if a.subresource.is_empty() {
            a.resource.clone()
        } else {
            format!("{}/{}", a.resource, a.subresource)
        };
        self.api_groups.iter().any(|g| g == "*" || *g == a.group)
            && self.resources.iter().any(|r| {
                r == "*"
                    || *r == combined
                    || (!a.subresource.is_empty()
                        && r.strip_prefix("*/") == Some(a.subresource.as_str()))
            })
            && (self.resource_names.is_empty() || self.resource_names.contains(&a.name))
    }

    /// `authorization.k8s.io/v1` `ResourceRule` or `NonResourceRule` form
    /// (SelfSubjectRulesReview), empty lists left out as upstream does.
    fn review_json(&self, non_resource: bool) -> Value {
        let mut v = json!({"verbs": self.verbs});
        let mut put = |k: &str, l: &Vec<String>| {
            if !l.is_empty() {
                v[k] = json!(l);
            }
        };
        if non_resource {
            put("nonResourceURLs", &self.non_resource_urls);
        } else {
            put("apiGroups", &self.api_groups);
            put("resources", &self.resources);
            put("resourceNames", &self.resource_names);
        }
        v
    }
}

/// A binding's subject.
#[derive(Debug, Clone)]
struct Subject {
    kind: String,
    name: String,
    namespace: String,
}

impl Subject {
    /// Whether this subject names `user` (upstream's `appliesToUser`);
    /// `binding_ns` is empty for ClusterRoleBindings.
    fn applies_to(&self, user: &UserInfo, binding_ns: &str) -> bool {
        match self.kind.as_str() {
            "User" => user.name == self.name,
            "Group" => user.groups.contains(&self.name),
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    binding_ns
                } else {
                    &self.namespace
                };
                !ns.is_empty() && identity::is_service_account(&user.name, ns, &self.name)
            }
            _ => false,
        }
    }

    /// `User "alice"`, `ServiceAccount "sa/ns"` (upstream's wording).
    fn describe(&self, binding_ns: &str) -> String {
        match self.kind.as_str() {
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    binding_ns
                } else {
                    &self.namespace
                };
                format!("{} {}", self.kind, go_quote(&format!("{}/{ns}", self.name)))
            }
            _ => format!("{} {}", self.kind, go_quote(&self.name)),
        }
    }
}

/// A RoleBinding or ClusterRoleBinding as the evaluator needs it.
#[derive(Debug, Clone)]
struct Binding {
    name: String,
    /// Empty for a ClusterRoleBinding.
    namespace: String,
    role_kind: String,
    role_name: String,
    subjects: Vec<Subject>,
}

impl Binding {
    fn from_json(obj: &Value) -> Binding {
        let s = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_string();
        Binding {
            name: crate::values::meta_str(obj, "name")
                .unwrap_or("")
                .to_string(),
            namespace: crate::values::meta_str(obj, "namespace")
                .unwrap_or("")
                .to_string(),
            role_kind: s(&obj["roleRef"], "kind"),
            role_name: s(&obj["roleRef"], "name"),
            subjects: obj
                .get("subjects")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|v| Subject {
                            kind: s(v, "kind"),
                            name: s(v, "name"),
                            namespace: s(v, "namespace"),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// Where an allowing rule came from, worded as upstream's describers:
/// `ClusterRoleBinding "b" of ClusterRole "r" to Group "g"`.
fn describe_source(b: &Binding, subject: &Subject) -> String {
    if b.namespace.is_empty() {
        format!(
            "ClusterRoleBinding {} of {} {} to {}",
            go_quote(&b.name),
            b.role_kind,
            go_quote(&b.role_name),
            subject.describe("")
        )
    } else {
        format!(
            "RoleBinding {} of {} {} to {}",
            go_quote(&format!("{}/{}", b.name, b.namespace)),
            b.role_kind,
            go_quote(&b.role_name),
            subject.describe(&b.namespace)
        )
    }
}

fn gr(resource: &str) -> GroupResource {
    GroupResource::new(GROUP, resource)
}

/// The RBAC objects parsed as the evaluator reads them, kept while no RBAC
/// object changes: ClusterRoleBindings, each namespace's RoleBindings (of
/// namespaces that have some) and the rules of each role named. A
/// decision parses only what changed since the last; before, each one
/// parsed every ClusterRoleBinding, the namespace's RoleBindings and the
/// roles they name.
#[derive(Default)]
pub(crate) struct RbacCache {
    current: Mutex<Arc<Parsed>>,
}

/// What is parsed at one RBAC generation of the store.
#[derive(Default)]
struct Parsed {
    generation: u64,
    cluster_bindings: OnceLock<Arc<Vec<Binding>>>,
    bindings: Mutex<HashMap<String, Arc<Vec<Binding>>>>,
    roles: Mutex<HashMap<RoleKey, Arc<RoleRules>>>,
}

impl RbacCache {
    /// What is parsed at `generation` (the store's, read before the
    /// store: so nothing parsed is older than it).
    fn at(&self, generation: u64) -> Arc<Parsed> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.generation != generation {
            *current = Arc::new(Parsed {
                generation,
                ..Parsed::default()
            });
        }
        current.clone()
    }
}

/// `key`'s entry of `map`, made by `make` (outside the lock) if missing;
/// kept unless `keep` says otherwise.
fn cached<K: std::hash::Hash + Eq, V>(
    map: &Mutex<HashMap<K, Arc<V>>>,
    key: K,
    make: impl FnOnce() -> V,
    keep: impl FnOnce(&V) -> bool,
) -> Arc<V> {
    if let Some(v) = map.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return v.clone();
    }
    let made = Arc::new(make());
    if keep(&made) {
        map.lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, made.clone());
    }
    made
}

/// Reads RBAC objects from the store, through what the cache holds.
pub(crate) struct Resolver<'a> {
    store: &'a Store,
    parsed: Arc<Parsed>,
}

/// A visitor's verdict: keep visiting or stop.
enum Visit {
    Continue,
    Stop,
}

/// A role as a binding names it: kind, namespace, name.
type RoleKey = (String, String, String);
/// A role's rules, or why it could not be read.
type RoleRules = Result<Vec<PolicyRule>, String>;

/// What a visit sees: a rule with the binding and subject that grant it,
/// or why a binding's role could not be resolved.
type Visited<'r> = Result<(&'r Binding, &'r Subject, &'r PolicyRule), String>;

impl<'a> Resolver<'a> {
    /// A resolver of `store` at RBAC `generation`, read before anything
    /// of the store is.
    pub(crate) fn new(store: &'a Store, cache: &RbacCache, generation: u64) -> Self {
        Resolver {
            store,
            parsed: cache.at(generation),
        }
    }

    /// The rules a binding's roleRef resolves to.
    fn role_rules(&self, b: &Binding) -> Result<Vec<PolicyRule>, String> {
        role_rules(self.store, &b.role_kind, &b.namespace, &b.role_name)
    }

    /// The ClusterRoleBindings, or (with `namespace`) its RoleBindings.
    fn bindings(&self, namespace: Option<&str>) -> Arc<Vec<Binding>> {
        let read = |resource: &str| {
            self.store
                .list(&gr(resource), namespace, None, None, None)
                .items
                .iter()
                .map(|o| Binding::from_json(&crate::registry::storage::parse_json(o)))
                .collect::<Vec<_>>()
        };
        match namespace {
            None => self
                .parsed
                .cluster_bindings
                .get_or_init(|| Arc::new(read("clusterrolebindings")))
                .clone(),
            // A namespace without RoleBindings is not remembered: requests
            // name any namespace they like.
            Some(ns) => cached(
                &self.parsed.bindings,
                ns.to_string(),
                || read("rolebindings"),
                |made| !made.is_empty(),
            ),
        }
    }

    /// Visits every rule that applies to `user` in `namespace` (all
    /// ClusterRoleBindings, then the namespace's RoleBindings), and every
    /// error resolving them, until the visitor stops.
    fn visit(
        &self,
        user: &UserInfo,
        namespace: &str,
        visitor: &mut dyn FnMut(Visited<'_>) -> Visit,
    ) {
        let mut sources = vec![self.bindings(None)];
        if !namespace.is_empty() {
            sources.push(self.bindings(Some(namespace)));
        }
        for bindings in sources {
            for b in bindings.iter() {
                let Some(subject) = b.subjects.iter().find(|s| s.applies_to(user, &b.namespace))
                else {
                    continue;
                };
                // Each role is read once per RBAC change, however many
                // bindings and decisions name it.
                let key = (
                    b.role_kind.clone(),
                    b.namespace.clone(),
                    b.role_name.clone(),
                );
                let resolved = cached(&self.parsed.roles, key, || self.role_rules(b), |_| true);
                match &*resolved {
                    Err(e) => {
                        if let Visit::Stop = visitor(Err(e.clone())) {
                            return;
                        }
                    }
                    Ok(rules) => {
                        for rule in rules {
                            if let Visit::Stop = visitor(Ok((b, subject, rule))) {
                                return;
                            }
                        }
                    }
                }
            }
        }
    }

    /// Upstream's RBAC decision: allowed with the rule's source as reason,
    /// or not, with the resolution errors (if any) as reason.
    pub(crate) fn authorize(&self, user: &UserInfo, a: &Attributes) -> (bool, String) {
        let mut allowed = None;
        let mut errors = Vec::new();
        self.visit(user, &a.namespace, &mut |item| match item {
            Ok((b, subject, rule)) if rule.allows(a) => {
                allowed = Some(format!("RBAC: allowed by {}", describe_source(b, subject)));
                Visit::Stop
            }
            Ok(_) => Visit::Continue,
            Err(e) => {
                errors.push(e);
                Visit::Continue
            }
        });
        match allowed {
            Some(reason) => (true, reason),
            None if errors.is_empty() => (false, String::new()),
            None => (false, format!("RBAC: {}", aggregate(&errors))),
        }
    }

    /// Every rule that applies to `user` in `namespace`, and the errors
    /// met resolving them (upstream's `RulesFor`).
    /// At most [`MAX_REVIEWED_RULES`] rules: past them the answer is
    /// incomplete, with an error saying so.
    pub(crate) fn rules_for(
        &self,
        user: &UserInfo,
        namespace: &str,
    ) -> (Vec<PolicyRule>, Vec<String>) {
        let (mut rules, mut errors) = (Vec::new(), Vec::new());
        self.visit(user, namespace, &mut |item| {
            match item {
                Ok(_) if rules.len() == MAX_REVIEWED_RULES => {
                    errors.push(format!(
                        "more than {MAX_REVIEWED_RULES} rules apply; the list is cut"
                    ));
                    return Visit::Stop;
                }
                Ok((_, _, rule)) => rules.push(rule.clone()),
                Err(e) => errors.push(e),
            }
            Visit::Continue
        });
        (rules, errors)
    }
}

/// The rules of the role a binding in `namespace` (empty: a
/// ClusterRoleBinding) names by `kind` and `name` (upstream's
/// `GetRoleReferenceRules`), or the error upstream's listers give.
pub(crate) fn role_rules(
    store: &Store,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Result<Vec<PolicyRule>, String> {
    let (resource, ns, singular) = match kind {
        "Role" => ("roles", namespace, "role"),
        "ClusterRole" => ("clusterroles", "", "clusterrole"),
        other => {
            return Err(format!(
                "unsupported role reference kind: {}",
                go_quote(other)
            ));
        }
    };
    let role = store
        .get(&gr(resource), ns, name)
        .ok_or_else(|| format!("{singular}.{GROUP} {} not found", go_quote(name)))?;
    Ok(role
        .obj
        .get("rules")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(PolicyRule::from_json).collect())
        .unwrap_or_default())
}

/// `authorization.k8s.io/v1` `SubjectRulesReviewStatus` of a rule set.
pub(crate) fn rules_review_status(rules: &[PolicyRule], errors: &[String]) -> Value {
    let resource: Vec<Value> = rules
        .iter()
        .filter(|r| !r.resources.is_empty())
        .map(|r| r.review_json(false))
        .collect();
    let non_resource: Vec<Value> = rules
        .iter()
        .filter(|r| !r.non_resource_urls.is_empty())
        .map(|r| r.review_json(true))
        .collect();
    let mut status = json!({
        "resourceRules": resource,
        "nonResourceRules": non_resource,
        // Upstream's union of authorizers marks the answer incomplete when
        // any rule could not be resolved.
        "incomplete": !errors.is_empty(),
    });
    if !errors.is_empty() {
        status["evaluationError"] = json!(aggregate(errors));
    }
    status
}

/// The most rules a rules review lists.
pub(crate) const MAX_REVIEWED_RULES: usize = 10_000;
/// The most distinct errors an aggregate names; the rest are counted.
pub(crate) const MAX_AGGREGATED: usize = 20;

/// Several errors as upstream's `utilerrors.NewAggregate(...).Error()`
/// words them: one as is, several deduplicated in `[a, b]`; past
/// [`MAX_AGGREGATED`] distinct ones, the rest counted.
pub(crate) fn aggregate(errors: &[String]) -> String {
    match errors {
        [] => String::new(),
        [one] => one.clone(),
        _ => {
            let mut seen: Vec<&str> = Vec::new();
            let mut distinct: HashSet<&str> = HashSet::new();
            for e in errors {
                if distinct.insert(e.as_str()) && seen.len() <= MAX_AGGREGATED {
                    seen.push(e);
                }
            }
            let more = distinct.len().saturating_sub(MAX_AGGREGATED);
            seen.truncate(MAX_AGGREGATED);
            if seen.len() == 1 {
                seen[0].to_string()
            } else if more > 0 {
                format!("[{}, and {more} more]", seen.join(", "))
            } else {
                format!("[{}]", seen.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decisions at one RBAC generation share what was parsed: a change the
    /// generation does not announce is not seen, one it announces is.
    #[test]
    fn decisions_of_one_rbac_generation_share_what_was_parsed() {
        use crate::registry::storage::{Change, Expect};
        let store = Store::new();
        let put = |resource: &str, name: &str, obj: Value| {
            store
                .commit(
                    &gr(resource),
                    "",
                    name,
                    Expect::Absent,
                    Change::Put(obj),
                    false,
                )
                .unwrap();
        };
        put(
            "clusterroles",
            "reader",
            json!({"metadata": {"name": "reader"},
                "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]}),
        );
        put(
            "clusterrolebindings",
            "alice-reads",
            json!({"metadata": {"name": "alice-reads"},
                "roleRef": {"kind": "ClusterRole", "name": "reader"},
                "subjects": [{"kind": "User", "name": "alice"}]}),
        );
        let alice = UserInfo {
            name: "alice".into(),
            ..Default::default()
        };
        let get_pods = Attributes::resource("get", "", "pods", "", "default", "");
        let cache = RbacCache::default();
        let decide = |generation| {
            Resolver::new(&store, &cache, generation)
                .authorize(&alice, &get_pods)
                .0
        };
        assert!(decide(1));
        let rv = store
            .get(&gr("clusterrolebindings"), "", "alice-reads")
            .unwrap()
            .rv;
        store
            .commit(
                &gr("clusterrolebindings"),
                "",
                "alice-reads",
                Expect::Rv(rv),
                Change::Delete,
                false,
            )
            .unwrap();
        assert!(decide(1), "parsed at generation 1, before the deletion");
        assert!(
            !decide(2),
            "the deletion's generation reads the store again"
        );
    }

    fn rule(v: Value) -> PolicyRule {
        PolicyRule::from_json(&v)
    }

    /// A request in the namespace `ns`.
    fn res(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes::resource(verb, group, resource, sub, "ns", name)
    }

    #[test]
    fn resource_rules_match_as_upstream() {
        let r = rule(
            json!({"apiGroups": ["apps"], "resources": ["deployments", "*/scale"], "verbs": ["get", "update"]}),
        );
        assert!(r.allows(&res("get", "apps", "deployments", "", "d")));
        assert!(!r.allows(&res("list", "apps", "deployments", "", "")));
        assert!(!r.allows(&res("get", "", "deployments", "", "d")));
        // A resource does not grant its subresources...
        assert!(!r.allows(&res("get", "apps", "deployments", "status", "d")));
        // ... but */scale grants every resource's scale.
        assert!(r.allows(&res("update", "apps", "statefulsets", "scale", "s")));
        assert!(!r.allows(&res("update", "apps", "statefulsets", "", "s")));
        let star = rule(json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}));
        assert!(star.allows(&res("deletecollection", "x.io", "things", "status", "")));
        let named = rule(
            json!({"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["get", "list"]}),
        );
        assert!(named.allows(&res("get", "", "configmaps", "", "a")));
        assert!(!named.allows(&res("get", "", "configmaps", "", "b")));
        // A list names nothing, so resourceNames never grant it.
        assert!(!named.allows(&res("list", "", "configmaps", "", "")));
        let sub = rule(
            json!({"apiGroups": ["apps"], "resources": ["deployments/status"], "verbs": ["patch"]}),
        );
        assert!(sub.allows(&res("patch", "apps", "deployments", "status", "d")));
        assert!(!sub.allows(&res("patch", "apps", "deployments", "", "d")));
    }

    #[test]
    fn non_resource_rules_match_prefixes() {
        let r = rule(json!({"nonResourceURLs": ["/api", "/apis/*", "/healthz"], "verbs": ["get"]}));
        let path = |p: &str, verb: &str| Attributes::non_resource(verb, p);
        assert!(r.allows(&path("/api", "get")));
        assert!(!r.allows(&path("/api/v1", "get")));
        assert!(r.allows(&path("/apis/apps/v1", "get")));
        assert!(!r.allows(&path("/apis", "get")));
        assert!(!r.allows(&path("/healthz", "post")));
        // Resource rules never grant paths and vice versa.
        let res_rule = rule(json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}));
        assert!(!res_rule.allows(&path("/version", "get")));
        assert!(!r.allows(&res("get", "", "healthz", "", "")));
    }

    #[test]
    fn subjects_and_descriptions() {
        let sa = Subject {
            kind: "ServiceAccount".into(),
            name: "sa".into(),
            namespace: String::new(),
        };
        let user = UserInfo::service_account("ns", "sa", "u");
        assert!(sa.applies_to(&user, "ns"));
        assert!(!sa.applies_to(&user, "other"));
        // A ClusterRoleBinding must name the service account's namespace.
        assert!(!sa.applies_to(&user, ""));
        assert_eq!(sa.describe("ns"), "ServiceAccount \"sa/ns\"");
        let group = Subject {
            kind: "Group".into(),
            name: "system:serviceaccounts:ns".into(),
            namespace: String::new(),
        };
        assert!(group.applies_to(&user, ""));
        let b = Binding {
            name: "b".into(),
            namespace: "ns".into(),
            role_kind: "ClusterRole".into(),
            role_name: "view".into(),
            subjects: vec![sa.clone()],
        };
        assert_eq!(
            describe_source(&b, &sa),
            "RoleBinding \"b/ns\" of ClusterRole \"view\" to ServiceAccount \"sa/ns\""
        );
    }

    #[test]
    fn aggregates_like_upstream() {
        assert_eq!(aggregate(&["a".into()]), "a");
        assert_eq!(aggregate(&["a".into(), "a".into()]), "a");
        assert_eq!(aggregate(&["a".into(), "b".into(), "a".into()]), "[a, b]");
    }
}
