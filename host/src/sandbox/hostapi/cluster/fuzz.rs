//! The host API's JSON inputs (objects and the three patch kinds) under
//! arbitrary guest text: never a panic, only an `invalid` refusal or a
//! value of the call's kind, and refusals that quote at most a bounded
//! piece of the input. `PROPTEST_CASES` scales the run (see
//! docs/RELIABILITY.md for the long one).

use prometheus_client::metrics::counter::Counter;
use proptest::prelude::*;

use super::counters::CallCounters;
use super::payload::{SentPatch, to_patch, write_body};
use super::send::within_response_limit;
use crate::control::metrics::{HostApiLabels, PluginFamily};
use crate::sandbox::hostapi::error::ApiError;
use crate::sandbox::hostapi::request::{MAX_PAYLOAD, ObjectPatch};

fn config_map() -> kube::api::ApiResource {
    kube::api::ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
    }
}

/// Arbitrary JSON, biased to the shapes the host looks into.
fn json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(serde_json::Value::from),
        ".{0,40}".prop_map(serde_json::Value::from),
        "[a-z]{1100,1200}".prop_map(serde_json::Value::from),
        prop_oneof![Just("v1"), Just("ConfigMap"), Just("default"), Just("add")]
            .prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("apiVersion".to_string()),
                    Just("kind".to_string()),
                    Just("metadata".to_string()),
                    Just("namespace".to_string()),
                    Just("name".to_string()),
                    Just("op".to_string()),
                    Just("path".to_string()),
                    Just("value".to_string()),
                    Just("from".to_string()),
                    ".{0,12}",
                ],
                inner,
                0..8
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Guest text: raw strings, JSON, and JSON with a long tail.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,200}",
        json().prop_map(|v| v.to_string()),
        (json(), "[\\x00-\\x7f]{0,4}").prop_map(|(v, tail)| format!("{v}{tail}")),
        ".{0,64}".prop_map(|k| format!(r#"{{"apiVersion":"v1","kind":"{}"}}"#, k.repeat(40))),
    ]
}

fn check(result: Result<impl Sized, ApiError>) -> Result<(), TestCaseError> {
    if let Err(e) = result {
        prop_assert!(matches!(e, ApiError::Invalid(_)), "not `invalid`: {e:?}");
        prop_assert!(e.to_string().len() <= 1024, "an unbounded message: {e}");
    }
    Ok(())
}

proptest! {
    #[test]
    fn objects_are_refused_or_of_the_calls_kind(json in text(), namespaced in any::<bool>()) {
        let ar = config_map();
        let result = write_body(json.clone(), &ar, namespaced.then_some("default"));
        if let Ok(body) = &result {
            let obj: serde_json::Value = serde_json::from_slice(body).expect("checked JSON");
            prop_assert_eq!(obj["kind"].as_str(), Some("ConfigMap"));
            prop_assert_eq!(obj["apiVersion"].as_str(), Some("v1"));
            if namespaced {
                prop_assert!(matches!(obj["metadata"]["namespace"].as_str(), None | Some("default")));
            }
        }
        check(result)?;
    }

    #[test]
    fn patches_are_refused_or_well_formed(body in text(), manager in ".{0,200}", force in any::<bool>()) {
        let ar = config_map();
        check(to_patch("p", ObjectPatch::merge(body.clone()), &ar))?;
        check(to_patch("p", ObjectPatch::json(body.clone()), &ar))?;
        let apply = ObjectPatch::Apply { body: body.into(), field_manager: manager, force };
        if let Ok((params, SentPatch::Apply(v))) = to_patch("p", apply.clone(), &ar) {
            let v: serde_json::Value = serde_json::from_str(v.get()).expect("checked JSON");
            prop_assert_eq!(v["kind"].as_str(), Some("ConfigMap"));
            prop_assert!(params.field_manager.is_some_and(|m| m.len() <= 128));
        }
        check(to_patch("p", apply, &ar))?;
    }
}

#[test]
fn call_counters_count_every_call_under_its_own_labels() {
    let family = PluginFamily::<HostApiLabels, Counter>::default();
    let counters = CallCounters::default();
    for _ in 0..3 {
        counters.inc(&family, "p", "get", "configmaps", "ok");
    }
    counters.inc(&family, "p", "get", "configmaps", "not-found");
    counters.inc(&family, "p", "patch", "configmaps", "ok");
    counters.inc(&family, "p", "get", "secrets", "ok");
    let value = |verb: &str, resource: &str, code: &str| {
        family
            .get_or_create(&HostApiLabels {
                plugin: "p".into(),
                verb: verb.into(),
                resource: resource.into(),
                code: code.into(),
            })
            .get()
    };
    assert_eq!(value("get", "configmaps", "ok"), 3);
    assert_eq!(value("get", "configmaps", "not-found"), 1);
    assert_eq!(value("patch", "configmaps", "ok"), 1);
    assert_eq!(value("get", "secrets", "ok"), 1);
    assert_eq!(value("patch", "secrets", "ok"), 0);
}

