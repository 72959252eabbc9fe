//! kube-rs 5 against the server: typed and dynamic APIs, CRDs at run time,
//! watcher + reflector through forced 410s, server-side apply, the finalizer
//! helper and the events Recorder.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams,
};
use kube::runtime::events::{Event as KEvent, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::{WatchStreamExt, conditions, reflector, wait::await_condition, watcher};
use kube::{CustomResource, CustomResourceExt, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use wasmctrl_testkit::eventually;

use crate::common::Harness;

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas"
    ),
    shortname = "wd"
)]
pub struct WidgetSpec {
    pub size: i32,
    #[serde(default)]
    pub replicas: i32,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct WidgetStatus {
    pub ready: bool,
    #[serde(default)]
    pub replicas: i32,
}

fn cm(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

pub async fn install_widget_crd(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Widget::crd())
        .await
        .expect("CRD created");
    let established = await_condition(
        crds,
        "widgets.example.com",
        conditions::is_crd_established(),
    );
    tokio::time::timeout(Duration::from_secs(10), established)
        .await
        .expect("CRD established in time")
        .expect("watch ok");
}

#[tokio::test]
async fn configmap_crud_and_conflicts() {
    let h = Harness::start().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client().await, "default");
    let created = api
        .create(&PostParams::default(), &cm("k1", &[("a", "1")]))
        .await
        .unwrap();
    let rv1 = created.resource_version().unwrap();
    assert!(created.uid().is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(
        created.metadata.generation, None,
        "configmaps have no generation"
    );
    let managed = created.metadata.managed_fields.clone().unwrap_or_default();
    assert!(!managed.is_empty(), "create records managedFields");

    // Duplicate create → 409 AlreadyExists.
    let err = api
        .create(&PostParams::default(), &cm("k1", &[]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists"),
        "{err:?}"
    );

    // Update with the current RV works and bumps it; a stale one is 409.
    let mut upd = created.clone();
    upd.data = Some(BTreeMap::from([("a".into(), "2".into())]));
    let updated = api
        .replace("k1", &PostParams::default(), &upd)
        .await
        .unwrap();
    assert_ne!(updated.resource_version().unwrap(), rv1);
    assert_eq!(updated.uid(), created.uid());
    let err = api
        .replace("k1", &PostParams::default(), &upd)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"),
        "{err:?}"
    );

    // A no-op write keeps the resourceVersion.
    let again = api
        .patch(
            "k1",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": "2"}})),
        )
        .await
        .unwrap();
    assert_eq!(again.resource_version(), updated.resource_version());

    // Patch with a stale resourceVersion precondition → 409.
    let err = api
        .patch(
            "k1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": rv1}, "data": {"b": "x"}})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409),
        "{err:?}"
    );

    // JSON patch.
    let p = api
        .patch(
            "k1",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([{"op": "add", "path": "/data/c", "value": "3"}]))
                    .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(p.data.unwrap()["c"], "3");

    // generateName.
    let mut g = cm("", &[]);
    g.metadata.name = None;
    g.metadata.generate_name = Some("gen-".into());
    let g = api.create(&PostParams::default(), &g).await.unwrap();
    assert!(g.name_any().starts_with("gen-") && g.name_any().len() == 9);

    // dryRun stores nothing.
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    api.create(&dry, &cm("dry", &[])).await.unwrap();
    assert!(api.get_opt("dry").await.unwrap().is_none());
    // A dry-run delete, its dryRun in the DeleteOptions body as kube-rs
    // sends it, deletes nothing, one object or a collection.
    api.create(&PostParams::default(), &cm("kept", &[]))
        .await
        .unwrap();
    api.delete("kept", &DeleteParams::default().dry_run())
        .await
        .unwrap();
    api.delete_collection(&DeleteParams::default().dry_run(), &ListParams::default())
        .await
        .unwrap();
    assert!(api.get_opt("kept").await.unwrap().is_some());
    api.delete("kept", &DeleteParams::default()).await.unwrap();

    // Listing with a label selector and pagination.
    for i in 0..5 {
        let mut c = cm(&format!("l{i}"), &[]);
        c.metadata.labels = Some(BTreeMap::from([("app".into(), "pg".into())]));
        api.create(&PostParams::default(), &c).await.unwrap();
    }
    let page = api
        .list(&ListParams::default().labels("app=pg").limit(2))
        .await
        .unwrap();
    assert_eq!(page.items.len(), 2);
    // Under a selector upstream does not count what remains, nor do we.
    assert_eq!(page.metadata.remaining_item_count, None);
    let token = page.metadata.continue_.clone().expect("continue token");
    let rest = api
        .list(
            &ListParams::default()
                .labels("app=pg")
                .limit(10)
                .continue_token(&token),
        )
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 3);
    assert!(rest.metadata.continue_.is_none());

    // Missing namespace → 404.
    let other: Api<ConfigMap> = Api::namespaced(h.client().await, "nope");
    let err = other
        .create(&PostParams::default(), &cm("x", &[]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 404),
        "{err:?}"
    );

    api.delete("k1", &DeleteParams::default()).await.unwrap();
    assert!(api.get_opt("k1").await.unwrap().is_none());

    // deletecollection with a selector.
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("app=pg"),
    )
    .await
    .unwrap();
    assert!(
        api.list(&ListParams::default().labels("app=pg"))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(
        api.get_opt(&g.name_any()).await.unwrap().is_some(),
        "others kept"
    );

    // Secrets fold stringData into data.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(h.client().await, "default");
    let s = secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"p": "pw"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(s.string_data.is_none());
    assert_eq!(s.data.unwrap()["p"].0, b"pw");
}

