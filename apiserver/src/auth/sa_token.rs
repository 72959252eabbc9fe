//! Service-account tokens (the TokenRequest API): JWTs signed with
//! HMAC-SHA256 under a per-server 256-bit key, carrying upstream's claims
//! (`iss`, `sub`, `aud`, `exp`, `iat`, `nbf`, `jti` and the `kubernetes.io`
//! claim naming the service account and the object the token is bound to).
//! Encoding, signing and signature checks are the `jsonwebtoken` crate's;
//! this module sets the claims and the checks: the token size is bounded
//! before anything is decoded, and expiry is judged here against the
//! caller's clock with no leeway (the crate's own time, audience and
//! required-claim checks are off; audiences are matched by the caller).
//!
//! Nothing is stored per token: a token is valid while its signature
//! verifies, it has not expired, it is meant for this server's audience,
//! and its service account (and bound object) still exist with the uids it
//! names. Deleting the service account therefore revokes its tokens, and
//! with a data directory the key is kept in `credentials.json`, so tokens
//! survive a restart as long as their service account does. Issuing is
//! unbounded in count but costs the server no memory.

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

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
pub(crate) const MAX_TOKEN_BYTES: usize = 16 * 1024;

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
    encoding: EncodingKey,
    decoding: DecodingKey,
    /// HS256 only; no time, audience or required-claim checks (see the
    /// module documentation).
    validation: Validation,
}

impl std::fmt::Debug for Signer {
    // The key is a credential: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(<redacted>)")
    }
}

/// The payload of a token as it is signed. Fields are in alphabetical
/// order, as upstream's encoder writes them.
#[derive(Serialize, Deserialize)]
struct Payload {
    aud: Vec<String>,
    exp: i64,
    iat: i64,
    iss: String,
    jti: String,
    #[serde(rename = "kubernetes.io")]
    kubernetes: KubernetesClaim,
    nbf: i64,
    sub: String,
}

/// The private `kubernetes.io` claim.
#[derive(Serialize, Deserialize)]
struct KubernetesClaim {
    namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pod: Option<Reference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    secret: Option<Reference>,
    serviceaccount: Reference,
}

#[derive(Serialize, Deserialize)]
struct Reference {
    name: String,
    uid: String,
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
    /// A signer with `key`, which must not be empty ([`generate_key`] and
    /// the data directory hold [`KEY_BYTES`]).
    pub(crate) fn new(key: &[u8]) -> Signer {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        Signer {
            encoding: EncodingKey::from_secret(key).expect("the signing key is not empty"),
            decoding: DecodingKey::from_secret(key).expect("the signing key is not empty"),
            validation,
        }
    }

    /// A signed token with these claims, issued at `now` (Unix seconds).
    pub(crate) fn issue(&self, claims: &Claims, now: i64) -> String {
        let reference = |b: &BoundObject| Reference {
            name: b.name.clone(),
            uid: b.uid.clone(),
        };
        let bound = |kind: &str| {
            claims
                .bound
                .as_ref()
                .filter(|b| b.kind.eq_ignore_ascii_case(kind))
                .map(reference)
        };
        let payload = Payload {
            aud: claims.audiences.clone(),
            exp: claims.expires,
            iat: now,
            iss: ISSUER.to_string(),
            jti: claims.id.clone(),
            kubernetes: KubernetesClaim {
                namespace: claims.namespace.clone(),
                pod: bound("pod"),
                secret: bound("secret"),
                serviceaccount: Reference {
                    name: claims.service_account.clone(),
                    uid: claims.service_account_uid.clone(),
                },
            },
            nbf: now,
            sub: super::identity::service_account_username(
                &claims.namespace,
                &claims.service_account,
            ),
        };
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("wasmctrl".to_string());
        jsonwebtoken::encode(&header, &payload, &self.encoding)
            .expect("an HS256 token of plain claims always encodes")
    }

