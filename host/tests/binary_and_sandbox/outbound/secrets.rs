//! Secrets by reference, through the outbound test plugin: a
//! `${secret:NAME}` placeholder in a header is replaced by the value only
//! toward the secret's hosts, what the server echoes comes back redacted,
//! a file secret rotates at the next request, and every misuse fails only
//! its reconcile with nothing sent.

use serde_json::json;
use wasmctrl::sandbox::outbound::{OutboundGrant, OutboundLimits, SecretBinding, Secrets};
use wasmctrl::{Action, ReconcileError, TrapKind};

use super::{Server, denied, plugin, refusal, rule, run};
use crate::{TIMEOUT, runtime};

/// The grant of the server on loopback, with `secrets` (YAML, as a config
/// writes them).
pub(super) fn grant_with(server: &Server, secrets: &str) -> OutboundGrant {
    let bindings: Vec<SecretBinding> = serde_norway::from_str(secrets).unwrap();
    OutboundGrant::new(
        vec![rule(
            &format!("http://localhost:{}", server.port()),
            &["GET", "PUT"],
            true,
        )],
        OutboundLimits::default(),
    )
    .unwrap()
    .with_secrets(Secrets::new(bindings, None).unwrap())
}

fn secret_refusals(rt: &wasmctrl::sandbox::Runtime, reason: &str) -> u64 {
    let series = format!(
        "wasmctrl_plugin_secret_refusals_total{{plugin=\"outbound\",reason=\"{reason}\"}} "
    );
    rt.metrics()
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test]
async fn a_placeholder_is_replaced_only_toward_its_hosts_and_redacted_from_the_answer() {
    let server = Server::start().await;
    let rt = runtime();
    let port = server.port();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "s3cr3t-one\n").unwrap();
    let secrets = format!(
        "[{{name: tok, file: {f}, hosts: ['http://localhost:{port}']}}, {{name: other, file: {f}, hosts: ['http://elsewhere.example']}}]",
        f = file.display()
    );
    let bearer = |name: &str| vec![("authorization", format!("Bearer ${{secret:{name}}}"))];
    let cases = json!({
        "echo": { "url": format!("http://localhost:{port}/echo"), "headers": bearer("tok"), "echo": true },
        "ok": { "url": format!("http://localhost:{port}/ok"), "headers": bearer("tok") },
        "asks-gzip": {
            "url": format!("http://localhost:{port}/echo"),
            "headers": [
                ["authorization", "Bearer ${secret:tok}"],
                ["accept-encoding", "gzip"],
                ["range", "bytes=0-3"],
            ],
            "echo": true,
        },
        "encoded": { "url": format!("http://localhost:{port}/encoded"), "headers": bearer("tok") },
    });
    let p = plugin(&rt, cases, grant_with(&server, &secrets)).await;

    let seen = match run(&p, "echo", TIMEOUT).await {
        Err(ReconcileError::Permanent(m)) => m,
        other => panic!("expected the echo case to report its answer, got {other:?}"),
    };
    let head = server.heads().pop().unwrap();
    assert!(
        head.contains("authorization: Bearer s3cr3t-one\r\n"),
        "the server got the value: {head}"
    );
    assert!(
        !seen.contains("s3cr3t-one"),
        "the guest saw the value: {seen}"
    );
    assert!(
        seen.contains("x-echo-authorization: Bearer <secret:tok>")
            && seen.contains("authorization: Bearer <secret:tok>\r\n"),
        "the echo comes back redacted in headers and body: {seen}"
    );

    // Redaction reads the answer's bytes: a request carrying a secret asks
    // for an unencoded, whole answer whatever the guest asked, and an
    // encoded one is refused.
    let seen = match run(&p, "asks-gzip", TIMEOUT).await {
        Err(ReconcileError::Permanent(m)) => m,
        other => panic!("expected the echo case to report its answer, got {other:?}"),
    };
    let head = server.heads().pop().unwrap();
    assert!(
        head.contains("accept-encoding: identity\r\n") && !head.contains("gzip"),
        "{head}"
    );
    assert!(!head.contains("range:"), "{head}");
    assert!(!seen.contains("s3cr3t-one"), "{seen}");
    let before = denied(&rt, "secret");
    let result = run(&p, "encoded", TIMEOUT).await;
    let (_, message) = refusal(&result);
    assert!(
        message.contains("the answer to a request of a plugin with secrets is encoded (\"gzip\")"),
        "{message}"
    );
    assert_eq!(denied(&rt, "secret"), before + 1);

    // A rotation is in force at the next request.
    std::fs::write(&file, "s3cr3t-two").unwrap();
    assert_eq!(run(&p, "ok", TIMEOUT).await, Ok(Action::done()));
    let head = server.heads().pop().unwrap();
    assert!(
        head.contains("authorization: Bearer s3cr3t-two\r\n"),
        "{head}"
    );
}

