//! A plugin's `source:`: where its component comes from, as written and
//! checked.
//!
//! ```yaml
//! source: { file: plugin.wasm }                      # or `path: plugin.wasm`
//! source:
//!   url: https://example.com/plugin.wasm
//!   sha256: 3b1f…                                    # 64 hex digits, required
//! source:
//!   oci: ghcr.io/acme/plugin:1.2                     # or …@sha256:<64 hex>
//!   pollInterval: 5m                                 # re-resolve the tag
//! ```

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::error::FieldProblem;

use super::units::{
    HOUR, SECOND, YEAR, bytes_within, optional_duration, optional_quantity, within,
};

/// The largest component a URL or registry source downloads by default.
pub const DEFAULT_MAX_SIZE: u64 = 256 << 20;
/// How long one fetch (resolve and download) may take by default.
pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(300);
/// The largest `maxSize` a config may set.
const MAX_MAX_SIZE: u64 = 4 << 30;
/// The longest reference or URL accepted.
const MAX_LOCATION_LEN: usize = 4096;

/// Where a plugin's component comes from, as written: exactly one of
/// `file`, `url` and `oci`, with the options that apply to it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SourceConfig {
    /// A component file (relative to the config file).
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// An `https://` URL of a component; `sha256` is required with it.
    #[serde(default)]
    pub url: Option<String>,
    /// The component's SHA-256 (64 hex digits) for a `url` source.
    #[serde(default)]
    pub sha256: Option<String>,
    /// An OCI reference `REGISTRY/REPOSITORY:TAG` or `…@sha256:<hex>`.
    #[serde(default)]
    pub oci: Option<String>,
    /// How often an `oci` tag is resolved again; a new digest reloads the
    /// plugin. Default: never (resolved when the plugin is loaded).
    #[serde(default, deserialize_with = "optional_duration")]
    pub poll_interval: Option<Duration>,
    /// Plain HTTP: for an `oci` registry, or an `http://` `url` on a
    /// loopback address.
    #[serde(default)]
    pub insecure: bool,
    /// A docker `config.json` with registry credentials for an `oci`
    /// source (relative to the config file). Default: `$DOCKER_CONFIG/config.json`
    /// or `~/.docker/config.json` when present.
    #[serde(default)]
    pub docker_config: Option<PathBuf>,
    /// For an `oci` source of a WasmReconciler object: a Secret of type
    /// `kubernetes.io/dockerconfigjson` with the registry's credentials, in
    /// the namespace `pluginsFrom.namespace` names. (A config file names a
    /// `dockerConfig` file instead.)
    #[serde(default)]
    pub image_pull_secret: Option<String>,
    /// The largest component downloaded (default 256Mi).
    #[serde(default, deserialize_with = "optional_quantity")]
    pub max_size: Option<u64>,
    /// How long one fetch may take (default 5m).
    #[serde(default, deserialize_with = "optional_duration")]
    pub timeout: Option<Duration>,
}

/// Where a plugin's component comes from, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSpec {
    /// A component file (relative to the config file).
    File(PathBuf),
    /// A URL pinned by digest.
    Url(UrlSourceSpec),
    /// An OCI registry reference.
    Oci(OciSourceSpec),
}

/// A component at a URL, pinned by its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlSourceSpec {
    /// `https://…` (or `http://` on loopback with `insecure`).
    pub url: String,
    /// `sha256:<64 lowercase hex>`: the bytes must have this digest.
    pub digest: String,
    pub limits: FetchLimits,
}

/// A component in an OCI registry (the wasm OCI artifact layout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciSourceSpec {
    /// `REGISTRY/REPOSITORY:TAG` or `REGISTRY/REPOSITORY[:TAG]@sha256:<hex>`.
    pub reference: String,
    /// How often a tag is resolved again (None: never; always None for a
    /// reference pinned by digest).
    pub poll_interval: Option<Duration>,
    /// Talk plain HTTP to the registry.
    pub insecure: bool,
    /// A docker `config.json` with credentials (relative to the config
    /// file); None: the default locations.
    pub docker_config: Option<PathBuf>,
    pub limits: FetchLimits,
}

/// Bounds on one fetch from the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchLimits {
    /// Bytes of the component.
    pub max_size: u64,
    /// The whole fetch: resolving, downloading, verifying.
    pub timeout: Duration,
}

impl Default for FetchLimits {
    fn default() -> Self {
        Self {
            max_size: DEFAULT_MAX_SIZE,
            timeout: DEFAULT_FETCH_TIMEOUT,
        }
    }
}

