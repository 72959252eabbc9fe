//! Registry credentials from a Kubernetes Secret of type
//! `kubernetes.io/dockerconfigjson` (what `kubectl create secret
//! docker-registry` makes): an `oci` source's `imagePullSecret`.
//!
//! The Secret is read on every registry conversation, so a rotated Secret
//! is used at the next fetch or poll. Errors name the Secret and what is
//! wrong with it, never its content: they end up in a WasmReconciler's
//! status, which more people may read than the Secret.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use super::credentials::{
    Credentials, CredentialsError, RegistryCredentials, credentials_from_dockerconfigjson,
};

/// The Secret type that holds a docker `config.json`.
pub const DOCKER_CONFIG_JSON_TYPE: &str = "kubernetes.io/dockerconfigjson";
/// The key of the docker `config.json` in such a Secret.
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";
/// The largest `.dockerconfigjson` read.
const MAX_DOCKER_CONFIG: usize = 1 << 20;

/// Credentials from the Secret `name` in `namespace`, or none (anonymous)
/// when `name` is None.
#[derive(Clone)]
pub struct PullSecret {
    client: kube::Client,
    namespace: String,
    name: Option<String>,
}

impl std::fmt::Debug for PullSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullSecret")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .finish()
    }
}

impl PullSecret {
    /// The Secret `name` in `namespace` (None: anonymous, and no Secret is
    /// read).
    pub fn new(client: kube::Client, namespace: String, name: Option<String>) -> Self {
        Self {
            client,
            namespace,
            name,
        }
    }

    async fn read(
        &self,
        name: &str,
        registry: &str,
    ) -> Result<Option<Credentials>, CredentialsError> {
        let refused = |message: String| CredentialsError::Secret {
            namespace: self.namespace.clone(),
            name: name.to_string(),
            message,
        };
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let secret = match api.get_opt(name).await {
            Ok(Some(s)) => s,
            Ok(None) => return Err(refused("no such Secret".into())),
            Err(kube::Error::Api(status)) => {
                return Err(refused(format!(
                    "the API server refused to read it ({} {})",
                    status.code, status.reason
                )));
            }
            Err(e) => return Err(refused(format!("cannot read it: {e}"))),
        };
        let kind = secret.type_.as_deref().unwrap_or("Opaque");
        if kind != DOCKER_CONFIG_JSON_TYPE {
            return Err(refused(format!(
                "is of type {kind:?}, not {DOCKER_CONFIG_JSON_TYPE:?} (kubectl create secret docker-registry makes one)"
            )));
        }
        let Some(config) = secret
            .data
            .as_ref()
            .and_then(|d| d.get(DOCKER_CONFIG_JSON_KEY))
        else {
            return Err(refused(format!("has no {DOCKER_CONFIG_JSON_KEY} key")));
        };
        if config.0.len() > MAX_DOCKER_CONFIG {
            return Err(refused(format!(
                "{DOCKER_CONFIG_JSON_KEY} is {} bytes; at most {MAX_DOCKER_CONFIG} are read",
                config.0.len()
            )));
        }
        credentials_from_dockerconfigjson(&config.0, registry).map_err(|e| refused(e.to_string()))
    }
}

impl RegistryCredentials for PullSecret {
    fn credentials<'a>(
        &'a self,
        registry: &'a str,
    ) -> BoxFuture<'a, Result<Option<Credentials>, CredentialsError>> {
        Box::pin(async move {
            match &self.name {
                Some(name) => self.read(name, registry).await,
                None => Ok(None),
            }
        })
    }
}