/// Each misuse fails its reconcile naming the secret and why, counted,
/// and nothing reaches the server.
#[tokio::test]
async fn a_secret_misused_fails_only_its_reconcile_and_sends_nothing() {
    let server = Server::start().await;
    let rt = runtime();
    let port = server.port();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "s3cr3t").unwrap();
    let secrets = format!(
        "[{{name: tok, file: {f}, hosts: ['http://localhost:{port}']}}, {{name: other, file: {f}, hosts: ['http://elsewhere.example']}}, {{name: gone, file: {gone}, hosts: ['http://localhost:{port}']}}, {{name: shown, file: {f}, hosts: ['http://localhost:{port}'], reveal: true}}]",
        f = file.display(),
        gone = dir.path().join("missing").display()
    );
    let url = format!("http://localhost:{port}/ok");
    let bearer = |name: &str| vec![("authorization", format!("Bearer ${{secret:{name}}}"))];
    let cases = json!({
        "unbound-host": { "url": url, "headers": bearer("other") },
        "unknown": { "url": url, "headers": bearer("nope") },
        "unclosed": { "url": url, "headers": [["authorization", "Bearer ${secret:tok"]] },
        "in-url": { "url": format!("{url}?key=$%7Bsecret:tok%7D") },
        "unreadable": { "url": url, "headers": bearer("gone") },
        "reveal-hidden": { "url": url, "reveal": "tok" },
        "reveal-shown": { "url": url, "reveal": "shown" },
        "reveal-reported": { "url": url, "reveal": "shown", "report_reveal": true },
    });
    let p = plugin(&rt, cases, grant_with(&server, &secrets)).await;
    for (key, reason, says) in [
        (
            "unbound-host",
            "secretHost",
            "secret \"other\" may be sent only to http://elsewhere.example; nothing was sent",
        ),
        (
            "unknown",
            "secret",
            "names secret \"nope\", which the plugin's secrets do not hold (its secrets: tok, other, gone, shown)",
        ),
        ("unclosed", "secret", "not closed"),
        ("in-url", "secret", "placeholder in the URL is refused"),
        ("unreadable", "secret", "secret \"gone\": file"),
    ] {
        let before = denied(&rt, reason);
        let result = run(&p, key, TIMEOUT).await;
        let (kind, message) = refusal(&result);
        assert_eq!(kind, TrapKind::Other, "{key}: {message}");
        assert!(message.contains(says), "{key}: {message}");
        assert!(!message.contains("s3cr3t"), "{key}: {message}");
        assert_eq!(denied(&rt, reason), before + 1, "{key}");
    }
    assert_eq!(server.total(), 0, "a refused request reached the server");

    // `reveal` only where the entry says so.
    match run(&p, "reveal-hidden", TIMEOUT).await {
        Err(ReconcileError::Permanent(m)) => {
            assert!(
                m.contains("forbidden") && m.contains("reveal: true") && !m.contains("s3cr3t"),
                "{m}"
            )
        }
        other => panic!("reveal without reveal: true must be refused, got {other:?}"),
    }
    assert_eq!(secret_refusals(&rt, "reveal"), 1);
    assert_eq!(server.total(), 0);
    assert_eq!(run(&p, "reveal-shown", TIMEOUT).await, Ok(Action::done()));
    assert_eq!(server.hits("/ok"), 1);
    // A revealed value the guest puts in its error is redacted there.
    match run(&p, "reveal-reported", TIMEOUT).await {
        Err(ReconcileError::Permanent(m)) => {
            assert_eq!(m, "revealed shown = <secret:shown>");
        }
        other => panic!("expected the reported error, got {other:?}"),
    }
}

