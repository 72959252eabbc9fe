//! Secrets a plugin uses without seeing them: each entry of its `secrets`
//! names a value the host holds (a key of a Kubernetes Secret, a file, an
//! environment variable) and the only destinations it may be sent to.
//!
//! # The placeholder
//! A guest writes `${secret:NAME}` into an outgoing request's header value
//! (`Authorization: Bearer ${secret:dns-token}`). The host substitutes the
//! value only in a request whose scheme, host and port are exactly one of
//! the entry's `hosts`; to any other destination the request is refused
//! before anything is sent. Placeholders are substituted in header values
//! only: one in the URL is refused (a query string is logged by servers
//! and proxies), and the body is sent as written.
//!
//! # What the guest sees back
//! Whatever the server answers is redacted before the guest reads it: each
//! value sent in the request becomes `<secret:NAME>` in the response's
//! headers and body (a server that echoes its request hands back the
//! marker). A value is revealed to the guest only through `reveal`, and
//! only where the entry says `reveal: true`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::destination::Destination;
use super::rule::{HostPattern, OutboundRule};
use super::{DenyReason, Refusal};
use crate::control::secrets::{SecretWatch, WatchedSecret};
use crate::meta::syntax;

/// Entries of one plugin's `secrets`.
pub const MAX_SECRETS: usize = 32;
/// Destinations of one entry.
pub const MAX_SECRET_HOSTS: usize = 16;
/// Bytes of one value (a file or Secret key past it is refused).
pub const MAX_SECRET_BYTES: usize = 64 << 10;
/// What starts a placeholder.
const OPEN: &[u8] = b"${secret:";

/// One entry of a plugin's `secrets`: exactly one source, and where the
/// value may go.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecretBinding {
    /// What the plugin calls it (`${secret:NAME}`, `reveal(NAME)`).
    pub name: String,
    /// A key of a Kubernetes Secret, read and watched with the host's own
    /// credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeyRef>,
    /// A file on the host, read at each use (a mounted Secret rotates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// An environment variable of the host process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// `scheme://host[:port]`: the only destinations the value is sent to.
    pub hosts: Vec<String>,
    /// Whether `reveal` hands the value to the guest.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reveal: bool,
}

/// A key of a Kubernetes Secret.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SecretKeyRef {
    pub namespace: String,
    pub name: String,
    pub key: String,
}

/// Where an entry's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretSource<'a> {
    KeyRef(&'a SecretKeyRef),
    File(&'a Path),
    Env(&'a str),
}

/// One destination of an entry: a scheme, one host and a port, matched
/// exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SecretHost {
    scheme: String,
    host: HostPattern,
    port: u16,
}

impl SecretBinding {
    /// Checks the entry: its name, one source of a valid form, 1 to
    /// [`MAX_SECRET_HOSTS`] destinations, each `scheme://host[:port]`
    /// naming one host (no wildcard, no path).
    pub fn check(&self) -> Result<(), String> {
        secret_name(&self.name)?;
        match self.source() {
            Err(e) => return Err(e),
            Ok(SecretSource::KeyRef(r)) => {
                syntax::namespace(&r.namespace).map_err(|e| format!("secretKeyRef.{e}"))?;
                syntax::dns_subdomain("secretKeyRef.name", &r.name).map_err(|e| e.to_string())?;
                let key_ok = !r.key.is_empty()
                    && r.key.len() <= 253
                    && r.key
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
                if !key_ok {
                    return Err(format!(
                        "secretKeyRef.key {:?} is not a Secret data key (1-253 of letters, digits, '-', '_' and '.')",
                        cut(&r.key)
                    ));
                }
            }
            Ok(SecretSource::File(p)) => {
                if !p.is_absolute() {
                    return Err(format!("file {:?} must be an absolute path", p.display()));
                }
            }
            Ok(SecretSource::Env(v)) => {
                let ok = !v.is_empty()
                    && v.len() <= 256
                    && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                if !ok {
                    return Err(format!(
                        "env {:?} is not an environment variable name (letters, digits and '_')",
                        cut(v)
                    ));
                }
            }
        }
        if self.hosts.is_empty() {
            return Err("hosts is empty: name the destinations the value may be sent to".into());
        }
        if self.hosts.len() > MAX_SECRET_HOSTS {
            return Err(format!("at most {MAX_SECRET_HOSTS} hosts per secret"));
        }
        self.destinations().map(|_| ())
    }

    /// The entry's one source; an error if it names none or several.
    pub fn source(&self) -> Result<SecretSource<'_>, String> {
        match (&self.secret_key_ref, &self.file, &self.env) {
            (Some(r), None, None) => Ok(SecretSource::KeyRef(r)),
            (None, Some(f), None) => Ok(SecretSource::File(f)),
            (None, None, Some(e)) => Ok(SecretSource::Env(e)),
            (None, None, None) => {
                Err("names no source: set one of secretKeyRef, file and env".into())
            }
            _ => Err("names several sources: set exactly one of secretKeyRef, file and env".into()),
        }
    }

    fn destinations(&self) -> Result<Vec<SecretHost>, String> {
        self.hosts
            .iter()
            .enumerate()
            .map(|(i, url)| {
                let target = OutboundRule {
                    url: url.clone(),
                    methods: Vec::new(),
                    private: false,
                }
                .target()
                .map_err(|e| format!("hosts[{i}]: {e}"))?;
                if matches!(target.host, HostPattern::Subdomains(_)) {
                    return Err(format!(
                        "hosts[{i}]: {url:?} names a wildcard; a secret goes to exact hosts only"
                    ));
                }
                if !target.path.is_empty() {
                    return Err(format!(
                        "hosts[{i}]: {url:?} has a path; a secret's destination is scheme://host[:port]"
                    ));
                }
                Ok(SecretHost {
                    scheme: target.scheme,
                    host: target.host,
                    port: target.port,
                })
            })
            .collect()
    }
}

