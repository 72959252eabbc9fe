//! Dynamic admission: the server calls the webhooks that
//! ValidatingWebhookConfigurations and MutatingWebhookConfigurations name,
//! as kube-apiserver does, on every create, update, patch and delete a
//! client makes (subresources and dry runs included).
//!
//! A write runs: its object computed → the matching mutating webhooks, one
//! after another (configurations by name, webhooks in their order), each
//! JSON patch applied, and once more each `reinvocationPolicy: IfNeeded`
//! webhook if a later one changed the object → the server's own rules and
//! validation → the matching validating webhooks, all at once → the
//! commit. The caller ([`crate::registry`]) owns that order and reruns
//! admission when a commit conflicts; this module decides which webhooks a
//! request calls, calls them over HTTPS and turns their answers into the
//! object, warnings, audit annotations and errors upstream would give.
//! Writes of the configurations themselves are never sent to webhooks, and
//! neither are the server's own writes (garbage collection, namespace
//! cleanup).
//!
//! | File | Job |
//! |---|---|
//! | [`config`] | the two configuration kinds: the parsed form; `config/checks` the defaults and checks on write |
//! | [`matching`] | rules, scopes, equivalent versions, namespace and object selectors |
//! | [`review`] | the AdmissionReview sent, the response read and checked, denials |
//! | [`client`] | one HTTPS POST: service resolution, `caBundle` roots, the deadline, the body bound |
//! | [`chain`] | mutating webhooks in order, validating ones in parallel, failure policies, metrics |
//!
//! May import: [`crate::error`], [`crate::metrics`], [`crate::patch`] and
//! [`crate::values`]; never `registry`, `auth` or `http`, which call it.
//! What it needs of the cluster (namespace labels, Service addresses) it
//! asks through [`Lookup`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use serde::Serialize;
use serde_json::Value;

use crate::metrics::Metrics;

mod chain;
mod client;
pub(crate) mod config;
mod matching;
mod review;

pub(crate) use client::ClientIdentity;
pub(crate) use config::ConfigKind;

/// Most mutating, and most validating, webhooks one request may call; a
/// request matching more is refused (500) naming the bound, so no set of
/// configurations fans one write out without limit.
pub(crate) const MAX_WEBHOOKS_PER_REQUEST: usize = 128;

/// The operation a request is admitted as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    /// `CREATE`, `UPDATE`, `DELETE`: the rule and review spelling.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// `metav1.GroupVersionKind` as a review carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Gvk {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) kind: String,
}

/// `metav1.GroupVersionResource` as a review carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Gvr {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) resource: String,
}

/// Who makes a request, as a review's `userInfo` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Caller {
    pub(crate) username: String,
    /// Empty when unknown.
    pub(crate) uid: String,
    pub(crate) groups: Vec<String>,
    pub(crate) extra: BTreeMap<String, Vec<String>>,
}

/// What a write is, as admission sees it.
#[derive(Debug)]
pub(crate) struct Attributes<'a> {
    pub(crate) operation: Operation,
    /// The kind of the object sent (a `/scale` write sends an
    /// `autoscaling/v1` Scale).
    pub(crate) kind: Gvk,
    pub(crate) resource: Gvr,
    /// Empty for the main resource.
    pub(crate) subresource: &'a str,
    /// Empty for a create whose name the server generates.
    pub(crate) name: &'a str,
    /// The object's namespace; a Namespace's own name for a Namespace.
    pub(crate) namespace: &'a str,
    pub(crate) dry_run: bool,
    /// `CreateOptions`, `UpdateOptions` or `DeleteOptions` (meta.k8s.io/v1).
    pub(crate) options: Value,
    pub(crate) caller: &'a Caller,
    /// The other served versions of the resource, which differ from the
    /// requested one only in `apiVersion` (for `matchPolicy: Equivalent`).
    pub(crate) equivalent_versions: &'a [String],
    /// When the request must be answered: no webhook is given longer.
    pub(crate) deadline: Option<tokio::time::Instant>,
}

