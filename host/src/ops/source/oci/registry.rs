//! One bounded conversation with a registry for a pull or a push:
//! connecting under the source's [`Rule`], the auth and token dance, reading bodies under
//! their bounds, and sorting failures into "unreachable" and "refused".

use oci_client::Reference;

use super::challenge::bearer_challenge;
use super::failure::Failure;
use super::options::RegistryOptions;
use crate::control::metrics::{SourceRefusal, count_source_refusal};
use crate::ops::source::Reach;
use crate::ops::source::SourceError;
use crate::ops::source::artifact;
use crate::ops::source::credentials;
use crate::ops::source::http::{self, PlainHttp, Rule, described, error_text, refused_by_rule};

/// The most bytes of a registry's token endpoint answer read.
pub const MAX_TOKEN_ANSWER: usize = 64 << 10;
/// The most bytes of a manifest read: the distribution spec asks
/// registries to accept manifests of up to 4 MiB, so none is larger.
pub const MAX_MANIFEST_SIZE: usize = 4 << 20;
/// The most bytes of an error answer read (for its message).
pub const MAX_ERROR_ANSWER: usize = 64 << 10;

/// What a conversation asks the registry's token realm for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    Pull,
    /// `wasmctrl push`: pull too, since a registry checks what it already
    /// has (blobs, manifests) with pull requests.
    Push,
}

impl Access {
    fn scope(self, repository: &str) -> String {
        match self {
            Access::Pull => format!("repository:{repository}:pull"),
            Access::Push => format!("repository:{repository}:pull,push"),
        }
    }
}

/// How requests to the registry are authenticated.
enum Auth {
    Anonymous,
    Basic(String, String),
    Bearer(String),
}

/// One conversation with a registry for a pull or a push: the host's HTTP
/// client with the source's [`Rule`], and the credentials the registry
/// asked for.
/// A new one per fetch, so rotated credentials and certificates are picked
/// up.
pub(super) struct Registry {
    pub(super) http: reqwest::Client,
    rule: Rule,
    /// `https://REGISTRY` (or `http://` with `insecure`).
    pub(super) base: String,
    pub(super) origin: String,
    auth: Auth,
}

impl Registry {
    /// Connects to `reference`'s registry and authenticates as it asks
    /// (anonymously, with basic auth, or with a token from its realm) for
    /// pulling.
    pub(super) async fn open(
        options: &RegistryOptions,
        origin: &str,
        reference: &Reference,
        reach: Reach,
    ) -> Result<Self, Failure> {
        Self::open_for(options, origin, reference, reach, Access::Pull).await
    }

    /// [`Registry::open`] for `access`.
    pub(super) async fn open_for(
        options: &RegistryOptions,
        origin: &str,
        reference: &Reference,
        reach: Reach,
        access: Access,
    ) -> Result<Self, Failure> {
        let refused = |message: String| {
            Failure::refused(SourceError::Download {
                origin: origin.to_string(),
                message,
            })
        };
        let not_allowed = |message: String| {
            Failure::refused(SourceError::NotAllowed {
                origin: origin.to_string(),
                message,
            })
        };
        let rule = Rule {
            http: if options.insecure {
                PlainHttp::Any
            } else {
                PlainHttp::Never
            },
            reach,
        };
        let scheme = if options.insecure { "http" } else { "https" };
        let base = format!("{scheme}://{}", reference.resolve_registry());
        let url = reqwest::Url::parse(&format!("{base}/v2/"))
            .map_err(|e| refused(format!("{base:?} is not a registry address: {e}")))?;
        rule.check(&url).map_err(not_allowed)?;
        let client = http::client(options.limits.timeout, rule.clone()).map_err(refused)?;
        let credentials = match &options.credentials {
            Some(provider) => provider.credentials(reference.resolve_registry()).await,
            None => {
                credentials::credentials_for(
                    options.docker_config.as_deref(),
                    reference.resolve_registry(),
                )
                .await
            }
        }
        .map_err(|source| {
            Failure::refused(SourceError::Credentials {
                origin: origin.to_string(),
                source,
            })
        })?;
        let mut registry = Self {
            http: client,
            rule,
            base,
            origin: origin.to_string(),
            auth: Auth::Anonymous,
        };
        registry.auth = registry
            .authenticate(url, &access.scope(reference.repository()), credentials)
            .await?;
        Ok(registry)
    }

