//! A guest that makes the outbound HTTP requests its settings give for the
//! key it reconciles, to drive the host's outbound checks from a real
//! component: `settings.cases[<key name>]` is the request (method, URL,
//! how many times, a body of how many bytes, headers, the status it
//! expects; `echo` fails the reconcile with what the server answered, so a
//! test sees what the guest saw; `reveal` names a secret to reveal first),
//! and `settings.declare` what its metadata declares.

use std::collections::HashMap;

use wasmctrl_sdk::k8s_openapi::api::core::v1::ConfigMap;
use wasmctrl_sdk::serde_json;
use wasmctrl_sdk::{Action, Context, Error, Metadata, ObjectKey, Reconciler, Resource, http};

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Settings {
    declare: Vec<Declared>,
    cases: HashMap<String, Case>,
}

#[derive(serde::Deserialize)]
struct Declared {
    url: String,
    #[serde(default)]
    methods: Vec<String>,
}

#[derive(serde::Deserialize)]
struct Case {
    #[serde(default = "get")]
    method: String,
    url: String,
    #[serde(default = "one")]
    repeat: u32,
    #[serde(default)]
    body_bytes: usize,
    #[serde(default = "ok")]
    expect: u16,
    #[serde(default)]
    headers: Vec<(String, String)>,
    #[serde(default)]
    echo: bool,
    #[serde(default)]
    reveal: Option<String>,
    /// Fail with the revealed value in the error (the host must redact it).
    #[serde(default)]
    report_reveal: bool,
}

fn get() -> String {
    "GET".into()
}
fn one() -> u32 {
    1
}
fn ok() -> u16 {
    200
}

fn settings() -> Settings {
    let json = wasmctrl_sdk::bindings::wasmctrl::reconciler::context::settings();
    serde_json::from_str(&json).unwrap_or_default()
}

struct Outbound;

impl Reconciler for Outbound {
    fn metadata() -> Metadata {
        let mut m = Metadata::new("outbound", "0.1.0", ConfigMap::gvk());
        for d in settings().declare {
            let methods: Vec<&str> = d.methods.iter().map(String::as_str).collect();
            m = m.outbound(&d.url, &methods);
        }
        m
    }

    fn reconcile(key: ObjectKey, _ctx: &Context) -> Result<Action, Error> {
        let settings = settings();
        let Some(case) = settings.cases.get(&key.name) else {
            return Err(Error::permanent(format!("no case {:?}", key.name)));
        };
        if let Some(name) = &case.reveal {
            let value = wasmctrl_sdk::secrets::reveal(name)?;
            wasmctrl_sdk::info!("revealed {name}: {} bytes", value.len());
            if case.report_reveal {
                return Err(Error::permanent(format!("revealed {name} = {value}")));
            }
        }
        let mut request =
            http::Request::new(&case.method, &case.url).body(vec![b'x'; case.body_bytes]);
        for (name, value) in &case.headers {
            request = request.header(name, value);
        }
        for i in 0..case.repeat {
            let answer = http::send(&request)?;
            if case.echo {
                let headers: Vec<String> = answer
                    .headers
                    .iter()
                    .map(|(n, v)| format!("{n}: {}", String::from_utf8_lossy(v)))
                    .collect();
                return Err(Error::permanent(format!(
                    "answered {}; headers {}; body {}",
                    answer.status,
                    headers.join(", "),
                    String::from_utf8_lossy(&answer.body)
                )));
            }
            if answer.status != case.expect {
                return Err(Error::permanent(format!(
                    "request {i}: {} {} answered {} ({} bytes), not {}",
                    case.method,
                    case.url,
                    answer.status,
                    answer.body.len(),
                    case.expect
                )));
            }
            wasmctrl_sdk::info!(
                "{} {}: {} ({} bytes)",
                case.method,
                case.url,
                answer.status,
                answer.body.len()
            );
        }
        Ok(Action::done())
    }
}

wasmctrl_sdk::export_reconciler!(Outbound);
