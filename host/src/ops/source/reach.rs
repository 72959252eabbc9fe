//! Where a plugin's source may connect: [`Reach`], from the host config
//! (`pluginsFrom.allowHosts` for WasmReconciler objects). The sources
//! apply it to every address they connect to (`http.rs`); an object's
//! source is checked for what can be checked before connecting
//! ([`Reach::check_source`]).

use std::net::IpAddr;
use std::sync::Arc;

use crate::config::{PluginsFrom, SourceConfig, SourceProblem};

/// Where a source may connect. A source the host's own config names may
/// reach any address its URL or registry names (the operator wrote it). A
/// source a WasmReconciler object names is written by whoever may create
/// such objects, and the host fetches it with the host's network position:
/// it reaches only public addresses, so it cannot probe the admin endpoint,
/// the cloud metadata service or the cluster's internal services, except
/// for the hosts the host config allows by name.
#[derive(Debug, Clone, Default)]
pub enum Reach {
    #[default]
    Anywhere,
    /// Only public addresses; `allowed` hosts (`host` or `host:port`, as
    /// in the URL or reference) may be internal.
    Public { allowed: Arc<[String]> },
}

impl Reach {
    /// Only public addresses, besides the `allowed` hosts.
    pub fn public(allowed: impl IntoIterator<Item = String>) -> Self {
        Reach::Public {
            allowed: allowed.into_iter().collect(),
        }
    }

    /// Where the sources of WasmReconciler objects may connect: public
    /// addresses, and the hosts `pluginsFrom.allowHosts` names.
    pub fn for_objects(from: &PluginsFrom) -> Self {
        Self::public(from.allow_hosts.iter().cloned())
    }

    /// Whether `url`'s host may be connected to without an address check.
    pub(crate) fn allows(&self, url: &reqwest::Url) -> bool {
        match self {
            Reach::Anywhere => true,
            Reach::Public { allowed } => {
                let host = url.host_str().unwrap_or_default();
                // `host:443` names an https URL that leaves its port out.
                let with_port = url
                    .port_or_known_default()
                    .map(|p| format!("{host}:{p}"))
                    .unwrap_or_default();
                allowed
                    .iter()
                    .any(|a| a.eq_ignore_ascii_case(host) || a.eq_ignore_ascii_case(&with_port))
            }
        }
    }

    /// Whether an allowed entry names `host` with a port (the URL's port,
    /// checked by [`Reach::allows`], is then another one).
    fn names_with_another_port(&self, host: &str) -> bool {
        match self {
            Reach::Anywhere => false,
            Reach::Public { allowed } => allowed.iter().any(|a| {
                a.rsplit_once(':')
                    .is_some_and(|(h, _)| h.eq_ignore_ascii_case(host))
            }),
        }
    }

    /// Refuses `url` when it names an internal address literally (a name is
    /// checked when it resolves, by the source's resolver).
    pub(crate) fn check(&self, url: &reqwest::Url) -> Result<(), String> {
        if self.allows(url) {
            return Ok(());
        }
        let host = url.host_str().unwrap_or_default();
        let allow = match url.port_or_known_default() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        let ip = match url.host() {
            Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
            Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
            Some(url::Host::Domain(d)) if d.eq_ignore_ascii_case("localhost") => {
                return Err(internal(d, None, &allow));
            }
            // The resolver sees names, not ports: an entry `name:port`
            // lets `name` resolve to an internal address, so another port
            // of that name is refused here.
            Some(url::Host::Domain(d)) if self.names_with_another_port(d) => {
                return Err(internal(d, None, &allow));
            }
            _ => return Ok(()),
        };
        if is_internal(ip) {
            return Err(internal(host, Some(ip), &allow));
        }
        Ok(())
    }

    /// Refuses a `url` or `oci` source that names an internal address
    /// literally (`127.0.0.1`, `[::1]`, `localhost`, `10.…`, `169.254.…`)
    /// where this allows only public ones: the check a WasmReconciler
    /// object's source gets when it is read. A host name is checked again
    /// when the source connects, since only then is it resolved.
    pub fn check_source(&self, source: &SourceConfig) -> Result<(), SourceProblem> {
        let refused = |field: &'static str, message: String| SourceProblem { field, message };
        if let Some(url) = &source.url
            && let Ok(parsed) = reqwest::Url::parse(url)
        {
            self.check(&parsed).map_err(|m| refused("url", m))?;
        }
        if let Some(reference) = &source.oci
            && let Ok(parsed) = oci_client::Reference::try_from(reference.as_str())
            && let Ok(url) = reqwest::Url::parse(&format!("https://{}/", parsed.resolve_registry()))
        {
            self.check(&url).map_err(|m| refused("oci", m))?;
        }
        Ok(())
    }
}

