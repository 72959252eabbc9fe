//! Native unit tests. The `kube` and `context` imports only exist inside a
//! component, so these run against [`crate::testing::FakeCluster`] (see
//! `host.rs`) and check both the calls the SDK makes and their effect.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::events::{EventType, Recorder};
use crate::finalizer::{Event, Plan, plan};
use crate::testing::FakeCluster;
use crate::{
    Action, Api, ApiError, Error, Metadata, ObjectKey, Patch, PatchOp, Reconciler, Resource,
    conditions, finalizer,
};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GadgetSpec {
    pub size: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GadgetStatus {
    pub conditions: Vec<Condition>,
}

crate::custom_resource! {
    /// A test kind.
    pub struct Gadget {
        group: "test.wasmctrl.dev",
        version: "v1",
        plural: "gadgets",
        scope: Namespaced,
        spec: GadgetSpec,
        status: GadgetStatus,
    }
}

crate::custom_resource! {
    pub struct Cluster {
        group: "test.wasmctrl.dev",
        version: "v1beta1",
        plural: "clusters",
        scope: Cluster,
        spec: GadgetSpec
    }
}

/// Same group and kind as [`Gadget`], another spec: reading a Gadget as
/// this fails.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OtherSpec {
    pub size: String,
}

mod other {
    crate::custom_resource! {
        pub struct Gadget {
            group: "test.wasmctrl.dev",
            version: "v1",
            plural: "gadgets",
            scope: Namespaced,
            spec: super::OtherSpec,
        }
    }
}

const FIN: &str = "test.wasmctrl.dev/cleanup";
const DELETED: &str = "2025-01-01T00:00:00Z";

fn gadget(meta: serde_json::Value) -> Gadget {
    serde_json::from_value(json!({"metadata": meta, "spec": {"size": 1}})).unwrap()
}

fn gadgets() -> Api<Gadget> {
    Api::namespaced("ns")
}

// ---- typed resources ----

#[test]
fn custom_resource_serializes_api_version_and_kind() {
    let g = Gadget::new("g", GadgetSpec { size: 3 });
    assert_eq!(
        serde_json::to_value(&g).unwrap(),
        json!({"apiVersion": "test.wasmctrl.dev/v1", "kind": "Gadget",
               "metadata": {"name": "g"}, "spec": {"size": 3}})
    );
    assert_eq!(
        Gadget::gvk(),
        crate::Gvk::new("test.wasmctrl.dev", "v1", "Gadget")
    );
    assert_eq!(Gadget::plural(), "gadgets");
    assert_eq!(Cluster::api_version(), "test.wasmctrl.dev/v1beta1");
    let c: Cluster =
        serde_json::from_value(json!({"spec": {"size": 1}, "status": {"x": 1}})).unwrap();
    assert_eq!(c.status, Some(crate::NoStatus {}));
}

#[test]
fn custom_resource_deserializes_with_or_without_type_meta() {
    let full: Gadget = serde_json::from_value(json!({
        "apiVersion": "test.wasmctrl.dev/v1", "kind": "Gadget",
        "metadata": {"name": "g", "namespace": "ns", "uid": "u1"},
        "spec": {"size": 2}, "status": {"conditions": []}
    }))
    .unwrap();
    assert_eq!(full.spec.size, 2);
    assert_eq!(full.status, Some(GadgetStatus::default()));
    let bare: Gadget =
        serde_json::from_value(json!({"metadata": {"name": "g"}, "spec": {"size": 2}})).unwrap();
    assert_eq!(bare.status, None);
    assert_eq!(full.key(), ObjectKey::namespaced("ns", "g"));
}

#[test]
fn controller_owner_ref_needs_a_uid() {
    assert!(
        Gadget::new("g", GadgetSpec { size: 1 })
            .controller_owner_ref()
            .is_none()
    );
    let owner = gadget(json!({"name": "g", "uid": "u1"}))
        .controller_owner_ref()
        .unwrap();
    assert_eq!(
        serde_json::to_value(owner).unwrap(),
        json!({"apiVersion": "test.wasmctrl.dev/v1", "kind": "Gadget", "name": "g",
               "uid": "u1", "controller": true, "blockOwnerDeletion": true})
    );
}

// ---- Api ----

