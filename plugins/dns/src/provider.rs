//! The DNS provider's HTTP API, as the plugin calls it through the host:
//!
//! ```text
//! PUT    {endpoint}/zones/{zone}/records/{name}  {"type","value","ttl"}  → 200
//! GET    {endpoint}/zones/{zone}/records/{name}                         → 200 and the record, or 404
//! DELETE {endpoint}/zones/{zone}/records/{name}                         → 204, or 404
//! ```
//!
//! Every request carries `Authorization: Bearer ${secret:NAME}`, the
//! placeholder [`SECRET_PLACEHOLDER`] describes, never a token.

use std::fmt;

use serde::{Deserialize, Serialize};
use wasmctrl_sdk::serde_json::{self, Value};
use wasmctrl_sdk::{Error, http};

/// How a header value names a secret instead of carrying it: the host
/// replaces each `${secret:NAME}` in the headers of an outgoing request
/// with the value of the secret `NAME` of the plugin's config entry
/// (`secrets:`, each read from a Kubernetes Secret), and only for the
/// destinations that secret lists (`hosts`). The plugin never holds the
/// token: neither a bug nor a hostile build of it can log or send it
/// elsewhere, and rotating the Secret needs no new build.
pub const SECRET_PLACEHOLDER: &str = "${secret:NAME}";

/// The secret named when the settings name none.
pub const DEFAULT_SECRET: &str = "dns-token";

/// How much of a provider's error body a message quotes.
const QUOTED_BODY: usize = 200;

/// The plugin's `settings` in the host config. Unknown fields are refused,
/// so a misspelt one is an error rather than a silent default.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// `http://host:port` or `https://…`, the prefix of every path of the API.
    pub endpoint: String,
    /// The zone every record of this plugin lives in.
    pub zone: String,
    /// The name of the host's secret holding the provider's token.
    #[serde(default = "default_secret")]
    pub secret: String,
}

fn default_secret() -> String {
    DEFAULT_SECRET.into()
}

/// A record as the provider takes and returns it. Other fields a provider
/// may return are ignored: only these three are compared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    #[serde(rename = "type")]
    pub type_: String,
    pub value: String,
    pub ttl: u32,
}

/// Where a record lives at the provider.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    pub zone: String,
    pub name: String,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.zone, self.name)
    }
}

/// Why a call to the provider did not succeed. Both kinds are transient:
/// a provider that is down, or a token being rotated, recovers without the
/// object changing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderError {
    /// It answered with a status the API does not give for success.
    Status {
        method: &'static str,
        url: String,
        status: u16,
        body: String,
    },
    /// No answer: refused by the host, unreachable, or cut off.
    Failed {
        method: &'static str,
        url: String,
        why: String,
    },
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Status {
                method,
                url,
                status,
                body,
            } => {
                write!(f, "{method} {url} answered {status}")?;
                if !body.is_empty() {
                    write!(f, ": {body}")?;
                }
                Ok(())
            }
            Self::Failed { method, url, why } => write!(f, "{method} {url}: {why}"),
        }
    }
}

impl From<ProviderError> for Error {
    fn from(e: ProviderError) -> Self {
        Error::transient(e.to_string())
    }
}

/// The provider the settings name.
#[derive(Clone, Debug)]
pub struct Provider {
    endpoint: String,
    zone: String,
    authorization: String,
}

impl Provider {
    /// Checks the settings; a bad one is a permanent error, since only a
    /// new config fixes it.
    pub fn new(settings: Settings) -> Result<Self, Error> {
        let endpoint = settings.endpoint.trim_end_matches('/');
        let scheme_rest = endpoint
            .strip_prefix("https://")
            .or_else(|| endpoint.strip_prefix("http://"));
        if scheme_rest.is_none_or(|rest| rest.is_empty() || rest.contains(['?', '#'])) {
            return Err(Error::permanent(format!(
                "settings.endpoint {:?} must be an http:// or https:// URL without query",
                settings.endpoint
            )));
        }
        check_name("settings.zone", &settings.zone)?;
        let secret = &settings.secret;
        if secret.is_empty()
            || !secret
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(Error::permanent(format!(
                "settings.secret {secret:?} must be letters, digits, '-', '_' or '.'"
            )));
        }
        Ok(Self {
            endpoint: endpoint.to_string(),
            zone: settings.zone,
            authorization: format!("Bearer {}", SECRET_PLACEHOLDER.replace("NAME", secret)),
        })
    }

    /// Where the record `name` of this provider's zone lives, if `name` is
    /// one the plugin can put in a URL path.
    pub fn location(&self, name: &str) -> Result<Location, Error> {
        check_name("spec.name", name)?;
        Ok(Location {
            zone: self.zone.clone(),
            name: name.to_string(),
        })
    }

    /// The record at `at` as the provider holds it (any JSON: one that is
    /// not a [`Record`] differs from every spec), or None.
    pub fn get(&self, at: &Location) -> Result<Option<Value>, ProviderError> {
        let (url, answer) = self.send("GET", at, None)?;
        match answer.status {
            200 => Ok(Some(
                serde_json::from_slice(&answer.body).unwrap_or(Value::Null),
            )),
            404 => Ok(None),
            _ => Err(unexpected("GET", url, &answer)),
        }
    }

    /// Makes the record at `at` be `record`.
    pub fn put(&self, at: &Location, record: &Record) -> Result<(), ProviderError> {
        let body = serde_json::to_vec(record).expect("a record serializes");
        let (url, answer) = self.send("PUT", at, Some(body))?;
        match answer.status {
            200..=299 => Ok(()),
            _ => Err(unexpected("PUT", url, &answer)),
        }
    }

    /// Removes the record at `at`; one already gone is as good.
    pub fn delete(&self, at: &Location) -> Result<(), ProviderError> {
        let (url, answer) = self.send("DELETE", at, None)?;
        match answer.status {
            200..=299 | 404 => Ok(()),
            _ => Err(unexpected("DELETE", url, &answer)),
        }
    }

    fn send(
        &self,
        method: &'static str,
        at: &Location,
        body: Option<Vec<u8>>,
    ) -> Result<(String, http::Response), ProviderError> {
        let url = format!("{}/zones/{}/records/{}", self.endpoint, at.zone, at.name);
        let mut request = http::Request::new(method, &url)
            .header("authorization", &self.authorization)
            .header("accept", "application/json");
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        match http::send(&request) {
            Ok(answer) => Ok((url, answer)),
            Err(e) => Err(ProviderError::Failed {
                method,
                url,
                why: e.to_string(),
            }),
        }
    }
}

fn unexpected(method: &'static str, url: String, answer: &http::Response) -> ProviderError {
    let body = String::from_utf8_lossy(&answer.body);
    ProviderError::Status {
        method,
        url,
        status: answer.status,
        body: body.trim().chars().take(QUOTED_BODY).collect(),
    }
}

/// A zone or record name the plugin puts in a URL path as it is: DNS
/// characters only (plus `*` for wildcards and `@` for a zone's apex), so
/// it can neither leave its path segment nor need escaping.
fn check_name(what: &str, name: &str) -> Result<(), Error> {
    let valid = !name.is_empty()
        && name.len() <= 253
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '*' | '@'));
    if valid {
        Ok(())
    } else {
        Err(Error::permanent(format!(
            "{what} {name:?} must be a DNS name (letters, digits, '-', '_', '.', '*', '@')"
        )))
    }
}
