//! The `wasmctrl` binary as a user runs it: leader election across two
//! processes against the embedded API server, takeover when the leader is
//! killed (also for WasmReconciler plugins pulled with a Secret), and a
//! clean exit on SIGTERM.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::admin::{http_get, metric_reaches, metric_value};
use wasmctrl_testkit::client::client_for;
use wasmctrl_testkit::registry::{PASSWORD, Registry, USER};
use wasmctrl_testkit::{eventually, kubectl};

use crate::binary::Run;

async fn state(host: &Run) -> Option<String> {
    let (_, body) = http_get(host.admin, "/plugins").await;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v[0]["state"].as_str().map(str::to_string)
}

/// Waits until `host`'s plugin is in `wanted` state.
async fn wait_state(what: &str, host: &Run, wanted: &str) {
    eventually(what, Duration::from_secs(30), || async {
        (state(host).await.as_deref() == Some(wanted)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_when_the_leader_dies_and_sigterm_exits_cleanly() {
    let server = wasmctrl_apiserver::ApiServer::start(wasmctrl_apiserver::Config::default())
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("wasmctrl-le-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let config = dir.join("wasmctrl.yaml");
    std::fs::write(
        &config,
        format!(
            r#"apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
admin: {{ bind: "127.0.0.1:0" }}
shutdownTimeout: 5s
leaderElection: {{ enabled: true, leaseName: le-test, leaseDuration: 2s, retryPeriod: 200ms }}
plugins:
  - name: misbehave
    path: {}
    namespaces: [default]
    permissions: [ {{ resources: [configmaps], verbs: [list, watch] }} ]
"#,
            artifacts::MISBEHAVE
        ),
    )
    .unwrap();

    let mut leader = Run::start(&config, &kubeconfig).await;
    wait_state("the first host to lead", &leader, "running").await;
    let mut standby = Run::start(&config, &kubeconfig).await;
    wait_state("the second host to stand by", &standby, "standby").await;

    // The leader dies without releasing its lease.
    leader.process.kill();
    let killed = Instant::now();
    wait_state("the standby to take over", &standby, "running").await;
    // Within the lease duration plus retry periods (loose for a loaded CI machine).
    assert!(
        killed.elapsed() < Duration::from_secs(15),
        "took {:?}",
        killed.elapsed()
    );

    // SIGTERM: drain and exit 0.
    standby.process.signal("TERM");
    let status = standby.process.exited(Duration::from_secs(30)).await;
    assert!(status.success(), "exit status {status:?}");
    server.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The value of the first `/metrics` line starting with `needle` (0 if absent).
async fn metric(admin: SocketAddr, needle: &str) -> f64 {
    metric_value(admin, needle).await.unwrap_or(0.0)
}

/// A `wasmctrl run` process against an in-process API server, its memory
/// measured from the moment it is ready (the peak of start-up, compiling
/// components, forgotten).
struct Measured {
    server: wasmctrl_apiserver::ApiServer,
    _dir: tempfile::TempDir,
    host: Run,
    idle: u64,
    configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap>,
}

impl Measured {
    /// Starts the host with `plugins` (the config's `plugins:` entries).
    async fn start(plugins: &str) -> Self {
        let (server, dir, kubeconfig) = crate::binary::api_server().await;
        let config = dir.path().join("wasmctrl.yaml");
        // The interpreted guests' compile is done once per build of them;
        // memory is measured from readiness on, after any compile.
        let cache = wasmctrl_testkit::kept::compiled_components_dir();
        std::fs::write(
            &config,
            format!(
                "apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\nadmin: {{ bind: \"127.0.0.1:0\" }}\nruntime: {{ cacheDir: {cache:?} }}\nplugins:\n{plugins}"
            ),
        )
        .unwrap();
        let host = Run::start(&config, &kubeconfig).await;
        eventually("readiness", Duration::from_secs(120), || async {
            (http_get(host.admin, "/readyz").await.0 == 200).then_some(())
        })
        .await;
        let idle = host.process.memory("VmRSS");
        // Resets the peak (VmHWM) to what is resident now.
        std::fs::write(format!("/proc/{}/clear_refs", host.process.id()), "5").unwrap();
        let client = client_for(&kubeconfig).await;
        Measured {
            server,
            _dir: dir,
            host,
            idle,
            configmaps: kube::Api::namespaced(client, "default"),
        }
    }

    async fn create(&self, names: &[&str]) {
        for name in names {
            let cm =
                serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
            self.configmaps
                .create(&Default::default(), &cm)
                .await
                .unwrap();
        }
    }

    /// Waits until `plugin`'s stable version finished `keys` reconciles,
    /// whatever their result.
    async fn handled(&self, plugin: &str, keys: usize) {
        let success = format!(
            r#"controller_runtime_reconcile_total{{controller="{plugin}",result="success",version="stable"}}"#
        );
        let errors = format!(
            r#"controller_runtime_reconcile_errors_total{{controller="{plugin}",version="stable"}}"#
        );
        eventually(
            &format!("{plugin} handled {keys} keys"),
            Duration::from_secs(300),
            || async {
                let done = metric(self.host.admin, &success).await
                    + metric(self.host.admin, &errors).await;
                (done >= keys as f64).then_some(())
            },
        )
        .await;
    }

    /// Asserts the peak since ready grew by at most `bound` and the host is
    /// healthy, then stops both.
    async fn assert_within(mut self, bound: u64) {
        let peak = self.host.process.memory("VmHWM");
        let grew = peak.saturating_sub(self.idle);
        eprintln!(
            "idle {} MiB, peak {} MiB (+{} MiB, bound +{} MiB)",
            self.idle >> 20,
            peak >> 20,
            grew >> 20,
            bound >> 20
        );
        assert!(
            grew <= bound,
            "peak RSS {} MiB is {} MiB over idle {} MiB; the bound is {} MiB",
            peak >> 20,
            grew >> 20,
            self.idle >> 20,
            bound >> 20
        );
        assert_eq!(http_get(self.host.admin, "/healthz").await.0, 200);
        self.host.process.kill();
        self.server.shutdown().await;
    }
}

/// A `plugins:` entry of the hostile plugin `name` at `path`, its
/// ConfigMap grant and `extra` settings.
fn hostile(name: &str, path: &str, concurrency: u64, memory_limit: u64, extra: &str) -> String {
    format!(
        r#"  - name: {name}
    path: {path}
    maxConcurrentReconciles: {concurrency}
    memoryLimit: {memory_limit}
    maxRetries: 0
    permissions: [ {{ resources: [configmaps], verbs: [get, list, watch, patch, create] }} ]
{extra}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_leave_the_host_within_its_memory_bound() {
    let (memory_limit, concurrency) = (64u64 << 20, 2u64);
    let host = Measured::start(&hostile(
        "hostile",
        artifacts::HOSTILE,
        concurrency,
        memory_limit,
        "    reconcileTimeout: 5s\n",
    ))
    .await;
    host.create(&["output-flood", "log-flood", "host-call-flood"])
        .await;
    host.handled("hostile", 3).await;
    host.assert_within(memory_limit * concurrency + (32 << 20))
        .await;
}

/// What a guest sends to and returns from the host, at its worst: bodies
/// within the payload limit made of millions of tiny JSON values (a tree of
/// them is about 16 times the text), a shadow candidate's patches that
/// would nest its object 32,767 levels deep or double it thirty times, and
/// an 8 MiB error message. The host stays up and within its bound: the
/// instances' memory (reconciles and shadow runs) plus 32 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_payloads_leave_the_host_within_its_memory_bound() {
    let (memory_limit, concurrency, shadows) = (32u64 << 20, 4u64, 2u64);
    let candidate = format!(
        "    reconcileTimeout: 20s\n    candidate:\n      path: {}\n      mode: shadow\n      maxConcurrentShadows: {shadows}\n      settings: {{ attack: true }}\n",
        artifacts::HOSTILE
    );
    let host = Measured::start(&hostile(
        "hostile",
        artifacts::HOSTILE,
        concurrency,
        memory_limit,
        &candidate,
    ))
    .await;
    // The patch bombs alone first, one per shadow permit: a key whose
    // shadow run finds every permit busy is skipped for good (it is not
    // retried), so nothing else may hold a permit until both compared.
    host.create(&["patch-depth", "patch-copies"]).await;
    eventually(
        "the shadow runs compared",
        Duration::from_secs(120),
        || async {
            let (_, body) = http_get(host.host.admin, "/plugins/hostile/shadow").await;
            let report: serde_json::Value = serde_json::from_str(&body).ok()?;
            let refused = |key: &str| {
                report["divergences"].as_array().is_some_and(|d| {
                    d.iter().any(|d| {
                        d["key"] == key
                            && d["candidate"]["error"]
                                .as_str()
                                .is_some_and(|e| e.contains("invalid: the patch fails"))
                    })
                })
            };
            (refused("default/patch-depth") && refused("default/patch-copies")).then_some(())
        },
    )
    .await;
    host.create(&[
        "huge-error",
        "tiny-values-0",
        "tiny-values-1",
        "tiny-values-2",
        "tiny-values-3",
    ])
    .await;
    host.handled("hostile", 7).await;
    host.assert_within(memory_limit * (concurrency + shadows) + (32 << 20))
        .await;
}

/// The Python and TypeScript hostile guests in one host, each key run by
/// both: output floods, an 8 MiB error message, bodies nested 100 000
/// levels deep and host-call floods leave the host within its bound (the
/// instances' memory plus 32 MiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interpreted_hostile_guests_leave_the_host_within_its_memory_bound() {
    let (memory_limit, concurrency) = (256u64 << 20, 2u64);
    // Room for an interpreter's slower start, not for the whole output
    // flood: its 100,000 lines run at the host's pace for about a minute,
    // and twenty seconds of it are flood enough (the Rust guest's get
    // five).
    let timeout = "    reconcileTimeout: 20s\n";
    let host = Measured::start(&format!(
        "{}{}",
        hostile(
            "hostile-py",
            artifacts::HOSTILE_PY,
            concurrency,
            memory_limit,
            timeout
        ),
        hostile(
            "hostile-ts",
            artifacts::HOSTILE_TS,
            concurrency,
            memory_limit,
            timeout
        ),
    ))
    .await;
    let names = ["output-flood", "huge-error", "deep-json", "host-call-flood"];
    host.create(&names).await;
    for plugin in ["hostile-py", "hostile-ts"] {
        host.handled(plugin, names.len()).await;
    }
    host.assert_within(memory_limit * concurrency * 2 + (32 << 20))
        .await;
}

/// An API server, a directory with a kubeconfig per host identity, and the
/// mirror plugin's objects.
struct Fixture {
    server: wasmctrl_apiserver::ApiServer,
    dir: tempfile::TempDir,
    api: kube::Api<k8s_openapi::api::core::v1::ConfigMap>,
}

impl Fixture {
    async fn start() -> Self {
        let (server, dir, admin) = crate::binary::api_server().await;
        let client = client_for(&admin).await;
        Self {
            server,
            api: kube::Api::namespaced(client, "default"),
            dir,
        }
    }

    /// A kubeconfig whose token the API server's audit names `user`.
    fn kubeconfig_for(&self, user: &str) -> std::path::PathBuf {
        let path = self.dir.path().join(format!("{user}.kubeconfig"));
        std::fs::write(&path, self.server.kubeconfig_for_user(user)).unwrap();
        path
    }

    fn config(&self, name: &str, text: &str) -> std::path::PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    async fn create(&self, n: usize, value: &str) {
        for i in 0..n {
            let cm = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("cm-{i}")},
                "data": {"value": value},
            }))
            .unwrap();
            self.api.create(&Default::default(), &cm).await.unwrap();
        }
    }

    /// Keeps setting `data.value` of every object to a rising counter until
    /// `stop` is set; returns the task.
    fn keep_writing(
        &self,
        n: usize,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) -> tokio::task::JoinHandle<()> {
        let api = self.api.clone();
        tokio::spawn(async move {
            let mut round = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                round += 1;
                for i in 0..n {
                    let patch = serde_json::json!({"data": {"value": format!("r{round}")}});
                    let _ = api
                        .patch(
                            &format!("cm-{i}"),
                            &Default::default(),
                            &kube::api::Patch::Merge(&patch),
                        )
                        .await;
                }
            }
        })
    }

    /// Every object mirrors its current `data.value`.
    async fn converged(&self, what: &str) {
        eventually(what, Duration::from_secs(120), || async {
            let list = self.api.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .all(|c| {
                    c.data.as_ref().and_then(|d| d.get("value"))
                        == c.metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get("wasmctrl.dev/mirror"))
                })
                .then_some(())
        })
        .await;
    }
}