#[test]
fn get_opt_maps_not_found_to_none() {
    let cluster = FakeCluster::new();
    let api = Api::<ConfigMap>::namespaced("ns");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("there".into());
    let created = api.create(&cm).unwrap();
    assert!(created.metadata.uid.is_some());
    assert_eq!(api.get_opt("there").unwrap().unwrap().name(), "there");
    assert!(api.get_opt("missing").unwrap().is_none());
    assert!(api.get("missing").unwrap_err().is_not_found());
    let calls = cluster.calls();
    assert_eq!(calls[1].kind, ConfigMap::gvk());
    assert_eq!(
        (calls[1].verb, calls[1].namespace.as_deref()),
        ("get", Some("ns"))
    );
    assert!(matches!(api.create(&cm), Err(ApiError::AlreadyExists(_))));
}

#[test]
fn get_as_reads_a_view_of_the_object() {
    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Size {
        spec: GadgetSpec,
    }
    #[derive(serde::Deserialize, Debug)]
    struct Colour {
        #[allow(dead_code)]
        colour: String,
    }
    let cluster = FakeCluster::new();
    gadgets()
        .create(&Gadget::new("g", GadgetSpec { size: 4 }))
        .unwrap();
    let view: Size = gadgets().get_as("g").unwrap();
    assert_eq!(
        view,
        Size {
            spec: GadgetSpec { size: 4 }
        }
    );
    assert_eq!(
        gadgets().get_opt_as::<Size>("g").unwrap(),
        Some(Size {
            spec: GadgetSpec { size: 4 }
        })
    );
    assert_eq!(gadgets().get_opt_as::<Size>("missing").unwrap(), None);
    assert!(
        gadgets()
            .get_as::<Size>("missing")
            .unwrap_err()
            .is_not_found()
    );
    // A view that needs a field the object lacks says which kind it was.
    let err = gadgets().get_as::<Colour>("g").unwrap_err();
    assert!(
        matches!(&err, ApiError::Serialization(m) if m.contains("Gadget") && m.contains("colour")),
        "{err:?}"
    );
    let calls = cluster.calls();
    assert_eq!(
        (
            calls[1].verb,
            calls[1].kind.clone(),
            calls[1].namespace.as_deref()
        ),
        ("get", Gadget::gvk(), Some("ns"))
    );
}

#[test]
fn a_reply_of_the_wrong_shape_is_a_serialization_error() {
    let _cluster = FakeCluster::new();
    gadgets()
        .create(&Gadget::new("g", GadgetSpec { size: 1 }))
        .unwrap();
    let err = Api::<other::Gadget>::namespaced("ns").get("g").unwrap_err();
    assert!(matches!(err, ApiError::Serialization(_)), "{err:?}");
    assert!(Error::from(err).is_permanent());
}

#[test]
fn list_filters_by_namespace_and_labels() {
    let cluster = FakeCluster::new();
    for (ns, name, labels) in [
        ("a", "one", json!({"app": "x"})),
        ("a", "two", json!({"app": "y"})),
        ("b", "three", json!({"app": "x", "tier": "web"})),
    ] {
        let g: Gadget = serde_json::from_value(
            json!({"metadata": {"name": name, "labels": labels}, "spec": {"size": 1}}),
        )
        .unwrap();
        Api::<Gadget>::namespaced(ns).create(&g).unwrap();
    }
    let names = |gs: Vec<Gadget>| gs.iter().map(|g| g.name().to_string()).collect::<Vec<_>>();
    assert_eq!(
        names(Api::<Gadget>::all().list_by_labels("app=x").unwrap()),
        ["one", "three"]
    );
    assert_eq!(
        names(Api::<Gadget>::namespaced("a").list().unwrap()),
        ["one", "two"]
    );
    assert_eq!(
        names(Api::<Gadget>::all().list_by_labels("app!=y,tier").unwrap()),
        ["three"]
    );
    let last = cluster.calls().pop().unwrap();
    assert_eq!(
        (last.verb, last.namespace, last.body),
        ("list", None, json!("app!=y,tier"))
    );
}