/// A read has the request's deadline too: a list that parses objects for
/// a selector stops once `?timeout=` passes and answers upstream's 504; a
/// timeout that is not a Go duration is a 400, as for a write.
#[tokio::test]
async fn a_selective_list_ends_at_the_request_s_deadline() {
    let h = Harness::start().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client().await, "default");
    for i in 0..3 {
        let mut c = cm(&format!("t{i}"), &[]);
        c.metadata.labels = Some(BTreeMap::from([("app".into(), "t".into())]));
        api.create(&PostParams::default(), &c).await.unwrap();
    }
    let path = |timeout: &str| {
        format!("/api/v1/namespaces/default/configmaps?labelSelector=app%3Dt&timeout={timeout}")
    };
    let once = h.client_without_retries().await;
    // Passed before the first object is parsed.
    let (code, status) = crate::common::raw(&once, "GET", &path("1ns"), None, b"").await;
    assert_eq!(code, 504, "{status}");
    assert_eq!(status["reason"], "Timeout");
    assert_eq!(
        status["message"],
        "Timeout: request did not complete within requested timeout - context deadline exceeded"
    );
    let (code, list) = crate::common::raw(&once, "GET", &path("30s"), None, b"").await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["items"].as_array().unwrap().len(), 3);
    let (code, status) = crate::common::raw(&once, "GET", &path("soon"), None, b"").await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "invalid timeout specified in the request URL - time: invalid duration \"soon\""
    );
}

