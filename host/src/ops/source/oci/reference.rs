//! Parsing and pinning references.

use oci_client::Reference;

use crate::ops::source::SourceError;

/// `reference` pinned to `digest` (its tag dropped).
pub(super) fn pin(reference: &Reference, digest: &str) -> Reference {
    Reference::with_digest(
        reference.registry().to_string(),
        reference.repository().to_string(),
        digest.to_string(),
    )
}

/// The parsed reference, and whether it is pinned by digest.
pub(super) fn parse_reference(
    reference: &str,
    origin: &str,
) -> Result<(Reference, bool), SourceError> {
    let pinned =
        crate::config::oci_reference(reference).map_err(|message| SourceError::Invalid {
            origin: origin.to_string(),
            message,
        })?;
    Ok((
        Reference::try_from(reference).expect("checked above"),
        pinned,
    ))
}
