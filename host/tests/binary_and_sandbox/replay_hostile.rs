//! `wasmctrl replay` on a transcript file it should not trust: refused
//! with status 2 and one line naming the file, the line and the problem,
//! having read no more than the reader's bounds. The reader's properties
//! over any input are `ops::transcript::fuzz` in the library.

use std::path::Path;
use std::process::Command;

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
            "error: {}:1: not a transcript: the line nests arrays and objects more than 128 levels deep",
            file.display()
        ),
    );
}

/// A line within its byte bound made of tiny values would be a tree tens
/// of times its size: it is refused by counting before any tree is built,
/// and the reader stays within a few times the line's own bytes.
#[test]
fn a_line_of_millions_of_tiny_values_is_refused_before_it_becomes_a_tree() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.jsonl");
    // 20 Mi zeros in 40 MiB: past the 16 Mi values a line may hold.
    let values = 20 << 20;
    let mut line = String::with_capacity(2 * values + 2);
    line.push('[');
    line.push_str(&"0,".repeat(values - 1));
    line.push_str("0]\n");
    std::fs::write(&file, &line).unwrap();
    let (code, stderr, peak) = replay_measured(&file);
    assert_eq!(code, Some(2), "{stderr:.2000}");
    let expected = format!(
        "error: {}:1: not a transcript: the line holds more than 16777216 JSON values",
        file.display()
    );
    let stderr = stderr.trim_end();
    assert!(
        stderr.starts_with(&expected) && !stderr.contains('\n') && stderr.len() <= 1024,
        "{stderr:.2000}"
    );
    // A tree of those values would be over 600 MiB.
    assert!(
        peak < 256 << 20,
        "the reader peaked at {} MiB for a 40 MiB line",
        peak >> 20
    );
}

/// Status, stderr and peak resident memory (bytes) of `wasmctrl replay
/// file`. A python3 parent measures the peak: a child of this process
/// would be charged with this process's own high-water mark, which exec
/// keeps.
fn replay_measured(file: &Path) -> (Option<i32>, String, u64) {
    const MEASURE: &str = "import resource, subprocess, sys\n\
        code = subprocess.run(sys.argv[1:]).returncode\n\
        print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n\
        sys.exit(code if code >= 0 else 128 - code)\n";
    let out = Command::new("python3")
        .args(["-c", MEASURE])
        .arg(env!("CARGO_BIN_EXE_wasmctrl"))
        .arg("replay")
        .arg(file)
        .args(["--plugin", artifacts::MISBEHAVE])
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Linux gives ru_maxrss in KiB.
    let peak_kib: u64 = stdout
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak measured: {stdout:.2000}"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        peak_kib * 1024,
    )
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
