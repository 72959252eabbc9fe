//! Authorization: which requests an authenticated identity may make.
//!
//! Members of `system:masters` (the admin token) may do anything, as on a
//! real cluster. Everyone else is decided by the configured
//! [`Authorization`] mode: [`Authorization::AlwaysAllow`] allows every
//! request; [`Authorization::Rbac`] evaluates the RBAC objects in the store
//! ([`super::rbac`]). A refused request gets 403 with upstream's
//! `metav1.Status` and message.

use super::Auth;
use super::identity::UserInfo;
use super::mode::Authorization;
use super::rbac::{Attributes, Resolver};
use crate::error::ApiError;
use crate::values::go_quote;

/// An authorizer's answer: allowed or not, and why (upstream's reason
/// string, often empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decision {
    pub(crate) allowed: bool,
    pub(crate) reason: String,
}

impl Auth {
    /// Whether `user` may do what `a` describes, as the whole authorizer
    /// chain of this server decides: `system:masters`, then the mode.
    pub(crate) fn authorize(&self, user: &UserInfo, a: &Attributes) -> Decision {
        if user.is_superuser() {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        match self.authorization {
            Authorization::AlwaysAllow => Decision {
                allowed: true,
                reason: String::new(),
            },
            Authorization::Rbac => {
                let generation = self.objects.rbac_generation();
                let (allowed, reason) =
                    Resolver::new(&self.objects.store, &self.rbac, generation).authorize(user, a);
                Decision { allowed, reason }
            }
        }
    }

    /// `Ok` if `user` may make the request, else the 403 to answer.
    pub(crate) fn check(&self, user: &UserInfo, a: &Attributes) -> Result<(), ApiError> {
        let d = self.authorize(user, a);
        if d.allowed {
            Ok(())
        } else {
            Err(forbidden(user, a, &d.reason))
        }
    }
}

/// Upstream's 403 for a refused request (`responsewriters.Forbidden`):
///
/// - `configmaps "x" is forbidden: User "u" cannot get resource "configmaps" in API group "" in the namespace "ns"`
/// - `deployments.apps is forbidden: User "u" cannot list resource "deployments" in API group "apps" at the cluster scope`
/// - `deployments.apps "d" is forbidden: User "u" cannot update resource "deployments/status" in API group "apps" in the namespace "ns"`
/// - `forbidden: User "u" cannot get path "/metrics"`
///
/// with `: REASON` appended when the authorizer gave one.
pub(crate) fn forbidden(user: &UserInfo, a: &Attributes, reason: &str) -> ApiError {
    let what = if !a.resource_request {
        format!(
            "User {} cannot {} path {}",
            go_quote(&user.name),
            a.verb,
            go_quote(&a.path)
        )
    } else {
        let resource = if a.subresource.is_empty() {
            a.resource.clone()
        } else {
            format!("{}/{}", a.resource, a.subresource)
        };
        let scope = if a.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace {}", go_quote(&a.namespace))
        };
        format!(
            "User {} cannot {} resource {} in API group {} {scope}",
            go_quote(&user.name),
            a.verb,
            go_quote(&resource),
            go_quote(&a.group)
        )
    };
    // Upstream escapes what could read as HTML; quotes stay.
    let what = what
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let err = if reason.is_empty() {
        what
    } else {
        format!("{what}: {reason}")
    };
    let message = if !a.resource_request || a.resource.is_empty() {
        format!("forbidden: {err}")
    } else {
        let qualified = crate::error::qualified(&a.group, &a.resource);
        if a.name.is_empty() {
            format!("{qualified} is forbidden: {err}")
        } else {
            format!("{qualified} {} is forbidden: {err}", go_quote(&a.name))
        }
    };
    ApiError::Forbidden {
        message,
        name: a.name.clone(),
        group: a.group.clone(),
        kind: a.resource.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_messages_match_upstream() {
        let u = UserInfo::service_account("ns", "sa", "");
        let msg = |a: &Attributes, reason: &str| forbidden(&u, a, reason).to_string();
        assert_eq!(
            msg(
                &Attributes::resource("get", "", "configmaps", "", "ns", "x"),
                ""
            ),
            "configmaps \"x\" is forbidden: User \"system:serviceaccount:ns:sa\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"ns\""
        );
        assert_eq!(
            msg(
                &Attributes::resource("list", "apps", "deployments", "", "", ""),
                ""
            ),
            "deployments.apps is forbidden: User \"system:serviceaccount:ns:sa\" cannot list resource \"deployments\" in API group \"apps\" at the cluster scope"
        );
        assert_eq!(
            msg(
                &Attributes::resource("update", "apps", "deployments", "status", "ns", "d"),
                "RBAC: x"
            ),
            "deployments.apps \"d\" is forbidden: User \"system:serviceaccount:ns:sa\" cannot update resource \"deployments/status\" in API group \"apps\" in the namespace \"ns\": RBAC: x"
        );
        let path = Attributes::non_resource("get", "/metrics<x>");
        assert_eq!(
            msg(&path, ""),
            "forbidden: User \"system:serviceaccount:ns:sa\" cannot get path \"/metrics&lt;x&gt;\""
        );
        let status = forbidden(
            &u,
            &Attributes::resource("list", "", "configmaps", "", "ns", ""),
            "",
        )
        .to_status();
        assert_eq!(status["code"], 403);
        assert_eq!(status["reason"], "Forbidden");
        assert_eq!(status["details"], serde_json::json!({"kind": "configmaps"}));
    }

    #[test]
    fn parses_mode_names() {
        for (s, want) in [
            ("rbac", Authorization::Rbac),
            ("RBAC", Authorization::Rbac),
            ("always-allow", Authorization::AlwaysAllow),
            ("AlwaysAllow", Authorization::AlwaysAllow),
        ] {
            assert_eq!(s.parse::<Authorization>(), Ok(want));
        }
        assert_eq!(
            "abac".parse::<Authorization>().unwrap_err().to_string(),
            "unknown authorization mode \"abac\" (expected always-allow or rbac)"
        );
        for name in Authorization::NAMES {
            assert_eq!(name.parse::<Authorization>().unwrap().to_string(), *name);
        }
    }
}
