//! A store's data: WASI, the limiter, the call's context and budgets, and
//! the views each WIT interface's host implementation gets of them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use wasmtime::component::ResourceTable;
use wasmtime::{Store, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::Runtime;
use super::failure::Cancelled;
use super::limits::{GuestLimiter, Limits};
use super::outbound::{HttpCall, OutboundGrant, OutboundHooks};
use super::output::{OutputSink, Stream};
use super::share::PluginActivity;
use crate::sandbox::hostapi::KubeApi;
use crate::sandbox::tape::ContextTape;

/// WASI resources (pollables, streams) a guest may hold at once.
const MAX_RESOURCES: usize = 1_000;

/// The context one call runs under.
pub(crate) struct CallContext {
    pub(crate) attempt: u32,
    /// When the call started (read once per call: the clock is not free).
    pub(crate) started: Instant,
    pub(crate) deadline: Instant,
    pub(crate) cancel: CancellationToken,
    /// Serves this call's `kube` imports instead of the plugin's own API
    /// (read tracking, shadow capture); None: the plugin's API.
    pub(crate) kube: Option<Arc<dyn KubeApi>>,
    /// Records (or replays) the `context` values this call reads.
    pub(crate) tape: Option<Arc<ContextTape>>,
    /// Set, when the call returns, to the outbound requests it made.
    pub(crate) http_made: Option<Arc<std::sync::atomic::AtomicU32>>,
    /// Records (or replays) this call's outbound exchanges.
    pub(crate) http_tape: Option<Arc<crate::sandbox::outbound::HttpTape>>,
    /// The call is an admission review: its outbound requests may only read.
    pub(crate) reviewing: bool,
}

/// The call's context as the store keeps it.
pub(crate) struct CallState {
    pub(crate) context: CallContext,
    /// When the epoch callback first saw the cancellation.
    pub(crate) cancel_seen: Option<Instant>,
    /// Epoch ticks at which the guest was seen running.
    pub(crate) ticks: u64,
    /// When the call started: the guest's run before its first tick is
    /// charged from here.
    pub(crate) started: Instant,
    /// Time the guest was held back to share the CPU (`share.rs`).
    pub(crate) throttled: Duration,
    /// The last tick at which the guest went on without yielding: its run
    /// up to then is already charged.
    pub(crate) charged_to: Option<Instant>,
}

impl CallState {
    fn new(context: CallContext) -> Self {
        Self {
            started: context.started,
            context,
            cancel_seen: None,
            ticks: 0,
            throttled: Duration::ZERO,
            charged_to: None,
        }
    }
}

/// Per-call budgets of host calls.
pub(crate) struct Budget {
    pub(crate) host_calls: u32,
    pub(crate) host_call_limit: u32,
    pub(crate) log_calls: u32,
    pub(crate) log_call_limit: u32,
    /// Whether the "log calls exhausted" marker was emitted this call.
    pub(crate) log_exhausted: bool,
}

/// Everything a store holds. Each WIT interface is implemented on a narrow
/// view of it (`imports/`), never on the whole.
pub(crate) struct StoreState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: GuestLimiter,
    pub(crate) call: CallState,
    pub(crate) budget: Budget,
    pub(crate) output: OutputSink,
    /// The generator behind `wasi`'s `wasi:random/insecure`.
    insecure: InsecureRandom,
    /// Stores `wasi` has served, this one included (see [`Spares`]).
    uses: u32,
    pub(crate) plugin: Arc<str>,
    pub(crate) settings: Arc<str>,
    pub(crate) kube: Arc<dyn KubeApi>,
    /// `wasi:http`'s own state (header size bounds).
    http_ctx: WasiHttpCtx,
    /// Checks and sends the guest's outbound requests, and keeps what
    /// this call's requests did.
    pub(crate) http: OutboundHooks,
    /// When the guest last resumed after waiting (a yield, a host call):
    /// what ran since then is its CPU time.
    pub(crate) resumed: Arc<ResumeMark>,
}

/// What a store is made for: the plugin's identity, settings, limits and API.
pub(crate) struct StoreSpec<'a> {
    pub(crate) runtime: &'a Runtime,
    pub(crate) plugin: &'a Arc<str>,
    pub(crate) settings: &'a Arc<str>,
    pub(crate) limits: &'a Limits,
    pub(crate) kube: &'a Arc<dyn KubeApi>,
    pub(crate) outbound: &'a Arc<OutboundGrant>,
    pub(crate) activity: &'a Arc<PluginActivity>,
    pub(crate) spares: &'a Spares,
}

