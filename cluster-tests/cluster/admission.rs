//! Admission webhooks as plugins, end to end: the host serves a plugin's
//! `validate` and `mutate` over HTTPS, registers them with the embedded
//! API server, and the API server calls them for kubectl's writes. What a
//! careless or hostile webhook does (`plugins/testing/gatekeeper`) is
//! answered by the host's rules: the deadline and failure policy, no
//! writes during a review, no renaming mutation, no oversized object, no
//! rule outside the grant.

use futures::StreamExt;
use std::time::Duration;

use wasmctrl_cluster_tests::{Cluster, quickstart_config};
use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::admin::{metric_reaches, metric_value};
use wasmctrl_testkit::eventually;
use wasmctrl_testkit::host::RunningHost;

const VALIDATING: &str = "gatekeeper.validate.wasmctrl.dev";

fn config(component: &str, mode: &str) -> String {
    format!(
        r#"
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
shutdownTimeout: 5s
webhook: {{ bind: "127.0.0.1:0" }}
plugins:
  - name: gatekeeper
    path: {component}
    reconcileTimeout: 5s
    admission: {{ mode: {mode} }}
    permissions:
      - {{ group: "", resources: [configmaps], verbs: [get, list, watch, create, patch] }}
"#
    )
}

/// Waits until the API server holds both of the plugin's configurations.
async fn registered(cluster: &Cluster, plugin: &str) {
    let name = format!("wasmctrl-{plugin}");
    eventually(
        "the webhooks registered",
        Duration::from_secs(60),
        || async {
            let found = [
                "validatingwebhookconfigurations",
                "mutatingwebhookconfigurations",
            ]
            .iter()
            .all(|kind| cluster.kubectl_raw(&["get", kind, &name]).status.success());
            found.then_some(())
        },
    )
    .await;
}

