//! An outbound rule: `scheme://host[:port][/path-prefix]` with optional
//! methods, as the host config grants it and as a component declares it,
//! and what it allows.

use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// The longest rule URL and the most methods of one rule.
const MAX_URL: usize = 2048;
const MAX_METHODS: usize = 16;

/// One entry of a plugin's `outbound` grant (or of its declaration).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OutboundRule {
    /// `scheme://host[:port][/path-prefix]`; `*.example.com` matches the
    /// subdomains of example.com, never example.com itself.
    pub url: String,
    /// The HTTP methods allowed (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Whether the host may connect to internal addresses (loopback,
    /// private, link-local, …) that the rule's name resolves to. A rule
    /// naming an IP literal reaches that address without it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub private: bool,
}

/// A rule's URL, parsed and normalized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `http` or `https`.
    pub scheme: String,
    pub host: HostPattern,
    pub port: u16,
    /// The path prefix, without a trailing `/` ("" matches every path).
    pub path: String,
}

/// Which hosts a rule names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// One DNS name, lowercase, without a trailing dot.
    Name(String),
    /// Every subdomain of this name (`*.example.com`), not the name itself.
    Subdomains(String),
    /// One IP address.
    Ip(IpAddr),
}

impl HostPattern {
    /// Whether `host` (a normalized URL host) is one this pattern names.
    pub fn matches(&self, host: &RequestHost) -> bool {
        match (self, host) {
            (HostPattern::Name(n), RequestHost::Name(h)) => n == h,
            (HostPattern::Subdomains(n), RequestHost::Name(h)) => is_subdomain(h, n),
            (HostPattern::Ip(a), RequestHost::Ip(b)) => a == b,
            _ => false,
        }
    }

    /// Whether every host `other` names, this one names too.
    fn covers(&self, other: &HostPattern) -> bool {
        match (self, other) {
            (HostPattern::Name(a), HostPattern::Name(b)) => a == b,
            (HostPattern::Subdomains(a), HostPattern::Name(b)) => is_subdomain(b, a),
            (HostPattern::Subdomains(a), HostPattern::Subdomains(b)) => {
                a == b || is_subdomain(b, a)
            }
            (HostPattern::Ip(a), HostPattern::Ip(b)) => a == b,
            _ => false,
        }
    }
}

/// Whether `host` is a strict subdomain of `parent`.
fn is_subdomain(host: &str, parent: &str) -> bool {
    host.len() > parent.len() + 1
        && host.ends_with(parent)
        && host.as_bytes()[host.len() - parent.len() - 1] == b'.'
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Name(n) => f.write_str(n),
            HostPattern::Subdomains(n) => write!(f, "*.{n}"),
            HostPattern::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            HostPattern::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// The host of a request's URL, normalized by the WHATWG URL rules: a
/// name in lowercase ASCII, or an IP address whatever form it was written
/// in (decimal `2130706433`, octal `0177.0.0.1`, hex, IPv4-mapped IPv6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestHost {
    Name(String),
    Ip(IpAddr),
}

impl fmt::Display for RequestHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestHost::Name(n) => f.write_str(n),
            RequestHost::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            RequestHost::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// The port a scheme uses when the URL names none.
pub fn default_port(scheme: &str) -> u16 {
    if scheme == "http" { 80 } else { 443 }
}

/// An IPv4-mapped IPv6 address (`::ffff:127.0.0.1`) is the IPv4 address
/// it maps: a rule naming `127.0.0.1` names it, and one naming another
/// address does not.
pub(super) fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Whether `m` is an HTTP method token (RFC 9110 `token`), uppercase as
/// the methods a rule names are compared exactly.
fn is_method(m: &str) -> bool {
    !m.is_empty()
        && m.len() <= 32
        && m.bytes().all(|b| {
            b.is_ascii_uppercase() || b.is_ascii_digit() || b"-_.!#$%&'*+^`|~".contains(&b)
        })
}

