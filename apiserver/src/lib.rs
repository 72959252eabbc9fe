//! Embedded Kubernetes-compatible API server.
//!
//! An in-memory API server over real HTTP on loopback that kubectl, kube-rs
//! and the official Python client use unmodified: discovery (legacy and
//! aggregated), a minimal OpenAPI v3, built-in kinds stored schemaless, CRDs,
//! resourceVersion/generation/status semantics, merge/JSON/strategic/apply
//! patches, finalizers and garbage collection, label/field selectors,
//! pagination and resumable watches. Every request needs the bearer token
//! from the generated kubeconfig.
//!
//! ```no_run
//! # async fn demo() -> Result<(), wasmctrl_apiserver::Error> {
//! let server = wasmctrl_apiserver::ApiServer::start(Default::default()).await?;
//! server.write_kubeconfig(std::path::Path::new("/tmp/kubeconfig"))?;
//! println!("serving at {}", server.url());
//! server.shutdown().await;
//! # Ok(()) }
//! ```

pub mod crd;
pub mod delete;
pub mod discovery;
pub mod error;
pub mod events;
pub mod gc;
pub mod kubeconfig;
pub mod ops;
pub mod patch;
pub mod persist;
pub mod protobuf;
pub mod resources;
pub mod routes;
pub mod scale;
pub mod schema;
pub mod selectors;
pub mod server;
pub mod storage;
pub mod table;
pub mod tls;
pub mod util;
pub mod validation;
pub mod watch;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::ops::WriteCtx;
use crate::server::Shared;

/// Namespaces every cluster starts with.
pub const DEFAULT_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// How the server starts.
#[derive(Clone)]
pub struct Config {
    /// Listen address; loopback with an ephemeral port by default.
    pub addr: SocketAddr,
    /// Persist state here (a redb database) and reload it on start.
    pub data_dir: Option<PathBuf>,
    /// Bearer token clients must present; `None` generates a random one.
    pub token: Option<String>,
}

impl std::fmt::Debug for Config {
    // The token is a credential: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("addr", &self.addr)
            .field("data_dir", &self.data_dir)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir: None,
            token: None,
        }
    }
}

/// Why the server could not start or write its kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Persist(#[from] persist::PersistError),
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::KubeconfigError),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error("creating namespace {name}: {source}")]
    Seed {
        name: String,
        #[source]
        source: Box<error::ApiError>,
    },
}

/// A running API server. Dropping it stops serving; [`ApiServer::shutdown`]
/// also waits for persistence to be flushed.
pub struct ApiServer {
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    gc: Option<JoinHandle<()>>,
    persister: Option<persist::Persister>,
    ca_pem: String,
}

impl ApiServer {
    /// Binds `config.addr`, restores `config.data_dir` if set, creates the
    /// default namespaces and starts serving in a background task.
    pub async fn start(config: Config) -> Result<ApiServer, Error> {
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .map_err(|source| Error::Bind {
                addr: config.addr,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: config.addr,
            source,
        })?;
        // With a data directory the CA and token survive restarts, so
        // kubeconfigs written earlier stay valid.
        let creds = match &config.data_dir {
            Some(dir) => Some(persist::credentials(dir)?),
            None => None,
        };
        let ca = match &creds {
            Some(c) => tls::Ca::from_pem(&c.ca_cert, &c.ca_key)?,
            None => tls::Ca::generate()?,
        };
        let tls = ca.server(addr.ip())?;
        let token = config
            .token
            .or_else(|| creds.map(|c| c.token))
            .unwrap_or_else(util::random_token);
        let shared = Arc::new(Shared::new(token, addr));

        let mut persister = None;
        if let Some(dir) = &config.data_dir {
            let (db, loaded) = persist::open(dir)?;
            let crds: Vec<serde_json::Value> = loaded
                .objects
                .iter()
                .filter(|(gr, ..)| {
                    gr.group == "apiextensions.k8s.io" && gr.resource == "customresourcedefinitions"
                })
                .map(|(.., obj)| obj.clone())
                .collect();
            shared.store.load(loaded.rv, loaded.objects);
            for crd in crds {
                let (storage, infos) = crd::infos_for(&crd);
                shared.registry_mut().set_custom(&storage, infos);
            }
            let (tx, rx) = mpsc::unbounded_channel();
            shared.store.set_persist(tx);
            persister = Some(persist::Persister::start(db, rx));
        }

        let (gc_tx, gc_rx) = mpsc::unbounded_channel();
        for ev in shared.store.deleting_events() {
            let _ = gc_tx.send(ev);
        }
        shared.store.set_gc(gc_tx);
        let gc = tokio::spawn(gc::run(shared.clone(), gc_rx));

        let ns_info = shared
            .registry()
            .find("", "v1", "namespaces")
            .expect("namespaces are built in");
        for name in DEFAULT_NAMESPACES {
            if shared.store.get(&ns_info.storage, "", name).is_some() {
                continue;
            }
            let body = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            shared
                .create_object(&ns_info, "", body, &WriteCtx::system("wasmctrl-apiserver"))
                .map_err(|source| Error::Seed {
                    name: name.to_string(),
                    source: Box::new(source),
                })?;
        }

        let (stop, stopped) = oneshot::channel::<()>();
        let app = routes::router(shared.clone());
        let task = tokio::spawn(serve_tls(listener, tls.server_config.clone(), app, stopped));
        tracing::info!(%addr, "embedded API server listening");
        Ok(ApiServer {
            shared,
            stop: Some(stop),
            task: Some(task),
            gc: Some(gc),
            persister,
            ca_pem: tls.ca_pem,
        })
    }

    /// The bound address (with the real port when started on port 0).
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://{}", self.shared.addr)
    }

    /// PEM of the CA that signed the server certificate (also embedded in
    /// the kubeconfig).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The bearer token every request must carry.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// Kubeconfig YAML (cluster, user and context named `wasmctrl`).
    pub fn kubeconfig(&self) -> String {
        kubeconfig::render(&self.url(), self.token(), &self.ca_pem)
    }

    /// Writes [`ApiServer::kubeconfig`] to `path` with mode 0600, creating
    /// parent directories.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), Error> {
        Ok(kubeconfig::write(path, &self.kubeconfig())?)
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.store.current_rv()
    }

    /// Makes every resourceVersion clients hold too old to watch from and
    /// closes open watches: the next watch gets 410 Expired and clients
    /// relist, as after an etcd compaction. For testing client recovery.
    pub fn expire_watches(&self) {
        self.shared.expire_watches();
    }

    /// Stops accepting requests, closes watches, waits for in-flight requests
    /// (bounded) and flushes persistence.
    pub async fn shutdown(mut self) {
        self.stop_serving();
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        self.shared.store.detach();
        if let Some(gc) = self.gc.take() {
            let _ = gc.await;
        }
        if let Some(p) = self.persister.take() {
            let _ = tokio::task::spawn_blocking(move || p.join()).await;
        }
    }

    fn stop_serving(&mut self) {
        self.shared.close_watches();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Accepts TLS connections and serves each with hyper until `stopped`, then
/// lets open requests finish (watches are closed by the caller).
async fn serve_tls(
    listener: tokio::net::TcpListener,
    config: Arc<rustls::ServerConfig>,
    app: axum::Router,
    mut stopped: oneshot::Receiver<()>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Transient (e.g. out of file descriptors): keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stopped => break,
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let stream = match acceptor.accept(tcp).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(Duration::from_secs(10), graceful.shutdown()).await;
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop_serving();
        self.shared.store.detach();
    }
}