/// A list read in pages is one list: later pages show (and count) the objects as they
/// stood at the first page's resourceVersion, whatever was written between
/// pages; a token older than the history the server keeps gets 410.
#[tokio::test]
async fn paginated_lists_are_consistent_across_continue_and_expire_with_410() {
    let h = Harness::start().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client().await, "default");
    for name in ["p1", "p2", "p3", "p4"] {
        api.create(&PostParams::default(), &cm(name, &[("v", "old")]))
            .await
            .unwrap();
    }
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    let names = |list: &kube::core::ObjectList<ConfigMap>| -> Vec<String> {
        list.items.iter().map(|c| c.name_any()).collect()
    };
    assert_eq!(names(&first), ["p1", "p2"]);
    assert_eq!(first.metadata.remaining_item_count, Some(2));
    let token = first.metadata.continue_.clone().expect("continue token");
    api.patch(
        "p3",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "new"}})),
    )
    .await
    .unwrap();
    api.delete("p4", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &cm("p25", &[]))
        .await
        .unwrap();
    let one = api
        .list(&ListParams::default().limit(1).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(&one), ["p3"]);
    // Counted as the list stood at its first page: p4, not p25.
    assert_eq!(one.metadata.remaining_item_count, Some(1));
    let rest = api
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(&rest), ["p3", "p4"]);
    assert_eq!(rest.metadata.remaining_item_count, None);
    assert_eq!(rest.items[0].data.as_ref().unwrap()["v"], "old");
    assert_eq!(
        rest.metadata.resource_version,
        first.metadata.resource_version
    );
    // A new list sees the writes.
    let now = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(names(&now), ["p1", "p2", "p25", "p3"]);

    // A list at exactly the first list's resourceVersion sees what it saw,
    // while the history holds it, as etcd serves a revision.
    let at = first.metadata.resource_version.clone().unwrap();
    let exact = ListParams::default()
        .at(&at)
        .matching(kube::api::VersionMatch::Exact);
    let then = api.list(&exact).await.unwrap();
    assert_eq!(names(&then), ["p1", "p2", "p3", "p4"]);
    assert_eq!(then.items[2].data.as_ref().unwrap()["v"], "old");
    assert_eq!(then.metadata.resource_version.as_deref(), Some(at.as_str()));
    // Ahead of the store, or at 0, as upstream answers (raw, by a client
    // that does not retry a 504; kube-rs refuses to send Exact at 0).
    let future = at.parse::<u64>().unwrap() + 1_000_000;
    let path = |rv: &str| {
        format!(
            "/api/v1/namespaces/default/configmaps?resourceVersion={rv}&resourceVersionMatch=Exact"
        )
    };
    let once = h.client_without_retries().await;
    let (code, body) =
        crate::common::raw(&once, "GET", &path(&future.to_string()), None, b"").await;
    assert_eq!(code, 504, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("Too large resource version"),
        "{body}"
    );
    let (code, body) = h.raw("GET", &path("0"), None, "").await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains(r#"resourceVersionMatch "exact" is forbidden for resourceVersion "0""#),
        "{body}"
    );

    // A replace from a copy of an object since recreated under its name
    // fails its uid precondition instead of overwriting the new object.
    let mut stale = api.get("p1").await.unwrap();
    api.delete("p1", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &cm("p1", &[("v", "reborn")]))
        .await
        .unwrap();
    stale.metadata.resource_version = None;
    let err = api
        .replace("p1", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.message.contains("Precondition failed: UID in precondition")),
        "{err:?}"
    );
    assert_eq!(api.get("p1").await.unwrap().data.unwrap()["v"], "reborn");

    h.server.expire_watches();
    let err = api
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 410 && s.message.contains("continue parameter is too old")),
        "{err:?}"
    );
}

#[tokio::test]
async fn deployment_generation_and_status_subresource() {
    let h = Harness::start().await;
    let api: Api<Deployment> = Api::namespaced(h.client().await, "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "nginx:1"}]}}},
        "status": {"replicas": 99}
    }))
    .unwrap();
    let d = api.create(&PostParams::default(), &d).await.unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    assert!(d.status.is_none(), "status is dropped on create");

    // Strategic merge patch of the container image, by merge key.
    let d = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}}}})),
        )
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(2));
    let containers = &d.spec.template.spec.as_ref().unwrap().containers;
    assert_eq!(containers.len(), 1);
    assert_eq!(containers[0].image.as_deref(), Some("nginx:2"));

    // Status through /status does not bump generation; through the main
    // resource it is ignored.
    let d = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(2));
    assert_eq!(d.status.as_ref().unwrap().replicas, Some(1));
    let d = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 7}})),
        )
        .await
        .unwrap();
    assert_eq!(d.status.as_ref().unwrap().replicas, Some(1));

    // Scale subresource.
    let s = api.get_scale("web").await.unwrap();
    assert_eq!(s.spec.unwrap().replicas, Some(1));
    assert_eq!(s.status.unwrap().selector.as_deref(), Some("app=web"));
    api.patch_scale(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await
    .unwrap();
    let d = api.get("web").await.unwrap();
    assert_eq!(d.spec.replicas, Some(3));
    assert_eq!(d.metadata.generation, Some(3));
}