/// The refusal of `host` (at `ip`), saying how the host config allows it:
/// `allow`, the entry `pluginsFrom.allowHosts` would need.
pub(crate) fn internal(host: &str, ip: Option<IpAddr>, allow: &str) -> String {
    let at = match ip {
        Some(ip) if ip.to_string() != host.trim_matches(['[', ']']) => format!(" ({ip})"),
        _ => String::new(),
    };
    format!(
        "refusing to connect to {host}{at}: a WasmReconciler object's source may reach only public addresses (not loopback, link-local, private or shared ones); the host config allows an internal host by naming it in pluginsFrom.allowHosts (here {allow:?})"
    )
}

/// Whether a source of a WasmReconciler object must not reach `ip` (the
/// addresses a plugin's outbound requests are held from too).
pub use crate::meta::address::is_internal;

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::config::HostConfig;

    #[test]
    fn internal_addresses() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["1.1.1.1", "8.8.8.8", "2606:4700::1111", "172.32.0.1"] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn an_allowed_name_with_a_port_is_allowed_on_that_port_only() {
        let url = |u: &str| reqwest::Url::parse(u).unwrap();
        let reach = Reach::public(["registry.internal:5000".to_string()]);
        reach
            .check(&url("https://registry.internal:5000/v2/"))
            .unwrap();
        let e = reach
            .check(&url("https://registry.internal:6000/v2/"))
            .unwrap_err();
        assert!(e.contains("registry.internal:6000"), "{e}");
        reach.check(&url("https://ghcr.io/v2/")).unwrap();
        let any_port = Reach::public(["registry.internal".to_string()]);
        any_port
            .check(&url("https://registry.internal:6000/v2/"))
            .unwrap();
    }

    #[test]
    fn an_objects_source_naming_an_internal_address_is_refused() {
        let source = |yaml: &str| -> SourceConfig { serde_norway::from_str(yaml).unwrap() };
        let objects = Reach::public([]);
        for (yaml, field) in [
            (
                "{url: 'http://127.0.0.1:9090/plugins', sha256: x, insecure: true}",
                "url",
            ),
            ("{url: 'https://169.254.169.254/c', sha256: x}", "url"),
            ("{url: 'https://[::1]/c', sha256: x}", "url"),
            ("{oci: '127.0.0.1:5000/p/stamp:1'}", "oci"),
            ("{oci: 'localhost:5000/p/stamp:1'}", "oci"),
            ("{oci: '10.0.0.7/p/stamp:1'}", "oci"),
        ] {
            let p = objects.check_source(&source(yaml)).unwrap_err();
            assert_eq!(p.field, field, "{yaml}");
            assert!(p.message.contains("public addresses"), "{yaml}: {p:?}");
            assert!(
                Reach::Anywhere.check_source(&source(yaml)).is_ok(),
                "{yaml}"
            );
        }
        for yaml in [
            "{oci: 'ghcr.io/acme/stamp:1'}",
            "{url: 'https://example.com/c', sha256: x}",
        ] {
            assert!(objects.check_source(&source(yaml)).is_ok(), "{yaml}");
        }
        let allowed = Reach::public(["127.0.0.1:5000".to_string()]);
        assert!(
            allowed
                .check_source(&source("{oci: '127.0.0.1:5000/p/stamp:1'}"))
                .is_ok()
        );
    }

    #[test]
    fn objects_reach_the_hosts_plugins_from_allows() {
        let text = "apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\npluginsFrom: { kind: WasmReconciler, allowHosts: [\"registry.internal:5000\", 10.0.0.7, \"[fd00::7]:443\", \"[::1]\"] }\n";
        let c = HostConfig::parse(Path::new("w.yaml"), text, PathBuf::from("/")).unwrap();
        let reach = Reach::for_objects(&c.plugins_from.unwrap());
        let url = |u: &str| reqwest::Url::parse(u).unwrap();
        assert!(reach.check(&url("https://10.0.0.7:8443/v2/")).is_ok());
        assert!(reach.check(&url("https://[fd00::7]/v2/")).is_ok());
        assert!(reach.check(&url("https://[fd00::7]:444/v2/")).is_err());
        assert!(reach.check(&url("https://10.0.0.8/v2/")).is_err());
    }
}
