//! `admission`: AdmissionReviews posted over HTTPS to the host's webhook
//! server, answered by the webapp operator's validator as a wasm plugin
//! (`wasm`: a fresh instance per review; `wasm-reuse`: warm instances)
//! and by the same rules in native Rust served by the same server
//! (`native`). One process: the load comes from a client in the same
//! tokio runtime over keep-alive connections, so every variant shares the
//! machine with it alike.
//!
//! Two rows per variant:
//! - **fixed rate**: reviews sent open-loop at `--rate` per second for
//!   `--seconds` (each in a task of its own, so a slow answer never delays
//!   the next send); latency is from each send to its answer, p50 and p99; then
//!   the same at doubling rates, to report the highest rate whose p99 is
//!   under 10 ms;
//! - **sustained**: `--concurrency` clients posting back to back for
//!   `--seconds`: reviews per second, and its ratio to native.
//!
//! Goals: wasm p99 ≤ 2 ms at 500 reviews/s, and sustained reviews/s
//! wasm/native ≥ 0.8.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use wasmctrl::config::{AdmissionMode, WebhookSection};
use wasmctrl::control::metrics::Metrics;
use wasmctrl::ops::webhook::{Reviewer, Reviewers, WebhookServer};
use wasmctrl::sandbox::admission::{FieldCause, Review, ReviewError, Verdict, Webhook};
use wasmctrl::sandbox::{InstanceMode, PluginSpec, Runtime, RuntimeConfig};

use crate::stats::{Samples, load_average, round};

#[derive(Debug, Clone)]
pub struct Options {
    pub rate: u32,
    pub seconds: f64,
    pub concurrency: usize,
    pub max_rate: u32,
    pub json: bool,
}

#[derive(Serialize)]
struct JsonLine {
    scenario: &'static str,
    variant: &'static str,
    row: &'static str,
    /// Fixed rate: reviews sent per second.
    rate: u32,
    /// Sustained: the highest of the doubling rates whose p99 stayed
    /// under 10 ms.
    max_rate_p99_under_10ms: u32,
    p50_us: f64,
    p99_us: f64,
    reviews_per_s: f64,
    reviews: usize,
    errors: usize,
}

const VARIANTS: [&str; 3] = ["wasm", "wasm-reuse", "native"];

/// The webapp validator's rules, in Rust: what `wasm` computes in the
/// sandbox, computed here.
struct Native {
    webhooks: Vec<Webhook>,
}

impl Reviewer for Native {
    fn name(&self) -> &str {
        "native"
    }

    fn webhooks(&self) -> &[Webhook] {
        &self.webhooks
    }

    fn review(
        &self,
        _: Review,
        request: String,
        _: Duration,
    ) -> BoxFuture<'_, Result<Verdict, ReviewError>> {
        Box::pin(async move {
            let request: Value =
                serde_json::from_str(&request).map_err(|e| ReviewError::Failed(e.to_string()))?;
            let spec = &request["object"]["spec"];
            let replicas = spec["replicas"].as_i64().unwrap_or(1);
            let image = spec["image"].as_str().unwrap_or_default();
            let last = image.rsplit('/').next().unwrap_or(image);
            let mut causes = Vec::new();
            if !(0..=50).contains(&replicas) {
                causes.push(FieldCause {
                    field: "spec.replicas".into(),
                    reason: "FieldValueInvalid".into(),
                    message: format!("Invalid value: {replicas}: must be between 0 and 50"),
                });
            }
            if !image.contains('@') && !last.contains(':') {
                causes.push(FieldCause {
                    field: "spec.image".into(),
                    reason: "FieldValueInvalid".into(),
                    message: "must name a tag".into(),
                });
            }
            Ok(Verdict {
                allowed: causes.is_empty(),
                code: if causes.is_empty() { 403 } else { 422 },
                message: String::new(),
                causes,
                warnings: Vec::new(),
                audit_annotations: Vec::new(),
                patched: None,
            })
        })
    }
}

struct Bench {
    reviewers: Vec<Arc<dyn Reviewer>>,
}

impl Reviewers for Bench {
    fn reviewer(&self, name: &str) -> Option<(Arc<dyn Reviewer>, AdmissionMode)> {
        self.reviewers
            .iter()
            .find(|r| r.name() == name)
            .map(|r| (r.clone(), AdmissionMode::Protect))
    }
}

