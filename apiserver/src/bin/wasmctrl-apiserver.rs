//! The embedded API server as a standalone process, serving until SIGTERM
//! or SIGINT:
//!
//! ```text
//! wasmctrl-apiserver --addr 127.0.0.1:6443 --kubeconfig-out kubeconfig --data-dir state/ \
//!     --authorization rbac
//! ```
//!
//! The kubeconfig is written (atomically, mode 0600) once the server
//! accepts requests, so a supervisor can wait for the file to appear.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Serve a Kubernetes-compatible API over HTTPS (kubectl, kube-rs and the
/// Python client work unmodified).
#[derive(Debug, Parser)]
#[command(name = "wasmctrl-apiserver", version)]
struct Args {
    /// Listen address; port 0 picks a free port (see the kubeconfig).
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// Write a kubeconfig for this server here (mode 0600).
    #[arg(long)]
    kubeconfig_out: Option<PathBuf>,
    /// Keep objects, the token and the CA here across restarts.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// How requests other than the admin's are authorized: `always-allow`,
    /// or `rbac` (Roles and bindings decide; bootstrap roles are created).
    #[arg(long, default_value_t = wasmctrl_apiserver::Authorization::AlwaysAllow, value_name = "always-allow|rbac")]
    authorization: wasmctrl_apiserver::Authorization,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("wasmctrl-apiserver: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wasmctrl-apiserver: {e}");
            let mut source = std::error::Error::source(&*e);
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let server = wasmctrl_apiserver::ApiServer::start(wasmctrl_apiserver::Config {
        addr: args.addr,
        data_dir: args.data_dir,
        authorization: args.authorization,
        ..Default::default()
    })
    .await?;
    println!(
        "listening on {} (authorization: {})",
        server.url(),
        server.authorization()
    );
    if let Some(path) = &args.kubeconfig_out {
        server.write_kubeconfig(path)?;
        println!("kubeconfig written to {}", path.display());
    }
    terminated().await?;
    server.shutdown().await;
    Ok(())
}

#[cfg(unix)]
async fn terminated() -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

#[cfg(not(unix))]
async fn terminated() -> std::io::Result<()> {
    tokio::signal::ctrl_c().await
}