/// A spare WASI context is dropped after this many stores, so the values
/// it holds for the guest's whole life (the `insecure-seed` of its hash
/// maps) are renewed as often as a warm instance's are by default
/// (`maxCallsPerInstance`'s default; this bound does not follow the
/// setting).
const MAX_SPARE_USES: u32 = 1_000;

/// Spare WASI contexts kept per plugin version: about as many as its
/// reconciles run at once.
const MAX_SPARES: usize = 16;

/// The WASI contexts (with the output sinks their streams write to) of a
/// plugin version's finished stores, for its next stores.
///
/// Why: building a `WasiCtx` (seeding its random sources, boxing its
/// clocks, streams and socket policy) and dropping it were ~5% of a fresh
/// noop reconcile (`wasmctrl-bench -- dispatch`, docs/BENCHMARKS.md).
/// Nothing of a call survives in one: it has no preopens, environment,
/// arguments or sockets, stdin is closed, the streams write into the
/// plugin's sink, whose per-call budget starts over, resources live in the
/// store's own table, which is always new, and the insecure generator is
/// reseeded ([`InsecureRandom`]). What a guest can tell is that
/// `insecure-seed` answers the same for up to [`MAX_SPARE_USES`] stores,
/// as it does for a warm instance's calls; it cannot change it. The secure
/// generator is the thread's CSPRNG, as before.
#[derive(Default)]
pub(crate) struct Spares(std::sync::Mutex<Vec<Spare>>);

struct Spare {
    wasi: WasiCtx,
    output: OutputSink,
    insecure: InsecureRandom,
    uses: u32,
}

