//! The `wasmctrl` binary as the suite runs it: a command for it, and its
//! long-running subcommands as processes (`wasmctrl run`, `wasmctrl dev`)
//! that print their admin address once the host runs.

use std::ffi::{OsStr, OsString};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use wasmctrl_testkit::process::Process;

/// What the host prints once it runs: `admin: http://ADDR/plugins`.
const ADMIN_PREFIX: &str = "admin: http://";

/// How long a host may take to start (it compiles its components first).
const START_LIMIT: Duration = Duration::from_secs(120);

/// A command running this build's `wasmctrl`.
pub fn wasmctrl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wasmctrl"))
}

/// Waits until `process` prints its admin address; the address, and the
/// lines it printed before.
async fn admin_address(process: &Process) -> (SocketAddr, Vec<String>) {
    let mut printed = process.printed_until(ADMIN_PREFIX, START_LIMIT).await;
    let line = printed.pop().expect("the admin line");
    let addr = line[ADMIN_PREFIX.len()..]
        .trim_end_matches("/plugins")
        .parse()
        .unwrap_or_else(|e| panic!("an admin address in {line:?}: {e}"));
    (addr, printed)
}

/// An embedded API server for a `wasmctrl run` process to run against, a
/// fresh temporary directory, and the admin kubeconfig written in it.
pub async fn api_server() -> (wasmctrl_apiserver::ApiServer, tempfile::TempDir, PathBuf) {
    let server = wasmctrl_apiserver::ApiServer::start(wasmctrl_apiserver::Config::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    (server, dir, kubeconfig)
}

/// A `wasmctrl run` process; killed when dropped.
pub struct Run {
    pub process: Process,
    pub admin: SocketAddr,
}

impl Run {
    /// Starts `wasmctrl run --config CONFIG` against `kubeconfig` and waits
    /// until its host runs.
    pub async fn start(config: &Path, kubeconfig: &Path) -> Run {
        Self::start_logging(config, kubeconfig, "wasmctrl=info", false).await
    }

    /// [`Run::start`] with `RUST_LOG=rust_log`, the log in JSON if `json`.
    pub async fn start_logging(
        config: &Path,
        kubeconfig: &Path,
        rust_log: &str,
        json: bool,
    ) -> Run {
        let format = if json { "json" } else { "human" };
        Self::spawn(&mut wasmctrl(), config, kubeconfig, rust_log, format).await
    }

    /// [`Run::start`] in a mount namespace of its own whose
    /// `/etc/resolv.conf` is `resolv_conf`, so the host's resolver asks the
    /// name servers a test chose (`unshare` and the bind mount need root,
    /// which the suite runs as).
    pub async fn start_with_resolv_conf(
        config: &Path,
        kubeconfig: &Path,
        resolv_conf: &Path,
    ) -> Run {
        let mut command = Command::new("unshare");
        command
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(r#"mount --bind "$0" /etc/resolv.conf && exec "$@""#)
            .arg(resolv_conf)
            .arg(env!("CARGO_BIN_EXE_wasmctrl"));
        Self::spawn(&mut command, config, kubeconfig, "wasmctrl=info", "human").await
    }

    /// `command` (which runs `wasmctrl`) given `run --config CONFIG` and
    /// its log settings, started; waits until its host runs.
    async fn spawn(
        command: &mut Command,
        config: &Path,
        kubeconfig: &Path,
        rust_log: &str,
        format: &str,
    ) -> Run {
        let process = Process::spawn(
            command
                .args(["--log-format", format, "run", "--config"])
                .arg(config)
                .env("KUBECONFIG", kubeconfig)
                .env("RUST_LOG", rust_log),
        );
        let (admin, _) = admin_address(&process).await;
        Run { process, admin }
    }
}

/// A `wasmctrl dev` process; killed when dropped.
pub struct Dev {
    pub process: Process,
    pub admin: SocketAddr,
    pub kubeconfig: PathBuf,
    /// What it printed before its admin address.
    pub printed: Vec<String>,
}

impl Dev {
    /// Runs `wasmctrl dev --admin 127.0.0.1:0 --kubeconfig-out KUBECONFIG
    /// ARGS…` and waits until it prints its admin address (the host runs);
    /// panics with its output if it exits first.
    pub async fn start<A: AsRef<OsStr>>(args: &[A], kubeconfig: PathBuf) -> Dev {
        Self::start_with(wasmctrl(), args, kubeconfig).await
    }

    /// [`Dev::start`] from `command` (a [`wasmctrl`] with its working
    /// directory or environment set). Its user cache (`XDG_CACHE_HOME`),
    /// where `dev` keeps compiled code, is the suite's kept one, so later
    /// runs compile as an author's restarted `dev` does; its toolchains
    /// stay the suite's.
    pub async fn start_with<A: AsRef<OsStr>>(
        mut command: Command,
        args: &[A],
        kubeconfig: PathBuf,
    ) -> Dev {
        let set: Vec<OsString> = command.get_envs().map(|(k, _)| k.to_owned()).collect();
        if !set.iter().any(|k| k == "WASMCTRL_TOOLCHAINS") {
            command.env("WASMCTRL_TOOLCHAINS", crate::new_cli::toolchains());
        }
        if !set.iter().any(|k| k == "XDG_CACHE_HOME") {
            command.env(
                "XDG_CACHE_HOME",
                Path::new(env!("CARGO_TARGET_TMPDIR")).join("dev-user-cache"),
            );
        }
        let process = Process::spawn(
            command
                .args(["dev", "--admin", "127.0.0.1:0", "--kubeconfig-out"])
                .arg(&kubeconfig)
                .args(args)
                .env("RUST_LOG", "wasmctrl=info"),
        );
        let (admin, printed) = admin_address(&process).await;
        Dev {
            process,
            admin,
            kubeconfig,
            printed,
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        self.process.log()
    }
}

/// The quick start's directory: its config, CRD and sample WebApp.
pub const QUICKSTART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/quickstart");

/// The quick start's config, written to `dir` with its plugin path pointing
/// at this build's webapp component; its path.
pub fn quickstart_config(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(format!("{QUICKSTART}/wasmctrl.yaml"))
        .unwrap()
        .replace(
            "../../target/wasm32-wasip2/release/webapp.wasm",
            wasmctrl_plugin_artifacts::WEBAPP,
        )
        // Tests run side by side: each webhook server on a port of its own.
        .replace("127.0.0.1:9443", "127.0.0.1:0");
    assert!(
        text.contains(wasmctrl_plugin_artifacts::WEBAPP),
        "the quick start names its plugin"
    );
    let config = dir.join("wasmctrl.yaml");
    std::fs::write(&config, text).unwrap();
    config
}
