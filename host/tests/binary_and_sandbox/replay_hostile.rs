//! `wasmctrl replay` on a transcript file it should not trust: refused
//! with status 2 and one line naming the file, the line and the problem,
//! having read no more than the reader's bounds. The reader's properties
//! over any input are `ops::transcript::fuzz` in the library.

use std::path::Path;

use wasmctrl_plugin_artifacts as artifacts;

use crate::binary::wasmctrl;

/// Status and stderr of `wasmctrl replay file`.
fn replay(file: &Path) -> (Option<i32>, String) {
    let out = wasmctrl()
        .arg("replay")
        .arg(file)
        .args(["--plugin", artifacts::MISBEHAVE])
        .output()
        .expect("wasmctrl runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn transcript(verb: &str, timeout_ms: u64) -> String {
    format!(
        r#"{{"version":1,"plugin":"misbehave","digest":"sha256:00","key":{{"namespace":"default","name":"kube"}},"attempt":0,"timeoutMs":{timeout_ms},"settings":{{}},"recordedAt":"2026-12-03T12:00:00.000Z","durationMs":1,"calls":[{{"request":{{"verb":"{verb}","kind":{{"group":"","version":"v1","kind":"ConfigMap"}},"namespace":"default","name":"kube"}},"response":"empty"}}],"context":[],"result":{{"outcome":"done"}}}}"#
    )
}

/// Refused with status 2 and one line of at most 1 KiB starting `start`.
fn assert_refused(file: &Path, start: &str) {
    let (code, stderr) = replay(file);
    assert_eq!(code, Some(2), "{stderr:.2000}");
    let line = stderr.trim_end();
    assert!(
        !line.contains('\n') && line.len() <= 1024,
        "one bounded line: {line:.2000}"
    );
    assert!(line.starts_with(start), "{line:.2000}");
}

#[test]
fn a_64_mib_line_is_refused_quoting_a_bounded_piece_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    let verb = format!("get\\n{}", "x".repeat(64 << 20));
    std::fs::write(&file, format!("{}\n", transcript(&verb, 1000))).unwrap();
    assert_refused(
        &file,
        &format!(
            "error: {}:1: not a transcript: unknown variant `get\\nxxx",
            file.display()
        ),
    );
}

#[test]
fn a_line_nested_64_mib_deep_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    std::fs::write(&file, "[".repeat(64 << 20)).unwrap();
    assert_refused(
        &file,
        &format!(
            "error: {}:1: not a transcript: recursion limit exceeded",
            file.display()
        ),
    );
}

#[test]
fn an_endless_file_is_refused_at_the_line_bound() {
    assert_refused(
        Path::new("/dev/zero"),
        "error: /dev/zero:1: not a transcript: the line is over 268435456 bytes",
    );
}

#[test]
fn a_timeout_no_recording_holds_is_refused_before_the_replay_waits_on_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    std::fs::write(
        &file,
        format!(
            "{}\n\n{}\n",
            transcript("get", 1000),
            transcript("get", u64::MAX)
        ),
    )
    .unwrap();
    assert_refused(
        &file,
        &format!(
            "error: {}:3: not a transcript: timeoutMs is 18446744073709551615, more than the largest reconcileTimeout (3600000)",
            file.display()
        ),
    );
}