#[test]
fn a_merge_patch_is_sent_as_the_guest_wrote_it() {
    let body = r#"{"status":{"observed":7,"note":"\u00e9 \"q\""}}"#;
    let (_, patch) = to_patch("p", ObjectPatch::merge(body), &config_map()).unwrap();
    let SentPatch::Merge(raw) = &patch else {
        panic!("not a merge patch: {patch:?}")
    };
    assert_eq!(raw.get(), body);
    let sent = serde_json::to_string(raw).unwrap();
    assert_eq!(sent, body);
    let e = to_patch("p", ObjectPatch::merge(r#"{"status":"#), &config_map());
    assert!(
        matches!(&e, Err(ApiError::Invalid(m)) if m.starts_with("patch is not valid JSON")),
        "{e:?}"
    );
}

#[test]
fn a_json_patch_is_refused_as_bad_json_or_as_no_patch() {
    let refusal = |body: &str| match to_patch("p", ObjectPatch::json(body), &config_map()) {
        Err(ApiError::Invalid(m)) => m,
        other => panic!("{body}: {other:?}"),
    };
    assert!(refusal(r#"[{"op":"add""#).starts_with("patch is not valid JSON"));
    assert!(refusal(r#"[] x"#).starts_with("patch is not valid JSON"));
    assert!(refusal(r#"{"op":"add"}"#).starts_with("not a JSON patch"));
    assert!(refusal(r#"[{"op":"jump","path":"/a"}]"#).starts_with("not a JSON patch"));
    let ok = to_patch(
        "p",
        ObjectPatch::json(r#"[{"op":"add","path":"/data/a","value":"b"}]"#),
        &config_map(),
    );
    assert!(matches!(ok, Ok((_, SentPatch::Json(_)))), "{ok:?}");
}

#[test]
fn an_apply_body_naming_its_kind_twice_is_refused() {
    // serde_json's tree keeps the last of two keys; an API server may
    // read either, so the host does not guess which one it checked.
    for body in [
        r#"{"apiVersion":"v1","kind":"Secret","kind":"ConfigMap"}"#,
        r#"{"apiVersion":"v1","kind":"ConfigMap","kind":"Secret"}"#,
        r#"{"apiVersion":"v1","apiVersion":"v1","kind":"ConfigMap"}"#,
    ] {
        let apply = ObjectPatch::Apply {
            body: body.into(),
            field_manager: String::new(),
            force: false,
        };
        let e = to_patch("p", apply, &config_map());
        assert!(
            matches!(&e, Err(ApiError::Invalid(m)) if m.contains("must name the call's kind")),
            "{body}: {e:?}"
        );
    }
    let apply = ObjectPatch::Apply {
        body: r#"{"apiVersion":"v1","kind":"ConfigMap","data":{"kind":"x"}}"#.into(),
        field_manager: String::new(),
        force: true,
    };
    let (params, patch) = to_patch("p", apply, &config_map()).unwrap();
    assert!(matches!(patch, SentPatch::Apply(_)));
    assert_eq!(params.field_manager.as_deref(), Some("wasmctrl-p"));
}

#[test]
fn a_huge_kind_is_quoted_back_cut() {
    let kind = "K".repeat(1 << 20);
    let json = format!(r#"{{"apiVersion":"v1","kind":"{kind}"}}"#);
    let e = write_body(json, &config_map(), None).unwrap_err();
    assert!(e.to_string().len() < 400, "{} bytes", e.to_string().len());
}

/// (Whether an answer is one JSON object: `answer.rs`.)
#[test]
fn an_answer_over_the_payload_ceiling_is_refused() {
    let at_limit = format!(r#"{{"data":"{}"}}"#, "x".repeat(MAX_PAYLOAD - 11));
    assert_eq!(at_limit.len(), MAX_PAYLOAD);
    within_response_limit(&at_limit).unwrap();
    let huge = format!(r#"{{"data":"{}"}}"#, "x".repeat(MAX_PAYLOAD));
    let e = within_response_limit(&huge).unwrap_err();
    assert!(e.to_string().contains("exceeds the host's limit"), "{e}");
}