#[tokio::test]
async fn crd_at_runtime_with_status_scale_and_deletion() {
    let h = Harness::start().await;
    let client = h.client().await;
    install_widget_crd(&client).await;
    let api: Api<Widget> = Api::namespaced(client.clone(), "default");
    let w = api
        .create(
            &PostParams::default(),
            &Widget::new(
                "w1",
                WidgetSpec {
                    size: 1,
                    replicas: 1,
                },
            ),
        )
        .await
        .unwrap();
    assert_eq!(w.metadata.generation, Some(1));
    let w = api
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true, "replicas": 1}})),
        )
        .await
        .unwrap();
    assert!(w.status.as_ref().unwrap().ready);
    assert_eq!(w.metadata.generation, Some(1));
    let w = api
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(w.metadata.generation, Some(2));
    assert!(
        w.status.as_ref().unwrap().ready,
        "status kept on main writes"
    );
    // Server-side apply on the status subresource, as controllers do.
    let w = api
        .patch_status(
            "w1",
            &PatchParams::apply("ctl").force(),
            &Patch::Apply(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}, "status": {"ready": false, "replicas": 1}})),
        )
        .await
        .unwrap();
    assert!(!w.status.as_ref().unwrap().ready);
    assert_eq!(w.spec.size, 2, "status apply leaves spec alone");
    assert!(
        w.metadata
            .managed_fields
            .unwrap_or_default()
            .iter()
            .any(|m| m.manager.as_deref() == Some("ctl")
                && m.subresource.as_deref() == Some("status")),
        "status apply is recorded with its subresource"
    );

    // Strategic merge patch is not supported for custom resources.
    let err = api
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 3}})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 415),
        "{err:?}"
    );

    // Structural schema: unknown fields are pruned (400 with
    // fieldValidation=Strict), wrong types are 422.
    let path = "/apis/example.com/v1/namespaces/default/widgets";
    let body = |name: &str, spec: serde_json::Value| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}).to_string()
    };
    let (code, obj) = h
        .raw(
            "POST",
            path,
            None,
            &body("pruned", json!({"size": 1, "bogus": true})),
        )
        .await;
    assert_eq!(code, 201);
    assert_eq!(
        obj["spec"],
        json!({"size": 1, "replicas": 0}),
        "pruned and defaulted"
    );
    let (code, _) = h
        .raw(
            "POST",
            &format!("{path}?fieldValidation=Strict"),
            None,
            &body("strict", json!({"size": 1, "bogus": true})),
        )
        .await;
    assert_eq!(code, 400);
    let (code, status) = h
        .raw("POST", path, None, &body("typed", json!({"size": "big"})))
        .await;
    assert_eq!(code, 422);
    assert_eq!(status["details"]["causes"][0]["field"], "spec.size");
    let (code, _) = h.raw("POST", path, None, &body("missing", json!({}))).await;
    assert_eq!(code, 422, "required field");

    let scale = api.get_scale("w1").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(1));
    api.replace_scale(
        "w1",
        &PostParams::default(),
        &serde_json::from_value(json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "w1", "namespace": "default"}, "spec": {"replicas": 4}})).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(api.get("w1").await.unwrap().spec.replicas, 4);

    // Deleting the CRD removes its objects and its API.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    eventually("CRD gone", Duration::from_secs(10), || {
        let crds = crds.clone();
        async move { crds.get_opt("widgets.example.com").await.unwrap().is_none() }
    })
    .await;
    let err = api.list(&ListParams::default()).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 404),
        "{err:?}"
    );

    // Recreating serves an empty collection.
    install_widget_crd(&client).await;
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn dynamic_objects_through_discovery() {
    let h = Harness::start().await;
    let client = h.client().await;
    install_widget_crd(&client).await;
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    let (ar, caps) = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(ar, _)| ar.kind == "Widget")
        .expect("Widget discovered");
    assert!(
        caps.subresources.iter().any(|(s, _)| s.plural == "status"
            || s.plural == "widgets/status"
            || s.kind == "Widget"),
        "{:?}",
        caps.subresources
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "dyn"}, "spec": {"size": 5}
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
    let got = api.get("dyn").await.unwrap();
    assert_eq!(got.data["spec"]["size"], 5);
    let (cm_ar, _) = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(ar, _)| ar.kind == "ConfigMap")
        .expect("ConfigMap discovered");
    let cms: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &cm_ar);
    assert!(
        cms.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // Aggregated discovery too.
    let agg = kube::Discovery::new(client).run_aggregated().await.unwrap();
    assert!(agg.groups().any(|g| g.name() == "example.com"));
}

