//! A request's destination as the host checks and sends it: the guest's
//! URL normalized once, so the address checked is the address connected
//! to and the path checked is the path sent.

use std::net::IpAddr;

use super::rule::{RequestHost, default_port, unmap};
use super::{DenyReason, Refusal, cut_url};

/// Where a request goes, normalized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// `http` or `https`.
    pub scheme: String,
    pub host: RequestHost,
    pub port: u16,
    /// The path, dot segments resolved, without the query.
    pub path: String,
    /// The path with the query: what the request line carries.
    pub path_and_query: String,
    /// `host[:port]` as the `Host` header carries it (the port only when
    /// it is not the scheme's).
    pub authority: String,
    /// The URL as normalized, cut short: what refusals and logs name.
    pub shown: String,
}

fn refused(message: String) -> Refusal {
    Refusal {
        reason: DenyReason::Url,
        message,
    }
}

impl Destination {
    /// The destination of a guest's request: its URI normalized by the
    /// WHATWG URL rules, refused if it carries a user or password, or if a
    /// `Host` header names another host than the URL.
    pub fn of<B>(request: &http::Request<B>) -> Result<Self, Refusal> {
        let uri = request.uri();
        let written = cut_url(&uri.to_string());
        let scheme = uri.scheme_str().unwrap_or("https").to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(refused(format!(
                "{written}: only http and https are supported"
            )));
        }
        let Some(authority) = uri.authority() else {
            return Err(refused(format!("{written}: the URL names no host")));
        };
        if authority.as_str().contains('@') {
            return Err(refused(format!(
                "{written}: a URL with a user or password (userinfo) is refused; credentials go in a header"
            )));
        }
        let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str());
        let parsed = url::Url::parse(&format!(
            "{scheme}://{}{path_and_query}",
            authority.as_str()
        ))
        .map_err(|e| refused(format!("{written}: the URL does not parse: {e}")))?;
        let host = match parsed.host() {
            Some(url::Host::Domain(d)) => {
                RequestHost::Name(d.trim_end_matches('.').to_ascii_lowercase())
            }
            Some(url::Host::Ipv4(ip)) => RequestHost::Ip(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => RequestHost::Ip(unmap(IpAddr::V6(ip))),
            None => return Err(refused(format!("{written}: the URL names no host"))),
        };
        if matches!(&host, RequestHost::Name(n) if n.is_empty()) {
            return Err(refused(format!("{written}: the URL names no host")));
        }
        let port = parsed.port().unwrap_or_else(|| default_port(&scheme));
        let authority = if port == default_port(&scheme) {
            host.to_string()
        } else {
            format!("{host}:{port}")
        };
        let path = parsed.path().to_string();
        if let Some(segment) = hidden_dot_segment(&path) {
            return Err(refused(format!(
                "{written}: the path segment {:?} decodes to a dot segment (through an encoded `/` or `\\`, or a `;`) that a server could resolve outside the path checked",
                cut_url(segment)
            )));
        }
        let path_and_query = match parsed.query() {
            Some(q) => format!("{path}?{q}"),
            None => path.clone(),
        };
        let shown = cut_url(&format!("{scheme}://{authority}{path}"));
        let dest = Destination {
            scheme,
            host,
            port,
            path,
            path_and_query,
            authority,
            shown,
        };
        dest.check_host_headers(request.headers())?;
        Ok(dest)
    }

    /// The whole URL as normalized: what a transcript records and a
    /// replay matches.
    pub fn url(&self) -> String {
        format!(
            "{}://{}{}",
            self.scheme, self.authority, self.path_and_query
        )
    }

    /// Every `Host` header must name this destination (wasmtime sets one
    /// from the URL; a guest's own is forbidden, but a second one would
    /// let a server route by another name than the one checked).
    fn check_host_headers(&self, headers: &http::HeaderMap) -> Result<(), Refusal> {
        for value in headers.get_all(http::header::HOST) {
            let agrees = value.to_str().ok().is_some_and(|v| {
                let Ok(u) = url::Url::parse(&format!("{}://{v}/", self.scheme)) else {
                    return false;
                };
                let port = u.port().unwrap_or_else(|| default_port(&self.scheme));
                let host = match u.host() {
                    Some(url::Host::Domain(d)) => {
                        RequestHost::Name(d.trim_end_matches('.').to_ascii_lowercase())
                    }
                    Some(url::Host::Ipv4(ip)) => RequestHost::Ip(IpAddr::V4(ip)),
                    Some(url::Host::Ipv6(ip)) => RequestHost::Ip(unmap(IpAddr::V6(ip))),
                    None => return false,
                };
                host == self.host && port == self.port
            });
            if !agrees {
                return Err(refused(format!(
                    "{}: a Host header ({:?}) disagrees with the URL",
                    self.shown,
                    cut_url(&String::from_utf8_lossy(value.as_bytes()))
                )));
            }
        }
        Ok(())
    }
}

