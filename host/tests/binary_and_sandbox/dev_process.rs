//! A `wasmctrl dev` process as the CLI tests run it: its admin address,
//! what it printed before it, and its log.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A `wasmctrl dev` process; killed when dropped.
pub struct Dev {
    child: Child,
    pub admin: SocketAddr,
    pub kubeconfig: PathBuf,
    /// What it printed before its admin address.
    pub printed: Vec<String>,
    /// Its log (stderr), for failure messages.
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Dev {
    /// Runs `wasmctrl dev --admin 127.0.0.1:0 --kubeconfig-out KUBECONFIG
    /// ARGS…` and waits, a minute at most, until it prints its admin
    /// address (the host runs); panics with its output if it exits first.
    pub async fn start<A: AsRef<OsStr>>(args: &[A], kubeconfig: PathBuf) -> Dev {
        let mut child = Command::new(env!("CARGO_BIN_EXE_wasmctrl"))
            .args(["dev", "--admin", "127.0.0.1:0", "--kubeconfig-out"])
            .arg(&kubeconfig)
            .args(args)
            .env("RUST_LOG", "wasmctrl=info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("wasmctrl dev starts");
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let mut kept = kept.lock().unwrap();
                if kept.len() < 20_000 {
                    kept.push(line);
                }
            }
        });
        let stdout = child.stdout.take().unwrap();
        // The admin address is printed once the host runs (a failed start
        // ends the output instead).
        let read = tokio::task::spawn_blocking(move || {
            let mut lines = BufReader::new(stdout).lines();
            let mut printed = Vec::new();
            let admin = loop {
                let Some(Ok(line)) = lines.next() else {
                    break None;
                };
                if let Some(rest) = line.strip_prefix("admin: http://") {
                    break Some(rest.trim_end_matches("/plugins").parse().unwrap());
                }
                printed.push(line);
            };
            std::thread::spawn(move || for _ in lines {});
            (admin, printed)
        });
        let mut dev = Dev {
            child,
            admin: "127.0.0.1:0".parse().unwrap(),
            kubeconfig,
            printed: Vec::new(),
            log,
        };
        let (admin, printed) = tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .expect("wasmctrl dev starts within a minute")
            .unwrap();
        let Some(admin) = admin else {
            panic!(
                "wasmctrl dev exited before printing its admin address:\n{}\n{}",
                printed.join("\n"),
                dev.log()
            );
        };
        dev.admin = admin;
        dev.printed = printed;
        dev
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}