    /// The claims of a token this signer issued that has not expired at
    /// `now`. The caller still checks audiences and that the service
    /// account and bound object exist.
    pub(crate) fn verify(&self, token: &str, now: i64) -> Result<Claims, TokenError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(TokenError::TooLarge);
        }
        let payload = jsonwebtoken::decode::<Payload>(token, &self.decoding, &self.validation)
            .map_err(|e| match e.kind() {
                // Not signed with this key as HS256: someone else's token
                // or a forgery.
                ErrorKind::InvalidSignature | ErrorKind::InvalidAlgorithm => TokenError::Signature,
                _ => TokenError::Malformed,
            })?
            .claims;
        if payload.exp <= now {
            return Err(TokenError::Expired);
        }
        let k8s = payload.kubernetes;
        let bound = match (k8s.pod, k8s.secret) {
            (Some(r), _) => Some(("Pod", r)),
            (None, Some(r)) => Some(("Secret", r)),
            (None, None) => None,
        };
        Ok(Claims {
            namespace: k8s.namespace,
            service_account: k8s.serviceaccount.name,
            service_account_uid: k8s.serviceaccount.uid,
            audiences: payload.aud,
            expires: payload.exp,
            id: payload.jti,
            bound: bound.map(|(kind, r)| BoundObject {
                kind: kind.to_string(),
                name: r.name,
                uid: r.uid,
            }),
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

    /// A token signed before signing moved to `jsonwebtoken` (its header
    /// fields in another order), with key `[7; 32]`: tokens kubeconfigs
    /// and clients already hold stay valid, and the claims are signed in
    /// the same bytes.
    const EARLIER_TOKEN: &str = concat!(
        "eyJhbGciOiJIUzI1NiIsImtpZCI6Indhc21jdHJsIiwidHlwIjoiSldUIn0.eyJhdWQiOlsiaHR0cHM6",
        "Ly9rdWJlcm5ldGVzLmRlZmF1bHQuc3ZjLmNsdXN0ZXIubG9jYWwiXSwiZXhwIjoyMDAwLCJpYXQiOjEw",
        "MDAsImlzcyI6Imh0dHBzOi8va3ViZXJuZXRlcy5kZWZhdWx0LnN2Yy5jbHVzdGVyLmxvY2FsIiwianRp",
        "IjoianRpLTEiLCJrdWJlcm5ldGVzLmlvIjp7Im5hbWVzcGFjZSI6Im5zIiwicG9kIjp7Im5hbWUiOiJw",
        "IiwidWlkIjoidWlkLXAifSwic2VydmljZWFjY291bnQiOnsibmFtZSI6InNhIiwidWlkIjoidWlkLTEi",
        "fX0sIm5iZiI6MTAwMCwic3ViIjoic3lzdGVtOnNlcnZpY2VhY2NvdW50Om5zOnNhIn0.-fZow8M8QsMh",
        "WGP5J5UOro-up_V1lA96AhA_NtSrhNE",
    );

    #[test]
    fn tokens_issued_earlier_stay_valid() {
        let signer = Signer::new(&[7; 32]);
        assert_eq!(signer.verify(EARLIER_TOKEN, 1_000), Ok(claims()));
        assert_eq!(
            signer.verify(EARLIER_TOKEN, 2_000),
            Err(TokenError::Expired)
        );
        let payload = |t: &str| t.split('.').nth(1).unwrap().to_string();
        assert_eq!(
            payload(&signer.issue(&claims(), 1_000)),
            payload(EARLIER_TOKEN)
        );
    }

    #[test]
    fn refuses_other_algorithms() {
        let signer = Signer::new(&generate_key());
        let token = signer.issue(&claims(), 1_000);
        let (_, rest) = token.split_once('.').unwrap();
        // `{"alg":"HS512","typ":"JWT"}`: signed some other way.
        let hs512 = format!("eyJhbGciOiJIUzUxMiIsInR5cCI6IkpXVCJ9.{rest}");
        assert_eq!(signer.verify(&hs512, 1_000), Err(TokenError::Signature));
        // `{"alg":"none"}`: unsigned, not even a JWS this server reads.
        let unsigned = format!("eyJhbGciOiJub25lIn0.{rest}");
        assert_eq!(signer.verify(&unsigned, 1_000), Err(TokenError::Malformed));
    }
}
