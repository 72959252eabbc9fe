//! `webhook`: the HTTPS server that answers the API server's admission
//! reviews for plugins that serve webhooks, and how the API server reaches
//! it; and a plugin's `admission` settings.
//!
//! ```yaml
//! webhook:
//!   bind: "0.0.0.0:9443"
//!   certDir: /certs                  # tls.crt, tls.key (and ca.crt): cert-manager's Secret
//!   clientCAFile: /etc/kubernetes/admission-client-ca.crt   # only callers this CA signed
//!   service: { namespace: wasmctrl, name: wasmctrl-webhook }   # or url: https://host:port
//!   reapplyInterval: 10m             # put back configurations deleted or edited by others
//! plugins:
//!   - name: webapp
//!     admission: { mode: monitor }   # allow everything, record what would be denied
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::error::FieldProblem;
use super::units::duration;
use crate::meta::syntax as validate;

/// The `webhook` section.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookSection {
    /// Where the HTTPS server listens (port 0: any free port).
    pub bind: SocketAddr,
    /// A directory holding `tls.crt` and `tls.key`, and `ca.crt` for the
    /// `caBundle` (a cert-manager Secret, mounted); re-read when they
    /// change. None: the host keeps its own CA and serving certificate,
    /// and rotates the certificate before it expires.
    #[serde(default)]
    pub cert_dir: Option<PathBuf>,
    /// The base URL the API server calls (`https://host:port`). None, and
    /// no `service`: `https://` and the bound address (a wildcard bind as
    /// 127.0.0.1).
    #[serde(default)]
    pub url: Option<String>,
    /// The Service in front of the host that the API server calls.
    #[serde(default)]
    pub service: Option<ServiceReference>,
    /// Without `certDir`: keep the host's CA in this Secret, so that every
    /// replica behind `service` signs with the same CA and the one
    /// `caBundle` registered verifies them all. The Secret must exist
    /// (empty at first); the first replica stores its CA there.
    #[serde(default)]
    pub ca_secret: Option<SecretReference>,
    /// A PEM file of the CAs whose client certificates the server requires
    /// (mutual TLS): the API server's admission client identity. A caller
    /// without such a certificate is refused during the handshake. None:
    /// any caller that reaches the port (`wasmctrl dev` requires the
    /// embedded API server's certificate unless this is set).
    #[serde(default, rename = "clientCAFile")]
    pub client_ca_file: Option<PathBuf>,
    /// Create and update the Validating- and MutatingWebhookConfigurations
    /// of the plugins' webhooks (default true). Off, they are registered
    /// by hand (`wasmctrl rbac` still lists the permissions it would need).
    #[serde(default = "yes")]
    pub register: bool,
    /// With `register`: how often every configuration is applied again
    /// though nothing changed, so that one deleted or edited by someone
    /// else is put back (an apply that changes nothing writes nothing).
    #[serde(default = "reapply_interval", deserialize_with = "duration")]
    pub reapply_interval: Duration,
}

/// A deleted configuration leaves the plugin's reviews unasked for at
/// most this long; re-applying a thousand plugins' configurations every
/// ten minutes is about three requests a second.
fn reapply_interval() -> Duration {
    Duration::from_secs(600)
}

/// The shortest `reapplyInterval`: each one writes to the API server once
/// per configuration.
const MIN_REAPPLY_INTERVAL: Duration = Duration::from_secs(1);

fn yes() -> bool {
    true
}

/// A Service the API server reaches the webhook server through.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServiceReference {
    pub namespace: String,
    pub name: String,
    #[serde(default = "https_port")]
    pub port: u16,
}

fn https_port() -> u16 {
    443
}

/// A Secret by namespace and name.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecretReference {
    pub namespace: String,
    pub name: String,
}

impl WebhookSection {
    pub(super) fn check(&self) -> Result<(), FieldProblem> {
        if self.url.is_some() && self.service.is_some() {
            return Err(FieldProblem::new(
                "webhook.url",
                "give url or service, not both",
            ));
        }
        if self.cert_dir.is_some() && self.ca_secret.is_some() {
            return Err(FieldProblem::new(
                "webhook.caSecret",
                "a mounted certificate (certDir) brings its own CA; give one or the other",
            ));
        }
        if let Some(s) = &self.ca_secret {
            validate::namespace(&s.namespace)
                .map_err(|e| FieldProblem::new("webhook.caSecret.namespace", e.to_string()))?;
            validate::dns_subdomain("name", &s.name)
                .map_err(|e| FieldProblem::new("webhook.caSecret.name", e.to_string()))?;
        }
        if self.reapply_interval < MIN_REAPPLY_INTERVAL {
            return Err(FieldProblem::new(
                "webhook.reapplyInterval",
                format!(
                    "{:?} is shorter than {MIN_REAPPLY_INTERVAL:?}: each one applies every plugin's configurations",
                    self.reapply_interval
                ),
            ));
        }
        if let Some(url) = &self.url {
            check_url(url).map_err(|m| FieldProblem::new("webhook.url", m))?;
        }
        if let Some(s) = &self.service {
            validate::namespace(&s.namespace)
                .map_err(|e| FieldProblem::new("webhook.service.namespace", e.to_string()))?;
            validate::dns_subdomain("name", &s.name)
                .map_err(|e| FieldProblem::new("webhook.service.name", e.to_string()))?;
        }
        Ok(())
    }
}

/// A webhook URL as admissionregistration.k8s.io/v1 accepts it: https,
/// a host, no user info, query or fragment.
fn check_url(text: &str) -> Result<(), String> {
    let url = url::Url::parse(text).map_err(|e| format!("{text:?} is not a URL: {e}"))?;
    if url.scheme() != "https" {
        return Err(format!(
            "{text:?}: the API server calls webhooks over https only"
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{text:?} names no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!("{text:?}: user info is not allowed"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("{text:?}: a query or fragment is not allowed"));
    }
    Ok(())
}

/// A plugin's `admission` settings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AdmissionConfig {
    #[serde(default)]
    pub mode: AdmissionMode,
}

/// What the host does with a plugin's verdicts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AdmissionMode {
    /// Verdicts are answered as given (the default).
    #[default]
    Protect,
    /// Every request is allowed; a denial the plugin would have made is
    /// recorded in metrics, in the log and as an audit annotation, so a
    /// new policy can be watched before it is enforced.
    Monitor,
}

impl AdmissionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AdmissionMode::Protect => "protect",
            AdmissionMode::Monitor => "monitor",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_webhook_url_must_be_https_with_a_host_and_nothing_else() {
        assert!(check_url("https://127.0.0.1:9443").is_ok());
        for (bad, says) in [
            ("http://127.0.0.1:9443", "https only"),
            ("https://u:p@host", "user info"),
            ("https://host/?a=b", "query"),
            ("not a url", "is not a URL"),
        ] {
            let e = check_url(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
