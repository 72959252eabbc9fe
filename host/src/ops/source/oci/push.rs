//! `wasmctrl push`: a component to a registry as a wasm OCI artifact,
//! through the same bounded conversation as a pull ([`Registry`]): the
//! token answer and every error answer are read under their bounds, and
//! no success answer's body is read at all.
//!
//! The upload is the distribution spec's monolithic one: `POST` to open an
//! upload session, `PUT` the blob to the location the registry names
//! (held to the conversation's rule like any URL it names), then `PUT` the
//! manifest by tag.

use std::collections::BTreeMap;

use super::failure::{Failure, reached};
use super::options::RegistryOptions;
use super::reference::parse_reference;
use super::registry::{Access, Registry};
use crate::ops::source::artifact::{self, OCI_MANIFEST_MEDIA_TYPE, Packed};
use crate::ops::source::downloads::now_rfc3339;
use crate::ops::source::{Reach, SourceError, within};

/// What `wasmctrl push` stored.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The reference pushed to.
    pub reference: String,
    pub manifest_digest: String,
    pub config_digest: String,
    pub layer_digest: String,
}

impl Registry {
    /// Uploads `bytes` as the blob `digest` of `repository`.
    async fn push_blob(
        &self,
        repository: &str,
        bytes: Vec<u8>,
        digest: &str,
    ) -> Result<(), Failure> {
        let start = format!("{}/v2/{repository}/blobs/uploads/", self.base);
        let response = self
            .answer(
                self.with_auth(self.http.post(&start))
                    .header(reqwest::header::CONTENT_LENGTH, 0),
            )
            .await?;
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|h| h.to_str().ok())
            .ok_or_else(|| {
                self.refused(format!(
                    "the registry answered {} to an upload without a Location to upload to",
                    response.status()
                ))
            })?;
        // A location may be relative to the registry, and may carry the
        // registry's own query (an upload state).
        let mut upload = reqwest::Url::parse(&start)
            .and_then(|base| base.join(location))
            .map_err(|e| {
                self.refused(format!("the registry's upload location is not a URL: {e}"))
            })?;
        drop(response);
        self.check(&upload)?;
        upload.query_pairs_mut().append_pair("digest", digest);
        self.answer(
            self.with_auth(self.http.put(upload))
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .body(bytes),
        )
        .await?;
        Ok(())
    }

    /// Stores `manifest` under `tag` of `repository`.
    async fn push_manifest(
        &self,
        repository: &str,
        tag: &str,
        manifest: Vec<u8>,
    ) -> Result<(), Failure> {
        let url = format!("{}/v2/{repository}/manifests/{tag}", self.base);
        self.answer(
            self.with_auth(self.http.put(&url))
                .header(reqwest::header::CONTENT_TYPE, OCI_MANIFEST_MEDIA_TYPE)
                .body(manifest),
        )
        .await?;
        Ok(())
    }
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
    let tag = parsed.tag().unwrap_or("latest");
    let repository = parsed.repository();
    let work = async {
        // An operator's own command against a registry they chose: no
        // address is out of reach, but the scheme rule holds.
        let registry =
            Registry::open_for(options, &origin, &parsed, Reach::Anywhere, Access::Push).await?;
        registry
            .push_blob(repository, component, &layer_digest)
            .await?;
        registry
            .push_blob(repository, config, &config_digest)
            .await?;
        registry.push_manifest(repository, tag, manifest).await
    };
    within(&origin, options.limits.timeout, work)
        .await?
        .map_err(|f| reached(&origin, f))?;
    Ok(Pushed {
        reference: reference.to_string(),
        manifest_digest,
        config_digest,
        layer_digest,
    })
}
