//! The fixture of the cluster suite: a [`Cluster`] (the embedded API server
//! with its fault switches and write audit, a kubeconfig, kubectl and a
//! kube-rs client) that starts hosts in-process, and what the suite knows
//! of its test plugins' effects. What every suite shares (bounded polling,
//! the admin client, the in-process host) is `wasmctrl_testkit`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use tempfile::TempDir;
use wasmctrl::config::HostConfig;
use wasmctrl_apiserver::{ApiServer, Config};
use wasmctrl_testkit::client::client_for;
use wasmctrl_testkit::eventually;
use wasmctrl_testkit::host::{RunningHost, host_config};
use wasmctrl_testkit::kubectl;

/// A cluster for one test: the embedded API server on an ephemeral port, a
/// kubeconfig for kubectl, and a kube-rs client.
pub struct Cluster {
    /// None only while restarting.
    server: Option<ApiServer>,
    pub client: kube::Client,
    pub kubeconfig: PathBuf,
    /// The test's directory: the kubeconfig, configs, components.
    pub dir: TempDir,
}

impl Cluster {
    /// A fresh in-memory API server.
    pub async fn start() -> Self {
        Self::start_with(Config::default()).await
    }

    /// An API server with `config` (a data dir, a fixed address, …).
    pub async fn start_with(config: Config) -> Self {
        // `RUST_LOG=wasmctrl=debug cargo test -p wasmctrl-cluster-tests`
        // shows the host's logs.
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
    pub async fn host(&self, text: &str) -> RunningHost {
        RunningHost::start(
            host_config(text, self.dir.path()),
            self.client.clone(),
            None,
        )
        .await
    }

    /// Why a host with the config `text` refuses its first plugin that
    /// does not load (the load's error, as `/plugins` shows it); panics
    /// with `why` if every plugin loads.
    pub async fn refused_plugin(&self, text: &str, why: &str) -> String {
        let manager = wasmctrl::ops::manager::Manager::start(
            wasmctrl_testkit::host::with_kept_compiled_cache(host_config(text, self.dir.path())),
            self.client.clone(),
            wasmctrl::ops::manager::ManagerOptions {
                admin_bind: Some("127.0.0.1:0".parse().unwrap()),
                watch_sources: false,
                ..wasmctrl::ops::manager::ManagerOptions::default()
            },
        )
        .await
        .expect("the host itself starts");
        let failures = manager.loaded().await;
        failures.first().expect(why).error.clone()
    }

    /// Like [`Cluster::host`], with the config written to `wasmctrl.yaml` in
    /// the test's directory and watched (edits reload it).
    pub async fn host_watching_config(&self, text: &str) -> RunningHost {
        let path = self.file("wasmctrl.yaml", text);
        let config = HostConfig::load(&path).expect("valid config");
        RunningHost::start(config, self.client.clone(), Some(path)).await
    }

    /// Runs kubectl against this cluster and returns its stdout; panics
    /// with its output on failure.
    pub fn kubectl(&self, args: &[&str]) -> String {
        kubectl::run(&self.kubeconfig, args)
    }

    /// Runs kubectl against this cluster; its output, whatever its status.
    pub fn kubectl_raw(&self, args: &[&str]) -> std::process::Output {
        kubectl::output(&self.kubeconfig, args)
    }

    /// Applies the quick start's WebApp CRD and waits until it is
    /// established.
    pub fn apply_webapp_crd(&self) {
        self.kubectl(&["apply", "-f", &format!("{QUICKSTART}/crd.yaml")]);
        self.kubectl(&[
            "wait",
            "--for",
            "condition=established",
            "--timeout=30s",
            "crd/webapps.demo.wasmctrl.dev",
        ]);
    }

    /// Writes `text` to a file in the test's directory and returns its path.
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

/// The quick start (`examples/quickstart`): the webapp operator's CRD and
/// host config.
pub const QUICKSTART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/quickstart");

/// The quick start's host config, its plugin path pointing at `component`
/// (one of the webapp operator's builds).
pub fn quickstart_config(component: &str) -> HostConfig {
    let text = std::fs::read_to_string(format!("{QUICKSTART}/wasmctrl.yaml")).unwrap();
    let mut config = host_config(&text, Path::new(QUICKSTART));
    config.plugins[0].path = Some(component.into());
    // Tests run side by side: each webhook server on a port of its own.
    if let Some(webhook) = config.webhook.as_mut() {
        webhook.bind = "127.0.0.1:0".parse().unwrap();
    }
    config
}

/// A ConfigMap named `name` with nothing else set.
pub fn configmap(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

/// The label the `mirror` test plugin copies each ConfigMap's `data.value`
/// into.
pub const MIRROR_LABEL: &str = "wasmctrl.dev/mirror";

/// A ConfigMap's `data.value` and its mirror label, as the `mirror` plugin
/// last wrote it.
pub fn value_and_mirror(cm: &ConfigMap) -> (Option<&String>, Option<&String>) {
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
    host: &RunningHost,
    api: &kube::Api<ConfigMap>,
    what: &str,
    limit: Duration,
    done: impl Fn(&[ConfigMap]) -> bool,
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
pub async fn mirror_idle(host: &RunningHost, limit: Duration) {
    let queue = host.queue("mirror");
    eventually("no key left in processing", limit, || async {
        (queue.processing_len() == 0).then_some(())
    })
    .await;
}
