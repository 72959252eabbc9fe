use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::future::BoxFuture;
use proptest::prelude::*;
use serde_json::Value;
use wasmctrl_apiserver::patches;

use super::capture::{Answer, Capture, MAX_RECORDED, Recording, Seen};
use super::write::{MAX_NORMALIZED, Write, minus};
use crate::sandbox::hostapi::{
    ApiError, Gvk, KubeApi, KubeRequest, KubeResponse, Layered, MAX_PAYLOAD, ObjectPatch,
};

/// A live API that serves one object for every get and admits only
/// bodies within the payload limit, like the default `admit`.
struct OneObject(String);

impl KubeApi for OneObject {
    fn call(&self, _: KubeRequest, _: Instant) -> BoxFuture<'_, Answer> {
        Box::pin(async move { Ok(KubeResponse::Object(self.0.clone())) })
    }
}

fn configmap() -> Gvk {
    Gvk {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
    }
}

/// A capture over a live API that holds `object`.
fn capture(object: &str) -> Layered<Capture> {
    let capture = Capture {
        state: Mutex::new(Seen::default()),
        counted: None,
    };
    Layered::new(capture, Arc::new(OneObject(object.into())))
}

/// The writes a capture kept.
fn writes(capture: &Layered<Capture>) -> usize {
    capture.layer().state.lock().unwrap().writes.len()
}

fn json_patch(patch: String) -> KubeRequest {
    KubeRequest::Patch {
        kind: configmap(),
        namespace: Some("default".into()),
        name: "cm".into(),
        patch: ObjectPatch::json(patch),
    }
}

fn answer_of(capture: &Layered<Capture>, request: KubeRequest) -> Answer {
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    futures::executor::block_on(capture.call(request, deadline))
}

/// Nesting depth, without recursion (the value may be deep).
fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        match v {
            Value::Object(m) => stack.extend(m.values().map(|v| (v, d + 1))),
            Value::Array(a) => stack.extend(a.iter().map(|v| (v, d + 1))),
            _ => {}
        }
    }
    deepest
}

