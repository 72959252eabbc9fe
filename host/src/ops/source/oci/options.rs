//! How to reach a registry: shared by pulls, `push` and `inspect`.

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::FetchLimits;
use crate::ops::source::credentials::RegistryCredentials;

/// How to reach a registry.
#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    /// Plain HTTP instead of HTTPS.
    pub insecure: bool,
    /// A docker `config.json` with credentials (None: the default places,
    /// see [`credentials::docker_config_path`](crate::ops::source::credentials::docker_config_path)).
    pub docker_config: Option<PathBuf>,
    /// Where credentials come from instead of a docker config file (a
    /// Kubernetes Secret); when set, `docker_config` is not read.
    pub credentials: Option<Arc<dyn RegistryCredentials>>,
    pub limits: FetchLimits,
}
