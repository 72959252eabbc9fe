//! The host config file (YAML, Kubernetes-style): strict, validated, with
//! errors naming the file, the field path and the plugin. Each section is
//! a module that maps its YAML onto what its subsystem takes, with the
//! checks the file format adds.
//!
//! ```yaml
//! apiVersion: wasmctrl.dev/v1alpha1
//! kind: HostConfig
//! admin: { bind: "127.0.0.1:9090" }
//! shutdownTimeout: 30s
//! plugins:
//!   - name: webapp
//!     path: ../../target/wasm32-wasip2/release/webapp.wasm   # relative to this file
//!     reconcileTimeout: 10s
//!     memoryLimit: 64Mi
//!     permissions:
//!       - { group: apps, resources: [deployments], verbs: [get, patch] }
//! pluginsFrom: { kind: WasmReconciler }   # also plugins defined as objects
//! webhook: { bind: "127.0.0.1:9443" }     # serve the plugins' admission webhooks
//! maxGrant:                               # … granted at most this
//!   - { group: "", resources: [configmaps], verbs: [get, list, watch, patch] }
//! ```

mod election;
mod error;
mod host;
mod limits;
mod plugin;
mod plugins_from;
mod record;
mod rollout;
mod runtime;
mod settings;
mod shape;
mod source;
#[cfg(test)]
mod tests;
mod units;
mod webhook;

pub use election::{LeaderElectionConfig, ShardingConfig};
pub use error::{ConfigError, FieldProblem};
pub use host::{API_VERSION, AdminConfig, CacheSection, HostConfig, KIND, MAX_CONFIG_BYTES};
pub use limits::LimitsConfig;
pub use plugin::{InstanceModeConfig, PluginConfig, RateLimiterConfig, check_plugin_name};
pub use plugins_from::{
    DEFAULT_MAX_LOADING_BYTES, MAX_ALLOW_HOSTS, PLUGINS_FROM_KIND, PluginsFrom,
};
pub use record::{MAX_RECORD_BYTES, RecordConfig};
pub use rollout::{CanaryConfig, CandidateConfig, CandidateMode};
pub use runtime::{GuestCpuSection, RuntimeSection};
pub use source::{
    DEFAULT_FETCH_TIMEOUT, DEFAULT_MAX_SIZE, FetchLimits, OciSourceSpec, SourceConfig,
    SourceProblem, SourceSpec, UrlSourceSpec, is_loopback_url, oci_reference, sha256_digest,
};
pub use units::{parse_cpu, parse_duration, parse_quantity, show_duration};
pub use webhook::{
    AdmissionConfig, AdmissionMode, SecretReference, ServiceReference, WebhookSection,
};
