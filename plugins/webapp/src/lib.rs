//! The example operator: a `WebApp` (demo.wasmctrl.dev/v1alpha1) becomes a
//! Deployment and a Service of the same name, owned by it.
//!
//! - Both are server-side applied on every reconcile, so replicas and image
//!   follow the spec, and a deleted or hand-edited Deployment is put back
//!   (its events reach the WebApp's key through the ownerReference).
//! - `status.conditions[Ready]` is False (`Progressing`) until the
//!   Deployment's `readyReplicas` equals `spec.replicas`, then True
//!   (`Available`); until then the key is polled every 5 s.
//! - While ready, the WebApp's service URL is listed in the ConfigMap
//!   `webapp-registry` of its namespace (key: the WebApp's name). The
//!   finalizer `demo.wasmctrl.dev/cleanup` removes the entry before the
//!   WebApp goes away.
//! - Admission webhooks (`admission`) refuse WebApps the operator cannot
//!   run and label the rest as managed by wasmctrl.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use wasmctrl_sdk::events::{EventType, Recorder};
use wasmctrl_sdk::finalizer::Event;
use wasmctrl_sdk::k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use wasmctrl_sdk::k8s_openapi::api::core::v1::{
    ConfigMap, Container, ContainerPort, PodSpec, PodTemplateSpec, Service, ServicePort,
    ServiceSpec,
};
use wasmctrl_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition, LabelSelector, ObjectMeta, OwnerReference,
};
use wasmctrl_sdk::k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use wasmctrl_sdk::serde_json::json;
use wasmctrl_sdk::{
    Action, Api, ApiError, Context, Error, Metadata, ObjectKey, Patch, Reconciler, Resource,
    conditions, finalizer,
};

/// The field manager of every write, and the plugin's name.
const MANAGER: &str = "webapp";
mod admission;

const FINALIZER: &str = "demo.wasmctrl.dev/cleanup";
const REGISTRY: &str = "webapp-registry";
/// How often a WebApp that is not ready yet is looked at again.
const POLL: Duration = Duration::from_secs(5);

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WebAppSpec {
    /// The container image to run.
    pub image: String,
    #[serde(default = "one")]
    pub replicas: i32,
    /// The port the container listens on, and the Service's port.
    #[serde(default = "http")]
    pub port: i32,
}

fn one() -> i32 {
    1
}

