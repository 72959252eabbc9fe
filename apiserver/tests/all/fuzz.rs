//! Property test over request decoding: JSON, YAML and protobuf bodies, JSON
//! patches, merge and strategic merge patches, apply patches, label and
//! field selectors, all sent over real HTTPS. Every answer must be a
//! metav1.Status-shaped 4xx (or a success), never a 5xx, a dropped
//! connection or a dead server.
//!
//! Runs for `APISERVER_FUZZ_SECS` seconds (3 by default); set
//! `APISERVER_FUZZ_SECS=600` for a longer search.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};

use crate::common::Harness;

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";

/// One request to send.
#[derive(Debug, Clone)]
struct Req {
    method: &'static str,
    path: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        "[a-z$/~0-9 .:-]{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("$patch"),
            Just("$retainKeys"),
            Just("$setElementOrder/containers"),
            Just("$deleteFromPrimitiveList/finalizers"),
            Just("delete"),
            Just("replace"),
            Just("merge"),
        ]
        .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        let key = prop_oneof![
            "[a-z$]{1,8}".boxed(),
            prop_oneof![
                Just("metadata".to_string()),
                Just("name".to_string()),
                Just("labels".to_string()),
                Just("spec".to_string()),
                Just("containers".to_string()),
                Just("data".to_string()),
                Just("$patch".to_string()),
                Just("$retainKeys".to_string()),
                Just("$setElementOrder/containers".to_string()),
                Just("finalizers".to_string()),
                Just("managedFields".to_string()),
            ]
            .boxed(),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key, inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn pointer() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("data"),
        Just("metadata"),
        Just("labels"),
        Just("finalizers"),
        Just("spec"),
        Just("x"),
        Just("-"),
        Just("0"),
        Just("01"),
        Just("99999999999999999999"),
        Just("~0"),
        Just("~1"),
        Just("~2"),
        Just(""),
    ];
    prop::collection::vec(token, 0..5).prop_map(|t| {
        if t.is_empty() {
            String::new()
        } else {
            format!("/{}", t.join("/"))
        }
    })
}

fn json_patch() -> impl Strategy<Value = Value> {
    let op = (
        prop_oneof![
            Just("add"),
            Just("remove"),
            Just("replace"),
            Just("move"),
            Just("copy"),
            Just("test"),
            Just("frob"),
        ],
        pointer(),
        pointer(),
        json_value(),
        any::<u8>(),
    )
        .prop_map(|(op, path, from, value, shape)| {
            let mut o = json!({"op": op, "path": path, "from": from, "value": value});
            // Sometimes drop or mistype members.
            match shape % 5 {
                0 => {
                    o.as_object_mut().unwrap().remove("value");
                }
                1 => o["path"] = json!(7),
                2 => {
                    o.as_object_mut().unwrap().remove("from");
                }
                _ => {}
            }
            o
        });
    prop_oneof![
        prop::collection::vec(op, 0..12).prop_map(Value::Array),
        json_value(),
    ]
}

fn selector() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            "[a-z0-9./-]{0,6}".boxed(),
            prop_oneof![
                Just("="),
                Just("=="),
                Just("!="),
                Just("!"),
                Just(","),
                Just(" in "),
                Just(" notin "),
                Just("("),
                Just(")"),
                Just("metadata.name"),
                Just("metadata.namespace"),
                Just("status.phase"),
                Just("\u{0}"),
                Just("é"),
            ]
            .prop_map(str::to_string)
            .boxed(),
        ],
        0..10,
    )
    .prop_map(|parts| parts.concat())
}

