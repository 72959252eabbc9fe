//! What `wasmctrl replay` reads is a file someone handed over: any bytes,
//! any mutation of a real transcript, must be read or refused with an
//! error naming the file, the line and what is wrong, on one bounded line
//! — never a panic, and nothing read past the reader's bounds. What is
//! read must then replay without a panic. `PROPTEST_CASES` scales the run
//! (`scripts/fuzz-campaign.sh`).

use proptest::prelude::*;
use serde_json::{Value, json};

use super::replay::Replayer;
use super::*;
use crate::sandbox::hostapi::{Gvk, KubeRequest};

const FILE: &str = "t.jsonl";

/// A transcript with every kind of call, answer and context read.
fn sample() -> Value {
    let cm = json!({"group": "", "version": "v1", "kind": "ConfigMap"});
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "web", "namespace": "default"}, "data": {"a": "b"}});
    json!({
        "version": 1, "plugin": "webapp", "digest": format!("sha256:{}", "a".repeat(64)),
        "key": {"namespace": "default", "name": "web"}, "attempt": 2, "timeoutMs": 30000,
        "settings": {"replicas": 2}, "recordedAt": "2026-12-03T12:00:00Z", "durationMs": 4,
        "calls": [
            {"request": {"verb": "get", "kind": cm, "namespace": "default", "name": "web"},
             "response": {"object": object}},
            {"request": {"verb": "list", "kind": cm, "labelSelector": "app=web"},
             "response": {"objects": [object, object]}},
            {"request": {"verb": "create", "kind": cm, "namespace": "default", "object": object},
             "response": {"error": {"code": "already-exists", "message": "exists"}}},
            {"request": {"verb": "replace", "kind": cm, "namespace": "default", "name": "web", "object": "not json"},
             "response": "empty"},
            {"request": {"verb": "patch", "kind": cm, "namespace": "default", "name": "web",
                         "patch": {"type": "apply", "body": object, "fieldManager": "webapp", "force": true}},
             "response": {"object": object}},
            {"request": {"verb": "patch-status", "kind": cm, "name": "web",
                         "patch": {"type": "json", "body": [{"op": "remove", "path": "/status"}]}},
             "response": "empty"},
            {"request": {"verb": "replace-status", "kind": cm, "namespace": "default", "name": "web", "object": object},
             "response": {"error": {"code": "conflict", "message": "stale"}}},
            {"request": {"verb": "delete", "kind": cm, "namespace": "default", "name": "web"},
             "response": {"error": {"code": "not-found", "message": "gone"}}},
            {"request": {"verb": "record-event", "event": {
                "regardingKind": cm, "regardingNamespace": "default", "regardingName": "web",
                "type": "Warning", "reason": "Failed", "action": "Reconcile", "note": "no"}},
             "response": "empty"},
        ],
        "context": [
            {"read": "deadline-remaining-ms", "value": 29996},
            {"read": "cancelled", "value": false},
            {"read": "log-enabled", "value": {"level": "debug", "enabled": true}},
        ],
        "contextDropped": 3,
        "result": {"outcome": "requeue-after", "ms": 5000},
    })
}

#[test]
fn the_sample_is_a_transcript() {
    let read = parse_lines(FILE, &sample().to_string()).unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].1.calls.len(), 9);
    assert_eq!(
        serde_json::to_value(&read[0].1.calls).unwrap(),
        sample()["calls"],
        "written back in the format it was read in"
    );
}

/// Arbitrary JSON, its keys and strings biased to the format's own.
fn json() -> impl Strategy<Value = Value> {
    let words = vec![
        "version",
        "calls",
        "request",
        "response",
        "verb",
        "kind",
        "object",
        "objects",
        "patch",
        "type",
        "body",
        "error",
        "code",
        "result",
        "outcome",
        "context",
        "read",
        "value",
        "get",
        "apply",
        "requeue-after",
        "trap",
        "empty",
    ];
    let long = (1usize..50_000).prop_map(|n| Value::from("x".repeat(n)));
    crate::fuzz::json(words, 1, long.boxed(), 8)
}

