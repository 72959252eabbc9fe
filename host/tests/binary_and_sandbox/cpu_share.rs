//! Guests share the CPU between plugins: a guest that spins past its burst
//! is held to its plugin's share while another plugin has work, still ends
//! at its deadline, and runs freely when its plugin is alone.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use wasmctrl::TrapKind;
use wasmctrl::sandbox::{GuestCpu, Limits, Plugin, RuntimeConfig, Through};
use wasmctrl_plugin_artifacts as artifacts;

use crate::{load, request, runtime_with, test_runtime_config, trap_kind};

/// The spinner's call: long enough that, unthrottled, its guest runs for
/// far more than the share allows.
const SPIN: Duration = Duration::from_secs(2);

/// A runtime sharing at 50m past a 20 ms burst.
fn sharing_runtime() -> wasmctrl::sandbox::Runtime {
    runtime_with(RuntimeConfig {
        guest_cpu: GuestCpu {
            burst: Duration::from_millis(20),
            share_millicores: 50,
        },
        ..test_runtime_config()
    })
}

async fn misbehave(runtime: &wasmctrl::sandbox::Runtime, name: &str) -> Arc<Plugin> {
    load(runtime, name, artifacts::MISBEHAVE, Limits::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spinning_guest_is_held_to_its_share_while_another_plugin_has_work() {
    let runtime = sharing_runtime();
    let spinner = misbehave(&runtime, "spinner").await;
    let neighbour = misbehave(&runtime, "neighbour").await;
    let stop = CancellationToken::new();
    let busy = tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut reconciled = 0u32;
            while !stop.is_cancelled() {
                let done = neighbour.invoke(request("fine", SPIN)).await;
                assert!(done.result.is_ok(), "{:?}", done.result);
                assert!(
                    done.usage.cpu_throttled.is_zero(),
                    "a short reconcile was held back"
                );
                reconciled += 1;
                tokio::task::yield_now().await;
            }
            reconciled
        }
    });

    // Through the controller's entry point, which records the call's cost
    // in the plugin metrics.
    let spun = spinner
        .reconcile_through(request("loop", SPIN), Through::default())
        .await;
    stop.cancel();
    let reconciled = busy.await.unwrap();

    // Held back, it still ends by its deadline: the loop never returns, so
    // a deadline trap is the only way out. (How soon after the deadline is
    // a matter of the machine's load, measured in the benchmarks.)
    assert_eq!(trap_kind(&spun), Some(TrapKind::Deadline));
    assert!(reconciled > 0, "the neighbour never reconciled");
    let text = runtime.metrics().encode();
    // 5 free ticks, a 20 ms burst, then at 50m one 1 ms tick per 20 ms:
    // about 5 + 20 + 100 ticks of running in 2 s. Unthrottled it runs the
    // whole 2 s.
    let ran = spinner_seconds(&text, "wasmctrl_plugin_guest_seconds_total");
    assert!(
        ran < SPIN.as_secs_f64() / 2.0,
        "the spinner ran {ran} s of its {SPIN:?}"
    );
    let held = spinner_seconds(&text, "wasmctrl_plugin_cpu_throttled_seconds_total");
    assert!(held > SPIN.as_secs_f64() / 2.0, "held back only {held} s");
}

/// The spinner's value of the counter `family`.
fn spinner_seconds(text: &str, family: &str) -> f64 {
    let series = format!("{family}{{plugin=\"spinner\",version=\"stable\",kind=\"reconcile\"}} ");
    let line = text
        .lines()
        .find(|l| l.starts_with(&series))
        .unwrap_or_else(|| panic!("no {series}in:\n{text}"));
    line[series.len()..].parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spinning_guest_alone_is_never_held_back() {
    // Only one plugin: loading a second would count as its work for a while.
    let runtime = sharing_runtime();
    let spinner = misbehave(&runtime, "spinner").await;
    let timeout = Duration::from_millis(300);
    let spin = spinner.invoke(request("loop", timeout)).await;
    assert_eq!(trap_kind(&spin.result), Some(TrapKind::Deadline));
    assert_eq!(spin.usage.cpu_throttled, Duration::ZERO);
    // It ran for (nearly) all of its time.
    assert!(
        spin.usage.guest_time > timeout / 4,
        "ran only {:?}",
        spin.usage.guest_time
    );
}
