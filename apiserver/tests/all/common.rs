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
        client_for(&self.server.kubeconfig()).await
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
        raw(
            &self.client().await,
            method,
            path,
            content_type,
            body.as_bytes(),
        )
        .await
    }
}

/// A kube client for a kubeconfig.
pub async fn client_for(kubeconfig: &str) -> kube::Client {
    let kc = Kubeconfig::from_yaml(kubeconfig).expect("kubeconfig parses");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kube config");
    kube::Client::try_from(cfg).expect("client")
}

/// A raw request through a kube client returning status code and parsed
/// JSON body (Null if it is not JSON).
pub async fn raw(
    client: &kube::Client,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> (u16, serde_json::Value) {
    let mut b = http::Request::builder().method(method).uri(path);
    if let Some(ct) = content_type {
        b = b.header("content-type", ct);
    }
    let req = b.body(body.to_vec()).expect("request");
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

/// The server's `GET /metrics` as `client` reads it (panics unless 200).
pub async fn metrics_text(client: &kube::Client) -> String {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    client.request_text(req).await.expect("GET /metrics")
}

/// The value of `wasmctrl_apiserver_limit_exceeded_total{limit="LIMIT"}` in
/// a metrics text (panics if the series is missing).
pub fn limit_count(metrics: &str, limit: &str) -> u64 {
    let series = format!("wasmctrl_apiserver_limit_exceeded_total{{limit=\"{limit}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no series for {limit} in {metrics}"))
}

/// The `wasmctrl-apiserver` binary running as a child process (killed when
/// dropped), for what must be measured apart from the test: its memory.
pub struct Spawned {
    pub child: std::process::Child,
    pub kubeconfig: String,
    /// Holds the kubeconfig; removed on drop.
    _dir: tempfile::TempDir,
}

impl Spawned {
    /// Starts the binary and waits (bounded) for its kubeconfig.
    pub async fn start(extra_args: &[&str]) -> Spawned {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kubeconfig");
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_wasmctrl-apiserver"))
            .arg("--kubeconfig-out")
            .arg(&path)
            .args(extra_args)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("wasmctrl-apiserver starts");
        let mut spawned = Spawned {
            child,
            kubeconfig: String::new(),
            _dir: dir,
        };
        eventually(30, "the kubeconfig is written", || {
            let ready = path.exists();
            async move { ready }
        })
        .await;
        // Written atomically, so it is complete once it exists.
        spawned.kubeconfig = std::fs::read_to_string(&path).expect("kubeconfig");
        spawned
    }

    pub async fn client(&self) -> kube::Client {
        client_for(&self.kubeconfig).await
    }

    /// Peak resident memory of the process so far (`VmHWM`), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("/proc status");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM");
        kib * 1024
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