async fn reflector_follows(h: &Harness, streaming: bool) {
    let client = h.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut cfg = watcher::Config::default().labels("app=refl");
    if streaming {
        cfg = cfg.streaming_lists();
    }
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(api.clone(), cfg))
        .default_backoff()
        .applied_objects();
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            let _ = ev;
        }
    });
    let labelled = |name: &str, v: &str| {
        let mut c = cm(name, &[("v", v)]);
        c.metadata.labels = Some(BTreeMap::from([("app".into(), "refl".into())]));
        c
    };
    api.create(&PostParams::default(), &labelled("r1", "1"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &labelled("r2", "1"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("unlabelled", &[]))
        .await
        .unwrap();
    let r = reader.clone();
    eventually("reflector sees r1 and r2", Duration::from_secs(10), || {
        let r = r.clone();
        async move { r.state().len() == 2 }
    })
    .await;

    // Force every held resourceVersion to expire, then change things while
    // the watcher has to relist.
    h.server.expire_watches();
    api.patch(
        "r1",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await
    .unwrap();
    api.delete("r2", &DeleteParams::default()).await.unwrap();
    // r3 enters the selector through a label change.
    api.create(&PostParams::default(), &cm("r3", &[]))
        .await
        .unwrap();
    api.patch(
        "r3",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "refl"}}})),
    )
    .await
    .unwrap();
    let r = reader.clone();
    eventually(
        "reflector converges after 410",
        Duration::from_secs(15),
        || {
            let r = r.clone();
            async move {
                let s = r.state();
                let names: Vec<String> = s.iter().map(|o| o.name_any()).collect();
                s.len() == 2
                    && names.contains(&"r1".to_string())
                    && names.contains(&"r3".to_string())
                    && s.iter()
                        .any(|o| o.name_any() == "r1" && o.data.as_ref().unwrap()["v"] == "2")
            }
        },
    )
    .await;
    // r1 leaves the selector.
    api.patch(
        "r1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}})),
    )
    .await
    .unwrap();
    let r = reader.clone();
    eventually("r1 leaves", Duration::from_secs(10), || {
        let r = r.clone();
        async move { r.state().len() == 1 }
    })
    .await;
    task.abort();
}

#[tokio::test]
async fn watcher_and_reflector_list_then_watch() {
    let h = Harness::start().await;
    reflector_follows(&h, false).await;
}

#[tokio::test]
async fn watcher_and_reflector_streaming_lists() {
    let h = Harness::start().await;
    reflector_follows(&h, true).await;
}

#[tokio::test]
async fn server_side_apply_removal_and_conflicts() {
    let h = Harness::start().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client().await, "default");
    let apply = |mgr: &str, force: bool| {
        let mut p = PatchParams::apply(mgr);
        p.force = force;
        p
    };
    let body = |data: serde_json::Value| {
        Patch::Apply(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": data}),
        )
    };
    let c = api
        .patch(
            "ssa",
            &apply("alice", false),
            &body(json!({"a": "1", "b": "2"})),
        )
        .await
        .unwrap();
    assert_eq!(c.data.as_ref().unwrap().len(), 2);
    // alice stops applying b → it is removed.
    let c = api
        .patch("ssa", &apply("alice", false), &body(json!({"a": "1"})))
        .await
        .unwrap();
    assert_eq!(
        c.data.as_ref().unwrap().keys().collect::<Vec<_>>(),
        vec!["a"]
    );
    // bob changing alice's field conflicts…
    let err = api
        .patch("ssa", &apply("bob", false), &body(json!({"a": "9"})))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"),
        "{err:?}"
    );
    // …unless forced, which transfers ownership.
    let c = api
        .patch("ssa", &apply("bob", true), &body(json!({"a": "9"})))
        .await
        .unwrap();
    assert_eq!(c.data.as_ref().unwrap()["a"], "9");
    // alice no longer owns a, so dropping it from her config keeps bob's value.
    let c = api
        .patch("ssa", &apply("alice", false), &body(json!({})))
        .await
        .unwrap();
    assert_eq!(c.data.as_ref().unwrap()["a"], "9");
    // Apply without a field manager is rejected.
    let err = api
        .patch("ssa", &PatchParams::default(), &body(json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422 || s.code == 400),
        "{err:?}"
    );
}

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