/// A source field that is wrong: its name under `source` and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceProblem {
    pub field: &'static str,
    pub message: String,
}

fn problem(field: &'static str, message: impl Into<String>) -> SourceProblem {
    SourceProblem {
        field,
        message: message.into(),
    }
}

/// Checks that a component comes from exactly one of `path` and `source`,
/// and that the source is well formed. `at` is the field path of the
/// `source` key (`source`, `candidate.source`), `what` the component's
/// owner in the message (`the component`, `the candidate's component`).
pub(super) fn check_origin(
    at: &str,
    what: &str,
    path: Option<&PathBuf>,
    source: Option<&SourceConfig>,
) -> Result<(), FieldProblem> {
    match (path, source) {
        (Some(_), Some(_)) => Err(FieldProblem::new(
            at,
            "give either path or source, not both",
        )),
        (None, None) => Err(FieldProblem::new(
            at,
            format!(
                "is required: where {what} comes from (path: FILE, or source: with one of file, url and oci)"
            ),
        )),
        (None, Some(source)) => {
            source
                .spec()
                .map(drop)
                .map_err(|SourceProblem { field, message }| {
                    let path = match field {
                        "source" => at.to_string(),
                        f => format!("{at}.{f}"),
                    };
                    FieldProblem::new(path, message)
                })
        }
        (Some(_), None) => Ok(()),
    }
}

impl SourceConfig {
    /// Checks the fields and says which source they describe.
    pub fn spec(&self) -> Result<SourceSpec, SourceProblem> {
        let kinds = [self.file.is_some(), self.url.is_some(), self.oci.is_some()];
        match kinds.iter().filter(|k| **k).count() {
            0 => {
                return Err(problem(
                    "source",
                    "needs one of file, url and oci: where the component comes from",
                ));
            }
            1 => {}
            _ => {
                return Err(problem(
                    "source",
                    "give exactly one of file, url and oci, not several",
                ));
            }
        }
        let only = |field: &'static str, set: bool, with: &str| {
            if set {
                Err(problem(field, format!("only applies to {with} sources")))
            } else {
                Ok(())
            }
        };
        let limits = self.limits()?;
        if let Some(file) = &self.file {
            only("sha256", self.sha256.is_some(), "url")?;
            only("pollInterval", self.poll_interval.is_some(), "oci")?;
            only("insecure", self.insecure, "url and oci")?;
            only("dockerConfig", self.docker_config.is_some(), "oci")?;
            only("imagePullSecret", self.image_pull_secret.is_some(), "oci")?;
            only("maxSize", self.max_size.is_some(), "url and oci")?;
            only("timeout", self.timeout.is_some(), "url and oci")?;
            return Ok(SourceSpec::File(file.clone()));
        }
        if let Some(url) = &self.url {
            only("pollInterval", self.poll_interval.is_some(), "oci")?;
            only("dockerConfig", self.docker_config.is_some(), "oci")?;
            only("imagePullSecret", self.image_pull_secret.is_some(), "oci")?;
            check_url(url, self.insecure)?;
            let Some(sha256) = &self.sha256 else {
                return Err(problem(
                    "sha256",
                    "is required with url: the component's SHA-256 (64 hex digits), so what runs is what you reviewed",
                ));
            };
            return Ok(SourceSpec::Url(UrlSourceSpec {
                url: url.clone(),
                digest: sha256_digest(sha256).map_err(|m| problem("sha256", m))?,
                limits,
            }));
        }
        let reference = self.oci.as_deref().unwrap_or_default();
        only("sha256", self.sha256.is_some(), "url")?;
        let pinned = oci_reference(reference).map_err(|m| problem("oci", m))?;
        if pinned && self.poll_interval.is_some() {
            return Err(problem(
                "pollInterval",
                "does not apply to a reference pinned by digest (@sha256:…): it never changes",
            ));
        }
        if let Some(p) = self.poll_interval {
            within(p, SECOND..=YEAR).map_err(|m| problem("pollInterval", m))?;
        }
        if let Some(secret) = &self.image_pull_secret {
            if self.docker_config.is_some() {
                return Err(problem(
                    "imagePullSecret",
                    "give either dockerConfig or imagePullSecret, not both",
                ));
            }
            crate::meta::syntax::dns_subdomain("imagePullSecret", secret)
                .map_err(|e| problem("imagePullSecret", e.message))?;
        }
        Ok(SourceSpec::Oci(OciSourceSpec {
            reference: reference.to_string(),
            poll_interval: self.poll_interval,
            insecure: self.insecure,
            docker_config: self.docker_config.clone(),
            limits,
        }))
    }

    fn limits(&self) -> Result<FetchLimits, SourceProblem> {
        let mut limits = FetchLimits::default();
        if let Some(n) = self.max_size {
            bytes_within(n, (1 << 10)..=MAX_MAX_SIZE).map_err(|m| problem("maxSize", m))?;
            limits.max_size = n;
        }
        if let Some(t) = self.timeout {
            within(t, SECOND..=HOUR).map_err(|m| problem("timeout", m))?;
            limits.timeout = t;
        }
        Ok(limits)
    }
}

