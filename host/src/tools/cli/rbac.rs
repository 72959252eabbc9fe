//! `wasmctrl rbac`: the least-privilege RBAC of a config's host.

use std::path::Path;

use crate::config::HostConfig;

/// `wasmctrl rbac`: the RBAC of `config`'s host on stdout.
pub(super) fn rbac(
    config: &Path,
    namespace: String,
    service_account: String,
) -> anyhow::Result<()> {
    let config = HostConfig::load(config)?;
    let options = crate::ops::rbac::RbacOptions {
        namespace,
        service_account,
    };
    let yaml = crate::ops::rbac::generate(&config).to_yaml(&options)?;
    print!("{yaml}");
    Ok(())
}