impl Spares {
    fn take(&self) -> Option<Spare> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    /// Keeps what a finished store leaves, unless enough are kept or this
    /// one served its share.
    pub(crate) fn keep(&self, state: StoreState) {
        if state.uses >= MAX_SPARE_USES {
            return;
        }
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() < MAX_SPARES {
            kept.push(Spare {
                wasi: state.wasi,
                output: state.output,
                insecure: state.insecure,
                uses: state.uses,
            });
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// The generator of a store's `wasi:random/insecure`, reseeded for every
/// store that takes a spare context: a guest reading it in one reconcile
/// learns nothing about what the next one reads, and cannot pass the next
/// one a message by how much it consumed. Seeded on first use: most guests
/// never ask, and a seed costs a draw from the thread's CSPRNG.
#[derive(Clone)]
struct InsecureRandom(Arc<std::sync::Mutex<Option<rand::rngs::SmallRng>>>);

impl InsecureRandom {
    fn new() -> Self {
        Self(Arc::new(std::sync::Mutex::new(None)))
    }

    fn reseed(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn with<T>(&self, f: impl FnOnce(&mut rand::rngs::SmallRng) -> T) -> T {
        use rand::SeedableRng as _;
        let mut rng = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(rng.get_or_insert_with(|| rand::rngs::SmallRng::from_rng(&mut rand::rng())))
    }
}

impl rand::TryRng for InsecureRandom {
    type Error = std::convert::Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        self.with(|r| r.try_next_u32())
    }

    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        self.with(|r| r.try_next_u64())
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        self.with(|r| r.try_fill_bytes(dst))
    }
}

impl StoreState {
    /// A store with the plugin's limits and the call's context, its epoch
    /// deadline checked at every tick.
    pub(crate) fn new_store(spec: StoreSpec<'_>, context: CallContext) -> Store<Self> {
        let limits = spec.limits;
        let (wasi, output, insecure, uses) = match spec.spares.take() {
            Some(spare) => {
                spare.insecure.reseed();
                (spare.wasi, spare.output, spare.insecure, spare.uses + 1)
            }
            None => {
                let output =
                    OutputSink::new(spec.plugin.clone(), limits.output_bytes, limits.output_line);
                let insecure = InsecureRandom::new();
                // No preopens, no environment, no arguments, no sockets.
                let wasi = WasiCtx::builder()
                    .stdout(output.stream(Stream::Stdout))
                    .stderr(output.stream(Stream::Stderr))
                    .insecure_random(insecure.clone())
                    .allow_tcp(false)
                    .allow_udp(false)
                    .allow_ip_name_lookup(false)
                    .build();
                (wasi, output, insecure, 1)
            }
        };
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_RESOURCES);
        let http = OutboundHooks::new(
            spec.outbound.clone(),
            HttpCall::new(
                spec.plugin.clone(),
                spec.runtime.metrics().clone(),
                context.deadline,
                context.http_tape.clone(),
                context.reviewing,
            ),
        );
        output.begin_call(http.call().clone());
        let state = StoreState {
            wasi,
            table,
            limiter: GuestLimiter::new(limits),
            call: CallState::new(context),
            resumed: Arc::default(),
            budget: Budget {
                host_calls: 0,
                host_call_limit: limits.host_calls,
                log_calls: 0,
                log_call_limit: limits.log_calls,
                log_exhausted: false,
            },
            output,
            insecure,
            uses,
            plugin: spec.plugin.clone(),
            settings: spec.settings.clone(),
            kube: spec.kube.clone(),
            http_ctx: WasiHttpCtx::new(),
            http,
        };
        let runtime = spec.runtime;
        let mut store = Store::new(runtime.engine(), state);
        store.limiter(|s| &mut s.limiter);
        if runtime.config().fuel {
            store
                .set_fuel(limits.fuel.unwrap_or(u64::MAX))
                .expect("fuel is enabled on the engine");
        }
        // Check at every tick: cancelled for longer than the grace → error,
        // past the deadline → trap, past the plugin's CPU burst while other
        // plugins have work → sleep for its share (`share.rs`), running for
        // a tick or more since it last waited → yield so a busy guest never
        // starves the executor, otherwise go on.
        store.set_epoch_deadline(1);
        let grace = runtime.config().cancel_grace;
        let tick = runtime.config().epoch_tick;
        let share = runtime.share().clone();
        let activity = spec.activity.clone();
        let resumed = store.data().resumed.clone();
        store.epoch_deadline_callback(move |mut store| {
            let now = Instant::now();
            let call = &mut store.data_mut().call;
            call.ticks += 1;
            if call.context.cancel.is_cancelled() {
                let seen = *call.cancel_seen.get_or_insert(now);
                if now >= seen + grace {
                    return Err(wasmtime::Error::new(Cancelled));
                }
                // Winding down: never held back.
                return Ok(deadline_or_yield(now, call.context.deadline));
            }
            if now >= call.context.deadline {
                return Ok(UpdateDeadline::Interrupt);
            }
            let TickRun { ran, unpaid } =
                TickRun::at(now, call.started, resumed.get(), call.charged_to);
            let mark = resumed.clone();
            if let Some(until) = share.throttle(&activity, now, call.ticks, unpaid) {
                let until = until.min(call.context.deadline);
                call.throttled += until - now;
                let cancel = call.context.cancel.clone();
                return Ok(UpdateDeadline::YieldCustom(
                    1,
                    Box::pin(async move {
                        tokio::select! {
                            () = tokio::time::sleep_until(until.into()) => {}
                            () = cancel.cancelled() => {}
                        }
                        mark.set(Instant::now());
                    }),
                ));
            }
            // A guest that resumed less than a tick ago (most often from a
            // host call that waited on the API server) has not held the
            // worker long: yielding it again would cost a task wake-up and
            // two fiber switches for nothing. One that ran a tick or more
            // yields, so a busy guest never starves the executor.
            if ran < tick {
                call.charged_to = Some(now);
                return Ok(UpdateDeadline::Continue(1));
            }
            Ok(UpdateDeadline::YieldCustom(
                1,
                Box::pin(async move {
                    tokio::task::yield_now().await;
                    mark.set(Instant::now());
                }),
            ))
        });
        store
    }

    /// Starts another call in this store (an instance reused): a new
    /// context and fresh per-call budgets; memory and globals stay.
    pub(crate) fn begin_call(&mut self, context: CallContext) {
        self.http.begin_call(
            context.deadline,
            context.http_tape.clone(),
            context.reviewing,
        );
        self.call = CallState::new(context);
        self.budget.host_calls = 0;
        self.budget.log_calls = 0;
        self.budget.log_exhausted = false;
        self.limiter.refused = None;
        self.output.begin_call(self.http.call().clone());
    }
}

/// The most run time one tick is charged for. The epoch ticker is a thread
/// like any other: on a saturated machine it waits for a core, and a guest
/// runs several ticks' worth between two of them.
const MAX_RUN_BETWEEN_TICKS: Duration = Duration::from_millis(10);

/// What a guest had run by an epoch tick.
#[derive(Debug, PartialEq, Eq)]
struct TickRun {
    /// Since it last started running: its call started or it resumed from
    /// a wait (a yield, a host call).
    ran: Duration,
    /// The part of `ran` not yet charged to its plugin's CPU share: a tick
    /// at which it went on without yielding charged the run before it.
    unpaid: Duration,
}

impl TickRun {
    /// Both bounded by [`MAX_RUN_BETWEEN_TICKS`]: a wait the resume mark
    /// does not see (a WASI poll) is not counted as running beyond a
    /// starved ticker's longest gap.
    fn at(
        now: Instant,
        started: Instant,
        resumed: Option<Instant>,
        charged_to: Option<Instant>,
    ) -> Self {
        let since = resumed.map_or(started, |r| r.max(started));
        let paid_to = charged_to.map_or(since, |c| c.max(since));
        let bounded = |from: Instant| {
            now.saturating_duration_since(from)
                .min(MAX_RUN_BETWEEN_TICKS)
        };
        Self {
            ran: bounded(since),
            unpaid: bounded(paid_to),
        }
    }
}

/// When a guest last resumed after waiting: set by the futures it waits on
/// (a yield, a host call), which cannot reach the store, and read by the
/// epoch callback.
#[derive(Default)]
pub(crate) struct ResumeMark(std::sync::Mutex<Option<Instant>>);

impl ResumeMark {
    pub(crate) fn set(&self, at: Instant) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(at);
    }

