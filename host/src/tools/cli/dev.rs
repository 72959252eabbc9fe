//! `wasmctrl dev`: the host against an embedded API server, with the
//! config's missing plugins built first, with `--watch` rebuilt on every
//! change (`watch.rs`) and, with `--authorization rbac`, the host run as
//! the ServiceAccount `wasmctrl rbac` binds.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::run::terminated;
use crate::config::HostConfig;
use crate::ops::manager::{Manager, ManagerOptions};

/// The flags of `wasmctrl dev` besides the config.
#[derive(clap::Args, Debug)]
pub(super) struct DevOptions {
    /// Apply the manifests in this directory first (CRDs first).
    #[arg(long)]
    pub(super) apply: Option<PathBuf>,
    /// Where the embedded API server listens.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub(super) addr: SocketAddr,
    /// Where to write the kubeconfig for kubectl.
    #[arg(long, default_value = ".wasmctrl/kubeconfig")]
    pub(super) kubeconfig_out: PathBuf,
    /// Serve the admin endpoints here instead of the config's admin.bind.
    #[arg(long)]
    pub(super) admin: Option<SocketAddr>,
    /// How the embedded API server authorizes requests: `always-allow`,
    /// or `rbac`, which also runs the host as the ServiceAccount
    /// wasmctrl-system/wasmctrl bound to the RBAC `wasmctrl rbac` prints
    /// for the config (the kubeconfig written stays the admin's).
    #[arg(long, default_value_t = wasmctrl_apiserver::Authorization::AlwaysAllow, value_name = "always-allow|rbac")]
    pub(super) authorization: wasmctrl_apiserver::Authorization,
    /// Rebuild a plugin when its sources change and swap it in (plugins
    /// whose component is where `wasmctrl build` writes it); a failed
    /// build keeps the running version.
    #[arg(long)]
    pub(super) watch: bool,
}

pub(super) async fn dev(config_path: PathBuf, dev: DevOptions) -> anyhow::Result<()> {
    let DevOptions {
        apply,
        addr,
        kubeconfig_out,
        admin,
        authorization,
        watch,
    } = dev;
    let config = load_with_admin_bind(&config_path, admin)?;
    // One build session for the start's builds and the watch's rebuilds: a
    // JavaScript plugin built now leaves its componentize-js worker warm.
    let session = watch.then(crate::tools::build::BuildSession::new);
    build_missing_plugins(&config, session.as_ref())?;
    let server = wasmctrl_apiserver::ApiServer::start(wasmctrl_apiserver::Config {
        addr,
        authorization,
        ..wasmctrl_apiserver::Config::default()
    })
    .await?;
    server.write_kubeconfig(&kubeconfig_out)?;
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
        webhook_client_ca: Some(server.ca_pem().to_string()),
        function_cache_dir: function_cache_dir(&config),
        ..ManagerOptions::default()
    };
    let plugins: Vec<String> = config.plugins.iter().map(|p| p.name.clone()).collect();
    let watched = session.map(|session| {
        let mut plugins = super::watch::watched_plugins(&config);
        super::watch::share_warm_tools(&mut plugins, session);
        plugins
    });
    let manager = Manager::start(config, client, options).await?;
    for failure in manager.loaded().await {
        eprintln!(
            "plugin {:?} did not load (the others run; it loads again when its source or the config changes): {}",
            failure.plugin, failure.error
        );
    }
    let watcher = match watched {
        Some(plugins) => {
            let status = std::sync::Arc::new(manager.status_reader());
            Some(tokio::spawn(super::watch::watch(plugins, status)))
        }
        None => None,
    };
    // One banner once the host runs: what a person needs to look at it.
    // The admin line comes last; scripts wait for it.
    let admin = manager.admin_addr();
    println!(
        "wasmctrl dev is ready (plugins: {})\n\
         API server:  {} (authorization: {})\n\
         kubectl:     export KUBECONFIG={}\n\
         status page: http://{admin}/\n\
         admin: http://{admin}/plugins",
        if plugins.is_empty() {
            "none yet".to_string()
        } else {
            plugins.join(", ")
        },
        server.url(),
        server.authorization(),
        absolute(&kubeconfig_out).display(),
    );
    let result = manager.run(terminated()).await;
    if let Some(watcher) = watcher {
        watcher.abort();
    }
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

/// Where `dev` keeps compiled functions when the config sets no
/// `runtime.cacheDir`: the user's cache (`~/.cache/wasmctrl/compiled`, or
/// under `$XDG_CACHE_HOME`), laid out as a `cacheDir` is. An author
/// restarts `dev` often, and an interpreted plugin rebuilt is a new
/// component whose interpreter's functions were compiled before, so the
/// compile after a restart reuses them (`sandbox::function_cache`). Only
/// functions: whole compiled components, a new one per rebuild, would
/// fill the disk for nothing.
fn function_cache_dir(config: &HostConfig) -> Option<PathBuf> {
    if config.runtime.cache_dir.is_some() {
        return None;
    }
    let dir = crate::meta::files::user_cache_dir("compiled")?;
    println!(
        "compiled functions are kept in {} for the next start (runtime.cacheDir moves them)",
        dir.display()
    );
    Some(dir)
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// `dev` builds plugins whose component is missing when its path follows
/// the build conventions (`crate::tools::build::source_of`): a Rust crate of a
/// cargo workspace, or a Python/JavaScript plugin's `target/<name>.wasm`.
/// With `session` (`--watch`), the builds run in the session the rebuilds
/// use.
fn build_missing_plugins(
    config: &HostConfig,
    session: Option<&crate::tools::build::BuildSession>,
) -> anyhow::Result<()> {
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
        println!(
            "building plugin {:?} from {} …{}",
            plugin.name,
            dir.display(),
            if session.is_some() {
                " (in the build session --watch keeps for rebuilds)"
            } else {
                ""
            }
        );
        let options = crate::tools::build::BuildOptions {
            verbose: true,
            session: session.cloned(),
            ..options
        };
        crate::tools::build::build(&dir, &options)
            .with_context(|| format!("plugin {:?}", plugin.name))?;
    }
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
