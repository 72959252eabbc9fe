//! `outbound`: one GET to a loopback server per reconcile, from a wasm
//! plugin through the host's outbound hook (`wasm`: the outbound test
//! plugin, a fresh instance per call, its grant naming the server's IP
//! literal; `wasm-reuse`: the same with warm instances; `wasm-secret`: the
//! fresh plugin sending `authorization: Bearer ${secret:token}`, whose value
//! the host reads, places and redacts from the answer) against the same
//! request sent natively with hyper over a new connection, as the host
//! sends a guest's (`native`). Calls run one at a
//! time, interleaved over rounds, on one current-thread tokio runtime; the
//! server answers each connection with a 5-byte body and closes it.
//!
//! Goals: reconciles/s wasm/native ≥ 0.8, and the p99 of wasm minus the
//! p99 of native (the per-request overhead) ≤ 1 ms.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use wasmctrl::control::metrics::Metrics;
use wasmctrl::sandbox::outbound::{
    OutboundGrant, OutboundLimits, OutboundRule, SecretBinding, Secrets,
};
use wasmctrl::sandbox::{InstanceMode, PluginSpec, Runtime, RuntimeConfig};
use wasmctrl::{Action, ObjectKey, ReconcileRequest};

use crate::stats::{Samples, load_average, round};

/// The environment variable the `wasm-secret` variant's secret is read from.
const TOKEN_VAR: &str = "WASMCTRL_BENCH_OUTBOUND_TOKEN";

#[derive(Debug, Clone)]
pub struct Options {
    pub iterations: usize,
    pub rounds: usize,
    pub json: bool,
    /// The variants to run (`wasm`, `wasm-reuse`, `wasm-secret`, `native`);
    /// empty runs all.
    /// One variant alone is what a profiler or `strace -c` should watch.
    pub only: Vec<String>,
}

#[derive(Serialize)]
struct JsonLine {
    scenario: &'static str,
    variant: &'static str,
    median_us: f64,
    p99_us: f64,
    reconciles_per_s: f64,
    calls: usize,
}

/// A loopback server answering every connection's first request with 200
/// and `hello`, then closing it.
async fn serve() -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = conn
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello",
                    )
                    .await;
            });
        }
    });
    Ok(addr)
}

