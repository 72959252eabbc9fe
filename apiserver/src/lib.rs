//! Embedded Kubernetes-compatible API server.
//!
//! An in-memory API server over real HTTP on loopback that kubectl, kube-rs
//! and the official Python client use unmodified: discovery (legacy and
//! aggregated), a minimal OpenAPI v3, built-in kinds stored schemaless, CRDs,
//! resourceVersion/generation/status semantics, merge/JSON/strategic/apply
//! patches, finalizers and garbage collection, label/field selectors,
//! pagination and resumable watches. Every request needs a bearer token: the
//! admin's from the generated kubeconfig (allowed everything), or a
//! service account's from the TokenRequest API, authorized by RBAC when
//! [`Config::authorization`] is [`Authorization::Rbac`].
//!
//! The public API is [`ApiServer`], [`Config`], [`Authorization`] and
//! [`Error`]; everything else is internal. The `testing` feature adds `testing` (fault injection
//! and an audit of writes) for tests of clients against a misbehaving
//! server.
//!
//! Inside, the layers are folders, each importing only those below it:
//! `http` (serving) → `auth` (who may) → `registry` (the objects and their
//! semantics) → `admission` (the webhooks writes call) → `patch` (pure
//! patch functions) → the leaf modules `error`, `metrics`, `values` and
//! `yaml`; `persist` (the data directory) and `testing` sit beside `http`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), wasmctrl_apiserver::Error> {
//! let server = wasmctrl_apiserver::ApiServer::start(Default::default()).await?;
//! server.write_kubeconfig(std::path::Path::new("/tmp/kubeconfig"))?;
//! println!("serving at {}", server.url());
//! server.shutdown().await;
//! # Ok(()) }
//! ```

mod admission;
mod auth;
mod error;
mod http;
mod metrics;
mod patch;
mod persist;
mod registry;
pub mod serve;
mod values;
mod yaml;

#[cfg(feature = "testing")]
pub mod testing;

pub use auth::mode::{Authorization, UnknownAuthorization};

/// JSON patch (RFC 6902) and JSON merge patch (RFC 7386) as this server
/// applies them, with its bounds: a host that answers a patch without
/// sending it (a shadow run) is held to the same limits as the server.
pub mod patches {
    pub use crate::patch::{
        MAX_COPY_BYTES, MAX_DEPTH, MAX_OPERATIONS, PatchError, json_patch, merge_patch,
    };
}
pub use http::conn::Timeouts;
/// Connections one client address holds before its first request.
pub use http::peers;
pub use http::tls::TlsError;
pub use persist::PersistError;
pub use persist::kubeconfig::KubeconfigError;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::http::state::ServerState;
use crate::registry::writes::WriteCtx;

/// Namespaces every cluster starts with.
pub const DEFAULT_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// How many watch events the server keeps for resumption: a watch from a
/// resourceVersion more than this many events old gets 410 Expired and the
/// client relists, as past the real server's watch cache.
pub const WATCH_HISTORY_LEN: usize = registry::storage::HISTORY_LEN;

/// A certificate authority: its certificate and private key, PEM encoded.
#[derive(Clone, PartialEq, Eq)]
pub struct CertificateAuthority {
    /// The CA certificate clients trust (also in the kubeconfig).
    pub cert_pem: String,
    /// The CA private key; a credential.
    pub key_pem: String,
}

impl std::fmt::Debug for CertificateAuthority {
    // The key is a credential: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// How the server starts.
#[derive(Clone)]
pub struct Config {
    /// Listen address; loopback with an ephemeral port by default.
    pub addr: SocketAddr,
    /// Persist state here (a redb database) and reload it on start.
    pub data_dir: Option<PathBuf>,
    /// Bearer token clients must present; `None` takes the one kept in
    /// `data_dir`, else generates a random one.
    pub token: Option<String>,
    /// CA that signs the server certificate; `None` takes the one kept in
    /// `data_dir`, else generates one. Reusing a CA (and token) keeps
    /// kubeconfigs written earlier valid.
    pub ca: Option<CertificateAuthority>,
    /// Connection timeouts (TLS handshake 10 s, request head 10 s, idle
    /// keep-alive 120 s, request body 60 s by default).
    pub timeouts: Timeouts,
    /// How requests of identities other than the admin are authorized:
    /// [`Authorization::AlwaysAllow`] (the default) or
    /// [`Authorization::Rbac`], which also creates upstream's bootstrap
    /// ClusterRoles and ClusterRoleBindings (discovery, self-reviews,
    /// `cluster-admin` for `system:masters`) that do not exist yet.
    pub authorization: Authorization,
}

impl std::fmt::Debug for Config {
    // The token is a credential: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("addr", &self.addr)
            .field("data_dir", &self.data_dir)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("ca", &self.ca)
            .field("timeouts", &self.timeouts)
            .field("authorization", &self.authorization)
            .finish()
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir: None,
            token: None,
            ca: None,
            timeouts: Timeouts::default(),
            authorization: Authorization::default(),
        }
    }
}

