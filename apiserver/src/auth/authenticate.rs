//! Authentication: the identity a bearer token (and impersonation headers)
//! establish.
//!
//! | Token | Identity |
//! |---|---|
//! | the server's token (kubeconfig) | `wasmctrl-admin`, groups `system:masters`, `system:authenticated` |
//! | a named user's (`kubeconfig_for_user`, feature `testing`) | that user, group `system:authenticated` |
//! | a service-account token (TokenRequest) | `system:serviceaccount:NS:SA` with its uid, groups `system:serviceaccounts`, `system:serviceaccounts:NS`, `system:authenticated` |
//!
//! `Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid` and
//! `Impersonate-Extra-*` then switch identity, each one authorized as the
//! `impersonate` verb on `users`, `groups`, `serviceaccounts`, `uids` or
//! `userextras/KEY`, exactly as upstream's impersonation filter does (the
//! admin, in `system:masters`, may impersonate anyone).

use axum::http::HeaderMap;

use super::identity::{self, UserInfo};
use super::rbac::Attributes;
use super::sa_token::{self, Claims};
use super::{ADMIN_USER, Auth};
use crate::error::ApiError;
use crate::metrics::{Limit, Metrics};

/// Most impersonation headers honoured in one request (groups and extras
/// together); more is refused.
const MAX_IMPERSONATION_REQUESTS: usize = 64;

/// Seconds since the Unix epoch.
pub(crate) fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Auth {
    /// The identity of a bearer token, if it is valid.
    pub(crate) fn authenticate(&self, token: &str) -> Option<UserInfo> {
        self.authenticate_static(token).or_else(|| {
            self.authenticate_service_account(token, sa_token::API_AUDIENCES)
                .ok()
                .map(|(user, _)| user)
        })
    }

    /// The identity of the admin token or a named user's token.
    pub(crate) fn authenticate_static(&self, token: &str) -> Option<UserInfo> {
        let bytes = token.as_bytes();
        // Compare against every static token (in constant time each) so
        // timing tells nothing about which one, if any, matched.
        let mut user = None;
        if constant_time_eq(bytes, self.token.as_bytes()) {
            user = Some(UserInfo::named(ADMIN_USER, &[identity::SYSTEM_MASTERS]));
        }
        for (t, u) in self.named_tokens().iter() {
            if constant_time_eq(bytes, t.as_bytes()) {
                user = Some(UserInfo::named(u, &[]));
            }
        }
        user
    }

    /// The service account a token authenticates as, if it is one this
    /// server issued, unexpired, for one of `audiences`, whose service
    /// account (and bound object) still exist with the uids it names; with
    /// the audiences it is valid for among those asked for.
    pub(crate) fn authenticate_service_account(
        &self,
        token: &str,
        audiences: &[&str],
    ) -> Result<(UserInfo, Vec<String>), String> {
        let claims = self.signer.verify(token, now_secs()).map_err(|e| {
            if e == sa_token::TokenError::TooLarge {
                self.objects.metrics.exceeded(Limit::TokenSize);
            }
            e.to_string()
        })?;
        let matching: Vec<String> = claims
            .audiences
            .iter()
            .filter(|a| audiences.contains(&a.as_str()))
            .cloned()
            .collect();
        if matching.is_empty() {
            return Err("token audiences are not valid for this server".into());
        }
        self.check_token_objects(&claims)?;
        let mut user = UserInfo::service_account(
            &claims.namespace,
            &claims.service_account,
            &claims.service_account_uid,
        );
        user.extra.insert(
            "authentication.kubernetes.io/credential-id".into(),
            vec![format!("JTI={}", claims.id)],
        );
        if let Some(b) = claims.bound.as_ref().filter(|b| b.kind == "Pod") {
            user.extra.insert(
                "authentication.kubernetes.io/pod-name".into(),
                vec![b.name.clone()],
            );
            user.extra.insert(
                "authentication.kubernetes.io/pod-uid".into(),
                vec![b.uid.clone()],
            );
        }
        Ok((user, matching))
    }

    /// A token is only as alive as the objects it names: its service
    /// account (not being deleted) and the object it is bound to.
    fn check_token_objects(&self, claims: &Claims) -> Result<(), String> {
        let core = |plural: &str| crate::registry::resources::GroupResource::new("", plural);
        let alive = |plural: &str, name: &str, uid: &str| {
            self.objects
                .store
                .get(&core(plural), &claims.namespace, name)
                .filter(|s| crate::values::meta_str(&s.obj, "uid") == Some(uid))
                .filter(|s| s.obj["metadata"].get("deletionTimestamp").is_none())
                .is_some()
        };
        if !alive(
            "serviceaccounts",
            &claims.service_account,
            &claims.service_account_uid,
        ) {
            return Err(format!(
                "service account {}/{} (uid {}) no longer exists",
                claims.namespace, claims.service_account, claims.service_account_uid
            ));
        }
        if let Some(b) = &claims.bound {
            let plural = if b.kind == "Pod" { "pods" } else { "secrets" };
            if !alive(plural, &b.name, &b.uid) {
                return Err(format!(
                    "the {} {}/{} the token is bound to no longer exists",
                    b.kind, claims.namespace, b.name
                ));
            }
        }
        Ok(())
    }
}