/// Values the format should not meet: past every integer type, nested
/// past any parser's depth, longer than any field.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("18446744073709551615".to_string()),
        Just("18446744073709551616".to_string()),
        Just("-1".into()),
        Just("1e999".into()),
        Just("-0.0".into()),
        Just(r#""\ud800""#.into()),
        Just("\"\u{0}\u{1b}[31m\"".into()),
        (1usize..20_000).prop_map(|n| format!("{}{}", "[".repeat(n), "]".repeat(n))),
        (1usize..5_000).prop_map(|n| format!("{}0{}", r#"{"a":"#.repeat(n), "}".repeat(n))),
        (1usize..5_000).prop_map(|n| "[".repeat(n)),
        (1usize..100_000).prop_map(|n| format!("{:?}", "\n".repeat(n))),
        (1usize..2_000).prop_map(|n| format!("[{}]", vec!["{}"; n].join(","))),
        json().prop_map(|v| v.to_string()),
    ]
}

/// A mutation of the sample, as bytes.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    let line = sample().to_string().into_bytes();
    let len = line.len();
    let mut paths = Vec::new();
    crate::fuzz::pointers(&sample(), String::new(), &mut paths);
    let (l1, l2, l3) = (line.clone(), line.clone(), line.clone());
    prop_oneof![
        (0..=len).prop_map(move |n| l1[..n].to_vec()),
        prop::collection::vec((0..len, any::<u8>()), 1..8).prop_map(move |flips| {
            let mut l = l2.clone();
            for (i, b) in flips {
                l[i] = b;
            }
            l
        }),
        (0..=len, hostile()).prop_map(move |(i, piece)| {
            let mut l = l3.clone();
            l.splice(i..i, piece.into_bytes());
            l
        }),
        (prop::sample::select(paths), hostile()).prop_map(|(at, text)| {
            let mut v = sample();
            // A hostile text that is not one JSON value goes in as a string.
            let new = serde_json::from_str(&text).unwrap_or(Value::String(text));
            if let Some(slot) = v.pointer_mut(&at) {
                *slot = new;
            }
            v.to_string().into_bytes()
        }),
        (0usize..2_000).prop_map(|n| {
            let mut v = sample();
            let call = v["calls"][0].clone();
            v["calls"] = Value::Array(vec![call; n]);
            v.to_string().into_bytes()
        }),
    ]
}

/// Lines as a file has them: several, blank ones, `\r\n`, no final newline.
fn file() -> impl Strategy<Value = Vec<u8>> {
    let line = prop_oneof![
        3 => mutated(),
        1 => Just(sample().to_string().into_bytes()),
        1 => json().prop_map(|v| v.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..256),
        1 => prop_oneof![Just(b"".to_vec()), Just(b" \t".to_vec()), Just(b"\r".to_vec())],
    ];
    (
        prop::collection::vec(line, 1..4),
        prop_oneof![Just(&b"\n"[..]), Just(&b"\r\n"[..])],
        any::<bool>(),
    )
        .prop_map(|(lines, end, last)| {
            let mut out = lines.join(end);
            if last {
                out.extend_from_slice(end);
            }
            out
        })
}

