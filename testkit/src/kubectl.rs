//! kubectl as a user runs it against a test's cluster: the binary of
//! `$KUBECTL` (default `kubectl` on the PATH) with the test's kubeconfig
//! and a discovery cache of its own beside it, so one test's cached
//! discovery never answers for another's server.

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The kubectl binary: `$KUBECTL`, or `kubectl` on the PATH.
fn binary() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

/// A kubectl command with `--kubeconfig KUBECONFIG` and its cache in the
/// kubeconfig's directory, stdin closed; the caller adds the arguments.
pub fn command(kubeconfig: &Path) -> Command {
    let cache = kubeconfig
        .parent()
        .unwrap_or(Path::new("."))
        .join("kubectl-cache");
    let mut command = Command::new(binary());
    command
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .stdin(Stdio::null());
    command
}

/// Runs `kubectl ARGS…` against `kubeconfig` and returns its output,
/// whatever its exit status.
pub fn output(kubeconfig: &Path, args: &[&str]) -> Output {
    command(kubeconfig).args(args).output().unwrap_or_else(|e| {
        panic!(
            "kubectl ({}) runs (Debian's kubernetes-client; .ci/run installs it): {e}",
            binary()
        )
    })
}

/// Runs `kubectl ARGS…` against `kubeconfig` and returns its stdout;
/// panics with its output unless it succeeds.
pub fn run(kubeconfig: &Path, args: &[&str]) -> String {
    let out = output(kubeconfig, args);
    assert!(
        out.status.success(),
        "kubectl {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
