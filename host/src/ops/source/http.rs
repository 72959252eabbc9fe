//! What the network sources share: TLS on ring (the provider kube uses; no
//! OpenSSL, no aws-lc), a client whose every connection and redirect meets
//! the source's [`Rule`], and reading a body within a size bound. Every
//! body the host reads from the network goes through [`read_bounded`] or
//! [`error_text`]: a server cannot make the host hold more than the bound
//! of what it asked for.

use std::net::SocketAddr;
use std::sync::{Arc, Once};

use futures::{Stream, StreamExt};

use super::reach::{Reach, internal, is_internal};
use super::{SourceError, held};
use crate::config::is_loopback_url;
use crate::control::metrics::{SourceRefusal, count_source_refusal};

/// reqwest (under oci-client too) is built without a built-in crypto
/// provider; rustls then uses the process default, which this installs
/// once (unless the embedding program chose another).
pub(crate) fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The longest a connection may take to open (within a fetch's timeout).
pub(crate) const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A connection or redirect the source's [`Rule`] refused (told apart
/// from the network's failures by its type).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ReachRefused(pub String);

/// Whether the source's [`Rule`] stopped the request (rather than the
/// network).
pub(crate) fn refused_by_rule(e: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.is::<ReachRefused>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// The rule every URL a source connects to meets, the first and each
/// redirect: the scheme (`https`, or plain `http` where `insecure` allows
/// it) and the [`Reach`].
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    /// Plain HTTP allowed: `Loopback` to a loopback host only (a `url`
    /// source with `insecure`), `Any` to any host (a registry with
    /// `insecure`).
    pub http: PlainHttp,
    pub reach: Reach,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlainHttp {
    Never,
    Loopback,
    Any,
}

impl Rule {
    pub(crate) fn check(&self, url: &reqwest::Url) -> Result<(), String> {
        self.check_scheme(url)?;
        self.reach
            .check(url)
            .inspect_err(|_| count_source_refusal(SourceRefusal::InternalAddress))
    }

    fn check_scheme(&self, url: &reqwest::Url) -> Result<(), String> {
        match (url.scheme(), self.http) {
            ("https", _) | ("http", PlainHttp::Any) => {}
            ("http", PlainHttp::Loopback) if is_loopback_url(url) => {}
            ("http", PlainHttp::Loopback) => {
                return Err(format!(
                    "refusing {}: plain http:// is allowed only to a loopback address",
                    redact(url)
                ));
            }
            (scheme, _) => {
                return Err(format!(
                    "refusing {}: must be https://, not {scheme}://",
                    redact(url)
                ));
            }
        }
        Ok(())
    }
}

/// `url` without its query, which may carry a signature or token.
pub(crate) fn redact(url: &reqwest::Url) -> String {
    let mut u = url.clone();
    if u.query().is_some() {
        u.set_query(None);
        format!("{u}?…")
    } else {
        u.to_string()
    }
}

/// Resolves names as the system does, then refuses a name with an address
/// its [`Reach`] does not allow. reqwest connects to the addresses this
/// returns, so the address checked is the address connected to (a second
/// lookup cannot answer differently).
pub(crate) struct CheckedResolver {
    pub(crate) reach: Reach,
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let reach = self.reach.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed = match &reach {
                Reach::Anywhere => true,
                Reach::Public { allowed } => allowed.iter().any(|a| {
                    a.eq_ignore_ascii_case(&host)
                        || a.rsplit_once(':')
                            .is_some_and(|(h, _)| h.eq_ignore_ascii_case(&host))
                }),
            };
            if !allowed && let Some(bad) = addrs.iter().find(|a| is_internal(a.ip())) {
                count_source_refusal(SourceRefusal::InternalAddress);
                return Err(Box::new(ReachRefused(internal(&host, Some(bad.ip()), &host))) as _);
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The most redirects one request follows.
pub(crate) const MAX_REDIRECTS: usize = 5;

/// The HTTP client of network sources: rustls with the platform's roots,
/// at most `timeout` (and [`CONNECT_TIMEOUT`]) to connect, at most
/// [`MAX_REDIRECTS`] redirects, each of which meets `rule` as the first URL
/// does (an https source is not redirected to plain http, an object's
/// source not to an internal address).
pub(crate) fn client(timeout: std::time::Duration, rule: Rule) -> Result<reqwest::Client, String> {
    install_crypto_provider();
    let mut builder = reqwest::Client::builder()
        .connect_timeout(timeout.min(CONNECT_TIMEOUT))
        .read_timeout(timeout)
        .user_agent(concat!("wasmctrl/", env!("CARGO_PKG_VERSION")));
    if let Reach::Public { .. } = rule.reach {
        // Through a proxy the proxy resolves the name, past the check.
        builder = builder.no_proxy().dns_resolver(Arc::new(CheckedResolver {
            reach: rule.reach.clone(),
        }));
    }
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() >= MAX_REDIRECTS {
            count_source_refusal(SourceRefusal::Redirect);
            let e = ReachRefused(format!("more than {MAX_REDIRECTS} redirects"));
            return attempt.error(e);
        }
        // A redirect to an internal address counts as that (in check).
        if let Err(why) = rule.check_scheme(attempt.url()) {
            count_source_refusal(SourceRefusal::Redirect);
            return attempt.error(ReachRefused(format!("a redirect: {why}")));
        }
        match rule.check(attempt.url()) {
            Ok(()) => attempt.follow(),
            Err(why) => attempt.error(ReachRefused(format!("a redirect: {why}"))),
        }
    });
    builder
        .redirect(policy)
        .build()
        .map_err(|e| format!("cannot set up an HTTP client: {e}"))
}

/// Up to `limit` bytes of `response`'s body, for an error message, and
/// whether there was more: what is past the bound is not read.
pub(crate) async fn error_text(mut response: reqwest::Response, limit: usize) -> (String, bool) {
    let mut out = Vec::new();
    let mut cut = false;
    // A body that breaks off is shown as far as it came.
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = limit - out.len();
        if chunk.len() > room {
            out.extend_from_slice(&chunk[..room]);
            cut = true;
            break;
        }
        out.extend_from_slice(&chunk);
    }
    if cut {
        count_source_refusal(SourceRefusal::ErrorAnswer);
    }
    (String::from_utf8_lossy(&out).into_owned(), cut)
}

/// Collects `body` (whose announced length is `announced`) into memory,
/// refusing more than `limit` bytes before reading them, each chunk
/// [`held::charge`]d to the load it is for.
pub(crate) async fn read_bounded(
    origin: &str,
    announced: Option<u64>,
    limit: u64,
    body: impl Stream<Item = Result<bytes::Bytes, reqwest::Error>>,
) -> Result<Vec<u8>, SourceError> {
    let too_large = |size| {
        count_source_refusal(SourceRefusal::Component);
        SourceError::TooLarge {
            origin: origin.to_string(),
            limit,
            size,
        }
    };
    if let Some(n) = announced.filter(|n| *n > limit) {
        return Err(too_large(Some(n)));
    }
    let mut out = Vec::with_capacity(announced.unwrap_or(0).min(limit) as usize);
    let mut body = std::pin::pin!(body);
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| SourceError::Download {
            origin: origin.to_string(),
            message: format!("the download broke off: {}", described(e)),
        })?;
        if (out.len() + chunk.len()) as u64 > limit {
            return Err(too_large(None));
        }
        held::charge_for(origin, chunk.len() as u64)?;
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// A request's error with its causes, without the URL reqwest appends to
/// its text (` for url (…)`, with the query, which may carry a signature,
/// and after a redirect the URL the server chose).
pub(crate) fn described(e: reqwest::Error) -> String {
    chain(&e.without_url())
}

/// An error with its causes (`reqwest` and `oci-client` errors keep the
/// useful part, "connection refused", in their sources).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> reqwest::Url {
        s.parse().unwrap()
    }

    #[test]
    fn the_rule_holds_for_scheme_and_reach() {
        let https_only = Rule {
            http: PlainHttp::Never,
            reach: Reach::Anywhere,
        };
        assert!(https_only.check(&url("https://example.com/c")).is_ok());
        let e = https_only
            .check(&url("http://example.com/c?sig=x"))
            .unwrap_err();
        assert!(
            e.contains("must be https://") && e.contains("?…") && !e.contains("sig"),
            "{e}"
        );
        let loopback = Rule {
            http: PlainHttp::Loopback,
            reach: Reach::Anywhere,
        };
        assert!(loopback.check(&url("http://127.0.0.1:8080/c")).is_ok());
        assert!(loopback.check(&url("http://example.com/c")).is_err());
        let object = Rule {
            http: PlainHttp::Any,
            reach: Reach::public(["registry.internal:5000".to_string()]),
        };
        for denied in [
            "https://127.0.0.1/c",
            "https://[::1]/c",
            "https://localhost/c",
            "http://169.254.169.254/latest/meta-data",
            "https://10.0.0.1:5000/v2/",
        ] {
            let e = object.check(&url(denied)).unwrap_err();
            assert!(e.contains("public addresses"), "{denied}: {e}");
        }
        assert!(
            object
                .check(&url("https://registry.internal:5000/v2/"))
                .is_ok()
        );
        assert!(object.check(&url("https://ghcr.io/v2/")).is_ok());
    }

    #[test]
    fn an_allowed_host_matches_with_or_without_its_port_and_a_refusal_names_the_entry() {
        let any_port = Reach::public(["10.0.0.7".to_string()]);
        let one_port = Reach::public(["10.0.0.7:443".to_string()]);
        for u in ["https://10.0.0.7/v2/", "https://10.0.0.7:443/v2/"] {
            assert!(any_port.check(&url(u)).is_ok(), "{u}");
            assert!(one_port.check(&url(u)).is_ok(), "{u}");
        }
        assert!(any_port.check(&url("https://10.0.0.7:5000/v2/")).is_ok());
        let e = one_port
            .check(&url("https://10.0.0.7:5000/v2/"))
            .unwrap_err();
        assert!(
            e.starts_with("refusing to connect to 10.0.0.7: ")
                && e.contains("pluginsFrom.allowHosts (here \"10.0.0.7:5000\")"),
            "{e}"
        );
        let e = Reach::public([])
            .check(&url("http://localhost/metrics"))
            .unwrap_err();
        assert!(e.contains("(here \"localhost:80\")"), "{e}");
    }
}
