//! Who a request acts as: the user name, uid, groups and extra attributes
//! authentication (and impersonation) established, and the naming rules of
//! service-account users, as the real server's `user.Info` and
//! `serviceaccount` helpers define them.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// The group whose members may do anything, whatever RBAC says (upstream's
/// `system:masters`, checked before any authorizer).
pub(crate) const SYSTEM_MASTERS: &str = "system:masters";
/// Every authenticated user is in this group.
pub(crate) const ALL_AUTHENTICATED: &str = "system:authenticated";
/// Every unauthenticated user is in this group (impersonation only: this
/// server refuses unauthenticated requests).
pub(crate) const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user name of anonymous requests.
pub(crate) const ANONYMOUS: &str = "system:anonymous";
/// Every service account is in this group.
pub(crate) const ALL_SERVICE_ACCOUNTS: &str = "system:serviceaccounts";
/// `system:serviceaccount:NAMESPACE:NAME` is a service account's user name.
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
/// `system:serviceaccounts:NAMESPACE` holds the service accounts of one
/// namespace.
const SERVICE_ACCOUNT_GROUP_PREFIX: &str = "system:serviceaccounts:";

/// The identity a request acts as.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct UserInfo {
    pub(crate) name: String,
    /// Empty when unknown (the admin, named users).
    pub(crate) uid: String,
    pub(crate) groups: Vec<String>,
    pub(crate) extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user authenticated by a token issued for a name: member of
    /// `system:authenticated` and of the given groups.
    pub(crate) fn named(name: &str, groups: &[&str]) -> UserInfo {
        let mut all: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        if !all.iter().any(|g| g == ALL_AUTHENTICATED) {
            all.push(ALL_AUTHENTICATED.to_string());
        }
        UserInfo {
            name: name.to_string(),
            groups: all,
            ..Default::default()
        }
    }

    /// The service account `namespace/name` with its uid, in the groups
    /// every service account has.
    pub(crate) fn service_account(namespace: &str, name: &str, uid: &str) -> UserInfo {
        let mut groups = service_account_groups(namespace);
        groups.push(ALL_AUTHENTICATED.to_string());
        UserInfo {
            name: service_account_username(namespace, name),
            uid: uid.to_string(),
            groups,
            extra: BTreeMap::new(),
        }
    }

    /// Members of `system:masters` bypass authorization.
    pub(crate) fn is_superuser(&self) -> bool {
        self.groups.iter().any(|g| g == SYSTEM_MASTERS)
    }

    /// `authentication.k8s.io/v1` `UserInfo` (SelfSubjectReview,
    /// TokenReview), with upstream's empty fields left out.
    pub(crate) fn to_json(&self) -> Value {
        let mut v = json!({"username": self.name, "groups": self.groups});
        if !self.uid.is_empty() {
            v["uid"] = json!(self.uid);
        }
        if !self.extra.is_empty() {
            v["extra"] = json!(self.extra);
        }
        v
    }
}

/// `system:serviceaccount:NAMESPACE:NAME`.
pub(crate) fn service_account_username(namespace: &str, name: &str) -> String {
    format!("{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}")
}

/// `system:serviceaccounts` and `system:serviceaccounts:NAMESPACE`.
pub(crate) fn service_account_groups(namespace: &str) -> Vec<String> {
    vec![
        ALL_SERVICE_ACCOUNTS.to_string(),
        format!("{SERVICE_ACCOUNT_GROUP_PREFIX}{namespace}"),
    ]
}

/// Whether `username` is the service account `namespace/name` (upstream's
/// `MatchesUsername`).
pub(crate) fn is_service_account(username: &str, namespace: &str, name: &str) -> bool {
    username
        .strip_prefix(SERVICE_ACCOUNT_PREFIX)
        .and_then(|rest| rest.strip_prefix(namespace))
        .and_then(|rest| rest.strip_prefix(':'))
        == Some(name)
}

/// The namespace and name of a service-account user name, if it is a valid
/// one (a namespace that is a DNS label, a name that is a DNS subdomain),
/// as upstream's `SplitUsername`.
pub(crate) fn split_service_account(username: &str) -> Option<(&str, &str)> {
    let rest = username.strip_prefix(SERVICE_ACCOUNT_PREFIX)?;
    let mut parts = rest.split(':');
    let (namespace, name) = (parts.next()?, parts.next()?);
    if parts.next().is_some()
        || !crate::registry::validation::validate_namespace(namespace).is_empty()
        || wasmctrl_apimachinery::names::dns1123_subdomain(name).is_err()
    {
        return None;
    }
    Some((namespace, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_account_names() {
        assert_eq!(
            service_account_username("ns", "sa"),
            "system:serviceaccount:ns:sa"
        );
        assert!(is_service_account(
            "system:serviceaccount:ns:sa",
            "ns",
            "sa"
        ));
        assert!(!is_service_account(
            "system:serviceaccount:ns:sa",
            "n",
            "s:sa"
        ));
        assert!(!is_service_account(
            "system:serviceaccount:ns:sab",
            "ns",
            "sa"
        ));
        assert_eq!(
            split_service_account("system:serviceaccount:ns:sa"),
            Some(("ns", "sa"))
        );
        assert_eq!(split_service_account("system:serviceaccount:ns:sa:x"), None);
        assert_eq!(split_service_account("system:serviceaccount:NS:sa"), None);
        assert_eq!(split_service_account("alice"), None);
        let u = UserInfo::service_account("ns", "sa", "u1");
        assert_eq!(
            u.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:ns",
                "system:authenticated"
            ]
        );
        assert!(!u.is_superuser());
        assert!(UserInfo::named("admin", &[SYSTEM_MASTERS]).is_superuser());
    }
}