/// Bytes shaped like protobuf: random fields of every wire type, sometimes
/// nested, sometimes truncated.
fn protobuf_fields(depth: u32) -> BoxedStrategy<Vec<u8>> {
    let scalar = (
        1u64..20,
        0u8..6,
        any::<u64>(),
        prop::collection::vec(any::<u8>(), 0..12),
    )
        .prop_map(|(field, wire, n, bytes)| {
            let mut out = Vec::new();
            varint(&mut out, (field << 3) | u64::from(wire));
            match wire {
                0 => varint(&mut out, n),
                1 => out.extend_from_slice(&n.to_le_bytes()),
                2 => {
                    varint(&mut out, bytes.len() as u64);
                    out.extend_from_slice(&bytes);
                }
                5 => out.extend_from_slice(&(n as u32).to_le_bytes()),
                _ => out.extend_from_slice(&bytes),
            }
            out
        });
    let fields = prop::collection::vec(scalar, 0..8).prop_map(|f| f.concat());
    if depth == 0 {
        return fields.boxed();
    }
    (fields, 1u64..20, protobuf_fields(depth - 1), fields_tail())
        .prop_map(|(mut head, field, nested, truncate)| {
            varint(&mut head, (field << 3) | 2);
            varint(&mut head, nested.len() as u64);
            head.extend_from_slice(&nested);
            head.truncate(head.len().saturating_sub(truncate));
            head
        })
        .boxed()
}

fn fields_tail() -> impl Strategy<Value = usize> {
    prop_oneof![8 => Just(0usize), 1 => 1usize..4]
}

fn varint(out: &mut Vec<u8>, mut n: u64) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn protobuf_body() -> impl Strategy<Value = Vec<u8>> {
    let kind = prop_oneof![
        Just(("v1", "ConfigMap")),
        Just(("v1", "Secret")),
        Just(("v1", "Namespace")),
        Just(("apps/v1", "Deployment")),
        Just(("v1", "Service")),
        Just(("batch/v1", "CronJob")),
        Just(("v1", "Pod")),
    ];
    (kind, protobuf_fields(2), any::<bool>()).prop_map(|((av, kind), raw, magic)| {
        let mut type_meta = Vec::new();
        for (field, s) in [(1u64, av), (2, kind)] {
            varint(&mut type_meta, (field << 3) | 2);
            varint(&mut type_meta, s.len() as u64);
            type_meta.extend_from_slice(s.as_bytes());
        }
        let mut body = if magic { b"k8s\0".to_vec() } else { Vec::new() };
        varint(&mut body, (1 << 3) | 2);
        varint(&mut body, type_meta.len() as u64);
        body.extend_from_slice(&type_meta);
        varint(&mut body, (2 << 3) | 2);
        varint(&mut body, raw.len() as u64);
        body.extend_from_slice(&raw);
        body
    })
}

fn request() -> impl Strategy<Value = Req> {
    let text_body = prop_oneof![
        json_value().prop_map(|v| v.to_string().into_bytes()),
        prop::collection::vec(any::<u8>(), 0..64),
        "[{}\\[\\]\":,a-z0-9 \\n&*!-]{0,40}".prop_map(String::into_bytes),
    ];
    prop_oneof![
        text_body.clone().prop_map(|body| Req {
            method: "POST",
            path: CMS.into(),
            content_type: Some("application/json"),
            body,
        }),
        text_body.clone().prop_map(|body| Req {
            method: "POST",
            path: CMS.into(),
            content_type: Some("application/yaml"),
            body,
        }),
        text_body.clone().prop_map(|body| Req {
            method: "PUT",
            path: format!("{CMS}/target"),
            content_type: None,
            body,
        }),
        json_patch().prop_map(|p| Req {
            method: "PATCH",
            path: format!("{CMS}/target"),
            content_type: Some("application/json-patch+json"),
            body: p.to_string().into_bytes(),
        }),
        json_value().prop_map(|p| Req {
            method: "PATCH",
            path: format!("{CMS}/target"),
            content_type: Some("application/merge-patch+json"),
            body: p.to_string().into_bytes(),
        }),
        json_value().prop_map(|p| Req {
            method: "PATCH",
            path: format!("{DEPLOYS}/target"),
            content_type: Some("application/strategic-merge-patch+json"),
            body: p.to_string().into_bytes(),
        }),
        (json_value(), text_body).prop_map(|(p, raw)| Req {
            method: "PATCH",
            path: format!("{DEPLOYS}/applied?fieldManager=fuzz"),
            content_type: Some("application/apply-patch+yaml"),
            body: if raw.len() % 2 == 0 {
                raw
            } else {
                p.to_string().into_bytes()
            },
        }),
        selector().prop_map(|s| Req {
            method: "GET",
            path: format!("{CMS}?labelSelector={}", enc(&s)),
            content_type: None,
            body: Vec::new(),
        }),
        selector().prop_map(|s| Req {
            method: "GET",
            path: format!("/api/v1/pods?fieldSelector={}", enc(&s)),
            content_type: None,
            body: Vec::new(),
        }),
        protobuf_body().prop_map(|body| Req {
            method: "POST",
            path: CMS.into(),
            content_type: Some("application/vnd.kubernetes.protobuf"),
            body,
        }),
    ]
}

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Puts the patch targets back if a case deleted or broke them.
async fn reset_targets(h: &Harness) {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "target"},
                    "data": {"a": "1"}});
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "target"},
        "spec": {"selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    for (path, body) in [(CMS, cm), (DEPLOYS, deploy)] {
        let (code, _) = h.raw("GET", &format!("{path}/target"), None, "").await;
        if code == 404 {
            let (code, status) = h.raw("POST", path, None, &body.to_string()).await;
            assert_eq!(code, 201, "{status}");
        }
    }
}

