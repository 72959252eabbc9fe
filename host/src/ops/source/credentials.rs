//! Registry credentials from a docker `config.json` (the format of `docker
//! login` and of Kubernetes Secrets of type `kubernetes.io/dockerconfigjson`):
//!
//! ```json
//! {"auths": {"ghcr.io": {"auth": "<base64 of user:password>"},
//!            "registry.example:5000": {"username": "u", "password": "p"}}}
//! ```
//!
//! Credential helpers (`credsStore`, `credHelpers`) and identity tokens are
//! not run or used: the host reads static credentials only.

use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use futures::future::BoxFuture;
use serde::Deserialize;

use crate::meta::files::{LocalReadError, read_regular};

/// The largest config file read.
const MAX_CONFIG: u64 = 1 << 20;

/// A user name and password (or token) for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Why credentials could not be read. Never carries a secret.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("cannot read registry credentials {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("registry credentials {path}: larger than {MAX_CONFIG} bytes")]
    TooLarge { path: PathBuf },
    #[error("registry credentials{}: not a docker config.json: {message}", path_suffix(.path))]
    Format {
        path: Option<PathBuf>,
        message: String,
    },
    #[error("registry credentials{}: auths[{registry:?}]: {message}", path_suffix(.path))]
    Entry {
        path: Option<PathBuf>,
        registry: String,
        message: String,
    },
    /// A Kubernetes Secret could not be used (missing, of another type,
    /// without `.dockerconfigjson`, unreadable, or its content refused).
    #[error("imagePullSecret {namespace}/{name}: {message}")]
    Secret {
        namespace: String,
        name: String,
        message: String,
    },
}

/// Supplies registry credentials in place of a docker config file (a
/// Kubernetes Secret, …). Asked on every registry conversation, so rotated
/// credentials are picked up.
pub trait RegistryCredentials: Send + Sync + fmt::Debug + 'static {
    /// The credentials for `registry` (`host[:port]`, as in an OCI
    /// reference); None: anonymous.
    fn credentials<'a>(
        &'a self,
        registry: &'a str,
    ) -> BoxFuture<'a, Result<Option<Credentials>, CredentialsError>>;
}

fn path_suffix(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|p| format!(" {}", p.display()))
        .unwrap_or_default()
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: std::collections::BTreeMap<String, AuthEntry>,
}

#[derive(Deserialize)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default, rename = "identitytoken")]
    identity_token: Option<String>,
}

/// The credentials for `registry` (`host[:port]`, as in an OCI reference)
/// in a docker `config.json` (or a Secret's `.dockerconfigjson`); None when
/// it has no entry for the registry.
pub fn credentials_from_dockerconfigjson(
    bytes: &[u8],
    registry: &str,
) -> Result<Option<Credentials>, CredentialsError> {
    parse(bytes, registry, None)
}

fn parse(
    bytes: &[u8],
    registry: &str,
    path: Option<&Path>,
) -> Result<Option<Credentials>, CredentialsError> {
    // serde's messages quote the values they refuse: only where it failed
    // is said, never what was there (it may be a secret).
    let config: DockerConfig =
        serde_json::from_slice(bytes).map_err(|e| CredentialsError::Format {
            path: path.map(Path::to_path_buf),
            message: format!(
                "{} at line {} column {}",
                match e.classify() {
                    serde_json::error::Category::Syntax => "invalid JSON",
                    serde_json::error::Category::Eof => "unexpected end of the text",
                    serde_json::error::Category::Data => "a field is missing or has the wrong type",
                    serde_json::error::Category::Io => "cannot read it",
                },
                e.line(),
                e.column()
            ),
        })?;
    let wanted = registry_key(registry);
    let Some((key, entry)) = config
        .auths
        .iter()
        .find(|(key, _)| registry_key(key) == wanted)
    else {
        return Ok(None);
    };
    let bad = |message: &str| CredentialsError::Entry {
        path: path.map(Path::to_path_buf),
        registry: key.clone(),
        message: message.to_string(),
    };
    if let Some(auth) = entry.auth.as_deref().filter(|a| !a.is_empty()) {
        let decoded = BASE64
            .decode(auth.trim())
            .map_err(|_| bad("auth is not base64"))?;
        let text = String::from_utf8(decoded).map_err(|_| bad("auth is not UTF-8"))?;
        let (username, password) = text
            .split_once(':')
            .ok_or_else(|| bad("auth is not base64 of user:password"))?;
        return Ok(Some(Credentials {
            username: username.to_string(),
            password: password.to_string(),
        }));
    }
    match (&entry.username, &entry.password) {
        (Some(username), Some(password)) => Ok(Some(Credentials {
            username: username.clone(),
            password: password.clone(),
        })),
        _ if entry.identity_token.is_some() => Err(bad(
            "identitytoken is not supported; give auth or username and password",
        )),
        _ => Err(bad("has neither auth nor username and password")),
    }
}

/// Standard base64, padded or not (tools differ).
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// A registry as a config key names it: `https://index.docker.io/v1/`,
/// `ghcr.io`, `http://localhost:5000` all reduce to `host[:port]`, and
/// Docker Hub's names to one.
fn registry_key(s: &str) -> String {
    let s = s.trim();
    let s = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"))
        .unwrap_or(s);
    let host = s.split('/').next().unwrap_or_default().to_ascii_lowercase();
    match host.as_str() {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            "docker.io".into()
        }
        _ => host,
    }
}

