//! A guest's events (`record-event`) and the host's own about a terminal
//! reconcile error: checked, granted and published through kube-rs's
//! event recorder.

use std::time::Instant;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DynamicObject};
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType};

use super::counters::code;
use super::payload::truncate;
use super::{ClusterApi, map_error};
use crate::control::discovery::Resolved;
use crate::control::informer::InformerKey;
use crate::meta::kind::Gvk;
use crate::meta::syntax as validate;
use crate::sandbox::hostapi::api::KubeResponse;
use crate::sandbox::hostapi::error::ApiError;
use crate::sandbox::hostapi::grant::Access;
use crate::sandbox::hostapi::request::{Event, EventType};

/// Kubernetes' limits on an event's fields (events.k8s.io/v1).
const MAX_EVENT_REASON: usize = 128;
const MAX_EVENT_ACTION: usize = 128;
const MAX_EVENT_NOTE: usize = 1024;

impl ClusterApi {
    /// An event's strings and the grant to create events, checked.
    pub(super) fn check_event(&self, event: &Event) -> Result<(), ApiError> {
        let checked = (|| {
            validate::gvk(&event.regarding_kind)?;
            if let Some(ns) = &event.regarding_namespace {
                validate::namespace(ns)?;
            }
            validate::object_name("regarding name", &event.regarding_name)?;
            validate::printable("reason", &event.reason, MAX_EVENT_REASON)?;
            validate::printable("action", &event.action, MAX_EVENT_ACTION)?;
            validate::text("note", &event.note, MAX_EVENT_NOTE)
        })();
        checked.map_err(|e| self.refuse_invalid("create", e))?;
        let access = Access {
            verb: "create",
            group: "events.k8s.io",
            resource: "events",
            namespace: event.regarding_namespace.as_deref(),
        };
        if !self.grant.allows(&access) {
            self.count("create", "events", "forbidden");
            return Err(ApiError::Forbidden(format!(
                "plugin {:?} is not granted {access}",
                self.plugin
            )));
        }
        Ok(())
    }