    /// What the registry's `/v2/` asks for: nothing, basic auth, or a
    /// bearer token for `scope` from the realm its challenge names.
    async fn authenticate(
        &self,
        v2: reqwest::Url,
        scope: &str,
        credentials: Option<credentials::Credentials>,
    ) -> Result<Auth, Failure> {
        let response = self
            .http
            .get(v2)
            .send()
            .await
            .map_err(|e| self.send_failure(e))?;
        // Only its headers matter; its body is never read.
        let Some(challenge) = response
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|h| h.to_str().ok())
            .map(str::to_string)
        else {
            return Ok(Auth::Anonymous);
        };
        drop(response);
        let Some((realm, service)) = bearer_challenge(&challenge) else {
            return Ok(match credentials {
                Some(c) => Auth::Basic(c.username, c.password),
                None => Auth::Anonymous,
            });
        };
        let realm = reqwest::Url::parse(&realm).map_err(|e| {
            self.refused(format!(
                "the registry's token realm {} is not a URL: {e}",
                artifact::shown(&realm)
            ))
        })?;
        self.rule.check(&realm).map_err(|why| {
            Failure::refused(SourceError::NotAllowed {
                origin: self.origin.clone(),
                message: format!("the registry's token realm: {why}"),
            })
        })?;
        let mut query = vec![("scope", scope.to_string())];
        if let Some(service) = service {
            query.push(("service", service));
        }
        let mut request = self.http.get(realm).query(&query);
        if let Some(c) = credentials {
            request = request.basic_auth(c.username, Some(c.password));
        }
        let response = request.send().await.map_err(|e| self.send_failure(e))?;
        let status = response.status();
        if !status.is_success() {
            let (text, cut) = error_text(response, MAX_ERROR_ANSWER).await;
            return Err(self.status_failure(
                status,
                format!(
                    "the registry's token endpoint answered {status}: {}",
                    quote_answer(text, cut)
                ),
            ));
        }
        let body = self
            .read_capped(
                response,
                MAX_TOKEN_ANSWER,
                "the registry's token answer",
                SourceRefusal::TokenAnswer,
            )
            .await?;
        #[derive(serde::Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let token: Token = serde_json::from_slice(&body).map_err(|e| {
            self.refused(format!("the registry's token answer is not a token: {e}"))
        })?;
        match token.token.or(token.access_token) {
            Some(t) if !t.is_empty() => Ok(Auth::Bearer(t)),
            _ => Err(self.refused("the registry's token answer holds no token".into())),
        }
    }

    /// Refuses `url` (one the registry named, such as an upload
    /// location) unless the conversation's [`Rule`] allows it.
    pub(super) fn check(&self, url: &reqwest::Url) -> Result<(), Failure> {
        self.rule.check(url).map_err(|why| {
            Failure::refused(SourceError::NotAllowed {
                origin: self.origin.clone(),
                message: why,
            })
        })
    }

    pub(super) fn get(&self, url: &str) -> reqwest::RequestBuilder {
        self.with_auth(self.http.get(url))
    }

    pub(super) fn with_auth(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.auth {
            Auth::Anonymous => request,
            Auth::Basic(user, password) => request.basic_auth(user, Some(password)),
            Auth::Bearer(token) => request.bearer_auth(token),
        }
    }

    /// At most `limit` bytes of `response`'s body (`what`, for the error):
    /// a longer one is refused, and not read past the bound.
    pub(super) async fn read_capped(
        &self,
        mut response: reqwest::Response,
        limit: usize,
        what: &str,
        counted_as: SourceRefusal,
    ) -> Result<Vec<u8>, Failure> {
        let too_large = || {
            count_source_refusal(counted_as);
            self.refused(format!("{what} exceeds {}; refusing it", size(limit)))
        };
        if response.content_length().is_some_and(|n| n > limit as u64) {
            return Err(too_large());
        }
        let mut out = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| Failure::Unreachable(format!("{what} broke off: {}", described(e))))?
        {
            if out.len() + chunk.len() > limit {
                return Err(too_large());
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    pub(super) fn refused(&self, message: String) -> Failure {
        Failure::refused(SourceError::Download {
            origin: self.origin.clone(),
            message,
        })
    }

    pub(super) fn not_an_artifact(&self, message: String) -> Failure {
        count_source_refusal(SourceRefusal::NotAnArtifact);
        Failure::refused(SourceError::NotWasmArtifact {
            origin: self.origin.clone(),
            message,
        })
    }

    /// Sends `request` and returns its answer when it is a success; a
    /// request that got no answer fails as [`Registry::send_failure`] says,
    /// one answered otherwise as [`Registry::answer_failure`] does.
    pub(super) async fn answer(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, Failure> {
        let response = request.send().await.map_err(|e| self.send_failure(e))?;
        if !response.status().is_success() {
            return Err(self.answer_failure(response).await);
        }
        Ok(response)
    }

    /// A request that got no answer: unreachable, unless the source's rule
    /// refused where it led (a redirect, an address).
    pub(super) fn send_failure(&self, e: reqwest::Error) -> Failure {
        let refused = refused_by_rule(&e);
        let message = described(e);
        if refused {
            return Failure::refused(SourceError::NotAllowed {
                origin: self.origin.clone(),
                message,
            });
        }
        let mut message = message;
        if message.contains("InvalidContentType") {
            message.push_str(
                " (the registry does not speak TLS; for a plain-HTTP registry set insecure: true)",
            );
        }
        Failure::Unreachable(message)
    }

    /// A non-success answer, sorted into "cannot reach" (5xx, 429) and
    /// "refused" (the rest), with the registry's own words, read under
    /// [`MAX_ERROR_ANSWER`].
    pub(super) async fn answer_failure(&self, response: reqwest::Response) -> Failure {
        let status = response.status();
        let (text, cut) = error_text(response, MAX_ERROR_ANSWER).await;
        #[derive(serde::Deserialize)]
        struct Envelope {
            errors: Vec<ErrorEntry>,
        }
        #[derive(serde::Deserialize)]
        struct ErrorEntry {
            code: String,
            #[serde(default)]
            message: String,
        }
        let errors = serde_json::from_str::<Envelope>(&text)
            .map(|e| e.errors)
            .unwrap_or_default();
        let unknown = errors.iter().any(|e| {
            matches!(
                e.code.as_str(),
                "MANIFEST_UNKNOWN" | "NAME_UNKNOWN" | "BLOB_UNKNOWN"
            )
        });
        if unknown || status == reqwest::StatusCode::NOT_FOUND {
            return self.refused("the registry has no such repository, tag or digest".into());
        }
        let said = if errors.is_empty() {
            text
        } else {
            errors
                .iter()
                .map(|e| format!("{}: {}", e.code, e.message))
                .collect::<Vec<_>>()
                .join("; ")
        };
        self.status_failure(
            status,
            format!(
                "the registry answered {status}: {}",
                quote_answer(said, cut)
            ),
        )
    }

    fn status_failure(&self, status: reqwest::StatusCode, message: String) -> Failure {
        if status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS {
            Failure::Unreachable(message)
        } else if matches!(status.as_u16(), 401 | 403) {
            self.refused(format!(
                "the registry refused access ({message}); check the credentials in the docker config"
            ))
        } else {
            self.refused(message)
        }
    }
}

/// What a message quotes of a registry's error answer: its words cut to
/// one line of at most 256 bytes (they reach the log on every retry, and
/// the object's status), and whether it said more than was read.
fn quote_answer(words: String, cut: bool) -> String {
    let mut quoted = artifact::bounded(words);
    if cut {
        quoted.push_str(&format!(
            " (the answer exceeds {}; the rest was not read)",
            size(MAX_ERROR_ANSWER)
        ));
    }
    quoted
}

/// `n` bytes as "64 KiB", "4 MiB".
fn size(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}
