//! A plugin's candidate: shadow and canary.

use super::*;

#[test]
fn a_candidate_is_checked_like_a_plugin_and_its_mode_like_its_section() {
    let with = |candidate: &str| {
        FULL.replace(
            "    settings: { replicasDefault: 2 }\n",
            &format!(
                "    settings: {{ replicasDefault: 2 }}\n    skipUnchanged: true\n{candidate}"
            ),
        )
    };
    let shadow = parse(&with(
        "    candidate: { path: v2.wasm, mode: shadow, maxConcurrentShadows: 3 }\n",
    ))
    .unwrap();
    let p = &shadow.plugins[0];
    assert!(p.skip_unchanged);
    assert_eq!(p.concurrency(), 2 + 3, "shadow runs take instance slots");
    let c = p.candidate_plugin().unwrap();
    assert_eq!(c.path, Some(PathBuf::from("v2.wasm")));
    assert_eq!(c.settings, p.settings, "the plugin's settings by default");
    assert_eq!(c.candidate, None);

    let canary = parse(&with(
        "    candidate: { path: v2.wasm, mode: canary, settings: { v: 2 }, canary: { percent: 10, maxP99Ratio: 2 } }\n",
    ))
    .unwrap();
    let k = canary.plugins[0]
        .candidate
        .as_ref()
        .unwrap()
        .canary
        .clone()
        .unwrap();
    assert_eq!(
        (k.percent, k.window, k.min_reconciles),
        (10, Duration::from_secs(60), 20)
    );
    assert_eq!(k.max_failure_rate_increase, 0.1);
    assert_eq!(
        canary.plugins[0].concurrency(),
        2,
        "a canary shares the workers"
    );
    assert_eq!(
        canary.plugins[0].candidate_plugin().unwrap().settings,
        serde_json::json!({ "v": 2 })
    );

    for (candidate, expected) in [
        (
            "{ mode: shadow }",
            "plugins[0].candidate.source (plugin \"webapp\"): is required",
        ),
        (
            "{ path: v2.wasm, mode: canary }",
            "candidate.canary (plugin \"webapp\"): is required with mode: canary",
        ),
        (
            "{ path: v2.wasm, mode: shadow, canary: { percent: 5 } }",
            "only applies to mode: canary",
        ),
        (
            "{ path: v2.wasm, mode: canary, canary: { percent: 100 } }",
            "candidate.canary.percent (plugin \"webapp\"): must be between 1 and 99",
        ),
        (
            "{ path: v2.wasm, mode: canary, canary: { percent: 5, maxFailureRateIncrease: 2 } }",
            "must be between 0 and 1",
        ),
        (
            "{ path: v2.wasm, mode: shadow, settings: [1] }",
            "candidate.settings (plugin \"webapp\"): must be a mapping",
        ),
        (
            "{ path: v2.wasm, mode: shadow, maxConcurrentShadows: 0 }",
            "candidate.maxConcurrentShadows",
        ),
        ("{ path: v2.wasm, mode: blue }", "unknown variant"),
    ] {
        let err = parse(&with(&format!("    candidate: {candidate}\n")))
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "{candidate}: {err}");
    }
}
