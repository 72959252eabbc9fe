//! One guest call, for every export and every instance strategy: a store
//! and instance from the strategy, the export run under the deadline and
//! cancellation, and one classification of how it ended.
//!
//! # Deadline, cancellation, backstop
//! The epoch callback interrupts a running guest at its deadline (within one
//! tick), and a cancelled one after the cancellation grace. A guest blocked
//! in a host call runs no wasm, so epochs cannot stop it: the host call is
//! bounded by the deadline, and a backstop timer of deadline + two ticks
//! (+5 ms) ends the call from outside.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::Runtime;
use super::code::Code;
use super::failure::CallFailure;
pub(crate) use super::guest::Review;
use super::limits::Limits;
use super::outbound::OutboundGrant;
use super::share::PluginActivity;
use super::store::{CallContext, Spares, StoreSpec, StoreState};
use super::strategy::InstanceStrategy;
use crate::control::metrics::CallUsage;
use crate::control::reconcile::{ObjectKey, TrapKind};
use crate::sandbox::hostapi::KubeApi;
use crate::sandbox::wit::wasmctrl::reconciler::types;

/// The pieces every instance of a plugin is made from.
pub(crate) struct Sandbox {
    pub(crate) runtime: Runtime,
    /// The compiled, pre-linked component (unloaded while idle, see `code`).
    pub(crate) code: Code,
    pub(crate) name: Arc<str>,
    /// The plugin's activity, for sharing the CPU with other plugins.
    pub(crate) activity: Arc<PluginActivity>,
    pub(crate) settings: Arc<str>,
    pub(crate) limits: Limits,
    pub(crate) kube: Arc<dyn KubeApi>,
    /// What the guest's outbound HTTP requests may reach.
    pub(crate) outbound: Arc<OutboundGrant>,
    pub(crate) strategy: InstanceStrategy,
    /// WASI contexts of finished stores, for the next ones.
    pub(crate) spares: Spares,
}

/// Which export a call runs.
pub(crate) enum Export {
    Metadata,
    Reconcile(ObjectKey),
    /// An admission review: `validate` or `mutate` with the request's JSON.
    Review(Review, String),
}

/// What an export returned.
pub(crate) enum Returned {
    Metadata(
        types::PluginMetadata,
        Vec<types::OutboundRule>,
        Vec<types::Webhook>,
    ),
    Reconcile(Result<types::Action, types::ReconcileError>),
    Review(types::AdmissionResponse),
}

/// A call's outcome and what it cost.
pub(crate) struct CallReport {
    pub(crate) result: Result<Returned, CallFailure>,
    pub(crate) usage: CallUsage,
}

