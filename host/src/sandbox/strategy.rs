//! Where a call's instance comes from: the instance strategy seam.
//!
//! `fresh` (the default) builds a new store and instance for every call: no
//! state survives between reconciles, which is what a level-triggered,
//! idempotent reconcile wants, at 5–60 µs for compiled guests. An interpreted
//! guest (Python, JavaScript) costs 1–2 ms to instantiate, so it may instead
//! `reuse` warm instances. A strategy only decides where the store comes
//! from and whether it goes back; the call itself (`sandbox::call`) is the
//! same for every strategy.
//!
//! # A reused instance is clean enough, never tainted
//! A warm instance keeps its linear memory and globals (module state of the
//! guest's language persists across reconciles and keys; the SDKs keep no
//! per-reconcile state there). The host's per-call state — context,
//! deadline, budgets, output — is reset for every call. An instance is
//! dropped, never reused, after a trap, a deadline, a cancellation or a host
//! error; it is recycled after `max_calls` calls, after `max_age`, or once
//! its memory grew past `max_memory`. A hot swap makes a new plugin with an
//! empty pool; the old pool is dropped with the old version.

use std::ops::RangeInclusive;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use wasmtime::Store;

use super::guest::Guest;
use super::store::{CallContext, StoreSpec, StoreState};

/// Which strategy a plugin asks for (`instanceMode` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InstanceMode {
    /// A new instance per call.
    #[default]
    Fresh,
    /// A pool of warm instances.
    Reuse,
    /// `reuse` when the component's initial memory is over
    /// [`AUTO_REUSE_PAGES`] (interpreters: Python 197 pages, StarlingMonkey
    /// 145; compiled guests: 2–22), else `fresh`.
    Auto,
}

/// Initial memory (64 KiB pages) above which `auto` reuses instances.
pub const AUTO_REUSE_PAGES: u64 = 64;

/// When a warm instance is recycled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReuseLimits {
    /// Calls one instance serves before it is dropped.
    pub max_calls: u32,
    /// How long one instance lives.
    pub max_age: Duration,
    /// Linear memory (all memories) past which an instance is dropped.
    pub max_memory: usize,
    /// Warm instances kept at once (the plugin's concurrency).
    pub max_idle: usize,
}

impl Default for ReuseLimits {
    fn default() -> Self {
        Self {
            max_calls: 1_000,
            max_age: Duration::from_secs(600),
            max_memory: 48 << 20,
            max_idle: 1,
        }
    }
}

impl ReuseLimits {
    /// The values `max_calls` may take.
    pub const MAX_CALLS: RangeInclusive<u64> = 1..=1_000_000_000;
    /// The values `max_age` may take: an instance younger than a second is
    /// no warmer than a fresh one, and a year bounds every deadline.
    pub const MAX_AGE: RangeInclusive<Duration> =
        Duration::from_secs(1)..=Duration::from_secs(365 * 24 * 3600);
}

/// How a plugin gets an instance for each call.
#[derive(Debug, Default)]
pub(crate) enum InstanceStrategy {
    /// A new store and instance per call.
    #[default]
    Fresh,
    /// Warm instances, recycled per [`ReuseLimits`].
    Reuse(ReusePool),
}

/// The warm instances of one plugin version.
#[derive(Debug)]
pub(crate) struct ReusePool {
    limits: ReuseLimits,
    idle: Mutex<Vec<Warm>>,
}

/// A warm instance and what it has served.
struct Warm {
    store: Store<StoreState>,
    instance: Guest,
    calls: u32,
    created: Instant,
}

impl std::fmt::Debug for Warm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Warm")
            .field("calls", &self.calls)
            .field("created", &self.created)
            .finish_non_exhaustive()
    }
}

/// A store for one call, with its instance when it is already warm.
pub(crate) struct Checkout {
    pub(crate) store: Store<StoreState>,
    pub(crate) instance: Option<Guest>,
    /// Calls served and birth of a reused instance (for recycling).
    pub(crate) history: (u32, Instant),
}

impl InstanceStrategy {
    pub(crate) fn reuse(limits: ReuseLimits) -> Self {
        InstanceStrategy::Reuse(ReusePool {
            limits,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// A store set up for the call in `context`: a warm one from the pool,
    /// or a new one made to `spec`.
    pub(crate) fn checkout(&self, spec: StoreSpec<'_>, context: CallContext) -> Checkout {
        if let InstanceStrategy::Reuse(pool) = self {
            let warm = {
                let mut idle = pool.idle.lock().unwrap();
                // Drop instances that aged out while idle.
                idle.retain(|w| w.created.elapsed() < pool.limits.max_age);
                idle.pop()
            };
            if let Some(mut w) = warm {
                w.store.data_mut().begin_call(context);
                w.store.set_epoch_deadline(1);
                if spec.runtime.config().fuel {
                    let fuel = spec.limits.fuel.unwrap_or(u64::MAX);
                    let _ = w.store.set_fuel(fuel);
                }
                return Checkout {
                    store: w.store,
                    instance: Some(w.instance),
                    history: (w.calls, w.created),
                };
            }
        }
        let started = context.started;
        Checkout {
            store: StoreState::new_store(spec, context),
            instance: None,
            history: (0, started),
        }
    }

    /// Takes back the store of a finished call; returns it when it is not
    /// kept warm. `clean` is false after a trap, a deadline, a cancellation
    /// or a host error: such an instance is never used again.
    pub(crate) fn checkin(
        &self,
        store: Store<StoreState>,
        instance: Guest,
        history: (u32, Instant),
        clean: bool,
    ) -> Option<Store<StoreState>> {
        let InstanceStrategy::Reuse(pool) = self else {
            return Some(store);
        };
        let (calls, created) = (history.0 + 1, history.1);
        let l = &pool.limits;
        let keep = clean
            && calls < l.max_calls
            && created.elapsed() < l.max_age
            && store.data().limiter.memory_now() <= l.max_memory;
        if !keep {
            return Some(store);
        }
        let mut idle = pool.idle.lock().unwrap();
        if idle.len() < l.max_idle {
            idle.push(Warm {
                store,
                instance,
                calls,
                created,
            });
            return None;
        }
        Some(store)
    }

    /// Drops every warm instance (the plugin's code is being unloaded).
    pub(crate) fn clear(&self) {
        if let InstanceStrategy::Reuse(pool) = self {
            let dropped = std::mem::take(&mut *pool.idle.lock().unwrap());
            drop(dropped);
        }
    }

    /// Warm instances waiting (for tests and status).
    pub(crate) fn idle(&self) -> usize {
        match self {
            InstanceStrategy::Fresh => 0,
            InstanceStrategy::Reuse(pool) => pool.idle.lock().unwrap().len(),
        }
    }
}