#[tokio::test]
async fn finalizer_helper_end_to_end() {
    let h = Harness::start().await;
    let api: Api<ConfigMap> = Api::namespaced(h.client().await, "default");
    api.create(&PostParams::default(), &cm("fin", &[]))
        .await
        .unwrap();
    const NAME: &str = "example.com/cleanup";
    let cleaned = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let run = |obj: ConfigMap| {
        let api = api.clone();
        let cleaned = cleaned.clone();
        async move {
            finalizer(&api, NAME, Arc::new(obj), |ev| async move {
                if let FinalizerEvent::Cleanup(_) = ev {
                    cleaned.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                Ok::<_, Never>(kube::runtime::controller::Action::await_change())
            })
            .await
            .expect("finalizer step")
        }
    };
    // First pass adds the finalizer (JSON patch with `test` on an absent path).
    run(api.get("fin").await.unwrap()).await;
    let obj = api.get("fin").await.unwrap();
    assert_eq!(obj.finalizers(), &[NAME.to_string()]);
    run(obj).await;
    // Deletion waits on the finalizer.
    api.delete("fin", &DeleteParams::default()).await.unwrap();
    let obj = api.get("fin").await.unwrap();
    assert!(obj.metadata.deletion_timestamp.is_some());
    // Adding a new finalizer while deleting is refused.
    let err = api
        .patch(
            "fin",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": [NAME, "example.com/other"]}})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422),
        "{err:?}"
    );
    run(obj).await;
    assert!(cleaned.load(std::sync::atomic::Ordering::SeqCst));
    assert!(
        api.get_opt("fin").await.unwrap().is_none(),
        "removing the last finalizer deletes"
    );
}

#[tokio::test]
async fn events_recorder_publishes_and_describe_can_find_them() {
    let h = Harness::start().await;
    let client = h.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let c = api
        .create(&PostParams::default(), &cm("evt", &[]))
        .await
        .unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "test-controller".into(),
            instance: None,
        },
    );
    let reference = c.object_ref(&());
    let ev = KEvent {
        type_: EventType::Normal,
        reason: "Tested".into(),
        note: Some("hello".into()),
        action: "Test".into(),
        secondary: None,
    };
    recorder.publish(&ev, &reference).await.unwrap();
    // A repeat patches the series instead of creating another event.
    recorder.publish(&ev, &reference).await.unwrap();
    let core: Api<CoreEvent> = Api::namespaced(client, "default");
    let list = core
        .list(&ListParams::default().fields(&format!(
            "involvedObject.name=evt,involvedObject.kind=ConfigMap,involvedObject.uid={}",
            c.uid().unwrap()
        )))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1, "{:?}", list.items);
    let e = &list.items[0];
    assert_eq!(e.reason.as_deref(), Some("Tested"));
    assert_eq!(e.message.as_deref(), Some("hello"));
    assert_eq!(e.series.as_ref().and_then(|s| s.count), Some(2));
}

