//! The API server as a process: the command-line arguments `wasmctrl
//! apiserver` and `wasmctrl-apiserver` share, and serving until told to
//! stop.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::{ApiServer, Authorization, Config, Error};

/// Where and how to serve.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Listen address; port 0 picks a free port (see the kubeconfig).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub addr: SocketAddr,
    /// Write a kubeconfig for this server here (mode 0600), once it
    /// accepts requests.
    #[arg(long)]
    pub kubeconfig_out: Option<PathBuf>,
    /// Keep objects, the token and the CA here across restarts.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// How requests other than the admin's are authorized: `always-allow`,
    /// or `rbac` (Roles and bindings decide; bootstrap roles are created).
    #[arg(long, default_value_t = Authorization::AlwaysAllow, value_name = "always-allow|rbac")]
    pub authorization: Authorization,
}

/// Serves as `args` say until `stop` completes, then shuts down. Prints
/// the URL, and where the kubeconfig was written, on stdout.
pub async fn serve(args: ServeArgs, stop: impl Future<Output = ()>) -> Result<(), Error> {
    let server = ApiServer::start(Config {
        addr: args.addr,
        data_dir: args.data_dir,
        authorization: args.authorization,
        ..Config::default()
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
    stop.await;
    server.shutdown().await;
    Ok(())
}
