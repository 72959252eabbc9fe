//! Kubernetes Secrets the host reads with its own credentials for plugins
//! that use them by reference (a plugin's `secrets` entry with
//! `secretKeyRef`). A plugin never reads a Secret through its grant: the
//! host watches each named Secret (one watch per Secret, pinned by a
//! `metadata.name` field selector, so RBAC's `resourceNames` can allow
//! exactly it) and keeps its current data, so a rotation takes effect on
//! the next request without a restart or swap.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::sync::watch;

/// What the host knows of one Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Known {
    /// The watch has not listed it yet.
    Unread,
    /// Listed: it does not exist.
    Missing,
    /// Its data, key by key.
    Present(BTreeMap<String, Vec<u8>>),
    /// The host could not read it (before it ever had): why.
    Failed(String),
}

/// The Secrets the host watches, shared by every plugin that names one:
/// each is watched while some plugin's grant holds its [`WatchedSecret`].
pub struct SecretWatch {
    client: Client,
    watched: Mutex<HashMap<(String, String), Weak<WatchedSecret>>>,
}

/// One watched Secret; the watch ends when the last holder drops it.
#[derive(Debug)]
pub struct WatchedSecret {
    namespace: String,
    name: String,
    known: watch::Receiver<Known>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WatchedSecret {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for SecretWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretWatch")
    }
}

impl SecretWatch {
    pub fn new(client: Client) -> Arc<Self> {
        Arc::new(Self {
            client,
            watched: Mutex::default(),
        })
    }

    /// The Secret `namespace/name`, watched from now on (or already).
    pub fn secret(&self, namespace: &str, name: &str) -> Arc<WatchedSecret> {
        let mut watched = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        watched.retain(|_, w| w.strong_count() > 0);
        let key = (namespace.to_string(), name.to_string());
        if let Some(live) = watched.get(&key).and_then(Weak::upgrade) {
            return live;
        }
        let (tx, known) = watch::channel(Known::Unread);
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let task = tokio::spawn(follow(api, name.to_string(), tx));
        let secret = Arc::new(WatchedSecret {
            namespace: namespace.to_string(),
            name: name.to_string(),
            known,
            task,
        });
        watched.insert(key, Arc::downgrade(&secret));
        secret
    }
}

impl WatchedSecret {
    /// The current value of `key`; waits for the Secret's first listing,
    /// at most until `deadline`. The error says what is missing, never a
    /// value.
    pub async fn value(&self, key: &str, deadline: Instant) -> Result<Vec<u8>, String> {
        let mut known = self.known.clone();
        let listed = known.wait_for(|k| *k != Known::Unread);
        let known = match tokio::time::timeout_at(deadline.into(), listed).await {
            Err(_) => {
                return Err(format!(
                    "Secret {}/{} was not read before the reconcile's deadline",
                    self.namespace, self.name
                ));
            }
            Ok(Err(_)) => return Err("the host stopped watching Secrets".into()),
            Ok(Ok(k)) => k.clone(),
        };
        match known {
            Known::Present(data) => data.get(key).cloned().ok_or_else(|| {
                format!("Secret {}/{} has no key {key:?}", self.namespace, self.name)
            }),
            Known::Missing => Err(format!(
                "Secret {}/{} does not exist",
                self.namespace, self.name
            )),
            Known::Failed(why) => Err(why),
            Known::Unread => unreachable!("waited for a listing"),
        }
    }
}

/// Watches one Secret, keeping `tx` current. A watch error before the
/// first listing is what a read answers (typically RBAC: the host's
/// ServiceAccount may not read it); after it, the last data stays in
/// force while the watch retries with backoff.
async fn follow(api: Api<Secret>, name: String, tx: watch::Sender<Known>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut relisted: Option<Known> = None;
    while let Some(event) = stream.next().await {
        match event {
            Err(e) => {
                tracing::warn!(secret = %name, "watching a Secret plugins use (retrying with backoff): {e}");
                tx.send_if_modified(|k| {
                    matches!(k, Known::Unread | Known::Failed(_)) && {
                        *k = Known::Failed(format!("the host cannot read Secret {name}: {e}"));
                        true
                    }
                });
            }
            Ok(Event::Init) => relisted = Some(Known::Missing),
            Ok(Event::InitApply(s)) => relisted = Some(data_of(s)),
            Ok(Event::InitDone) => {
                let _ = tx.send(relisted.take().unwrap_or(Known::Missing));
            }
            Ok(Event::Apply(s)) => {
                let _ = tx.send(data_of(s));
            }
            Ok(Event::Delete(_)) => {
                let _ = tx.send(Known::Missing);
            }
        }
    }
}

fn data_of(secret: Secret) -> Known {
    let mut data: BTreeMap<String, Vec<u8>> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    // `stringData` is write-only on a real API server; an embedded or
    // older one may hand it back, and then it wins as it would on write.
    for (k, v) in secret.string_data.unwrap_or_default() {
        data.insert(k, v.into_bytes());
    }
    Known::Present(data)
}
