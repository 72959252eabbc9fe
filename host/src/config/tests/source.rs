//! A plugin's `source`: file, URL pinned by digest, OCI reference.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{FetchLimits, HostConfig, OciSourceSpec, SourceSpec, UrlSourceSpec};

const HEX: &str = "3b1fd6b9c0e7a4a1c1b8d0c3c3b9e7c7a0f3f5d6c1b2a3f4e5d6c7b8a9f0e1d2";

fn parse(source: &str) -> Result<HostConfig, String> {
    let text = format!(
        "apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\nplugins:\n  - name: p\n    source: {source}\n"
    );
    HostConfig::parse(Path::new("/etc/w/w.yaml"), &text, PathBuf::from("/etc/w"))
        .map_err(|e| e.to_string())
}

fn spec(source: &str) -> SourceSpec {
    parse(source).unwrap().plugins[0].source()
}

/// The error for `source`, which must name `field` of plugin "p".
fn refused(source: &str, field: &str, words: &str) {
    let err = parse(source).unwrap_err();
    assert!(
        err.contains(&format!("plugins[0].{field} (plugin \"p\")")) && err.contains(words),
        "{source}: {err}"
    );
}

#[test]
fn a_url_source_is_pinned_by_its_sha256() {
    let s = spec(&format!(
        "{{ url: \"https://example.com/p.wasm?x=1\", sha256: {} }}",
        HEX.to_uppercase()
    ));
    assert_eq!(
        s,
        SourceSpec::Url(UrlSourceSpec {
            url: "https://example.com/p.wasm?x=1".into(),
            digest: format!("sha256:{HEX}"),
            limits: FetchLimits::default(),
        })
    );
    refused(
        "{ url: \"https://example.com/p.wasm\" }",
        "source.sha256",
        "is required",
    );
    refused(
        "{ url: \"https://example.com/p.wasm\", sha256: abc }",
        "source.sha256",
        "64 hexadecimal digits",
    );
    refused(
        &format!(
            "{{ url: \"https://example.com/p.wasm\", sha256: {}x }}",
            &HEX[1..]
        ),
        "source.sha256",
        "64 hexadecimal digits",
    );
}

#[test]
fn a_url_is_https_or_loopback_http_with_insecure() {
    let sha = format!("sha256: {HEX}");
    refused(
        &format!("{{ url: \"http://example.com/p.wasm\", {sha} }}"),
        "source.url",
        "must be https://",
    );
    refused(
        &format!("{{ url: \"http://example.com/p.wasm\", insecure: true, {sha} }}"),
        "source.url",
        "only to a loopback address",
    );
    refused(
        &format!("{{ url: \"https://example.com/p.wasm\", insecure: true, {sha} }}"),
        "source.insecure",
        "only applies to http://",
    );
    refused(
        &format!("{{ url: \"ftp://example.com/p.wasm\", {sha} }}"),
        "source.url",
        "must be https://, not ftp://",
    );
    refused(
        &format!("{{ url: \"https://u:pw@example.com/p.wasm\", {sha} }}"),
        "source.url",
        "credentials",
    );
    refused(
        &format!("{{ url: \"https://example.com/p.wasm#sha256={HEX}\", {sha} }}"),
        "source.url",
        "fragment",
    );
    refused(
        &format!("{{ url: \"not a url\", {sha} }}"),
        "source.url",
        "not a url",
    );
    for host in ["127.0.0.1:8080", "localhost", "[::1]:9"] {
        let s = spec(&format!(
            "{{ url: \"http://{host}/p.wasm\", insecure: true, {sha} }}"
        ));
        assert!(matches!(s, SourceSpec::Url(_)), "{host}");
    }
}