fn http() -> i32 {
    80
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebAppStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

wasmctrl_sdk::custom_resource! {
    /// A web application: one Deployment and one Service.
    pub struct WebApp {
        group: "demo.wasmctrl.dev",
        version: "v1alpha1",
        plural: "webapps",
        scope: Namespaced,
        spec: WebAppSpec,
        status: WebAppStatus,
    }
}

struct WebAppReconciler;

impl Reconciler for WebAppReconciler {
    fn metadata() -> Metadata {
        Metadata::new(MANAGER, env!("CARGO_PKG_VERSION"), WebApp::gvk())
            .owns(Deployment::gvk())
            .owns(Service::gvk())
            // get: read the WebApp; list/watch: the host's informer; patch:
            // the finalizer. Status writes need patch on webapps/status.
            .permission(
                WebApp::group(),
                &["webapps"],
                &["get", "list", "watch", "patch"],
            )
            .permission(WebApp::group(), &["webapps/status"], &["patch"])
            // Owned kinds: informers, and server-side apply (a patch, which
            // also creates).
            .permission("apps", &["deployments"], &["list", "watch", "patch"])
            .permission("", &["services"], &["list", "watch", "patch"])
            .permission("", &["configmaps"], &["get", "create", "patch"])
            .permission("events.k8s.io", &["events"], &["create"])
    }

    fn reconcile(key: ObjectKey, _ctx: &Context) -> Result<Action, Error> {
        let namespace = key.require_namespace()?;
        let apps = Api::<WebApp>::namespaced(namespace);
        let Some(app) = apps.get_opt(&key.name)? else {
            // Gone: its Deployment and Service are garbage-collected.
            return Ok(Action::done());
        };
        finalizer(&apps, FINALIZER, app, |event| match event {
            Event::Apply(app) => apply(&apps, namespace, &app),
            Event::Cleanup(app) => {
                register(namespace, app.name(), None)?;
                Ok(Action::done())
            }
        })
    }
}

fn apply(apps: &Api<WebApp>, namespace: &str, app: &WebApp) -> Result<Action, Error> {
    let owner = app
        .controller_owner_ref()
        .ok_or_else(|| Error::permanent("the WebApp has no uid"))?;
    let deployment = Api::<Deployment>::namespaced(namespace).apply(
        &deployment(app, owner.clone()),
        MANAGER,
        true,
    )?;
    Api::<Service>::namespaced(namespace).apply(&service(app, owner), MANAGER, true)?;

    let desired = app.spec.replicas;
    let ready_replicas = deployment
        .status
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    let ready = ready_replicas == desired;
    let url = format!(
        "http://{}.{namespace}.svc.cluster.local:{}",
        app.name(),
        app.spec.port
    );
    register(namespace, app.name(), ready.then_some(url.as_str()))?;

    let (reason, message) = if ready {
        ("Available", format!("{desired} replicas ready at {url}"))
    } else {
        (
            "Progressing",
            format!("{ready_replicas}/{desired} replicas ready"),
        )
    };
    let old = app.status.clone().unwrap_or_default();
    let mut status = WebAppStatus {
        observed_generation: app.metadata.generation,
        ..old.clone()
    };
    let ready_condition = Condition {
        observed_generation: app.metadata.generation,
        ..conditions::new("Ready", ready, reason, message)
    };
    conditions::set(&mut status.conditions, ready_condition);
    if app.status.as_ref() != Some(&status) {
        apps.apply_status(app.name(), &status, MANAGER, true)?;
    }
    let was = conditions::get(&old.conditions, "Ready").map(|c| c.status.as_str());
    if was != conditions::get(&status.conditions, "Ready").map(|c| c.status.as_str()) {
        let note = format!("{ready_replicas}/{desired} replicas ready");
        if let Err(e) = Recorder::new(app).publish(EventType::Normal, reason, "Reconcile", &note) {
            wasmctrl_sdk::warn!("could not record an event: {e}");
        }
    }
    Ok(if ready {
        Action::done()
    } else {
        Action::requeue_after(POLL)
    })
}

/// Makes the `webapp-registry` entry for `name` be `url`, or absent.
fn register(namespace: &str, name: &str, url: Option<&str>) -> Result<(), Error> {
    let configmaps = Api::<ConfigMap>::namespaced(namespace);
    let current = configmaps.get_opt(REGISTRY)?;
    let entry = current
        .as_ref()
        .and_then(|cm| cm.data.as_ref()?.get(name))
        .map(String::as_str);
    if entry == url {
        return Ok(());
    }
    if let (None, Some(url)) = (&current, url) {
        let registry = ConfigMap {
            metadata: ObjectMeta {
                name: Some(REGISTRY.into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(name.to_string(), url.to_string())])),
            ..Default::default()
        };
        match configmaps.create(&registry) {
            Ok(_) => return Ok(()),
            // Created concurrently by another WebApp: patch it below.
            Err(ApiError::AlreadyExists(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // A merge patch touches only this key; null removes it.
    match configmaps.patch(REGISTRY, &Patch::Merge(json!({ "data": { name: url } }))) {
        Ok(_) => Ok(()),
        Err(ApiError::NotFound(_)) if url.is_none() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn labels(app: &WebApp) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), "webapp".to_string()),
        (
            "app.kubernetes.io/instance".to_string(),
            app.name().to_string(),
        ),
    ])
}

fn owned_meta(app: &WebApp, owner: OwnerReference) -> ObjectMeta {
    let mut labels = labels(app);
    labels.insert("app.kubernetes.io/managed-by".into(), MANAGER.into());
    ObjectMeta {
        name: Some(app.name().to_string()),
        labels: Some(labels),
        owner_references: Some(vec![owner]),
        ..Default::default()
    }
}

fn deployment(app: &WebApp, owner: OwnerReference) -> Deployment {
    #[allow(unused_mut)]
    let mut metadata = owned_meta(app, owner);
    // The build `wasmctrl replay` tests catch: it labels Deployments
    // differently from the build that was recorded.
    #[cfg(feature = "relabel")]
    if let Some(labels) = metadata.labels.as_mut() {
        labels.insert("app.kubernetes.io/version".into(), "relabelled".into());
    }
    Deployment {
        metadata,
        spec: DeploymentSpec {
            replicas: Some(app.spec.replicas),
            selector: LabelSelector {
                match_labels: Some(labels(app)),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(app)),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "web".into(),
                        image: Some(app.spec.image.clone()),
                        ports: Some(vec![ContainerPort {
                            name: Some("http".into()),
                            container_port: app.spec.port,
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        },
        status: None,
    }
}

fn service(app: &WebApp, owner: OwnerReference) -> Service {
    Service {
        metadata: owned_meta(app, owner),
        spec: Some(ServiceSpec {
            selector: Some(labels(app)),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: app.spec.port,
                target_port: Some(IntOrString::String("http".into())),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

wasmctrl_sdk::export_reconciler!(
    WebAppReconciler,
    validator: admission::WebAppAdmission,
    defaulter: admission::WebAppAdmission
);

#[cfg(test)]
mod tests;