/// The property: read, then replayed without a panic; or refused naming
/// the file and line on one bounded line.
fn read_or_refused(bytes: &[u8]) -> Result<(), TestCaseError> {
    match read(FILE, bytes) {
        Ok(transcripts) => {
            for (line, t) in transcripts {
                prop_assert!(line >= 1);
                prop_assert_eq!(t.version, TRANSCRIPT_VERSION);
                prop_assert!(t.calls.len() <= MAX_CALLS);
                prop_assert!(t.timeout_ms <= MAX_TIMEOUT_MS);
                // What `replay_one` builds from it.
                let _ = crate::sandbox::ContextTape::replaying(&t.context);
                let _ = ObjectKey::from(&t.key).to_string();
                let _ = (t.result.to_string(), t.result.same_as(&Outcome::Done));
                let replayer = Replayer::new(t.calls.clone());
                for c in &t.calls {
                    let _ = replayer.answer(&c.request);
                }
                let _ = replayer.answer(&KubeRequest::Get {
                    kind: Gvk::new("", "v1", "Secret"),
                    namespace: None,
                    name: "unrecorded".into(),
                });
                let divergences = replayer.finish();
                prop_assert!(divergences.len() <= 2 * t.calls.len() + 1);
            }
        }
        Err(e) => {
            let message = e.to_string();
            prop_assert!(message.starts_with(FILE), "{message}");
            crate::fuzz::one_bounded_line(&message)?;
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn any_bytes_are_read_or_refused(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        read_or_refused(&bytes)?;
    }

    #[test]
    fn any_json_is_read_or_refused(v in json(), versioned in any::<bool>()) {
        let mut v = v;
        if versioned && let Value::Object(m) = &mut v {
            m.insert("version".into(), Value::from(1));
        }
        read_or_refused(v.to_string().as_bytes())?;
    }

    #[test]
    fn any_mutated_transcript_file_is_read_or_refused(bytes in file()) {
        read_or_refused(&bytes)?;
    }
}

fn bounds(line: usize, file: u64, transcripts: usize) -> Bounds {
    Bounds {
        line,
        file,
        transcripts,
        values: MAX_VALUES,
    }
}

#[test]
fn files_read_together_share_one_budget_of_values_and_transcripts() {
    let line = sample().to_string();
    let values = (1..)
        .find(|&n| shape_within(line.as_bytes(), MAX_NESTING, n, n).is_ok())
        .unwrap();
    let bounds = Bounds {
        values: values * 3 / 2,
        ..bounds(line.len(), 1 << 20, 10)
    };
    let mut left = Left::of(&bounds);
    read_budgeted(FILE, line.as_bytes(), &bounds, &mut left).expect("the first file");
    let e = read_budgeted(FILE, line.as_bytes(), &bounds, &mut left).unwrap_err();
    assert!(e.to_string().contains("lines hold more than"), "{e}");

    let bounds = bounds_with_transcripts(&line, 1);
    let mut left = Left::of(&bounds);
    read_budgeted(FILE, line.as_bytes(), &bounds, &mut left).expect("the first file");
    let e = read_budgeted(FILE, line.as_bytes(), &bounds, &mut left).unwrap_err();
    assert!(e.to_string().contains("more than 1 transcripts"), "{e}");
    assert!(
        read_within(FILE, line.as_bytes(), &bounds).is_ok(),
        "each file alone is within its bounds"
    );
}

fn bounds_with_transcripts(line: &str, transcripts: usize) -> Bounds {
    bounds(line.len(), 1 << 20, transcripts)
}

#[test]
fn a_line_at_its_value_bound_is_read_and_one_value_more_is_refused() {
    let line = sample().to_string();
    let values = (1..)
        .find(|&n| shape_within(line.as_bytes(), MAX_NESTING, n, n).is_ok())
        .unwrap();
    let within = |values| Bounds {
        values,
        ..bounds(line.len(), 1 << 20, 1)
    };
    assert_eq!(
        read_within(FILE, line.as_bytes(), &within(values))
            .unwrap()
            .len(),
        1
    );
    let e = read_within(FILE, line.as_bytes(), &within(values - 1)).unwrap_err();
    assert!(
        e.to_string().starts_with(&format!(
            "t.jsonl:1: not a transcript: the line holds more than {} JSON values",
            values - 1
        )),
        "{e}"
    );
    // An object, its key and its value; what is inside a string is text.
    assert_eq!(shape_within(br#"{"a": "[{,:\"]"}"#, 1, 3, 3), Ok(3));
    assert!(shape_within(br#"{"a": "[{,:\"]"}"#, 1, 2, 2).is_err());
    assert!(shape_within(b"[[]]", 1, 10, 10).is_err());
    assert!(shape_within(b" [ ] ", 1, 1, 1).is_ok());

    // Every line within the bound, the file's lines together past it.
    let two = format!("{line}\n{line}\n");
    let both = Bounds {
        transcripts: 2,
        ..within(2 * values)
    };
    assert_eq!(
        read_within(
            FILE,
            two.as_bytes(),
            &Bounds {
                file: 1 << 21,
                ..both
            }
        )
        .unwrap()
        .len(),
        2
    );
    let e = read_within(
        FILE,
        two.as_bytes(),
        &Bounds {
            file: 1 << 21,
            transcripts: 2,
            ..within(2 * values - 1)
        },
    )
    .unwrap_err();
    assert!(
        e.to_string().starts_with(&format!(
            "t.jsonl:2: not a transcript: with this line the file's lines hold more than {} JSON values together",
            2 * values - 1
        )),
        "{e}"
    );
}

#[test]
fn an_endless_line_is_refused_at_the_line_bound() {
    let endless = std::io::BufReader::new(std::io::repeat(b'{'));
    let e = read_within(FILE, endless, &bounds(1 << 20, 1 << 30, 10)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "t.jsonl:1: not a transcript: the line is over 1048576 bytes, more than any transcript the recorder writes (the largest record.maxBytes)"
    );
}

#[test]
fn an_endless_file_is_refused_at_the_file_bound() {
    let endless = std::io::BufReader::new(std::io::repeat(b'\n'));
    let e = read_within(FILE, endless, &bounds(1 << 20, 1 << 20, 10)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "t.jsonl: the file is over 1048576 bytes, more than the recorder writes to one file (the largest record.maxBytes)"
    );
}

#[test]
fn lines_at_the_bounds_are_read_and_one_more_is_refused() {
    let line = sample().to_string();
    let three = format!("{line}\r\n\n{line}\n{line}");
    let len = line.len();
    let read = read_within(FILE, three.as_bytes(), &bounds(len, three.len() as u64, 3)).unwrap();
    assert_eq!(
        read.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        vec![1, 3, 4]
    );
    let e = read_within(FILE, three.as_bytes(), &bounds(len - 1, 1 << 20, 3)).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("t.jsonl:1: not a transcript: the line is over"),
        "{e}"
    );
    let e = read_within(FILE, three.as_bytes(), &bounds(len, 1 << 20, 2)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "t.jsonl: more than 2 transcripts, more than the recorder writes to one file (the largest record.max)"
    );
    let e = read_within(
        FILE,
        three.as_bytes(),
        &bounds(len, three.len() as u64 - 1, 3),
    )
    .unwrap_err();
    assert!(
        e.to_string().starts_with("t.jsonl: the file is over"),
        "{e}"
    );
}

#[test]
fn a_timeout_past_the_largest_reconcile_timeout_is_refused() {
    let mut v = sample();
    v["timeoutMs"] = Value::from(u64::MAX);
    let e = parse_lines(FILE, &v.to_string()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "t.jsonl:1: not a transcript: timeoutMs is 18446744073709551615, more than the largest reconcileTimeout (3600000)"
    );
    v["timeoutMs"] = Value::from(MAX_TIMEOUT_MS);
    assert!(parse_lines(FILE, &v.to_string()).is_ok());
}

#[test]
fn more_context_reads_than_the_recorder_keeps_are_refused() {
    let mut v = sample();
    v["context"] = Value::Array(vec![
        json!({"read": "cancelled", "value": false});
        crate::sandbox::MAX_CONTEXT_READS + 1
    ]);
    let e = parse_lines(FILE, &v.to_string()).unwrap_err();
    assert!(
        e.to_string()
            .contains("1025 context reads, more than the recorder keeps (1024)"),
        "{e}"
    );
}

#[test]
fn an_error_quotes_a_bounded_line_of_the_file() {
    let mut v = sample();
    v["calls"][0]["request"]["verb"] = Value::from(format!("x\n{}", "y".repeat(1 << 20)));
    let e = parse_lines(FILE, &v.to_string()).unwrap_err().to_string();
    assert!(
        e.starts_with("t.jsonl:1: not a transcript: unknown variant `x\\ny"),
        "{e:.200}"
    );
    assert!(e.len() < 1024 && !e.contains('\n'), "{e:.2000}");
    assert!(e.ends_with("bytes in all)"), "{e}");
}

#[test]
fn a_long_recording_answers_each_call_without_scanning_it() {
    let get = |name: String| KubeRequest::Get {
        kind: Gvk::new("", "v1", "ConfigMap"),
        namespace: Some("default".into()),
        name,
    };
    let recorded = (0..50_000)
        .map(|i| HostCall {
            request: get(format!("r{i}")),
            response: CallResponse::Empty,
        })
        .collect();
    let replayer = Replayer::new(recorded);
    let started = std::time::Instant::now();
    for i in 0..5_000 {
        assert!(replayer.answer(&get(format!("new{i}"))).is_err());
    }
    assert_eq!(
        replayer.answer(&get("r49999".into())),
        Ok(crate::sandbox::hostapi::KubeResponse::Empty)
    );
    assert_eq!(
        replayer.answer(&get("r0".into())),
        Ok(crate::sandbox::hostapi::KubeResponse::Empty),
        "skipped over: its recorded answer"
    );
    // Scanning the recording for each call takes minutes here.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(replayer.finish().len(), 5_002);
}
