//! `wasmctrl` subcommands.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use wasmctrl::hostapi::NoApiServer;
use wasmctrl::metrics::Metrics;
use wasmctrl::runtime::{Limits, PluginSpec, Runtime, RuntimeConfig};

/// A Kubernetes controller runtime whose reconcilers are sandboxed
/// WebAssembly components.
#[derive(Parser)]
#[command(name = "wasmctrl", version, about)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Check a plugin against the wasmctrl:reconciler world and print its metadata.
    Inspect {
        /// The plugin component (.wasm).
        plugin: PathBuf,
    },
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("cannot start the tokio runtime");
    let result = runtime.block_on(async {
        match cli.command {
            Command::Inspect { plugin } => inspect(plugin).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn inspect(path: PathBuf) -> anyhow::Result<()> {
    let runtime = Runtime::new(
        RuntimeConfig {
            max_instances: 4,
            ..RuntimeConfig::default()
        },
        Arc::new(Metrics::new()),
    )?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let plugin = runtime
        .load(PluginSpec {
            name,
            path,
            limits: Limits::default(),
            settings: serde_json::json!({}),
            kube: Arc::new(NoApiServer),
        })
        .await?;
    let m = plugin.metadata();
    let gvk = |g: &wasmctrl::hostapi::Gvk| serde_json::json!({"group": g.group, "version": g.version, "kind": g.kind});
    let out = serde_json::json!({
        "world": "wasmctrl:reconciler/reconciler@0.1.0",
        "path": plugin.path(),
        "digest": plugin.digest(),
        "name": m.name,
        "version": m.version,
        "for": gvk(&m.for_),
        "owns": m.owns.iter().map(gvk).collect::<Vec<_>>(),
        "watches": m.watches.iter().map(|w| serde_json::json!({
            "kind": gvk(&w.kind),
            "mapping": format!("{:?}", w.mapping),
        })).collect::<Vec<_>>(),
        "permissions": m.permissions.iter().map(|p| serde_json::json!({
            "group": p.group, "resources": p.resources, "verbs": p.verbs,
        })).collect::<Vec<_>>(),
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}