/// A secret's name: a DNS-1123 label, so it cannot close a placeholder or
/// reach a log line as anything but a name.
fn secret_name(name: &str) -> Result<(), String> {
    wasmctrl_apimachinery::names::dns1123_label(name).map_err(|_| {
        format!(
            "name {:?} is not a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters)",
            cut(name)
        )
    })
}

fn cut(s: &str) -> String {
    s.chars().take(64).collect()
}

/// A plugin's secrets, bound to where their values are read.
#[derive(Debug, Default)]
pub struct Secrets {
    entries: Vec<Bound>,
    /// The value lists answers were last redacted of, and their patterns,
    /// the most recent first.
    redaction: std::sync::Mutex<Vec<RedactionCache>>,
}

type RedactionCache = (Vec<(String, Vec<u8>)>, Arc<Patterns>);

#[derive(Debug)]
struct Bound {
    binding: SecretBinding,
    hosts: Vec<SecretHost>,
    /// The watched Secret of a `secretKeyRef` (None without a cluster).
    watched: Option<Arc<WatchedSecret>>,
}

impl Secrets {
    /// Binds checked `bindings`; a `secretKeyRef` is watched through
    /// `watch` (without one, reading it fails with a message saying so).
    pub fn new(bindings: Vec<SecretBinding>, watch: Option<&SecretWatch>) -> Result<Self, String> {
        if bindings.len() > MAX_SECRETS {
            return Err(format!("at most {MAX_SECRETS} secrets per plugin"));
        }
        let mut names = BTreeSet::new();
        let entries = bindings
            .into_iter()
            .enumerate()
            .map(|(i, binding)| {
                binding.check().map_err(|e| format!("secrets[{i}]: {e}"))?;
                if !names.insert(binding.name.clone()) {
                    return Err(format!(
                        "secrets[{i}]: a second secret named {:?}",
                        binding.name
                    ));
                }
                let hosts = binding.destinations()?;
                let watched = match (binding.source()?, watch) {
                    (SecretSource::KeyRef(r), Some(w)) => Some(w.secret(&r.namespace, &r.name)),
                    _ => None,
                };
                Ok(Bound {
                    binding,
                    hosts,
                    watched,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(Self {
            entries,
            redaction: Default::default(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn bindings(&self) -> impl Iterator<Item = &SecretBinding> {
        self.entries.iter().map(|e| &e.binding)
    }

    fn names(&self) -> String {
        let names: Vec<&str> = self
            .entries
            .iter()
            .map(|e| e.binding.name.as_str())
            .collect();
        if names.is_empty() {
            "the plugin has no secrets".into()
        } else {
            format!("its secrets: {}", names.join(", "))
        }
    }

    fn find(&self, name: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.binding.name == name)
    }

    /// The entries a request's placeholders name, each checked against
    /// the request's destination; refused (nothing is sent) for a
    /// placeholder in the URL, an unknown name, or a destination the
    /// entry does not list.
    pub(super) fn placed<B>(
        &self,
        request: &http::Request<B>,
        dest: &Destination,
    ) -> Result<Vec<usize>, Refusal> {
        let refused = |reason, message: String| Refusal { reason, message };
        let uri = request.uri().to_string().to_ascii_lowercase();
        if uri.contains("{secret:") || uri.contains("%7bsecret:") {
            return Err(refused(
                DenyReason::Secret,
                format!(
                    "{}: a secret placeholder in the URL is refused; placeholders are substituted in header values only",
                    dest.shown
                ),
            ));
        }
        let mut used = Vec::new();
        for (header, value) in request.headers() {
            let names = placeholders(value.as_bytes()).map_err(|e| {
                refused(
                    DenyReason::Secret,
                    format!("{}: header {header}: {e}", dest.shown),
                )
            })?;
            for name in names {
                let Some(i) = self.find(name) else {
                    return Err(refused(
                        DenyReason::Secret,
                        format!(
                            "{}: header {header} names secret {name:?}, which the plugin's secrets do not hold ({})",
                            dest.shown,
                            self.names()
                        ),
                    ));
                };
                let entry = &self.entries[i];
                if !entry.hosts.iter().any(|h| {
                    h.scheme == dest.scheme && h.port == dest.port && h.host.matches(&dest.host)
                }) {
                    return Err(refused(
                        DenyReason::SecretHost,
                        format!(
                            "{}: secret {name:?} may be sent only to {}; nothing was sent",
                            dest.shown,
                            entry.binding.hosts.join(", ")
                        ),
                    ));
                }
                if !used.contains(&i) {
                    used.push(i);
                }
            }
        }
        Ok(used)
    }

    /// How many secrets the plugin has (entries `0..len`).
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// A redactor of `values` (name, value; where two values are the
    /// same, the first one's name marks it). Its patterns are built again
    /// only for a list unlike the last few (a rotation, a value that could
    /// not be read, another order): building them costs far more than
    /// comparing a few values.
    pub(super) fn redactor(&self, values: Vec<(String, Vec<u8>)>) -> Redactor {
        const KEPT: usize = 8;
        let mut cached = self.redaction.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = cached.iter().position(|(v, _)| *v == values) {
            let hit = cached.remove(i);
            let patterns = hit.1.clone();
            cached.insert(0, hit);
            return Redactor::of(patterns);
        }
        let patterns = Arc::new(Patterns::new(&values));
        cached.insert(0, (values, patterns.clone()));
        cached.truncate(KEPT);
        Redactor::of(patterns)
    }

    /// The name of entry `i`.
    pub(super) fn name(&self, i: usize) -> &str {
        &self.entries[i].binding.name
    }

    /// The value of entry `i` now: non-empty, at most
    /// [`MAX_SECRET_BYTES`]. The error says what is missing, never a value.
    pub(super) async fn value(&self, i: usize, deadline: Instant) -> Result<Vec<u8>, String> {
        let entry = &self.entries[i];
        let value = match entry.binding.source()? {
            SecretSource::Env(var) => std::env::var_os(var)
                .map(|v| v.into_encoded_bytes())
                .ok_or_else(|| format!("the host's environment variable {var} is not set"))?,
            SecretSource::File(path) => read_file(path).await?,
            SecretSource::KeyRef(r) => match &entry.watched {
                Some(w) => w.value(&r.key, deadline).await?,
                None => {
                    return Err(format!(
                        "Secret {}/{} cannot be read: the host runs without a cluster",
                        r.namespace, r.name
                    ));
                }
            },
        };
        if value.is_empty() {
            return Err("its value is empty".into());
        }
        if value.len() > MAX_SECRET_BYTES {
            return Err(format!(
                "its value is {} bytes, past the ceiling of {MAX_SECRET_BYTES}",
                value.len()
            ));
        }
        Ok(value)
    }

    /// The value of secret `name` for the guest, where its entry says
    /// `reveal: true`.
    pub async fn reveal(&self, name: &str, deadline: Instant) -> Result<Vec<u8>, RevealRefusal> {
        let Some(i) = self.find(name) else {
            return Err(RevealRefusal::Unknown(format!(
                "no secret named {:?} ({})",
                cut(name),
                self.names()
            )));
        };
        if !self.entries[i].binding.reveal {
            return Err(RevealRefusal::Forbidden(format!(
                "secret {name:?} is not revealed to the plugin: its secrets entry does not say reveal: true (it can still be sent as ${{secret:{name}}} in a header)"
            )));
        }
        self.value(i, deadline)
            .await
            .map_err(|e| RevealRefusal::Unavailable(format!("secret {name:?}: {e}")))
    }
}

/// Why `reveal` refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevealRefusal {
    Unknown(String),
    Forbidden(String),
    Unavailable(String),
}

impl RevealRefusal {
    /// The `reason` label of `wasmctrl_plugin_secret_refusals_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            RevealRefusal::Unknown(_) => "unknown",
            RevealRefusal::Forbidden(_) => "reveal",
            RevealRefusal::Unavailable(_) => "unavailable",
        }
    }
}

/// A file's bytes, at most [`MAX_SECRET_BYTES`], one trailing line break
/// dropped (what `echo` and most editors add).
async fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    use tokio::io::AsyncReadExt;
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| format!("file {} cannot be read: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_SECRET_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| format!("file {} cannot be read: {e}", path.display()))?;
    if bytes.len() > MAX_SECRET_BYTES {
        return Err(format!(
            "file {} is past the ceiling of {MAX_SECRET_BYTES} bytes",
            path.display()
        ));
    }
    if bytes.ends_with(b"\n") {
        bytes.pop();
        if bytes.ends_with(b"\r") {
            bytes.pop();
        }
    }
    Ok(bytes)
}

/// The names of the placeholders in `value`, in order; an error for one
/// that is not closed or names no valid secret name.
pub(super) fn placeholders(value: &[u8]) -> Result<Vec<&str>, String> {
    let mut names = Vec::new();
    let mut rest = value;
    while let Some(at) = memchr::memmem::find(rest, OPEN) {
        let after = &rest[at + OPEN.len()..];
        let end = after
            .iter()
            .take(64)
            .position(|&b| b == b'}')
            .ok_or("a `${secret:` placeholder is not closed by `}` within 63 characters")?;
        let name = std::str::from_utf8(&after[..end])
            .ok()
            .filter(|n| secret_name(n).is_ok())
            .ok_or("a `${secret:NAME}` placeholder whose NAME is not a DNS-1123 label")?;
        names.push(name);
        rest = &after[end + 1..];
    }
    Ok(names)
}

/// `value` with each placeholder replaced by its secret's value.
pub(super) fn substitute(value: &[u8], values: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = memchr::memmem::find(rest, OPEN) {
        out.extend_from_slice(&rest[..at]);
        let after = &rest[at + OPEN.len()..];
        let end = after.iter().position(|&b| b == b'}').unwrap_or(after.len());
        let name = std::str::from_utf8(&after[..end]).unwrap_or("");
        if let Some((_, v)) = values.iter().find(|(n, _)| *n == name) {
            out.extend_from_slice(v);
        }
        rest = after.get(end + 1..).unwrap_or(&[]);
    }
    out.extend_from_slice(rest);
    out
}

/// Replaces secret values with `<secret:NAME>` in a stream of bytes.
///
/// Each value is looked for as it was sent and in the forms a server that
/// echoes it is likely to write: escaped in a JSON string (as serde and
/// Python write it, with `\/` as PHP writes it, with `\u003c`-style
/// escapes as Go writes it), percent-encoded, and base64-encoded anywhere
/// in a longer encoded text (see [`base64_forms`]); every form in any mix
/// of ASCII letter cases. A value echoed cut short, or encoded otherwise,
/// is not recognised.
///
/// All forms are searched in one pass (Aho-Corasick, leftmost-longest), and
/// a value split across two chunks is still found: the last
/// `longest - 1` bytes of what has arrived are held back until more comes,
/// and no more is scanned until at least `longest` new bytes have, so each
/// byte is scanned at most twice whatever the chunks' sizes.
#[derive(Debug)]
pub(super) struct Redactor {
    patterns: Arc<Patterns>,
    held: Vec<u8>,
}

/// What a [`Redactor`] looks for: built once per set of values, shared by
/// the redactors of every answer while the values stay the same.
#[derive(Debug)]
pub(super) struct Patterns {
    /// None when there is nothing to look for.
    finder: Option<aho_corasick::AhoCorasick>,
    /// The marker of each pattern of `finder`, by pattern index.
    markers: Vec<std::sync::Arc<[u8]>>,
    /// The longest pattern's length.
    longest: usize,
}

impl Patterns {
    /// The patterns of `values` (name, value); empty values are skipped.
    fn new(values: &[(String, Vec<u8>)]) -> Self {
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut markers = Vec::new();
        for (name, value) in values.iter().filter(|(_, v)| !v.is_empty()) {
            let marker: std::sync::Arc<[u8]> = format!("<secret:{name}>").into_bytes().into();
            for form in echoed_forms(value) {
                if !patterns.contains(&form) {
                    patterns.push(form);
                    markers.push(marker.clone());
                }
            }
        }
        let longest = patterns.iter().map(Vec::len).max().unwrap_or(0);
        let finder = (!patterns.is_empty()).then(|| {
            aho_corasick::AhoCorasick::builder()
                .match_kind(aho_corasick::MatchKind::LeftmostLongest)
                .ascii_case_insensitive(true)
                .build(&patterns)
                .expect("a few hundred patterns of at most 384 KiB build")
        });
        Self {
            finder,
            markers,
            longest,
        }
    }
}

impl Redactor {
    /// A redactor of `values` (name, value); empty values are skipped.
    pub(super) fn new(values: Vec<(String, Vec<u8>)>) -> Self {
        Self::of(Arc::new(Patterns::new(&values)))
    }

    fn of(patterns: Arc<Patterns>) -> Self {
        Self {
            patterns,
            held: Vec::new(),
        }
    }

    /// `bytes` redacted whole (a header value).
    pub(super) fn redact(&self, bytes: &[u8]) -> Vec<u8> {
        self.scan(bytes, bytes.len()).0
    }

    /// The next chunk's redacted bytes (some of what has arrived may be
    /// held back).
    pub(super) fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.held.extend_from_slice(chunk);
        if self.held.len() < 2 * self.patterns.longest {
            return Vec::new();
        }
        let hold_from = self.held.len() + 1 - self.patterns.longest;
        let (out, done) = self.scan(&self.held, hold_from);
        self.held.drain(..done);
        out
    }

    /// The bytes held at the end of the stream.
    pub(super) fn finish(&mut self) -> Vec<u8> {
        let held = std::mem::take(&mut self.held);
        self.redact(&held)
    }

    /// Redacts `buf` up to `hold_from`, where the bytes that may begin a
    /// value not yet whole start: a match starting before it lies wholly in
    /// `buf`, whatever comes next. Returns the redacted bytes and how far
    /// into `buf` they reach (past `hold_from` when a match ends there).
    fn scan(&self, buf: &[u8], hold_from: usize) -> (Vec<u8>, usize) {
        let mut out = Vec::with_capacity(buf.len());
        let mut i = 0;
        if let Some(finder) = &self.patterns.finder {
            for m in finder.find_iter(buf) {
                if m.start() >= hold_from {
                    break;
                }
                out.extend_from_slice(&buf[i..m.start()]);
                out.extend_from_slice(&self.patterns.markers[m.pattern().as_usize()]);
                i = m.end();
            }
        }
        let done = i.max(hold_from.min(buf.len()));
        out.extend_from_slice(&buf[i..done]);
        (out, done)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.patterns.finder.is_none()
    }
}

/// `value` as sent, and as a server echoing it is likely to write it (see
/// [`Redactor`]); each form once.
fn echoed_forms(value: &[u8]) -> Vec<Vec<u8>> {
    let mut forms = vec![value.to_vec()];
    let mut add = |form: Vec<u8>| {
        if !forms.contains(&form) {
            forms.push(form);
        }
    };
    if let Ok(text) = std::str::from_utf8(value) {
        let json = serde_json::to_string(text).unwrap_or_default();
        let json = json[1..json.len() - 1].to_string();
        add(json.replace('/', "\\/").into_bytes());
        let go = json
            .replace('<', "\\u003c")
            .replace('>', "\\u003e")
            .replace('&', "\\u0026");
        add(go.into_bytes());
        add(json.into_bytes());
    }
    // The redactor ignores ASCII case, so one case of hex covers both.
    let mut percent = Vec::with_capacity(value.len() * 3);
    for &b in value {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            percent.push(b);
        } else {
            percent.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    add(percent);
    for form in base64_forms(value) {
        add(form);
    }
    forms
}

/// The shortest base64 form looked for: shorter runs of characters would
/// match unrelated encoded text.
const MIN_BASE64_FORM: usize = 8;

/// `value` base64-encoded wherever it sits in a longer encoded text, as in
/// HTTP Basic credentials (`user:password`) or a token inside an encoded
/// JSON document: for each of the three offsets at which it may start
/// within a group of three bytes, the characters that encode its bytes and
/// nothing else, in the standard and the URL-safe alphabet. The one or two
/// characters at each end that mix in neighbouring bytes are left out, so
/// they stay beside the marker. Forms shorter than [`MIN_BASE64_FORM`]
/// (values of a few bytes) are skipped.
fn base64_forms(value: &[u8]) -> Vec<Vec<u8>> {
    use base64::Engine as _;
    let mut forms = Vec::new();
    for offset in 0..3 {
        let mut shifted = vec![0; offset];
        shifted.extend_from_slice(value);
        // A character is six bits: the first wholly inside the value starts
        // at or after bit 8 × offset, the last ends at or before its end.
        let start = (offset * 8).div_ceil(6);
        let end = shifted.len() * 8 / 6;
        if end < start + MIN_BASE64_FORM {
            continue;
        }
        for engine in [
            &base64::engine::general_purpose::STANDARD_NO_PAD,
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        ] {
            let encoded = engine.encode(&shifted);
            forms.push(encoded.as_bytes()[start..end].to_vec());
        }
    }
    forms
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(yaml: &str) -> SecretBinding {
        serde_norway::from_str(yaml).unwrap()
    }

    #[test]
    fn an_entry_names_one_source_and_exact_hosts() {
        let ok = binding(
            "{name: dns-token, secretKeyRef: {namespace: default, name: dns-provider, key: token}, hosts: ['https://api.dns.example']}",
        );
        ok.check().unwrap();
        let cases = [
            ("{name: a, hosts: ['https://x']}", "names no source"),
            (
                "{name: a, env: A, file: /f, hosts: ['https://x']}",
                "several sources",
            ),
            ("{name: a, env: A, hosts: []}", "hosts is empty"),
            (
                "{name: a, env: A, hosts: ['https://*.x.example']}",
                "wildcard",
            ),
            ("{name: a, env: A, hosts: ['https://x/api']}", "has a path"),
            (
                "{name: a, file: rel/path, hosts: ['https://x']}",
                "absolute",
            ),
            ("{name: A_B, env: A, hosts: ['https://x']}", "DNS-1123"),
            (
                "{name: a, env: 'A-B', hosts: ['https://x']}",
                "environment variable",
            ),
            (
                "{name: a, secretKeyRef: {namespace: default, name: s, key: 'a/b'}, hosts: ['https://x']}",
                "Secret data key",
            ),
        ];
        for (yaml, why) in cases {
            let e = binding(yaml).check().unwrap_err();
            assert!(e.contains(why), "{yaml}: {e}");
        }
    }

    #[test]
    fn placeholders_are_found_closed_and_named() {
        assert_eq!(
            placeholders(b"Bearer ${secret:dns-token}").unwrap(),
            vec!["dns-token"]
        );
        assert_eq!(
            placeholders(b"${secret:a}:${secret:b}").unwrap(),
            vec!["a", "b"]
        );
        assert!(placeholders(b"plain").unwrap().is_empty());
        assert!(placeholders(b"${secret:open").is_err());
        assert!(placeholders(b"${secret:Not_A_Label}").is_err());
        assert_eq!(
            substitute(b"Bearer ${secret:t}!", &[("t", b"v4lue")]),
            b"Bearer v4lue!"
        );
    }

    #[test]
    fn a_value_is_redacted_even_split_across_chunks() {
        let mut r = Redactor::new(vec![("tok".into(), b"s3cr3t-value".to_vec())]);
        let mut out = Vec::new();
        for chunk in [
            &b"echo: Bearer s3cr"[..],
            b"3t-va",
            b"lue and s3",
            b"cr3t-value",
            b" s3",
        ] {
            out.extend(r.push(chunk));
        }
        out.extend(r.finish());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "echo: Bearer <secret:tok> and <secret:tok> s3"
        );
        assert_eq!(r.redact(b"xs3cr3t-valuex"), b"x<secret:tok>x");
        // A byte at a time.
        let mut r = Redactor::new(vec![("tok".into(), b"abcabd".to_vec())]);
        let mut out = Vec::new();
        for b in b"abcabcabdz" {
            out.extend(r.push(&[*b]));
        }
        out.extend(r.finish());
        assert_eq!(String::from_utf8(out).unwrap(), "abc<secret:tok>z");
    }

    #[test]
    fn a_value_echoed_escaped_or_percent_encoded_is_redacted() {
        let r = Redactor::new(vec![("tok".into(), b"a/b+c&d<e\"f g".to_vec())]);
        for echoed in [
            r#"{"auth":"a/b+c&d<e\"f g"}"#,
            r#"{"auth":"a\/b+c&d<e\"f g"}"#,
            r#"{"auth":"a/b+c\u0026d\u003ce\"f g"}"#,
            "q=a%2Fb%2Bc%26d%3Ce%22f%20g",
            "q=a%2fb%2bc%26d%3ce%22f%20g",
        ] {
            let out = String::from_utf8(r.redact(echoed.as_bytes())).unwrap();
            assert!(
                out.contains("<secret:tok>") && !out.contains("b+c") && !out.contains("b%2"),
                "{echoed} -> {out}"
            );
        }
        // Not recognised: a value cut short.
        assert_eq!(r.redact(b"a/b+c&d"), b"a/b+c&d");
    }

    #[test]
    fn a_value_echoed_in_another_case_or_inside_base64_is_redacted() {
        use base64::Engine as _;
        let value = b"s3cr3t~Value/with?bits";
        let r = Redactor::new(vec![("tok".into(), value.to_vec())]);
        let upper = String::from_utf8(value.to_ascii_uppercase()).unwrap();
        let out = String::from_utf8(r.redact(format!("echo: {upper}").as_bytes())).unwrap();
        assert_eq!(out, "echo: <secret:tok>");
        let lower = String::from_utf8(value.to_ascii_lowercase()).unwrap();
        let out = String::from_utf8(r.redact(format!("echo: {lower}").as_bytes())).unwrap();
        assert_eq!(out, "echo: <secret:tok>");
        // Basic credentials, with users of every length modulo three, so
        // the value starts at each offset within a group of three bytes.
        for user in ["u", "us", "usr", "user"] {
            let mut plain = format!("{user}:").into_bytes();
            plain.extend_from_slice(value);
            plain.extend_from_slice(b"@tail");
            for engine in [
                &base64::engine::general_purpose::STANDARD,
                &base64::engine::general_purpose::URL_SAFE,
            ] {
                let encoded = engine.encode(&plain);
                let echoed = format!("Authorization: Basic {encoded}");
                let out = String::from_utf8(r.redact(echoed.as_bytes())).unwrap();
                assert!(out.contains("<secret:tok>"), "{echoed} -> {out}");
                // What is left of the encoding beside the marker cannot be
                // decoded back into more than a few bytes of the value.
                let left = out.replace("<secret:tok>", "");
                assert!(left.len() <= echoed.len() - 24, "{echoed} -> {out}");
            }
        }
        // A short value has no base64 form: four characters would match
        // unrelated encoded text.
        let r = Redactor::new(vec![("pin".into(), b"1234".to_vec())]);
        assert_eq!(r.redact(b"MTIzNA=="), b"MTIzNA==");
    }

    #[test]
    fn the_longest_value_wins_across_a_chunk_boundary() {
        let mut r = Redactor::new(vec![
            ("short".into(), b"abc".to_vec()),
            ("long".into(), b"abcdef".to_vec()),
        ]);
        let mut out = Vec::new();
        for chunk in [&b"xx abc"[..], b"def abc", b" ab", b"cd"] {
            out.extend(r.push(chunk));
        }
        out.extend(r.finish());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "xx <secret:long> <secret:short> <secret:short>d"
        );
    }

    #[test]
    fn patterns_are_built_once_per_list_of_values_and_again_after_a_rotation() {
        let secrets = Secrets::default();
        let values = |v: &str| {
            vec![
                ("tok".to_string(), v.as_bytes().to_vec()),
                ("other".to_string(), b"0ther-value".to_vec()),
            ]
        };
        let first = secrets.redactor(values("s3cr3t-one"));
        let again = secrets.redactor(values("s3cr3t-one"));
        assert!(Arc::ptr_eq(&first.patterns, &again.patterns), "built twice");
        let rotated = secrets.redactor(values("s3cr3t-two"));
        assert!(!Arc::ptr_eq(&first.patterns, &rotated.patterns));
        assert_eq!(
            rotated.redact(b"s3cr3t-one s3cr3t-two 0ther-value"),
            b"s3cr3t-one <secret:tok> <secret:other>"
        );
        // The lists used lately stay built; the oldest go past eight.
        let back = secrets.redactor(values("s3cr3t-one"));
        assert!(Arc::ptr_eq(&first.patterns, &back.patterns));
        for i in 0..8 {
            secrets.redactor(values(&format!("value-{i}")));
        }
        let rebuilt = secrets.redactor(values("s3cr3t-one"));
        assert!(!Arc::ptr_eq(&first.patterns, &rebuilt.patterns));
    }

    #[tokio::test]
    async fn reveal_needs_the_entry_to_say_so_and_a_file_is_read_at_each_use() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "one\n").unwrap();
        let yaml = format!(
            "[{{name: shown, file: {p}, hosts: ['https://x'], reveal: true}}, {{name: hidden, file: {p}, hosts: ['https://x']}}]",
            p = path.display()
        );
        let secrets = Secrets::new(serde_norway::from_str(&yaml).unwrap(), None).unwrap();
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        assert_eq!(secrets.reveal("shown", deadline).await.unwrap(), b"one");
        std::fs::write(&path, "two").unwrap();
        assert_eq!(secrets.reveal("shown", deadline).await.unwrap(), b"two");
        let refused = secrets.reveal("hidden", deadline).await.unwrap_err();
        assert_eq!(refused.reason(), "reveal");
        assert!(matches!(&refused, RevealRefusal::Forbidden(m) if m.contains("reveal: true")));
        let unknown = secrets.reveal("nope", deadline).await.unwrap_err();
        assert!(matches!(&unknown, RevealRefusal::Unknown(m) if m.contains("shown, hidden")));
        std::fs::write(&path, "").unwrap();
        let empty = secrets.reveal("shown", deadline).await.unwrap_err();
        assert!(matches!(&empty, RevealRefusal::Unavailable(m) if m.contains("empty")));
    }

    #[test]
    fn two_entries_of_one_name_are_refused() {
        let yaml =
            "[{name: a, env: A, hosts: ['https://x']}, {name: a, env: B, hosts: ['https://y']}]";
        let e = Secrets::new(serde_norway::from_str(yaml).unwrap(), None).unwrap_err();
        assert!(
            e.contains("secrets[1]") && e.contains("second secret"),
            "{e}"
        );
    }
}
