//! `runtime.caBundle`: outbound HTTPS trusts the platform's roots, and a
//! bundle's certificates besides them. The server is the embedded API
//! server, whose certificate comes from its own CA: unknown to the
//! platform, known once its CA is in the bundle.

use serde_json::json;
use wasmctrl::sandbox::outbound::{OutboundGrant, OutboundLimits, tls_config};
use wasmctrl::{Action, ReconcileError};
use wasmctrl_apiserver::{ApiServer, Config};

use super::{plugin, rule, run};
use crate::{TIMEOUT, runtime};

fn grant(port: u16) -> OutboundGrant {
    OutboundGrant::new(
        vec![rule(&format!("https://127.0.0.1:{port}"), &["GET"], false)],
        OutboundLimits::default(),
    )
    .unwrap()
}

#[tokio::test]
async fn https_trusts_the_ca_bundle_besides_the_platform_roots() {
    let server = ApiServer::start(Config::default()).await.unwrap();
    let port = server.addr().port();
    let rt = runtime();
    // Without a token the server answers 401: any answer proves the
    // handshake.
    let cases = json!({
        "version": { "url": format!("https://127.0.0.1:{port}/version"), "expect": 401 }
    });

    let untrusted = plugin(&rt, cases.clone(), grant(port)).await;
    match run(&untrusted, "version", TIMEOUT).await {
        Err(ReconcileError::Transient(m)) => {
            assert!(m.to_lowercase().contains("tls"), "{m}")
        }
        other => panic!("an unknown CA must fail the handshake, got {other:?}"),
    }

    let tls = tls_config(Some(server.ca_pem().as_bytes())).unwrap();
    let trusted = plugin(&rt, cases, grant(port).with_tls(tls)).await;
    assert_eq!(run(&trusted, "version", TIMEOUT).await, Ok(Action::done()));
    server.shutdown().await;
}

#[test]
fn a_bundle_without_certificates_or_past_its_ceiling_is_refused_naming_why() {
    let e = tls_config(Some(b"not a certificate")).unwrap_err();
    assert!(e.contains("no PEM certificate"), "{e}");
    let e = tls_config(Some(&vec![b'a'; (1 << 20) + 1])).unwrap_err();
    assert!(e.contains("past the ceiling"), "{e}");
}
