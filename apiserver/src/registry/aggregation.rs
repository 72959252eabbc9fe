//! The ClusterRole aggregation a real control plane runs next to the API
//! server (`pkg/controller/clusterroleaggregation`): a ClusterRole with an
//! `aggregationRule` has its `rules` kept equal to the rules of the other
//! ClusterRoles its `clusterRoleSelectors` match, selector by selector,
//! each selector's roles in name order, a rule that is already there
//! left out.
//!
//! It runs after every batch of committed events that touches a
//! ClusterRole, so RBAC decisions see a labelled role's change as soon as
//! the aggregated role is rewritten. Unlike upstream's controller, which
//! syncs one role at a time from its cache, every aggregated role is
//! computed together from one reading of the store and settled before
//! anything is written: a role that aggregates an aggregated role gets
//! the latter's new rules in the same write, and roles that aggregate each
//! other in a circle cannot rewrite each other for ever. Roles still
//! changing after [`MAX_PASSES`] passes are left as they are this time
//! (counted and logged); what settled is written, and those writes are
//! the changes the next round starts from.

use std::collections::HashSet;

use serde_json::Value;

use super::Objects;
use super::resources::GroupResource;
use super::selectors::LabelSelector;
use super::storage::{self, Event};
use super::writes::{RBAC_GROUP, aggregation_rule, rbac_list};
use crate::metrics::Limit;

/// The field manager of the rules it writes, upstream's.
const MANAGER: &str = "clusterrole-aggregation-controller";

/// Passes over the aggregated roles before those still changing are given
/// up: each pass settles one more level of roles aggregating aggregated
/// roles.
pub(crate) const MAX_PASSES: usize = 16;

fn clusterroles() -> GroupResource {
    GroupResource::new(RBAC_GROUP, "clusterroles")
}

/// Whether any of `events` is of a ClusterRole, so aggregation may have
/// something to do.
pub(crate) fn touches(events: &[std::sync::Arc<Event>]) -> bool {
    let roles = clusterroles();
    events.iter().any(|ev| ev.resource == roles)
}

/// One rule as upstream compares rules (`reflect.DeepEqual` of the
/// struct): its five lists, so that key order or an empty list written
/// out never makes two equal rules differ.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RuleKey([Vec<String>; 5]);

impl RuleKey {
    fn of(rule: &Value) -> RuleKey {
        let list = |field: &str| rbac_list(rule, field);
        RuleKey([
            list("verbs"),
            list("apiGroups"),
            list("resources"),
            list("resourceNames"),
            list("nonResourceURLs"),
        ])
    }
}

/// A ClusterRole as aggregation reads it.
struct Role {
    name: String,
    object: Value,
    /// Its `clusterRoleSelectors`; None when it aggregates nothing, or
    /// when one of them does not parse (upstream then leaves the role as
    /// it is).
    selectors: Option<Vec<LabelSelector>>,
    rules: Vec<Value>,
}

impl Role {
    fn read(object: Value) -> Role {
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let selectors =
            aggregation_rule(&object).and_then(|rule| match rule.get("clusterRoleSelectors") {
                Some(Value::Array(a)) => a.iter().map(LabelSelector::from_object).collect(),
                _ => Some(Vec::new()),
            });
        let rules = object
            .get("rules")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        Role {
            name,
            object,
            selectors,
            rules,
        }
    }
}

/// The rules of the `at`th role as aggregation makes them from `roles`
/// (in name order).
fn aggregated(roles: &[Role], at: usize) -> Vec<Value> {
    let mut rules = Vec::new();
    let mut seen = HashSet::new();
    for selector in roles[at].selectors.iter().flatten() {
        for (i, role) in roles.iter().enumerate() {
            if i == at || !selector.matches(&role.object) {
                continue;
            }
            for rule in &role.rules {
                if seen.insert(RuleKey::of(rule)) {
                    rules.push(rule.clone());
                }
            }
        }
    }
    rules
}

fn same_rules(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| RuleKey::of(x) == RuleKey::of(y))
}

/// Settles the rules of every aggregated role in `roles` (name order):
/// the positions of the roles whose rules changed, and of those that did
/// not settle within [`MAX_PASSES`] passes.
fn settle(roles: &mut [Role]) -> (Vec<usize>, Vec<usize>) {
    let stored: Vec<Vec<Value>> = roles.iter().map(|r| r.rules.clone()).collect();
    let mut changing = Vec::new();
    for _ in 0..MAX_PASSES {
        changing.clear();
        for at in 0..roles.len() {
            if roles[at].selectors.is_none() {
                continue;
            }
            let rules = aggregated(roles, at);
            if !same_rules(&rules, &roles[at].rules) {
                roles[at].rules = rules;
                changing.push(at);
            }
        }
        if changing.is_empty() {
            break;
        }
    }
    let changed = (0..roles.len())
        .filter(|at| !changing.contains(at) && !same_rules(&roles[*at].rules, &stored[*at]))
        .collect();
    (changed, changing)
}