/// One valid WebApp CREATE review: the validator allows it.
fn review_body() -> Vec<u8> {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-0000-0000-000000000001",
            "kind": {"group": "demo.wasmctrl.dev", "version": "v1alpha1", "kind": "WebApp"},
            "resource": {"group": "demo.wasmctrl.dev", "version": "v1alpha1", "resource": "webapps"},
            "operation": "CREATE",
            "namespace": "default",
            "name": "web",
            "userInfo": {"username": "bench", "groups": ["system:authenticated"]},
            "object": {
                "apiVersion": "demo.wasmctrl.dev/v1alpha1",
                "kind": "WebApp",
                "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
                "spec": {"image": "nginx:1.27", "replicas": 3, "port": 80},
            },
            "dryRun": false,
        },
    })
    .to_string()
    .into_bytes()
}

/// An HTTPS client trusting the server's CA, as a plugin's outbound
/// requests trust `runtime.caBundle`.
fn client(ca: &str) -> anyhow::Result<reqwest::Client> {
    let tls =
        wasmctrl::sandbox::outbound::tls_config(Some(ca.as_bytes())).map_err(anyhow::Error::msg)?;
    Ok(reqwest::Client::builder()
        .use_preconfigured_tls((*tls).clone())
        .pool_max_idle_per_host(256)
        .build()?)
}

/// Posts one review; Err unless it came back 200 and allowed.
async fn post(client: &reqwest::Client, url: &str, body: &[u8]) -> anyhow::Result<()> {
    let answer: Value = client
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_vec())
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    ensure!(
        answer["response"]["allowed"] == true,
        "not allowed: {answer}"
    );
    Ok(())
}

/// Reviews sent open-loop at `rate` per second for `seconds`: latency of
/// each from its scheduled send, and how many failed.
async fn fixed_rate(
    client: &reqwest::Client,
    url: &str,
    body: &Arc<Vec<u8>>,
    rate: u32,
    seconds: f64,
) -> (Samples, usize) {
    let count = (f64::from(rate) * seconds).ceil() as usize;
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(count);
    for i in 0..count {
        let at = start + interval * i as u32;
        tokio::time::sleep_until(at).await;
        let (client, url, body) = (client.clone(), url.to_string(), body.clone());
        tasks.push(tokio::spawn(async move {
            // From the send itself: the sender never waits for answers
            // (each review is a task of its own), so nothing is omitted,
            // and tokio's 1 ms timer granularity stays out of the figure.
            let sent = Instant::now();
            let ok = post(&client, &url, &body).await.is_ok();
            (sent.elapsed(), ok)
        }));
    }
    let mut samples = Samples::with_capacity(count);
    let mut errors = 0;
    for t in tasks {
        match t.await {
            Ok((latency, true)) => samples.push(latency),
            _ => errors += 1,
        }
    }
    (samples, errors)
}