/// One identity change a request asks for.
struct Impersonation {
    /// What is authorized: `impersonate` on this resource.
    attrs: Attributes,
    change: Change,
}

enum Change {
    ServiceAccount { namespace: String, name: String },
    User(String),
    Group(String),
    Extra { key: String, value: String },
    Uid(String),
}

fn header_values<'a>(headers: &'a HeaderMap, name: &str) -> Result<Vec<&'a str>, ApiError> {
    headers
        .get_all(name)
        .iter()
        .map(|v| {
            v.to_str()
                .map_err(|_| ApiError::BadRequest(format!("header {name} is not valid text")))
        })
        .collect()
}

/// The impersonation requests in `headers`, in upstream's order: user,
/// groups, extras, uid.
fn impersonation_requests(
    headers: &HeaderMap,
    metrics: &Metrics,
) -> Result<Vec<Impersonation>, ApiError> {
    let attrs = |group: &str, resource: &str, sub: &str, ns: &str, name: &str| {
        Attributes::resource("impersonate", group, resource, sub, ns, name)
    };
    let mut out = Vec::new();
    let user = header_values(headers, "impersonate-user")?
        .first()
        .copied()
        .filter(|u| !u.is_empty());
    if let Some(user) = user {
        out.push(match identity::split_service_account(user) {
            Some((ns, name)) => Impersonation {
                attrs: attrs("", "serviceaccounts", "", ns, name),
                change: Change::ServiceAccount {
                    namespace: ns.into(),
                    name: name.into(),
                },
            },
            None => Impersonation {
                attrs: attrs("", "users", "", "", user),
                change: Change::User(user.into()),
            },
        });
    }
    for group in header_values(headers, "impersonate-group")? {
        out.push(Impersonation {
            attrs: attrs("", "groups", "", "", group),
            change: Change::Group(group.into()),
        });
    }
    for (name, _) in headers.iter() {
        let Some(encoded) = name.as_str().strip_prefix("impersonate-extra-") else {
            continue;
        };
        // Header names are lowercase already; keys may be %-encoded.
        let key = percent_encoding::percent_decode_str(encoded)
            .decode_utf8()
            .map(|k| k.into_owned())
            .unwrap_or_else(|_| encoded.to_string());
        // `iter` yields a header once per value; take each name once.
        if out
            .iter()
            .any(|i| matches!(&i.change, Change::Extra { key: k, .. } if *k == key))
        {
            continue;
        }
        for value in header_values(headers, name.as_str())? {
            out.push(Impersonation {
                attrs: attrs("authentication.k8s.io", "userextras", &key, "", value),
                change: Change::Extra {
                    key: key.clone(),
                    value: value.into(),
                },
            });
        }
    }
    if let Some(uid) = header_values(headers, "impersonate-uid")?
        .first()
        .copied()
        .filter(|u| !u.is_empty())
    {
        out.push(Impersonation {
            attrs: attrs("authentication.k8s.io", "uids", "", "", uid),
            change: Change::Uid(uid.into()),
        });
    }
    if out.len() > MAX_IMPERSONATION_REQUESTS {
        metrics.exceeded(Limit::ImpersonationHeaders);
        return Err(ApiError::BadRequest(format!(
            "too many impersonation headers: {} (limit {MAX_IMPERSONATION_REQUESTS})",
            out.len()
        )));
    }
    if user.is_none() && !out.is_empty() {
        // Upstream answers this with an internal error too.
        return Err(ApiError::Internal(
            "requested impersonation of groups, extra or uid without impersonating a user (Impersonate-User)"
                .into(),
        ));
    }
    Ok(out)
}

/// The identity a request acts as: `requestor`, or whom its
/// impersonation headers name if `requestor` may impersonate each of them
/// (else the 403 upstream answers).
pub(crate) fn impersonate(
    auth: &Auth,
    requestor: UserInfo,
    headers: &HeaderMap,
) -> Result<UserInfo, ApiError> {
    let requests = impersonation_requests(headers, &auth.objects.metrics)?;
    if requests.is_empty() {
        return Ok(requestor);
    }
    let groups_given = requests
        .iter()
        .any(|r| matches!(r.change, Change::Group(_)));
    let mut user = UserInfo::default();
    for r in requests {
        auth.check(&requestor, &r.attrs)?;
        match r.change {
            Change::ServiceAccount { namespace, name } => {
                user.name = identity::service_account_username(&namespace, &name);
                if !groups_given {
                    user.groups = identity::service_account_groups(&namespace);
                }
            }
            Change::User(name) => user.name = name,
            Change::Group(g) => user.groups.push(g),
            Change::Extra { key, value } => user.extra.entry(key).or_default().push(value),
            Change::Uid(uid) => user.uid = uid,
        }
    }
    // Upstream adds the catch-all group unless the impersonator chose one.
    let (all, other) = if user.name == identity::ANONYMOUS {
        (identity::ALL_UNAUTHENTICATED, identity::ALL_UNAUTHENTICATED)
    } else {
        (identity::ALL_AUTHENTICATED, identity::ALL_UNAUTHENTICATED)
    };
    if !user.groups.iter().any(|g| g == all || g == other) {
        user.groups.push(all.to_string());
    }
    Ok(user)
}