#[test]
fn apply_sends_the_typed_object_as_a_server_side_apply() {
    let cluster = FakeCluster::new();
    let mut d = Deployment::default();
    d.metadata.name = Some("web".into());
    d.spec.replicas = Some(2);
    let stored = Api::<Deployment>::namespaced("ns")
        .apply(&d, "mgr", true)
        .unwrap();
    assert_eq!(stored.metadata.generation, Some(1));
    let call = &cluster.calls()[0];
    assert_eq!(
        (call.verb, call.name.as_str(), call.patch.as_str()),
        ("patch", "web", "apply mgr force=true")
    );
    assert_eq!(call.kind, Deployment::gvk());
    assert_eq!(call.body["apiVersion"], "apps/v1");
    assert_eq!(call.body["kind"], "Deployment");

    // Applying again with a new spec updates it.
    d.spec.replicas = Some(3);
    let stored = Api::<Deployment>::namespaced("ns")
        .apply(&d, "mgr", true)
        .unwrap();
    assert_eq!(
        (stored.spec.replicas, stored.metadata.generation),
        (Some(3), Some(2))
    );

    let nameless = Deployment::default();
    let err = Api::<Deployment>::namespaced("ns")
        .apply(&nameless, "mgr", true)
        .unwrap_err();
    assert!(matches!(err, ApiError::Invalid(_)));
}

#[test]
fn apply_status_sends_only_type_meta_name_and_status() {
    let cluster = FakeCluster::new();
    gadgets()
        .create(&Gadget::new("g", GadgetSpec { size: 1 }))
        .unwrap();
    let status = GadgetStatus {
        conditions: vec![conditions::new("Ready", true, "Done", "")],
    };
    let stored = gadgets().apply_status("g", &status, "mgr", false).unwrap();
    assert_eq!(stored.status, Some(status));
    assert_eq!(
        stored.metadata.generation,
        Some(1),
        "status writes keep the generation"
    );
    let call = cluster.calls().pop().unwrap();
    assert_eq!(
        (call.verb, call.patch.as_str()),
        ("patch-status", "apply mgr force=false")
    );
    assert_eq!(call.body["metadata"], json!({"name": "g"}));
    assert_eq!(call.body["kind"], "Gadget");
    assert!(call.body.get("spec").is_none());
}

#[test]
fn patches_serialize_as_their_kind() {
    let cluster = FakeCluster::new();
    gadgets()
        .create(&Gadget::new("g", GadgetSpec { size: 1 }))
        .unwrap();
    let merged = gadgets()
        .patch("g", &Patch::Merge(json!({"spec": {"size": 2}})))
        .unwrap();
    assert_eq!(merged.spec.size, 2);
    let patched = gadgets()
        .patch(
            "g",
            &Patch::Json(vec![
                PatchOp::test("/spec/size", 2),
                PatchOp::replace("/spec/size", 3),
            ]),
        )
        .unwrap();
    assert_eq!(patched.spec.size, 3);
    let calls = cluster.calls();
    assert_eq!(calls[1].patch, "merge");
    assert_eq!(calls[2].patch, "json");
    assert_eq!(
        calls[2].body,
        json!([{"op": "test", "path": "/spec/size", "value": 2},
               {"op": "replace", "path": "/spec/size", "value": 3}])
    );
    let stale = gadgets().patch("g", &Patch::Json(vec![PatchOp::test("/spec/size", 2)]));
    assert!(matches!(stale, Err(ApiError::Invalid(_))));
    assert_eq!(crate::escape_pointer("a/b~c"), "a~1b~0c");
}

#[test]
fn replace_with_a_stale_resource_version_conflicts() {
    let _cluster = FakeCluster::new();
    let created = gadgets()
        .create(&Gadget::new("g", GadgetSpec { size: 1 }))
        .unwrap();
    let mut first = created.clone();
    first.spec.size = 2;
    gadgets().replace("g", &first).unwrap();
    let mut second = created;
    second.spec.size = 3;
    assert!(gadgets().replace("g", &second).unwrap_err().is_conflict());
}

#[test]
fn delete_reports_whether_the_object_existed() {
    let _cluster = FakeCluster::new();
    gadgets()
        .create(&Gadget::new("g", GadgetSpec { size: 1 }))
        .unwrap();
    assert!(gadgets().delete("g").unwrap());
    assert!(!gadgets().delete("g").unwrap());
}

#[test]
fn api_errors_are_transient_except_invalid_forbidden_and_serialization() {
    for e in [
        ApiError::NotFound(String::new()),
        ApiError::Conflict(String::new()),
        ApiError::AlreadyExists(String::new()),
        ApiError::Timeout(String::new()),
        ApiError::Unavailable(String::new()),
        ApiError::Other(String::new()),
    ] {
        assert!(!Error::from(e.clone()).is_permanent(), "{e}");
    }
    for e in [
        ApiError::Invalid("bad".into()),
        ApiError::Forbidden("no".into()),
        ApiError::Serialization("shape".into()),
    ] {
        assert!(Error::from(e.clone()).is_permanent(), "{e}");
    }
    use crate::bindings::wasmctrl::reconciler::types as wit;
    assert_eq!(
        ApiError::from(wit::ApiError::Forbidden("x".into())).to_string(),
        "forbidden: x"
    );
}

