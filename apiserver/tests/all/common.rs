//! Shared helpers of the suite: a server per test, in this process or as
//! the binary, and raw requests to it. What every suite shares (bounded
//! polling, clients, processes, kubectl) is `wasmctrl_testkit`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use wasmctrl_apiserver::{ApiServer, Config};
use wasmctrl_testkit::client::client_for;
use wasmctrl_testkit::eventually;
use wasmctrl_testkit::process::Process;

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

    /// A client that asks once: kube's client retries a 429, 503 or 504,
    /// which a test of those answers must see as they are.
    pub async fn client_without_retries(&self) -> kube::Client {
        let mut config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::from_yaml(&self.server.kubeconfig()).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap();
        config.default_retry = false;
        kube::Client::try_from(config).unwrap()
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

pub use wasmctrl_testkit::client::metrics_text;

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
    pub process: Process,
    /// Where it wrote its kubeconfig.
    pub kubeconfig: PathBuf,
    /// Holds the kubeconfig; removed on drop.
    _dir: tempfile::TempDir,
}

impl Spawned {
    /// Starts the binary and waits (bounded) for its kubeconfig, written
    /// once it serves.
    pub async fn start(extra_args: &[&str]) -> Spawned {
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        let process = Process::spawn(
            Command::new(env!("CARGO_BIN_EXE_wasmctrl-apiserver"))
                .arg("--kubeconfig-out")
                .arg(&kubeconfig)
                .args(extra_args),
        );
        // Written atomically, so it is complete once it exists.
        eventually("the kubeconfig is written", Duration::from_secs(30), || {
            let ready = kubeconfig.exists();
            async move { ready }
        })
        .await;
        Spawned {
            process,
            kubeconfig,
            _dir: dir,
        }
    }

    pub async fn client(&self) -> kube::Client {
        client_for(&self.kubeconfig).await
    }

    /// Peak resident memory of the process so far (`VmHWM`), in bytes.
    pub fn peak_rss(&self) -> u64 {
        self.process.memory("VmHWM")
    }
}
