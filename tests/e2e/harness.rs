//! A cluster for one test: the embedded API server on an ephemeral port, a
//! kubeconfig for kubectl, and a kube-rs client.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use wasmctrl::config::HostConfig;
use wasmctrl_apiserver::{ApiServer, Config};

pub struct Cluster {
    pub server: ApiServer,
    pub client: kube::Client,
    pub kubeconfig: PathBuf,
    pub dir: TempDir,
}

impl Cluster {
    pub async fn start() -> Self {
        // `RUST_LOG=wasmctrl=debug cargo test -p wasmctrl-e2e` shows the host's logs.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let dir = tempfile::tempdir().unwrap();
        let server = ApiServer::start(Config::default())
            .await
            .expect("API server starts");
        let kubeconfig = dir.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig).unwrap();
        let client = client_for(&kubeconfig).await;
        Self {
            server,
            client,
            kubeconfig,
            dir,
        }
    }

    /// Runs kubectl against this cluster; panics with its output on failure.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let out = self.kubectl_raw(args);
        assert!(
            out.status.success(),
            "kubectl {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn kubectl_raw(&self, args: &[&str]) -> std::process::Output {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .expect("kubectl runs (install Debian's kubernetes-client)")
    }

    /// Writes `text` to a file in the test's directory and returns its path.
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

pub async fn client_for(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// A host config from YAML text, with plugin paths relative to `base`.
pub fn host_config(text: &str, base: &Path) -> HostConfig {
    HostConfig::parse(Path::new("test.yaml"), text, base.to_path_buf()).expect("valid config")
}

/// Polls `check` every 50 ms until it returns Some, for at most `limit`.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// GET `path` from the admin server at `addr`: (status, body).
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    http(addr, "GET", path).await
}

pub async fn http(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    let body = if text
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(&body)
    } else {
        body
    };
    (status, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}
