//! Engine settings are fixed when the host starts (changing them means a new
//! engine and recompiling every plugin). A plugin loaded later — a config
//! reload, a new object — must fit them, or it is refused with the reason;
//! nothing runs with less than it asked for (a plugin with `fuel` on an
//! engine without fuel metering would run unmetered).

use crate::config::{HostConfig, PluginConfig};
use crate::sandbox::RuntimeConfig;

/// Instance slots kept free for `metadata` calls at load and for swaps.
const SPARE_INSTANCES: u32 = 16;
/// Warm pool slots kept beyond the plugins' concurrency.
const WARM_SPARE: u32 = 4;
/// Warm pool slots kept per CPU at most, whatever the plugins' concurrency.
const WARM_PER_CPU: u32 = 16;

/// What the engine was built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineLimits {
    /// Fuel metering is compiled in.
    pub fuel: bool,
    /// Instances live at once across all plugins.
    pub max_instances: u32,
    /// Unused pool slots kept warm (see
    /// [`RuntimeConfig::max_unused_warm_slots`]).
    pub warm_slots: u32,
}

impl EngineLimits {
    /// The engine `config` asks for: `runtime.fuel` and `runtime.maxInstances`
    /// when set, else what the plugins of the config need, with room to grow.
    pub fn for_config(config: &HostConfig) -> Self {
        let concurrency: u32 = config.plugins.iter().map(|p| p.concurrency() as u32).sum();
        let max_instances = config
            .runtime
            .max_instances
            .unwrap_or((concurrency * 2 + SPARE_INSTANCES).max(64));
        Self {
            fuel: config
                .runtime
                .fuel
                .unwrap_or_else(|| config.plugins.iter().any(|p| p.fuel.is_some())),
            max_instances,
            warm_slots: warm_slots(concurrency, cpus(), max_instances),
        }
    }

    /// The runtime settings for these limits.
    pub fn runtime_config(&self, config: &HostConfig) -> RuntimeConfig {
        RuntimeConfig {
            fuel: self.fuel,
            max_instances: self.max_instances,
            max_unused_warm_slots: self.warm_slots,
            guest_cpu: config.runtime.guest_cpu.into(),
            function_cache_bytes: usize::try_from(config.runtime.function_cache)
                .unwrap_or(usize::MAX),
            cache_dir: config
                .runtime
                .cache_dir
                .as_ref()
                .map(|d| config.base_dir.join(d)),
            ..RuntimeConfig::default()
        }
    }

    /// Whether `plugin` can run on this engine next to plugins whose
    /// concurrency adds up to `others`; Err says what is missing and how to
    /// get it.
    pub fn admit(&self, plugin: &PluginConfig, others: u32) -> Result<(), String> {
        if plugin.fuel.is_some() && !self.fuel {
            return Err(
                "it sets `fuel`, but the engine was started without fuel metering; set `runtime.fuel: true` in the config and restart the host"
                    .into(),
            );
        }
        let wanted = others + plugin.concurrency() as u32 + SPARE_INSTANCES;
        if wanted > self.max_instances {
            return Err(format!(
                "its maxConcurrentReconciles ({}, with shadow runs {}) does not fit the engine's {} instance slots ({others} in use by other plugins, {SPARE_INSTANCES} kept for loads); raise `runtime.maxInstances` and restart the host",
                plugin.max_concurrent_reconciles,
                plugin.concurrency(),
                self.max_instances
            ));
        }
        Ok(())
    }
}

/// The pool slots kept warm (resident, for their component's next
/// instance) when the plugins' concurrency adds up to `concurrency`.
///
/// Room for every instance the plugins run at once to find its own warm
/// slot (two memories each, and a few spare), and no more: a hot swap then
/// reuses a warm slot instead of warming one more (docs/RELIABILITY.md, the
/// soak). At most [`WARM_PER_CPU`] per CPU, though: only `cpus` guests run
/// at a time, so beyond that the slots kept are those of plugins that ran
/// least recently, each holding up to `linear_memory_keep_resident` for a
/// reconcile that may come minutes later. A plugin whose slot went cold
/// pays a fresh slot's page faults on its next instance (tens of
/// microseconds), once.
fn warm_slots(concurrency: u32, cpus: u32, max_instances: u32) -> u32 {
    let per_cpu = cpus.max(1).saturating_mul(WARM_PER_CPU);
    concurrency
        .saturating_mul(2)
        .min(per_cpu)
        .saturating_add(WARM_SPARE)
        .min(max_instances)
}

fn cpus() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn config(text: &str) -> HostConfig {
        HostConfig::parse(Path::new("t.yaml"), text, PathBuf::from("/")).unwrap()
    }

    const TWO: &str = r#"
apiVersion: wasmctrl.dev/v1alpha1
kind: HostConfig
plugins:
  - { name: a, path: a.wasm, maxConcurrentReconciles: 4 }
  - { name: b, path: b.wasm, maxConcurrentReconciles: 2, fuel: 1000 }
"#;

    #[test]
    fn the_engine_is_sized_from_the_config_at_start() {
        let e = EngineLimits::for_config(&config(TWO));
        assert!(e.fuel);
        assert_eq!(e.max_instances, 64);
        let none = EngineLimits::for_config(&config(
            "apiVersion: wasmctrl.dev/v1alpha1\nkind: HostConfig\nruntime: { maxInstances: 20 }\n",
        ));
        assert!(!none.fuel);
        assert_eq!(none.max_instances, 20);
    }

    #[test]
    fn warm_slots_cover_the_plugins_concurrency_up_to_a_budget_per_cpu() {
        // One plugin of 4: each instance finds its own two memory slots.
        assert_eq!(warm_slots(4, 2, 64), 12);
        // A hundred plugins of 1 on 2 CPUs: the slots of the 16 plugins
        // that ran last, not of all 100.
        assert_eq!(warm_slots(100, 2, 216), 36);
        assert_eq!(warm_slots(100, 8, 216), 132);
        // Never more than the pool has.
        assert_eq!(warm_slots(100, 64, 120), 120);
        assert_eq!(warm_slots(0, 0, 64), 4);
        // However large the counts, no overflow.
        assert_eq!(warm_slots(u32::MAX, u32::MAX, 64), 64);
    }

    #[test]
    fn a_later_plugin_that_needs_more_is_refused_with_the_reason() {
        let c = config(TWO);
        let without_fuel = EngineLimits {
            fuel: false,
            max_instances: 64,
            warm_slots: 8,
        };
        let e = without_fuel.admit(&c.plugins[1], 0).unwrap_err();
        assert!(e.contains("runtime.fuel"), "{e}");
        assert!(without_fuel.admit(&c.plugins[0], 0).is_ok());
        let small = EngineLimits {
            fuel: true,
            max_instances: 24,
            warm_slots: 8,
        };
        assert!(small.admit(&c.plugins[0], 4).is_ok());
        let e = small.admit(&c.plugins[0], 5).unwrap_err();
        assert!(e.contains("runtime.maxInstances"), "{e}");
    }
}