    /// Publishes the guest's `event` once it is checked.
    pub(super) async fn record_event(
        &self,
        event: Event,
        deadline: Instant,
    ) -> Result<KubeResponse, ApiError> {
        self.check_event(&event)?;
        if self.events.reserve_with(None, |_| false).is_err() {
            self.limit_exceeded("events");
            self.count("create", "events", "unavailable");
            return Err(ApiError::Unavailable(format!(
                "plugin {:?} recorded its {} events of the last {} minutes (the recorder keeps each that long); this one was not recorded",
                self.plugin,
                self.limits.events,
                super::EVENT_WINDOW.as_secs() / 60
            )));
        }
        let kind = &event.regarding_kind;
        // The uid lets `kubectl describe` show the event on the object; it
        // is read only where the plugin may read the object itself.
        let uid = match self.resolver.resolve(kind).await {
            Ok(resolved) => {
                let namespace = event
                    .regarding_namespace
                    .as_deref()
                    .filter(|_| resolved.namespaced);
                let may_read = self.grant.allows(&Access {
                    verb: "get",
                    group: &resolved.resource.group,
                    resource: &resolved.resource.plural,
                    namespace,
                });
                if may_read {
                    self.regarding_uid(&resolved, namespace, &event.regarding_name, deadline)
                        .await
                } else {
                    None
                }
            }
            Err(_) => None,
        };
        let reference = ObjectReference {
            api_version: Some(kind.api_version()),
            kind: Some(kind.kind.clone()),
            name: Some(event.regarding_name.clone()),
            namespace: event.regarding_namespace.clone(),
            uid,
            ..ObjectReference::default()
        };
        let ev = KubeEvent {
            type_: match event.type_ {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: event.reason,
            note: Some(event.note),
            action: event.action,
            secondary: None,
        };
        self.throttle(deadline).await?;
        let result = self
            .recorder
            .publish(&ev, &reference)
            .await
            .map(|_| KubeResponse::Empty)
            .map_err(map_error);
        self.count("create", "events", code(&result));
        result
    }

    /// The uid of the object an event is about, from the cache when it is
    /// watched.
    async fn regarding_uid(
        &self,
        resolved: &Resolved,
        namespace: Option<&str>,
        name: &str,
        deadline: Instant,
    ) -> Option<String> {
        let key = InformerKey::new(&resolved.resource, namespace);
        let informer = self
            .cache
            .existing(&key)
            .or_else(|| {
                self.cache
                    .existing(&InformerKey::new(&resolved.resource, None))
            })
            .filter(|i| i.is_synced());
        if let Some(informer) = informer {
            return informer.get(namespace, name)?.uid().map(str::to_string);
        }
        self.throttle(deadline).await.ok()?;
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resolved.resource),
            None => Api::all_with(self.client.clone(), &resolved.resource),
        };
        api.get_opt(name).await.ok().flatten()?.metadata.uid
    }

    /// Records a terminal reconcile error as a Warning event on the object
    /// (host-side, not subject to the plugin's grant).
    pub async fn record_terminal_error(&self, kind: &Gvk, key: &crate::ObjectKey, message: &str) {
        let reference = ObjectReference {
            api_version: Some(kind.api_version()),
            kind: Some(kind.kind.clone()),
            name: Some(key.name.clone()),
            namespace: key.namespace.clone(),
            ..ObjectReference::default()
        };
        let ev = KubeEvent {
            type_: KubeEventType::Warning,
            reason: "ReconcileFailed".into(),
            note: Some(truncate(message, MAX_EVENT_NOTE)),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &reference).await {
            tracing::warn!(plugin = %self.plugin, %key, "cannot record the terminal error as an event: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use crate::control::discovery::Resolver;
    use crate::control::informer::SharedCache;
    use crate::control::leader::Fence;
    use crate::control::metrics::Metrics;
    use crate::meta::kind::Gvk;
    use crate::sandbox::hostapi::cluster::{ApiLimits, ClusterApi, ClusterContext};
    use crate::sandbox::hostapi::error::ApiError;
    use crate::sandbox::hostapi::grant::{Grant, PermissionRule};
    use crate::sandbox::hostapi::request::{Event, EventType};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_plugin_records_at_most_its_events_per_window() {
        let server = wasmctrl_apiserver::ApiServer::start(wasmctrl_apiserver::Config::default())
            .await
            .unwrap();
        let client = wasmctrl_testkit::client::client_for(&server.kubeconfig()).await;
        let metrics = Arc::new(Metrics::new());
        let context = ClusterContext {
            client: client.clone(),
            resolver: Arc::new(Resolver::new(client.clone())),
            cache: Arc::new(SharedCache::new(client)),
            metrics: metrics.clone(),
            fence: Fence::open(),
        };
        let grant = Grant::new(
            vec![PermissionRule::of(
                "events.k8s.io",
                &["events"],
                &["create"],
                None,
            )],
            None,
        );
        let limits = ApiLimits {
            qps: f64::INFINITY,
            events: 3,
            ..ApiLimits::default()
        };
        let api = ClusterApi::new("chatty", &context, grant, limits);
        let event = |i: usize| Event {
            regarding_kind: Gvk::new("", "v1", "ConfigMap"),
            regarding_namespace: Some("default".into()),
            regarding_name: format!("cm-{i}"),
            type_: EventType::Normal,
            reason: "Seen".into(),
            action: "Look".into(),
            note: format!("the {i}th"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        for i in 0..3 {
            api.record_event(event(i), deadline).await.unwrap();
        }
        let e = api.record_event(event(3), deadline).await.unwrap_err();
        assert!(
            matches!(&e, ApiError::Unavailable(m) if m.contains("recorded its 3 events of the last 6 minutes")),
            "{e:?}"
        );
        let text = metrics.encode();
        assert!(
            text.lines()
                .any(|l| l.starts_with("wasmctrl_plugin_limit_exceeded_total{")
                    && l.contains(r#"plugin="chatty""#)
                    && l.contains(r#"limit="events""#)
                    && l.ends_with(" 1")),
            "{text}"
        );
    }
}
