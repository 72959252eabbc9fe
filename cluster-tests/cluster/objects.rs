//! Plugins as Kubernetes objects: WasmReconcilers created, edited and
//! deleted with kubectl start, swap and stop plugins; what an object may ask
//! for is bounded by the host's `maxGrant`; a refused version leaves the
//! previous one serving and the status says why; an object cannot take a
//! config plugin's name. Against the embedded API server, kubectl and a
//! real OCI registry.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wasmctrl::ops::source::oci::RegistryOptions;
use wasmctrl::sandbox::digest;
use wasmctrl_cluster_tests::{Cluster, configmap};
use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::host::{self, file_digest, insecure_registry, push_component};
use wasmctrl_testkit::registry::{PASSWORD, Registry, USER};
use wasmctrl_testkit::{admin, eventually};

/// The CRD as shipped.
const CRD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../deploy/crds/wasmreconciler.yaml"
);
const LIMIT: Duration = Duration::from_secs(60);

/// A host following WasmReconcilers, granting objects at most what the
/// stamp plugin needs in `default`; `plugins` is appended (config plugins).
/// The tests' registries listen on loopback, which objects reach only
/// where the host config allows it.
fn host_config(plugins: &str) -> String {
    host_config_allowing(r#"["127.0.0.1"]"#, plugins)
}

/// [`host_config`] with `allow_hosts` (a YAML flow sequence) as
/// `pluginsFrom.allowHosts`.
fn host_config_allowing(allow_hosts: &str, plugins: &str) -> String {
    format!(
        r#"
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
shutdownTimeout: 5s
pluginsFrom: {{ kind: WasmReconciler, allowHosts: {allow_hosts}, allowFileSources: true }}
maxGrant:
  - {{ group: "", resources: [configmaps], verbs: [get, list, watch, patch], namespaces: [default] }}
{plugins}"#
    )
}

/// A WasmReconciler `name` with `source` (YAML flow mapping) and `extra`
/// permissions beyond the stamp plugin's.
fn object(name: &str, source: &str, extra_permissions: &str) -> String {
    format!(
        r#"apiVersion: wasmctrl.dev/v1alpha1
kind: WasmReconciler
metadata:
  name: {name}
spec:
  source: {source}
  reconcileTimeout: 5s
  namespaces: [default]
  permissions:
    - {{ group: "", resources: [configmaps], verbs: [get, list, watch, patch] }}
{extra_permissions}"#
    )
}

/// The CRD installed with kubectl, as a user would, and served.
async fn install_crd(cluster: &Cluster) {
    cluster.kubectl(&["apply", "-f", CRD]);
    eventually("the WasmReconciler kind served", LIMIT, || async {
        cluster
            .kubectl_raw(&["get", "wasmreconcilers"])
            .status
            .success()
            .then_some(())
    })
    .await;
}

fn objects_api(cluster: &Cluster) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("wasmctrl.dev", "v1alpha1", "WasmReconciler");
    Api::all_with(
        cluster.client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "wasmreconcilers"),
    )
}

/// `.status` and `.metadata.generation` of WasmReconciler `name`.
async fn status_of(cluster: &Cluster, name: &str) -> Option<(Value, i64)> {
    let o = objects_api(cluster).get_opt(name).await.ok()??;
    Some((o.data.get("status")?.clone(), o.metadata.generation?))
}

/// (status, reason, message) of condition `kind`.
fn condition(status: &Value, kind: &str) -> (String, String, String) {
    let c = status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .cloned()
        .unwrap_or(Value::Null);
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (s("status"), s("reason"), s("message"))
}

