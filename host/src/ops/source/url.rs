//! A component at a URL, pinned by its SHA-256: downloaded once, verified,
//! cached by digest; it never changes, so it is never fetched again while
//! the cached copy is intact.

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;

use super::Reach;
use super::http::{self, PlainHttp, Rule, described, read_bounded, refused_by_rule};
use super::{Artifact, DiskCache, PluginSource, SourceError};
use crate::config::UrlSourceSpec;
use crate::sandbox::digest;

/// A component at `https://…` whose digest is known in advance.
pub struct UrlSource {
    spec: UrlSourceSpec,
    cache: DiskCache,
    reach: Reach,
}

impl UrlSource {
    pub fn new(spec: UrlSourceSpec, cache: DiskCache) -> Self {
        Self {
            spec,
            cache,
            reach: Reach::Anywhere,
        }
    }

    /// The source, connecting only where `reach` allows (a WasmReconciler
    /// object's source: [`Reach::public`]).
    pub fn reaching(mut self, reach: Reach) -> Self {
        self.reach = reach;
        self
    }

    /// What every URL this source connects to must meet: https (or plain
    /// http to loopback, when the source's own URL is one, which the config
    /// allows only with `insecure`), and the source's reach.
    fn rule(&self) -> Rule {
        let http = if self.spec.url.starts_with("http://") {
            PlainHttp::Loopback
        } else {
            PlainHttp::Never
        };
        Rule {
            http,
            reach: self.reach.clone(),
        }
    }

    /// Downloads the component, without the cache, and verifies it.
    pub async fn download(&self) -> Result<Artifact, SourceError> {
        let timeout = self.spec.limits.timeout;
        let bytes = super::within(&self.origin(), timeout, self.get()).await??;
        let got = digest(&bytes);
        if got != self.spec.digest {
            return Err(SourceError::DigestMismatch {
                origin: self.origin(),
                expected: self.spec.digest.clone(),
                got,
            });
        }
        Ok(Artifact { bytes, digest: got })
    }

    async fn get(&self) -> Result<Vec<u8>, SourceError> {
        let origin = self.origin();
        let failed = |message: String| SourceError::Download {
            origin: origin.clone(),
            message,
        };
        let not_allowed = |message: String| SourceError::NotAllowed {
            origin: origin.clone(),
            message,
        };
        let rule = self.rule();
        let url =
            ::url::Url::parse(&self.spec.url).map_err(|e| failed(format!("not a URL: {e}")))?;
        rule.check(&url).map_err(not_allowed)?;
        let client = http::client(self.spec.limits.timeout, rule).map_err(&failed)?;
        let response = client.get(url).send().await.map_err(|e| {
            let refused = refused_by_rule(&e);
            let message = format!("cannot download: {}", described(e));
            if refused {
                not_allowed(message)
            } else {
                failed(message)
            }
        })?;
        let status = response.status();
        if !status.is_success() {
            return Err(failed(format!(
                "cannot download: the server answered {status}"
            )));
        }
        let announced = response.content_length();
        read_bounded(
            &origin,
            announced,
            self.spec.limits.max_size,
            response.bytes_stream().boxed(),
        )
        .await
    }
}

impl PluginSource for UrlSource {
    /// The URL without its query, which may carry a signature or token.
    fn origin(&self) -> String {
        match ::url::Url::parse(&self.spec.url) {
            Ok(mut u) if u.query().is_some() => {
                u.set_query(None);
                format!("{u}?…")
            }
            Ok(u) => u.to_string(),
            Err(_) => self.spec.url.clone(),
        }
    }

