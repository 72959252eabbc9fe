//! Process-wide gauges of what every plugin of the process shares, so
//! that every registry registers the same series.

use prometheus_client::metrics::gauge::Gauge;

/// `wasmctrl_outbound_lookups_in_flight`: the outbound name lookups on the
/// host's resolver threads, those whose reconcile gave up on them included
/// (at most `sandbox::outbound::MAX_LOOKUPS`).
pub static OUTBOUND_LOOKUPS: std::sync::LazyLock<Gauge> = std::sync::LazyLock::new(Gauge::default);
