//! A test reconciler whose behaviour is chosen by the key's name, so that one
//! plugin can show a host surviving every way a guest can go wrong while its
//! other keys keep being reconciled:
//!
//! | name            | behaviour                                                  |
//! |-----------------|------------------------------------------------------------|
//! | `loop`          | logs "loop started", then spins forever (deadline or fuel must stop it) |
//! | `bomb`          | allocates until the memory limit stops it                   |
//! | `recurse`       | recurses until the wasm stack overflows                     |
//! | `panic`         | panics (the guest traps with `unreachable`)                 |
//! | `slow-<ms>`     | logs "slow-<ms> started", then works for `<ms>` ms, checking `cancelled` every millisecond |
//! | `print`         | writes to stdout and stderr, then succeeds                  |
//! | `error`         | fails with a transient error                                |
//! | `permanent`     | fails with a permanent error                                |
//! | `requeue`       | succeeds asking for a rate-limited requeue                  |
//! | `after-<ms>`    | succeeds asking to be requeued after `<ms>` ms              |
//! | `attempt-<n>`   | fails transiently until attempt `n`, then succeeds          |
//! | `settings`      | fails permanently unless settings has `"ok": true`          |
//! | `kube`          | gets its own ConfigMap through the host; fails with the error |
//! | `count`         | fails with the number of reconciles this instance has run   |
//! | `log-enabled`   | fails listing the levels `log::enabled` reports, before and after 3 log calls |
//! | `error-<any>`   | fails with a transient error (many keys into backoff)       |
//! | `loop-<any>`    | spins forever (many keys to their deadline)                 |
//! | `spin-<any>`    | spins forever while its ConfigMap exists; succeeds once it is gone |
//! | `fail-<any>`    | fails with a transient error while its ConfigMap exists; succeeds once it is gone |
//! | anything else   | succeeds                                                   |

use std::hint::black_box;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use wasmctrl_sdk::bindings::wasmctrl::reconciler::{kube, types};
use wasmctrl_sdk::{Action, Context, Error, Gvk, Metadata, ObjectKey, Reconciler};

use types::ApiError;

struct Misbehave;

/// The key's own ConfigMap, read through the host (the JSON text).
fn own_configmap(key: &ObjectKey) -> Result<String, ApiError> {
    let kind = types::Gvk {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
    };
    kube::get(&kind, key.namespace.as_deref(), &key.name)
}

impl Reconciler for Misbehave {
    fn metadata() -> Metadata {
        Metadata::new("misbehave", "0.1.0", Gvk::new("", "v1", "ConfigMap"))
    }

    fn reconcile(key: ObjectKey, ctx: &Context) -> Result<Action, Error> {
        let calls = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
        let name = key.name.as_str();
        match name {
            "count" => Err(Error::transient(format!("calls={calls}"))),
            "log-enabled" => {
                let before = enabled_levels();
                for i in 0..3 {
                    wasmctrl_sdk::log::log(
                        wasmctrl_sdk::log::Level::Info,
                        &format!("line {i}"),
                        &[],
                    );
                }
                let after = enabled_levels();
                Err(Error::transient(format!(
                    "before=[{before}] after=[{after}]"
                )))
            }
            "loop" => {
                // Tests wait for this host call before they act on a running guest.
                wasmctrl_sdk::info!("loop started");
                spin_forever()
            }
            "bomb" => allocate_forever(),
            "recurse" => {
                let depth = recurse(black_box(u64::MAX));
                Err(Error::transient(format!("recursion returned at {depth}")))
            }
            "panic" => panic!("misbehave: asked to panic"),
            "print" => {
                println!("hello from the guest's stdout");
                eprintln!("hello from the guest's stderr");
                Ok(Action::done())
            }
            "error" => Err(Error::transient("asked to fail")),
            "permanent" => Err(Error::permanent("asked to fail for good")),
            "requeue" => Ok(Action::requeue()),
            "kube" => {
                own_configmap(&key)?;
                Ok(Action::done())
            }
            "settings" => {
                #[derive(serde::Deserialize)]
                struct Settings {
                    ok: bool,
                }
                let s: Settings = ctx.settings()?;
                if s.ok {
                    Ok(Action::done())
                } else {
                    Err(Error::permanent("settings say not ok"))
                }
            }
            _ => {
                if name.starts_with("error-") {
                    return Err(Error::transient("asked to fail"));
                }
                if name.starts_with("loop-") {
                    spin_forever()
                }
                if name.starts_with("spin-") || name.starts_with("fail-") {
                    return match own_configmap(&key) {
                        Err(ApiError::NotFound(_)) => Ok(Action::done()),
                        Err(e) => Err(e.into()),
                        Ok(_) if name.starts_with("fail-") => {
                            Err(Error::transient("asked to fail while the object exists"))
                        }
                        Ok(_) => spin_forever(),
                    };
                }
                if let Some(ms) = number_after(name, "slow-") {
                    wasmctrl_sdk::info!("{name} started");
                    return slow(ms, ctx);
                }
                if let Some(ms) = number_after(name, "after-") {
                    return Ok(Action::requeue_after(Duration::from_millis(ms)));
                }
                if let Some(n) = number_after(name, "attempt-") {
                    let attempt = u64::from(ctx.attempt());
                    return if attempt >= n {
                        Ok(Action::done())
                    } else {
                        Err(Error::transient(format!("attempt {attempt} < {n}")))
                    };
                }
                wasmctrl_sdk::info!("reconciled {key}");
                Ok(Action::done())
            }
        }
    }
}

/// Reconciles this instance has run: module state persists across calls
/// in `instanceMode: reuse`, and starts over in a new instance.
static CALLS: AtomicU32 = AtomicU32::new(0);

fn enabled_levels() -> String {
    use wasmctrl_sdk::log::{Level, enabled};
    [
        (Level::Trace, "trace"),
        (Level::Debug, "debug"),
        (Level::Info, "info"),
        (Level::Warn, "warn"),
        (Level::Error, "error"),
    ]
    .into_iter()
    .filter(|(l, _)| enabled(*l))
    .map(|(_, n)| n)
    .collect::<Vec<_>>()
    .join(",")
}

fn number_after(name: &str, prefix: &str) -> Option<u64> {
    name.strip_prefix(prefix)?.parse().ok()
}

fn spin_forever() -> ! {
    let mut x = 0u64;
    loop {
        x = black_box(x.wrapping_add(1));
    }
}

fn allocate_forever() -> ! {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        // Touch every page so the memory is really committed.
        chunks.push(vec![1u8; 1 << 20]);
        black_box(&chunks);
    }
}

#[inline(never)]
fn recurse(n: u64) -> u64 {
    if n == 0 {
        0
    } else {
        black_box(recurse(black_box(n - 1))) + 1
    }
}

fn slow(ms: u64, ctx: &Context) -> Result<Action, Error> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(ms) {
        if ctx.cancelled() {
            wasmctrl_sdk::warn!("cancelled after {:?}", start.elapsed());
            return Err(Error::transient("cancelled"));
        }
        let until = Instant::now() + Duration::from_millis(1);
        while Instant::now() < until {
            black_box(());
        }
    }
    Ok(Action::done())
}

wasmctrl_sdk::export_reconciler!(Misbehave);