/// `concurrency` clients posting back to back for `seconds`: reviews/s.
async fn sustained(
    client: &reqwest::Client,
    url: &str,
    body: &Arc<Vec<u8>>,
    concurrency: usize,
    seconds: f64,
) -> (f64, usize, usize) {
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, url, body) = (client.clone(), url.to_string(), body.clone());
            tokio::spawn(async move {
                let (mut done, mut errors) = (0usize, 0usize);
                while Instant::now() < until {
                    match post(&client, &url, &body).await {
                        Ok(()) => done += 1,
                        Err(_) => errors += 1,
                    }
                }
                (done, errors)
            })
        })
        .collect();
    let (mut done, mut errors) = (0, 0);
    for w in workers {
        if let Ok((d, e)) = w.await {
            done += d;
            errors += e;
        }
    }
    (done as f64 / started.elapsed().as_secs_f64(), done, errors)
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    ensure!(options.rate > 0, "--rate must be at least 1");
    ensure!(options.seconds > 0.0, "--seconds must be positive");
    ensure!(options.concurrency > 0, "--concurrency must be at least 1");
    let load_before = load_average();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    tokio.block_on(async {
        let runtime = Runtime::new(RuntimeConfig::default(), Arc::new(Metrics::new()))?;
        let mut reviewers: Vec<Arc<dyn Reviewer>> = Vec::new();
        for (name, mode) in [("wasm", InstanceMode::Fresh), ("wasm-reuse", InstanceMode::Reuse)] {
            let mut spec = PluginSpec::new(name);
            spec.instance_mode = mode;
            reviewers.push(
                runtime
                    .load_file(wasmctrl_plugin_artifacts::WEBAPP, spec)
                    .await?,
            );
        }
        let webhooks = reviewers[0].webhooks().to_vec();
        ensure!(!webhooks.is_empty(), "the webapp plugin serves no webhook");
        reviewers.push(Arc::new(Native { webhooks }));
        let section = WebhookSection {
            bind: "127.0.0.1:0".parse()?,
            cert_dir: None,
            url: None,
            service: None,
            ca_secret: None,
            client_ca_file: None,
            register: false,
            reapply_interval: std::time::Duration::from_secs(600),
        };
        let stop = CancellationToken::new();
        let server = WebhookServer::start(
            &section,
            None,
            None,
            std::path::Path::new("."),
            Arc::new(Bench { reviewers }),
            Arc::new(Metrics::new()),
            stop.clone(),
        )
        .await?;
        let addr: SocketAddr = server.addr();
        let client = client(&server.ca_bundle().context("the server's CA")?)?;
        let body = Arc::new(review_body());
        let url = |variant: &str| format!("https://{addr}/validate/{variant}?timeout=10s");
        // Warm-up: connections, the compiled code's pages, warm instances.
        for variant in VARIANTS {
            let _ = sustained(&client, &url(variant), &body, options.concurrency, 0.5).await;
        }
        let mut lines = Vec::new();
        for variant in VARIANTS {
            let (samples, errors) =
                fixed_rate(&client, &url(variant), &body, options.rate, options.seconds).await;
            let s = samples.summary();
            lines.push(JsonLine {
                scenario: "admission",
                variant,
                row: "fixed-rate",
                rate: options.rate,
                max_rate_p99_under_10ms: 0,
                p50_us: round(s.median_us(), 1),
                p99_us: round(s.p99_us(), 1),
                reviews_per_s: f64::from(options.rate),
                reviews: s.count,
                errors,
            });
        }
        let mut best = [0u32; 3];
        for (i, variant) in VARIANTS.iter().enumerate() {
            let mut rate = options.rate;
            while rate <= options.max_rate {
                let (samples, errors) =
                    fixed_rate(&client, &url(variant), &body, rate, options.seconds.min(2.0)).await;
                if errors > 0 || samples.summary().p99_us() >= 10_000.0 {
                    break;
                }
                best[i] = rate;
                rate *= 2;
            }
        }
        let mut sustained_rates = [0.0f64; 3];
        for (i, variant) in VARIANTS.iter().enumerate() {
            let (per_s, done, errors) =
                sustained(&client, &url(variant), &body, options.concurrency, options.seconds).await;
            sustained_rates[i] = per_s;
            lines.push(JsonLine {
                scenario: "admission",
                variant,
                row: "sustained",
                rate: 0,
                max_rate_p99_under_10ms: best[i],
                p50_us: 0.0,
                p99_us: 0.0,
                reviews_per_s: round(per_s, 1),
                reviews: done,
                errors,
            });
        }
        stop.cancel();
        if options.json {
            for line in &lines {
                println!("{}", serde_json::to_string(line)?);
            }
        } else {
            println!(
                "admission: validating reviews of a WebApp over HTTPS, {} s per row (load before: {load_before}, after: {})",
                options.seconds,
                load_average()
            );
            println!(
                "{:<11} {:>14} {:>10} {:>10} {:>22} {:>14} {:>9}",
                "variant", "row", "p50 µs", "p99 µs", "max rate p99<10ms /s", "reviews/s", "errors"
            );
            for l in &lines {
                println!(
                    "{:<11} {:>14} {:>10} {:>10} {:>22} {:>14} {:>9}",
                    l.variant,
                    l.row,
                    l.p50_us,
                    l.p99_us,
                    l.max_rate_p99_under_10ms,
                    l.reviews_per_s,
                    l.errors
                );
            }
            let native = sustained_rates[2].max(f64::MIN_POSITIVE);
            println!(
                "sustained reviews/s wasm/native: {:.2} (fresh), {:.2} (reuse); goal ≥ 0.8",
                sustained_rates[0] / native,
                sustained_rates[1] / native
            );
        }
        Ok(())
    })
}
