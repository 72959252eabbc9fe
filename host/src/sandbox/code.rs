//! A plugin's compiled code — the component and its pre-linked instance
//! template — resident in memory, or unloaded while the plugin is idle
//! (`idleUnload`).
//!
//! # Unload and wake
//! An unload drops the plugin's references to its compiled code (and the
//! warm instances of a `reuse` pool, which hold it too); the memory goes
//! once no call still runs on it. Only a plugin whose compiled artifact is
//! on disk (`runtime.cacheDir`) is ever unloaded, and the artifact is pinned
//! against pruning while the plugin is loaded. The next call loads the
//! artifact again (MAC-checked, deserialized, pre-linked: milliseconds, no
//! compilation) before it instantiates; calls arriving meanwhile wait for
//! the same load.
//!
//! Unloading never races a call: calls count themselves in under the same
//! lock the unload takes, and a plugin with a call in flight is not idle.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::component::Component;

use super::Runtime;
use super::compiled::{CacheHit, Pin};
use super::failure::CallFailure;
use super::guest::GuestPre;
use crate::control::reconcile::TrapKind;

/// What a resident plugin holds of its compiled code.
pub(crate) struct Resident {
    pub(crate) pre: Arc<GuestPre>,
    /// Keeps the compiled component in the runtime's memory cache while
    /// resident (the cache holds it weakly).
    pub(crate) _component: Arc<Component>,
}

/// A plugin's code, resident or not, and its use.
pub(crate) struct Code {
    digest: String,
    state: Mutex<State>,
    /// Serializes wake-ups: one load, the other callers wait for it.
    waking: tokio::sync::Mutex<()>,
    unloads: AtomicU64,
    wakes: AtomicU64,
    /// Keeps the on-disk artifact from being pruned while the plugin is loaded.
    _pin: Pin,
}

struct State {
    resident: Option<Resident>,
    in_flight: usize,
    last_used: Instant,
    /// Loaded again and not run since: the first call to end settles the
    /// mapped copy's page cache (`ComponentCache::settle`).
    unsettled: bool,
}

/// A call's hold on the code: counted in flight until dropped.
pub(crate) struct InUse<'a> {
    code: &'a Code,
    runtime: &'a Runtime,
    pub(crate) pre: Arc<GuestPre>,
}

impl Drop for InUse<'_> {
    fn drop(&mut self) {
        let settle = {
            let mut s = self.code.state.lock().unwrap();
            s.in_flight -= 1;
            s.last_used = Instant::now();
            std::mem::take(&mut s.unsettled)
        };
        if settle {
            self.runtime.inner.cache.settle(&self.code.digest);
        }
    }
}

impl Code {
    pub(crate) fn new(digest: String, resident: Resident, pin: Pin) -> Self {
        Self {
            digest,
            state: Mutex::new(State {
                resident: Some(resident),
                in_flight: 0,
                last_used: Instant::now(),
                unsettled: false,
            }),
            waking: tokio::sync::Mutex::new(()),
            unloads: AtomicU64::new(0),
            wakes: AtomicU64::new(0),
            _pin: pin,
        }
    }

    /// The code for one call, loading it again first if it was unloaded.
    pub(crate) async fn enter<'a>(
        &'a self,
        runtime: &'a Runtime,
    ) -> Result<InUse<'a>, CallFailure> {
        {
            let mut s = self.state.lock().unwrap();
            s.in_flight += 1;
            if let Some(r) = &s.resident {
                return Ok(InUse {
                    code: self,
                    runtime,
                    pre: r.pre.clone(),
                });
            }
        }
        // Counted in flight from here: no unload while this call waits.
        let guard = InUse {
            code: self,
            runtime,
            pre: self.wake(runtime).await.inspect_err(|_| {
                let mut s = self.state.lock().unwrap();
                s.in_flight -= 1;
            })?,
        };
        Ok(guard)
    }

    async fn wake(&self, runtime: &Runtime) -> Result<Arc<GuestPre>, CallFailure> {
        let _one = self.waking.lock().await;
        if let Some(r) = &self.state.lock().unwrap().resident {
            return Ok(r.pre.clone());
        }
        let (runtime2, digest) = (runtime.clone(), self.digest.clone());
        let loaded = tokio::task::spawn_blocking(move || runtime2.reload(&digest))
            .await
            .map_err(|e| format!("loading the compiled artifact panicked: {e}"))
            .and_then(|r| r);
        let resident = loaded.map_err(|message| CallFailure::Trap {
            kind: TrapKind::Other,
            ceiling: None,
            message: format!(
                "the plugin was unloaded while idle and cannot be loaded again: {message}; reload the plugin"
            ),
        })?;
        let pre = resident.pre.clone();
        {
            let mut s = self.state.lock().unwrap();
            s.resident = Some(resident);
            s.unsettled = true;
        }
        self.wakes.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(digest = %self.digest, "idle plugin loaded again");
        Ok(pre)
    }

    /// Drops the resident code if no call has run for `idle` and none runs
    /// now; returns whether it did. `can_reload` says the artifact is on
    /// disk to come back from.
    pub(crate) fn unload_if_idle(&self, idle: Duration, can_reload: bool) -> bool {
        if !can_reload {
            return false;
        }
        let dropped = {
            let mut s = self.state.lock().unwrap();
            if s.in_flight > 0 || s.resident.is_none() || s.last_used.elapsed() < idle {
                return false;
            }
            s.resident.take()
        };
        // Freed outside the lock (unmapping code is not free).
        drop(dropped);
        self.unloads.fetch_add(1, Ordering::Relaxed);
        true
    }

    pub(crate) fn is_resident(&self) -> bool {
        self.state.lock().unwrap().resident.is_some()
    }

    pub(crate) fn unloads(&self) -> u64 {
        self.unloads.load(Ordering::Relaxed)
    }

    pub(crate) fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::Relaxed)
    }

    /// How long since the last call ended (zero while one runs).
    pub(crate) fn idle_for(&self) -> Duration {
        let s = self.state.lock().unwrap();
        if s.in_flight > 0 {
            Duration::ZERO
        } else {
            s.last_used.elapsed()
        }
    }
}

impl Runtime {
    /// The compiled component of `digest` from memory or the disk cache,
    /// pre-linked (no compilation: the bytes are not kept).
    fn reload(&self, digest: &str) -> Result<Resident, String> {
        let (component, _hit): (Arc<Component>, CacheHit) =
            self.inner.cache.get_compiled(digest)?;
        let pre = self
            .inner
            .linker
            .instantiate_pre(&component)
            .and_then(GuestPre::new)
            .map_err(|e| format!("{e:#}"))?;
        Ok(Resident {
            pre: Arc::new(pre),
            _component: component,
        })
    }
}