/// `kubectl create configmap NAME`: its stdout and stderr, and whether it
/// succeeded.
fn create(cluster: &Cluster, name: &str, extra: &[&str]) -> (bool, String) {
    let mut args = vec!["create", "configmap", name];
    args.extend_from_slice(extra);
    let out = cluster.kubectl_raw(&args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn refused(cluster: &Cluster, name: &str, says: &[&str]) -> String {
    let (ok, text) = create(cluster, name, &[]);
    assert!(!ok, "{name} was admitted: {text}");
    for s in says {
        assert!(text.contains(s), "{name}: expected {s:?} in: {text}");
    }
    assert!(
        !cluster
            .kubectl_raw(&["get", "configmap", name])
            .status
            .success(),
        "{name} was stored"
    );
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_writes_are_validated_and_defaulted_by_the_plugin_through_the_api_server() {
    let cluster = Cluster::start().await;
    let host = cluster
        .host(&config(artifacts::GATEKEEPER, "protect"))
        .await;
    registered(&cluster, "gatekeeper").await;

    // `/plugins` shows what is served, where, and how failures are answered.
    let plugin = host.plugin("gatekeeper").await.expect("listed");
    assert_eq!(
        plugin["webhooks"][0],
        serde_json::json!({
            "name": VALIDATING,
            "path": "/validate/gatekeeper",
            "failurePolicy": "Fail",
            "timeoutSeconds": 1,
            "mode": "protect",
            "rules": ["CREATE,UPDATE /v1 configmaps"],
        })
    );
    assert_eq!(plugin["webhooks"][1]["path"], "/mutate/gatekeeper");

    // Mutating: the defaulter's label is stored.
    let (ok, text) = create(&cluster, "plain", &[]);
    assert!(ok, "{text}");
    let labels = cluster.kubectl(&[
        "get",
        "configmap",
        "plain",
        "-o",
        "jsonpath={.metadata.labels.gatekeeper}",
    ]);
    assert_eq!(labels, "seen");

    // Validating: the plugin's denial, as the API server words it, and
    // its field errors as kubectl shows the API server's own.
    refused(
        &cluster,
        "forbid-1",
        &[&format!(
            "admission webhook \"{VALIDATING}\" denied the request: forbidden by the gatekeeper"
        )],
    );
    refused(
        &cluster,
        "deny-1",
        &[
            "denied the request: ConfigMap \"deny-1\" is invalid: data.value: Invalid value: \"bad\": must not be bad",
        ],
    );

    // A server-side dry run runs the webhooks and stores nothing.
    let (ok, text) = create(&cluster, "dry", &["--dry-run=server", "-o", "yaml"]);
    assert!(ok, "{text}");
    assert!(text.contains("gatekeeper: seen"), "{text}");
    assert!(
        !cluster
            .kubectl_raw(&["get", "configmap", "dry"])
            .status
            .success()
    );
    refused(&cluster, "deny-dry", &["denied the request"]);

    // Reads work inside a review; the warning reaches kubectl.
    cluster.kubectl(&["create", "configmap", "source", "--from-literal=value=42"]);
    let (ok, text) = create(&cluster, "read-1", &[]);
    assert!(ok, "{text}");
    assert!(text.contains("Warning: source says 42"), "{text}");

    // Writes do not.
    refused(
        &cluster,
        "write-1",
        &[
            "write refused",
            "read-only during an admission review (validate)",
        ],
    );
    assert!(
        !cluster
            .kubectl_raw(&["get", "configmap", "write-1-side-effect"])
            .status
            .success()
    );

    // A mutation may not rename or move the object, nor make it huge.
    refused(
        &cluster,
        "rename-1",
        &["metadata.name", "no mutating webhook may change"],
    );
    refused(&cluster, "move-1", &["metadata.namespace"]);
    refused(
        &cluster,
        "huge-1",
        &["the patched object is", "at most 3145728"],
    );

    let reviews = metric_value(
        host.admin,
        r#"controller_runtime_webhook_requests_total{webhook="/validate/gatekeeper",code="200"}"#,
    )
    .await
    .unwrap_or(0.0);
    assert!(reviews >= 4.0, "{reviews} validating reviews counted");
    let denied = metric_value(
        host.admin,
        r#"wasmctrl_webhook_decisions_total{plugin="gatekeeper",kind="validate",decision="denied",mode="protect"}"#,
    )
    .await
    .unwrap_or(0.0);
    assert!(denied >= 2.0, "{denied} denials counted");
    // The plugin's per-call families tell its reviews from its reconciles.
    for (kind, at_least) in [("validate", reviews), ("mutate", 1.0)] {
        let calls = metric_value(
            host.admin,
            &format!(
                r#"wasmctrl_plugin_instantiate_seconds_count{{plugin="gatekeeper",version="stable",kind="{kind}"}}"#
            ),
        )
        .await
        .unwrap_or(0.0);
        assert!(calls >= at_least, "{calls} {kind} calls counted");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validator_that_loops_is_denied_under_fail_and_allowed_with_a_warning_under_ignore() {
    let cluster = Cluster::start().await;
    {
        let _host = cluster
            .host(&config(artifacts::GATEKEEPER, "protect"))
            .await;
        registered(&cluster, "gatekeeper").await;
        refused(&cluster, "loop-1", &["could not validate", "deadline"]);
    }
    let host = cluster
        .host(&config(artifacts::GATEKEEPER_IGNORE, "protect"))
        .await;
    eventually(
        "failurePolicy Ignore registered",
        Duration::from_secs(60),
        || async {
            let policy = cluster.kubectl(&[
                "get",
                "validatingwebhookconfiguration",
                "wasmctrl-gatekeeper",
                "-o",
                "jsonpath={.webhooks[0].failurePolicy}",
            ]);
            (policy == "Ignore").then_some(())
        },
    )
    .await;
    let (ok, text) = create(&cluster, "loop-2", &[]);
    assert!(ok, "{text}");
    let failed = metric_value(
        host.admin,
        r#"wasmctrl_webhook_decisions_total{plugin="gatekeeper",kind="validate",decision="failed",mode="protect"}"#,
    )
    .await;
    assert_eq!(failed, Some(1.0), "{text}");
    assert!(text.contains("failurePolicy Ignore: allowed"), "{text}");
    let traps = metric_value(
        host.admin,
        r#"wasmctrl_plugin_traps_total{plugin="gatekeeper",reason="deadline",version="stable",kind="validate"}"#,
    )
    .await;
    assert_eq!(traps, Some(1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitor_mode_admits_everything_and_records_what_it_would_have_denied() {
    let cluster = Cluster::start().await;
    let host = cluster
        .host(&config(artifacts::GATEKEEPER, "monitor"))
        .await;
    registered(&cluster, "gatekeeper").await;
    let (ok, text) = create(&cluster, "deny-2", &[]);
    assert!(ok, "{text}");
    // Monitor mode changes nothing: not even the defaulter's label.
    let labels = cluster.kubectl(&[
        "get",
        "configmap",
        "deny-2",
        "-o",
        "jsonpath={.metadata.labels}",
    ]);
    assert!(!labels.contains("gatekeeper"), "{labels}");
    let would = metric_value(
        host.admin,
        r#"wasmctrl_webhook_decisions_total{plugin="gatekeeper",kind="validate",decision="denied",mode="monitor"}"#,
    )
    .await;
    assert_eq!(would, Some(1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_for_a_resource_outside_the_grant_is_refused_at_load() {
    let cluster = Cluster::start().await;
    let refused = cluster
        .refused_plugin(
            &config(artifacts::GATEKEEPER_SECRETS, "protect"),
            "a webhook on secrets without get on secrets is refused",
        )
        .await;
    assert!(
        refused.contains(
            "webhooks review resources the config does not grant it: get core/secrets in all namespaces"
        ),
        "{refused}"
    );
    // The API server sends a webhook the objects of every namespace: a
    // grant limited to some namespaces, or a mutating webhook without
    // patch, is refused too.
    let in_default = config(artifacts::GATEKEEPER, "protect").replace(
        "verbs: [get, list, watch, create, patch] }",
        "verbs: [get, list, watch, create, patch], namespaces: [default] }",
    );
    let refused = cluster
        .refused_plugin(
            &in_default,
            "webhooks of a namespace-limited grant are refused",
        )
        .await;
    assert!(
        refused.contains("get core/configmaps in all namespaces"),
        "{refused}"
    );
    let read_only = config(artifacts::GATEKEEPER, "protect").replace(
        "verbs: [get, list, watch, create, patch]",
        "verbs: [get, list, watch, create]",
    );
    let refused = cluster
        .refused_plugin(&read_only, "a mutating webhook without patch is refused")
        .await;
    assert!(
        refused.contains(
            "patch core/configmaps in all namespaces (a mutating webhook changes what it reviews)"
        ),
        "{refused}"
    );
}

/// The quick start's operator, as the README's first command runs it:
/// its webhooks registered by themselves, an invalid WebApp refused with
/// the plugin's message, a WebApp without replicas admitted with 1 and
/// the managed-by label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_start_refuses_invalid_webapps_and_defaults_the_rest() {
    quick_start_webhooks(artifacts::WEBAPP).await;
}

/// The Python webapp serves the same webhooks, through the Python SDK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_webapp_refuses_and_defaults_as_the_rust_one() {
    quick_start_webhooks(artifacts::WEBAPP_PY).await;
}

/// And the TypeScript one, through the TypeScript SDK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_webapp_refuses_and_defaults_as_the_rust_one() {
    quick_start_webhooks(artifacts::WEBAPP_TS).await;
}

async fn quick_start_webhooks(component: &str) {
    let cluster = Cluster::start().await;
    cluster.apply_webapp_crd();
    let config = quickstart_config(component);
    assert!(config.webhook.is_some(), "the quick start serves webhooks");
    let _host = RunningHost::start(config, cluster.client.clone(), None).await;
    registered(&cluster, "webapp").await;

    let invalid = cluster.file(
        "invalid.yaml",
        "apiVersion: demo.wasmctrl.dev/v1alpha1\nkind: WebApp\nmetadata: { name: wide }\nspec: { image: nginx, replicas: 51 }\n",
    );
    let out = cluster.kubectl_raw(&["apply", "-f", invalid.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "{text}");
    for says in [
        "The WebApp \"wide\" is invalid",
        "spec.replicas: Invalid value: 51: must be between 0 and 50",
        "spec.image: Invalid value: \"nginx\": must name a tag",
    ] {
        assert!(text.contains(says), "expected {says:?} in: {text}");
    }

    let plain = cluster.file(
        "plain.yaml",
        "apiVersion: demo.wasmctrl.dev/v1alpha1\nkind: WebApp\nmetadata: { name: plain }\nspec: { image: \"nginx:1.27\" }\n",
    );
    cluster.kubectl(&["apply", "-f", plain.to_str().unwrap()]);
    let stored = cluster.kubectl(&[
        "get",
        "webapp",
        "plain",
        "-o",
        "jsonpath={.spec.replicas} {.metadata.labels.app\\.kubernetes\\.io/managed-by}",
    ]);
    assert_eq!(stored, "1 wasmctrl");
}

/// An HTTPS client trusting the host's webhook CA, as a plugin's
/// outbound requests trust `runtime.caBundle`.
fn webhook_client(ca: &str) -> reqwest::Client {
    let tls = wasmctrl::sandbox::outbound::tls_config(Some(ca.as_bytes())).unwrap();
    reqwest::Client::builder()
        .use_preconfigured_tls((*tls).clone())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_client_ca_only_the_api_server_s_certificate_gets_a_review() {
    let cluster = Cluster::start().await;
    let ca = cluster.file("apiserver-ca.crt", cluster.server().ca_pem());
    let text = config(artifacts::GATEKEEPER, "protect").replace(
        "webhook: { bind: \"127.0.0.1:0\" }",
        &format!(
            "webhook: {{ bind: \"127.0.0.1:0\", clientCAFile: {} }}",
            ca.display()
        ),
    );
    let host = cluster.host(&text).await;
    registered(&cluster, "gatekeeper").await;

    // The API server presents the certificate its CA signed: reviews flow.
    refused(
        &cluster,
        "forbid-1",
        &["denied the request: forbidden by the gatekeeper"],
    );
    let (ok, text) = create(&cluster, "plain", &[]);
    assert!(ok, "{text}");

    // Anyone else is refused during the handshake, and counted.
    let client = webhook_client(host.webhook_ca.as_deref().expect("the host's own CA"));
    let base = format!("https://{}", host.webhook.expect("a webhook server"));
    let anonymous = client
        .post(format!("{base}/validate/gatekeeper"))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await;
    assert!(anonymous.is_err(), "{anonymous:?}");
    // The server counts the refusal once its side of the handshake ends,
    // which may be after the client has given up.
    metric_reaches(
        "the refused handshake to be counted",
        Duration::from_secs(10),
        host.admin,
        r#"wasmctrl_webhook_refused_handshakes_total{reason="clientCertificate"}"#,
        1.0,
    )
    .await;
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_server_refuses_what_is_not_a_review_within_its_bounds() {
    let cluster = Cluster::start().await;
    let host = cluster
        .host(&config(artifacts::GATEKEEPER, "protect"))
        .await;
    let client = webhook_client(host.webhook_ca.as_deref().expect("the host's own CA"));
    let base = format!("https://{}", host.webhook.expect("a webhook server"));
    let post = |path: &str, body: Vec<u8>| {
        client
            .post(format!("{base}{path}"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let garbage = post("/validate/gatekeeper", b"{".to_vec()).await.unwrap();
    assert_eq!(garbage.status(), 400);
    assert!(
        garbage
            .text()
            .await
            .unwrap()
            .contains("not an AdmissionReview v1")
    );
    let unknown = post("/validate/nobody", b"{}".to_vec()).await.unwrap();
    assert_eq!(unknown.status(), 404);
    assert!(
        unknown
            .text()
            .await
            .unwrap()
            .contains("no plugin named \"nobody\"")
    );

    // A well-formed review, answered with its uid.
    let review = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "5e1f",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "operation": "CREATE",
            "namespace": "default",
            "name": "deny-3",
            "userInfo": {"username": "tester"},
            "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "deny-3", "namespace": "default"}},
        },
    });
    let answer: serde_json::Value = post(
        "/validate/gatekeeper?timeout=5s",
        review.to_string().into_bytes(),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(answer["response"]["uid"], "5e1f");
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["status"]["code"], 422);
    assert_eq!(
        answer["response"]["status"]["details"]["causes"][0]["field"],
        "data.value"
    );
    // A body that stops arriving is answered once the review's timeout
    // passes, and holds its connection no longer.
    let stalled =
        futures::stream::once(async { Ok::<_, std::io::Error>(b"{\"apiVersion\"".to_vec()) })
            .chain(futures::stream::pending());
    let waited = std::time::Instant::now();
    let late = tokio::time::timeout(
        Duration::from_secs(60),
        client
            .post(format!("{base}/validate/gatekeeper?timeout=1s"))
            .header("content-type", "application/json")
            .body(reqwest::Body::wrap_stream(stalled))
            .send(),
    )
    .await
    .expect("a stalled body is answered, not waited for forever")
    .unwrap();
    assert_eq!(late.status(), 408);
    assert!(waited.elapsed() >= Duration::from_secs(1));
    assert!(
        late.text()
            .await
            .unwrap()
            .contains("did not arrive within 1s")
    );
    // A caller that hangs up mid-review is no longer in flight, and is
    // counted as 499.
    let in_flight = || async {
        metric_value(
            host.admin,
            r#"controller_runtime_webhook_requests_in_flight{webhook="/validate/gatekeeper"}"#,
        )
        .await
    };
    let hanging = tokio::spawn(
        client
            .post(format!("{base}/validate/gatekeeper?timeout=30s"))
            .header("content-type", "application/json")
            .body(reqwest::Body::wrap_stream(
                futures::stream::once(async { Ok::<_, std::io::Error>(b"{".to_vec()) })
                    .chain(futures::stream::pending()),
            ))
            .send(),
    );
    eventually(
        "the hanging review in flight",
        Duration::from_secs(30),
        || async { (in_flight().await == Some(1.0)).then_some(()) },
    )
    .await;
    hanging.abort();
    eventually(
        "the review its caller left no longer in flight",
        Duration::from_secs(30),
        || async {
            let left = metric_value(
                host.admin,
                r#"controller_runtime_webhook_requests_total{webhook="/validate/gatekeeper",code="499"}"#,
            )
            .await;
            (in_flight().await == Some(0.0) && left == Some(1.0)).then_some(())
        },
    )
    .await;
    // Past the bound the body is not read further: the server answers and
    // closes the connection, so this is the last request.
    let too_big = post("/validate/gatekeeper", vec![b' '; 8 << 20])
        .await
        .unwrap();
    assert_eq!(too_big.status(), 413);
    assert!(
        too_big
            .text()
            .await
            .unwrap()
            .contains("at most 7340032 bytes")
    );
    for (code, at_least) in [("413", 1.0), ("408", 1.0), ("400", 1.0), ("200", 1.0)] {
        let counted = metric_value(
            host.admin,
            &format!(
                r#"controller_runtime_webhook_requests_total{{webhook="/validate/gatekeeper",code="{code}"}}"#
            ),
        )
        .await
        .unwrap_or(0.0);
        assert!(counted >= at_least, "{code}: {counted}");
    }
}

/// Replicas behind one Service share the CA kept in `webhook.caSecret`: the
/// first stores it, the next reads it, and the `caBundle` registered
/// verifies both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_the_ca_kept_in_the_secret() {
    let cluster = Cluster::start().await;
    cluster.kubectl(&["create", "secret", "generic", "webhook-ca"]);
    let text = config(artifacts::GATEKEEPER, "protect").replace(
        "webhook: { bind: \"127.0.0.1:0\" }",
        "webhook: { bind: \"127.0.0.1:0\", caSecret: { namespace: default, name: webhook-ca } }",
    );
    let first = cluster.host(&text).await;
    let second = cluster.host(&text).await;
    let ca = first.webhook_ca.clone().expect("a CA");
    assert_eq!(second.webhook_ca.as_deref(), Some(ca.as_str()));
    let stored = cluster.kubectl(&[
        "get",
        "secret",
        "webhook-ca",
        "-o",
        "jsonpath={.data.ca\\.crt}",
    ]);
    assert!(!stored.is_empty(), "the CA is stored");
    // The second replica's own serving certificate verifies against it.
    let review = webhook_client(&ca)
        .post(format!(
            "https://{}/validate/gatekeeper",
            second.webhook.unwrap()
        ))
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(review.status(), 400);
}

/// A self-signed serving pair for the host's webhook address, written to
/// `dir` as cert-manager's selfSigned issuer writes it (`ca.crt` is the
/// certificate itself), newer than anything there before. Returns the
/// certificate's PEM.
fn mount_self_signed(dir: &std::path::Path, stamp: std::time::SystemTime) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "wasmctrl-webhook");
    let cert = params.self_signed(&key).unwrap();
    for (file, text) in [
        ("tls.key", key.serialize_pem()),
        ("tls.crt", cert.pem()),
        ("ca.crt", cert.pem()),
    ] {
        let path = dir.join(file);
        std::fs::write(&path, text).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(stamp)
            .unwrap();
    }
    cert.pem()
}

/// A mounted certificate renewed with its CA (cert-manager's selfSigned
/// issuer renews both) is registered again, so the API server verifies
/// the renewed certificate and reviews go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_mounted_certificate_is_registered_with_its_new_ca() {
    use base64::Engine as _;
    let cluster = Cluster::start().await;
    let dir = tempfile::tempdir().unwrap();
    let start = std::time::SystemTime::now();
    let first = mount_self_signed(dir.path(), start);
    let text = config(artifacts::GATEKEEPER, "protect").replace(
        "webhook: { bind: \"127.0.0.1:0\" }",
        &format!(
            "webhook: {{ bind: \"127.0.0.1:0\", certDir: {} }}",
            dir.path().display()
        ),
    );
    let host = cluster.host(&text).await;
    registered(&cluster, "gatekeeper").await;
    let bundle = || {
        let shown = cluster.kubectl(&[
            "get",
            "validatingwebhookconfiguration",
            "wasmctrl-gatekeeper",
            "-o",
            "jsonpath={.webhooks[0].clientConfig.caBundle}",
        ]);
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(shown.trim())
                .unwrap(),
        )
        .unwrap()
    };
    assert_eq!(bundle(), first);
    refused(
        &cluster,
        "forbid-1",
        &["denied the request: forbidden by the gatekeeper"],
    );

    let renewed = mount_self_signed(dir.path(), start + Duration::from_secs(10));
    assert_ne!(renewed, first);
    eventually(
        "the renewed CA registered",
        Duration::from_secs(60),
        || async { (bundle() == renewed).then_some(()) },
    )
    .await;
    // The API server now verifies the renewed certificate.
    refused(
        &cluster,
        "forbid-2",
        &["denied the request: forbidden by the gatekeeper"],
    );
    host.stop().await.unwrap();
}

/// A configuration deleted or edited by someone else is put back at the
/// next `reapplyInterval`: the plugin's reviews do not stop being asked
/// for in silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_or_edited_configuration_is_put_back() {
    let cluster = Cluster::start().await;
    let text = config(artifacts::GATEKEEPER, "protect").replace(
        "webhook: { bind: \"127.0.0.1:0\" }",
        "webhook: { bind: \"127.0.0.1:0\", reapplyInterval: 1s }",
    );
    let host = cluster.host(&text).await;
    registered(&cluster, "gatekeeper").await;
    let policy = || {
        cluster.kubectl(&[
            "get",
            "validatingwebhookconfiguration",
            "wasmctrl-gatekeeper",
            "-o",
            "jsonpath={.webhooks[0].failurePolicy}",
        ])
    };
    assert_eq!(policy().trim(), "Fail");

    // The patch's answer is the object as stored: the edit took.
    let edited = cluster.kubectl(&[
        "patch",
        "validatingwebhookconfiguration",
        "wasmctrl-gatekeeper",
        "--type=json",
        "-p",
        r#"[{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]"#,
        "-o",
        "jsonpath={.webhooks[0].failurePolicy}",
    ]);
    assert_eq!(edited.trim(), "Ignore");
    eventually(
        "the edited configuration put back",
        Duration::from_secs(60),
        || async { (policy().trim() == "Fail").then_some(()) },
    )
    .await;

    cluster.kubectl(&[
        "delete",
        "validatingwebhookconfiguration",
        "wasmctrl-gatekeeper",
    ]);
    registered(&cluster, "gatekeeper").await;
    refused(
        &cluster,
        "forbid-1",
        &["denied the request: forbidden by the gatekeeper"],
    );
    host.stop().await.unwrap();
}