/// `https://…`, or `http://` to a loopback host with `insecure`; no
/// credentials or fragment in it.
fn check_url(url: &str, insecure: bool) -> Result<(), SourceProblem> {
    if url.len() > MAX_LOCATION_LEN {
        return Err(problem(
            "url",
            format!("is {} bytes; at most {MAX_LOCATION_LEN}", url.len()),
        ));
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| problem("url", format!("{url:?}: {e}")))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(problem(
            "url",
            "must not carry credentials (user:password@): the config is not a secret store",
        ));
    }
    if parsed.fragment().is_some() {
        return Err(problem(
            "url",
            "must not have a #fragment (give the digest in sha256)",
        ));
    }
    match (parsed.scheme(), insecure) {
        ("https", false) => Ok(()),
        ("https", true) => Err(problem(
            "insecure",
            "only applies to http:// URLs on a loopback address; remove it for https",
        )),
        ("http", true) if is_loopback_url(&parsed) => Ok(()),
        ("http", true) => Err(problem(
            "url",
            format!(
                "http:// is allowed only to a loopback address (127.0.0.1, [::1], localhost), not {:?}; use https",
                parsed.host_str().unwrap_or_default()
            ),
        )),
        ("http", false) => Err(problem(
            "url",
            "must be https:// (plain http only to a loopback address, with insecure: true)",
        )),
        (scheme, _) => Err(problem("url", format!("must be https://, not {scheme}://"))),
    }
}

/// Whether `url` names a loopback host (`localhost`, 127.0.0.0/8, ::1).
pub fn is_loopback_url(url: &reqwest::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// `sha256:<lowercase hex>` from 64 hex digits (either case, with or
/// without the `sha256:` prefix).
pub fn sha256_digest(text: &str) -> Result<String, String> {
    let hex = text.strip_prefix("sha256:").unwrap_or(text);
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "must be 64 hexadecimal digits (a SHA-256), not {:?}",
            truncate(text, 80)
        ));
    }
    Ok(format!("sha256:{}", hex.to_ascii_lowercase()))
}

/// Checks an OCI reference; Ok(true) when it is pinned by digest.
pub fn oci_reference(reference: &str) -> Result<bool, String> {
    if reference.len() > MAX_LOCATION_LEN {
        return Err(format!(
            "is {} bytes; at most {MAX_LOCATION_LEN}",
            reference.len()
        ));
    }
    if reference.contains("://") {
        return Err(format!(
            "{:?} is not an OCI reference: write REGISTRY/REPOSITORY:TAG without a scheme",
            truncate(reference, 80)
        ));
    }
    let parsed = oci_client::Reference::try_from(reference).map_err(|e| {
        format!(
            "{:?} is not an OCI reference (REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@sha256:<64 hex>): {e}",
            truncate(reference, 80)
        )
    })?;
    // The parser defaults a missing tag to `latest`; a source says which
    // version it means.
    let (name, _) = reference.split_once('@').unwrap_or((reference, ""));
    let has_tag = name
        .rsplit_once('/')
        .map_or(name, |(_, last)| last)
        .contains(':');
    match parsed.digest() {
        Some(d) => {
            let hex = d.strip_prefix("sha256:").ok_or_else(|| {
                format!("the digest {d:?} must be sha256:<64 lowercase hex digits>")
            })?;
            if !hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            {
                return Err(format!(
                    "the digest {d:?} must be sha256:<64 lowercase hex digits>"
                ));
            }
            Ok(true)
        }
        None if has_tag => Ok(false),
        None => Err(format!(
            "{reference:?} names no tag or digest: write {reference}:TAG or {reference}@sha256:<digest>"
        )),
    }
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