/// The docker config file to read: `explicit`, else `$DOCKER_CONFIG/config.json`,
/// else `~/.docker/config.json`, whichever is given first (an explicit or
/// `$DOCKER_CONFIG` file must exist; the home one may not).
pub fn docker_config_path(explicit: Option<&Path>) -> Option<(PathBuf, bool)> {
    if let Some(p) = explicit {
        return Some((p.to_path_buf(), true));
    }
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some((PathBuf::from(dir).join("config.json"), true));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| {
            (
                PathBuf::from(home).join(".docker").join("config.json"),
                false,
            )
        })
}

/// The credentials for `registry` from the docker config file (see
/// [`docker_config_path`]); None (anonymous) when there is no file or no
/// entry.
pub async fn credentials_for(
    explicit: Option<&Path>,
    registry: &str,
) -> Result<Option<Credentials>, CredentialsError> {
    let Some((path, required)) = docker_config_path(explicit) else {
        return Ok(None);
    };
    let bytes = match read_regular(&path, MAX_CONFIG).await {
        Ok(bytes) => bytes,
        Err(e) if e.not_found() && !required => return Ok(None),
        Err(LocalReadError::TooLarge { .. }) => {
            crate::control::metrics::count_disk_refusal(
                crate::control::metrics::DiskRefusal::DockerConfig,
            );
            return Err(CredentialsError::TooLarge { path });
        }
        Err(LocalReadError::Io(source)) => return Err(CredentialsError::Read { path, source }),
        Err(e @ LocalReadError::NotRegular(_)) => {
            let source = std::io::Error::other(e.to_string());
            return Err(CredentialsError::Read { path, source });
        }
    };
    parse(&bytes, registry, Some(&path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(u: &str, p: &str) -> Option<Credentials> {
        Some(Credentials {
            username: u.into(),
            password: p.into(),
        })
    }

    #[test]
    fn auth_and_username_password_entries() {
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cr:et");
        let json = format!(
            r#"{{"auths": {{
                "https://ghcr.io/v2/": {{"auth": "{auth}"}},
                "127.0.0.1:5000": {{"username": "bob", "password": "pw"}},
                "https://index.docker.io/v1/": {{"auth": "{auth}"}}
            }}, "credsStore": "desktop"}}"#
        );
        let get = |r| credentials_from_dockerconfigjson(json.as_bytes(), r).unwrap();
        // The password keeps everything after the first ':'.
        assert_eq!(get("ghcr.io"), creds("alice", "s3cr:et"));
        assert_eq!(get("GHCR.IO"), creds("alice", "s3cr:et"));
        assert_eq!(get("127.0.0.1:5000"), creds("bob", "pw"));
        assert_eq!(get("docker.io"), creds("alice", "s3cr:et"));
        assert_eq!(get("index.docker.io"), creds("alice", "s3cr:et"));
        assert_eq!(get("127.0.0.1:5001"), None);
        assert_eq!(get("quay.io"), None);
    }

    #[test]
    fn unpadded_auth_is_accepted() {
        let auth = base64::engine::general_purpose::STANDARD_NO_PAD.encode("u:p1");
        let json = format!(r#"{{"auths": {{"r.example": {{"auth": "{auth}"}}}}}}"#);
        assert_eq!(
            credentials_from_dockerconfigjson(json.as_bytes(), "r.example").unwrap(),
            creds("u", "p1")
        );
    }

    #[test]
    fn bad_entries_are_named_without_their_secret() {
        for (entry, expected) in [
            (r#"{"auth": "%%%"}"#, "auth is not base64"),
            (r#"{"auth": "bm9jb2xvbg=="}"#, "user:password"),
            (
                r#"{"identitytoken": "t0ken"}"#,
                "identitytoken is not supported",
            ),
            (
                r#"{"username": "u"}"#,
                "neither auth nor username and password",
            ),
        ] {
            let json = format!(r#"{{"auths": {{"r.example": {entry}}}}}"#);
            let err = credentials_from_dockerconfigjson(json.as_bytes(), "r.example")
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected) && err.contains("r.example"), "{err}");
            assert!(!err.contains("t0ken") && !err.contains("%%%"), "{err}");
        }
        for text in [
            &b"not json"[..],
            br#"{"auths": 5}"#,
            br#"{"auths": "hunter2"}"#,
            br#"{"auths": {"r.example": {"password": ["hunter2"]}}}"#,
        ] {
            let err = credentials_from_dockerconfigjson(text, "r.example")
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("not a docker config.json") && err.contains("line 1"),
                "{err}"
            );
            assert!(!err.contains("hunter2"), "a value is quoted: {err}");
        }
    }

    #[test]
    fn debug_output_redacts_the_password() {
        let c = creds("u", "hunter2").unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[tokio::test]
    async fn an_explicit_file_must_exist() {
        let err = credentials_for(Some(Path::new("/nonexistent/config.json")), "r.example")
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent/config.json"),
            "{err}"
        );
    }

    /// A docker config that is a device (or a link to one) is refused,
    /// not read forever.
    #[tokio::test]
    async fn a_config_that_is_not_a_regular_file_is_refused() {
        let err = credentials_for(Some(Path::new("/dev/zero")), "r.example")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }

    #[tokio::test]
    async fn a_config_past_its_bound_is_refused_unread_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(MAX_CONFIG + 1).unwrap();
        let what = crate::control::metrics::DiskRefusal::DockerConfig;
        let before = crate::control::metrics::disk_refusals(what);
        let err = credentials_for(Some(&path), "r.example").await.unwrap_err();
        assert!(matches!(err, CredentialsError::TooLarge { .. }), "{err}");
        assert!(
            err.to_string().contains("larger than 1048576 bytes"),
            "{err}"
        );
        assert!(crate::control::metrics::disk_refusals(what) > before);
    }
}
