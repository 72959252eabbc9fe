//! `wasmctrl run` and `wasmctrl apiserver`: the host against a cluster,
//! and the embedded API server alone, each until SIGTERM or SIGINT.

use std::path::PathBuf;

use anyhow::Context as _;

use crate::config::HostConfig;
use crate::ops::manager::{Manager, ManagerOptions};

/// Resolves on SIGTERM or SIGINT.
pub(super) async fn terminated() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("cannot listen for SIGTERM");
    let mut int = signal(SignalKind::interrupt()).expect("cannot listen for SIGINT");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}

pub(super) async fn run(config_path: PathBuf) -> anyhow::Result<()> {
    let config = HostConfig::load(&config_path)?;
    let kube_config = kube::Config::infer().await.context(
        "cannot connect to a cluster (no kubeconfig or in-cluster config); try `wasmctrl dev`",
    )?;
    let client = kube::Client::try_from(kube_config.clone())?;
    let options = ManagerOptions {
        config_path: Some(config_path.clone()),
        kube_config: Some(kube_config),
        ..ManagerOptions::default()
    };
    let manager = Manager::start(config, client, options).await?;
    println!("admin: http://{}/plugins", manager.admin_addr());
    manager.run(terminated()).await?;
    Ok(())
}
