//! Who a request is and what it may do.
//!
//! [`Auth`] holds the credentials the server accepts and the authorization
//! mode, and reads the registry for what makes an identity valid (service
//! accounts, the objects a token is bound to) and what RBAC grants.
//!
//! | File | Job |
//! |---|---|
//! | [`authenticate`] | bearer token → identity, then impersonation |
//! | [`authorize`] | identity + request attributes → allowed, or upstream's 403 |
//! | [`mode`] | the configured authorization mode (public [`crate::Authorization`]) |
//! | [`identity`] | users, groups and the names Kubernetes gives service accounts |
//! | [`sa_token`] | service-account tokens: signed JWTs with upstream's claims |
//! | [`rbac`] | RBAC evaluation over the stored Roles and bindings |
//! | [`bootstrap`] | the ClusterRoles and bindings a server starts with |
//! | [`escalation`] | a write of a role or binding grants only what its author holds, or may escalate or bind |
//! | [`reviews`] | TokenReview, SubjectAccessReview and friends, TokenRequest |
//!
//! May import [`crate::registry`] and the leaf modules ([`crate::error`],
//! [`crate::metrics`], [`crate::values`]); never `http` or `persist`.

use std::sync::{Arc, RwLock, RwLockReadGuard};

use crate::registry::Objects;

pub(crate) mod authenticate;
pub(crate) mod authorize;
pub(crate) mod bootstrap;
pub(crate) mod escalation;
pub(crate) mod identity;
pub(crate) mod mode;
pub(crate) mod rbac;
pub(crate) mod reviews;
pub(crate) mod sa_token;

use mode::Authorization;
use sa_token::Signer;

/// The user the configured token authenticates as (what SelfSubjectReview
/// and the write audit report).
pub(crate) const ADMIN_USER: &str = "wasmctrl-admin";

/// Credentials and the authorization mode, with the objects they are
/// checked against.
pub(crate) struct Auth {
    /// Service accounts, bound objects and RBAC objects live here.
    pub(crate) objects: Arc<Objects>,
    /// The configured bearer token; it authenticates as [`ADMIN_USER`].
    pub(crate) token: String,
    /// Further `(token, user)` pairs issued at run time (feature `testing`).
    extra_tokens: RwLock<Vec<(String, String)>>,
    /// Signs and verifies service-account tokens.
    pub(crate) signer: Signer,
    /// How requests of identities other than the admin are authorized.
    pub(crate) authorization: Authorization,
    /// The RBAC objects as parsed at the store's RBAC generation.
    pub(crate) rbac: rbac::RbacCache,
}

impl Auth {
    pub(crate) fn new(
        objects: Arc<Objects>,
        token: String,
        authorization: Authorization,
        service_account_key: &[u8],
    ) -> Self {
        Auth {
            objects,
            token,
            extra_tokens: RwLock::new(Vec::new()),
            signer: Signer::new(service_account_key),
            authorization,
            rbac: rbac::RbacCache::default(),
        }
    }

    /// The `(token, user)` pairs issued for named users.
    pub(crate) fn named_tokens(&self) -> RwLockReadGuard<'_, Vec<(String, String)>> {
        self.extra_tokens.read().unwrap_or_else(|e| e.into_inner())
    }

    /// A token authenticating as `user`, issued on first use (feature
    /// `testing`: tell processes sharing one server apart in the audit).
    #[cfg(feature = "testing")]
    pub(crate) fn token_for(&self, user: &str) -> String {
        if user == ADMIN_USER {
            return self.token.clone();
        }
        let mut tokens = self.extra_tokens.write().unwrap_or_else(|e| e.into_inner());
        if let Some((t, _)) = tokens.iter().find(|(_, u)| u == user) {
            return t.clone();
        }
        let t = crate::values::random_token();
        tokens.push((t.clone(), user.to_string()));
        t
    }
}