    fn get(&self) -> Option<Instant> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Past the deadline: interrupt; otherwise yield for a tick.
fn deadline_or_yield(now: Instant, deadline: Instant) -> UpdateDeadline {
    if now >= deadline {
        UpdateDeadline::Interrupt
    } else {
        UpdateDeadline::Yield(1)
    }
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for StoreState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http_ctx,
            table: &mut self.table,
            hooks: &mut self.http,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use rand::Rng as _;

    use super::{InsecureRandom, MAX_RUN_BETWEEN_TICKS, TickRun};

    /// A guest that goes on at one tick is charged at the next for the run
    /// after the first only, while its run since it last waited (what
    /// decides a yield) keeps growing; a wait starts both afresh.
    #[test]
    fn a_tick_charges_only_the_run_no_earlier_tick_charged() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_micros(n * 100);
        let run = |ran: u64, unpaid: u64| TickRun {
            ran: Duration::from_micros(ran * 100),
            unpaid: Duration::from_micros(unpaid * 100),
        };
        // First tick, 0.4 ms into the call: nothing charged yet.
        assert_eq!(TickRun::at(ms(4), t0, None, None), run(4, 4));
        // It went on there; at the next tick 1 ms later only that is unpaid.
        assert_eq!(TickRun::at(ms(14), t0, None, Some(ms(4))), run(14, 10));
        // It then waited in a host call and resumed at 2.0 ms.
        assert_eq!(
            TickRun::at(ms(23), t0, Some(ms(20)), Some(ms(14))),
            run(3, 3)
        );
        // A mark from before the call (a reused store's) does not count.
        assert_eq!(TickRun::at(ms(5), ms(2), Some(t0), None), run(3, 3));
        // A starved ticker's gap is bounded.
        let late = t0 + 3 * MAX_RUN_BETWEEN_TICKS;
        assert_eq!(
            TickRun::at(late, t0, None, None),
            TickRun {
                ran: MAX_RUN_BETWEEN_TICKS,
                unpaid: MAX_RUN_BETWEEN_TICKS
            }
        );
    }

    /// The store's WASI context holds a clone of the generator; a reseed by
    /// the host must change what that clone hands the guest next.
    #[test]
    fn a_reseed_reaches_the_generator_a_wasi_context_holds() {
        let host = InsecureRandom::new();
        let mut guest_side = host.clone();
        let _read_last_call = guest_side.next_u64();
        let mut unreseeded = host.0.lock().unwrap().clone().expect("seeded by the read");
        host.reseed();
        let next: Vec<u64> = (0..4).map(|_| guest_side.next_u64()).collect();
        let would_have_been: Vec<u64> = (0..4).map(|_| unreseeded.next_u64()).collect();
        assert_ne!(next, would_have_been);
    }
}
