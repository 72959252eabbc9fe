//! What the network sources share: TLS on ring (the provider kube uses; no
//! OpenSSL, no aws-lc), and reading a body within a size bound.

use std::sync::Once;

use futures::{Stream, StreamExt};

use super::SourceError;

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

/// The HTTP client of URL sources: rustls with the platform's roots, at
/// most 5 redirects, at most `timeout` (and [`CONNECT_TIMEOUT`]) to connect.
pub(crate) fn client(timeout: std::time::Duration) -> Result<reqwest::Client, String> {
    install_crypto_provider();
    reqwest::Client::builder()
        .connect_timeout(timeout.min(CONNECT_TIMEOUT))
        .redirect(reqwest::redirect::Policy::limited(5))
        .user_agent(concat!("wasmctrl/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("cannot set up an HTTP client: {e}"))
}

/// Collects `body` (whose announced length is `announced`) into memory,
/// refusing more than `limit` bytes before reading them.
pub(crate) async fn read_bounded<E: std::fmt::Display>(
    origin: &str,
    announced: Option<u64>,
    limit: u64,
    body: impl Stream<Item = Result<bytes::Bytes, E>>,
) -> Result<Vec<u8>, SourceError> {
    let too_large = |size| SourceError::TooLarge {
        origin: origin.to_string(),
        limit,
        size,
    };
    if let Some(n) = announced.filter(|n| *n > limit) {
        return Err(too_large(Some(n)));
    }
    let mut out = Vec::with_capacity(announced.unwrap_or(0).min(limit) as usize);
    let mut body = std::pin::pin!(body);
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| SourceError::Download {
            origin: origin.to_string(),
            message: format!("the download broke off: {e}"),
        })?;
        if (out.len() + chunk.len()) as u64 > limit {
            return Err(too_large(None));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// An error with its causes (`reqwest` and `oci-client` errors keep the
/// useful part, "connection refused", in their sources).
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
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
