//! What one instance of a plugin may consume, and the wasmtime
//! [`ResourceLimiter`] that holds it to that.
//!
//! # Memory is counted across every linear memory
//! A component may instantiate many core modules, each with its own memory.
//! The limit is on their sum, so a component cannot multiply its budget by
//! defining more memories.
//!
//! # Instances, memories and tables are counted per store
//! A component that needs more core instances, memories or tables than its
//! plugin is allowed is refused at instantiation; it never takes pool slots
//! from other plugins.

use std::ops::RangeInclusive;

use wasmtime::ResourceLimiter;

/// The most core instances, memories and tables a plugin may be allowed per
/// component instance ([`Limits::instances`], …): the engine's instance pool
/// is sized for them.
pub const MAX_INSTANCES: usize = 64;
pub const MAX_MEMORIES: usize = 8;
pub const MAX_TABLES: usize = 64;

/// Per-plugin sandbox ceilings, applied to every instance (and, for the
/// per-call budgets, to every call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Linear memory of all the instance's memories together, in bytes. A
    /// grow past it fails (the guest usually aborts: a [`Memory`] trap).
    ///
    /// [`Memory`]: crate::TrapKind::Memory
    pub memory_bytes: usize,
    /// Elements of any one table.
    pub table_elements: usize,
    /// Core instances one component instance may create.
    pub instances: usize,
    /// Linear memories one component instance may define.
    pub memories: usize,
    /// Tables one component instance may define.
    pub tables: usize,
    /// Fuel per call (needs `RuntimeConfig::fuel`); None: unmetered.
    pub fuel: Option<u64>,
    /// Bytes of stdout, stderr and `log` messages kept per call; the rest is
    /// dropped with one marker line.
    pub output_bytes: usize,
    /// The longest output line (or `log` message) kept; longer ones are cut
    /// with a marker.
    pub output_line: usize,
    /// `log` calls per call; further ones are dropped (one marker line).
    pub log_calls: u32,
    /// `kube` calls per call; the one past it fails the call with a
    /// [`Limit`] trap.
    ///
    /// [`Limit`]: crate::TrapKind::Limit
    pub host_calls: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 64 << 20,
            table_elements: 20_000,
            // Rust and TypeScript guests use 3 core instances, Python 14
            // (docs/writing-plugins.md, its table of builds); 2 memories
            // and a few tables.
            instances: 32,
            memories: 4,
            tables: 32,
            fuel: None,
            output_bytes: 1 << 20,
            output_line: 16 << 10,
            log_calls: 1_000,
            host_calls: 10_000,
        }
    }
}

// The values each limit may take. Below the floors a guest cannot start
// or say why it failed; above the ceilings one call could hold more of the
// host than any reconcile needs.
impl Limits {
    /// `memory_bytes`: at most the engine's reservation for one memory
    /// (`RuntimeConfig::max_memory`).
    pub const MEMORY_BYTES: RangeInclusive<u64> = (1 << 20)..=(4 << 30);
    /// `output_bytes`.
    pub const OUTPUT_BYTES: RangeInclusive<u64> = (1 << 10)..=(64 << 20);
    /// `output_line`.
    pub const OUTPUT_LINE: RangeInclusive<u64> = 64..=(1 << 20);
    /// `log_calls`.
    pub const LOG_CALLS: RangeInclusive<u64> = 0..=1_000_000;
    /// `host_calls`.
    pub const HOST_CALLS: RangeInclusive<u64> = 1..=1_000_000;
    /// `instances`, up to the pool's [`MAX_INSTANCES`].
    pub const INSTANCES: RangeInclusive<u64> = 1..=MAX_INSTANCES as u64;
    /// `memories`, up to the pool's [`MAX_MEMORIES`].
    pub const MEMORIES: RangeInclusive<u64> = 1..=MAX_MEMORIES as u64;
    /// `tables`, up to the pool's [`MAX_TABLES`].
    pub const TABLES: RangeInclusive<u64> = 1..=MAX_TABLES as u64;
}

