//! The document: `apiVersion`, `kind`, the host process's own fields
//! (`admin`, timeouts, `cache`), and the sections, each checked by its own
//! module; and loading a file.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::shape::{mapping, mappings, optional_mapping, optional_mappings};
use serde::Deserialize;

use super::election::{LeaderElectionConfig, ShardingConfig};
use super::error::{ConfigError, FieldProblem};
use super::plugin::{PluginConfig, check_plugin_name, check_rules};
use super::plugins_from::PluginsFrom;
use super::runtime::RuntimeSection;
use super::units::{HOUR, SECOND, duration, within};
use super::webhook::WebhookSection;
use crate::control::informer::CacheOptions;
use crate::meta::files::{self, LocalReadError};
use crate::sandbox::hostapi::PermissionRule;

/// The `apiVersion` of a host config.
pub const API_VERSION: &str = "wasmctrl.dev/v1alpha1";
/// The `kind` of a host config.
pub const KIND: &str = "HostConfig";
/// The largest config file read: room for thousands of plugin entries.
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// The whole host config.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HostConfig {
    pub api_version: String,
    pub kind: String,
    #[serde(default, deserialize_with = "mapping")]
    pub admin: AdminConfig,
    #[serde(default = "default_shutdown_timeout", deserialize_with = "duration")]
    pub shutdown_timeout: Duration,
    /// How long plugins wait for their informers' first list before the
    /// host reports not ready.
    #[serde(default = "default_cache_sync_timeout", deserialize_with = "duration")]
    pub cache_sync_timeout: Duration,
    /// What the shared informer cache keeps of each object.
    #[serde(default, deserialize_with = "mapping")]
    pub cache: CacheSection,
    #[serde(default, deserialize_with = "mapping")]
    pub leader_election: LeaderElectionConfig,
    /// Spread the keys over the replicas (see [`crate::control::shard`]);
    /// None: one leader (with leader election) or every host reconciles
    /// every key.
    #[serde(default, deserialize_with = "optional_mapping")]
    pub sharding: Option<ShardingConfig>,
    #[serde(default, deserialize_with = "mapping")]
    pub runtime: RuntimeSection,
    #[serde(default, deserialize_with = "mappings")]
    pub plugins: Vec<PluginConfig>,
    /// Also run the plugins defined by WasmReconciler objects in the
    /// cluster (opt-in; see [`PluginsFrom`]).
    #[serde(default, deserialize_with = "optional_mapping")]
    pub plugins_from: Option<PluginsFrom>,
    /// The most a WasmReconciler object may grant its plugin: an object
    /// whose `permissions` (within its `namespaces`) allow anything these
    /// rules do not is refused. Unset is `[]`: object plugins may be granted
    /// nothing, so every object that asks for a permission is refused
    /// (plugins of the config file are not limited by it).
    #[serde(default, deserialize_with = "optional_mappings")]
    pub max_grant: Option<Vec<PermissionRule>>,
    /// Serve the plugins' admission webhooks (None: none are served).
    #[serde(default, deserialize_with = "optional_mapping")]
    pub webhook: Option<WebhookSection>,
    /// The directory of the config file; plugin paths are relative to it.
    #[serde(skip)]
    pub base_dir: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AdminConfig {
    /// Where `/metrics`, `/healthz`, `/readyz` and `/plugins` are served.
    pub bind: SocketAddr,
    /// A file holding the bearer token the mutating endpoints (`POST
    /// /plugins/{name}/reload`) require. Required when `bind` is not a
    /// loopback address; relative to the config file.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            bind: "127.0.0.1:9090".parse().unwrap(),
            token_file: None,
        }
    }
}

/// What the shared informer cache keeps of each object (fixed at start:
/// every plugin reads the same informers).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct CacheSection {
    /// Drop `metadata.managedFields` from cached objects, and from the
    /// objects the host API hands guests (live reads, write answers)
    /// (default: the cache's, true). Reconcilers do not read them, and
    /// every guest would parse them on every read.
    pub strip_managed_fields: bool,
}

impl Default for CacheSection {
    fn default() -> Self {
        Self {
            strip_managed_fields: CacheOptions::default().strip_managed_fields,
        }
    }
}

fn default_shutdown_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_cache_sync_timeout() -> Duration {
    Duration::from_secs(120)
}

