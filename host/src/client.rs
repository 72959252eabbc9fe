//! Kubernetes clients for the host.

use std::path::Path;

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read kubeconfig {path}: {source}")]
    Read {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error("invalid kubeconfig {path}: {source}")]
    Invalid {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error(transparent)]
    Client(#[from] kube::Error),
}

/// A client for the cluster of the kubeconfig at `path` (its current
/// context).
pub async fn client_for(path: &Path) -> Result<kube::Client, ClientError> {
    let shown = path.display().to_string();
    let kubeconfig =
        kube::config::Kubeconfig::read_from(path).map_err(|source| ClientError::Read {
            path: shown.clone(),
            source,
        })?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .map_err(|source| ClientError::Invalid {
        path: shown,
        source,
    })?;
    Ok(kube::Client::try_from(config)?)
}
