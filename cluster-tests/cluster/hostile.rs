//! A hostile plugin against the real host and API server: every attempt to
//! get past its grant or its ceilings is refused, the host stays up, and
//! other keys keep being reconciled.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use wasmctrl_cluster_tests::{Cluster, configmap};
use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::{
    admin::{self, metric_line, metric_reaches, metric_value},
    eventually,
};

/// The quick start's kind of grant: ConfigMaps in every namespace.
fn config(component: &str) -> String {
    format!(
        r#"
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
shutdownTimeout: 5s
plugins:
  - name: hostile
    path: {component}
    maxConcurrentReconciles: 2
    reconcileTimeout: 5s
    maxRetries: 0
    permissions:
      - {{ group: "", resources: [configmaps], verbs: [get, list, watch, patch, create] }}
"#
    )
}

pub(crate) async fn create(api: &Api<ConfigMap>, name: &str) {
    api.create(&PostParams::default(), &configmap(name))
        .await
        .unwrap();
}

/// Waits until the ConfigMap `name` carries the label the plugin's normal
/// path sets.
async fn reconciled(api: &Api<ConfigMap>, name: &str) {
    reconciled_within(api, name, Duration::from_secs(60)).await;
}

/// [`reconciled`], waiting at most `limit` (interpreted guests start
/// slower).
pub(crate) async fn reconciled_within(api: &Api<ConfigMap>, name: &str, limit: Duration) {
    eventually(&format!("{name} reconciled"), limit, || async {
        let cm = api.get(name).await.ok()?;
        (cm.metadata.labels?.get("wasmctrl.dev/hostile")? == "reconciled").then_some(())
    })
    .await;
}

/// Why the host refused to load `component` as its plugin.
async fn refused_at_load(component: &str, why: &str) -> String {
    Cluster::start()
        .await
        .refused_plugin(&config(component), why)
        .await
}