impl OutboundRule {
    /// Parses and checks the rule: `http` or `https`, a host (a DNS name,
    /// `*.` and a DNS name, or an IP literal), an optional port and path
    /// prefix, no user, query or fragment, uppercase method tokens.
    pub fn target(&self) -> Result<Target, String> {
        if self.url.len() > MAX_URL {
            return Err(format!("url is longer than {MAX_URL} bytes"));
        }
        if self.methods.len() > MAX_METHODS {
            return Err(format!("at most {MAX_METHODS} methods per rule"));
        }
        if let Some(m) = self.methods.iter().find(|m| !is_method(m)) {
            return Err(format!(
                "method {} is not an uppercase HTTP method token (GET, POST, …)",
                crate::meta::syntax::quoted(m)
            ));
        }
        let (scheme, rest) = self
            .url
            .split_once("://")
            .ok_or_else(|| format!("url {:?} must be scheme://host[:port][/path]", self.url))?;
        if scheme != "http" && scheme != "https" {
            return Err(format!("url scheme must be http or https, not {scheme:?}"));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err("url must not carry a user or password".into());
        }
        if path.contains(['?', '#']) || authority.contains(['?', '#']) {
            return Err("url must not carry a query or fragment".into());
        }
        let (wildcard, authority) = match authority.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, authority),
        };
        if authority.contains('*') {
            return Err("a wildcard is only `*.` at the start of the host".into());
        }
        let parsed = url::Url::parse(&format!("{scheme}://{authority}{path}"))
            .map_err(|e| format!("url {:?} does not parse: {e}", self.url))?;
        let port = parsed.port().unwrap_or_else(|| default_port(scheme));
        let host = match parsed.host() {
            Some(url::Host::Domain(d)) => {
                let d = d.trim_end_matches('.').to_string();
                if d.is_empty() {
                    return Err("url has no host".into());
                }
                if wildcard {
                    HostPattern::Subdomains(d)
                } else {
                    HostPattern::Name(d)
                }
            }
            Some(url::Host::Ipv4(ip)) if !wildcard => HostPattern::Ip(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) if !wildcard => HostPattern::Ip(unmap(IpAddr::V6(ip))),
            Some(_) => return Err("`*.` names subdomains of a DNS name, not of an IP".into()),
            None => return Err("url has no host".into()),
        };
        let path = parsed.path().trim_end_matches('/').to_string();
        Ok(Target {
            scheme: scheme.to_string(),
            host,
            port,
            path,
        })
    }
}

impl Target {
    /// Whether a request to `scheme://host:port/path` is one this target
    /// names. `path` is normalized (no dot segments); a prefix matches
    /// whole segments only.
    pub fn matches(&self, scheme: &str, host: &RequestHost, port: u16, path: &str) -> bool {
        self.scheme == scheme
            && self.port == port
            && self.host.matches(host)
            && path_within(path, &self.path)
    }

    /// Whether every request `other` names, this target names too.
    pub fn covers(&self, other: &Target) -> bool {
        self.scheme == other.scheme
            && self.port == other.port
            && self.host.covers(&other.host)
            && path_within(&other.path, &self.path)
    }
}

