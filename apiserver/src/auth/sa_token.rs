//! Service-account tokens (the TokenRequest API): JWTs signed with
//! HMAC-SHA256 under a per-server 256-bit key, carrying upstream's claims
//! (`iss`, `sub`, `aud`, `exp`, `iat`, `nbf`, `jti` and the `kubernetes.io`
//! claim naming the service account and the object the token is bound to).
//!
//! Nothing is stored per token: a token is valid while its signature
//! verifies, it has not expired, it is meant for this server's audience,
//! and its service account (and bound object) still exist with the uids it
//! names. Deleting the service account therefore revokes its tokens, and
//! with a data directory the key is kept in `credentials.json`, so tokens
//! survive a restart as long as their service account does. Issuing is
//! unbounded in count but costs the server no memory.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;
use serde_json::{Value, json};

/// The issuer and default audience of tokens, as kubeadm and kind
/// configure real clusters.
pub(crate) const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// The audiences this server accepts tokens for.
pub(crate) const API_AUDIENCES: &[&str] = &[ISSUER];

/// Default lifetime when a TokenRequest gives none (upstream's default).
pub(crate) const DEFAULT_EXPIRATION_SECS: i64 = 3600;
/// Shortest lifetime a TokenRequest may ask for.
pub(crate) const MIN_EXPIRATION_SECS: i64 = 10 * 60;
/// Longest lifetime a TokenRequest may ask for.
pub(crate) const MAX_EXPIRATION_SECS: i64 = 1 << 32;

/// Longest bearer token examined; longer ones are refused unread.
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Size of the signing key.
pub(crate) const KEY_BYTES: usize = 32;

/// The object a token is bound to: it is valid only while that object
/// exists with this uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BoundObject {
    /// `Pod` or `Secret`, in the service account's namespace.
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) uid: String,
}

/// What a verified token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claims {
    pub(crate) namespace: String,
    pub(crate) service_account: String,
    pub(crate) service_account_uid: String,
    pub(crate) audiences: Vec<String>,
    /// Unix seconds.
    pub(crate) expires: i64,
    /// The token's id (`jti`).
    pub(crate) id: String,
    pub(crate) bound: Option<BoundObject>,
}

/// Why a token is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TokenError {
    #[error("token is malformed")]
    Malformed,
    /// Longer than any token this server issues; told apart from
    /// [`TokenError::Malformed`] only to be counted, so worded the same.
    #[error("token is malformed")]
    TooLarge,
    #[error("token signature is invalid")]
    Signature,
    #[error("token has expired")]
    Expired,
}

/// Signs and verifies tokens with one key.
pub(crate) struct Signer {
    key: hmac::Key,
}

impl std::fmt::Debug for Signer {
    // The key is a credential: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(<redacted>)")
    }
}

/// A fresh random signing key from the operating system's generator
/// (through uuid, as every other secret of this crate; 244 random bits).
pub(crate) fn generate_key() -> Vec<u8> {
    let mut key = Vec::with_capacity(KEY_BYTES);
    while key.len() < KEY_BYTES {
        key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    }
    key.truncate(KEY_BYTES);
    key
}

impl Signer {
    pub(crate) fn new(key: &[u8]) -> Signer {
        Signer {
            key: hmac::Key::new(hmac::HMAC_SHA256, key),
        }
    }