#[tokio::test]
async fn garbage_collection_and_namespace_deletion() {
    use k8s_openapi::api::core::v1::Namespace;
    let h = Harness::start().await;
    let client = h.client().await;
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "gc"}})).unwrap(),
    )
    .await
    .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "gc");
    let owner = api
        .create(&PostParams::default(), &cm("owner", &[]))
        .await
        .unwrap();
    let owned = |name: &str| {
        let mut c = cm(name, &[]);
        c.metadata.owner_references = Some(vec![owner.controller_owner_ref(&()).unwrap()]);
        c
    };
    api.create(&PostParams::default(), &owned("child1"))
        .await
        .unwrap();
    // Background: the owner goes at once, the child shortly after.
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    let a = api.clone();
    eventually("child collected", Duration::from_secs(10), || {
        let a = a.clone();
        async move { a.get_opt("child1").await.unwrap().is_none() }
    })
    .await;

    // Foreground: the owner waits for its blocking dependents.
    let owner = api
        .create(&PostParams::default(), &cm("owner2", &[]))
        .await
        .unwrap();
    let mut child = cm("child2", &[]);
    let mut blocking = owner.controller_owner_ref(&()).unwrap();
    blocking.block_owner_deletion = Some(true);
    child.metadata.owner_references = Some(vec![blocking]);
    child.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &child).await.unwrap();
    api.delete("owner2", &DeleteParams::foreground())
        .await
        .unwrap();
    let o = api.get("owner2").await.unwrap();
    assert!(o.finalizers().contains(&"foregroundDeletion".to_string()));
    let a = api.clone();
    eventually("child marked for deletion", Duration::from_secs(10), || {
        let a = a.clone();
        async move {
            a.get("child2")
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_some()
        }
    })
    .await;
    assert!(
        api.get_opt("owner2").await.unwrap().is_some(),
        "owner waits"
    );
    api.patch(
        "child2",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    let a = api.clone();
    eventually("owner2 gone", Duration::from_secs(10), || {
        let a = a.clone();
        async move { a.get_opt("owner2").await.unwrap().is_none() }
    })
    .await;

    // Orphan: the child stays without its owner reference.
    let owner = api
        .create(&PostParams::default(), &cm("owner3", &[]))
        .await
        .unwrap();
    let mut child = cm("child3", &[]);
    child.metadata.owner_references = Some(vec![owner.controller_owner_ref(&()).unwrap()]);
    api.create(&PostParams::default(), &child).await.unwrap();
    api.delete("owner3", &DeleteParams::orphan()).await.unwrap();
    let a = api.clone();
    eventually("owner3 gone", Duration::from_secs(10), || {
        let a = a.clone();
        async move { a.get_opt("owner3").await.unwrap().is_none() }
    })
    .await;
    let c = api.get("child3").await.unwrap();
    assert!(c.metadata.owner_references.unwrap_or_default().is_empty());

    // Namespace deletion empties it, then it goes.
    nss.delete("gc", &DeleteParams::default()).await.unwrap();
    let n = nss.clone();
    eventually("namespace gone", Duration::from_secs(10), || {
        let n = n.clone();
        async move { n.get_opt("gc").await.unwrap().is_none() }
    })
    .await;
    let err = api
        .create(&PostParams::default(), &cm("late", &[]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 404),
        "{err:?}"
    );
}