/// Which ceiling a call ran into (for the error and the metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ceiling {
    Memory,
    TableElements,
    Instances,
    Memories,
    Tables,
    HostCalls,
    /// WASI resources (pollables, streams) held at once.
    WasiResources,
    /// Outbound HTTP requests per call.
    HttpRequests,
    /// Bytes of one outbound request's body.
    HttpRequestBytes,
    /// Bytes of one outbound response's body.
    HttpResponseBytes,
    /// Outbound connections a plugin holds at once.
    HttpConnections,
}

impl Ceiling {
    /// The `limit` label of `wasmctrl_plugin_limit_exceeded_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Ceiling::Memory => "memory",
            Ceiling::TableElements => "tableElements",
            Ceiling::Instances => "instances",
            Ceiling::Memories => "memories",
            Ceiling::Tables => "tables",
            Ceiling::HostCalls => "hostCalls",
            Ceiling::WasiResources => "wasiResources",
            Ceiling::HttpRequests => "httpRequests",
            Ceiling::HttpRequestBytes => "httpRequestBytes",
            Ceiling::HttpResponseBytes => "httpResponseBytes",
            Ceiling::HttpConnections => "httpConnections",
        }
    }
}

/// Holds a store to its plugin's [`Limits`] and records what it refused:
/// wasmtime has no trap code for a refused grow, so this is how a memory
/// trap is recognised.
pub(crate) struct GuestLimiter {
    memory_limit: usize,
    table_elements: usize,
    instances: usize,
    memories: usize,
    tables: usize,
    /// Bytes of every memory of the store together, now.
    memory_total: usize,
    /// The most `memory_total` reached.
    pub(crate) memory_peak: usize,
    /// The ceiling refused during the current call, if any.
    pub(crate) refused: Option<Ceiling>,
}

impl GuestLimiter {
    /// Bytes of every memory of the store together, now.
    pub(crate) fn memory_now(&self) -> usize {
        self.memory_total
    }

    pub(crate) fn new(limits: &Limits) -> Self {
        Self {
            memory_limit: limits.memory_bytes,
            table_elements: limits.table_elements,
            instances: limits.instances,
            memories: limits.memories,
            tables: limits.tables,
            memory_total: 0,
            memory_peak: 0,
            refused: None,
        }
    }
}

impl ResourceLimiter for GuestLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.memory_total - current.min(self.memory_total) + desired;
        if total > self.memory_limit {
            self.refused = Some(Ceiling::Memory);
            return Ok(false);
        }
        self.memory_total = total;
        self.memory_peak = self.memory_peak.max(total);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.table_elements {
            self.refused = Some(Ceiling::TableElements);
            return Ok(false);
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        self.instances
    }

    fn memories(&self) -> usize {
        self.memories
    }

    fn tables(&self) -> usize {
        self.tables
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_counted_across_memories() {
        let mut l = GuestLimiter::new(&Limits {
            memory_bytes: 10 << 20,
            ..Limits::default()
        });
        // Two memories of 4 MiB each fit; a third does not.
        assert!(l.memory_growing(0, 4 << 20, None).unwrap());
        assert!(l.memory_growing(0, 4 << 20, None).unwrap());
        assert!(!l.memory_growing(0, 4 << 20, None).unwrap());
        assert_eq!(l.refused, Some(Ceiling::Memory));
        // Growing one of them by 2 MiB still fits exactly.
        assert!(l.memory_growing(4 << 20, 6 << 20, None).unwrap());
        assert_eq!(l.memory_peak, 10 << 20);
    }

    #[test]
    fn a_table_past_its_elements_is_refused_and_named() {
        let mut l = GuestLimiter::new(&Limits {
            table_elements: 100,
            ..Limits::default()
        });
        assert!(l.table_growing(0, 100, None).unwrap());
        assert_eq!(l.refused, None);
        assert!(!l.table_growing(100, 101, None).unwrap());
        assert_eq!(l.refused, Some(Ceiling::TableElements));
        assert_eq!(Ceiling::TableElements.as_str(), "tableElements");
    }
}