#[test]
fn a_patch_that_would_nest_past_the_bound_is_refused_not_applied() {
    let mut ops = vec![r#"{"op":"add","path":"/spec","value":{"a":{}}}"#.to_string()];
    let mut chain = 1;
    for _ in 0..15 {
        let path = format!("/spec{}", "/a".repeat(chain + 1));
        ops.push(format!(r#"{{"op":"copy","from":"/spec","path":"{path}"}}"#));
        chain = 2 * chain + 1;
    }
    let c = capture(r#"{"metadata":{"name":"cm"}}"#);
    let answer = answer_of(&c, json_patch(format!("[{}]", ops.join(","))));
    let Err(ApiError::Invalid(m)) = &answer else {
        panic!("{answer:?}")
    };
    assert!(m.contains("levels deep"), "{m}");
    assert_eq!(writes(&c), 0);
}

#[test]
fn copies_past_the_api_server_s_copy_bytes_are_refused() {
    let mut ops = vec![format!(
        r#"{{"op":"add","path":"/spec","value":{{"x":"{}"}}}}"#,
        "y".repeat(512)
    )];
    ops.extend((0..30).map(|i| format!(r#"{{"op":"copy","from":"/spec","path":"/spec/c{i}"}}"#)));
    let answer = answer_of(
        &capture(r#"{"metadata":{"name":"cm"}}"#),
        json_patch(format!("[{}]", ops.join(","))),
    );
    let Err(ApiError::Invalid(m)) = &answer else {
        panic!("{answer:?}")
    };
    assert!(m.contains("copy"), "{m}");
}

#[test]
fn a_body_past_the_payload_limit_is_refused_before_it_is_read() {
    let huge = format!(r#"{{"data":"{}"}}"#, "x".repeat(MAX_PAYLOAD));
    let c = capture("{}");
    for request in [
        KubeRequest::Create {
            kind: configmap(),
            namespace: Some("default".into()),
            object: huge.clone().into(),
        },
        KubeRequest::Patch {
            kind: configmap(),
            namespace: Some("default".into()),
            name: "cm".into(),
            patch: ObjectPatch::merge(huge.clone()),
        },
    ] {
        let answer = answer_of(&c, request);
        let Err(ApiError::Invalid(m)) = &answer else {
            panic!("{answer:?}")
        };
        assert!(m.contains("payload limit"), "{m}");
    }
    assert_eq!(writes(&c), 0);
}

#[test]
fn a_recording_past_its_bytes_keeps_nothing_and_is_not_compared() {
    let big = format!(r#"{{"data":"{}"}}"#, "x".repeat(1 << 20));
    let recording = Layered::new(Recording::default(), Arc::new(OneObject(big)));
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    for i in 0..(MAX_RECORDED >> 20) + 1 {
        let get = KubeRequest::Get {
            kind: configmap(),
            namespace: Some("default".into()),
            name: format!("cm-{i}"),
        };
        futures::executor::block_on(recording.call(get, deadline)).unwrap();
    }
    let seen = recording.layer().take();
    assert!(seen.overflow);
    assert!(seen.reads.is_empty() && seen.writes.is_empty());
}

#[test]
fn a_large_write_is_compared_by_digest_without_a_tree() {
    let object = |value: &str| {
        format!(
            r#"{{"metadata":{{"name":"big"}},"data":[{}{value}]}}"#,
            "0,".repeat(MAX_NORMALIZED)
        )
    };
    let create = |object: String| {
        Write::of(&KubeRequest::Create {
            kind: configmap(),
            namespace: Some("default".into()),
            object: object.into(),
        })
        .unwrap()
    };
    let (a, b, c) = (
        create(object("0")),
        create(object("0")),
        create(object("1")),
    );
    assert_eq!(a.name.as_deref(), Some("big"));
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert!(a.bytes() < 300, "{a:?}");
}

#[test]
fn a_patch_within_the_bounds_is_answered_and_captured() {
    let c = capture(r#"{"metadata":{"name":"cm"},"data":{"a":"1"}}"#);
    let answer = answer_of(
        &c,
        json_patch(r#"[{"op":"copy","from":"/data/a","path":"/data/b"}]"#.into()),
    );
    let Ok(KubeResponse::Object(json)) = answer else {
        panic!("{answer:?}")
    };
    let object: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(object["data"]["b"], "1");
    assert_eq!(writes(&c), 1);
}

/// One JSON patch operation over a small vocabulary of paths, so that
/// copies into themselves, moves and removes of what exists are
/// likely.
fn operation() -> impl Strategy<Value = String> {
    let path = prop::collection::vec(prop::sample::select(vec!["a", "b", "0", "-"]), 0..6)
        .prop_map(|parts| parts.iter().map(|p| format!("/{p}")).collect::<String>());
    let op = prop::sample::select(vec!["add", "copy", "move", "remove", "replace", "test"]);
    let value = prop::sample::select(vec![r#"{}"#, r#"[]"#, r#""x""#, r#"{"a":{"b":[1]}}"#]);
    (op, path.clone(), path, value).prop_map(|(op, path, from, value)| {
        format!(r#"{{"op":"{op}","path":"/spec{path}","from":"/spec{from}","value":{value}}}"#)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Whatever a candidate patches, the capture answers within the
    /// API server's bounds or refuses: never a panic, never an object
    /// deeper than the depth bound or past the payload limit.
    #[test]
    fn any_json_patch_is_answered_within_the_bounds(ops in prop::collection::vec(operation(), 1..64)) {
        let c = capture(r#"{"metadata":{"name":"cm"},"spec":{"a":{"b":[1]}}}"#);
        let patch = format!("[{}]", ops.join(","));
        match answer_of(&c, json_patch(patch)) {
            Ok(KubeResponse::Object(json)) => {
                prop_assert!(json.len() <= MAX_PAYLOAD);
                let object: Value = serde_json::from_str(&json).unwrap();
                prop_assert!(depth(&object) <= patches::MAX_DEPTH);
            }
            Ok(other) => prop_assert!(false, "{other:?}"),
            Err(ApiError::Invalid(_)) => {}
            Err(e) => prop_assert!(false, "{e:?}"),
        }
    }
}

fn deployment() -> Gvk {
    Gvk {
        group: "apps".into(),
        version: "v1".into(),
        kind: "Deployment".into(),
    }
}

#[test]
fn writes_compare_as_normalized_json_in_any_order() {
    let a = Write::of(&KubeRequest::Replace {
        kind: deployment(),
        namespace: Some("ns".into()),
        name: "web".into(),
        object: r#"{"metadata":{"name":"web","resourceVersion":"7","managedFields":[],"creationTimestamp":"2026-01-01T00:00:00Z"},"spec":{"replicas":2},"status":{"conditions":[{"type":"Ready","lastTransitionTime":"x"}]}}"#.into(),
    })
    .unwrap();
    let b = Write::of(&KubeRequest::Replace {
        kind: deployment(),
        namespace: Some("ns".into()),
        name: "web".into(),
        object: r#"{"status":{"conditions":[{"lastTransitionTime":"y","type":"Ready"}]},"spec":{"replicas":2},"metadata":{"resourceVersion":"9","name":"web"}}"#.into(),
    })
    .unwrap();
    assert_eq!(a, b);
    let delete = Write::of(&KubeRequest::Delete {
        kind: deployment(),
        namespace: Some("ns".into()),
        name: "web".into(),
    })
    .unwrap();
    assert!(minus(&[a.clone(), delete.clone()], &[delete.clone(), b.clone()]).is_empty());
    let made = [a.clone(), delete.clone()];
    let only = minus(&made, std::slice::from_ref(&b));
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].verb, "delete");
    assert_eq!(only[0].kind, "apps/Deployment");
    assert_eq!(minus(&[a.clone(), a.clone()], &[b]).len(), 1, "a multiset");
}

#[test]
fn what_divergences_keep_is_bounded_in_writes_and_bytes() {
    use super::write::MAX_KEPT_WRITES;
    use super::{Diff, Divergence, MAX_KEPT_DIVERGENCE_BYTES, Side, Tally};
    use crate::control::reconcile::Action;

    // Bodies of tiny values, each kept whole (within 64 KiB): as text, not
    // as a tree of about 16 times its size.
    let body = format!(
        r#"{{"metadata":{{"name":"cm"}},"data":[{}0]}}"#,
        "0,".repeat(30_000)
    );
    let writes: Vec<Write> = (0..150)
        .map(|i| {
            Write::of(&KubeRequest::Replace {
                kind: configmap(),
                namespace: Some("default".into()),
                name: format!("cm{i}"),
                object: body.clone().into(),
            })
            .unwrap()
        })
        .collect();
    assert!(writes[0].bytes() < body.len() + 100);

    let side = Side::new(&Ok(Action::done()), &writes);
    assert_eq!(
        (side.writes.len(), side.writes_omitted),
        (MAX_KEPT_WRITES, 150 - MAX_KEPT_WRITES)
    );
    let diff = Diff::of(&[], &writes);
    assert_eq!(
        (diff.only_candidate.len(), diff.only_candidate_omitted),
        (MAX_KEPT_WRITES, 150 - MAX_KEPT_WRITES)
    );

    // One divergence of that size, kept under 50 keys: each is as large as
    // the last, and computing the diff once keeps the debug build quick.
    let large = Divergence {
        key: String::new(),
        at: String::new(),
        kinds: vec!["ConfigMap".into()],
        stable: Side::new(&Ok(Action::done()), &[]),
        candidate: side,
        diff,
    };
    let mut tally = Tally::default();
    for i in 0..50 {
        let divergence = Divergence {
            key: format!("default/cm{i}"),
            ..large.clone()
        };
        tally.keep(divergence, 1000);
    }
    let held: usize = tally.recent.iter().map(Divergence::bytes).sum();
    assert_eq!(held, tally.recent_bytes);
    assert!(held <= MAX_KEPT_DIVERGENCE_BYTES, "{held}");
    assert_eq!(
        tally.recent.back().unwrap().key,
        "default/cm49",
        "the newest stays"
    );
    assert!(tally.recent.len() < 50);
}
