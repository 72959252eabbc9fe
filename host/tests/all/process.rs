//! The `wasmctrl` binary as a user runs it: leader election across two
//! processes against the embedded API server, takeover when the leader is
//! killed, and a clean exit on SIGTERM.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmctrl::test_util::{eventually, http_get};
use wasmctrl_plugin_artifacts as artifacts;

struct Host {
    child: Child,
    admin: SocketAddr,
}

/// Starts `wasmctrl run --config <config>` and reads its admin address.
fn spawn_host(config: &Path, kubeconfig: &Path) -> Host {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wasmctrl"))
        .args(["run", "--config"])
        .arg(config)
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "wasmctrl=info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("wasmctrl starts");
    // The log goes to a thread that keeps the last lines, so a host that
    // does not start says why.
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let kept = log.clone();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let mut kept = kept.lock().unwrap();
            if kept.len() >= 50 {
                kept.remove(0);
            }
            kept.push(line);
        }
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let admin = loop {
        let Some(Ok(line)) = lines.next() else {
            let _ = child.wait();
            panic!(
                "wasmctrl exited before printing its admin address:\n{}",
                log.lock().unwrap().join("\n")
            );
        };
        if let Some(rest) = line.strip_prefix("admin: http://") {
            break rest.trim_end_matches("/plugins").parse().unwrap();
        }
    };
    // Keep draining stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Host { child, admin }
}

async fn state(host: &Host) -> Option<String> {
    let (_, body) = http_get(host.admin, "/plugins").await;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v[0]["state"].as_str().map(str::to_string)
}

/// Waits until `host`'s plugin is in `wanted` state.
async fn wait_state(what: &str, host: &Host, wanted: &str) {
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

    let (config2, kubeconfig2) = (config.clone(), kubeconfig.clone());
    let mut leader = tokio::task::spawn_blocking(move || spawn_host(&config2, &kubeconfig2))
        .await
        .unwrap();
    wait_state("the first host to lead", &leader, "running").await;
    let (config3, kubeconfig3) = (config.clone(), kubeconfig.clone());
    let mut standby = tokio::task::spawn_blocking(move || spawn_host(&config3, &kubeconfig3))
        .await
        .unwrap();
    wait_state("the second host to stand by", &standby, "standby").await;

    // The leader dies without releasing its lease.
    leader.child.kill().unwrap();
    leader.child.wait().unwrap();
    let killed = Instant::now();
    wait_state("the standby to take over", &standby, "running").await;
    // Within the lease duration plus retry periods (loose for a loaded CI machine).
    assert!(
        killed.elapsed() < Duration::from_secs(15),
        "took {:?}",
        killed.elapsed()
    );

    // SIGTERM: drain and exit 0.
    let pid = standby.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = tokio::task::block_in_place(|| standby.child.wait().unwrap());
    assert!(status.success(), "exit status {status:?}");
    server.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `VmRSS` or `VmHWM` of `pid`, in bytes.
fn memory_of(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    kib * 1024
}

/// The value of the first `/metrics` line starting with `needle` (0 if absent).
async fn metric(admin: SocketAddr, needle: &str) -> f64 {
    wasmctrl::test_util::metric_value(admin, needle)
        .await
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_leave_the_host_within_its_memory_bound() {
    let server = wasmctrl_apiserver::ApiServer::start(wasmctrl_apiserver::Config::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let config = dir.path().join("wasmctrl.yaml");
    let (memory_limit, concurrency) = (64u64 << 20, 2u64);
    std::fs::write(
        &config,
        format!(
            r#"apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
admin: {{ bind: "127.0.0.1:0" }}
plugins:
  - name: hostile
    path: {}
    maxConcurrentReconciles: {concurrency}
    memoryLimit: {memory_limit}
    reconcileTimeout: 5s
    maxRetries: 0
    permissions: [ {{ resources: [configmaps], verbs: [get, list, watch, patch, create] }} ]
"#,
            artifacts::HOSTILE
        ),
    )
    .unwrap();
    let (c, k) = (config.clone(), kubeconfig.clone());
    let mut host = tokio::task::spawn_blocking(move || spawn_host(&c, &k))
        .await
        .unwrap();
    eventually("readiness", Duration::from_secs(60), || async {
        (http_get(host.admin, "/readyz").await.0 == 200).then_some(())
    })
    .await;
    let pid = host.child.id();
    let idle = memory_of(pid, "VmRSS");
    // Forget the peak of start-up (compiling the component): from here on
    // VmHWM is the peak of the floods.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();

    let client = wasmctrl::client::client_for(&kubeconfig).await.unwrap();
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client, "default");
    for name in ["output-flood", "log-flood", "host-call-flood"] {
        let cm = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
        api.create(&Default::default(), &cm).await.unwrap();
    }
    eventually("every flood handled", Duration::from_secs(120), || async {
        let done = metric(
            host.admin,
            r#"controller_runtime_reconcile_total{controller="hostile",result="success"}"#,
        )
        .await
            + metric(
                host.admin,
                r#"controller_runtime_reconcile_errors_total{controller="hostile"}"#,
            )
            .await;
        (done >= 3.0).then_some(())
    })
    .await;
    let peak = memory_of(pid, "VmHWM");
    let bound = memory_limit * concurrency + (32 << 20);
    let grew = peak.saturating_sub(idle);
    assert!(
        grew <= bound,
        "peak RSS {} MiB is {} MiB over idle {} MiB; the bound is {} MiB",
        peak >> 20,
        grew >> 20,
        idle >> 20,
        bound >> 20
    );
    eprintln!(
        "idle {} MiB, peak during floods {} MiB (+{} MiB, bound +{} MiB)",
        idle >> 20,
        peak >> 20,
        grew >> 20,
        bound >> 20
    );
    assert_eq!(http_get(host.admin, "/healthz").await.0, 200);
    host.child.kill().unwrap();
    host.child.wait().unwrap();
    server.shutdown().await;
}