    /// A signed token with these claims, issued at `now` (Unix seconds).
    pub(crate) fn issue(&self, claims: &Claims, now: i64) -> String {
        let mut k8s = json!({
            "namespace": claims.namespace,
            "serviceaccount": {"name": claims.service_account, "uid": claims.service_account_uid},
        });
        if let Some(b) = &claims.bound {
            k8s[b.kind.to_ascii_lowercase()] = json!({"name": b.name, "uid": b.uid});
        }
        let payload = json!({
            "iss": ISSUER,
            "sub": super::identity::service_account_username(&claims.namespace, &claims.service_account),
            "aud": claims.audiences,
            "exp": claims.expires,
            "iat": now,
            "nbf": now,
            "jti": claims.id,
            "kubernetes.io": k8s,
        });
        let header = json!({"alg": "HS256", "typ": "JWT", "kid": "wasmctrl"});
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(payload.to_string())
        );
        let tag = hmac::sign(&self.key, signing_input.as_bytes());
        format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
    }

    /// The claims of a token this signer issued that has not expired at
    /// `now`. The caller still checks audiences and that the service
    /// account and bound object exist.
    pub(crate) fn verify(&self, token: &str, now: i64) -> Result<Claims, TokenError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(TokenError::TooLarge);
        }
        let (signing_input, signature) = token.rsplit_once('.').ok_or(TokenError::Malformed)?;
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| TokenError::Malformed)?;
        // Constant time: a forger learns nothing from how long this takes.
        hmac::verify(&self.key, signing_input.as_bytes(), &signature)
            .map_err(|_| TokenError::Signature)?;
        let (_, payload) = signing_input.split_once('.').ok_or(TokenError::Malformed)?;
        let payload: Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(payload)
                .map_err(|_| TokenError::Malformed)?,
        )
        .map_err(|_| TokenError::Malformed)?;
        let s = |v: &Value| v.as_str().map(str::to_string).ok_or(TokenError::Malformed);
        let k8s = &payload["kubernetes.io"];
        let expires = payload["exp"].as_i64().ok_or(TokenError::Malformed)?;
        if expires <= now {
            return Err(TokenError::Expired);
        }
        let bound = ["pod", "secret"].iter().find_map(|kind| {
            let b = k8s.get(*kind)?;
            Some(BoundObject {
                kind: if *kind == "pod" { "Pod" } else { "Secret" }.to_string(),
                name: b["name"].as_str()?.to_string(),
                uid: b["uid"].as_str()?.to_string(),
            })
        });
        Ok(Claims {
            namespace: s(&k8s["namespace"])?,
            service_account: s(&k8s["serviceaccount"]["name"])?,
            service_account_uid: s(&k8s["serviceaccount"]["uid"])?,
            audiences: payload["aud"]
                .as_array()
                .ok_or(TokenError::Malformed)?
                .iter()
                .filter_map(|a| a.as_str().map(str::to_string))
                .collect(),
            expires,
            id: s(&payload["jti"])?,
            bound,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> Claims {
        Claims {
            namespace: "ns".into(),
            service_account: "sa".into(),
            service_account_uid: "uid-1".into(),
            audiences: vec![ISSUER.into()],
            expires: 2_000,
            id: "jti-1".into(),
            bound: Some(BoundObject {
                kind: "Pod".into(),
                name: "p".into(),
                uid: "uid-p".into(),
            }),
        }
    }

    #[test]
    fn round_trips_and_expires() {
        let signer = Signer::new(&generate_key());
        let token = signer.issue(&claims(), 1_000);
        assert_eq!(token.matches('.').count(), 2);
        assert_eq!(signer.verify(&token, 1_999), Ok(claims()));
        assert_eq!(signer.verify(&token, 2_000), Err(TokenError::Expired));
    }

    #[test]
    fn refuses_forgeries() {
        let signer = Signer::new(&generate_key());
        let token = signer.issue(&claims(), 1_000);
        // Another server's key.
        assert_eq!(
            Signer::new(&generate_key()).verify(&token, 1_000),
            Err(TokenError::Signature)
        );
        // A payload changed after signing (another service account).
        let (head, rest) = token.split_once('.').unwrap();
        let (_, sig) = rest.rsplit_once('.').unwrap();
        let mut forged_claims = claims();
        forged_claims.service_account = "admin".into();
        let other = signer.issue(&forged_claims, 1_000);
        let other_payload = other.split('.').nth(1).unwrap();
        let forged = format!("{head}.{other_payload}.{sig}");
        assert_eq!(signer.verify(&forged, 1_000), Err(TokenError::Signature));
        assert_eq!(signer.verify("abc", 1_000), Err(TokenError::Malformed));
        assert_eq!(signer.verify("a.b.!!", 1_000), Err(TokenError::Malformed));
        assert_eq!(
            signer.verify(&"a.".repeat(10_000), 1_000),
            Err(TokenError::TooLarge)
        );
    }
}