impl Sandbox {
    pub(crate) fn store_spec(&self) -> StoreSpec<'_> {
        StoreSpec {
            runtime: &self.runtime,
            plugin: &self.name,
            settings: &self.settings,
            limits: &self.limits,
            kube: &self.kube,
            outbound: &self.outbound,
            activity: &self.activity,
            spares: &self.spares,
        }
    }

    /// Runs `export` in an instance from the plugin's strategy (`metadata`
    /// always in a fresh one), bounded by `context`'s deadline and
    /// cancellation. Never panics and never leaves the guest running.
    pub(crate) async fn call(&self, export: Export, context: CallContext) -> CallReport {
        let started = context.started;
        let _running = self.runtime.share().enter(&self.activity, started);
        let tick = self.runtime.config().epoch_tick;
        let backstop = context.deadline + 2 * tick + Duration::from_millis(5);
        let cancel = context.cancel.clone();
        let http_made = context.http_made.clone();
        let strategy = match export {
            Export::Metadata => &InstanceStrategy::Fresh,
            Export::Reconcile(_) | Export::Review(..) => &self.strategy,
        };
        let code = match self.code.enter(&self.runtime).await {
            Ok(code) => code,
            Err(failure) => {
                return CallReport {
                    usage: CallUsage {
                        instantiate: started.elapsed(),
                        trap: failure.trap_kind(),
                        ..CallUsage::default()
                    },
                    result: Err(failure),
                };
            }
        };
        let checkout = strategy.checkout(self.store_spec(), context);
        let history = checkout.history;
        let output = checkout.store.data().output.clone();
        let run = async move {
            let mut store = checkout.store;
            let instance = match checkout.instance {
                Some(i) => Ok(i),
                None => code.pre.instantiate_async(&mut store).await,
            };
            let instantiated = started.elapsed();
            let (instance, returned) = match instance {
                Err(e) => (None, Err(e)),
                Ok(mut i) => {
                    let returned = match export {
                        Export::Metadata => i
                            .call_metadata(&mut store)
                            .await
                            .map(|(m, o, w)| Returned::Metadata(m, o, w)),
                        Export::Reconcile(key) => {
                            let key = types::ObjectKey {
                                namespace: key.namespace,
                                name: key.name,
                            };
                            i.call_reconcile(&mut store, &key)
                                .await
                                .map(Returned::Reconcile)
                        }
                        Export::Review(review, request) => i
                            .call_review(&mut store, review, &request)
                            .await
                            .map(Returned::Review),
                    };
                    (Some(i), returned)
                }
            };
            (store, instance, instantiated, returned)
        };
        let grace = self.runtime.config().cancel_grace;
        let (bounded, guest_time) = bounded(std::pin::pin!(run), &cancel, grace, backstop).await;
        output.flush();
        let mut usage = CallUsage {
            guest_time,
            ..CallUsage::default()
        };
        let result = match bounded {
            Bounded::Done((store, instance, instantiated, mut returned)) => {
                if let Ok(Returned::Reconcile(Err(
                    types::ReconcileError::Transient(message)
                    | types::ReconcileError::Permanent(message),
                ))) = &mut returned
                {
                    // A secret the guest was revealed never reaches the
                    // host's error (logs, events, status, `/plugins`).
                    *message = store.data().http.redact(message);
                }
                // Nor the verdict's texts (the API server returns and logs
                // them).
                if let Ok(Returned::Review(verdict)) = &mut returned {
                    let http = &store.data().http;
                    redact_verdict(verdict, |text| http.redact(text));
                }
                if let Ok(Returned::Reconcile(Err(
                    types::ReconcileError::Transient(message)
                    | types::ReconcileError::Permanent(message),
                ))) = &mut returned
                    && output.bound_error(message)
                {
                    self.runtime
                        .metrics()
                        .count_limit(&self.name, "errorMessage");
                }
                usage.instantiate = instantiated;
                self.measure(&store, &mut usage);
                let refused = store.data().limiter.refused;
                let mut result = returned.map_err(|e| CallFailure::classify(&e, refused));
                if let Err(CallFailure::Trap { message, .. }) = &result
                    && message.ends_with(super::failure::CUT)
                {
                    self.runtime
                        .metrics()
                        .count_limit(&self.name, "errorMessage");
                }
                if let Some(made) = &http_made {
                    made.store(store.data().http.requests(), Ordering::Relaxed);
                }
                // A refused outbound request fails the call whatever the
                // guest made of it: the refusal names the rule or ceiling,
                // which the guest's own error (`HTTP-request-denied`)
                // cannot.
                if let Some(refusal) = store.data().http.refusal()
                    && !matches!(
                        result,
                        Err(CallFailure::Trap {
                            kind: TrapKind::Deadline,
                            ..
                        })
                    )
                {
                    let ceiling = refusal.reason.ceiling();
                    result = Err(CallFailure::Trap {
                        kind: if ceiling.is_some() {
                            TrapKind::Limit
                        } else {
                            TrapKind::Other
                        },
                        ceiling,
                        message: refusal.to_string(),
                    });
                }
                let done_with = match instance {
                    Some(instance) => strategy.checkin(store, instance, history, result.is_ok()),
                    None => Some(store),
                };
                if let Some(store) = done_with {
                    self.spares.keep(store.into_data());
                }
                result
            }
            Bounded::Cancelled => Err(CallFailure::Cancelled),
            Bounded::TimedOut => Err(CallFailure::backstop(format!(
                "guest still running {:?} after it started (blocked in a host call)",
                started.elapsed()
            ))),
        };
        usage.output_bytes = output.written();
        if usage.instantiate.is_zero() {
            usage.instantiate = started.elapsed();
        }
        if let Err(f) = &result {
            usage.trap = f.trap_kind();
            if let CallFailure::Trap {
                ceiling: Some(c), ..
            } = f
            {
                usage.ceiling = Some(c.as_str());
            }
        }
        CallReport { result, usage }
    }

    fn measure(&self, store: &wasmtime::Store<StoreState>, usage: &mut CallUsage) {
        let data = store.data();
        usage.memory_peak = data.limiter.memory_peak;
        usage.cpu_throttled = data.call.throttled;
        usage.host_calls = data.budget.host_calls;
        if self.runtime.config().fuel {
            let budget = self.limits.fuel.unwrap_or(u64::MAX);
            usage.fuel_consumed = store.get_fuel().ok().map(|left| budget - left);
        }
    }
}

