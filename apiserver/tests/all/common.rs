//! Shared helpers: a server per test, clients for it, bounded polling.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use wasmctrl_apiserver::{ApiServer, Config};

/// A running server with its kubeconfig written to a temporary directory.
pub struct Harness {
    pub server: ApiServer,
    pub dir: tempfile::TempDir,
}

impl Harness {
    pub async fn start() -> Harness {
        Self::start_with(Config::default()).await
    }

    pub async fn start_with(config: Config) -> Harness {
        let server = ApiServer::start(config).await.expect("server starts");
        let dir = tempfile::tempdir().expect("tempdir");
        server
            .write_kubeconfig(&dir.path().join("kubeconfig"))
            .expect("kubeconfig");
        Harness { server, dir }
    }

    pub fn kubeconfig_path(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    pub async fn client(&self) -> kube::Client {
        let kc = Kubeconfig::from_yaml(&self.server.kubeconfig()).expect("kubeconfig parses");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("kube config");
        kube::Client::try_from(cfg).expect("client")
    }

    /// A raw request through kube's client (TLS + token) returning status
    /// code and parsed JSON body.
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &str,
    ) -> (u16, serde_json::Value) {
        let client = self.client().await;
        let mut b = http::Request::builder().method(method).uri(path);
        if let Some(ct) = content_type {
            b = b.header("content-type", ct);
        }
        let req = b.body(body.as_bytes().to_vec()).expect("request");
        let resp = client
            .send(req.map(kube::client::Body::from))
            .await
            .expect("response");
        let status = resp.status().as_u16();
        let bytes = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .expect("body")
            .to_bytes();
        let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
        (status, json)
    }
}

/// Polls `f` until it returns true, for at most `secs` seconds.
pub async fn eventually<F, Fut>(secs: u64, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if f().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
