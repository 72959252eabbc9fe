//! `wasmctrl push`: a component to a registry as a wasm OCI artifact,
//! through oci-client (run by an operator against a registry of their
//! choosing).

use std::collections::BTreeMap;

use oci_client::errors::{DigestError, OciDistributionError};
use oci_client::secrets::RegistryAuth;
use oci_client::{Reference, RegistryOperation};

use super::failure::{Failure, reached};
use super::options::RegistryOptions;
use super::reference::parse_reference;
use crate::ops::source::SourceError;
use crate::ops::source::artifact::{self, OCI_MANIFEST_MEDIA_TYPE, Packed};
use crate::ops::source::credentials;
use crate::ops::source::downloads::now_rfc3339;
use crate::ops::source::http::{CONNECT_TIMEOUT, chain, install_crypto_provider};

/// `wasmctrl push`'s conversation with a registry, through oci-client.
struct Pusher {
    client: oci_client::Client,
    options: RegistryOptions,
    origin: String,
}

impl Pusher {
    fn connect(options: &RegistryOptions, origin: &str) -> Result<Self, SourceError> {
        install_crypto_provider();
        let config = oci_client::client::ClientConfig {
            protocol: if options.insecure {
                oci_client::client::ClientProtocol::Http
            } else {
                oci_client::client::ClientProtocol::Https
            },
            platform_resolver: None,
            connect_timeout: Some(options.limits.timeout.min(CONNECT_TIMEOUT)),
            read_timeout: Some(options.limits.timeout),
            user_agent: concat!("wasmctrl/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        };
        let client = oci_client::Client::try_from(config).map_err(|e| SourceError::Download {
            origin: origin.to_string(),
            message: format!("cannot set up a registry client: {}", chain(&e)),
        })?;
        Ok(Self {
            client,
            options: options.clone(),
            origin: origin.to_string(),
        })
    }

    async fn auth(&self, reference: &Reference) -> Result<RegistryAuth, SourceError> {
        let registry = reference.resolve_registry();
        let found = match &self.options.credentials {
            Some(provider) => provider.credentials(registry).await,
            None => {
                credentials::credentials_for(self.options.docker_config.as_deref(), registry).await
            }
        }
        .map_err(|source| SourceError::Credentials {
            origin: self.origin.clone(),
            source,
        })?;
        Ok(match found {
            Some(c) => RegistryAuth::Basic(c.username, c.password),
            None => RegistryAuth::Anonymous,
        })
    }

    /// Sorts an oci-client error into "cannot reach" and "refused".
    fn failure(&self, e: OciDistributionError) -> Failure {
        let origin = self.origin.clone();
        let refused = |message: String| Failure::refused(SourceError::Download { origin, message });
        match e {
            OciDistributionError::RequestError(e) => {
                let mut message = chain(&e);
                if !self.options.insecure && message.contains("InvalidContentType") {
                    message.push_str(
                        " (the registry does not speak TLS; for a plain-HTTP registry set insecure: true)",
                    );
                }
                Failure::Unreachable(message)
            }
            OciDistributionError::RegistryError { envelope, .. } => {
                use oci_client::errors::OciErrorCode;
                let unknown = envelope.errors.iter().any(|e| {
                    matches!(
                        e.code,
                        OciErrorCode::ManifestUnknown | OciErrorCode::NameUnknown
                    )
                });
                if unknown {
                    refused("the registry has no such repository, tag or digest".into())
                } else {
                    let errors: Vec<String> = envelope
                        .errors
                        .iter()
                        .map(|e| format!("{:?}: {}", e.code, e.message))
                        .collect();
                    refused(format!("the registry refused: {}", errors.join("; ")))
                }
            }
            OciDistributionError::ServerError { code, message, .. }
                if code >= 500 || code == 429 =>
            {
                Failure::Unreachable(format!("the registry answered {code}: {message}"))
            }
            OciDistributionError::DigestError(DigestError::VerificationError {
                expected,
                actual,
            }) => Failure::refused(SourceError::DigestMismatch {
                origin: self.origin.clone(),
                expected,
                got: actual,
            }),
            OciDistributionError::ImageManifestNotFoundError(_) => {
                refused("the registry has no such manifest (unknown tag or digest)".into())
            }
            OciDistributionError::ServerError {
                code: 401 | 403, ..
            }
            | OciDistributionError::UnauthorizedError { .. }
            | OciDistributionError::AuthenticationFailure(_) => refused(format!(
                "the registry refused access ({}); check the credentials in the docker config",
                chain(&e)
            )),
            e => refused(chain(&e)),
        }
    }
}

/// What `wasmctrl push` stored.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The reference pushed to.
    pub reference: String,
    pub manifest_digest: String,
    pub config_digest: String,
    pub layer_digest: String,
}

/// Pushes `component` to `reference` (a tag) as a wasm OCI artifact with
/// `annotations` on its manifest.
pub async fn push(
    reference: &str,
    component: Vec<u8>,
    annotations: BTreeMap<String, String>,
    options: &RegistryOptions,
) -> Result<Pushed, SourceError> {
    let origin = format!("oci://{reference}");
    let (parsed, pinned) = parse_reference(reference, &origin)?;
    if pinned {
        return Err(SourceError::Invalid {
            origin,
            message: "push to a tag (REGISTRY/REPOSITORY:TAG); the digest follows from the content"
                .into(),
        });
    }
    let Packed {
        config,
        config_digest,
        layer_digest,
        manifest,
        manifest_digest,
    } = artifact::pack(&component, &now_rfc3339(), annotations).map_err(|message| {
        SourceError::NotWasmArtifact {
            origin: origin.clone(),
            message,
        }
    })?;
    let work = async {
        let registry = Pusher::connect(options, &origin)?;
        let auth = registry.auth(&parsed).await?;
        let describe = |e: OciDistributionError| reached(&origin, registry.failure(e));
        registry
            .client
            .auth(&parsed, &auth, RegistryOperation::Push)
            .await
            .map_err(describe)?;
        registry
            .client
            .push_blob(&parsed, component, &layer_digest)
            .await
            .map_err(describe)?;
        registry
            .client
            .push_blob(&parsed, config, &config_digest)
            .await
            .map_err(describe)?;
        registry
            .client
            .push_manifest_raw(
                &parsed,
                manifest,
                OCI_MANIFEST_MEDIA_TYPE
                    .parse()
                    .expect("a valid header value"),
            )
            .await
            .map_err(describe)?;
        Ok::<_, SourceError>(())
    };
    tokio::time::timeout(options.limits.timeout, work)
        .await
        .map_err(|_| SourceError::Timeout {
            origin: origin.clone(),
            after: options.limits.timeout,
        })??;
    Ok(Pushed {
        reference: reference.to_string(),
        manifest_digest,
        config_digest,
        layer_digest,
    })
}
