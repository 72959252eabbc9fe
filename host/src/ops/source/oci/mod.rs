//! Components in OCI registries, as wasm OCI artifacts ([`super::artifact`]).
//!
//! A reference pinned by digest (`…@sha256:…`) names one manifest forever:
//! once its component is cached, the registry is never asked again. A tag
//! is resolved to a manifest digest on every fetch (a `HEAD`), and, with
//! `pollInterval`, every interval: a digest other than the one last fetched
//! yields on [`PluginSource::changes`](super::PluginSource::changes) and the manager fetches and swaps.
//! The manifest is then pulled *by that digest* (so it cannot change under
//! us between resolving and pulling) and its one layer by the layer's
//! digest, each verified.
//!
//! When the registry cannot be reached (connection, timeout, 5xx), a fetch
//! serves the component the reference last resolved to from the disk cache,
//! with a warning: a host restarts while its registry is down. A registry
//! that answers "no" (unknown tag, refused credentials, not an artifact) is
//! believed: no fallback.
//!
//! # Bounded reads
//! A pull talks to the registry with the host's own HTTP client, not
//! oci-client's: oci-client 0.18 reads the token endpoint's answer, every
//! manifest and every error answer whole into memory (`text()`,
//! `bytes()`), and takes no client or hook to bound them, so a registry
//! could make the host hold gigabytes. Here every body read has a bound:
//! the token answer [`MAX_TOKEN_ANSWER`], a manifest [`MAX_MANIFEST_SIZE`],
//! the config [`MAX_CONFIG_SIZE`](super::artifact::MAX_CONFIG_SIZE), the component the source's `maxSize`,
//! an error answer [`MAX_ERROR_ANSWER`] (the rest is not read); and every
//! URL connected to, redirects and the token realm included, meets the
//! source's `http::Rule`. The pull is three requests (the token exchange, the
//! manifest, the blob), small enough to own; `wasmctrl push` is the same
//! conversation with three more (two uploads and the manifest), whose
//! success answers are never read.
//!
//! - `source`: [`OciSource`], the plugin source, with its disk-cache
//!   fallback.
//! - `registry`: the bounded conversation with a registry, and its
//!   authentication; `pull` the requests it makes (resolve a tag, read
//!   a manifest, download a blob).
//! - `push` and `describe`: `wasmctrl push` and `wasmctrl inspect`.

mod challenge;
mod describe;
mod failure;
mod options;
mod pull;
mod push;
mod reference;
mod registry;
mod source;
#[cfg(test)]
mod tests;

pub use describe::{Described, describe_artifact};
pub use options::RegistryOptions;
pub use push::{Pushed, push};
pub use registry::{MAX_ERROR_ANSWER, MAX_MANIFEST_SIZE, MAX_TOKEN_ANSWER};
pub use source::OciSource;
