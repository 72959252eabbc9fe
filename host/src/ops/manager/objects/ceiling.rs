//! `maxGrant`: the most a WasmReconciler object may grant its plugin.
//!
//! Whoever can create a WasmReconciler chooses the code that runs and the
//! grant it runs with; the host config's `maxGrant` bounds that grant. An
//! object's grant is its `permissions`, each rule limited to the object's
//! `namespaces` when set. It fits when every access it allows — each verb ×
//! resource × namespace (or "all namespaces") — is allowed by some rule of
//! the ceiling. Wildcards are only covered by wildcards: `verbs: ["*"]`
//! needs a ceiling rule with `"*"`, even one listing every verb, since `*`
//! also covers verbs added later.

use crate::sandbox::hostapi::PermissionRule;

/// The most exceeding accesses named in one message.
const MAX_NAMED: usize = 20;

/// What of the grant (`permissions` within `namespaces`) `ceiling` does not
/// allow, one line per access (`permissions[1]: delete core/secrets in all
/// namespaces`), at most 20 and then how many more. Empty: it fits.
pub(crate) fn exceeding(
    permissions: &[PermissionRule],
    namespaces: Option<&[String]>,
    ceiling: &[PermissionRule],
) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    // Past the named ones, only counted: a grant of many accesses must not
    // cost a string each.
    let mut more = 0usize;
    for (j, rule) in permissions.iter().enumerate() {
        let scopes: Vec<Option<&str>> = match (rule.namespaces.as_deref(), namespaces) {
            (None, None) => vec![None],
            (Some(list), None) | (None, Some(list)) => {
                list.iter().map(|n| Some(n.as_str())).collect()
            }
            // Both limit the rule: only the namespaces in both are granted.
            (Some(rule_ns), Some(plugin_ns)) => rule_ns
                .iter()
                .filter(|n| plugin_ns.contains(n))
                .map(|n| Some(n.as_str()))
                .collect(),
        };
        for resource in &rule.resources {
            for verb in &rule.verbs {
                for scope in &scopes {
                    let covered = ceiling.iter().any(|c| {
                        covers(std::slice::from_ref(&c.group), &rule.group)
                            && covers(&c.resources, resource)
                            && covers(&c.verbs, verb)
                            && match (&c.namespaces, scope) {
                                (None, _) => true,
                                (Some(list), Some(ns)) => list.iter().any(|n| n == ns),
                                (Some(_), None) => false,
                            }
                    });
                    if !covered && found.len() >= MAX_NAMED {
                        more += 1;
                    } else if !covered {
                        let group = if rule.group.is_empty() {
                            "core"
                        } else {
                            &rule.group
                        };
                        let scope = match scope {
                            Some(ns) => format!("in namespace {ns}"),
                            None => "in all namespaces".into(),
                        };
                        found.push(format!(
                            "permissions[{j}]: {verb} {group}/{resource} {scope}"
                        ));
                    }
                }
            }
        }
    }
    if more > 0 {
        found.push(format!("and {more} more"));
    }
    found
}

