//! The `wasmctrl` binary as a user runs it: leader election across two
//! processes against the embedded API server, takeover when the leader is
//! killed, and a clean exit on SIGTERM.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
        .stderr(Stdio::null())
        .spawn()
        .expect("wasmctrl starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let admin = loop {
        let line = lines
            .next()
            .expect("wasmctrl printed its admin address")
            .unwrap();
        if let Some(rest) = line.strip_prefix("admin: http://") {
            break rest.trim_end_matches("/plugins").parse().unwrap();
        }
    };
    // Keep draining stdout so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Host { child, admin }
}

fn get(addr: SocketAddr, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

fn state(host: &Host) -> Option<String> {
    let body = get(host.admin, "/plugins")?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v[0]["state"].as_str().map(str::to_string)
}

fn wait_for(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
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
    let probe = |h: &Host| state(h);
    tokio::task::block_in_place(|| {
        wait_for("the first host to lead", Duration::from_secs(30), || {
            probe(&leader).as_deref() == Some("running")
        })
    });
    let (config3, kubeconfig3) = (config.clone(), kubeconfig.clone());
    let mut standby = tokio::task::spawn_blocking(move || spawn_host(&config3, &kubeconfig3))
        .await
        .unwrap();
    tokio::task::block_in_place(|| {
        wait_for(
            "the second host to stand by",
            Duration::from_secs(30),
            || probe(&standby).as_deref() == Some("standby"),
        )
    });

    // The leader dies without releasing its lease.
    leader.child.kill().unwrap();
    leader.child.wait().unwrap();
    let killed = Instant::now();
    tokio::task::block_in_place(|| {
        wait_for("the standby to take over", Duration::from_secs(30), || {
            probe(&standby).as_deref() == Some("running")
        })
    });
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
