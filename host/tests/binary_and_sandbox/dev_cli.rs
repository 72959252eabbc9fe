//! `wasmctrl dev --authorization rbac` as a user runs it on the quick
//! start: the host reconciles as the ServiceAccount bound to what
//! `wasmctrl rbac` prints, and only as far as that RBAC allows.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde::Deserialize;
use wasmctrl_testkit::client::client_for;
use wasmctrl_testkit::{eventually, kubectl};

use crate::binary::{Dev, QUICKSTART, quickstart_config, wasmctrl};

const LIMIT: Duration = Duration::from_secs(30);
const HOST_USER: &str = "system:serviceaccount:wasmctrl-system:wasmctrl";
/// What `wasmctrl rbac` names its objects for that account.
const RBAC_NAME: &str = "wasmctrl:wasmctrl-system:wasmctrl";

impl Dev {
    /// `dev --authorization rbac` on `config`, applying the quick start.
    async fn rbac(config: &Path, kubeconfig: PathBuf) -> Dev {
        let args = [
            "--authorization".as_ref(),
            "rbac".as_ref(),
            "--addr".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--config".as_ref(),
            config.as_os_str(),
            "--apply".as_ref(),
            QUICKSTART.as_ref(),
        ];
        Dev::start::<&std::ffi::OsStr>(&args, kubeconfig).await
    }

    /// `kubectl auth can-i VERB RESOURCE` as the host's account: its answer.
    fn host_can(&self, verb: &str, resource: &str) -> String {
        let out = kubectl::output(
            &self.kubeconfig,
            &["auth", "can-i", verb, resource, "--as", HOST_USER],
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

/// The ClusterRole `wasmctrl rbac --config CONFIG` prints.
fn printed_cluster_role(config: &Path) -> ClusterRole {
    let out = wasmctrl()
        .args(["rbac", "--config"])
        .arg(config)
        .output()
        .expect("wasmctrl rbac runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| serde_norway::Value::deserialize(doc).unwrap())
        .find(|v| v["kind"] == "ClusterRole")
        .map(|v| serde_norway::from_value(v).unwrap())
        .expect("a ClusterRole")
}

async fn deployment(client: &kube::Client, name: &str) -> Option<Deployment> {
    Api::<Deployment>::namespaced(client.clone(), "default")
        .get_opt(name)
        .await
        .unwrap()
}

fn webapp_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "demo.wasmctrl.dev",
        "v1alpha1",
        "WebApp",
    ))
}

fn webapps(client: &kube::Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), "default", &webapp_resource())
}