enum Bounded<T> {
    Done(T),
    Cancelled,
    TimedOut,
}

/// The backstop timer and the cancellation waiter of a guest call.
struct Guards {
    backstop: Pin<Box<tokio::time::Sleep>>,
    cancelled: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    /// Started when `cancelled` fires: the guest's time to stop by itself.
    grace: Option<Pin<Box<tokio::time::Sleep>>>,
}

/// Runs `call` until it finishes, `grace` after `cancel` fires, or
/// `deadline` passes; also returns the time spent polling it (the guest's
/// run time: CPU time unless the OS preempted the thread).
///
/// The timers and the cancellation waiter are only set up once `call` first
/// returns Pending (a guest yielding at an epoch tick or blocked in a host
/// call): a short reconcile finishes on its first poll and never pays for
/// registering them (~1 µs of an ~8 µs noop reconcile).
///
/// `call` is pinned by the caller, so the guest's future (instantiation
/// and call, several KiB) is not copied into this one.
async fn bounded<F: Future>(
    mut call: Pin<&mut F>,
    cancel: &CancellationToken,
    grace: Duration,
    deadline: Instant,
) -> (Bounded<F::Output>, Duration) {
    let mut guards: Option<Guards> = None;
    let mut polling = Duration::ZERO;
    let outcome = std::future::poll_fn(|cx| {
        let poll_started = Instant::now();
        let polled = call.as_mut().poll(cx);
        polling += poll_started.elapsed();
        if let Poll::Ready(r) = polled {
            return Poll::Ready(Bounded::Done(r));
        }
        let g = guards.get_or_insert_with(|| Guards {
            backstop: Box::pin(tokio::time::sleep_until(deadline.into())),
            cancelled: Box::pin(cancel.clone().cancelled_owned()),
            grace: None,
        });
        if g.grace.is_none() && g.cancelled.as_mut().poll(cx).is_ready() {
            g.grace = Some(Box::pin(tokio::time::sleep(grace)));
        }
        if let Some(grace) = g.grace.as_mut()
            && grace.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Bounded::Cancelled);
        }
        if g.backstop.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Bounded::TimedOut);
        }
        Poll::Pending
    })
    .await;
    (outcome, polling)
}

/// A fresh context for a call of `timeout` from now.
pub(crate) fn context(attempt: u32, timeout: Duration, cancel: CancellationToken) -> CallContext {
    let started = Instant::now();
    CallContext {
        attempt,
        started,
        deadline: started + timeout,
        cancel,
        kube: None,
        tape: None,
        http_made: None,
        http_tape: None,
        reviewing: false,
    }
}

/// Passes every text of `response` the API server shows or logs (the
/// message, each warning, each cause's field, reason and message, each
/// audit annotation's key and value) through `redact`, before its bounds
/// are checked: a secret the guest was revealed never leaves in them. The
/// mutated object is the plugin's to write, as any object it writes.
fn redact_verdict(response: &mut types::AdmissionResponse, redact: impl Fn(&str) -> String) {
    response.message = redact(&response.message);
    for warning in &mut response.warnings {
        *warning = redact(warning);
    }
    for cause in &mut response.causes {
        cause.field = redact(&cause.field);
        cause.reason = redact(&cause.reason);
        cause.message = redact(&cause.message);
    }
    for (key, value) in &mut response.audit_annotations {
        *key = redact(key);
        *value = redact(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_reaches_every_text_of_a_verdict() {
        let secret = "s3cr3t";
        let mut r = types::AdmissionResponse {
            allowed: false,
            code: 0,
            message: String::new(),
            causes: vec![],
            warnings: vec![],
            audit_annotations: vec![],
            patched: None,
        };
        r.message = format!("token {secret} refused");
        r.causes = vec![types::FieldCause {
            field: format!("spec.{secret}"),
            reason: secret.into(),
            message: format!("was {secret}"),
        }];
        r.warnings = vec![format!("{secret}!")];
        r.audit_annotations = vec![(secret.into(), format!("v={secret}"))];
        redact_verdict(&mut r, |text| text.replace(secret, "<secret:token>"));
        let shown = format!("{r:?}");
        assert!(!shown.contains(secret), "{shown}");
        assert_eq!(r.message, "token <secret:token> refused");
        assert_eq!(r.causes[0].field, "spec.<secret:token>");
        assert_eq!(r.audit_annotations[0].0, "<secret:token>");
    }
}