#[tokio::test]
async fn persistence_survives_restart() {
    let data = tempfile::tempdir().unwrap();
    let config = wasmctrl_apiserver::Config {
        data_dir: Some(data.path().to_path_buf()),
        ..Default::default()
    };
    let h = Harness::start_with(config.clone()).await;
    let client = h.client().await;
    install_widget_crd(&client).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &cm("kept", &[("k", "v")]))
        .await
        .unwrap();
    let widgets: Api<Widget> = Api::namespaced(client, "default");
    widgets
        .create(
            &PostParams::default(),
            &Widget::new(
                "w",
                WidgetSpec {
                    size: 3,
                    replicas: 0,
                },
            ),
        )
        .await
        .unwrap();
    let rv_before = h.server.resource_version();
    let (token, ca) = (h.server.token().to_string(), h.server.ca_pem().to_string());
    h.server.shutdown().await;

    let h = Harness::start_with(config).await;
    assert!(h.server.resource_version() >= rv_before);
    assert_eq!(h.server.token(), token, "credentials persist with the data");
    assert_eq!(h.server.ca_pem(), ca);
    let client = h.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let kept = api.get("kept").await.unwrap();
    assert_eq!(kept.data.unwrap()["k"], "v");
    let widgets: Api<Widget> = Api::namespaced(client, "default");
    assert_eq!(widgets.get("w").await.unwrap().spec.size, 3);
    let c = api
        .create(&PostParams::default(), &cm("new", &[]))
        .await
        .unwrap();
    let rv: u64 = c.resource_version().unwrap().parse().unwrap();
    assert!(
        rv > rv_before,
        "resourceVersions keep increasing across restarts"
    );
}

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct ReconcileError(#[from] kube::Error);

/// A kube-runtime Controller, the way wasmctrl's host drives reconcilers:
/// it owns a ConfigMap per Widget (server-side apply), reports status, and
/// the garbage collector removes the ConfigMap with its Widget.
#[tokio::test]
async fn controller_runtime_end_to_end() {
    use kube::runtime::controller::{Action, Controller};
    let h = Harness::start().await;
    let client = h.client().await;
    install_widget_crd(&client).await;
    let widgets: Api<Widget> = Api::namespaced(client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    let reconcile = |w: Arc<Widget>, client: Arc<kube::Client>| async move {
        let ns = w.namespace().unwrap();
        let cms: Api<ConfigMap> = Api::namespaced((*client).clone(), &ns);
        let owner = w.controller_owner_ref(&()).unwrap();
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{}-cfg", w.name_any()), "ownerReferences": [owner]},
            "data": {"size": w.spec.size.to_string()},
        });
        cms.patch(
            &format!("{}-cfg", w.name_any()),
            &PatchParams::apply("widget-ctl").force(),
            &Patch::Apply(cm),
        )
        .await?;
        let api: Api<Widget> = Api::namespaced((*client).clone(), &ns);
        api.patch_status(
            &w.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true, "replicas": w.spec.size}})),
        )
        .await?;
        Ok::<_, ReconcileError>(Action::await_change())
    };
    let controller = Controller::new(widgets.clone(), watcher::Config::default())
        .owns(cms.clone(), watcher::Config::default())
        .run(
            reconcile,
            |_, _, _| Action::await_change(),
            Arc::new(client.clone()),
        )
        .for_each(|_| async {});
    let task = tokio::spawn(controller);

    widgets
        .create(
            &PostParams::default(),
            &Widget::new(
                "c1",
                WidgetSpec {
                    size: 2,
                    replicas: 0,
                },
            ),
        )
        .await
        .unwrap();
    let c = cms.clone();
    eventually(
        "owned ConfigMap reconciled",
        Duration::from_secs(15),
        || {
            let c = c.clone();
            async move {
                c.get_opt("c1-cfg")
                    .await
                    .unwrap()
                    .and_then(|cm| cm.data)
                    .is_some_and(|d| d["size"] == "2")
            }
        },
    )
    .await;
    // A spec change is reconciled again; status writes do not loop forever
    // (no-op status patches emit no events).
    widgets
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 5}})),
        )
        .await
        .unwrap();
    let c = cms.clone();
    eventually("spec change reconciled", Duration::from_secs(15), || {
        let c = c.clone();
        async move {
            c.get_opt("c1-cfg")
                .await
                .unwrap()
                .and_then(|cm| cm.data)
                .is_some_and(|d| d["size"] == "5")
        }
    })
    .await;
    let w = widgets.clone();
    eventually("status reported", Duration::from_secs(15), || {
        let w = w.clone();
        async move {
            w.get("c1")
                .await
                .unwrap()
                .status
                .is_some_and(|s| s.ready && s.replicas == 5)
        }
    })
    .await;
    // Deleting the owned ConfigMap makes the controller recreate it.
    cms.delete("c1-cfg", &DeleteParams::default())
        .await
        .unwrap();
    let c = cms.clone();
    eventually("owned ConfigMap recreated", Duration::from_secs(15), || {
        let c = c.clone();
        async move { c.get_opt("c1-cfg").await.unwrap().is_some() }
    })
    .await;
    task.abort();
    widgets
        .delete("c1", &DeleteParams::default())
        .await
        .unwrap();
    let c = cms.clone();
    eventually("owned ConfigMap collected", Duration::from_secs(15), || {
        let c = c.clone();
        async move { c.get_opt("c1-cfg").await.unwrap().is_none() }
    })
    .await;
}
