use serde_json::json;

use super::replay::{DivergenceKind, Replayer, target};
use super::*;
use crate::sandbox::hostapi::{ApiError, Event, EventType, Gvk, KubeResponse, ObjectPatch};

fn deployments() -> Gvk {
    Gvk::new("apps", "v1", "Deployment")
}

fn get(name: &str) -> KubeRequest {
    KubeRequest::Get {
        kind: deployments(),
        namespace: Some("default".into()),
        name: name.into(),
    }
}

fn apply(name: &str, labels: serde_json::Value) -> KubeRequest {
    KubeRequest::Patch {
        kind: deployments(),
        namespace: Some("default".into()),
        name: name.into(),
        patch: ObjectPatch::Apply {
            body: json!({"metadata": {"name": name, "labels": labels}})
                .to_string()
                .into(),
            field_manager: "webapp".into(),
            force: true,
        },
    }
}

fn recorded(request: &KubeRequest, answer: Result<KubeResponse, ApiError>) -> HostCall {
    HostCall {
        request: request.clone(),
        response: CallResponse::from(&answer),
    }
}

#[test]
fn every_request_round_trips_through_its_json() {
    let requests = vec![
        get("web"),
        KubeRequest::List {
            kind: Gvk::new("", "v1", "ConfigMap"),
            namespace: None,
            label_selector: Some("app=web".into()),
        },
        KubeRequest::Create {
            kind: Gvk::new("", "v1", "ConfigMap"),
            namespace: Some("default".into()),
            object: r#"{"metadata":{"name":"a"}}"#.into(),
        },
        KubeRequest::ReplaceStatus {
            kind: deployments(),
            namespace: Some("default".into()),
            name: "web".into(),
            object: "not json".into(),
        },
        apply("web", json!({"app": "web"})),
        KubeRequest::PatchStatus {
            kind: deployments(),
            namespace: None,
            name: "web".into(),
            patch: ObjectPatch::json(r#"[{"op":"remove","path":"/status"}]"#),
        },
        KubeRequest::Delete {
            kind: deployments(),
            namespace: Some("default".into()),
            name: "web".into(),
        },
        KubeRequest::RecordEvent {
            event: Event {
                regarding_kind: deployments(),
                regarding_namespace: Some("default".into()),
                regarding_name: "web".into(),
                type_: EventType::Warning,
                reason: "Failed".into(),
                action: "Reconcile".into(),
                note: "no".into(),
            },
        },
    ];
    for r in requests {
        let json = serde_json::to_string(&r).unwrap();
        let back: KubeRequest = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r, "the host API sees what the guest sent: {json}");
    }
}

