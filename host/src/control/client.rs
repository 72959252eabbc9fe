//! Kubernetes clients for the host.

use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::control::leader::Fence;

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read kubeconfig {path}: {source}")]
    Read {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error("invalid kubeconfig {path}: {source}")]
    Invalid {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error(transparent)]
    Client(#[from] kube::Error),
}

/// The client config of the kubeconfig at `path` (its current context).
pub async fn config_for(path: &Path) -> Result<kube::Config, ClientError> {
    let shown = path.display().to_string();
    let kubeconfig =
        kube::config::Kubeconfig::read_from(path).map_err(|source| ClientError::Read {
            path: shown.clone(),
            source,
        })?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|source| ClientError::Invalid {
            path: shown,
            source,
        })
}

/// A client whose every byte written to the API server first checks
/// `fence`: once the fence closes (this host's lease was not renewed in
/// time), writes fail at the socket. The check sits in the TCP stream's
/// `poll_write`, under TLS and hyper's connection task, so a host paused
/// (SIGSTOP) after building a request but before sending it cannot send it
/// when it resumes after losing the lease. What remains is the instant
/// between that check and the `write` syscall.
pub fn fenced_client(config: kube::Config, fence: Fence) -> Result<kube::Client, ClientError> {
    use kube::client::ConfigExt;
    let default_ns = config.default_namespace.clone();
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    let fenced = FencedConnector { inner: http, fence };
    let https = config.rustls_https_connector_with_connector(fenced)?;
    let client: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new()).build(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(client);
    Ok(kube::client::ClientBuilder::new(service, default_ns).build())
}

/// Makes TCP connections whose writes check a [`Fence`].
#[derive(Clone)]
struct FencedConnector {
    inner: hyper_util::client::legacy::connect::HttpConnector,
    fence: Fence,
}

impl tower::Service<http::Uri> for FencedConnector {
    type Response = FencedStream;
    type Error =
        <hyper_util::client::legacy::connect::HttpConnector as tower::Service<http::Uri>>::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<FencedStream, Self::Error>> + Send>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let fence = self.fence.clone();
        Box::pin(async move {
            Ok(FencedStream {
                inner: connecting.await?,
                fence,
            })
        })
    }
}

/// A TCP stream that refuses to write once its fence is closed.
struct FencedStream {
    inner: hyper_util::rt::TokioIo<tokio::net::TcpStream>,
    fence: Fence,
}

impl FencedStream {
    fn closed() -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "this host is not the leader (its lease was not renewed in time): nothing is sent",
        )
    }
}

impl hyper::rt::Read for FencedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for FencedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if !self.fence.is_open() {
            return Poll::Ready(Err(Self::closed()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if !self.fence.is_open() {
            return Poll::Ready(Err(Self::closed()));
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl hyper_util::client::legacy::connect::Connection for FencedStream {
    fn connected(&self) -> hyper_util::client::legacy::connect::Connected {
        self.inner.connected()
    }
}
