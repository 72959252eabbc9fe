//! `wasmctrl` subcommands.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use crate::config::HostConfig;
use crate::control::metrics::Metrics;
use crate::ops::manager::{Manager, ManagerOptions};
use crate::ops::source::artifact::RECONCILER_WORLD;
use crate::ops::source::oci::RegistryOptions;
use crate::sandbox::{PluginSpec, Runtime, RuntimeConfig};
use anyhow::Context as _;
use clap::{Parser, Subcommand};

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
        /// Apply the manifests in this directory first (CRDs first).
        #[arg(long)]
        apply: Option<PathBuf>,
        /// Where the embedded API server listens.
        #[arg(long, default_value = "127.0.0.1:0")]
        addr: SocketAddr,
        /// Where to write the kubeconfig for kubectl.
        #[arg(long, default_value = ".wasmctrl/kubeconfig")]
        kubeconfig_out: PathBuf,
        /// Serve the admin endpoints here instead of the config's admin.bind.
        #[arg(long)]
        admin: Option<SocketAddr>,
        /// How the embedded API server authorizes requests: `always-allow`,
        /// or `rbac`, which also runs the host as the ServiceAccount
        /// wasmctrl-system/wasmctrl bound to the RBAC `wasmctrl rbac` prints
        /// for the config (the kubeconfig written stays the admin's).
        #[arg(long, default_value_t = wasmctrl_apiserver::Authorization::AlwaysAllow, value_name = "always-allow|rbac")]
        authorization: wasmctrl_apiserver::Authorization,
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
        #[arg(long, default_value = "127.0.0.1:0")]
        addr: SocketAddr,
        /// Where to write the kubeconfig (mode 0600).
        #[arg(long)]
        kubeconfig_out: Option<PathBuf>,
        /// Keep state here across restarts.
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// How requests other than the admin's are authorized: `always-allow`,
        /// or `rbac` (Roles and bindings decide; bootstrap roles are created).
        #[arg(long, default_value_t = wasmctrl_apiserver::Authorization::AlwaysAllow, value_name = "always-allow|rbac")]
        authorization: wasmctrl_apiserver::Authorization,
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

/// How to reach a registry (or a URL).
#[derive(clap::Args)]
struct RegistryArgs {
    /// Plain HTTP: to a registry without TLS, or to an http:// URL on a
    /// loopback address.
    #[arg(long)]
    insecure: bool,
    /// A docker config.json with registry credentials (default:
    /// $DOCKER_CONFIG/config.json, then ~/.docker/config.json).
    #[arg(long)]
    docker_config: Option<PathBuf>,
    /// How long the whole transfer may take.
    #[arg(long, default_value = "5m", value_parser = crate::config::parse_duration)]
    timeout: std::time::Duration,
}

impl RegistryArgs {
    fn options(&self) -> RegistryOptions {
        RegistryOptions {
            insecure: self.insecure,
            docker_config: self.docker_config.clone(),
            credentials: None,
            limits: crate::config::FetchLimits {
                timeout: self.timeout,
                ..Default::default()
            },
        }
    }
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
            Command::Run { config } => run(config).await,
            Command::Rbac {
                config,
                namespace,
                service_account,
            } => rbac(&config, namespace, service_account),
            Command::Dev {
                config,
                apply,
                addr,
                kubeconfig_out,
                admin,
                authorization,
            } => {
                let options = DevOptions {
                    apply,
                    addr,
                    kubeconfig_out,
                    admin,
                    authorization,
                };
                dev(config, options).await
            }
            Command::Apiserver {
                addr,
                kubeconfig_out,
                data_dir,
                authorization,
            } => apiserver(addr, kubeconfig_out, data_dir, authorization).await,
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

/// `wasmctrl replay`: Ok(true) when nothing diverged.
async fn replay(
    paths: Vec<PathBuf>,
    plugin: PathBuf,
    key: Option<String>,
    json: bool,
) -> anyhow::Result<bool> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(&path)
                .with_context(|| format!("cannot read {}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
                .collect();
            anyhow::ensure!(
                !found.is_empty(),
                "{}: no transcripts (.jsonl files) in this directory",
                path.display()
            );
            found.sort();
            files.extend(found);
        } else {
            files.push(path);
        }
    }
    let mut transcripts = Vec::new();
    for file in &files {
        let read = crate::ops::transcript::read_file(file)?;
        transcripts.extend(
            read.into_iter()
                .map(|(line, t)| (format!("{}:{line}", file.display()), t)),
        );
    }
    if let Some(key) = &key {
        transcripts.retain(|(_, t)| crate::ObjectKey::from(&t.key).to_string() == *key);
    }
    anyhow::ensure!(
        !transcripts.is_empty(),
        "no transcripts to replay{}",
        key.map(|k| format!(" for key {k}")).unwrap_or_default()
    );
    let bytes = tokio::fs::read(&plugin)
        .await
        .with_context(|| format!("cannot read {}", plugin.display()))?;
    let runtime = check_runtime()?;
    let report = crate::ops::transcript::replay::replay(
        &runtime,
        &plugin.display().to_string(),
        bytes,
        &transcripts,
    )
    .await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{report}");
    }
    Ok(report.diverged() == 0)
}