#[test]
fn responses_and_errors_round_trip() {
    let answers = vec![
        Ok(KubeResponse::Object(r#"{"a":1}"#.into())),
        Ok(KubeResponse::Objects(vec![
            r#"{"a":1}"#.into(),
            "{}".into(),
        ])),
        Ok(KubeResponse::Empty),
        Err(ApiError::NotFound("deployments \"web\" not found".into())),
        Err(ApiError::Conflict("stale".into())),
        Err(ApiError::Forbidden("no".into())),
    ];
    for a in answers {
        let r = CallResponse::from(&a);
        let back: CallResponse = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back.to_result(), a);
    }
}

#[test]
fn a_target_names_the_call_without_its_arguments() {
    assert_eq!(
        target(&apply("web", json!({}))),
        "patch (apply) apps/v1 Deployment default/web"
    );
    assert_eq!(
        target(&KubeRequest::List {
            kind: Gvk::new("", "v1", "ConfigMap"),
            namespace: Some("default".into()),
            label_selector: None,
        }),
        "list v1 ConfigMap default"
    );
}

#[test]
fn the_same_calls_replay_with_the_recorded_answers_and_no_divergence() {
    let object = r#"{"metadata":{"name":"web","resourceVersion":"7"}}"#;
    let replayer = Replayer::new(vec![
        recorded(&get("web"), Ok(KubeResponse::Object(object.into()))),
        recorded(
            &apply("web", json!({"app": "web"})),
            Ok(KubeResponse::Empty),
        ),
    ]);
    assert_eq!(
        replayer.answer(&get("web")),
        Ok(KubeResponse::Object(
            r#"{"metadata":{"name":"web","resourceVersion":"7"}}"#.into()
        ))
    );
    assert_eq!(
        replayer.answer(&apply("web", json!({"app": "web"}))),
        Ok(KubeResponse::Empty)
    );
    assert!(replayer.finish().is_empty());
}

#[test]
fn different_arguments_are_reported_with_each_differing_path() {
    let replayer = Replayer::new(vec![recorded(
        &apply("web", json!({"app": "web"})),
        Ok(KubeResponse::Empty),
    )]);
    assert_eq!(
        replayer.answer(&apply("web", json!({"app": "web", "tier": "front"}))),
        Ok(KubeResponse::Empty),
        "the recorded answer, so the replay goes on"
    );
    let d = replayer.finish();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].kind, DivergenceKind::DifferentArguments);
    assert_eq!(d[0].call, Some(1));
    assert_eq!(
        d[0].differences,
        vec![r#"/patch/body/metadata/labels/tier: ∅ → "front""#]
    );
}

#[test]
fn timestamps_and_resource_versions_are_not_divergences() {
    let status = |time: &str, rv: &str| KubeRequest::PatchStatus {
        kind: deployments(),
        namespace: Some("default".into()),
        name: "web".into(),
        patch: ObjectPatch::merge(
            json!({"metadata": {"resourceVersion": rv},
                   "status": {"conditions": [{"type": "Ready", "lastTransitionTime": time}]}})
            .to_string(),
        ),
    };
    let replayer = Replayer::new(vec![recorded(&status("t1", "1"), Ok(KubeResponse::Empty))]);
    replayer.answer(&status("t2", "2")).unwrap();
    assert!(replayer.finish().is_empty());
}

