//! The authorization mode of a server (a leaf: the server's state holds
//! it, the authorizer in `authz` reads it).

/// How the server authorizes requests of identities other than the admin
/// (which may always do everything).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Authorization {
    /// Every authenticated request is allowed; access reviews answer
    /// "allowed" (kube-apiserver's `--authorization-mode=AlwaysAllow`).
    #[default]
    AlwaysAllow,
    /// Requests are allowed only as Roles, ClusterRoles, RoleBindings and
    /// ClusterRoleBindings say (`--authorization-mode=RBAC`); the server
    /// starts with upstream's bootstrap ClusterRoles for discovery and
    /// self-reviews.
    Rbac,
}

impl Authorization {
    /// The names [`Authorization::from_str`](std::str::FromStr) accepts
    /// (case-insensitively), canonical first.
    pub const NAMES: &'static [&'static str] = &["always-allow", "rbac"];
}

impl std::fmt::Display for Authorization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Authorization::AlwaysAllow => "always-allow",
            Authorization::Rbac => "rbac",
        })
    }
}

/// An authorization mode name that is not one of [`Authorization::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown authorization mode {0:?} (expected always-allow or rbac)")]
pub struct UnknownAuthorization(pub String);

impl std::str::FromStr for Authorization {
    type Err = UnknownAuthorization;

    /// `always-allow` or `rbac`, in any case; upstream's spellings
    /// `AlwaysAllow` and `RBAC` are accepted too.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "always-allow" | "alwaysallow" => Ok(Authorization::AlwaysAllow),
            "rbac" => Ok(Authorization::Rbac),
            _ => Err(UnknownAuthorization(s.to_string())),
        }
    }
}
