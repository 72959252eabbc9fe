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

use std::process::ExitCode;

use clap::Parser;
use wasmctrl_apiserver::serve::{ServeArgs, serve};

/// Serve a Kubernetes-compatible API over HTTPS (kubectl, kube-rs and the
/// Python client work unmodified).
#[derive(Debug, Parser)]
#[command(name = "wasmctrl-apiserver", version)]
struct Args {
    #[command(flatten)]
    serve: ServeArgs,
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
            let mut shown = e.to_string();
            eprintln!("wasmctrl-apiserver: {shown}");
            let mut source = std::error::Error::source(&*e);
            while let Some(s) = source {
                // Most errors here quote their cause already.
                let cause = s.to_string();
                if !shown.contains(&cause) {
                    eprintln!("  caused by: {cause}");
                }
                shown = cause;
                source = s.source();
            }
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let stop = terminated()?;
    serve(args.serve, stop).await?;
    Ok(())
}

/// Completes on SIGTERM or SIGINT; the handlers are installed before the
/// server starts, so no signal is missed.
#[cfg(unix)]
fn terminated() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

#[cfg(not(unix))]
fn terminated() -> std::io::Result<impl std::future::Future<Output = ()>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}