impl HostConfig {
    /// Reads, parses and validates the config file at `file`: a regular
    /// file of at most [`MAX_CONFIG_BYTES`] of UTF-8 (the path may name a
    /// FIFO or a device, whose size says nothing of what a read returns).
    pub fn load(file: &Path) -> Result<Self, ConfigError> {
        let read_error = |source| ConfigError::Read {
            file: file.to_path_buf(),
            source,
        };
        let bytes = files::read_regular_blocking(file, MAX_CONFIG_BYTES).map_err(|e| {
            read_error(match e {
                LocalReadError::Io(e) => e,
                refused => std::io::Error::other(refused.to_string()),
            })
        })?;
        let text = String::from_utf8(bytes).map_err(|_| {
            read_error(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "it is not UTF-8 text",
            ))
        })?;
        let base_dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::parse(file, &text, base_dir)
    }

    /// Parses and validates config `text` (named `file` in errors).
    pub fn parse(file: &Path, text: &str, base_dir: PathBuf) -> Result<Self, ConfigError> {
        let de = serde_norway::Deserializer::from_str(text);
        let mut config: HostConfig =
            serde_path_to_error::deserialize(de).map_err(|e| ConfigError::parse(file, e))?;
        config.base_dir = base_dir;
        config.leader_election = config.leader_election.with_derived_defaults();
        config.validate(file)?;
        Ok(config)
    }

    /// Checks the document, then `leaderElection` and `sharding`,
    /// `runtime`, each plugin, `pluginsFrom` and `maxGrant`: a file with
    /// several problems always reports the same one.
    fn validate(&self, file: &Path) -> Result<(), ConfigError> {
        let top = |r: Result<(), FieldProblem>| r.map_err(|p| ConfigError::invalid(file, None, p));
        top(self.check_document())?;
        top(self.leader_election.check(self.sharding.as_ref()))?;
        top(self.runtime.check())?;
        if let Some(webhook) = &self.webhook {
            top(webhook.check())?;
        }
        let mut names = HashSet::new();
        for (i, p) in self.plugins.iter().enumerate() {
            self.check_plugin(p, &mut names)
                .map_err(|FieldProblem { field, message }| {
                    let problem = FieldProblem::new(format!("plugins[{i}].{field}"), message);
                    ConfigError::invalid(file, Some(&p.name), problem)
                })?;
        }
        if let Some(from) = &self.plugins_from {
            top(from.check(&self.runtime))?;
        }
        if let Some(rules) = &self.max_grant {
            top(check_rules(rules, "maxGrant"))?;
        }
        Ok(())
    }

    /// The document's kind and the fields of the host process itself.
    fn check_document(&self) -> Result<(), FieldProblem> {
        let check = |field: &str, r: Result<(), String>| r.map_err(|m| FieldProblem::new(field, m));
        if self.api_version != API_VERSION {
            return Err(FieldProblem::new(
                "apiVersion",
                format!("must be {API_VERSION:?}, not {:?}", self.api_version),
            ));
        }
        if self.kind != KIND {
            return Err(FieldProblem::new(
                "kind",
                format!("must be {KIND:?}, not {:?}", self.kind),
            ));
        }
        check(
            "shutdownTimeout",
            within(self.shutdown_timeout, Duration::ZERO..=HOUR),
        )?;
        check(
            "cacheSyncTimeout",
            within(self.cache_sync_timeout, SECOND..=HOUR),
        )?;
        if !self.admin.bind.ip().is_loopback() && self.admin.token_file.is_none() {
            return Err(FieldProblem::new(
                "admin.tokenFile",
                format!(
                    "is required when admin.bind ({}) is not a loopback address: the reload endpoint must not be open to the network",
                    self.admin.bind
                ),
            ));
        }
        Ok(())
    }

    /// One entry of `plugins` (fields relative to it): a plugin's own
    /// checks, and what a plugin of the config file needs of the rest of
    /// it. `names` are the plugins' names so far.
    fn check_plugin<'a>(
        &self,
        p: &'a PluginConfig,
        names: &mut HashSet<&'a str>,
    ) -> Result<(), FieldProblem> {
        check_plugin_name(&p.name).map_err(|m| FieldProblem::new("name", m))?;
        if !names.insert(p.name.as_str()) {
            return Err(FieldProblem::new("name", "duplicate plugin name"));
        }
        p.check()?;
        if p.idle_unload.is_some() && self.runtime.cache_dir.is_none() {
            return Err(FieldProblem::new(
                "idleUnload",
                "needs runtime.cacheDir: an unloaded plugin is loaded again from its compiled artifact there",
            ));
        }
        if p.source
            .as_ref()
            .is_some_and(|s| s.image_pull_secret.is_some())
        {
            return Err(FieldProblem::new(
                "source.imagePullSecret",
                "only applies to WasmReconciler objects; a host config names a docker config file (dockerConfig)",
            ));
        }
        Ok(())
    }

    /// Where URL and registry sources keep what they downloaded (by digest)
    /// and the digest each tag last resolved to: `runtime.cacheDir/sources`,
    /// or `.wasmctrl/cache/sources` next to the config file when
    /// `runtime.cacheDir` is unset (a restart must find them, so they are
    /// never memory only).
    pub fn source_cache_dir(&self) -> PathBuf {
        match &self.runtime.cache_dir {
            Some(dir) => self.base_dir.join(dir).join("sources"),
            None => self
                .base_dir
                .join(".wasmctrl")
                .join("cache")
                .join("sources"),
        }
    }

    /// The plugin named `name`.
    pub fn plugin(&self, name: &str) -> Option<&PluginConfig> {
        self.plugins.iter().find(|p| p.name == name)
    }
}
