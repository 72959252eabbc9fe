//! A build session, as `wasmctrl dev --watch` holds one: a JavaScript
//! plugin is componentized in the session's warm componentize-js worker,
//! a bundle that throws while it is pre-initialized fails only its own
//! build (with the plugin's error), and the worker keeps building after it.

use std::path::Path;

use wasmctrl::tools::build::{self, BuildError, BuildOptions, BuildSession, Language};

use crate::new_cli::toolchains;

/// A JavaScript plugin with no dependencies whose entry module is `body`.
fn plugin(dir: &Path, body: &str) {
    std::fs::write(
        dir.join("package.json"),
        r#"{ "name": "warm", "private": true, "type": "module", "wasmctrl": { "entry": "index.js" } }"#,
    )
    .unwrap();
    std::fs::write(dir.join("index.js"), body).unwrap();
}

const STUB: &str = "export function metadata() {}\nexport function reconcile() {}\n";

#[test]
fn a_session_builds_javascript_in_its_warm_worker_and_survives_a_failed_build() {
    let dir = tempfile::tempdir().unwrap();
    let session = BuildSession::new();
    let options = BuildOptions {
        language: Some(Language::JavaScript),
        toolchains: Some(toolchains()),
        session: Some(session.clone()),
        ..BuildOptions::default()
    };
    assert!(!session.js_worker_running());

    // The session's first build starts the worker; this one fails in it.
    plugin(
        dir.path(),
        &format!("throw new Error('refused at init: 42');\n{STUB}"),
    );
    let error = build::build(dir.path(), &options).expect_err("a bundle that throws");
    let text = error.to_string();
    assert!(
        matches!(
            error,
            BuildError::Step {
                step: "componentize-js",
                ..
            }
        ),
        "{text}"
    );
    assert!(text.contains("refused at init: 42"), "{text}");
    assert!(text.contains("warm"), "the error names the worker: {text}");
    assert!(
        session.js_worker_running(),
        "the worker outlives a failed build"
    );

    // The next build runs in the same, already warm worker.
    plugin(dir.path(), &format!("export const edited = 1;\n{STUB}"));
    let built = build::build(dir.path(), &options).expect("a build after the failure");
    assert!(built.size > 0);
    assert!(session.js_worker_running());
}