fn mirror_config(extra: &str) -> String {
    // The suites' kept compiled-component cache: each replica and restart
    // would otherwise compile mirror again.
    let cache = wasmctrl_testkit::kept::compiled_components_dir();
    format!(
        r#"apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
admin: {{ bind: "127.0.0.1:0" }}
shutdownTimeout: 5s
runtime: {{ cacheDir: {cache:?} }}
{extra}
plugins:
  - name: mirror
    path: {}
    maxConcurrentReconciles: 2
    namespaces: [default]
    permissions: [ {{ resources: [configmaps], verbs: [get, list, watch, patch] }} ]
"#,
        artifacts::MIRROR
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_under_load_converges_everything_after_a_restart() {
    let f = Fixture::start().await;
    const N: usize = 100;
    f.create(N, "0").await;
    let config = f.config("wasmctrl.yaml", &mirror_config(""));
    let kubeconfig = f.kubeconfig_for("host");
    let mut host = Run::start(&config, &kubeconfig).await;
    f.converged("the initial values mirrored").await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = f.keep_writing(N, stop.clone());
    // Let it work under load, then kill it mid-stream, without a drain.
    metric_reaches(
        "reconciles under load",
        Duration::from_secs(60),
        host.admin,
        r#"controller_runtime_reconcile_total{controller="mirror",result="success",version="stable"}"#,
        // More than two per object: a count, so at least one more.
        (2 * N + 1) as f64,
    )
    .await;
    host.process.signal("KILL");
    host.process.exited(Duration::from_secs(10)).await;
    // The world keeps changing while no host runs.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut restarted = Run::start(&config, &kubeconfig).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.await.unwrap();
    // Level-triggered: the new process sees every object's final state.
    f.converged("every object's final value after the restart")
        .await;
    restarted.process.signal("TERM");
    assert!(
        restarted
            .process
            .exited(Duration::from_secs(30))
            .await
            .success()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_within_the_shutdown_timeout_and_cancels_what_outlives_it() {
    let f = Fixture::start().await;
    let config = f.config(
        "wasmctrl.yaml",
        &format!(
            r#"apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
admin: {{ bind: "127.0.0.1:0" }}
shutdownTimeout: 2s
plugins:
  - name: misbehave
    path: {}
    maxConcurrentReconciles: 2
    reconcileTimeout: 60s
    namespaces: [default]
    permissions: [ {{ resources: [configmaps], verbs: [list, watch] }} ]
"#,
            artifacts::MISBEHAVE
        ),
    );
    let kubeconfig = f.kubeconfig_for("host");
    let mut host = Run::start(&config, &kubeconfig).await;
    eventually("readiness", Duration::from_secs(60), || async {
        (http_get(host.admin, "/readyz").await.0 == 200).then_some(())
    })
    .await;
    // One reconcile that fits the timeout, one that outlives it.
    for name in ["slow-500", "slow-60000"] {
        let cm = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
        f.api.create(&Default::default(), &cm).await.unwrap();
    }
    eventually(
        "both reconciles running",
        Duration::from_secs(60),
        || async {
            (host.process.logged(&["slow-500 started"])
                && host.process.logged(&["slow-60000 started"]))
            .then_some(())
        },
    )
    .await;
    let started = Instant::now();
    host.process.signal("TERM");
    let status = host.process.exited(Duration::from_secs(30)).await;
    let took = started.elapsed();
    assert!(status.success(), "exit status {status:?}");
    // Two seconds of drain, the cancellation grace, and a loaded machine.
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(
        host.process.logged(&["cancelled after"]),
        "the reconcile that outlived the timeout was not cancelled (the guest never saw it)"
    );
}

/// A SIGHUP reload that waits (here for the start's load of a source that
/// never answers) runs beside the host's loop, so SIGTERM still stops the
/// host within its shutdown timeout instead of after the fetch's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_sighup_reload_that_waits_still_exits_in_time() {
    let f = Fixture::start().await;
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let _silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = silent.accept().await {
            held.push(conn);
        }
    });
    let config = f.config(
        "wasmctrl.yaml",
        &format!(
            r#"apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
admin: {{ bind: "127.0.0.1:0" }}
shutdownTimeout: 2s
plugins:
  - name: stalled
    source: {{ url: "http://127.0.0.1:{port}/plugin.wasm", sha256: "{}", insecure: true }}
    namespaces: [default]
    permissions: [ {{ resources: [configmaps], verbs: [list, watch] }} ]
"#,
            "0".repeat(64)
        ),
    );
    let kubeconfig = f.kubeconfig_for("host");
    let mut host = Run::start_logging(&config, &kubeconfig, "wasmctrl=debug", false).await;
    eventually("SIGHUP handled", Duration::from_secs(60), || async {
        host.process.logged(&["SIGHUP reloads the host"])
    })
    .await;
    host.process.signal("HUP");
    eventually("the reload begun", Duration::from_secs(60), || async {
        host.process.logged(&["SIGHUP: reloading"])
    })
    .await;
    let started = Instant::now();
    host.process.signal("TERM");
    let status = host.process.exited(Duration::from_secs(60)).await;
    let took = started.elapsed();
    assert!(status.success(), "exit status {status:?}");
    // Two seconds of drain and a loaded machine; the fetch would take 300 s.
    assert!(took < Duration::from_secs(20), "took {took:?}");
}

/// A component file replaced while its plugin loads (here, while the API
/// server holds the load's discovery, after the fetch) is the version the
/// host ends up running: its follower hears of changes from before the
/// fetch, not only from when the load is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_replaced_while_its_plugin_loads_is_swapped_in() {
    let f = Fixture::start().await;
    let component = f.dir.path().join("stamp.wasm");
    std::fs::copy(artifacts::STAMP_V1, &component).unwrap();
    let config = f.config(
        "wasmctrl.yaml",
        r#"apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
admin: { bind: "127.0.0.1:0" }
plugins:
  - name: stamp
    path: stamp.wasm
    namespaces: [default]
    permissions:
      - { group: "", resources: [configmaps], verbs: [get, list, watch, patch] }
"#,
    );
    let kubeconfig = f.kubeconfig_for("host");
    let faults = f.server.faults();
    faults.hold_requests(Some(wasmctrl_apiserver::testing::Scope::NonResource));
    let host = Run::start_logging(&config, &kubeconfig, "wasmctrl=debug", false).await;
    eventually("v1 fetched", Duration::from_secs(60), || async {
        host.process.logged(&["component fetched", "plugin=stamp"])
    })
    .await;
    let aside = component.with_extension("partial");
    std::fs::copy(artifacts::STAMP_V2, &aside).unwrap();
    std::fs::rename(&aside, &component).unwrap();
    eventually("the change heard", Duration::from_secs(60), || async {
        host.process.logged(&["file changed", "stamp.wasm"])
    })
    .await;
    assert!(
        !host.process.logged(&["plugin loaded"]),
        "the load ended while its discovery was held"
    );
    faults.hold_requests(None);
    let v2 = wasmctrl_testkit::host::file_digest(artifacts::STAMP_V2);
    eventually("v2 serving", Duration::from_secs(60), || async {
        let (_, body) = http_get(host.admin, "/plugins").await;
        body.contains(&v2)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_that_resumes_after_its_lease_never_writes_as_a_second_leader() {
    let f = Fixture::start().await;
    const N: usize = 20;
    f.create(N, "0").await;
    let config = f.config(
        "wasmctrl.yaml",
        &mirror_config(
            "leaderElection: { enabled: true, leaseName: pause-test, leaseDuration: 2s, renewDeadline: 1500ms, retryPeriod: 200ms }",
        ),
    );
    let (ka, kb) = (f.kubeconfig_for("host-a"), f.kubeconfig_for("host-b"));
    let mut a = Run::start(&config, &ka).await;
    wait_state("host-a to lead", &a, "running").await;
    let mut b = Run::start(&config, &kb).await;
    wait_state("host-b to stand by", &b, "standby").await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = f.keep_writing(N, stop.clone());
    eventually("host-a writing", Duration::from_secs(60), || async {
        let audit = f.server.audit().records();
        audit
            .iter()
            .any(|w| w.user == "host-a" && w.resource == "configmaps" && w.code < 300)
            .then_some(())
    })
    .await;

    // Pause the leader; the standby takes over once the lease expires.
    a.process.signal("STOP");
    let paused = Instant::now();
    wait_state("host-b to take over", &b, "running").await;
    let took_over = paused.elapsed();
    eventually("host-b writing", Duration::from_secs(60), || async {
        f.server
            .audit()
            .records()
            .iter()
            .any(|w| w.user == "host-b" && w.resource == "configmaps" && w.code < 300)
            .then_some(())
    })
    .await;
    // Resume the old leader well after its lease expired.
    a.process.signal("CONT");
    let status = a.process.exited(Duration::from_secs(30)).await;
    assert!(
        !status.success(),
        "a leader that lost its lease exits with an error"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.await.unwrap();
    f.converged("host-b converges everything").await;

    let audit = f.server.audit().records();
    let b_first = audit
        .iter()
        .filter(|w| w.user == "host-b" && w.resource == "configmaps" && w.code < 300)
        .map(|w| w.time)
        .min()
        .unwrap();
    let second_leader_writes: Vec<String> = audit
        .iter()
        .filter(|w| w.user == "host-a" && w.resource == "configmaps" && w.code < 300)
        .filter(|w| w.time >= b_first)
        .map(|w| format!("{} {:?} at {:?}", w.verb, w.name, w.time))
        .collect();
    if !second_leader_writes.is_empty() {
        panic!(
            "host-a wrote after host-b took over (at {b_first:?}): {second_leader_writes:?}\nhost-a's log:\n{}\nhost-b's log:\n{}",
            a.process.log_tail(),
            b.process.log_tail()
        );
    }
    assert!(
        took_over < Duration::from_secs(2) + Duration::from_millis(200) + Duration::from_secs(5),
        "the standby took {took_over:?} to take over"
    );
    b.process.signal("TERM");
    assert!(b.process.exited(Duration::from_secs(30)).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_loads_an_object_plugin_with_its_pull_secret_and_writes_its_status_once_it_leads()
{
    use wasmctrl_testkit::host::{file_digest, insecure_registry, push_component};

    let registry = Registry::start_with_auth();
    let fixture = Fixture::start().await;
    let kubeconfig = fixture.dir.path().join("kubeconfig");
    let docker = fixture.config(
        "docker.json",
        &format!(
            r#"{{"auths": {{"{}": {{"username": "{USER}", "password": "{PASSWORD}"}}}}}}"#,
            registry.addr
        ),
    );
    let pusher = wasmctrl::ops::source::oci::RegistryOptions {
        docker_config: Some(docker),
        ..insecure_registry()
    };
    let (v1, v2) = (
        registry.reference("plugins/stamp:1"),
        registry.reference("plugins/stamp:2"),
    );
    push_component(&v1, artifacts::STAMP_V1, &pusher).await;
    push_component(&v2, artifacts::STAMP_V2, &pusher).await;

    // The CRD, a pull Secret and the object, before any host runs.
    let crd = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/crds/wasmreconciler.yaml"
    );
    kubectl::run(&kubeconfig, &["apply", "-f", crd]);
    kubectl::run(
        &kubeconfig,
        &[
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
        ],
    );
    let object = fixture.config(
        "stamp.yaml",
        &format!(
            r#"apiVersion: wasmctrl.dev/v1alpha1
kind: WasmReconciler
metadata: {{ name: stamp }}
spec:
  source: {{ oci: "{v1}", insecure: true, imagePullSecret: regcred }}
  namespaces: [default]
  permissions:
    - {{ group: "", resources: [configmaps], verbs: [get, list, watch, patch] }}
"#
        ),
    );
    eventually(
        "the WasmReconciler kind served",
        Duration::from_secs(30),
        || {
            let out = kubectl::output(&kubeconfig, &["apply", "-f", object.to_str().unwrap()]);
            async move { out.status.success() }
        },
    )
    .await;

    let config = fixture.config(
        "wasmctrl.yaml",
        r#"apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
admin: { bind: "127.0.0.1:0" }
shutdownTimeout: 5s
leaderElection: { enabled: true, leaseName: objects-le, leaseDuration: 2s, retryPeriod: 200ms }
pluginsFrom: { kind: WasmReconciler, allowHosts: ["127.0.0.1"] }   # the test's registry
maxGrant:
  - { group: "", resources: [configmaps], verbs: [get, list, watch, patch], namespaces: [default] }
"#,
    );
    let status = |field: &str| {
        kubectl::run(
            &kubeconfig,
            &[
                "get",
                "wasmreconciler",
                "stamp",
                "-o",
                &format!("jsonpath={{.status.{field}}}"),
            ],
        )
    };

    let mut leader = Run::start(&config, &kubeconfig).await;
    wait_state("the first host to lead", &leader, "running").await;
    eventually("v1 in the status", Duration::from_secs(30), || async {
        (status("servingDigest") == file_digest(artifacts::STAMP_V1)
            && status("conditions[0].status") == "True")
            .then_some(())
    })
    .await;

    // The standby reads the Secret and loads the component while another
    // host leads (its writes are fenced, its reads are not).
    let standby = Run::start(&config, &kubeconfig).await;
    wait_state("the second host to stand by", &standby, "standby").await;

    leader.process.kill();
    wait_state("the standby to take over", &standby, "running").await;

    // Only the new leader can move the status to v2.
    kubectl::run(
        &kubeconfig,
        &[
            "patch",
            "wasmreconciler",
            "stamp",
            "--type",
            "merge",
            "-p",
            &format!(r#"{{"spec": {{"source": {{"oci": "{v2}"}}}}}}"#),
        ],
    );
    eventually("v2 in the status", Duration::from_secs(30), || async {
        (status("servingDigest") == file_digest(artifacts::STAMP_V2)
            && status("observedGeneration") == "2"
            && status("conditions[0].status") == "True")
            .then_some(())
    })
    .await;
    assert!(
        standby.process.logged(&["plugin added: starting"]),
        "the standby started the object's plugin"
    );
}

/// The shards `host` holds and drains, from `/plugins` (plugin `mirror`).
async fn shards_of(host: &Run) -> Option<(Vec<u64>, Vec<u64>)> {
    let (_, body) = http_get(host.admin, "/plugins").await;
    let plugins: serde_json::Value = serde_json::from_str(&body).ok()?;
    let shards = &plugins.as_array()?.first()?["shards"];
    let list = |v: &serde_json::Value| -> Option<Vec<u64>> {
        v.as_array()?.iter().map(|s| s.as_u64()).collect()
    };
    Some((list(&shards["held"])?, list(&shards["draining"])?))
}

/// Waits until `hosts` hold every one of `total` shards between them,
/// `share` each, nothing draining.
async fn balanced(what: &str, hosts: &[&Run], total: u64, share: usize) {
    eventually(what, Duration::from_secs(60), || async {
        let mut all = Vec::new();
        for h in hosts {
            let (held, draining) = shards_of(h).await?;
            if held.len() != share || !draining.is_empty() {
                return None;
            }
            all.extend(held);
        }
        all.sort_unstable();
        (all == (0..total).collect::<Vec<_>>()).then_some(())
    })
    .await;
}

/// One reconcile of a key by one replica, from its per-key log.
#[derive(Debug)]
struct Span {
    host: &'static str,
    start: k8s_openapi::jiff::Timestamp,
    end: k8s_openapi::jiff::Timestamp,
}

/// The sharded reconciles in `host`'s JSON log, per key. A reconcile that
/// never ended (the process was killed) ends at `killed`.
fn spans(
    name: &'static str,
    host: &Run,
    killed: Option<k8s_openapi::jiff::Timestamp>,
    into: &mut std::collections::BTreeMap<String, Vec<Span>>,
) {
    let mut open = std::collections::BTreeMap::new();
    assert!(!host.process.log_cut(), "{name}'s log was cut");
    for line in host.process.log_lines().iter() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if event["target"] != "wasmctrl::shard::log" {
            continue;
        }
        let key = event["fields"]["key"].as_str().unwrap().to_string();
        let at: k8s_openapi::jiff::Timestamp =
            event["timestamp"].as_str().unwrap().parse().unwrap();
        match event["fields"]["message"].as_str().unwrap() {
            "reconcile begins" => {
                assert!(
                    open.insert(key.clone(), at).is_none(),
                    "{name} began {key} twice"
                );
            }
            "reconcile ends" => {
                let start = open.remove(&key).expect("an end follows its begin");
                into.entry(key).or_default().push(Span {
                    host: name,
                    start,
                    end: at,
                });
            }
            other => panic!("unexpected per-key log message {other:?}"),
        }
    }
    for (key, start) in open {
        let end = killed.unwrap_or_else(|| panic!("{name} never ended its reconcile of {key}"));
        into.entry(key).or_default().push(Span {
            host: name,
            start,
            end,
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sharded_replicas_share_1500_objects_and_hand_over_without_overlap() {
    use futures::StreamExt;
    use wasmctrl::ObjectKey;
    use wasmctrl::control::shard::shard_of;

    const N: usize = 1500;
    const SHARDS: u32 = 12;
    const LEASE: Duration = Duration::from_secs(2);
    const RETRY: Duration = Duration::from_millis(200);
    let f = Fixture::start().await;
    futures::stream::iter(0..N)
        .map(|i| {
            let api = f.api.clone();
            async move {
                let cm = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("cm-{i}")},
                    "data": {"value": "0"},
                }))
                .unwrap();
                api.create(&Default::default(), &cm).await.unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let config = f.config(
        "wasmctrl.yaml",
        &mirror_config(
            "leaderElection: { enabled: true, leaseName: shard-test, leaseDuration: 2s, renewDeadline: 1500ms, retryPeriod: 200ms }\nsharding: { shards: 12 }",
        ),
    );
    let spawn = |user: &'static str| {
        let (c, k) = (config.clone(), f.kubeconfig_for(user));
        async move { Run::start_logging(&c, &k, "wasmctrl=info,wasmctrl::shard::log=debug", true).await }
    };
    let mut a = spawn("host-a").await;
    let mut b = spawn("host-b").await;
    let mut c = spawn("host-c").await;
    balanced("three replicas with 4 shards each", &[&a, &b, &c], 12, 4).await;
    f.converged("all 1500 objects mirrored").await;

    // Patches the first `limit` objects of `shards` to `value`.
    let set = |shards: Vec<u64>, value: &'static str, limit: usize| {
        let api = f.api.clone();
        async move {
            let keys: Vec<usize> = (0..N)
                .filter(|i| {
                    let key = ObjectKey::namespaced("default", format!("cm-{i}"));
                    shards.contains(&u64::from(shard_of(&key, SHARDS)))
                })
                .take(limit)
                .collect();
            futures::stream::iter(keys)
                .map(|i| {
                    let api = api.clone();
                    async move {
                        let patch = serde_json::json!({"data": {"value": value}});
                        api.patch(
                            &format!("cm-{i}"),
                            &Default::default(),
                            &kube::api::Patch::Merge(&patch),
                        )
                        .await
                        .unwrap();
                    }
                })
                .buffer_unordered(16)
                .collect::<Vec<()>>()
                .await;
        }
    };

    // kill -9 one replica: its shards are taken within leaseDuration and
    // two retry periods, and its objects converge.
    let (c_shards, _) = shards_of(&c).await.unwrap();
    let killed_at = k8s_openapi::jiff::Timestamp::now();
    let killed = Instant::now();
    c.process.signal("KILL");
    c.process.exited(Duration::from_secs(10)).await;
    // Changes made while nobody holds the killed replica's shards reach the
    // survivors' feeds and are dropped at their gates: only the keys queued
    // when a survivor takes a shard over reconcile them.
    set(c_shards.clone(), "in-handover", 30).await;
    // The killed replica's last renewal of each of its shards (final now).
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(f.api.clone().into_client(), "default");
    let mut last_renewed = Vec::new();
    for s in &c_shards {
        let lease = leases.get(&format!("shard-test-shard-{s}")).await.unwrap();
        let spec = lease.spec.unwrap();
        assert_eq!(
            spec.holder_identity.as_deref().map(|h| h.is_empty()),
            Some(false)
        );
        last_renewed.push((*s, spec.renew_time.unwrap().0));
    }
    balanced("the two survivors with 6 shards each", &[&a, &b], 12, 6).await;
    let observed = killed.elapsed();
    // Each shard's new holder wrote when it took it (acquireTime): the
    // handover, from the killed holder's last renewal, is at most a retry
    // period until a survivor read that renewal, the Lease's duration from
    // that read (expiry as client-go judges it), and a retry period until
    // the survivor's next round (and one round's requests).
    let mut slowest = Duration::ZERO;
    for (s, renewed) in last_renewed {
        let lease = leases.get(&format!("shard-test-shard-{s}")).await.unwrap();
        let acquired = lease.spec.unwrap().acquire_time.unwrap().0;
        let gap = Duration::try_from(acquired.duration_since(renewed)).unwrap();
        slowest = slowest.max(gap);
    }
    eprintln!(
        "the killed replica's shards were taken {slowest:?} after its last renewal ({observed:?} after the kill, as polled)"
    );
    assert!(
        slowest <= LEASE + 2 * RETRY + Duration::from_millis(100),
        "a shard was taken {slowest:?} after its holder's last renewal"
    );
    f.converged("the changes made during the handover converge")
        .await;
    set(c_shards, "after-kill", N).await;
    f.converged("the killed replica's objects converge").await;

    // A fourth replica joins: it gets its share as the others drain theirs.
    let mut d = spawn("host-d").await;
    balanced(
        "three replicas again, with 4 shards each",
        &[&a, &b, &d],
        12,
        4,
    )
    .await;
    let (d_shards, _) = shards_of(&d).await.unwrap();
    set(d_shards, "after-join", N).await;
    f.converged("the new replica's objects converge").await;

    for h in [&a, &b, &d] {
        h.process.signal("TERM");
    }
    for h in [&mut a, &mut b, &mut d] {
        assert!(h.process.exited(Duration::from_secs(30)).await.success());
    }

    // The per-key log: every object reconciled, never by two replicas at
    // once.
    let mut per_key = std::collections::BTreeMap::new();
    spans("host-a", &a, None, &mut per_key);
    spans("host-b", &b, None, &mut per_key);
    spans("host-c", &c, Some(killed_at), &mut per_key);
    spans("host-d", &d, None, &mut per_key);
    assert_eq!(per_key.len(), N, "every object was reconciled");
    let mut overlaps = Vec::new();
    let mut hosts = std::collections::BTreeSet::new();
    for (key, spans) in &mut per_key {
        spans.sort_by_key(|s| s.start);
        for pair in spans.windows(2) {
            hosts.insert(pair[0].host);
            if pair[1].start < pair[0].end && pair[0].host != pair[1].host {
                overlaps.push(format!("{key}: {:?} and {:?}", pair[0], pair[1]));
            }
        }
    }
    assert!(
        overlaps.is_empty(),
        "keys reconciled by two replicas at once: {overlaps:?}"
    );
    assert_eq!(hosts.len(), 4, "every replica reconciled: {hosts:?}");
    f.server.shutdown().await;
}
