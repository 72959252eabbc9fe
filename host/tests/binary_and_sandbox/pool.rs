//! The instance pool across hot swaps: every swap brings a new component,
//! which has no warm slot of its own. The pool then takes a warm slot of a
//! gone component rather than warming one more, so what unused slots keep
//! resident stops at the warm-slot budget however many swaps happen.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use wasmctrl::control::metrics::Metrics;
use wasmctrl::sandbox::{PluginSpec, Runtime, RuntimeConfig};
use wasmctrl::{ObjectKey, ReconcileRequest};
use wasmctrl_plugin_artifacts as artifacts;

use crate::{TIMEOUT, test_runtime_config};

/// `component` with a custom section appended: the same code, a new digest.
fn variant(component: &[u8], n: usize) -> Vec<u8> {
    let name = b"swap";
    let payload = n.to_string();
    let size = 1 + name.len() + payload.len();
    assert!(size < 128, "one-byte LEB128 sizes only");
    let mut out = component.to_vec();
    out.extend_from_slice(&[0, size as u8, name.len() as u8]);
    out.extend_from_slice(name);
    out.extend_from_slice(payload.as_bytes());
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_swaps_leave_no_more_warm_pool_slots_than_the_budget() {
    const BUDGET: u32 = 3;
    const SWAPS: usize = 12;
    let metrics = Arc::new(Metrics::new());
    let runtime = Runtime::new(
        RuntimeConfig {
            max_unused_warm_slots: BUDGET,
            ..test_runtime_config()
        },
        metrics.clone(),
    )
    .unwrap();
    let base = std::fs::read(artifacts::NOOP).unwrap();
    let mut digests = std::collections::BTreeSet::new();
    for n in 0..SWAPS {
        let plugin = runtime
            .load_bytes(
                format!("noop-{n}"),
                variant(&base, n),
                PluginSpec::new("noop"),
            )
            .await
            .unwrap();
        digests.insert(plugin.digest().to_string());
        for _ in 0..3 {
            let request = ReconcileRequest {
                key: ObjectKey::namespaced("default", "a"),
                attempt: 0,
                timeout: TIMEOUT,
                cancel: CancellationToken::new(),
            };
            plugin.invoke(request).await.result.unwrap();
        }
        // The swap: the old version goes away.
        drop(plugin);
    }
    assert_eq!(digests.len(), SWAPS, "each swap is a new component");
    let pool = runtime.engine().pooling_allocator_metrics().unwrap();
    assert!(
        pool.unused_warm_memories() <= BUDGET,
        "{} warm memory slots after {SWAPS} swaps (budget {BUDGET})",
        pool.unused_warm_memories()
    );
    assert!(pool.unused_warm_stacks() <= BUDGET);
    runtime.observe_pool();
    let text = metrics.encode();
    let warm = text
        .lines()
        .find(|l| l.starts_with(r#"wasmctrl_pool_unused_warm_slots{pool="memory"}"#))
        .unwrap_or_else(|| panic!("the pool gauge in {text}"));
    let n: u32 = warm.rsplit(' ').next().unwrap().parse().unwrap();
    assert!((1..=BUDGET).contains(&n), "{warm}");
}