/// Rewrites the `rules` of every aggregated ClusterRole whose selected
/// roles' rules differ from them.
pub(crate) fn aggregate(objects: &Objects) {
    let gr = clusterroles();
    let Some(info) = objects.info_for(&gr) else {
        return;
    };
    let listed = objects.store.list(&gr, None, None, None, None).items;
    if !listed
        .iter()
        .any(|json| storage::mentions(json, b"\"aggregationRule\""))
    {
        return;
    }
    let mut roles: Vec<Role> = listed
        .iter()
        .map(|json| Role::read(storage::parse_json(json)))
        .collect();
    roles.sort_by(|a, b| a.name.cmp(&b.name));
    let (changed, unsettled) = settle(&mut roles);
    if !unsettled.is_empty() {
        objects.metrics.exceeded(Limit::AggregationPasses);
        let names: Vec<&str> = unsettled
            .iter()
            .map(|at| roles[*at].name.as_str())
            .collect();
        tracing::warn!(
            roles = ?names,
            "aggregated ClusterRoles still change after {MAX_PASSES} passes (they aggregate each other); their rules are left as they are"
        );
    }
    for at in changed {
        let rules = Value::Array(roles[at].rules.clone());
        objects.mutate_object(&info, "", &roles[at].name, MANAGER, |cur| {
            // A role whose aggregationRule went meanwhile is its author's.
            aggregation_rule(cur)?;
            if cur.get("rules") == Some(&rules) {
                return None;
            }
            let mut new = cur.clone();
            new["rules"] = rules.clone();
            Some(new)
        });
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn role(name: &str, labels: Value, aggregates: Option<Value>, rules: Value) -> Role {
        let mut object = json!({"metadata": {"name": name, "labels": labels}, "rules": rules});
        if let Some(selectors) = aggregates {
            object["aggregationRule"] = json!({"clusterRoleSelectors": selectors});
        }
        Role::read(object)
    }

    fn get(resource: &str) -> Value {
        json!({"apiGroups": [""], "resources": [resource], "verbs": ["get"]})
    }

    #[test]
    fn rules_come_selector_by_selector_in_name_order_without_repeats() {
        let mut roles = vec![
            role(
                "a-aggregate",
                json!({}),
                Some(json!([{"matchLabels": {"to": "x"}}, {"matchLabels": {"to": "y"}}])),
                json!([]),
            ),
            role("b", json!({"to": "y"}), None, json!([get("pods")])),
            role(
                "c",
                json!({"to": "x"}),
                None,
                json!([get("secrets"), get("pods")]),
            ),
            // The same rule written with its keys in another order and an
            // empty list spelled out.
            role(
                "d",
                json!({"to": "x"}),
                None,
                json!([{"verbs": ["get"], "resourceNames": [], "resources": ["secrets"], "apiGroups": [""]}]),
            ),
        ];
        let (changed, unsettled) = settle(&mut roles);
        assert_eq!((changed, unsettled), (vec![0], vec![]));
        assert_eq!(
            roles[0].rules,
            vec![get("secrets"), get("pods")],
            "selector x's roles (c, d) first, then y's (b, whose rule is there already)"
        );
    }

    #[test]
    fn an_aggregate_of_aggregates_settles_in_one_go_and_a_circle_settles_empty() {
        // "a" aggregates "b", which aggregates "c": both get c's rule,
        // though "a" is computed before "b" in each pass.
        let mut roles = vec![
            role(
                "a",
                json!({}),
                Some(json!([{"matchLabels": {"to": "a"}}])),
                json!([]),
            ),
            role(
                "b",
                json!({"to": "a"}),
                Some(json!([{"matchLabels": {"to": "b"}}])),
                json!([]),
            ),
            role("c", json!({"to": "b"}), None, json!([get("pods")])),
        ];
        let (changed, unsettled) = settle(&mut roles);
        assert_eq!((changed, unsettled), (vec![0, 1], vec![]));
        assert_eq!(roles[0].rules, vec![get("pods")]);

        // Two roles that aggregate each other keep nothing that is not
        // selected from elsewhere, and are not rewritten for ever.
        let mut roles = vec![
            role(
                "p",
                json!({"to": "q"}),
                Some(json!([{"matchLabels": {"to": "p"}}])),
                json!([get("secrets")]),
            ),
            role(
                "q",
                json!({"to": "p"}),
                Some(json!([{"matchLabels": {"to": "q"}}])),
                json!([]),
            ),
        ];
        let (changed, unsettled) = settle(&mut roles);
        assert_eq!((changed, unsettled), (vec![0], vec![]));
        assert!(roles.iter().all(|r| r.rules.is_empty()));
    }

    #[test]
    fn an_empty_selector_selects_every_other_role_and_a_bad_one_leaves_its_role_alone() {
        let mut roles = vec![
            role("all", json!({}), Some(json!([{}])), json!([])),
            role(
                "bad",
                json!({}),
                Some(json!([{"matchExpressions": [{"key": "k", "operator": "Sideways"}]}])),
                json!([get("nodes")]),
            ),
            role("plain", json!({}), None, json!([get("pods")])),
        ];
        let (changed, _) = settle(&mut roles);
        assert_eq!(changed, vec![0]);
        assert_eq!(roles[0].rules, vec![get("nodes"), get("pods")]);
        assert_eq!(roles[1].rules, vec![get("nodes")], "as upstream's");
    }

    #[test]
    fn a_chain_deeper_than_the_passes_is_written_as_far_as_it_settled() {
        // r00 aggregates r01, which aggregates r02, ..., r18 holds a rule:
        // computed in name order, each pass carries the rule one role up.
        let depth = MAX_PASSES + 2;
        let mut roles: Vec<Role> = (0..=depth)
            .map(|i| {
                let name = format!("r{i:02}");
                let labels = json!({"to": format!("r{:02}", i.saturating_sub(1))});
                if i == depth {
                    role(&name, labels, None, json!([get("pods")]))
                } else {
                    let selects = json!([{"matchLabels": {"to": name}}]);
                    role(&name, labels, Some(selects), json!([]))
                }
            })
            .collect();
        let (changed, unsettled) = settle(&mut roles);
        assert_eq!(unsettled, vec![depth - MAX_PASSES]);
        assert_eq!(
            changed,
            ((depth - MAX_PASSES + 1)..depth).collect::<Vec<_>>()
        );
        assert!(roles[0].rules.is_empty());
    }
}
