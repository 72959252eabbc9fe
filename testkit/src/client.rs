//! A kube client for a cluster, from its kubeconfig.

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig};

/// Where a kubeconfig comes from: a file (`Path`, `PathBuf`) or its YAML
/// text (`str`, `String`).
pub trait KubeconfigSource {
    /// The kubeconfig; panics if it cannot be read or parsed.
    fn kubeconfig(&self) -> Kubeconfig;
}

impl KubeconfigSource for Path {
    fn kubeconfig(&self) -> Kubeconfig {
        Kubeconfig::read_from(self)
            .unwrap_or_else(|e| panic!("the kubeconfig {}: {e}", self.display()))
    }
}

impl KubeconfigSource for PathBuf {
    fn kubeconfig(&self) -> Kubeconfig {
        self.as_path().kubeconfig()
    }
}

impl KubeconfigSource for str {
    fn kubeconfig(&self) -> Kubeconfig {
        Kubeconfig::from_yaml(self).unwrap_or_else(|e| panic!("a kubeconfig's text: {e}"))
    }
}

impl KubeconfigSource for String {
    fn kubeconfig(&self) -> Kubeconfig {
        self.as_str().kubeconfig()
    }
}

/// The client config of `kubeconfig`'s current context.
pub async fn config_for<K: KubeconfigSource + ?Sized>(kubeconfig: &K) -> kube::Config {
    kube::Config::from_custom_kubeconfig(kubeconfig.kubeconfig(), &KubeConfigOptions::default())
        .await
        .expect("a client config for the test's kubeconfig")
}

/// A kube client for the cluster of `kubeconfig`'s current context.
pub async fn client_for<K: KubeconfigSource + ?Sized>(kubeconfig: &K) -> kube::Client {
    kube::Client::try_from(config_for(kubeconfig).await)
        .expect("a client for the test's kubeconfig")
}

/// The API server's `GET /metrics` as `client` reads it (panics unless
/// 200).
pub async fn metrics_text(client: &kube::Client) -> String {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    client.request_text(request).await.expect("GET /metrics")
}