// ---- finalizer ----

fn ops(plan: Plan) -> serde_json::Value {
    match plan {
        Plan::Add(ops) | Plan::Cleanup(ops) => serde_json::to_value(ops).unwrap(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn finalizer_plan_guards_every_write_with_a_test() {
    assert_eq!(
        ops(plan(&gadget(json!({"name": "g"})), FIN)),
        json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
               {"op": "add", "path": "/metadata/finalizers", "value": [FIN]}])
    );
    assert_eq!(
        ops(plan(
            &gadget(json!({"name": "g", "finalizers": ["a"]})),
            FIN
        )),
        json!([{"op": "test", "path": "/metadata/finalizers", "value": ["a"]},
               {"op": "add", "path": "/metadata/finalizers/-", "value": FIN}])
    );
    assert_eq!(
        plan(&gadget(json!({"name": "g", "finalizers": [FIN]})), FIN),
        Plan::Apply
    );
    let deleting =
        gadget(json!({"name": "g", "finalizers": ["a", FIN], "deletionTimestamp": DELETED}));
    assert_eq!(
        ops(plan(&deleting, FIN)),
        json!([{"op": "test", "path": "/metadata/finalizers/1", "value": FIN},
               {"op": "remove", "path": "/metadata/finalizers/1"}])
    );
    let not_ours = gadget(json!({"name": "g", "finalizers": ["a"], "deletionTimestamp": DELETED}));
    assert_eq!(plan(&not_ours, FIN), Plan::Nothing);
}

#[test]
fn finalizer_adds_itself_then_applies_the_patched_object() {
    let cluster = FakeCluster::new();
    let created = gadgets()
        .create(&Gadget::new("g", GadgetSpec { size: 1 }))
        .unwrap();
    let mut seen = None;
    let action = finalizer(&gadgets(), FIN, created, |event| {
        let Event::Apply(g) = event else {
            panic!("not deleting")
        };
        seen = g.meta().finalizers.clone();
        Ok(Action::requeue())
    })
    .unwrap();
    assert_eq!(action, Action::requeue());
    assert_eq!(seen, Some(vec![FIN.to_string()]));
    let calls = cluster.calls();
    assert_eq!(
        (calls.len(), calls[1].verb, calls[1].patch.as_str()),
        (2, "patch", "json")
    );
}

#[test]
fn finalizer_runs_cleanup_then_removes_itself_and_the_object_goes() {
    let _cluster = FakeCluster::new();
    let g = gadget(json!({"name": "g", "finalizers": ["other", FIN]}));
    gadgets().create(&g).unwrap();
    gadgets().delete("g").unwrap();
    let deleting = gadgets().get("g").unwrap();
    assert!(deleting.is_deleting());
    let mut cleaned = false;
    let action = finalizer(&gadgets(), FIN, deleting, |event| match event {
        Event::Cleanup(_) => {
            cleaned = true;
            Ok(Action::done())
        }
        Event::Apply(_) => panic!("deleting"),
    })
    .unwrap();
    assert!(cleaned);
    assert_eq!(action, Action::done());
    assert_eq!(
        gadgets().get("g").unwrap().meta().finalizers,
        Some(vec!["other".to_string()])
    );
    gadgets()
        .patch(
            "g",
            &Patch::Json(vec![PatchOp::remove("/metadata/finalizers/0")]),
        )
        .unwrap();
    assert!(gadgets().get_opt("g").unwrap().is_none());
}

#[test]
fn finalizer_keeps_itself_when_cleanup_fails() {
    let cluster = FakeCluster::new();
    let g = gadget(json!({"name": "g", "finalizers": [FIN]}));
    gadgets().create(&g).unwrap();
    gadgets().delete("g").unwrap();
    let deleting = gadgets().get("g").unwrap();
    cluster.clear_calls();
    let err = finalizer(&gadgets(), FIN, deleting, |_| {
        Err(Error::transient("external API down"))
    })
    .unwrap_err();
    assert_eq!(err, Error::transient("external API down"));
    assert!(cluster.calls().is_empty());
    assert!(gadgets().get_opt("g").unwrap().is_some());
}

#[test]
fn finalizer_turns_a_lost_race_into_a_transient_error() {
    let _cluster = FakeCluster::new();
    let stale = gadgets()
        .create(&Gadget::new("g", GadgetSpec { size: 1 }))
        .unwrap();
    // Someone else adds a finalizer after we read the object.
    gadgets()
        .patch(
            "g",
            &Patch::Merge(json!({"metadata": {"finalizers": ["theirs"]}})),
        )
        .unwrap();
    let err = finalizer(&gadgets(), FIN, stale, |_| panic!("not reached")).unwrap_err();
    assert!(!err.is_permanent(), "{err}");
    assert_eq!(
        gadgets().get("g").unwrap().meta().finalizers,
        Some(vec!["theirs".to_string()]),
        "the other writer's finalizer is not clobbered"
    );

    let cluster = FakeCluster::new();
    let fresh = gadgets()
        .create(&Gadget::new("g", GadgetSpec { size: 1 }))
        .unwrap();
    cluster.fail_next("patch", ApiError::Conflict("stale".into()));
    let err = finalizer(&gadgets(), FIN, fresh.clone(), |_| panic!("not reached")).unwrap_err();
    assert!(!err.is_permanent(), "{err}");
    cluster.fail_next("patch", ApiError::Forbidden("no patch".into()));
    let err = finalizer(&gadgets(), FIN, fresh, |_| panic!("not reached")).unwrap_err();
    assert!(err.is_permanent(), "{err}");
}

#[test]
fn finalizer_leaves_a_deleting_object_without_it_alone() {
    let cluster = FakeCluster::new();
    let deleting = gadget(json!({"name": "g", "deletionTimestamp": DELETED}));
    let action = finalizer(&gadgets(), FIN, deleting, |_| panic!("not ours")).unwrap();
    assert_eq!(action, Action::done());
    assert!(cluster.calls().is_empty());
}

// ---- garbage collection (the fake's, which the webapp tests rely on) ----

#[test]
fn deleting_an_owner_deletes_what_it_controls() {
    let _cluster = FakeCluster::new();
    let owner = gadgets()
        .create(&Gadget::new("g", GadgetSpec { size: 1 }))
        .unwrap();
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("owned".into());
    cm.metadata.owner_references = Some(vec![owner.controller_owner_ref().unwrap()]);
    let configmaps = Api::<ConfigMap>::namespaced("ns");
    configmaps.create(&cm).unwrap();
    gadgets().delete("g").unwrap();
    assert!(configmaps.get_opt("owned").unwrap().is_none());
}

// ---- conditions ----

fn at(seconds: i64) -> Time {
    Time(Timestamp::from_second(seconds).unwrap())
}

#[test]
fn condition_time_moves_only_when_the_status_changes() {
    let mut list = Vec::new();
    let first = Condition {
        last_transition_time: at(100),
        ..conditions::new("Ready", false, "Progressing", "0/2")
    };
    assert!(conditions::set(&mut list, first));
    assert!(!conditions::is_true(&list, "Ready"));

    // Same status, new message and generation: updated, time kept.
    let again = Condition {
        last_transition_time: at(200),
        observed_generation: Some(2),
        ..conditions::new("Ready", false, "Progressing", "1/2")
    };
    assert!(conditions::set(&mut list, again.clone()));
    let ready = conditions::get(&list, "Ready").unwrap();
    assert_eq!(
        (ready.last_transition_time.clone(), ready.message.as_str()),
        (at(100), "1/2")
    );
    assert_eq!(ready.observed_generation, Some(2));

    // Nothing new: no change.
    assert!(!conditions::set(&mut list, again));

    // Status flips: the time moves.
    let up = Condition {
        last_transition_time: at(300),
        ..conditions::new("Ready", true, "Available", "2/2")
    };
    assert!(conditions::set(&mut list, up));
    assert!(conditions::is_true(&list, "Ready"));
    assert_eq!(
        conditions::get(&list, "Ready")
            .unwrap()
            .last_transition_time,
        at(300)
    );

    // Other types are independent.
    assert!(conditions::set(
        &mut list,
        conditions::new("Degraded", false, "AsExpected", "")
    ));
    assert_eq!(list.len(), 2);
    assert!(conditions::remove(&mut list, "Degraded"));
    assert!(!conditions::remove(&mut list, "Degraded"));
}

#[test]
fn condition_times_are_whole_seconds() {
    let c = conditions::new("Ready", true, "Available", "");
    let text = serde_json::to_value(&c).unwrap()["lastTransitionTime"].clone();
    let back: Time = serde_json::from_value(text).unwrap();
    assert_eq!(back, c.last_transition_time);
    assert_eq!(c.status, "True");
}

// ---- events ----

#[test]
fn recorder_publishes_regarding_the_object() {
    let cluster = FakeCluster::new();
    let g = gadget(json!({"name": "g", "namespace": "ns"}));
    Recorder::new(&g)
        .publish(EventType::Warning, "Failed", "Reconcile", "it broke")
        .unwrap();
    let event = &cluster.events()[0];
    assert_eq!(event.kind, Gadget::gvk());
    assert_eq!(
        (event.namespace.as_deref(), event.name.as_str()),
        (Some("ns"), "g")
    );
    assert_eq!(
        event.body,
        json!({"type": "Warning", "reason": "Failed", "action": "Reconcile", "note": "it broke"})
    );
}

// ---- the fake's permission check, through a reconciler ----

struct ReadsGadgets;

impl Reconciler for ReadsGadgets {
    fn metadata() -> Metadata {
        Metadata::new("reads", "0.1.0", Gadget::gvk())
            .owns(Deployment::gvk())
            .permission(Gadget::group(), &[Gadget::plural()], &["get"])
    }

    fn reconcile(key: ObjectKey, ctx: &crate::Context) -> Result<Action, Error> {
        #[derive(Deserialize)]
        struct Settings {
            write: bool,
        }
        let api = Api::<Gadget>::namespaced(key.require_namespace()?);
        let g = api.get(&key.name)?;
        if ctx.settings::<Settings>()?.write {
            api.apply_status(g.name(), &GadgetStatus::default(), "reads", true)?;
        }
        Ok(Action::requeue_after(std::time::Duration::from_secs(
            u64::from(ctx.attempt()),
        )))
    }
}

#[test]
fn reconcile_is_held_to_the_declared_permissions() {
    let cluster = FakeCluster::new();
    gadgets()
        .create(&Gadget::new("g", GadgetSpec { size: 1 }))
        .unwrap();
    let key = ObjectKey::namespaced("ns", "g");

    cluster.set_settings(json!({"write": false}));
    cluster.set_attempt(7);
    assert_eq!(
        cluster.reconcile::<ReadsGadgets>(&key),
        Ok(Action::requeue_after(std::time::Duration::from_secs(7)))
    );

    cluster.set_settings(json!({"write": true}));
    cluster.clear_calls();
    let err = cluster.reconcile::<ReadsGadgets>(&key).unwrap_err();
    assert!(
        err.is_permanent() && err.message().contains("gadgets/status"),
        "{err}"
    );
    assert_eq!(
        cluster.permissions_used(),
        [
            ("get".into(), "test.wasmctrl.dev".into(), "gadgets".into()),
            (
                "patch".into(),
                "test.wasmctrl.dev".into(),
                "gadgets/status".into()
            ),
        ]
    );
    // Outside a reconcile (setting the scene), nothing is checked.
    gadgets()
        .apply_status("g", &GadgetStatus::default(), "test", true)
        .unwrap();
}

#[test]
fn metadata_names_typed_kinds() {
    let m = ReadsGadgets::metadata().into_wit();
    assert_eq!(m.for_.kind, "Gadget");
    assert_eq!(m.owns[0].group, "apps");
    assert_eq!(m.permissions[0].resources, ["gadgets"]);
}

#[test]
fn a_fake_cluster_reveals_only_what_its_entry_allows() {
    let cluster = FakeCluster::new();
    cluster.set_secret("shown", "v4lue", true);
    cluster.set_secret("hidden", "s3cret", false);
    assert_eq!(crate::secrets::reveal("shown").unwrap(), "v4lue");
    let hidden = crate::secrets::reveal("hidden").unwrap_err();
    assert!(
        matches!(&hidden, ApiError::Forbidden(m) if m.contains("reveal: true")),
        "{hidden}"
    );
    assert!(crate::secrets::reveal("nope").unwrap_err().is_not_found());
    assert_eq!(crate::secrets::placeholder("t"), "${secret:t}");
}