async fn send(client: &kube::Client, req: &Req) -> Result<(u16, Vec<u8>), String> {
    let mut b = http::Request::builder().method(req.method).uri(&req.path);
    if let Some(ct) = req.content_type {
        b = b.header("content-type", ct);
    }
    let r = b.body(req.body.clone()).map_err(|e| e.to_string())?;
    let resp = tokio::time::timeout(
        Duration::from_secs(30),
        client.send(r.map(kube::client::Body::from)),
    )
    .await
    .map_err(|_| "no answer within 30 s".to_string())?
    .map_err(|e| format!("transport error (server task panicked?): {e}"))?;
    let code = resp.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    Ok((code, bytes.to_vec()))
}

#[test]
fn garbage_requests_get_4xx_and_never_break_the_server() {
    let secs: u64 = std::env::var("APISERVER_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let h = rt.block_on(Harness::start());
    let client = rt.block_on(h.client());
    rt.block_on(reset_targets(&h));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let by_code = std::cell::RefCell::new(std::collections::BTreeMap::<u16, u64>::new());
    while Instant::now() < deadline {
        let mut runner = TestRunner::new(Config {
            cases: 64,
            failure_persistence: None,
            ..Config::default()
        });
        let result = runner.run(&request(), |req| {
            let (code, body) = rt
                .block_on(send(&client, &req))
                .map_err(TestCaseError::fail)?;
            *by_code.borrow_mut().entry(code).or_default() += 1;
            prop_assert!(
                code < 500,
                "{req:?} answered {code}: {}",
                String::from_utf8_lossy(&body)
            );
            if code >= 400 {
                let status: Value = serde_json::from_slice(&body).map_err(|e| {
                    TestCaseError::fail(format!("{req:?}: {code} without a Status: {e}"))
                })?;
                prop_assert_eq!(&status["kind"], "Status", "{:?}", req);
                prop_assert_eq!(status["code"].as_u64(), Some(u64::from(code)));
            }
            if code == 404 {
                rt.block_on(reset_targets(&h));
            }
            Ok(())
        });
        if let Err(e) = result {
            panic!("{e}");
        }
    }
    let by_code = by_code.into_inner();
    let cases: u64 = by_code.values().sum();
    eprintln!("fuzz: {cases} requests in {secs} s, answers by code: {by_code:?}");
    // Still serving.
    let (code, _) = rt.block_on(h.raw("GET", "/version", None, ""));
    assert_eq!(code, 200);
}