#[test]
fn a_different_call_is_reported_and_the_walk_resynchronizes_on_the_recording() {
    let replayer = Replayer::new(vec![
        recorded(&get("a"), Ok(KubeResponse::Object("{}".into()))),
        recorded(&get("b"), Ok(KubeResponse::Object(r#"{"b":1}"#.into()))),
        recorded(&get("c"), Ok(KubeResponse::Object(r#"{"c":1}"#.into()))),
    ]);
    // Skips `a`: a different call, answered with `b`'s recorded answer.
    assert_eq!(
        replayer.answer(&get("b")),
        Ok(KubeResponse::Object(r#"{"b":1}"#.into()))
    );
    // A call the recording never made: unavailable, and reported.
    let new = replayer.answer(&get("z"));
    assert!(
        matches!(&new, Err(ApiError::Unavailable(m)) if m.contains("get apps/v1 Deployment default/z")),
        "{new:?}"
    );
    // `b` again: answered as it was before.
    assert_eq!(
        replayer.answer(&get("b")),
        Ok(KubeResponse::Object(r#"{"b":1}"#.into()))
    );
    let d = replayer.finish();
    let kinds: Vec<_> = d.iter().map(|d| (d.kind, d.call)).collect();
    assert_eq!(
        kinds,
        vec![
            (DivergenceKind::DifferentCall, Some(1)),
            (DivergenceKind::DifferentCall, Some(2)),
            (DivergenceKind::DifferentCall, Some(3)),
            (DivergenceKind::MissingCall, Some(3)),
        ],
        "{d:#?}"
    );
    assert_eq!(
        d[0].expected.as_deref(),
        Some("get apps/v1 Deployment default/a")
    );
    assert_eq!(
        d[3].expected.as_deref(),
        Some("get apps/v1 Deployment default/c")
    );
}

#[test]
fn outcomes_compare_by_what_a_controller_does_with_them() {
    let trap = |m: &str| Outcome::Trap {
        kind: "deadline".into(),
        message: m.into(),
    };
    assert!(trap("at 0x12").same_as(&trap("at 0x99")));
    assert!(!Outcome::Done.same_as(&Outcome::Requeue));
    assert!(
        !Outcome::Transient {
            message: "a".into()
        }
        .same_as(&Outcome::Transient {
            message: "b".into()
        })
    );
}

#[test]
fn a_bad_line_is_an_error_naming_the_file_and_line() {
    let e = parse_lines("t.jsonl", "\n{not json}\n").unwrap_err();
    assert!(
        e.to_string().starts_with("t.jsonl:2: not a transcript"),
        "{e}"
    );
    let e = parse_lines("t.jsonl", r#"{"version":9}"#).unwrap_err();
    assert_eq!(
        e.to_string(),
        "t.jsonl:1: transcript version 9; this host reads version 1"
    );
}

#[test]
fn a_line_with_the_deepest_bodies_the_host_passes_reads_back() {
    use crate::sandbox::hostapi::MAX_NESTING;
    let deep = |n: usize| format!("{}1{}", r#"{"a":"#.repeat(n), "}".repeat(n));
    for depth in [MAX_NESTING - 8, MAX_NESTING - 3, MAX_NESTING] {
        let request = KubeRequest::PatchStatus {
            kind: deployments(),
            namespace: Some("default".into()),
            name: "web".into(),
            patch: ObjectPatch::merge(deep(depth)),
        };
        let answer = Ok(KubeResponse::Objects(vec![deep(depth)]));
        let t = transcript(vec![recorded(&request, answer.clone())], Vec::new());
        let line = serde_json::to_string(&t).unwrap();
        let read = parse_lines("t.jsonl", &line).unwrap();
        let call = &read[0].1.calls[0];
        assert_eq!(call.request, request, "{depth}");
        assert_eq!(call.response.to_result(), answer, "{depth}");
    }
}

#[test]
fn a_transcript_with_more_http_than_the_recorder_keeps_is_refused() {
    use crate::sandbox::outbound::{HttpExchange, MAX_EXCHANGES, MAX_RECORDED_BODY};
    let exchange = |body: usize| HttpExchange {
        method: "GET".into(),
        url: "http://a/x".into(),
        request_headers: Vec::new(),
        status: 200,
        response_headers: Vec::new(),
        body: "b".repeat(body),
        truncated: false,
    };
    let line = |http| serde_json::to_string(&transcript(Vec::new(), http)).unwrap();
    let ok = line(vec![exchange(MAX_RECORDED_BODY)]);
    let read = parse_lines("t.jsonl", &ok).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read[0].1.http[0].body.len(), MAX_RECORDED_BODY);
    let e = parse_lines("t.jsonl", &line(vec![exchange(MAX_RECORDED_BODY + 1)])).unwrap_err();
    assert!(e.to_string().contains("http[0]"), "{e}");
    let e = parse_lines("t.jsonl", &line(vec![exchange(0); MAX_EXCHANGES + 1])).unwrap_err();
    assert!(e.to_string().contains("HTTP exchanges"), "{e}");
}

/// A transcript of `web` whose reconcile made `calls` and `http` and
/// returned done.
fn transcript(
    calls: Vec<HostCall>,
    http: Vec<crate::sandbox::outbound::HttpExchange>,
) -> Transcript {
    Transcript {
        version: TRANSCRIPT_VERSION,
        plugin: "p".into(),
        digest: "sha256:00".into(),
        key: Key {
            namespace: None,
            name: "web".into(),
        },
        attempt: 0,
        timeout_ms: 1000,
        settings: json!({}),
        recorded_at: "2026-12-03T12:00:00.000Z".into(),
        duration_ms: 1,
        calls,
        context: Vec::new(),
        context_dropped: 0,
        http,
        http_dropped: 0,
        result: Outcome::Done,
    }
}