    fn fetch(&self) -> BoxFuture<'_, Result<Artifact, SourceError>> {
        Box::pin(async move {
            let expected = &self.spec.digest;
            if let Some(bytes) = self.cache.read(expected, self.spec.limits.max_size).await {
                return Ok(Artifact {
                    bytes,
                    digest: expected.clone(),
                });
            }
            let artifact = self.download().await?;
            if let Err(e) = self.cache.write(&artifact.bytes).await {
                tracing::warn!(origin = %self.origin(), cache = %self.cache.dir().display(), "cannot cache the component: {e}");
            }
            Ok(artifact)
        })
    }

    /// Pinned by digest: the component never changes.
    fn changes(&self) -> BoxStream<'static, ()> {
        futures::stream::empty().boxed()
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::Router;
    use axum::http::{StatusCode, header};
    use axum::routing::get;

    use super::*;
    use crate::config::FetchLimits;
    use crate::ops::source::held;

    const COMPONENT: &[u8] = b"\0asm not really";

    /// Serves the component at `/c`, a redirect to `to` at `/r`, and counts
    /// the requests.
    async fn serve(to: Option<String>) -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        let to = to.unwrap_or_default();
        let router = Router::new()
            .route("/c", get(|| async { COMPONENT }))
            .route(
                "/r",
                get(move || async move { (StatusCode::FOUND, [(header::LOCATION, to)]) }),
            )
            .layer(axum::middleware::from_fn(
                move |req: axum::extract::Request, next: axum::middleware::Next| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    next.run(req)
                },
            ));
        tokio::spawn(async move { axum::serve(listener, router).await });
        (addr, hits)
    }

    fn source(url: String, reach: Reach) -> (UrlSource, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let spec = UrlSourceSpec {
            url,
            digest: digest(COMPONENT),
            limits: FetchLimits::default(),
        };
        let source = UrlSource::new(spec, DiskCache::new(dir.path().to_path_buf())).reaching(reach);
        (source, dir)
    }

    /// `wasmctrl_source_refusals_total{reason}` as a fresh registry shows
    /// it (the counters are process-wide).
    fn refusals(reason: &str) -> u64 {
        let text = crate::control::metrics::Metrics::new().encode();
        let series = format!("wasmctrl_source_refusals_total{{reason=\"{reason}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .unwrap_or_else(|| panic!("no {series}in {text}"))
            .parse()
            .unwrap()
    }

    #[tokio::test]
    async fn an_objects_url_on_loopback_is_refused_before_connecting() {
        let (addr, hits) = serve(None).await;
        let before = refusals("internalAddress");
        for url in [
            format!("http://{addr}/c"),
            format!("http://localhost:{}/c", addr.port()),
        ] {
            let (s, _dir) = source(url.clone(), Reach::public([]));
            let e = s.fetch().await.unwrap_err();
            assert!(matches!(e, SourceError::NotAllowed { .. }), "{url}: {e}");
            let e = e.to_string();
            assert!(e.contains("refusing to connect to"), "{url}: {e}");
        }
        assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing reached the server");
        assert!(refusals("internalAddress") >= before + 2);
        for reason in ["redirect", "tokenAnswer", "manifest", "component"] {
            refusals(reason);
        }
        let (s, _dir) = source(
            format!("http://{addr}/c"),
            Reach::public([addr.to_string()]),
        );
        assert_eq!(s.fetch().await.unwrap().bytes, COMPONENT);
        let (s, _dir) = source(format!("http://{addr}/c"), Reach::Anywhere);
        assert_eq!(s.fetch().await.unwrap().bytes, COMPONENT);
    }

    #[tokio::test]
    async fn a_signature_in_the_query_never_reaches_an_error() {
        // A port nothing listens on: the connection is refused.
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = closed.local_addr().unwrap();
        drop(closed);
        let (s, _dir) = source(format!("http://{addr}/c?sig=s3cr3t"), Reach::Anywhere);
        let e = s.fetch().await.unwrap_err().to_string();
        assert!(e.contains("cannot download"), "{e}");
        assert!(!e.contains("s3cr3t"), "the query reached the error: {e}");
        // Past the redirects allowed, reqwest names the URL it stopped at:
        // one the server chose, with a signature of its own.
        let (addr, _) = serve(Some("/r?sig=s3cr3t".into())).await;
        let (s, _dir) = source(format!("http://{addr}/r"), Reach::Anywhere);
        let e = s.fetch().await.unwrap_err().to_string();
        assert!(e.contains("more than 5 redirects"), "{e}");
        assert!(!e.contains("s3cr3t"), "the query reached the error: {e}");
    }

    /// A download and a cached copy are charged to the load they are for,
    /// and a load past its budget is refused as a download that failed
    /// (an object's load is tried again later).
    #[tokio::test]
    async fn what_a_fetch_holds_is_charged_to_its_loads_budget() {
        use prometheus_client::metrics::gauge::Gauge;
        let (addr, _) = serve(None).await;
        let (s, _dir) = source(format!("http://{addr}/c"), Reach::Anywhere);
        let small = held::Budget::new(4, Gauge::default());
        let e = held::holding(small.clone(), s.fetch()).await.unwrap_err();
        assert!(
            matches!(e, SourceError::Busy { .. }) && e.to_string().contains("maxLoadingBytes"),
            "{e}"
        );
        assert_eq!(small.used(), 0, "a refused load holds nothing");
        let gauge = Gauge::default();
        let enough = held::Budget::new(1 << 20, gauge.clone());
        let fetched = held::holding(enough.clone(), async {
            let a = s.fetch().await.unwrap();
            assert_eq!(gauge.get(), COMPONENT.len() as i64, "held while loading");
            a
        })
        .await;
        assert_eq!(fetched.bytes, COMPONENT);
        assert_eq!((enough.used(), gauge.get()), (0, 0), "given back");
        // Now cached: its copy is charged before it is read.
        let e = held::holding(small, s.fetch()).await.unwrap_err();
        assert!(e.to_string().contains("maxLoadingBytes"), "{e}");
        // Outside a load (a config plugin's), nothing is charged.
        assert_eq!(s.fetch().await.unwrap().bytes, COMPONENT);
    }

    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused() {
        use reqwest::dns::Resolve;
        let resolver = http::CheckedResolver {
            reach: Reach::public([]),
        };
        let e = match resolver.resolve("localhost".parse().unwrap()).await {
            Ok(addrs) => panic!("resolved to {:?}", addrs.collect::<Vec<_>>()),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("refusing to connect to localhost"), "{e}");
        let allowed = http::CheckedResolver {
            reach: Reach::public(["localhost:5000".to_string()]),
        };
        assert!(allowed.resolve("localhost".parse().unwrap()).await.is_ok());
    }

    #[tokio::test]
    async fn a_redirect_meets_the_rule_of_the_first_url() {
        // Plain http is allowed to loopback only, redirects included.
        let (addr, _) = serve(Some("http://192.0.2.1/c".into())).await;
        let (s, _dir) = source(format!("http://{addr}/r"), Reach::Anywhere);
        let e = s.fetch().await.unwrap_err().to_string();
        assert!(
            e.contains("a redirect: refusing http://192.0.2.1/c")
                && e.contains("only to a loopback address"),
            "{e}"
        );
        // An object's source allowed to one host is not redirected to
        // another internal one.
        let (target, target_hits) = serve(None).await;
        let (addr, _) = serve(Some(format!("http://{target}/c"))).await;
        let (s, _dir) = source(
            format!("http://{addr}/r"),
            Reach::public([addr.to_string()]),
        );
        let e = s.fetch().await.unwrap_err();
        assert!(matches!(e, SourceError::NotAllowed { .. }), "{e}");
        let e = e.to_string();
        assert!(
            e.contains("a redirect: refusing to connect to 127.0.0.1"),
            "{e}"
        );
        assert_eq!(target_hits.load(Ordering::SeqCst), 0);
        // Within the rule, a redirect is followed.
        let (addr, _) = serve(Some(format!("http://{target}/c"))).await;
        let (s, _dir) = source(format!("http://{addr}/r"), Reach::Anywhere);
        assert_eq!(s.fetch().await.unwrap().bytes, COMPONENT);
    }
}
