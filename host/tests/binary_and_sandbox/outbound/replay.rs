//! Outbound exchanges in transcripts: recorded as the guest saw them (a
//! secret is its placeholder in the request and its marker in the answer),
//! and answered from the recording on replay, with nothing sent whatever
//! the replaying plugin's grant.

use std::sync::Arc;

use serde_json::json;
use wasmctrl::sandbox::Through;
use wasmctrl::sandbox::outbound::{HttpTape, OutboundGrant, OutboundLimits};
use wasmctrl::{Action, ReconcileError};

use super::secrets::grant_with;
use super::{Server, plugin, refusal, rule};
use crate::{TIMEOUT, request, runtime};

#[tokio::test]
async fn exchanges_are_recorded_without_secret_values_and_replayed_without_sending() {
    let server = Server::start().await;
    let rt = runtime();
    let port = server.port();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "s3cr3t").unwrap();
    let secrets = format!(
        "[{{name: tok, file: {}, hosts: ['http://localhost:{port}']}}]",
        file.display()
    );
    let grant = grant_with(&server, &secrets);
    let bearer = json!([["authorization", "Bearer ${secret:tok}"]]);
    let cases = json!({
        "ok": { "url": format!("http://localhost:{port}/ok"), "headers": bearer },
        "echo": { "url": format!("http://localhost:{port}/echo"), "headers": bearer, "echo": true },
    });
    let live = plugin(&rt, cases.clone(), grant).await;

    let tape = Arc::new(HttpTape::recording());
    let through = || Through {
        http_tape: Some(tape.clone()),
        ..Through::default()
    };
    let ok = live.invoke_through(request("ok", TIMEOUT), through()).await;
    assert_eq!(ok.result, Ok(Action::done()));
    let echoed = live
        .invoke_through(request("echo", TIMEOUT), through())
        .await;
    assert!(matches!(echoed.result, Err(ReconcileError::Permanent(_))));
    let recorded = tape.exchanges();
    assert_eq!(recorded.len(), 2, "{recorded:?}");
    let first = &recorded[0];
    assert_eq!(
        (
            first.method.as_str(),
            first.url.as_str(),
            first.status,
            first.body.as_str()
        ),
        (
            "GET",
            format!("http://localhost:{port}/ok").as_str(),
            200,
            "hello"
        )
    );
    assert!(
        first
            .request_headers
            .contains(&("authorization".into(), "Bearer ${secret:tok}".into())),
        "{first:?}"
    );
    let text = serde_json::to_string(&recorded).unwrap();
    assert!(
        !text.contains("s3cr3t"),
        "a value reached the recording: {text}"
    );
    assert!(
        recorded[1].body.contains("Bearer <secret:tok>"),
        "{:?}",
        recorded[1]
    );
    let sent = server.total();

    // Replayed by a plugin granted nothing: answered from the recording.
    let replaying = plugin(&rt, cases, OutboundGrant::default()).await;
    let tape = Arc::new(HttpTape::replaying(&recorded));
    let replay = |key: &'static str| {
        let through = Through {
            http_tape: Some(tape.clone()),
            ..Through::default()
        };
        replaying.invoke_through(request(key, TIMEOUT), through)
    };
    assert_eq!(replay("ok").await.result, Ok(Action::done()));
    assert_eq!(replay("echo").await.result, echoed.result);
    // A request the recording does not hold is refused, not sent.
    let beyond = replay("ok").await.result;
    let (_, message) = refusal(&beyond);
    assert!(
        message.contains("the transcript holds no (further) answer"),
        "{message}"
    );
    assert_eq!(server.total(), sent, "a replay sent a request");
}

/// A shadow candidate's tape: what the stable version got answers the
/// same request, whatever else it asks is sent live under its grant.
#[tokio::test]
async fn an_answering_tape_serves_what_it_holds_and_lets_the_rest_through() {
    let server = Server::start().await;
    let rt = runtime();
    let port = server.port();
    let grant = || {
        OutboundGrant::new(
            vec![rule(&format!("http://localhost:{port}"), &["GET"], true)],
            OutboundLimits::default(),
        )
        .unwrap()
        .read_only()
    };
    let cases = json!({
        "ok": { "url": format!("http://localhost:{port}/ok") },
        "other": { "url": format!("http://localhost:{port}/other") },
    });
    let p = plugin(&rt, cases, grant()).await;
    let recording = Arc::new(HttpTape::recording());
    let through = Through {
        http_tape: Some(recording.clone()),
        ..Through::default()
    };
    assert_eq!(
        p.invoke_through(request("ok", TIMEOUT), through)
            .await
            .result,
        Ok(Action::done())
    );
    assert_eq!(server.hits("/ok"), 1);

    let answers = Arc::new(HttpTape::answering(&recording.exchanges()));
    for key in ["ok", "other"] {
        let through = Through {
            http_tape: Some(answers.clone()),
            ..Through::default()
        };
        let result = p
            .invoke_through(request(key, TIMEOUT), through)
            .await
            .result;
        assert_eq!(result, Ok(Action::done()), "{key}");
    }
    assert_eq!(
        server.hits("/ok"),
        1,
        "the recorded answer served the repeat"
    );
    assert_eq!(server.hits("/other"), 1, "what it did not hold was sent");
}