/// Redaction writes a placeholder longer than a short value: an answer
/// echoing the value over and over is held to the response ceiling as the
/// guest would read it, not as the server sent it.
#[tokio::test]
async fn a_redacted_answer_is_held_to_the_response_ceiling_as_the_guest_reads_it() {
    let server = Server::start().await;
    let rt = runtime();
    let port = server.port();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "ab").unwrap();
    let name = "t".repeat(63);
    let secrets = format!(
        "[{{name: {name}, file: {f}, hosts: ['http://localhost:{port}']}}]",
        f = file.display()
    );
    let header = format!("Bearer ${{secret:{name}}}");
    let cases = json!({
        "echoed": {
            "url": format!("http://localhost:{port}/echo-repeated"),
            "headers": [["authorization", header]],
        },
    });
    let p = plugin(&rt, cases, grant_with(&server, &secrets)).await;
    let result = run(&p, "echoed", TIMEOUT).await;
    let (kind, message) = refusal(&result);
    assert_eq!(kind, TrapKind::Limit, "{message}");
    assert!(
        message.contains("with the secrets in it redacted, is past the ceiling of 4194304 bytes"),
        "{message}"
    );
    assert_eq!(denied(&rt, "responseBytes"), 1);
    assert_eq!(server.hits("/echo-repeated"), 1);
}

/// A server on a secret's hosts that keeps a header as a field and answers
/// it to a later request carrying no secret, under its own name or another
/// one no secret lists: the value comes back redacted all the same.
#[tokio::test]
async fn a_value_a_server_kept_is_redacted_from_its_later_answers() {
    let server = Server::start().await;
    let rt = runtime();
    let port = server.port();
    let secrets = format!(
        "[{{name: tok, env: WASMCTRL_TEST_KEPT_SECRET, hosts: ['http://localhost:{port}']}}]"
    );
    // SAFETY: only this test reads or writes the variable.
    unsafe { std::env::set_var("WASMCTRL_TEST_KEPT_SECRET", "k3pt-value") };
    let cases = json!({
        "store": {
            "method": "PUT",
            "url": format!("http://localhost:{port}/store"),
            "headers": [["x-store", "${secret:tok}"]],
        },
        "read": { "url": format!("http://localhost:{port}/stored"), "echo": true },
        "read-literal": { "url": format!("http://127.0.0.1:{port}/stored"), "echo": true },
    });
    let bindings: Vec<SecretBinding> = serde_norway::from_str(&secrets).unwrap();
    let grant = OutboundGrant::new(
        vec![
            rule(&format!("http://localhost:{port}"), &["GET", "PUT"], true),
            rule(&format!("http://127.0.0.1:{port}"), &["GET"], false),
        ],
        OutboundLimits::default(),
    )
    .unwrap()
    .with_secrets(Secrets::new(bindings, None).unwrap());
    let p = plugin(&rt, cases, grant).await;
    assert_eq!(run(&p, "store", TIMEOUT).await, Ok(Action::done()));
    assert_eq!(server.stored(), "k3pt-value", "the server kept the value");
    let seen = match run(&p, "read", TIMEOUT).await {
        Err(ReconcileError::Permanent(m)) => m,
        other => panic!("expected the read case to report its answer, got {other:?}"),
    };
    assert!(
        !seen.contains("k3pt-value"),
        "the guest saw the value: {seen}"
    );
    assert!(seen.contains("<secret:tok>"), "{seen}");
    let seen = match run(&p, "read-literal", TIMEOUT).await {
        Err(ReconcileError::Permanent(m)) => m,
        other => panic!("expected the read case to report its answer, got {other:?}"),
    };
    assert!(
        !seen.contains("k3pt-value"),
        "the guest saw the value through another name of the server: {seen}"
    );
    assert!(seen.contains("<secret:tok>"), "{seen}");
}
