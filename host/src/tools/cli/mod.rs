//! `wasmctrl` subcommands.
//!
//! This module holds the command line and its dispatch; each subcommand
//! group is a module: `run`, `dev`, `rbac`, `build`, `new`, `artifact`
//! (`inspect`, `push`) and `replay`; `apiserver` is the API server crate's
//! `serve`.

mod artifact;
mod build;
mod dev;
mod new;
mod rbac;
mod replay;
mod run;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use artifact::{RegistryArgs, inspect, push};
use build::build;
use dev::{DevOptions, dev};
use new::new;
use rbac::rbac;
use replay::replay;
use run::{run, terminated};

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
    /// Run the plugins of a config against the cluster of the current
    /// kubeconfig (or the in-cluster config).
    Run {
        /// The host config (YAML).
        #[arg(long)]
        config: PathBuf,
    },
    /// Run the plugins of a config against an embedded API server, and write
    /// a kubeconfig for kubectl.
    Dev {
        /// The host config (YAML).
        #[arg(long)]
        config: PathBuf,
        #[command(flatten)]
        options: DevOptions,
    },
    /// Print the least-privilege RBAC the host of a config needs (every
    /// plugin's grant, events, the leader-election and shard Leases) as YAML
    /// for `kubectl apply -f -`, bound to a ServiceAccount.
    Rbac {
        /// The host config (YAML).
        #[arg(long)]
        config: PathBuf,
        /// The namespace of the host's ServiceAccount.
        #[arg(long, default_value = "wasmctrl-system")]
        namespace: String,
        /// The host's ServiceAccount.
        #[arg(long, default_value = "wasmctrl")]
        service_account: String,
    },
    /// Run the embedded Kubernetes-compatible API server alone.
    Apiserver {
        #[command(flatten)]
        serve: wasmctrl_apiserver::serve::ServeArgs,
    },
    /// Build a plugin directory (Cargo.toml, pyproject.toml or package.json)
    /// to a component, installing the Python/JavaScript toolchain on first use.
    Build {
        /// The plugin's directory.
        dir: PathBuf,
        /// Where to write the component.
        #[arg(long)]
        out: Option<PathBuf>,
        /// rust, python or typescript (when the directory has several project files).
        #[arg(long)]
        lang: Option<crate::tools::build::Language>,
        /// The crate to build, when the directory is a cargo workspace.
        #[arg(long, short)]
        package: Option<String>,
    },
    /// Scaffold a plugin project that builds, tests and runs anywhere: a
    /// reconciler for a custom kind, its unit test, the CRD, a sample, a
    /// host config and the SDK, vendored.
    New {
        /// The plugin's name: lowercase letters, digits and dashes.
        name: String,
        /// rust, python or typescript.
        #[arg(long)]
        lang: crate::tools::build::Language,
        /// The custom kind it reconciles, GROUP/VERSION/KIND (default:
        /// NAME.example.com/v1alpha1/Name).
        #[arg(long)]
        kind: Option<String>,
        /// A built-in kind it keeps an object of for each of its own
        /// (ConfigMap, Deployment, Service); repeat it, or separate kinds
        /// with commas.
        #[arg(long, value_delimiter = ',')]
        owns: Vec<String>,
        /// Where to write the project (default: ./NAME); must be empty.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Check a plugin against the wasmctrl:reconciler world and print its
    /// metadata (for a registry artifact, its manifest and config too).
    Inspect {
        /// The plugin: a component file (.wasm), `oci://REGISTRY/REPO:TAG`
        /// (or `…@sha256:…`), or `https://…#sha256=<hex>`.
        plugin: String,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Re-run recorded reconciles (the transcripts a plugin's `record`
    /// writes) against a build of the plugin, with no cluster, and report
    /// call by call where it diverges. Exit status: 0 no divergence,
    /// 1 divergence, 2 the replay could not run.
    Replay {
        /// Transcript files (`.jsonl`), or directories of them.
        #[arg(required = true)]
        transcripts: Vec<PathBuf>,
        /// The plugin build to replay (.wasm).
        #[arg(long)]
        plugin: PathBuf,
        /// Only the reconciles of this key (NAMESPACE/NAME, or NAME).
        #[arg(long)]
        key: Option<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Push a plugin component to an OCI registry as a wasm OCI artifact
    /// and print the manifest digest.
    Push {
        /// The plugin component (.wasm).
        plugin: PathBuf,
        /// Where to push it: REGISTRY/REPOSITORY:TAG.
        reference: String,
        #[command(flatten)]
        registry: RegistryArgs,
    },
}

pub fn main() -> ExitCode {
    crate::ops::malloc::limit_arenas();
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("cannot start the tokio runtime");
    if let Command::Replay {
        transcripts,
        plugin,
        key,
        json,
    } = cli.command
    {
        return match runtime.block_on(replay(transcripts, plugin, key, json)) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::from(1),
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(2)
            }
        };
    }
    let result = runtime.block_on(async {
        match cli.command {
            Command::Replay { .. } => unreachable!("handled above: its exit status is its own"),
            Command::Inspect { plugin, registry } => inspect(plugin, registry).await,
            Command::Push {
                plugin,
                reference,
                registry,
            } => push(plugin, reference, registry).await,
            Command::Build {
                dir,
                out,
                lang,
                package,
            } => build(dir, out, lang, package),
            Command::New {
                name,
                lang,
                kind,
                owns,
                dir,
            } => new(name, lang, kind, owns, dir),
            Command::Run { config } => run(config).await,
            Command::Rbac {
                config,
                namespace,
                service_account,
            } => rbac(&config, namespace, service_account),
            Command::Dev { config, options } => dev(config, options).await,
            Command::Apiserver { serve } => {
                Ok(wasmctrl_apiserver::serve::serve(serve, terminated()).await?)
            }
        }
    });
    // The command's work is done (a host has drained its plugins by now).
    // What may still hold the blocking pool cannot be cancelled, above all
    // a name lookup past its reconcile's deadline, which waits for the
    // resolver for as long as resolv.conf's timeouts allow; dropping the
    // runtime would wait for it, so the process waits a moment, then
    // leaves it.
    runtime.shutdown_timeout(BLOCKING_GRACE);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// How long a finished command waits for blocking work still running
/// (see the end of [`main`]).
const BLOCKING_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only for a person at a terminal (https://no-color.org): logs
    // piped to a file or a collector carry no escape codes.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