/// The first segment of `path` that a server decoding `%2F` or `%5C`, or
/// dropping a `;` parameter (`..;` in servlet containers), would read as
/// `.` or `..`: the URL parser resolved the dot segments it could see, but
/// not these.
fn hidden_dot_segment(path: &str) -> Option<&str> {
    path.split('/').find(|segment| {
        let decoded = percent_encoding::percent_decode_str(segment).decode_utf8_lossy();
        decoded.split(['/', '\\']).any(|piece| {
            let piece = piece.split(';').next().unwrap_or_default();
            piece == "." || piece == ".."
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(uri: &str) -> Result<Destination, Refusal> {
        Destination::of(&http::Request::get(uri).body(()).unwrap())
    }

    #[test]
    fn every_written_form_of_loopback_is_the_loopback_address() {
        let loopback = RequestHost::Ip("127.0.0.1".parse().unwrap());
        for uri in [
            "http://127.0.0.1:8080/x",
            "http://2130706433:8080/x",
            "http://0177.0.0.1:8080/x",
            "http://0x7f.1:8080/x",
            "http://[::ffff:127.0.0.1]:8080/x",
        ] {
            let d = dest(uri).unwrap();
            assert_eq!(d.host, loopback, "{uri}");
            assert_eq!(d.authority, "127.0.0.1:8080", "{uri}");
        }
    }

    #[test]
    fn userinfo_is_refused_and_dot_segments_are_resolved() {
        let e = dest("http://allowed.test@evil.test/").unwrap_err();
        assert_eq!(e.reason, DenyReason::Url);
        assert!(e.message.contains("userinfo"), "{e}");
        let d = dest("https://API.Example.com./v1/../admin/%2e%2e/x?q=1").unwrap();
        assert_eq!(d.host, RequestHost::Name("api.example.com".into()));
        assert_eq!(
            (d.path.as_str(), d.path_and_query.as_str()),
            ("/x", "/x?q=1")
        );
        assert_eq!(d.port, 443);
    }

    #[test]
    fn a_dot_segment_hidden_by_an_encoded_slash_or_a_parameter_is_refused() {
        for uri in [
            "http://api.test/api/..%2Fadmin",
            "http://api.test/api/..%2fadmin",
            "http://api.test/api/..%5Cadmin",
            "http://api.test/api/.%2E%2Fadmin",
            "http://api.test/api/..;/admin",
            "http://api.test/api/x%2F..%2F..%2Fadmin",
        ] {
            let e = dest(uri).unwrap_err();
            assert_eq!(e.reason, DenyReason::Url, "{uri}");
            assert!(e.message.contains("decodes to a dot segment"), "{uri}: {e}");
        }
        // An encoded slash inside a name is a name (GitLab's project paths).
        let d = dest("https://gitlab.test/api/v4/projects/group%2Fproject").unwrap();
        assert_eq!(d.path, "/api/v4/projects/group%2Fproject");
        assert!(dest("https://api.test/a/.../b;v=1").is_ok());
    }

    #[test]
    fn a_host_header_must_agree_with_the_url() {
        let request = |host: &str| {
            http::Request::get("http://api.example.com:8080/")
                .header("host", host)
                .body(())
                .unwrap()
        };
        assert!(Destination::of(&request("api.example.com:8080")).is_ok());
        assert!(Destination::of(&request("API.example.com:8080")).is_ok());
        for bad in ["evil.test", "api.example.com", "127.0.0.1:8080"] {
            let e = Destination::of(&request(bad)).unwrap_err();
            assert!(e.message.contains("Host header"), "{bad}: {e}");
        }
    }
}