#[test]
fn an_oci_source_is_a_tag_or_a_digest() {
    let s = spec(
        "{ oci: \"ghcr.io/acme/plugin:1.2\", pollInterval: 30s, insecure: true, dockerConfig: auth.json, maxSize: 16Mi, timeout: 1m }",
    );
    assert_eq!(
        s,
        SourceSpec::Oci(OciSourceSpec {
            reference: "ghcr.io/acme/plugin:1.2".into(),
            poll_interval: Some(Duration::from_secs(30)),
            insecure: true,
            docker_config: Some("auth.json".into()),
            limits: FetchLimits {
                max_size: 16 << 20,
                timeout: Duration::from_secs(60),
            },
        })
    );
    let pinned = spec(&format!("{{ oci: \"127.0.0.1:5000/p@sha256:{HEX}\" }}"));
    assert!(matches!(
        pinned,
        SourceSpec::Oci(OciSourceSpec {
            poll_interval: None,
            ..
        })
    ));
    refused(
        &format!("{{ oci: \"127.0.0.1:5000/p@sha256:{HEX}\", pollInterval: 1m }}"),
        "source.pollInterval",
        "pinned by digest",
    );
    refused(
        "{ oci: \"ghcr.io/acme/plugin\" }",
        "source.oci",
        "names no tag or digest",
    );
    refused(
        "{ oci: \"ghcr.io/Acme/plugin:1\" }",
        "source.oci",
        "not an OCI reference",
    );
    refused(
        "{ oci: \"oci://ghcr.io/acme/p:1\" }",
        "source.oci",
        "without a scheme",
    );
    refused(
        "{ oci: \"ghcr.io/acme/p@sha256:abc\" }",
        "source.oci",
        "not an OCI reference",
    );
    refused(
        &format!(
            "{{ oci: \"ghcr.io/acme/p@sha256:{}\" }}",
            HEX.to_uppercase()
        ),
        "source.oci",
        "lowercase",
    );
    refused(
        "{ oci: \"ghcr.io/acme/p:1\", pollInterval: 10ms }",
        "source.pollInterval",
        "between 1s",
    );
    refused(
        "{ oci: \"ghcr.io/acme/p:1\", maxSize: 8Gi }",
        "source.maxSize",
        "between 1Ki and 4Gi",
    );
    refused(
        "{ oci: \"ghcr.io/acme/p:1\", timeout: 2h }",
        "source.timeout",
        "between 1s and 1h",
    );
    refused(
        &format!("{{ oci: \"ghcr.io/acme/p:1\", sha256: {HEX} }}"),
        "source.sha256",
        "only applies to url",
    );
    refused(
        "{ oci: \"ghcr.io/acme/p:1\", imagePullSecret: regcred, dockerConfig: a.json }",
        "source.imagePullSecret",
        "not both",
    );
    refused(
        "{ oci: \"ghcr.io/acme/p:1\", imagePullSecret: Not_A_Name }",
        "source.imagePullSecret",
        "imagePullSecret",
    );
    refused(
        "{ file: a.wasm, imagePullSecret: regcred }",
        "source.imagePullSecret",
        "only applies to oci",
    );
}

#[test]
fn exactly_one_kind_of_source() {
    refused("{ }", "source", "needs one of file, url and oci");
    refused(
        "{ file: a.wasm, oci: \"ghcr.io/acme/p:1\" }",
        "source",
        "exactly one of file, url and oci",
    );
    refused(
        "{ file: a.wasm, pollInterval: 1m }",
        "source.pollInterval",
        "only applies to oci",
    );
    refused(
        "{ file: a.wasm, insecure: true }",
        "source.insecure",
        "only applies to url and oci",
    );
    assert_eq!(spec("{ file: a.wasm }"), SourceSpec::File("a.wasm".into()));
}

#[test]
fn downloads_are_cached_under_the_runtime_cache_dir_or_next_to_the_config() {
    let c = parse("{ file: a.wasm }").unwrap();
    assert_eq!(
        c.source_cache_dir(),
        Path::new("/etc/w/.wasmctrl/cache/sources")
    );
    let text = "apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\nruntime: { cacheDir: /var/cache/w }\n";
    let c = HostConfig::parse(Path::new("/etc/w/w.yaml"), text, PathBuf::from("/etc/w")).unwrap();
    assert_eq!(c.source_cache_dir(), Path::new("/var/cache/w/sources"));
}
