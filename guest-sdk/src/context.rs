use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::Error;
use crate::host::context as host;

/// The reconcile's context: its deadline, cancellation, attempt and the
/// plugin's settings from the host config.
///
/// The host enforces the deadline on the guest (the instance is interrupted
/// once it passes); long-running reconcilers check [`Context::cancelled`] and
/// [`Context::deadline_remaining`] to stop cleanly instead.
#[derive(Debug)]
pub struct Context {
    _private: (),
}

impl Context {
    pub(crate) fn current() -> Self {
        Self { _private: () }
    }

    /// Time left before the host interrupts this reconcile.
    pub fn deadline_remaining(&self) -> Duration {
        Duration::from_millis(host::deadline_remaining_ms())
    }

    /// True once the host asked this reconcile to stop (shutdown, unload).
    pub fn cancelled(&self) -> bool {
        host::cancelled()
    }

    /// Retries of this key since its last success (0 on the first attempt).
    pub fn attempt(&self) -> u32 {
        host::attempt()
    }

    /// The plugin's `settings` from the host config, as raw JSON.
    pub fn settings_json(&self) -> String {
        host::settings()
    }

    /// The plugin's `settings`, deserialized. Invalid settings are a
    /// permanent error: retrying cannot fix the config.
    pub fn settings<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_str(&host::settings())
            .map_err(|e| Error::permanent(format!("invalid plugin settings: {e}")))
    }
}
