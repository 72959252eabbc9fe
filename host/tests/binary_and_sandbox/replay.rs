//! `wasmctrl replay` as an operator author's CI runs it: transcripts in,
//! a report out, exit status 0 (no divergence), 1 (divergence) or 2 (the
//! replay could not run).

use std::path::Path;
use std::process::Output;

use wasmctrl_plugin_artifacts as artifacts;

use crate::binary::wasmctrl;

/// A transcript of one `misbehave` reconcile of `name` in `default`.
fn transcript(name: &str, settings: &str, calls: &str, result: &str) -> String {
    format!(
        r#"{{"version":1,"plugin":"misbehave","digest":"sha256:00","key":{{"namespace":"default","name":"{name}"}},"attempt":0,"timeoutMs":10000,"settings":{settings},"recordedAt":"2026-12-03T12:00:00.000Z","durationMs":1,"calls":[{calls}],"context":[],"result":{result}}}"#
    )
}

const GET_KUBE: &str = r#"{"request":{"verb":"get","kind":{"group":"","version":"v1","kind":"ConfigMap"},"namespace":"default","name":"kube"},"response":{"object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kube","namespace":"default"}}}}"#;

fn replay(dir: &Path, lines: &[String], extra: &[&str]) -> (Output, String) {
    let file = dir.join("misbehave.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let out = wasmctrl()
        .arg("replay")
        .arg(&file)
        .args(["--plugin", artifacts::MISBEHAVE])
        .args(extra)
        .output()
        .expect("wasmctrl runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

#[test]
fn a_build_that_does_what_was_recorded_replays_clean() {
    let dir = tempfile::tempdir().unwrap();
    let (out, text) = replay(
        dir.path(),
        &[
            transcript("kube", "{}", GET_KUBE, r#"{"outcome":"done"}"#),
            // Loaded with the recorded settings: they decide the result.
            transcript(
                "settings",
                r#"{"ok":false}"#,
                "",
                r#"{"outcome":"permanent","message":"settings say not ok"}"#,
            ),
            transcript("settings", r#"{"ok":true}"#, "", r#"{"outcome":"done"}"#),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("3 reconciles replayed against sha256:"),
        "{text}"
    );
    assert!(text.ends_with(": 0 diverged\n"), "{text}");
}

#[test]
fn a_divergence_fails_with_status_1_and_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let (out, text) = replay(
        dir.path(),
        &[
            transcript("kube", "{}", GET_KUBE, r#"{"outcome":"requeue"}"#),
            transcript("kube", "{}", "", r#"{"outcome":"done"}"#),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("misbehave.jsonl:1 default/kube (attempt 0): 1 divergence\n  different result: recorded requeue; replayed done"),
        "{text}"
    );
    assert!(
        text.contains("misbehave.jsonl:2 default/kube (attempt 0): 2 divergences\n  call 1: different call: replayed get v1 ConfigMap default/kube; the recording has no more calls"),
        "{text}"
    );
    assert!(text.ends_with(": 2 diverged\n"), "{text}");
}

#[test]
fn the_report_is_json_with_json_and_a_key_filter_picks_reconciles() {
    let dir = tempfile::tempdir().unwrap();
    let (out, text) = replay(
        dir.path(),
        &[
            transcript("kube", "{}", "", r#"{"outcome":"done"}"#),
            transcript("print", "{}", "", r#"{"outcome":"done"}"#),
        ],
        &["--json", "--key", "default/print"],
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["reconciles"].as_array().unwrap().len(),
        1,
        "{report}"
    );
    assert_eq!(report["reconciles"][0]["key"], "default/print");
    assert_eq!(report["reconciles"][0]["replayed"]["outcome"], "done");
}

#[test]
fn a_file_that_is_not_a_transcript_fails_with_status_2_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let (out, text) = replay(
        dir.path(),
        &[
            transcript("kube", "{}", "", r#"{"outcome":"done"}"#),
            "{oops".into(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("misbehave.jsonl:2: not a transcript"),
        "{text}"
    );
}

/// The transcript the webapp's unit tests seed their fake cluster from
/// (`FakeCluster::from_transcript`) was recorded by this host: it stays a
/// valid transcript, and it is a regression test of the webapp build.
#[test]
fn the_webapp_transcript_fixture_replays_clean_and_a_relabelled_build_diverges() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../plugins/webapp/src/testdata/recorded.jsonl"
    );
    let run = |plugin: &str| {
        let out = wasmctrl()
            .args(["replay", fixture, "--plugin", plugin])
            .output()
            .expect("wasmctrl runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    };
    let (code, text) = run(artifacts::WEBAPP);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = run(artifacts::WEBAPP_RELABEL);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("call 2: different arguments: patch (apply) apps/v1 Deployment default/hello\n      /patch/body/metadata/labels/app.kubernetes.io~1version: ∅ → \"relabelled\""),
        "{text}"
    );
}
