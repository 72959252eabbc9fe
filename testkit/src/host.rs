//! Helpers built on the wasmctrl library (feature `host`): a manager
//! started in-process, a host config from YAML, and the registry options
//! and push of the test registry. For the integration suites only: the
//! host's unit tests see their own build of these types (crate doc).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use wasmctrl::ObjectKey;
use wasmctrl::config::{FetchLimits, HostConfig};
use wasmctrl::control::metrics::Metrics;
use wasmctrl::control::workqueue::WorkQueue;
use wasmctrl::ops::manager::{Manager, ManagerError, ManagerOptions};
use wasmctrl::ops::source::oci::{self, RegistryOptions};

use crate::admin::http_get;
use crate::eventually;
use crate::registry::empty_docker_config;

/// How long a manager may take to become ready.
const READY_LIMIT: Duration = Duration::from_secs(60);

/// A host config from YAML text, with plugin paths relative to `base`;
/// panics if it is invalid.
pub fn host_config(text: &str, base: &Path) -> HostConfig {
    HostConfig::parse(Path::new("test.yaml"), text, base.to_path_buf()).expect("valid config")
}

/// `config`, with `runtime.cacheDir` the suites' kept compiled-component
/// cache ([`crate::kept::compiled_components_dir`]) where it sets none:
/// compiling the guests was most of a cluster test's CPU, and with the
/// cache each build of a component is compiled once, not once per host.
/// Artifacts are keyed by the component's digest and the engine's
/// settings, so a host gets exactly the code it would have compiled; the
/// tests of the cache itself give their hosts a directory of their own.
pub fn with_kept_compiled_cache(mut config: HostConfig) -> HostConfig {
    if config.runtime.cache_dir.is_none() {
        config.runtime.cache_dir = Some(crate::kept::compiled_components_dir());
    }
    config
}

/// The digest wasmctrl gives the component file at `path`
/// (`sha256:<hex>`).
pub fn file_digest(path: &str) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    wasmctrl::sandbox::digest(&bytes)
}

/// A manager running in this process, its admin server on an ephemeral
/// port; shut down when dropped.
pub struct RunningHost {
    /// Its admin server.
    pub admin: SocketAddr,
    /// Its metrics, as the admin server serves them.
    pub metrics: Arc<Metrics>,
    /// Its admission webhook server, with the config's `webhook`.
    pub webhook: Option<SocketAddr>,
    /// The PEM its webhook server's certificate verifies against.
    pub webhook_ca: Option<String>,
    manager_queues: Vec<(String, WorkQueue<ObjectKey>)>,
    stop: Option<oneshot::Sender<()>>,
    done: Option<JoinHandle<Result<(), ManagerError>>>,
}

impl RunningHost {
    /// Starts a manager with `config` against `client` and waits (bounded)
    /// until `/readyz` answers 200. `config_path`, when set, is watched and
    /// reloaded like `wasmctrl run --config` does. An unwatched config
    /// without `runtime.cacheDir` gets the kept one
    /// ([`with_kept_compiled_cache`]); a watched one is left as its file
    /// says, since a reload reads the file again.
    pub async fn start(
        config: HostConfig,
        client: kube::Client,
        config_path: Option<PathBuf>,
    ) -> Self {
        let config = match config_path {
            None => with_kept_compiled_cache(config),
            Some(_) => config,
        };
        let names: Vec<String> = config.plugins.iter().map(|p| p.name.clone()).collect();
        let manager = Manager::start(
            config,
            client,
            ManagerOptions {
                admin_bind: Some("127.0.0.1:0".parse().unwrap()),
                config_path,
                ..ManagerOptions::default()
            },
        )
        .await
        .expect("manager starts");
        let failures = manager.loaded().await;
        assert!(failures.is_empty(), "plugins did not load: {failures:?}");
        let admin = manager.admin_addr();
        let metrics = manager.metrics().clone();
        let webhook = manager.webhook_addr();
        let webhook_ca = manager.webhook_ca_bundle();
        let manager_queues = names
            .into_iter()
            .filter_map(|n| manager.queue(&n).map(|q| (n, q)))
            .collect();
        let (stop, rx) = oneshot::channel();
        let done = tokio::spawn(manager.run(async move {
            let _ = rx.await;
        }));
        eventually("readiness", READY_LIMIT, || async {
            (http_get(admin, "/readyz").await.0 == 200).then_some(())
        })
        .await;
        Self {
            admin,
            metrics,
            webhook,
            webhook_ca,
            manager_queues,
            stop: Some(stop),
            done: Some(done),
        }
    }

    /// The queue of plugin `name` as it was at start; panics if there was
    /// no such plugin.
    pub fn queue(&self, name: &str) -> WorkQueue<ObjectKey> {
        self.manager_queues
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, q)| q.clone())
            .unwrap_or_else(|| panic!("no plugin {name:?} at start"))
    }

    /// `/plugins` as JSON (Null if it is not JSON).
    pub async fn plugins(&self) -> serde_json::Value {
        let (_, body) = http_get(self.admin, "/plugins").await;
        serde_json::from_str(&body).unwrap_or(serde_json::Value::Null)
    }

    /// The `/plugins` entry of `name`.
    pub async fn plugin(&self, name: &str) -> Option<serde_json::Value> {
        self.plugins()
            .await
            .as_array()?
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
    }

    /// Shuts the manager down (as on SIGTERM) and returns how `run` ended.
    pub async fn stop(mut self) -> Result<(), ManagerError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.done
            .take()
            .expect("stopped once")
            .await
            .expect("the manager task does not panic")
    }
}

impl RunningHost {
    /// Waits for the manager to end on its own (leadership lost, a fatal
    /// error) without asking it to stop, and returns how `run` ended.
    pub async fn ended(mut self) -> Result<(), ManagerError> {
        self.done
            .take()
            .expect("awaited once")
            .await
            .expect("the manager task does not panic")
    }
}

impl Drop for RunningHost {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Options for the test registry: plain HTTP, no credentials, a 30 s
/// timeout.
pub fn insecure_registry() -> RegistryOptions {
    RegistryOptions {
        insecure: true,
        docker_config: Some(empty_docker_config()),
        credentials: None,
        limits: FetchLimits {
            timeout: Duration::from_secs(30),
            ..FetchLimits::default()
        },
    }
}

/// Pushes the component file `component` to `reference` with `options`;
/// returns the manifest digest. Panics if the push fails.
pub async fn push_component(reference: &str, component: &str, options: &RegistryOptions) -> String {
    let bytes = std::fs::read(component).unwrap_or_else(|e| panic!("{component}: {e}"));
    oci::push(reference, bytes, Default::default(), options)
        .await
        .unwrap_or_else(|e| panic!("push to {reference}: {e}"))
        .manifest_digest
}