/// Whether `path` is `prefix` or below it.
fn path_within(path: &str, prefix: &str) -> bool {
    prefix.is_empty()
        || path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Whether `methods` (empty: any) allows `method`.
pub fn method_allowed(methods: &[String], method: &str) -> bool {
    methods.is_empty() || methods.iter().any(|m| m == method)
}

/// Whether the granted `grant` allows everything the declared `declared`
/// asks for: its destinations and its methods (a declaration without
/// methods asks for every method).
pub fn grant_covers(grant: (&Target, &[String]), declared: (&Target, &[String])) -> bool {
    grant.0.covers(declared.0)
        && (grant.1.is_empty()
            || (!declared.1.is_empty() && declared.1.iter().all(|m| grant.1.contains(m))))
}

impl fmt::Display for OutboundRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url)?;
        if !self.methods.is_empty() {
            write!(f, " ({})", self.methods.join(","))?;
        }
        if self.private {
            f.write_str(" private")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(url: &str, methods: &[&str]) -> OutboundRule {
        OutboundRule {
            url: url.into(),
            methods: methods.iter().map(|m| m.to_string()).collect(),
            private: false,
        }
    }

    fn name(n: &str) -> RequestHost {
        RequestHost::Name(n.into())
    }

    #[test]
    fn a_wildcard_matches_subdomains_and_never_the_apex() {
        let t = rule("https://*.example.com", &[]).target().unwrap();
        assert!(t.matches("https", &name("api.example.com"), 443, "/x"));
        assert!(t.matches("https", &name("a.b.example.com"), 443, ""));
        assert!(!t.matches("https", &name("example.com"), 443, "/"));
        assert!(!t.matches("https", &name("badexample.com"), 443, "/"));
        assert!(!t.matches("http", &name("api.example.com"), 443, "/"));
        assert!(!t.matches("https", &name("api.example.com"), 8443, "/"));
    }

    #[test]
    fn the_scheme_port_and_path_prefix_are_part_of_the_match() {
        let t = rule("http://Example.COM:8080/v1/", &["GET"])
            .target()
            .unwrap();
        assert_eq!(t.host, HostPattern::Name("example.com".into()));
        assert_eq!((t.port, t.path.as_str()), (8080, "/v1"));
        assert!(t.matches("http", &name("example.com"), 8080, "/v1"));
        assert!(t.matches("http", &name("example.com"), 8080, "/v1/zones"));
        assert!(!t.matches("http", &name("example.com"), 8080, "/v10"));
        assert!(!t.matches("https", &name("example.com"), 8080, "/v1"));
        let https = rule("https://example.com", &[]).target().unwrap();
        assert_eq!(https.port, 443);
    }

    #[test]
    fn ip_literals_are_normalized_in_rules() {
        for written in [
            "http://127.0.0.1:9",
            "http://2130706433:9",
            "http://0177.0.0.1:9",
        ] {
            let t = rule(written, &[]).target().unwrap();
            assert_eq!(
                t.host,
                HostPattern::Ip("127.0.0.1".parse().unwrap()),
                "{written}"
            );
        }
        let t = rule("http://[::1]:9", &[]).target().unwrap();
        assert_eq!(t.host, HostPattern::Ip("::1".parse().unwrap()));
    }

    #[test]
    fn malformed_rules_are_refused_saying_why() {
        for (url, methods, why) in [
            ("ftp://example.com", &[][..], "scheme"),
            ("example.com", &[], "scheme://"),
            ("https://user@example.com", &[], "user"),
            ("https://example.com/?q=1", &[], "query"),
            ("https://a.*.example.com", &[], "wildcard"),
            ("https://*.10.0.0.1", &[], "IP"),
            ("https://example.com", &["get"], "uppercase"),
            ("https://", &[], "host"),
        ] {
            let e = rule(url, methods).target().unwrap_err();
            assert!(e.contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn a_declaration_is_covered_only_by_a_grant_as_wide() {
        let t = |u: &str| rule(u, &[]).target().unwrap();
        let get = vec!["GET".to_string()];
        let any: Vec<String> = vec![];
        let wide = t("https://*.example.com");
        assert!(grant_covers(
            (&wide, &any),
            (&t("https://api.example.com/v1"), &get)
        ));
        assert!(grant_covers(
            (&wide, &any),
            (&t("https://*.eu.example.com"), &any)
        ));
        assert!(!grant_covers(
            (&wide, &any),
            (&t("https://example.com"), &get)
        ));
        assert!(!grant_covers(
            (&wide, &any),
            (&t("http://api.example.com"), &get)
        ));
        let prefix = t("https://api.example.com/v1");
        assert!(grant_covers(
            (&prefix, &get),
            (&t("https://api.example.com/v1/x"), &get)
        ));
        assert!(!grant_covers(
            (&prefix, &get),
            (&t("https://api.example.com/v2"), &get)
        ));
        assert!(!grant_covers(
            (&prefix, &get),
            (&t("https://api.example.com/v1"), &any)
        ));
        let post = vec!["POST".to_string()];
        assert!(!grant_covers(
            (&prefix, &get),
            (&t("https://api.example.com/v1"), &post)
        ));
    }
}