/// What admission needs to know of the cluster.
pub(crate) trait Lookup: Sync {
    /// The labels of namespace `name` (`null` when it has none); `None`
    /// when it does not exist.
    fn namespace_labels(&self, name: &str) -> Option<Value>;
    /// Where Service `namespace/name` serves its port `port`; the error
    /// says why it cannot be reached.
    fn service_address(&self, namespace: &str, name: &str, port: u16)
    -> Result<SocketAddr, String>;
}

/// Where admission leaves what the response and the audit carry.
pub(crate) trait Sink: Sync {
    /// A `Warning: 299` header of the response.
    fn warn(&self, text: String);
    /// An audit annotation, its key already prefixed with the webhook's
    /// name: whether it was kept (a request keeps at most
    /// [`MAX_REQUEST_ANNOTATIONS`], whatever its webhooks, retries and
    /// items).
    fn annotate(&self, key: String, value: String) -> bool;
}

/// Audit annotations one request keeps from its webhooks; the others are
/// dropped (counted as `webhookAnnotations`). Not an upstream bound.
pub(crate) const MAX_REQUEST_ANNOTATIONS: usize = 256;

/// The webhooks of every stored configuration, in the order they run.
#[derive(Debug, Default)]
pub(crate) struct Configs {
    pub(crate) mutating: Vec<Arc<config::Webhook>>,
    pub(crate) validating: Vec<Arc<config::Webhook>>,
}

/// The configurations as stored, by kind and name.
#[derive(Default)]
struct Stored {
    by_name: BTreeMap<(ConfigKind, String), Vec<Arc<config::Webhook>>>,
    /// `by_name` flattened; `None` when no configuration holds a webhook.
    current: Option<Arc<Configs>>,
}

/// The server's admission state: the stored configurations, parsed, and
/// where their calls are counted.
pub(crate) struct Webhooks {
    stored: RwLock<Stored>,
    /// Whether any webhook is configured: what a write checks first, so
    /// that without configurations admission costs one atomic load.
    any: AtomicBool,
    metrics: Arc<Metrics>,
    /// The certificate presented to a webhook server that asks for one.
    client_identity: OnceLock<ClientIdentity>,
    /// The most JSON an object may be stored as: what a mutating
    /// webhook's patch may make of it.
    max_object_bytes: usize,
}

impl Webhooks {
    /// No webhooks yet; objects a mutating webhook patches may be at most
    /// `max_object_bytes` of JSON (the store's limit).
    pub(crate) fn new(metrics: Arc<Metrics>, max_object_bytes: usize) -> Self {
        Webhooks {
            max_object_bytes,
            stored: RwLock::default(),
            any: AtomicBool::new(false),
            metrics,
            client_identity: OnceLock::new(),
        }
    }

    /// Presents `identity` to every webhook server that asks for a client
    /// certificate (set once, before serving).
    pub(crate) fn set_client_identity(&self, identity: ClientIdentity) {
        let _ = self.client_identity.set(identity);
    }

    /// Takes the configuration `name` of `kind` as stored now (`None`:
    /// deleted); called as each change becomes visible.
    pub(crate) fn observe(&self, kind: ConfigKind, name: &str, object: Option<&Value>) {
        let mut stored = self.stored.write().unwrap_or_else(|e| e.into_inner());
        let key = (kind, name.to_string());
        match object.map(|o| config::parse(kind, o)) {
            Some(hooks) if !hooks.is_empty() => {
                stored.by_name.insert(key, hooks);
            }
            _ => {
                stored.by_name.remove(&key);
            }
        }
        let mut configs = Configs::default();
        for ((kind, _), hooks) in &stored.by_name {
            let list = match kind {
                ConfigKind::Mutating => &mut configs.mutating,
                ConfigKind::Validating => &mut configs.validating,
            };
            list.extend(hooks.iter().cloned());
        }
        let any = !stored.by_name.is_empty();
        stored.current = any.then(|| Arc::new(configs));
        self.any.store(any, Ordering::Release);
    }

    /// The configured webhooks, or `None` when there are none.
    pub(crate) fn current(&self) -> Option<Arc<Configs>> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        self.stored
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .current
            .clone()
    }
}