/// Whether a ceiling's `list` covers `value`: `*` covers anything, a name
/// only itself (so a wildcard asked for needs a wildcard).
fn covers(list: &[String], value: &str) -> bool {
    list.iter()
        .any(|v| v == "*" || (value != "*" && v == value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_grant_within_the_ceiling_fits() {
        let ceiling = [
            PermissionRule::of(
                "",
                &["configmaps"],
                &["get", "list", "watch", "patch"],
                None,
            ),
            PermissionRule::of("apps", &["*"], &["*"], Some(&["team-a"])),
        ];
        let grant = [
            PermissionRule::of("", &["configmaps"], &["get", "patch"], None),
            PermissionRule::of(
                "apps",
                &["deployments", "statefulsets"],
                &["*"],
                Some(&["team-a"]),
            ),
        ];
        assert!(exceeding(&grant, None, &ceiling).is_empty());
        // The plugin's namespaces limit a rule that names none.
        let scoped = [PermissionRule::of(
            "apps",
            &["deployments"],
            &["delete"],
            None,
        )];
        assert!(exceeding(&scoped, Some(&names(&["team-a"])), &ceiling).is_empty());
        // Only the namespaces in both the rule and the plugin count.
        let both = [PermissionRule::of(
            "apps",
            &["deployments"],
            &["get"],
            Some(&["team-a", "team-b"]),
        )];
        assert!(exceeding(&both, Some(&names(&["team-a"])), &ceiling).is_empty());
        // Rules of the ceiling add up.
        let split = [
            PermissionRule::of("", &["configmaps"], &["get"], Some(&["a"])),
            PermissionRule::of("", &["configmaps"], &["get"], Some(&["b"])),
        ];
        let union = [PermissionRule::of(
            "",
            &["configmaps", "secrets"],
            &["get"],
            Some(&["a", "b"]),
        )];
        assert!(
            exceeding(&union, None, &split).len() == 2,
            "secrets in a and b"
        );
        assert!(
            exceeding(
                &[PermissionRule::of(
                    "",
                    &["configmaps"],
                    &["get"],
                    Some(&["a", "b"])
                )],
                None,
                &split
            )
            .is_empty()
        );
    }

    #[test]
    fn each_access_beyond_the_ceiling_is_named() {
        let ceiling = [PermissionRule::of(
            "",
            &["configmaps"],
            &["get", "patch"],
            Some(&["default"]),
        )];
        let grant = [
            PermissionRule::of("", &["configmaps"], &["get"], None),
            PermissionRule::of(
                "",
                &["configmaps", "secrets"],
                &["get", "delete"],
                Some(&["default"]),
            ),
        ];
        assert_eq!(
            exceeding(&grant, None, &ceiling),
            [
                "permissions[0]: get core/configmaps in all namespaces",
                "permissions[1]: delete core/configmaps in namespace default",
                "permissions[1]: get core/secrets in namespace default",
                "permissions[1]: delete core/secrets in namespace default",
            ]
        );
    }

    #[test]
    fn wildcards_are_covered_only_by_wildcards() {
        let every_verb = [PermissionRule::of(
            "",
            &["configmaps"],
            &[
                "get", "list", "watch", "create", "update", "patch", "delete",
            ],
            None,
        )];
        let star = [PermissionRule::of("", &["configmaps"], &["*"], None)];
        assert_eq!(exceeding(&star, None, &every_verb).len(), 1);
        assert!(exceeding(&every_verb, None, &star).is_empty());
        let any_group = [PermissionRule::of("*", &["configmaps"], &["get"], None)];
        assert_eq!(
            exceeding(
                &any_group,
                None,
                &[PermissionRule::of("", &["configmaps"], &["get"], None)]
            ),
            ["permissions[0]: get */configmaps in all namespaces"]
        );
        assert!(
            exceeding(
                &[PermissionRule::of("apps", &["x"], &["get"], None)],
                None,
                &any_group
            )
            .len()
                == 1
        );
        assert!(
            exceeding(
                &[PermissionRule::of("apps", &["configmaps"], &["get"], None)],
                None,
                &any_group
            )
            .is_empty()
        );
    }

    #[test]
    fn no_ceiling_allows_nothing_and_the_list_is_bounded() {
        assert!(
            exceeding(&[], None, &[]).is_empty(),
            "no grant fits any ceiling"
        );
        let wide = [PermissionRule::of(
            "",
            &["a", "b", "c", "d", "e"],
            &["get", "list", "watch", "patch", "delete"],
            None,
        )];
        let found = exceeding(&wide, None, &[]);
        assert_eq!(found.len(), MAX_NAMED + 1);
        assert_eq!(found.last().unwrap(), "and 5 more");

        // The most a checked spec may ask (64 resources × 64 verbs × 64
        // namespaces) is counted past the named ones, not formatted.
        let many: Vec<String> = (0..64).map(|i| format!("n{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let widest = [PermissionRule::of("", &many, &["get"; 64], Some(&many))];
        let found = exceeding(&widest, None, &[]);
        assert_eq!(found.len(), MAX_NAMED + 1);
        assert_eq!(
            found.last().unwrap(),
            &format!("and {} more", 64 * 64 * 64 - MAX_NAMED)
        );
    }
}