/// Waits until the status of `name` passes `check`, and returns it.
async fn status_where(
    cluster: &Cluster,
    name: &str,
    what: &str,
    check: impl Fn(&Value, i64) -> bool,
) -> Value {
    let mut last = None;
    let found = tokio::time::timeout(LIMIT, async {
        loop {
            if let Some((s, generation)) = status_of(cluster, name).await {
                if check(&s, generation) {
                    return s;
                }
                last = Some(s);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("timed out waiting for {what}; last status: {last:#?}"))
}

fn ready_with(status: &Value, digest: &str, generation: i64) -> bool {
    condition(status, "Ready").0 == "True"
        && condition(status, "Degraded").0 == "False"
        && status["servingDigest"] == digest
        && status["observedGeneration"] == generation
}

async fn stamp_of(api: &Api<ConfigMap>, name: &str) -> Option<String> {
    api.get(name)
        .await
        .ok()?
        .metadata
        .labels?
        .get("wasmctrl.dev/stamp")
        .cloned()
}

async fn create_configmap(cluster: &Cluster, name: &str) -> Api<ConfigMap> {
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    api.create(&PostParams::default(), &configmap(name))
        .await
        .unwrap();
    api
}

async fn wait_stamp(api: &Api<ConfigMap>, name: &str, stamp: &str) {
    eventually(&format!("{name} stamped {stamp}"), LIMIT, || async {
        (stamp_of(api, name).await.as_deref() == Some(stamp)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_edits_and_deletes_a_wasmreconciler_from_a_private_registry() {
    let registry = Registry::start_with_auth();
    let cluster = Cluster::start().await;
    let docker = cluster.file(
        "docker.json",
        &format!(
            r#"{{"auths": {{"{}": {{"username": "{USER}", "password": "{PASSWORD}"}}}}}}"#,
            registry.addr
        ),
    );
    let pusher = RegistryOptions {
        docker_config: Some(docker),
        ..insecure_registry()
    };
    let (v1, v2) = (
        registry.reference("plugins/stamp:1"),
        registry.reference("plugins/stamp:2"),
    );
    push_component(&v1, artifacts::STAMP_V1, &pusher).await;
    push_component(&v2, artifacts::STAMP_V2, &pusher).await;
    install_crd(&cluster).await;
    let host = cluster.host(&host_config("")).await;
    let configmaps = create_configmap(&cluster, "cm-a").await;

    // The Secret does not exist yet: refused as transient, and retried.
    let source = format!("{{ oci: \"{v1}\", insecure: true, imagePullSecret: regcred }}");
    let file = cluster.file("stamp.yaml", &object("stamp", &source, ""));
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    let s = status_where(
        &cluster,
        "stamp",
        "the missing Secret in the status",
        |s, _| condition(s, "Degraded").1 == "SourceUnavailable",
    )
    .await;
    let (ready, _, message) = condition(&s, "Ready");
    assert_eq!(ready, "False");
    assert!(
        message.contains("default/regcred") && message.contains("no such Secret"),
        "{message}"
    );
    assert!(
        host.plugin("stamp").await.is_none(),
        "nothing runs without the component"
    );

    cluster.kubectl(&[
        "create",
        "secret",
        "docker-registry",
        "regcred",
        "--docker-server",
        &registry.addr.to_string(),
        "--docker-username",
        USER,
        "--docker-password",
        PASSWORD,
    ]);
    let s = status_where(&cluster, "stamp", "v1 serving", |s, g| {
        ready_with(s, &file_digest(artifacts::STAMP_V1), g) && g == 1
    })
    .await;
    assert_eq!(s["version"], "1.0.0");
    assert_eq!(s["source"], format!("oci://{v1}"));
    assert_eq!(s["pluginGeneration"], 1);
    assert_eq!(s["resolvedDigest"], s["servingDigest"]);
    wait_stamp(&configmaps, "cm-a", "v1").await;
    let table = cluster.kubectl(&["get", "wasmreconcilers"]);
    let header = table.lines().next().unwrap_or_default();
    for column in ["NAME", "VERSION", "DIGEST", "READY", "DEGRADED", "AGE"] {
        assert!(header.contains(column), "{table}");
    }
    let row = table
        .lines()
        .find(|l| l.starts_with("stamp "))
        .unwrap_or_default();
    assert!(
        row.contains("1.0.0")
            && row.contains(&file_digest(artifacts::STAMP_V1))
            && row.contains("True"),
        "{table}"
    );

    // An edit: generation 2, a rebuilt plugin on the same queue, v2 serving.
    cluster.kubectl(&[
        "patch",
        "wasmreconciler",
        "stamp",
        "--type",
        "merge",
        "-p",
        &format!(r#"{{"spec": {{"source": {{"oci": "{v2}"}}}}}}"#),
    ]);
    let s = status_where(&cluster, "stamp", "v2 serving", |s, g| {
        g == 2 && ready_with(s, &file_digest(artifacts::STAMP_V2), 2)
    })
    .await;
    assert_eq!(s["version"], "2.0.0");
    assert_eq!(s["pluginGeneration"], 2);
    let p = host
        .plugin("stamp")
        .await
        .expect("/plugins lists the object's plugin");
    assert_eq!(
        (p["version"].as_str(), p["generation"].as_u64()),
        (Some("2.0.0"), Some(2))
    );
    wait_stamp(&configmaps, "cm-a", "v2").await;

    // A delete drains and stops it, and its metric series leave with it:
    // object names come and go, and a gone name's series would pile up.
    let series_of_stamp = |text: &str| {
        text.lines()
            .filter(|l| !l.starts_with('#') && l.contains("\"stamp\""))
            .count()
    };
    let (_, before) = admin::http_get(host.admin, "/metrics").await;
    assert!(series_of_stamp(&before) >= 10, "{before}");
    cluster.kubectl(&["delete", "wasmreconciler", "stamp"]);
    eventually("the plugin stopped", LIMIT, || async {
        host.plugin("stamp").await.is_none().then_some(())
    })
    .await;
    eventually("its series dropped", LIMIT, || async {
        let (_, text) = admin::http_get(host.admin, "/metrics").await;
        (series_of_stamp(&text) == 0).then_some(())
    })
    .await;
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_beyond_max_grant_is_refused_naming_what_exceeds_it() {
    let cluster = Cluster::start().await;
    install_crd(&cluster).await;
    let host = cluster.host(&host_config("")).await;
    let source = format!("{{ file: {} }}", artifacts::STAMP_V1);
    let greedy = object(
        "greedy",
        &source,
        "    - { group: \"\", resources: [secrets], verbs: [get, list] }\n",
    );
    let file = cluster.file("greedy.yaml", &greedy);
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    let s = status_where(&cluster, "greedy", "the refusal", |s, g| {
        condition(s, "Degraded").0 == "True" && s["observedGeneration"] == g
    })
    .await;
    let (degraded, reason, message) = condition(&s, "Degraded");
    assert_eq!(
        (degraded.as_str(), reason.as_str()),
        ("True", "GrantExceedsMaxGrant")
    );
    for access in [
        "permissions[1]: get core/secrets in namespace default",
        "permissions[1]: list core/secrets in namespace default",
    ] {
        assert!(message.contains(access), "{message}");
    }
    assert!(!message.contains("permissions[0]"), "{message}");
    assert_eq!(condition(&s, "Ready").0, "False");
    assert!(
        host.plugin("greedy").await.is_none(),
        "a refused object runs nothing"
    );
    let refusals = admin::metric_value(
        host.admin,
        r#"wasmctrl_object_refusals_total{reason="GrantExceedsMaxGrant"}"#,
    )
    .await;
    assert!(refusals.is_some_and(|n| n >= 1.0), "{refusals:?}");

    // Within the ceiling, the same object runs.
    let file = cluster.file("greedy.yaml", &object("greedy", &source, ""));
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    let v1 = file_digest(artifacts::STAMP_V1);
    status_where(
        &cluster,
        "greedy",
        "the object within maxGrant serving",
        |s, g| g == 2 && ready_with(s, &v1, 2),
    )
    .await;

    // An edit beyond the ceiling (all namespaces) is refused; the running
    // spec stays.
    let patch = r#"{"spec": {"namespaces": null, "source": {"file": "STAMP_V2"}}}"#
        .replace("STAMP_V2", artifacts::STAMP_V2);
    cluster.kubectl(&[
        "patch",
        "wasmreconciler",
        "greedy",
        "--type",
        "merge",
        "-p",
        &patch,
    ]);
    let s = status_where(&cluster, "greedy", "the refused edit", |s, g| {
        g == 3 && s["observedGeneration"] == 3 && condition(s, "Degraded").0 == "True"
    })
    .await;
    let (_, reason, message) = condition(&s, "Degraded");
    assert_eq!(reason, "GrantExceedsMaxGrant", "{message}");
    assert!(
        message.contains("permissions[0]: patch core/configmaps in all namespaces")
            && message.contains(&format!("{v1} (version 1.0.0)"))
            && message.contains("keeps serving"),
        "{message}"
    );
    assert_eq!(condition(&s, "Ready").0, "True");
    assert_eq!(s["servingDigest"], v1.as_str());
    let p = host.plugin("greedy").await.unwrap();
    assert_eq!(
        (p["version"].as_str(), p["generation"].as_u64()),
        (Some("1.0.0"), Some(1))
    );
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_rate_beyond_max_api_qps_is_refused_naming_both_numbers_while_other_objects_run() {
    let cluster = Cluster::start().await;
    install_crd(&cluster).await;
    let config = host_config("").replace(
        "allowFileSources: true }",
        "allowFileSources: true, maxApiQps: 50 }",
    );
    assert!(config.contains("maxApiQps: 50"), "{config}");
    let host = cluster.host(&config).await;
    let source = format!("{{ file: {} }}", artifacts::STAMP_V1);
    let configmaps = create_configmap(&cluster, "cm-q").await;
    let modest = object(
        "modest",
        &source,
        "  limits: { apiQps: 50, apiBurst: 100 }\n",
    );
    let file = cluster.file("modest.yaml", &modest);
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    wait_stamp(&configmaps, "cm-q", "v1").await;

    let hungry = object("hungry", &source, "  limits: { apiQps: 20000 }\n");
    let file = cluster.file("hungry.yaml", &hungry);
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    let s = status_where(&cluster, "hungry", "the refusal", |s, g| {
        condition(s, "Degraded").0 == "True" && s["observedGeneration"] == g
    })
    .await;
    let (_, reason, message) = condition(&s, "Degraded");
    assert_eq!(reason, "LimitsExceedMaxApiQps", "{message}");
    assert!(
        message.contains("spec.limits.apiQps: 20000 requests/s")
            && message.contains("pluginsFrom.maxApiQps")
            && message.contains(": 50)"),
        "{message}"
    );
    assert_eq!(condition(&s, "Ready").0, "False");
    assert!(
        host.plugin("hungry").await.is_none(),
        "a refused object runs nothing"
    );
    // A burst beyond twice the ceiling is refused the same way.
    let file = cluster.file(
        "hungry.yaml",
        &object("hungry", &source, "  limits: { apiBurst: 101 }\n"),
    );
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    let s = status_where(&cluster, "hungry", "the burst's refusal", |s, g| {
        g == 2 && s["observedGeneration"] == 2 && condition(s, "Degraded").0 == "True"
    })
    .await;
    let (_, reason, message) = condition(&s, "Degraded");
    assert_eq!(reason, "LimitsExceedMaxApiQps", "{message}");
    assert!(
        message.contains("spec.limits.apiBurst: 101 requests") && message.contains(": 100)"),
        "{message}"
    );

    // The other object kept running through both refusals.
    let v1 = file_digest(artifacts::STAMP_V1);
    status_where(&cluster, "modest", "the other object serving", |s, g| {
        ready_with(s, &v1, g)
    })
    .await;
    let configmaps = create_configmap(&cluster, "cm-r").await;
    wait_stamp(&configmaps, "cm-r", "v1").await;
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_version_from_an_edit_leaves_the_previous_one_serving() {
    let cluster = Cluster::start().await;
    install_crd(&cluster).await;
    let host = cluster.host(&host_config("")).await;
    let configmaps = create_configmap(&cluster, "cm-b").await;
    let v1 = file_digest(artifacts::STAMP_V1);
    let file = cluster.file(
        "stamp.yaml",
        &object("stamp", &format!("{{ file: {} }}", artifacts::STAMP_V1), ""),
    );
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    status_where(&cluster, "stamp", "v1 serving", |s, g| {
        ready_with(s, &v1, g)
    })
    .await;
    wait_stamp(&configmaps, "cm-b", "v1").await;

    // The file the edit names is not a component.
    let bad = cluster.file("bad.wasm", "this is not a component");
    let patch = format!(
        r#"{{"spec": {{"source": {{"file": "{}"}}}}}}"#,
        bad.display()
    );
    cluster.kubectl(&[
        "patch",
        "wasmreconciler",
        "stamp",
        "--type",
        "merge",
        "-p",
        &patch,
    ]);
    let s = status_where(&cluster, "stamp", "the refused edit", |s, g| {
        g == 2 && s["observedGeneration"] == 2 && condition(s, "Degraded").0 == "True"
    })
    .await;
    let (_, reason, message) = condition(&s, "Degraded");
    assert_eq!(reason, "LoadFailed", "{message}");
    assert!(message.contains(&bad.display().to_string()), "{message}");
    assert!(
        message.contains(&format!("{v1} (version 1.0.0)")) && message.contains("keeps serving"),
        "{message}"
    );
    assert_eq!(condition(&s, "Ready").0, "True", "v1 still serves");
    assert_eq!(s["servingDigest"], v1.as_str());
    assert_eq!(s["resolvedDigest"], digest(b"this is not a component"));
    let p = host.plugin("stamp").await.unwrap();
    assert_eq!(
        (p["digest"].as_str(), p["generation"].as_u64()),
        (Some(v1.as_str()), Some(1))
    );

    // A good version clears it.
    let patch = format!(
        r#"{{"spec": {{"source": {{"file": "{}"}}}}}}"#,
        artifacts::STAMP_V2
    );
    cluster.kubectl(&[
        "patch",
        "wasmreconciler",
        "stamp",
        "--type",
        "merge",
        "-p",
        &patch,
    ]);
    let v2 = file_digest(artifacts::STAMP_V2);
    let s = status_where(&cluster, "stamp", "v2 serving", |s, g| {
        g == 3 && ready_with(s, &v2, 3)
    })
    .await;
    assert_eq!(s["resolvedDigest"], v2.as_str());
    wait_stamp(&configmaps, "cm-b", "v2").await;
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_moved_to_a_bad_artifact_leaves_the_previous_one_serving() {
    let registry = Registry::start();
    let reference = registry.reference("plugins/stamp:live");
    push_component(&reference, artifacts::STAMP_V1, &insecure_registry()).await;
    let cluster = Cluster::start().await;
    install_crd(&cluster).await;
    let host = cluster.host(&host_config("")).await;
    let v1 = file_digest(artifacts::STAMP_V1);
    let source = format!("{{ oci: \"{reference}\", pollInterval: 1s, insecure: true }}");
    let file = cluster.file("stamp.yaml", &object("stamp", &source, ""));
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    status_where(&cluster, "stamp", "v1 serving", |s, g| {
        ready_with(s, &v1, g)
    })
    .await;

    // A component of another world: pulled, refused by the host.
    push_component(&reference, artifacts::WRONG_WORLD, &insecure_registry()).await;
    let s = status_where(&cluster, "stamp", "the refused tag", |s, _| {
        condition(s, "Degraded").0 == "True"
    })
    .await;
    let (_, reason, message) = condition(&s, "Degraded");
    assert_eq!(reason, "ReloadFailed", "{message}");
    assert!(
        message.contains(&format!(
            "{v1} (version 1.0.0) from oci://{reference} keeps serving"
        )),
        "{message}"
    );
    assert_eq!(condition(&s, "Ready").0, "True");
    assert_eq!(s["servingDigest"], v1.as_str());
    assert_eq!(s["resolvedDigest"], file_digest(artifacts::WRONG_WORLD));
    assert_eq!(s["observedGeneration"], 1, "the object did not change");

    // The tag moves on to a good version: swapped, no longer degraded.
    push_component(&reference, artifacts::STAMP_V2, &insecure_registry()).await;
    let s = status_where(&cluster, "stamp", "v2 serving", |s, g| {
        ready_with(s, &file_digest(artifacts::STAMP_V2), g)
    })
    .await;
    assert_eq!(s["pluginGeneration"], 2);
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_cannot_take_the_name_of_a_config_plugin() {
    let cluster = Cluster::start().await;
    install_crd(&cluster).await;
    let config_plugin = format!(
        r#"plugins:
  - name: stamp
    path: {}
    namespaces: [default]
    permissions:
      - {{ group: "", resources: [configmaps], verbs: [get, list, watch, patch] }}
"#,
        artifacts::STAMP_V1
    );
    let host = cluster.host(&host_config(&config_plugin)).await;
    let source = format!("{{ file: {} }}", artifacts::STAMP_V2);
    for name in ["stamp", "stamp-b"] {
        let file = cluster.file(&format!("{name}.yaml"), &object(name, &source, ""));
        cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    }
    let s = status_where(&cluster, "stamp", "the name collision", |s, _| {
        condition(s, "Degraded").0 == "True"
    })
    .await;
    let (_, reason, message) = condition(&s, "Degraded");
    assert_eq!(reason, "NameTaken");
    assert!(message.contains("\"stamp\""), "{message}");
    assert_eq!(condition(&s, "Ready").0, "False");
    assert_eq!(s["servingDigest"], Value::Null);
    // The config's plugin is untouched; the other object runs beside it.
    let p = host.plugin("stamp").await.unwrap();
    assert_eq!(p["source"], artifacts::STAMP_V1);
    assert_eq!(p["version"], "1.0.0");
    status_where(&cluster, "stamp-b", "the other object serving", |s, g| {
        ready_with(s, &file_digest(artifacts::STAMP_V2), g)
    })
    .await;
    host.stop().await.unwrap();
}

/// A config plugin still loading holds its name: an object created before
/// the host starts does not take it while the config's component is held
/// back, and is refused once it has loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_cannot_take_the_name_of_a_config_plugin_still_loading() {
    let cluster = Cluster::start().await;
    install_crd(&cluster).await;
    let source = format!("{{ file: {} }}", artifacts::STAMP_V2);
    let file = cluster.file("stamp.yaml", &object("stamp", &source, ""));
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    let (release, gate) = tokio::sync::watch::channel(false);
    let (held, _) =
        crate::startup::held_server(std::fs::read(artifacts::STAMP_V1).unwrap(), gate).await;
    let digest = file_digest(artifacts::STAMP_V1);
    let config = host_config(&format!(
        r#"plugins:
  - name: stamp
    source: {{ url: "http://{held}/stamp.wasm", sha256: "{}", insecure: true }}
    namespaces: [default]
    permissions:
      - {{ group: "", resources: [configmaps], verbs: [get, list, watch, patch] }}
"#,
        digest.trim_start_matches("sha256:")
    ));
    let (admin, loaded, stop) = crate::startup::run_host(&cluster, &config).await;
    let s = status_where(&cluster, "stamp", "the name held while loading", |s, _| {
        condition(s, "Degraded").1 == "NameTaken"
    })
    .await;
    let (_, _, message) = condition(&s, "Degraded");
    assert!(message.contains("not loaded yet"), "{message}");

    release.send_replace(true);
    assert_eq!(loaded.await, Vec::new());
    status_where(
        &cluster,
        "stamp",
        "the name taken by the loaded plugin",
        |s, _| {
            condition(s, "Degraded")
                .2
                .contains("already runs a plugin named")
        },
    )
    .await;
    let (_, body) = admin::http_get(admin, "/plugins").await;
    let plugins: Vec<Value> = serde_json::from_str(&body).unwrap();
    let stamp: Vec<&Value> = plugins.iter().filter(|p| p["name"] == "stamp").collect();
    assert_eq!(stamp.len(), 1, "{body}");
    assert_eq!(stamp[0]["version"], "1.0.0");
    assert!(
        stamp[0]["source"]
            .as_str()
            .unwrap()
            .contains(&held.to_string())
    );
    let _ = stop.send(());
}

/// The config plugin entry `name` running the stamp v1 component.
fn config_plugin(name: &str) -> String {
    format!(
        r#"  - name: {name}
    path: {}
    namespaces: [default]
    permissions:
      - {{ group: "", resources: [configmaps], verbs: [get, list, watch, patch] }}
"#,
        artifacts::STAMP_V1
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_the_config_frees_goes_to_the_waiting_object_and_the_config_cannot_take_it_back() {
    let cluster = Cluster::start().await;
    install_crd(&cluster).await;
    let with_stamp = host_config(&format!("plugins:\n{}", config_plugin("stamp")));
    let host = cluster.host_watching_config(&with_stamp).await;
    let source = format!("{{ file: {} }}", artifacts::STAMP_V2);
    let file = cluster.file("stamp.yaml", &object("stamp", &source, ""));
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    status_where(&cluster, "stamp", "the name collision", |s, _| {
        condition(s, "Degraded").1 == "NameTaken"
    })
    .await;

    // The config drops its plugin: the object's starts under the name.
    cluster.file("wasmctrl.yaml", &host_config(""));
    let v2 = file_digest(artifacts::STAMP_V2);
    status_where(&cluster, "stamp", "the object's plugin serving", |s, g| {
        ready_with(s, &v2, g)
    })
    .await;
    let p = host.plugin("stamp").await.unwrap();
    assert_eq!(
        (p["source"].as_str(), p["version"].as_str()),
        (Some(artifacts::STAMP_V2), Some("2.0.0"))
    );

    // The config asks for the name again (then for another): refused, the
    // object's plugin keeps it. Plugins are added in the config's order, so
    // once `other` runs the attempt on `stamp` is over.
    cluster.file(
        "wasmctrl.yaml",
        &host_config(&format!(
            "plugins:\n{}{}",
            config_plugin("stamp"),
            config_plugin("other")
        )),
    );
    eventually("the config's other plugin", LIMIT, || async {
        host.plugin("other").await
    })
    .await;
    let p = host.plugin("stamp").await.unwrap();
    assert_eq!(
        (p["source"].as_str(), p["version"].as_str()),
        (Some(artifacts::STAMP_V2), Some("2.0.0")),
        "the object keeps its plugin"
    );
    let (status, generation) = status_of(&cluster, "stamp").await.unwrap();
    assert!(ready_with(&status, &v2, generation), "{status:#}");

    // Deleting the object frees the name: the config's next reload takes it.
    cluster.kubectl(&["delete", "wasmreconciler", "stamp"]);
    eventually("the object's plugin stopped", LIMIT, || async {
        host.plugin("stamp").await.is_none().then_some(())
    })
    .await;
    cluster.file(
        "wasmctrl.yaml",
        &host_config(&format!(
            "plugins:\n{}{}",
            config_plugin("other"),
            config_plugin("stamp")
        )),
    );
    eventually("the config's stamp", LIMIT, || async {
        host.plugin("stamp")
            .await
            .filter(|p| p["source"] == artifacts::STAMP_V1)
    })
    .await;
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_following_objects_without_the_crd_refuses_to_start_saying_how_to_install_it() {
    use wasmctrl::ops::manager::{Manager, ManagerOptions};
    let cluster = Cluster::start().await;
    let config = host::host_config(&host_config(""), cluster.dir.path());
    let options = ManagerOptions {
        admin_bind: Some("127.0.0.1:0".parse().unwrap()),
        ..ManagerOptions::default()
    };
    let Err(e) = Manager::start(config, cluster.client.clone(), options).await else {
        panic!("the host started without the WasmReconciler CRD");
    };
    let message = e.to_string();
    assert!(
        message.starts_with("pluginsFrom: ")
            && message.contains("kubectl apply -f deploy/crds/wasmreconciler.yaml"),
        "{message}"
    );
}

/// A registry with authentication holding `tags` of `component`, and a
/// `kubernetes.io/dockerconfigjson` Secret for each of `secrets`.
async fn private_registry(
    cluster: &Cluster,
    component: &str,
    tags: &[&str],
    secrets: &[&str],
) -> (Registry, Vec<String>) {
    let registry = Registry::start_with_auth();
    let docker = cluster.file(
        "docker.json",
        &format!(
            r#"{{"auths": {{"{}": {{"username": "{USER}", "password": "{PASSWORD}"}}}}}}"#,
            registry.addr
        ),
    );
    let pusher = RegistryOptions {
        docker_config: Some(docker),
        ..insecure_registry()
    };
    let mut references = Vec::new();
    for tag in tags {
        let reference = registry.reference(&format!("plugins/{tag}"));
        push_component(&reference, component, &pusher).await;
        references.push(reference);
    }
    for secret in secrets {
        create_pull_secret(cluster, &registry, secret);
    }
    (registry, references)
}

fn create_pull_secret(cluster: &Cluster, registry: &Registry, name: &str) {
    cluster.kubectl(&[
        "create",
        "secret",
        "docker-registry",
        name,
        "--docker-server",
        &registry.addr.to_string(),
        "--docker-username",
        USER,
        "--docker-password",
        PASSWORD,
    ]);
}

/// `n` ConfigMaps `cm-{i}` with `data.value: v{i}` (the mirror plugin's
/// input).
async fn mirror_inputs(cluster: &Cluster, n: usize) -> (Api<ConfigMap>, Vec<String>) {
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    let names: Vec<String> = (0..n).map(|i| format!("cm-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "data": {"value": format!("v{i}")},
        }))
        .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    (api, names)
}

/// Every ConfigMap of `names` mirrors its `data.value` in its label.
async fn all_mirrored(api: &Api<ConfigMap>, names: &[String]) {
    eventually("every ConfigMap mirrored", LIMIT, || async {
        for name in names {
            let cm = api.get(name).await.ok()?;
            let value = cm.data.as_ref()?.get("value")?;
            if cm.metadata.labels.as_ref()?.get("wasmctrl.dev/mirror") != Some(value) {
                return None;
            }
        }
        Some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasmreconciler_canary_from_a_private_registry_is_rolled_back_and_its_status_says_why() {
    const KEYS: usize = 24;
    let cluster = Cluster::start().await;
    // The stable version and the candidate come from two tags, each read
    // with its own pull Secret; the candidate's does not exist yet.
    let (registry, tags) = private_registry(
        &cluster,
        artifacts::MIRROR,
        &["mirror:1", "mirror:2"],
        &["regcred"],
    )
    .await;
    install_crd(&cluster).await;
    let host = cluster.host(&host_config("")).await;
    let (configmaps, names) = mirror_inputs(&cluster, KEYS).await;
    let spec = object(
        "mirror",
        &format!(
            "{{ oci: \"{}\", insecure: true, imagePullSecret: regcred }}\n  resyncPeriod: 1s\n  rateLimiter: {{ baseDelay: 20ms, maxDelay: 200ms }}",
            tags[0]
        ),
        "",
    ) + &format!(
        r#"  candidate:
    source: {{ oci: "{}", insecure: true, imagePullSecret: regcred2 }}
    settings: {{ failHalf: true }}
    mode: canary
    canary: {{ percent: 50, window: 60s, minReconciles: 4, maxFailureRateIncrease: 0.2 }}
"#,
        tags[1]
    );
    let file = cluster.file("mirror.yaml", &spec);
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    let s = status_where(
        &cluster,
        "mirror",
        "the candidate's missing Secret in the status",
        |s, _| condition(s, "Degraded").1 == "SourceUnavailable",
    )
    .await;
    let message = condition(&s, "Degraded").2;
    assert!(
        message.contains("default/regcred2") && message.contains("no such Secret"),
        "{message}"
    );
    assert!(host.plugin("mirror").await.is_none());

    create_pull_secret(&cluster, &registry, "regcred2");
    let digest = file_digest(artifacts::MIRROR);
    let s = status_where(
        &cluster,
        "mirror",
        "the canary rolled back in the status",
        |s, g| ready_with(s, &digest, g) && s["candidate"]["state"] == "rolled-back",
    )
    .await;
    let candidate = &s["candidate"];
    assert_eq!(candidate["mode"], "canary", "{s:#}");
    assert_eq!(candidate["digest"], digest.as_str());
    assert_eq!(candidate["source"], format!("oci://{}", tags[1]));
    let reason = candidate["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("the candidate failed") && reason.contains("maxFailureRateIncrease"),
        "{s:#}"
    );
    assert!(candidate["decidedAt"].is_string(), "{s:#}");
    assert_eq!(
        host.plugin("mirror").await.unwrap()["candidate"]["canary"]["state"],
        "rolled-back"
    );
    // The stable version took every key back.
    all_mirrored(&configmaps, &names).await;
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasmreconciler_shadow_candidate_shows_in_status_and_is_promoted_by_editing_the_spec() {
    let cluster = Cluster::start().await;
    install_crd(&cluster).await;
    let host = cluster.host(&host_config("")).await;
    let configmaps = create_configmap(&cluster, "cm-a").await;
    let (v1, v2) = (
        file_digest(artifacts::STAMP_V1),
        file_digest(artifacts::STAMP_V2),
    );
    let spec = object("stamp", &format!("{{ file: {} }}", artifacts::STAMP_V1), "")
        + &format!(
            "  candidate: {{ path: {}, mode: shadow }}\n",
            artifacts::STAMP_V2
        );
    let file = cluster.file("stamp.yaml", &spec);
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    let s = status_where(&cluster, "stamp", "v1 serving, v2 in shadow", |s, g| {
        ready_with(s, &v1, g) && s["candidate"]["state"] == "shadow"
    })
    .await;
    assert_eq!(s["candidate"]["mode"], "shadow", "{s:#}");
    assert_eq!(s["candidate"]["digest"], v2.as_str());
    assert_eq!(s["candidate"]["version"], "2.0.0");
    assert_eq!(s["candidate"]["reason"], Value::Null);
    // What the plugin's own source resolved to, not the candidate's.
    assert_eq!(s["resolvedDigest"], v1.as_str(), "{s:#}");
    wait_stamp(&configmaps, "cm-a", "v1").await;
    let report = eventually("a divergent shadow run", LIMIT, || async {
        let (status, body) = admin::http_get(host.admin, "/plugins/stamp/shadow").await;
        let r: Value = serde_json::from_str(&body).ok()?;
        (status == 200 && r["divergent"].as_u64()? >= 1).then_some(r)
    })
    .await;
    assert_eq!(
        report["divergences"][0]["kinds"],
        serde_json::json!(["ConfigMap"]),
        "{report:#}"
    );
    assert_eq!(
        stamp_of(&configmaps, "cm-a").await.as_deref(),
        Some("v1"),
        "the shadow wrote nothing"
    );

    // Promotion is an edit: the candidate's source becomes the plugin's.
    cluster.kubectl(&[
        "patch",
        "wasmreconciler",
        "stamp",
        "--type",
        "merge",
        "-p",
        &format!(
            r#"{{"spec": {{"source": {{"file": "{}"}}, "candidate": null}}}}"#,
            artifacts::STAMP_V2
        ),
    ]);
    let s = status_where(&cluster, "stamp", "v2 promoted by the edit", |s, g| {
        g == 2 && ready_with(s, &v2, 2) && s["candidate"].is_null()
    })
    .await;
    assert_eq!(s["version"], "2.0.0");
    wait_stamp(&configmaps, "cm-a", "v2").await;
    assert!(host.plugin("stamp").await.unwrap()["candidate"].is_null());
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_naming_a_host_file_is_refused_like_the_plugins_own_path() {
    let cluster = Cluster::start().await;
    install_crd(&cluster).await;
    let host = cluster
        .host(&host_config("").replace(", allowFileSources: true", ""))
        .await;
    let spec = object("stamp", "{ oci: \"127.0.0.1:1/plugins/stamp:1\" }", "")
        + "  candidate: { path: /etc/passwd, mode: shadow }\n";
    let file = cluster.file("stamp.yaml", &spec);
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    let s = status_where(&cluster, "stamp", "the refusal in the status", |s, _| {
        condition(s, "Degraded").1 == "FileSourceNotAllowed"
    })
    .await;
    let (ready, _, message) = condition(&s, "Ready");
    assert_eq!(ready, "False");
    assert!(
        message.starts_with("spec.candidate.path: ") && message.contains("allowFileSources"),
        "{message}"
    );
    assert!(host.plugin("stamp").await.is_none());
    host.stop().await.unwrap();
}

/// The WasmReconciler CRD with a spec the API server does not type: what
/// a CRD installed before the schema named a field, or written by hand,
/// lets through. The host reads the spec as strictly either way.
const LOOSE_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: { name: wasmreconcilers.wasmctrl.dev }
spec:
  group: wasmctrl.dev
  scope: Cluster
  names: { plural: wasmreconcilers, singular: wasmreconciler, kind: WasmReconciler, listKind: WasmReconcilerList }
  versions:
    - name: v1alpha1
      served: true
      storage: true
      subresources: { status: {} }
      schema:
        openAPIV3Schema: { type: object, x-kubernetes-preserve-unknown-fields: true }
"#;

/// A section of the spec in the wrong shape (`limits: []`, which serde
/// would read as every default, or `limits: [1Ki]`, as the first field by
/// position) is never run: the shipped CRD has the API server refuse it,
/// and past a CRD that does not type it the host refuses it in the
/// object's status, naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_section_of_the_spec_in_the_wrong_shape_is_refused_naming_the_field() {
    let cluster = Cluster::start().await;
    install_crd(&cluster).await;
    let with_limits = |name: &str, limits: Value| -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "wasmctrl.dev/v1alpha1",
            "kind": "WasmReconciler",
            "metadata": {"name": name},
            "spec": {
                "source": {"file": artifacts::STAMP_V1},
                "namespaces": ["default"],
                "permissions": [{"group": "", "resources": ["configmaps"], "verbs": ["get", "list", "watch", "patch"]}],
                "limits": limits,
            },
        }))
        .unwrap()
    };
    let api = objects_api(&cluster);
    let refused = api
        .create(
            &PostParams::default(),
            &with_limits("typed", serde_json::json!([])),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 422 && s.message.contains("spec.limits")),
        "{refused:?}"
    );
    let file = cluster.file("loose-crd.yaml", LOOSE_CRD);
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    let host = cluster.host(&host_config("")).await;
    for (name, limits) in [
        ("empty", serde_json::json!([])),
        ("positional", serde_json::json!(["1Ki"])),
    ] {
        let created = eventually("the loose CRD served", LIMIT, || async {
            api.create(&PostParams::default(), &with_limits(name, limits.clone()))
                .await
                .ok()
        })
        .await;
        assert_eq!(created.data["spec"]["limits"], limits);
        let s = status_where(&cluster, name, "the refusal in the status", |s, g| {
            condition(s, "Degraded").0 == "True" && s["observedGeneration"] == g
        })
        .await;
        let (_, reason, message) = condition(&s, "Degraded");
        assert_eq!(reason, "InvalidSpec", "{message}");
        assert_eq!(
            message, "spec.limits: invalid type: sequence, expected a mapping",
            "{name}"
        );
        assert_eq!(condition(&s, "Ready").0, "False");
        assert!(host.plugin(name).await.is_none(), "{name} runs nothing");
    }
    let refusals = wasmctrl_testkit::admin::metric_value(
        host.admin,
        r#"wasmctrl_object_refusals_total{reason="InvalidSpec"}"#,
    )
    .await;
    assert!(refusals.is_some_and(|n| n >= 2.0), "{refusals:?}");
    host.stop().await.unwrap();
}

/// An HTTP server on loopback that answers every request with a body that
/// is not a component, and counts the connections it accepted.
async fn counting_server() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let body = "not a component";
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    (addr, count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_objects_source_on_loopback_is_refused_unless_allow_hosts_names_it_and_nothing_is_fetched()
 {
    let (addr, requests) = counting_server().await;
    let cluster = Cluster::start().await;
    install_crd(&cluster).await;
    let host = cluster.host(&host_config_allowing("[]", "")).await;
    let url = format!("http://{addr}/metrics");
    let source = format!(
        "{{ url: \"{url}\", sha256: \"{}\", insecure: true }}",
        "0".repeat(64)
    );
    let file = cluster.file("probe.yaml", &object("probe", &source, ""));
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    let s = status_where(&cluster, "probe", "the refusal in the status", |s, g| {
        condition(s, "Degraded").0 == "True" && s["observedGeneration"] == g
    })
    .await;
    let (_, reason, message) = condition(&s, "Degraded");
    assert_eq!(reason, "SourceNotAllowed", "{message}");
    assert!(
        message.starts_with("spec.source.url: refusing to connect to 127.0.0.1")
            && message.contains("public addresses")
            && message.contains(&format!("pluginsFrom.allowHosts (here \"{addr}\")")),
        "{message}"
    );
    assert_eq!(condition(&s, "Ready").0, "False");
    assert!(s.get("resolvedDigest").is_none_or(Value::is_null), "{s:#}");
    assert!(host.plugin("probe").await.is_none());
    assert_eq!(
        requests.load(Ordering::SeqCst),
        0,
        "the host connected to the refused address"
    );
    host.stop().await.unwrap();

    // A host config naming the address lets the object reach it: the fetch
    // happens, and what it got is refused for what it is.
    let host = cluster
        .host(&host_config_allowing(&format!("[\"{addr}\"]"), ""))
        .await;
    let s = status_where(&cluster, "probe", "the fetched body refused", |s, _| {
        condition(s, "Degraded").1 != "SourceNotAllowed" && condition(s, "Degraded").0 == "True"
    })
    .await;
    let (_, reason, message) = condition(&s, "Degraded");
    assert_eq!(reason, "SourceRefused", "{message}");
    assert!(
        message.contains("digest mismatch") && message.contains(&url),
        "{message}"
    );
    assert!(requests.load(Ordering::SeqCst) >= 1);
    assert!(host.plugin("probe").await.is_none());
    host.stop().await.unwrap();
}

/// What the objects' loads hold in memory together is bounded: an object
/// whose component is larger than `pluginsFrom.maxLoadingBytes` is refused
/// as unavailable (tried again later) before anything is compiled, the
/// refusal is counted, and nothing stays held; another object's smaller
/// component loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_objects_load_past_the_loading_budget_is_refused_as_unavailable() {
    let cluster = Cluster::start().await;
    install_crd(&cluster).await;
    let config = host_config("").replace(
        "allowFileSources: true }",
        "allowFileSources: true, maxLoadingBytes: 1Mi }",
    );
    assert!(config.contains("maxLoadingBytes"), "{config}");
    let host = cluster.host(&config).await;
    let big = std::fs::metadata(artifacts::WEBAPP).unwrap().len();
    assert!(big > 1 << 20, "the webapp component is {big} bytes");
    let source = format!("{{ file: {} }}", artifacts::WEBAPP);
    let file = cluster.file("big.yaml", &object("big", &source, ""));
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    let s = status_where(&cluster, "big", "refused for the loading budget", |s, _| {
        condition(s, "Degraded").1 == "SourceUnavailable"
    })
    .await;
    let (_, _, message) = condition(&s, "Degraded");
    assert!(
        message.contains("pluginsFrom.maxLoadingBytes") && message.contains("1048576 bytes"),
        "{message}"
    );
    assert!(host.plugin("big").await.is_none(), "nothing runs");
    let metrics = host.metrics.encode();
    let counted = metrics
        .lines()
        .find_map(|l| l.strip_prefix(r#"wasmctrl_source_refusals_total{reason="loadingBytes"} "#))
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_default();
    assert!(counted >= 1, "{metrics}");
    assert!(
        metrics.contains("wasmctrl_object_component_bytes 0\n"),
        "nothing stays held:\n{metrics}"
    );

    let small = format!("{{ file: {} }}", artifacts::STAMP_V2);
    let file = cluster.file("small.yaml", &object("small", &small, ""));
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    eventually("the smaller component loaded", LIMIT, || async {
        host.plugin("small").await
    })
    .await;
    host.stop().await.unwrap();
}

/// An object whose download stalls holds up no other object: while its
/// fetch waits on a server that answers nothing (for up to its timeout,
/// 5 minutes), another object's plugin loads and, once that object is
/// deleted, stops; the stalled one loads once its server answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_whose_downloads_stall_hold_up_no_other_object() {
    let cluster = Cluster::start().await;
    install_crd(&cluster).await;
    let host = cluster.host_watching_config(&host_config("")).await;

    // A server that answers only once let, and says when it is asked.
    let (release, gate) = tokio::sync::watch::channel(false);
    let (held, mut asked) =
        crate::startup::held_server(std::fs::read(artifacts::STAMP_V1).unwrap(), gate).await;
    let digest = file_digest(artifacts::STAMP_V1);
    let stalled = format!(
        "{{ url: \"http://{held}/stamp.wasm\", sha256: \"{}\", insecure: true }}",
        digest.trim_start_matches("sha256:")
    );
    // More stalled objects than the objects controller has workers: each
    // download begins, none holds a worker.
    let names: Vec<String> = (0..6).map(|i| format!("stalled-{i}")).collect();
    for name in &names {
        let file = cluster.file(&format!("{name}.yaml"), &object(name, &stalled, ""));
        cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    }
    for name in &names {
        tokio::time::timeout(LIMIT, asked.recv())
            .await
            .unwrap_or_else(|_| panic!("a download began for each object ({name} not yet)"));
    }

    let quick = format!("{{ file: {} }}", artifacts::STAMP_V2);
    let file = cluster.file("quick.yaml", &object("quick", &quick, ""));
    cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    eventually(
        "the other object's plugin loaded meanwhile",
        LIMIT,
        || async { host.plugin("quick").await },
    )
    .await;
    cluster.kubectl(&["delete", "wasmreconciler", "quick"]);
    eventually(
        "the other object's plugin stopped meanwhile",
        LIMIT,
        || async { host.plugin("quick").await.is_none().then_some(()) },
    )
    .await;
    assert!(
        host.plugin("stalled-0").await.is_none(),
        "still downloading"
    );

    // A stalled object deleted runs nothing, whether its download is
    // stopped first or ends first.
    cluster.kubectl(&["delete", "wasmreconciler", "stalled-0"]);
    release.send_replace(true);
    for name in &names[1..] {
        eventually(
            "each stalled object's plugin loaded once let",
            LIMIT,
            || async { host.plugin(name).await },
        )
        .await;
        let s = status_where(&cluster, name, "its status written", |s, g| {
            ready_with(s, &digest, g)
        })
        .await;
        assert_eq!(s["version"], "1.0.0");
    }
    eventually("the deleted object runs nothing", LIMIT, || async {
        host.plugin("stalled-0").await.is_none().then_some(())
    })
    .await;
    host.stop().await.unwrap();
}