/// `wasmctrl rbac`: the RBAC of `config`'s host on stdout.
fn rbac(config: &Path, namespace: String, service_account: String) -> anyhow::Result<()> {
    let config = HostConfig::load(config)?;
    let options = crate::ops::rbac::RbacOptions {
        namespace,
        service_account,
    };
    let yaml = crate::ops::rbac::generate(&config).to_yaml(&options)?;
    print!("{yaml}");
    Ok(())
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

/// A runtime for one-off checks of a component (`inspect`, `push`).
fn check_runtime() -> anyhow::Result<Runtime> {
    Ok(Runtime::new(
        RuntimeConfig {
            max_instances: 4,
            ..RuntimeConfig::default()
        },
        Arc::new(Metrics::new()),
    )?)
}

/// What `inspect` prints about a loaded plugin.
fn describe_plugin(plugin: &crate::sandbox::Plugin) -> serde_json::Value {
    let m = plugin.metadata();
    let gvk = |g: &crate::Gvk| serde_json::json!({"group": g.group, "version": g.version, "kind": g.kind});
    serde_json::json!({
        "world": RECONCILER_WORLD,
        "path": plugin.origin(),
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
    })
}

/// Loads `plugin` (a file, `oci://…` or `https://…#sha256=…`) and prints
/// its metadata; for a registry artifact, its manifest and config first.
async fn inspect(plugin: String, registry: RegistryArgs) -> anyhow::Result<()> {
    let options = registry.options();
    let (origin, bytes, name, mut extra) = if let Some(reference) = plugin.strip_prefix("oci://") {
        let found = crate::ops::source::oci::describe_artifact(reference, &options).await?;
        let name = reference
            .rsplit('/')
            .next()
            .and_then(|last| last.split([':', '@']).next())
            .unwrap_or_default()
            .to_string();
        let extra = serde_json::json!({
            "oci": {
                "reference": reference,
                "manifestDigest": found.manifest_digest,
                "manifest": found.manifest,
                "config": found.config,
            }
        });
        (plugin.clone(), found.component.bytes, name, extra)
    } else if plugin.starts_with("https://") || plugin.starts_with("http://") {
        let (url, sha256) = plugin
            .split_once("#sha256=")
            .context("give the component's digest after the URL: https://…#sha256=<64 hex>")?;
        let spec = crate::config::SourceConfig {
            url: Some(url.to_string()),
            sha256: Some(sha256.to_string()),
            insecure: registry.insecure,
            timeout: Some(registry.timeout),
            ..Default::default()
        }
        .spec()
        .map_err(|p| anyhow::anyhow!("{}: {}", p.field, p.message))?;
        let crate::config::SourceSpec::Url(spec) = spec else {
            unreachable!("a url source config is a url source");
        };
        let source = crate::ops::source::UrlSource::new(
            spec,
            crate::ops::source::DiskCache::new(PathBuf::new()),
        );
        let artifact = source.download().await?;
        let name = url
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .trim_end_matches(".wasm")
            .to_string();
        (url.to_string(), artifact.bytes, name, serde_json::json!({}))
    } else {
        let path = PathBuf::from(&plugin);
        let bytes = tokio::fs::read(&path)
            .await
            .with_context(|| format!("cannot read {}", path.display()))?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        (plugin.clone(), bytes, name, serde_json::json!({}))
    };
    let runtime = check_runtime()?;
    let plugin = runtime
        .load_bytes(origin, bytes, PluginSpec::new(name))
        .await?;
    let mut out = describe_plugin(&plugin);
    if let (Some(out), Some(extra)) = (out.as_object_mut(), extra.as_object_mut()) {
        out.append(extra);
    }
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

/// Checks `path` is a plugin (loads it and asks its metadata), pushes it
/// to `reference` and prints the manifest digest.
async fn push(path: PathBuf, reference: String, registry: RegistryArgs) -> anyhow::Result<()> {
    let bytes = tokio::fs::read(&path)
        .await
        .with_context(|| format!("cannot read {}", path.display()))?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let runtime = check_runtime()?;
    let plugin = runtime
        .load_bytes(
            path.display().to_string(),
            bytes.clone(),
            PluginSpec::new(name),
        )
        .await?;
    let m = plugin.metadata();
    let annotations = std::collections::BTreeMap::from([
        ("org.opencontainers.image.title".to_string(), m.name.clone()),
        (
            "org.opencontainers.image.version".to_string(),
            m.version.clone(),
        ),
    ]);
    let pushed =
        crate::ops::source::oci::push(&reference, bytes, annotations, &registry.options()).await?;
    eprintln!(
        "pushed {} {} ({}) to {}@{}",
        m.name, m.version, pushed.layer_digest, pushed.reference, pushed.manifest_digest
    );
    println!("{}", pushed.manifest_digest);
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
async fn terminated() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("cannot listen for SIGTERM");
    let mut int = signal(SignalKind::interrupt()).expect("cannot listen for SIGINT");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}

async fn run(config_path: PathBuf) -> anyhow::Result<()> {
    let config = HostConfig::load(&config_path)?;
    let kube_config = kube::Config::infer().await.context(
        "cannot connect to a cluster (no kubeconfig or in-cluster config); try `wasmctrl dev`",
    )?;
    let client = kube::Client::try_from(kube_config.clone())?;
    let options = ManagerOptions {
        config_path: Some(config_path.clone()),
        kube_config: Some(kube_config),
        ..ManagerOptions::default()
    };
    let manager = Manager::start(config, client, options).await?;
    println!("admin: http://{}/plugins", manager.admin_addr());
    manager.run(terminated()).await?;
    Ok(())
}

/// The flags of `wasmctrl dev` besides the config.
struct DevOptions {
    apply: Option<PathBuf>,
    addr: SocketAddr,
    kubeconfig_out: PathBuf,
    admin: Option<SocketAddr>,
    authorization: wasmctrl_apiserver::Authorization,
}

async fn dev(config_path: PathBuf, dev: DevOptions) -> anyhow::Result<()> {
    let DevOptions {
        apply,
        addr,
        kubeconfig_out,
        admin,
        authorization,
    } = dev;
    let config = load_with_admin_bind(&config_path, admin)?;
    build_missing_plugins(&config)?;
    let server = wasmctrl_apiserver::ApiServer::start(wasmctrl_apiserver::Config {
        addr,
        authorization,
        ..wasmctrl_apiserver::Config::default()
    })
    .await?;
    server.write_kubeconfig(&kubeconfig_out)?;
    println!(
        "embedded API server: {} (authorization: {})",
        server.url(),
        server.authorization()
    );
    println!(
        "kubeconfig: {} (export KUBECONFIG={})",
        kubeconfig_out.display(),
        absolute(&kubeconfig_out).display()
    );
    let kube_config = crate::control::client::config_for(&kubeconfig_out).await?;
    let client = kube::Client::try_from(kube_config.clone())?;
    if config.plugins_from.is_some() {
        crate::tools::apply::apply_text(
            &client,
            Path::new("deploy/crds/wasmreconciler.yaml"),
            crate::ops::manager::WASMRECONCILER_CRD,
        )
        .await?;
        println!("applied the WasmReconciler CRD (the config sets pluginsFrom)");
    }
    if let Some(dir) = apply {
        let n = crate::tools::apply::apply_dir(&client, &dir).await?;
        println!("applied {n} objects from {}", dir.display());
    }
    let (client, kube_config) = match authorization {
        wasmctrl_apiserver::Authorization::AlwaysAllow => (client, kube_config),
        wasmctrl_apiserver::Authorization::Rbac => {
            let options = crate::ops::rbac::RbacOptions {
                namespace: "wasmctrl-system".into(),
                service_account: "wasmctrl".into(),
            };
            let host = as_service_account(&client, &kube_config, &config, &options)
                .await
                .context("--authorization rbac")?;
            println!(
                "the host runs as {} with the RBAC of `wasmctrl rbac --config {}`",
                service_account_user(&options),
                config_path.display()
            );
            (kube::Client::try_from(host.clone())?, host)
        }
    };
    let options = ManagerOptions {
        admin_bind: admin,
        config_path: Some(config_path.clone()),
        kube_config: Some(kube_config),
        ..ManagerOptions::default()
    };
    let manager = Manager::start(config, client, options).await?;
    println!("admin: http://{}/plugins", manager.admin_addr());
    let result = manager.run(terminated()).await;
    server.shutdown().await;
    result?;
    Ok(())
}

/// `system:serviceaccount:NAMESPACE:NAME`: the user a ServiceAccount's
/// tokens authenticate as.
fn service_account_user(options: &crate::ops::rbac::RbacOptions) -> String {
    format!(
        "system:serviceaccount:{}:{}",
        options.namespace, options.service_account
    )
}

/// Makes the ServiceAccount of `options` (and every namespace it and the
/// Roles need), applies the RBAC `wasmctrl rbac` prints for `config` bound
/// to it, and returns `admin` with the admin's credentials replaced by a
/// token of that account. The admin client does the setup. The account's
/// identity is checked with the server before the host uses it, so a token
/// that authenticated as someone else would stop `dev` rather than make it
/// prove nothing.
async fn as_service_account(
    admin_client: &kube::Client,
    admin: &kube::Config,
    config: &HostConfig,
    options: &crate::ops::rbac::RbacOptions,
) -> anyhow::Result<kube::Config> {
    use k8s_openapi::api::authentication::v1::{SelfSubjectReview, TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    use kube::api::{Api, PostParams};

    let rbac = crate::ops::rbac::generate(config);
    let account = format!("{}/{}", options.namespace, options.service_account);
    let namespaces: std::collections::BTreeSet<&str> = std::iter::once(options.namespace.as_str())
        .chain(rbac.namespaced.keys().map(String::as_str))
        .collect();
    let mut setup = String::new();
    for ns in &namespaces {
        setup.push_str(&format!(
            "---\napiVersion: v1\nkind: Namespace\nmetadata: {{ name: {ns} }}\n"
        ));
    }
    setup.push_str(&format!(
        "---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {{ name: {}, namespace: {} }}\n",
        options.service_account, options.namespace
    ));
    crate::tools::apply::apply_text(admin_client, Path::new("the ServiceAccount"), &setup)
        .await
        .with_context(|| format!("creating the ServiceAccount {account} and its namespaces"))?;
    let yaml = rbac
        .to_yaml(options)
        .context("generating the RBAC of `wasmctrl rbac`")?;
    if !yaml.is_empty() {
        crate::tools::apply::apply_text(admin_client, Path::new("wasmctrl rbac"), &yaml)
            .await
            .context("applying the RBAC of `wasmctrl rbac`")?;
    }
    // The API server lives only as long as this process, so the token may
    // as well outlive any dev session rather than expire under the host.
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(1 << 32),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(admin_client.clone(), &options.namespace)
        .create_token_request(&options.service_account, &PostParams::default(), &request)
        .await
        .with_context(|| format!("requesting a token for the ServiceAccount {account}"))?
        .status
        .and_then(|s| s.token)
        .filter(|t| !t.is_empty());
    let Some(token) = token else {
        anyhow::bail!("requesting a token for the ServiceAccount {account}: none was issued");
    };
    let mut host = admin.clone();
    host.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..kube::config::AuthInfo::default()
    };
    let client = kube::Client::try_from(host.clone())
        .with_context(|| format!("a client for the ServiceAccount {account}"))?;
    let review = Api::<SelfSubjectReview>::all(client)
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .with_context(|| format!("checking the token of the ServiceAccount {account}"))?;
    let user = review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .unwrap_or_default();
    let expected = service_account_user(options);
    anyhow::ensure!(
        user == expected,
        "checking the token of the ServiceAccount {account}: the server says it is {user:?}, not {expected}"
    );
    Ok(host)
}

/// The config at `path`, with `admin` (`--admin`) as its `admin.bind`.
/// The override is written into the config and the config checked again,
/// so it meets every rule a written bind meets (an address off loopback
/// needs `admin.tokenFile`).
fn load_with_admin_bind(path: &Path, admin: Option<SocketAddr>) -> anyhow::Result<HostConfig> {
    let config = HostConfig::load(path)?;
    let Some(bind) = admin else {
        return Ok(config);
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut value: serde_norway::Value =
        serde_norway::from_str(&text).with_context(|| format!("{}: not YAML", path.display()))?;
    let serde_norway::Value::Mapping(top) = &mut value else {
        anyhow::bail!("{}: not a mapping", path.display());
    };
    let admin = top
        .entry("admin".into())
        .or_insert_with(|| serde_norway::Value::Mapping(Default::default()));
    let serde_norway::Value::Mapping(admin) = admin else {
        anyhow::bail!("{}: admin: must be a mapping", path.display());
    };
    admin.insert("bind".into(), bind.to_string().into());
    let text = serde_norway::to_string(&value)?;
    HostConfig::parse(path, &text, config.base_dir.clone())
        .with_context(|| format!("--admin {bind}"))
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// `dev` builds plugins whose component is missing when its path follows
/// the build conventions (`crate::tools::build::source_of`): a Rust crate of a
/// cargo workspace, or a Python/JavaScript plugin's `target/<name>.wasm`.
fn build_missing_plugins(config: &HostConfig) -> anyhow::Result<()> {
    for plugin in &config.plugins {
        let Some(path) = plugin.file(&config.base_dir) else {
            continue;
        };
        if path.exists() {
            continue;
        }
        let Some((dir, options)) = crate::tools::build::source_of(&path) else {
            anyhow::bail!(
                "plugin {:?}: {} does not exist (build it with `wasmctrl build <plugin dir> --out {}`)",
                plugin.name,
                path.display(),
                path.display()
            );
        };
        println!("building plugin {:?} from {} …", plugin.name, dir.display());
        let options = crate::tools::build::BuildOptions {
            verbose: true,
            ..options
        };
        crate::tools::build::build(&dir, &options)
            .with_context(|| format!("plugin {:?}", plugin.name))?;
    }
    Ok(())
}

fn build(
    dir: PathBuf,
    out: Option<PathBuf>,
    language: Option<crate::tools::build::Language>,
    package: Option<String>,
) -> anyhow::Result<()> {
    let options = crate::tools::build::BuildOptions {
        out,
        language,
        package,
        verbose: true,
        ..crate::tools::build::BuildOptions::default()
    };
    let built = crate::tools::build::build(&dir, &options)?;
    println!(
        "built {} plugin {}: {} ({:.1} MB, {:.1} s{})",
        built.language,
        built.name,
        built.component.display(),
        built.size as f64 / 1e6,
        built.took.as_secs_f64(),
        if built.installed_toolchain {
            ", toolchain installed"
        } else {
            ""
        }
    );
    Ok(())
}

async fn apiserver(
    addr: SocketAddr,
    kubeconfig_out: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    authorization: wasmctrl_apiserver::Authorization,
) -> anyhow::Result<()> {
    let server = wasmctrl_apiserver::ApiServer::start(wasmctrl_apiserver::Config {
        addr,
        data_dir,
        authorization,
        ..wasmctrl_apiserver::Config::default()
    })
    .await?;
    println!(
        "listening on {} (authorization: {})",
        server.url(),
        server.authorization()
    );
    if let Some(path) = kubeconfig_out {
        server.write_kubeconfig(&path)?;
        println!("kubeconfig written to {}", path.display());
    }
    terminated().await;
    server.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wasmctrl.yaml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    const CONFIG: &str = "apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\nplugins: []\n";

    #[test]
    fn an_admin_override_off_loopback_needs_a_token_file() {
        let (_dir, path) = config(CONFIG);
        let e = load_with_admin_bind(&path, Some("0.0.0.0:9090".parse().unwrap())).unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.contains("--admin 0.0.0.0:9090") && e.contains("admin.tokenFile"),
            "{e}"
        );
        let c = load_with_admin_bind(&path, Some("127.0.0.1:0".parse().unwrap())).unwrap();
        assert_eq!(c.admin.bind, "127.0.0.1:0".parse().unwrap());
        assert!(load_with_admin_bind(&path, None).is_ok());
    }

    #[test]
    fn an_admin_override_off_loopback_with_a_token_file_is_taken() {
        let (dir, path) = config(&format!(
            "{CONFIG}admin: {{ bind: 127.0.0.1:9090, tokenFile: token }}\n"
        ));
        std::fs::write(dir.path().join("token"), "secret\n").unwrap();
        let c = load_with_admin_bind(&path, Some("0.0.0.0:0".parse().unwrap())).unwrap();
        assert_eq!(c.admin.bind, "0.0.0.0:0".parse().unwrap());
    }
}