/// The native reconcile: the same GET through hyper on a new connection.
async fn native_get(addr: SocketAddr) -> anyhow::Result<()> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(tcp)).await?;
    let conn = tokio::spawn(conn);
    let request = http::Request::get("/ok")
        .header(http::header::HOST, addr.to_string())
        .body(Empty::new())?;
    let response = sender.send_request(request).await?;
    ensure!(response.status() == 200, "answered {}", response.status());
    let body = response.into_body().collect().await?.to_bytes();
    ensure!(&body[..] == b"hello", "answered {body:?}");
    let _ = conn.await;
    Ok(())
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    ensure!(options.rounds > 0, "--rounds must be at least 1");
    ensure!(
        options.iterations >= options.rounds,
        "--iterations must be at least --rounds"
    );
    let names = ["wasm", "wasm-reuse", "wasm-secret", "native"];
    const NATIVE: usize = 3;
    for name in &options.only {
        ensure!(
            names.contains(&name.as_str()),
            "--only {name:?}: the variants are {names:?}"
        );
    }
    let selected: Vec<bool> = names
        .iter()
        .map(|n| options.only.is_empty() || options.only.iter().any(|o| o == n))
        .collect();
    let load_before = load_average();
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let (samples, totals) = tokio.block_on(async {
        let addr = serve().await?;
        let runtime = Runtime::new(RuntimeConfig::default(), Arc::new(Metrics::new()))?;
        let grant = OutboundGrant::new(
            vec![OutboundRule {
                url: format!("http://{addr}"),
                methods: vec!["GET".into()],
                private: false,
            }],
            OutboundLimits::default(),
        )
        .map_err(anyhow::Error::msg)?;
        let grant = Arc::new(grant);
        // SAFETY: set before the runtime runs anything that reads the
        // environment; nothing else of the process writes it.
        unsafe { std::env::set_var(TOKEN_VAR, "bench-token-value-0123456789") };
        let bindings: Vec<SecretBinding> = serde_json::from_value(serde_json::json!([
            { "name": "token", "env": TOKEN_VAR, "hosts": [format!("http://{addr}")] }
        ]))?;
        let with_secret = Arc::new(
            OutboundGrant::new(grant.rules().cloned().collect(), OutboundLimits::default())
                .map_err(anyhow::Error::msg)?
                .with_secrets(Secrets::new(bindings, None).map_err(anyhow::Error::msg)?),
        );
        let ok =
            serde_json::json!({ "cases": { "item-1": { "url": format!("http://{addr}/ok") } } });
        let bearer = serde_json::json!({ "cases": { "item-1": {
            "url": format!("http://{addr}/ok"),
            "headers": [["authorization", "Bearer ${secret:token}"]],
        } } });
        let mut plugins = Vec::new();
        for (mode, grant, settings) in [
            (InstanceMode::Fresh, &grant, &ok),
            (InstanceMode::Reuse, &grant, &ok),
            (InstanceMode::Fresh, &with_secret, &bearer),
        ] {
            let mut spec = PluginSpec::new("outbound");
            spec.settings = settings.clone();
            spec.outbound = grant.clone();
            spec.instance_mode = mode;
            plugins.push(
                runtime
                    .load_file(wasmctrl_plugin_artifacts::OUTBOUND, spec)
                    .await?,
            );
        }
        let per_round = options.iterations.div_ceil(options.rounds);
        let mut samples: [Samples; 4] =
            std::array::from_fn(|_| Samples::with_capacity(options.iterations));
        let mut totals = [Duration::ZERO; 4];
        for measured in std::iter::once(false).chain(std::iter::repeat_n(true, options.rounds)) {
            for variant in 0..4 {
                if !selected[variant] {
                    continue;
                }
                let round_started = Instant::now();
                for _ in 0..per_round {
                    let start = Instant::now();
                    if let Some(plugin) = plugins.get(variant) {
                        let request = ReconcileRequest {
                            key: ObjectKey::namespaced("default", "item-1"),
                            attempt: 0,
                            timeout: Duration::from_secs(10),
                            cancel: CancellationToken::new(),
                        };
                        let invocation = plugin.invoke(request).await;
                        ensure!(
                            invocation.result == Ok(Action::done()),
                            "the outbound plugin returned {:?}",
                            invocation.result
                        );
                    } else {
                        native_get(addr).await?;
                    }
                    if measured {
                        samples[variant].push(start.elapsed());
                    }
                }
                if measured {
                    totals[variant] += round_started.elapsed();
                }
            }
        }
        anyhow::Ok((samples, totals))
    })?;
    let rates: Vec<f64> = samples
        .iter()
        .zip(totals)
        .map(|(s, t)| s.summary().count as f64 / t.as_secs_f64())
        .collect();
    let summaries: Vec<_> = samples.iter().map(Samples::summary).collect();
    // The variants run: name, summary, rate.
    let ran: Vec<_> = (0..names.len())
        .filter(|&i| selected[i])
        .map(|i| (names[i], &summaries[i], rates[i]))
        .collect();
    if options.json {
        for &(name, s, rate) in &ran {
            let line = JsonLine {
                scenario: "outbound",
                variant: name,
                median_us: round(s.median_us(), 1),
                p99_us: round(s.p99_us(), 1),
                reconciles_per_s: round(rate, 0),
                calls: s.count,
            };
            println!("{}", serde_json::to_string(&line)?);
        }
        return Ok(());
    }
    println!(
        "outbound: one GET to a loopback server per reconcile, {} calls per variant in {} rounds, load {load_before} before / {} after",
        options.iterations,
        options.rounds,
        load_average()
    );
    println!(
        "  {:<10} {:>10} {:>10} {:>12}",
        "variant", "median µs", "p99 µs", "reconciles/s"
    );
    for &(name, s, rate) in &ran {
        println!(
            "  {:<10} {:>10.1} {:>10.1} {:>12.0}",
            name,
            s.median_us(),
            s.p99_us(),
            rate
        );
    }
    for (i, name) in names[..NATIVE].iter().enumerate() {
        if !(selected[i] && selected[NATIVE]) {
            continue;
        }
        println!(
            "  {name}: reconciles/s against native {:.2} (goal ≥ 0.8); p99 overhead {:.0} µs (goal ≤ 1000)",
            rates[i] / rates[NATIVE],
            summaries[i].p99_us() - summaries[NATIVE].p99_us()
        );
    }
    Ok(())
}