/// Waits until the plugin ran into `limit`, counted as such and as a
/// limit trap.
async fn stopped_at_limit(admin: std::net::SocketAddr, limit: &str) {
    let counted = format!(
        r#"wasmctrl_plugin_limit_exceeded_total{{plugin="hostile",limit="{limit}",version="stable"}}"#
    );
    eventually(
        &format!("the plugin stopped at {limit}"),
        Duration::from_secs(60),
        || metric_line(admin, &counted),
    )
    .await;
    eventually("the limit trap counted", Duration::from_secs(60), || {
        metric_line(
            admin,
            r#"wasmctrl_plugin_traps_total{plugin="hostile",reason="limit",version="stable",kind="reconcile"}"#,
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_string_a_guest_passes_reaches_a_path_outside_its_grant() {
    let cluster = Cluster::start().await;
    let host = cluster.host(&config(artifacts::HOSTILE)).await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    let writes_before = cluster.server().audit().records().len();
    // `inject` tries URL injection through every string argument; its
    // reconcile succeeds only if the host refused every attempt.
    create(&api, "inject").await;
    eventually("the injection reconcile", Duration::from_secs(60), || {
        metric_line(
            host.admin,
            r#"controller_runtime_reconcile_total{controller="hostile",result="success",version="stable"}"#,
        )
    })
    .await;
    let terminal = metric_value(
        host.admin,
        r#"controller_runtime_terminal_reconcile_errors_total{controller="hostile",version="stable"}"#,
    )
    .await
    .unwrap_or(0.0);
    assert_eq!(
        terminal, 0.0,
        "an injection attempt was not refused (see the log)"
    );
    // Nothing of it reached the API server: no request, no write.
    let requests = metric_value(
        host.admin,
        r#"wasmctrl_plugin_api_requests_total{plugin="hostile"}"#,
    )
    .await
    .unwrap_or(0.0);
    assert_eq!(requests, 0.0);
    // Both oversized bodies were refused at the payload ceiling, and counted.
    let oversized = metric_value(
        host.admin,
        r#"wasmctrl_plugin_limit_exceeded_total{plugin="hostile",limit="payload",version="stable"}"#,
    )
    .await;
    assert!(oversized.is_some_and(|n| n >= 2.0), "{oversized:?}");
    let writes: Vec<_> = cluster.server().audit().records()[writes_before..]
        .iter()
        .filter(|w| w.name.as_deref() != Some("inject"))
        .map(|w| {
            format!(
                "{} {}/{} {:?}",
                w.verb,
                w.resource,
                w.subresource.clone().unwrap_or_default(),
                w.name
            )
        })
        .collect();
    assert!(
        writes.is_empty(),
        "writes reached the API server: {writes:?}"
    );
    // Refusals before resolution never become metric labels.
    let (_, metrics) = admin::http_get(host.admin, "/metrics").await;
    let labels: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with(r#"wasmctrl_hostapi_calls_total{plugin="hostile""#))
        .collect();
    assert!(
        labels.iter().all(|l| l.contains(r#"resource="configmaps""#)
            || l.contains(r#"resource="configmaps/status""#)
            || l.contains(r#"resource="secrets""#)
            || l.contains(r#"resource="pods""#)
            || l.contains(r#"resource="events""#)
            || l.contains(r#"resource="<unresolved>""#)),
        "{labels:#?}"
    );
    // The plugin still works for honest keys.
    create(&api, "honest").await;
    reconciled(&api, "honest").await;
    host.stop().await.unwrap();
}

/// A guest that holds WASI resources (pollables) without end is stopped at
/// the store's bound with a `limit` trap, counted under its own limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hoarding_wasi_resources_is_stopped_at_the_bound_and_counted() {
    let cluster = Cluster::start().await;
    let host = cluster.host(&config(artifacts::HOSTILE)).await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    create(&api, "resource-hoard").await;
    create(&api, "honest").await;
    stopped_at_limit(host.admin, "wasiResources").await;
    reconciled(&api, "honest").await;
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_an_ungranted_kind_refuses_the_load_and_starts_no_informer() {
    let message = refused_at_load(
        artifacts::HOSTILE_WATCH_SECRET,
        "a plugin watching Secrets with a ConfigMap grant is refused",
    )
    .await;
    assert!(
        message.contains("does not grant list and watch")
            && message.contains("list core/secrets cluster-wide")
            && message.contains("watch core/secrets cluster-wide"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_of_output_logs_and_host_calls_are_cut_while_other_keys_are_reconciled() {
    let cluster = Cluster::start().await;
    let host = cluster.host(&config(artifacts::HOSTILE)).await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    for name in ["output-flood", "log-flood", "host-call-flood"] {
        create(&api, name).await;
    }
    for i in 0..10 {
        create(&api, &format!("honest-{i}")).await;
    }
    for i in 0..10 {
        reconciled(&api, &format!("honest-{i}")).await;
    }
    // The host-call flood is stopped at its ceiling, as a limit trap.
    stopped_at_limit(host.admin, "hostCalls").await;
    // The output flood was written in full by the guest and cut by the host.
    let written = metric_reaches(
        "the output flood measured",
        Duration::from_secs(60),
        host.admin,
        r#"wasmctrl_plugin_output_bytes_total{plugin="hostile",version="stable",kind="reconcile"}"#,
        (64 << 20) as f64,
    )
    .await;
    assert!(written >= (64 << 20) as f64, "{written}");
    // The host is healthy and the plugin keeps serving.
    assert_eq!(admin::http_get(host.admin, "/healthz").await.0, 200);
    create(&api, "honest-after").await;
    reconciled(&api, "honest-after").await;
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_with_more_tables_than_its_ceiling_is_refused() {
    let message = refused_at_load(
        artifacts::MANY_TABLES,
        "33 tables exceed the default ceiling of 32",
    )
    .await;
    assert!(
        message.contains("33 tables") && message.contains("limits.tables"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_with_more_core_instances_than_its_ceiling_is_refused() {
    let message = refused_at_load(
        artifacts::MANY_INSTANCES,
        "33 core instances besides the component's own exceed the default ceiling of 32",
    )
    .await;
    assert!(
        message.contains("(limit)")
            && message.contains("instance count too high at 33")
            && message.contains("limits.instances"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_with_many_memories_is_held_to_one_memory_limit() {
    let message = refused_at_load(
        artifacts::MANY_MEMORIES,
        "four memories of 30 MiB exceed a 64 MiB memoryLimit together",
    )
    .await;
    assert!(message.contains("(memory)"), "{message}");
}

/// The hostile plugin as its own shadow candidate, with the admin token
/// set: the candidate's writes are answered in the host.
fn shadowed(dir: &std::path::Path) -> String {
    std::fs::write(dir.join("admin-token"), "s3cret-admin-token\n").unwrap();
    format!(
        r#"{}
    candidate:
      path: {component}
      mode: shadow
      maxConcurrentShadows: 2
      settings: {{ attack: true }}
admin: {{ bind: "127.0.0.1:0", tokenFile: admin-token }}
"#,
        config(artifacts::HOSTILE).trim_end(),
        component = artifacts::HOSTILE
    )
}

/// The shadow report, read with the admin token.
async fn shadow_report(admin: std::net::SocketAddr) -> serde_json::Value {
    let (status, body) = admin::http(
        admin,
        "GET",
        "/plugins/hostile/shadow",
        &[("Authorization", "Bearer s3cret-admin-token")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// A shadow candidate's JSON patches are applied in the host under the API
/// server's own bounds: one that would nest the object 32,767 levels deep
/// (which overflowed the guest's stack and aborted the host) and one whose
/// copies double it thirty times (which took the host to gigabytes) are
/// both refused, and the host goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_candidate_s_patch_bombs_are_refused_under_the_api_server_s_bounds() {
    let cluster = Cluster::start().await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    create(&api, "patch-depth").await;
    create(&api, "patch-copies").await;
    let host = cluster.host(&shadowed(cluster.dir.path())).await;
    // The stable version labels both; the candidate's patches are refused,
    // each naming the bound it ran into.
    let refusal = |report: &serde_json::Value, key: &str| -> Option<String> {
        report["divergences"]
            .as_array()?
            .iter()
            .find(|d| d["key"] == key)
            .and_then(|d| d["candidate"]["error"].as_str())
            .map(str::to_string)
    };
    let report = eventually(
        "both candidates' refusals reported",
        Duration::from_secs(120),
        || async {
            let r = shadow_report(host.admin).await;
            (refusal(&r, "default/patch-depth").is_some()
                && refusal(&r, "default/patch-copies").is_some())
            .then_some(r)
        },
    )
    .await;
    let depth = refusal(&report, "default/patch-depth").unwrap();
    assert!(
        depth.contains("invalid") && depth.contains("levels deep"),
        "{depth}"
    );
    let copies = refusal(&report, "default/patch-copies").unwrap();
    assert!(
        copies.contains("invalid") && copies.contains("copy"),
        "{copies}"
    );
    let counted = metric_value(
        host.admin,
        r#"wasmctrl_plugin_limit_exceeded_total{plugin="hostile",limit="shadowPatch",version="candidate"}"#,
    )
    .await;
    // At least one refusal per key (a key may be shadowed more than once).
    assert!(counted.is_some_and(|n| n >= 2.0), "{counted:?}");
    reconciled(&api, "patch-depth").await;
    reconciled(&api, "patch-copies").await;
    assert_eq!(admin::http_get(host.admin, "/healthz").await.0, 200);
    create(&api, "honest").await;
    reconciled(&api, "honest").await;
    host.stop().await.unwrap();
}

/// What the shadow endpoint serves — both versions' write bodies — and
/// the status page — keys and error messages — need the admin token when
/// one is set, as the POST endpoints do; a browser may bring it in the
/// page's query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shadow_report_and_the_status_page_need_the_admin_token() {
    let cluster = Cluster::start().await;
    let host = cluster.host(&shadowed(cluster.dir.path())).await;
    let (status, body) = admin::http_get(host.admin, "/plugins/hostile/shadow").await;
    assert_eq!(status, 401, "{body}");
    let (status, _) = admin::http(
        host.admin,
        "GET",
        "/plugins/hostile/shadow",
        &[("Authorization", "Bearer wrong")],
    )
    .await;
    assert_eq!(status, 401);
    shadow_report(host.admin).await;
    for page in ["/", "/status/fragment"] {
        assert_eq!(admin::http_get(host.admin, page).await.0, 401, "{page}");
        let wrong = format!("{page}?token=wrong");
        assert_eq!(admin::http_get(host.admin, &wrong).await.0, 401, "{page}");
        let (status, body) =
            admin::http_get(host.admin, &format!("{page}?token=s3cret-admin-token")).await;
        assert_eq!(status, 200, "{page}: {body}");
        assert!(body.contains(r#"data-plugin="hostile""#), "{page}: {body}");
        let (status, _) = admin::http(
            host.admin,
            "GET",
            page,
            &[("Authorization", "Bearer s3cret-admin-token")],
        )
        .await;
        assert_eq!(status, 200, "{page}");
    }
    let (_, page) = admin::http_get(host.admin, "/?token=s3cret-admin-token").await;
    assert!(
        page.contains("/status/fragment?token=s3cret-admin-token"),
        "the page refreshes with its token"
    );
    // Only the pages a browser opens take the token in their query.
    let (status, _) = admin::http_get(
        host.admin,
        "/plugins/hostile/shadow?token=s3cret-admin-token",
    )
    .await;
    assert_eq!(status, 401);
    // Scrapers and probes stay open.
    assert_eq!(admin::http_get(host.admin, "/metrics").await.0, 200);
    assert_eq!(admin::http_get(host.admin, "/plugins").await.0, 200);
    host.stop().await.unwrap();
}

/// Any web page a local browser opens can send requests to a loopback
/// port. On a loopback admin address without a token, a request addressed
/// to another name (a DNS rebinding page) is refused, and a POST from
/// another origin's page is refused; curl's requests, and the status page's
/// own, are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_port_refuses_what_a_page_of_another_site_sends() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cluster = Cluster::start().await;
    let host = cluster.host(&config(artifacts::HOSTILE)).await;
    let port = host.admin.port();
    let send = |method: &str, path: &str, headers: &str| {
        let request = format!(
            "{method} {path} HTTP/1.1\r\n{headers}Connection: close\r\nContent-Length: 0\r\n\r\n"
        );
        let addr = host.admin;
        async move {
            let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
            conn.write_all(request.as_bytes()).await.unwrap();
            let mut got = Vec::new();
            conn.read_to_end(&mut got).await.unwrap();
            let text = String::from_utf8_lossy(&got).into_owned();
            let status: u16 = text.split_whitespace().nth(1).unwrap().parse().unwrap();
            (status, text)
        }
    };
    let (status, text) = send(
        "GET",
        "/plugins",
        &format!("Host: rebind.example:{port}\r\n"),
    )
    .await;
    assert_eq!(status, 403, "{text}");
    assert!(text.contains(r#"not \"rebind.example\""#), "{text}");
    for name in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "[::1]".into(),
    ] {
        let (status, text) = send("GET", "/plugins", &format!("Host: {name}\r\n")).await;
        assert_eq!(status, 200, "{name}: {text}");
    }
    let reload = "/plugins/hostile/reload";
    let (status, text) = send(
        "POST",
        reload,
        &format!("Host: 127.0.0.1:{port}\r\nOrigin: https://evil.example\r\n"),
    )
    .await;
    assert_eq!(status, 403, "{text}");
    assert!(
        text.contains("a POST from a page of another origin"),
        "{text}"
    );
    // Another port of the same machine is another origin (a local dev
    // server's page, say).
    let (status, text) = send(
        "POST",
        reload,
        &format!("Host: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:3000\r\n"),
    )
    .await;
    assert_eq!(status, 403, "another port: {text}");
    let (status, text) = send(
        "POST",
        reload,
        &format!("Host: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\n"),
    )
    .await;
    assert_eq!(status, 200, "the page's own origin: {text}");
    let (status, text) = send("POST", reload, &format!("Host: 127.0.0.1:{port}\r\n")).await;
    assert_eq!(status, 200, "no Origin (curl): {text}");
    host.stop().await.unwrap();
}

/// A guest's error message is output like any other: counted in its
/// output bytes, cut to a bounded length before the host logs it or puts
/// it anywhere, and the cut counted as a limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_error_message_is_counted_as_output_and_cut() {
    let cluster = Cluster::start().await;
    let host = cluster.host(&config(artifacts::HOSTILE)).await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    create(&api, "huge-error").await;
    eventually("the cut counted", Duration::from_secs(60), || {
        metric_line(
            host.admin,
            r#"wasmctrl_plugin_limit_exceeded_total{plugin="hostile",limit="errorMessage",version="stable"}"#,
        )
    })
    .await;
    let written = metric_value(
        host.admin,
        r#"wasmctrl_plugin_output_bytes_total{plugin="hostile",version="stable",kind="reconcile"}"#,
    )
    .await
    .unwrap_or(0.0);
    assert!(written >= (8 << 20) as f64, "{written}");
    create(&api, "honest").await;
    reconciled(&api, "honest").await;
    host.stop().await.unwrap();
}

/// A list past the plugin's `listBytes` and calls past its `apiQps` are
/// refused, each counted under its own limit, and the plugin goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_past_list_bytes_and_calls_past_api_qps_are_refused_and_counted() {
    let cluster = Cluster::start().await;
    let host = cluster
        .host(&format!(
            "{}    limits: {{ listBytes: 1Ki, apiQps: 1, apiBurst: 1 }}\n",
            config(artifacts::HOSTILE).replace("reconcileTimeout: 5s", "reconcileTimeout: 2s")
        ))
        .await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    // Six ConfigMaps of about 250 bytes each: past 1 KiB as a list.
    for i in 0..4 {
        create(&api, &format!("filler-{i}")).await;
    }
    create(&api, "big-list").await;
    create(&api, "api-flood").await;
    for limit in ["listBytes", "apiQps"] {
        let counted = format!(
            r#"wasmctrl_plugin_limit_exceeded_total{{plugin="hostile",limit="{limit}",version="stable"}}"#
        );
        eventually(&format!("{limit} counted"), Duration::from_secs(60), || {
            metric_line(host.admin, &counted)
        })
        .await;
    }
    // The plugin goes on: once the hostile keys are done (no worker busy,
    // nothing queued), the bucket owes at most the last admitted call's
    // second, and an honest key's one call fits in its deadline. Created
    // earlier, it could meet the flood's reservations and, with
    // `maxRetries: 0`, fail for good. The flood's ConfigMap goes first: its
    // own patches queue it again, so it could start over between two
    // looks at the queue and take the honest call's token.
    api.delete("api-flood", &Default::default()).await.unwrap();
    eventually("the hostile keys done", Duration::from_secs(60), || async {
        let (_, metrics) = admin::http_get(host.admin, "/metrics").await;
        let busy = metrics.lines().any(|l| {
            (l.starts_with(r#"controller_runtime_active_workers{controller="hostile"}"#)
                || l.starts_with(r#"workqueue_depth{name="hostile""#))
                && !l.ends_with(" 0")
        });
        !busy
    })
    .await;
    create(&api, "honest").await;
    reconciled(&api, "honest").await;
    host.stop().await.unwrap();
}