/// Why the server could not start or write its kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listen address could not be bound.
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The data directory could not be opened, read or written.
    #[error(transparent)]
    Persist(#[from] persist::PersistError),
    /// The kubeconfig could not be written.
    #[error(transparent)]
    Kubeconfig(#[from] persist::kubeconfig::KubeconfigError),
    /// Certificates could not be created or loaded.
    #[error(transparent)]
    Tls(#[from] http::tls::TlsError),
    /// A default namespace (or, with RBAC, a bootstrap ClusterRole or
    /// ClusterRoleBinding) could not be created.
    #[error("creating {name}: {source}")]
    Seed {
        /// `namespace default`, `clusterrole cluster-admin`, ...
        name: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A service-account token could not be issued.
    #[error("issuing a token for service account {namespace}/{name}: {message}")]
    ServiceAccountToken {
        namespace: String,
        name: String,
        message: String,
    },
}

/// A running API server. Dropping it stops serving; [`ApiServer::shutdown`]
/// also waits for persistence to be flushed.
pub struct ApiServer {
    /// State shared with every request handler and background task.
    shared: Arc<ServerState>,
    /// Fires to stop accepting connections.
    stop: Option<oneshot::Sender<()>>,
    /// The accept loop (it waits for connections in flight on shutdown).
    task: Option<JoinHandle<()>>,
    /// The garbage collector task.
    gc: Option<JoinHandle<()>>,
    /// The persistence thread, with a data directory.
    persister: Option<persist::Persister>,
    /// The CA (certificate and key) the server certificate is signed by.
    ca: CertificateAuthority,
    /// Where state is persisted, if anywhere.
    data_dir: Option<PathBuf>,
    timeouts: Timeouts,
    authorization: Authorization,
}

impl ApiServer {
    /// Binds `config.addr`, restores `config.data_dir` if set, creates the
    /// default namespaces (and with RBAC the bootstrap roles) and starts
    /// serving in a background task.
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
        let ca = match (&config.ca, &creds) {
            (Some(ca), _) => http::tls::Ca::from_pem(&ca.cert_pem, &ca.key_pem)?,
            (None, Some(c)) => http::tls::Ca::from_pem(&c.ca_cert, &c.ca_key)?,
            (None, None) => http::tls::Ca::generate()?,
        };
        let tls = ca.server(addr.ip())?;
        let admission_client = ca.admission_client()?;
        // Service-account tokens outlive a restart only with a data
        // directory (their service accounts do not survive one without).
        let sa_key = creds
            .as_ref()
            .and_then(persist::Credentials::service_account_key)
            .unwrap_or_else(auth::sa_token::generate_key);
        let token = config
            .token
            .or_else(|| creds.map(|c| c.token))
            .unwrap_or_else(values::random_token);
        let shared = Arc::new(ServerState::new(
            token,
            addr,
            config.authorization,
            &sa_key,
            config.timeouts.request_body,
            config.timeouts.max_list_bytes,
            config.timeouts.max_watch_bytes,
        ));
        shared
            .objects
            .admission
            .set_client_identity(admission_client);
        // Derived state (the CRD registry) follows every visible change.
        let weak = Arc::downgrade(&shared.objects);
        shared.objects.store.set_apply_hook(move |ev| {
            if let Some(objects) = weak.upgrade() {
                objects.after_apply(ev);
            }
        });

        let mut persister = None;
        if config.data_dir.is_none() {
            // A fresh in-memory store starts its resourceVersions at the
            // current time in microseconds, above any earlier run's: a
            // client that outlives a restart gets 410 and relists instead
            // of resuming from a version that now means something else.
            // (Below 2^53, so clients parsing them as doubles stay exact.)
            let micros = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64);
            shared.objects.store.load(micros, Vec::new());
        }
        if let Some(dir) = &config.data_dir {
            let (db, loaded) = persist::open(dir)?;
            let crds: Vec<serde_json::Value> = loaded
                .objects
                .iter()
                .filter(|(gr, ..)| {
                    gr.group == "apiextensions.k8s.io" && gr.resource == "customresourcedefinitions"
                })
                .map(|(.., obj)| registry::storage::parse_json(obj))
                .collect();
            shared.objects.store.load(loaded.rv, loaded.objects);
            shared.objects.observe_loaded_webhooks();
            for crd in crds {
                let (storage, infos) = registry::crd::infos_for(&crd);
                shared.objects.registry_mut().set_custom(&storage, infos);
            }
            let (tx, rx) = mpsc::unbounded_channel();
            shared.objects.store.set_persist(tx);
            persister = Some(persist::Persister::start(db, rx, shared.clone())?);
        }

        let (gc_tx, gc_rx) = mpsc::unbounded_channel();
        for ev in shared.objects.store.deleting_events() {
            let _ = gc_tx.send(ev);
        }
        shared.objects.store.set_gc(gc_tx);
        let gc = tokio::spawn(registry::gc::run(shared.objects.clone(), gc_rx));

        let mut server = ApiServer {
            shared: shared.clone(),
            stop: None,
            task: None,
            gc: Some(gc),
            persister,
            ca: CertificateAuthority {
                cert_pem: ca.cert_pem.clone(),
                key_pem: ca.key_pem(),
            },
            data_dir: config.data_dir.clone(),
            timeouts: config.timeouts,
            authorization: config.authorization,
        };
        server.seed().await?;

        let (stop, stopped) = oneshot::channel::<()>();
        let metrics = shared.metrics.clone();
        let app = http::routes::router(shared);
        server.task = Some(tokio::spawn(http::conn::serve(
            listener,
            tls.server_config.clone(),
            app,
            config.timeouts,
            metrics,
            stopped,
        )));
        server.stop = Some(stop);
        tracing::info!(%addr, "embedded API server listening");
        Ok(server)
    }

    /// Creates the default namespaces (and with RBAC the bootstrap
    /// ClusterRoles and ClusterRoleBindings) that do not exist yet, waiting
    /// until they are durable.
    async fn seed(&self) -> Result<(), Error> {
        let mut objects: Vec<(&str, &str, serde_json::Value)> = DEFAULT_NAMESPACES
            .iter()
            .map(|name| {
                let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
                ("", "namespaces", ns)
            })
            .collect();
        if self.authorization == Authorization::Rbac {
            objects.extend(
                auth::bootstrap::policy()
                    .into_iter()
                    .map(|(plural, obj)| (auth::rbac::GROUP, plural, obj)),
            );
        }
        for (group, plural, body) in objects {
            let info = self
                .shared
                .objects
                .registry()
                .find(group, "v1", plural)
                .expect("seeded kinds are built in");
            let name = values::meta_str(&body, "name").unwrap_or("").to_string();
            if self
                .shared
                .objects
                .store
                .latest(&info.storage, "", &name)
                .is_some()
            {
                continue;
            }
            let ctx = WriteCtx::system("wasmctrl-apiserver");
            let seed_err = |source: Box<dyn std::error::Error + Send + Sync>| Error::Seed {
                name: format!("{} {name}", info.singular),
                source,
            };
            self.shared
                .objects
                .create_object(&info, "", body, &ctx)
                .await
                .map_err(|e| seed_err(Box::new(e)))?;
            let pending =
                std::mem::take(&mut *ctx.pending.lock().unwrap_or_else(|e| e.into_inner()));
            for durable in pending {
                durable
                    .wait()
                    .await
                    .map_err(|message| seed_err(message.to_string().into()))?;
            }
        }
        Ok(())
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
        &self.ca.cert_pem
    }

    /// The bearer token every request must carry.
    pub fn token(&self) -> &str {
        &self.shared.auth.token
    }

    /// The configuration that serves the same clients again: this address,
    /// token, CA and data directory. Start a server with it after
    /// [`ApiServer::shutdown`] to restart: kubeconfigs stay valid, and state
    /// survives when there is a data directory (in memory it starts empty).
    pub fn config(&self) -> Config {
        Config {
            addr: self.shared.addr,
            data_dir: self.data_dir.clone(),
            token: Some(self.shared.auth.token.clone()),
            ca: Some(self.ca.clone()),
            timeouts: self.timeouts,
            authorization: self.authorization,
        }
    }

    /// How this server authorizes requests.
    pub fn authorization(&self) -> Authorization {
        self.authorization
    }

    /// A kubeconfig that authenticates as the service account
    /// `namespace/name` (user `system:serviceaccount:NAMESPACE:NAME`), with a
    /// token valid for `expiration` (10 minutes to 2^32 seconds), as
    /// `kubectl create token` would issue. The token stops working when it
    /// expires or the service account is deleted; with a data directory it
    /// survives restarts. Fails if the service account does not exist.
    pub fn kubeconfig_for_service_account(
        &self,
        namespace: &str,
        name: &str,
        expiration: Duration,
    ) -> Result<String, Error> {
        let secs = i64::try_from(expiration.as_secs()).unwrap_or(i64::MAX);
        let audiences = auth::sa_token::API_AUDIENCES
            .iter()
            .map(|a| a.to_string())
            .collect();
        let (token, _) =
            auth::reviews::issue_token(&self.shared.auth, namespace, name, audiences, secs, None)
                .map_err(|e| Error::ServiceAccountToken {
                namespace: namespace.to_string(),
                name: name.to_string(),
                message: e.to_string(),
            })?;
        Ok(persist::kubeconfig::render(
            &self.url(),
            &token,
            &self.ca.cert_pem,
        ))
    }

    /// Kubeconfig YAML (cluster, user and context named `wasmctrl`).
    pub fn kubeconfig(&self) -> String {
        persist::kubeconfig::render(&self.url(), self.token(), &self.ca.cert_pem)
    }

    /// Writes [`ApiServer::kubeconfig`] to `path` atomically with mode
    /// 0600, creating parent directories.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), Error> {
        Ok(persist::kubeconfig::write(path, &self.kubeconfig())?)
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.objects.store.current_rv()
    }

    /// Makes every resourceVersion clients hold too old to watch from and
    /// closes open watches: the next watch gets 410 Expired and clients
    /// relist, as after an etcd compaction. For testing client recovery.
    pub fn expire_watches(&self) {
        self.shared.expire_watches();
    }

    /// How many requests or connections this server refused (or closed)
    /// for running into the limit labelled `limit` in
    /// `wasmctrl_apiserver_limit_exceeded_total` (`requestBody`,
    /// `objectSize`, `slowWatcher`, ...); 0 for a label that names no limit.
    /// The same counts are served at `GET /metrics`.
    pub fn limit_exceeded(&self, limit: &str) -> u64 {
        self.shared.metrics.exceeded_count(limit)
    }

    /// Fault injection: switch faults of this server on and off at run
    /// time (feature `testing`).
    #[cfg(feature = "testing")]
    pub fn faults(&self) -> testing::Faults {
        testing::Faults::new(self.shared.clone())
    }

    /// The audit of writes this server answered (feature `testing`).
    #[cfg(feature = "testing")]
    pub fn audit(&self) -> testing::Audit {
        testing::Audit::new(self.shared.clone())
    }

    /// A kubeconfig whose token authenticates as `user` (groups
    /// `system:authenticated`), so processes that share this server can be
    /// told apart in the [`ApiServer::audit`] (feature `testing`). With
    /// [`Authorization::Rbac`] the user gets what RBAC grants it. The token
    /// is issued on first use and lives as long as this server.
    #[cfg(feature = "testing")]
    pub fn kubeconfig_for_user(&self, user: &str) -> String {
        persist::kubeconfig::render(
            &self.url(),
            &self.shared.auth.token_for(user),
            &self.ca.cert_pem,
        )
    }

    /// Stops accepting requests, closes watches, waits for in-flight requests
    /// (bounded) and flushes persistence.
    pub async fn shutdown(mut self) {
        self.stop_serving();
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(15), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        self.shared.objects.store.detach();
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

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop_serving();
        self.shared.objects.store.detach();
    }
}
