//! The fixture of the cluster suite (as Spin's `factors-test`):
//! a [`Cluster`] (the embedded API server with its fault switches and write
//! audit, a kubeconfig and kubectl), a [`Host`] (the manager in-process), and
//! the host's helpers: one `eventually`, one HTTP client.

use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;
pub use wasmctrl::test_util::{
    RunningHost as Host, eventually, host_config, http, http_get, metric_line, metric_value,
};
use wasmctrl_apiserver::{ApiServer, Config};

/// A cluster for one test: the embedded API server on an ephemeral port, a
/// kubeconfig for kubectl, and a kube-rs client.
pub struct Cluster {
    /// None only while restarting.
    server: Option<ApiServer>,
    pub client: kube::Client,
    pub kubeconfig: PathBuf,
    pub dir: TempDir,
}

impl Cluster {
    /// A fresh in-memory API server.
    pub async fn start() -> Self {
        Self::start_with(Config::default()).await
    }

    /// An API server with `config` (a data dir, a fixed address, …).
    pub async fn start_with(config: Config) -> Self {
        // `RUST_LOG=wasmctrl=debug cargo test -p wasmctrl-cluster-tests` shows the host's logs.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let dir = tempfile::tempdir().unwrap();
        let server = ApiServer::start(config).await.expect("API server starts");
        let kubeconfig = dir.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig).unwrap();
        let client = client_for(&kubeconfig).await;
        Self {
            server: Some(server),
            client,
            kubeconfig,
            dir,
        }
    }

    /// Stops the API server and starts it again on the same address, token
    /// and CA (kubeconfigs stay valid): with a data dir the state is kept,
    /// in memory it is lost.
    pub async fn restart(&mut self) {
        let old = self.server.take().expect("a running server");
        let config = old.config();
        old.shutdown().await;
        self.server = Some(
            ApiServer::start(config)
                .await
                .expect("the API server restarts"),
        );
    }

    /// The API server (its fault switches and audit, with the `testing`
    /// feature).
    pub fn server(&self) -> &ApiServer {
        self.server.as_ref().expect("a running server")
    }

    /// Starts a host with the config `text` (plugin paths relative to the
    /// test's directory) and waits until it is ready.
    pub async fn host(&self, text: &str) -> Host {
        Host::start(
            host_config(text, self.dir.path()),
            self.client.clone(),
            None,
        )
        .await
    }

    /// Like [`Cluster::host`], with the config written to `wasmctrl.yaml` in
    /// the test's directory and watched (edits reload it).
    pub async fn host_watching_config(&self, text: &str) -> Host {
        let path = self.file("wasmctrl.yaml", text);
        let config = wasmctrl::config::HostConfig::load(&path).expect("valid config");
        Host::start(config, self.client.clone(), Some(path)).await
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

/// A kube client for the cluster of the kubeconfig at `path`.
pub async fn client_for(kubeconfig: &Path) -> kube::Client {
    wasmctrl::control::client::client_for(kubeconfig)
        .await
        .expect("a client for the test's kubeconfig")
}

/// The label the `mirror` test plugin copies each ConfigMap's `data.value`
/// into.
pub const MIRROR_LABEL: &str = "wasmctrl.dev/mirror";

/// A ConfigMap's `data.value` and its mirror label, as the `mirror` plugin
/// last wrote it.
pub fn value_and_mirror(
    cm: &k8s_openapi::api::core::v1::ConfigMap,
) -> (Option<&String>, Option<&String>) {
    (
        cm.data.as_ref().and_then(|d| d.get("value")),
        cm.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(MIRROR_LABEL)),
    )
}

/// Waits (bounded by `limit`) until the ConfigMaps of `api` satisfy `done`
/// (`what` names it in the timeout message), then until no key of the
/// `mirror` plugin's queue is left in processing: the end state of every
/// cluster test of the `mirror` plugin.
pub async fn mirror_converged(
    host: &Host,
    api: &kube::Api<k8s_openapi::api::core::v1::ConfigMap>,
    what: &str,
    limit: std::time::Duration,
    done: impl Fn(&[k8s_openapi::api::core::v1::ConfigMap]) -> bool,
) {
    eventually(what, limit, || async {
        let list = api.list(&Default::default()).await.ok()?;
        done(&list.items).then_some(())
    })
    .await;
    mirror_idle(host, limit).await;
}

/// Waits (bounded by `limit`) until no key of the `mirror` plugin's queue
/// is left in processing.
pub async fn mirror_idle(host: &Host, limit: std::time::Duration) {
    let queue = host.queue("mirror");
    eventually("no key left in processing", limit, || async {
        (queue.processing_len() == 0).then_some(())
    })
    .await;
}
