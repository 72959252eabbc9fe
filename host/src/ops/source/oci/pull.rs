//! The requests of a pull: resolving a tag to a manifest digest, reading
//! the manifest, downloading a blob; each answer bounded and verified.

use oci_client::Reference;
use oci_client::manifest::{OciDescriptor, OciImageManifest};

use super::failure::Failure;
use super::registry::{MAX_MANIFEST_SIZE, Registry};
use crate::control::metrics::SourceRefusal;
use crate::ops::source::SourceError;
use crate::ops::source::artifact::{self, OCI_MANIFEST_MEDIA_TYPE};
use crate::ops::source::downloads::is_sha256;
use crate::ops::source::http::read_bounded;
use crate::sandbox::digest;

/// The manifest media types a tag is resolved with.
const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";

impl Registry {
    fn manifest_url(&self, reference: &Reference, at: &str) -> String {
        format!("{}/v2/{}/manifests/{at}", self.base, reference.repository())
    }

    pub(super) async fn resolve(&self, reference: &Reference) -> Result<String, Failure> {
        let url = self.manifest_url(reference, reference.tag().unwrap_or("latest"));
        let response = self
            .answer(
                self.with_auth(self.http.head(&url))
                    .header(reqwest::header::ACCEPT, MANIFEST_TYPES),
            )
            .await?;
        let header = response
            .headers()
            .get("docker-content-digest")
            .and_then(|h| h.to_str().ok())
            .map(str::to_string);
        let d = match header {
            Some(d) => d,
            None => {
                // Without the header, the digest is the manifest's own.
                let response = self
                    .answer(
                        self.get(&url)
                            .header(reqwest::header::ACCEPT, MANIFEST_TYPES),
                    )
                    .await?;
                digest(
                    &self
                        .read_capped(
                            response,
                            MAX_MANIFEST_SIZE,
                            "the manifest",
                            SourceRefusal::Manifest,
                        )
                        .await?,
                )
            }
        };
        if !is_sha256(&d) {
            return Err(self.refused(format!(
                "the registry resolved the tag to {}, not a sha256 digest",
                artifact::shown(&d)
            )));
        }
        Ok(d)
    }

    /// The image manifest at `pinned` (parsed, and as stored).
    pub(super) async fn manifest(
        &self,
        pinned: &Reference,
    ) -> Result<(OciImageManifest, Vec<u8>), Failure> {
        let expected = pinned.digest().unwrap_or_default();
        let response = self
            .answer(
                self.get(&self.manifest_url(pinned, expected))
                    .header(reqwest::header::ACCEPT, OCI_MANIFEST_MEDIA_TYPE),
            )
            .await?;
        let raw = self
            .read_capped(
                response,
                MAX_MANIFEST_SIZE,
                "the manifest",
                SourceRefusal::Manifest,
            )
            .await?;
        // Everything below trusts it.
        let got = digest(&raw);
        if got != expected {
            return Err(Failure::refused(SourceError::DigestMismatch {
                origin: self.origin.clone(),
                expected: expected.to_string(),
                got,
            }));
        }
        let manifest = artifact::parse_manifest(&raw).map_err(|e| self.not_an_artifact(e))?;
        Ok((manifest, raw))
    }

    /// The blob `descriptor` names, at most `max_size` bytes, verified.
    pub(super) async fn blob(
        &self,
        pinned: &Reference,
        descriptor: &OciDescriptor,
        max_size: u64,
    ) -> Result<Vec<u8>, Failure> {
        let url = format!(
            "{}/v2/{}/blobs/{}",
            self.base,
            pinned.repository(),
            descriptor.digest
        );
        let response = self.answer(self.get(&url)).await?;
        let announced = response.content_length();
        let bytes = read_bounded(&self.origin, announced, max_size, response.bytes_stream())
            .await
            .map_err(|e| match e {
                // A body cut short is the network's doing; a load past its
                // budget (`Busy`) is not, and no cached version stands in.
                SourceError::Download { message, .. } => Failure::Unreachable(message),
                e => Failure::refused(e),
            })?;
        let got = digest(&bytes);
        if got != descriptor.digest {
            return Err(Failure::refused(SourceError::DigestMismatch {
                origin: self.origin.clone(),
                expected: descriptor.digest.clone(),
                got,
            }));
        }
        Ok(bytes)
    }
}