/// A review POSTed to the webhook server at `url` (trusting `ca`) without
/// a client certificate: what came back before the connection ended.
async fn anonymous_post(url: &str, ca: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.trim_start_matches("https://");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let tcp = tokio::net::TcpStream::connect(authority).await.unwrap();
    let tls = wasmctrl::sandbox::outbound::tls_config(Some(ca)).unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let Ok(mut stream) = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await
    else {
        return String::new();
    };
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{{}}"
    );
    let _ = stream.write_all(request.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(LIMIT, stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

async fn create_webapp(client: &kube::Client, name: &str) {
    let webapp: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "demo.wasmctrl.dev/v1alpha1",
        "kind": "WebApp",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"image": "nginx:1.27", "replicas": 1},
    }))
    .unwrap();
    webapps(client)
        .create(&PostParams::default(), &webapp)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_with_rbac_runs_the_host_as_a_service_account_with_the_rbac_of_wasmctrl_rbac() {
    let dir = tempfile::tempdir().unwrap();
    let config = quickstart_config(dir.path());
    let dev = Dev::rbac(&config, dir.path().join("kc")).await;
    let says = format!("the host runs as {HOST_USER} with the RBAC of `wasmctrl rbac");
    assert!(
        dev.printed.iter().any(|l| l.starts_with(&says)),
        "{:?}",
        dev.printed
    );
    assert!(
        dev.printed
            .iter()
            .any(|l| l.contains("(authorization: rbac)")),
        "{:?}",
        dev.printed
    );
    // The kubeconfig written for kubectl stays the admin's.
    let admin = client_for(&dev.kubeconfig).await;

    // The quick start's WebApp gets its Deployment.
    eventually("the Deployment of WebApp hello", LIMIT, || {
        let admin = admin.clone();
        async move { deployment(&admin, "hello").await }
    })
    .await;
    assert_eq!(dev.host_can("patch", "deployments.apps"), "yes");
    assert_eq!(dev.host_can("delete", "secrets"), "no");

    // The plugin's webhooks registered by the host itself, within the
    // least-privilege RBAC: its configurations by name, nothing more.
    let registered: Api<
        k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
    > = Api::all(admin.clone());
    eventually("the webapp's webhooks registered", LIMIT, || {
        let registered = registered.clone();
        async move { registered.get_opt("wasmctrl-webapp").await.ok().flatten() }
    })
    .await;
    assert_eq!(
        dev.host_can(
            "patch",
            "validatingwebhookconfigurations.admissionregistration.k8s.io/wasmctrl-webapp"
        ),
        "yes"
    );
    // The webhook server takes reviews from the embedded API server alone,
    // which presents the certificate its CA signed.
    let invalid = DynamicObject {
        data: serde_json::json!({"spec": {"image": "nginx:1.27", "replicas": 99}}),
        ..DynamicObject::new("too-many", &webapp_resource()).within("default")
    };
    let denied = webapps(&admin)
        .create(&PostParams::default(), &invalid)
        .await
        .expect_err("a WebApp of 99 replicas is refused");
    assert!(denied.to_string().contains("replicas"), "{denied}");
    let hook = registered
        .get("wasmctrl-webapp")
        .await
        .unwrap()
        .webhooks
        .unwrap();
    let client_config = &hook[0].client_config;
    let answered = anonymous_post(
        client_config.url.as_deref().expect("the host's URL"),
        &client_config.ca_bundle.as_ref().expect("the host's CA").0,
    )
    .await;
    assert!(
        !answered.starts_with("HTTP/1.1"),
        "a caller without the API server's certificate was answered: {answered}"
    );
    assert_eq!(
        dev.host_can(
            "patch",
            "validatingwebhookconfigurations.admissionregistration.k8s.io/someone-else"
        ),
        "no"
    );

    // Take `patch` on Deployments out of the host's ClusterRole: the host
    // (not the admin, whom RBAC never refuses) can no longer reconcile a
    // new WebApp.
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let granted = roles.get(RBAC_NAME).await.unwrap();
    assert_eq!(granted.rules, printed_cluster_role(&config).rules);
    let mut narrowed = granted.clone();
    for rule in narrowed.rules.iter_mut().flatten() {
        if rule.api_groups.as_deref() == Some(&["apps".to_string()]) {
            rule.verbs.retain(|v| v != "patch");
        }
    }
    assert_ne!(narrowed.rules, granted.rules, "the grant had patch on apps");
    let narrowed = roles
        .replace(RBAC_NAME, &PostParams::default(), &narrowed)
        .await
        .unwrap();
    assert_eq!(dev.host_can("patch", "deployments.apps"), "no");
    create_webapp(&admin, "second").await;
    let refused =
        format!("deployments.apps \"second\" is forbidden: User \"{HOST_USER}\" cannot patch");
    eventually(
        "the API server refusing the host's patch",
        LIMIT,
        || async { dev.log().contains(&refused).then_some(()) },
    )
    .await;
    assert!(
        deployment(&admin, "second").await.is_none(),
        "the host patched a Deployment RBAC refuses it:\n{}",
        dev.log()
    );

    // The grant back, as `wasmctrl rbac` printed it. A refusal is a
    // terminal error, so an edit of the WebApp brings the next reconcile.
    let mut restored = granted;
    restored.metadata.resource_version = narrowed.metadata.resource_version;
    roles
        .replace(RBAC_NAME, &PostParams::default(), &restored)
        .await
        .unwrap();
    webapps(&admin)
        .patch(
            "second",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + LIMIT;
    while deployment(&admin, "second").await.is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for the Deployment of WebApp second:\n{}",
            dev.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
