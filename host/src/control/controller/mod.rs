//! The controller loop: N workers take keys from the workqueue, call the
//! reconciler, and turn its result into queue operations exactly as
//! controller-runtime's `processNextWorkItem` does.
//!
//! # Result switch
//! - error (including a trap, timeout, fuel exhaustion, host failure) →
//!   `add_rate_limited`, unless it is permanent or the key reached
//!   `max_retries`: then `forget` and record a terminal error;
//! - `requeue_after > 0` → `forget` + `add_after` (wins over `requeue`);
//! - `requeue` → `add_rate_limited`;
//! - otherwise → `forget`.
//!
//! A retry or requeue is queued at the priority the key was handed out
//! with, as controller-runtime does: a key from a resync stays behind
//! changes when it fails.
//!
//! # Done is guaranteed
//! The key goes back to the queue's bookkeeping (`done`) when the worker's
//! [`QueueItem`] is dropped, whatever the reconcile did: returned, trapped,
//! or panicked in native code.

pub mod activity;
mod result;
pub mod watches;

use std::ops::RangeInclusive;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use futures::FutureExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::control::metrics::{
    self, ControllerLabel, ControllerVersionLabels, Metrics, PluginLabel,
};
use crate::control::reconcile::{ObjectKey, Reconcile, ReconcileError, ReconcileRequest};
use crate::control::workqueue::{QueueItem, WorkQueue};

pub use activity::{Activity, ActivitySummary, Outcome};
pub use result::{Disposition, TerminalErrors, TracingTerminalErrors};

/// How a controller runs its reconciler.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// The controller's name: metric label, span field, queue name.
    pub name: String,
    /// Workers, i.e. keys reconciled at once (never the same key twice).
    pub max_concurrent_reconciles: usize,
    /// The context timeout of each reconcile.
    pub reconcile_timeout: Duration,
    /// After this many retries of one key its error becomes terminal.
    pub max_retries: Option<u32>,
}

impl ControllerOptions {
    /// The values `max_concurrent_reconciles` may take.
    pub const MAX_CONCURRENT_RECONCILES: RangeInclusive<u64> = 1..=1024;
    /// The values `reconcile_timeout` may take: a deadline of an hour is
    /// already a reconcile that never returns.
    pub const RECONCILE_TIMEOUT: RangeInclusive<Duration> =
        Duration::from_millis(1)..=Duration::from_secs(3600);

    /// The options of controller `name`: one worker, a 10 s timeout, no
    /// retry limit.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            max_concurrent_reconciles: 1,
            reconcile_timeout: Duration::from_secs(10),
            max_retries: None,
        }
    }
}

/// A controller: a workqueue of [`ObjectKey`]s and a reconciler.
pub struct Controller<R: Reconcile> {
    inner: Arc<Inner<R>>,
}

impl<R: Reconcile> Clone for Controller<R> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<R> {
    options: ControllerOptions,
    queue: WorkQueue<ObjectKey>,
    reconciler: R,
    metrics: Arc<Metrics>,
    terminal: Arc<dyn TerminalErrors>,
    activity: Activity,
    /// This controller's reconcile series, by version (stable, candidate).
    series: [metrics::ReconcileSeries; 2],
    /// Cancels in-flight reconciles (shutdown past its timeout).
    cancel: CancellationToken,
    next_id: AtomicU64,
}

impl<R: Reconcile> Controller<R> {
    pub fn new(
        options: ControllerOptions,
        queue: WorkQueue<ObjectKey>,
        reconciler: R,
        metrics: Arc<Metrics>,
        terminal: Arc<dyn TerminalErrors>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                options,
                queue,
                reconciler,
                metrics,
                terminal,
                activity: Activity::default(),
                series: Default::default(),
                cancel: CancellationToken::new(),
                next_id: AtomicU64::new(1),
            }),
        }
    }

    pub fn name(&self) -> &str {
        &self.inner.options.name
    }

    pub fn queue(&self) -> &WorkQueue<ObjectKey> {
        &self.inner.queue
    }

    pub fn reconciler(&self) -> &R {
        &self.inner.reconciler
    }

    pub fn options(&self) -> &ControllerOptions {
        &self.inner.options
    }

    /// What the controller did lately, for the status page.
    pub fn activity(&self) -> &Activity {
        &self.inner.activity
    }

    /// Starts `max_concurrent_reconciles` workers; they run until the queue
    /// shuts down.
    pub fn start(&self) -> Workers<R> {
        let label = ControllerLabel {
            controller: self.name().to_string(),
        };
        let n = self.inner.options.max_concurrent_reconciles.max(1);
        self.inner
            .metrics
            .max_concurrent
            .get_or_create(&label)
            .set(n as i64);
        let mut set = JoinSet::new();
        let halt = CancellationToken::new();
        for _ in 0..n {
            let this = self.clone();
            let halt = halt.clone();
            set.spawn(async move {
                loop {
                    // `get` is cancel-safe: halting between keys loses none.
                    let item = tokio::select! {
                        biased;
                        _ = halt.cancelled() => break,
                        item = this.inner.queue.get() => item,
                    };
                    let Some(item) = item else { break };
                    // Boxed: the reconcile's state (~5 KB) is allocated only
                    // while a key is in hand, not by every idle worker of
                    // every plugin.
                    Box::pin(this.process(item)).await;
                }
            });
        }
        Workers {
            controller: self.clone(),
            set,
            halt,
        }
    }

    /// One `processNextWorkItem`: reconcile the key, apply the result
    /// switch, and mark the key done (when `item` drops).
    async fn process(&self, item: QueueItem<ObjectKey>) {
        let inner = &self.inner;
        let key = item.key().clone();
        let attempt = inner.queue.num_requeues(&key);
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!(
            "reconcile",
            controller = %inner.options.name,
            key = %key,
            reconcile_id = id,
            attempt,
            digest = tracing::field::Empty,
        );
        if attempt == 0
            && inner
                .reconciler
                .unchanged(&key, inner.options.reconcile_timeout)
                .instrument(span.clone())
                .await
        {
            inner
                .metrics
                .reconcile_skipped
                .get_or_create(&PluginLabel {
                    plugin: inner.options.name.clone(),
                })
                .inc();
            inner.queue.forget(&key);
            span.in_scope(|| tracing::debug!("skipped: nothing the last reconcile read changed"));
            drop(item);
            return;
        }
        let request = ReconcileRequest {
            key: key.clone(),
            attempt,
            timeout: inner.options.reconcile_timeout,
            cancel: inner.cancel.child_token(),
        };
        let label = ControllerLabel {
            controller: inner.options.name.clone(),
        };
        let active = inner.metrics.active_workers.get_or_create(&label).clone();
        active.inc();
        let started = tokio::time::Instant::now();
        // Pinned where it is made, so the wrappers below hold a pointer: a
        // wasm reconcile's future is ~5.7 KiB, and each wrapper taking it by
        // value copied it again (memmove was ~1% of a `throughput` host).
        let reconcile = std::pin::pin!(inner.reconciler.reconcile(request));
        // The version label is read from the task the reconcile ran on: the
        // slot marks a candidate's reconciles (a native reconciler never
        // does, and is `stable`).
        let (result, version) = metrics::with_version(
            AssertUnwindSafe(reconcile.instrument(span.clone())).catch_unwind(),
        )
        .await;
        let result = result.unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "reconciler panicked".into());
            Err(ReconcileError::Host(format!(
                "reconciler panicked: {message}"
            )))
        });
        active.dec();
        let took = started.elapsed();
        let series = &inner.series[usize::from(version == metrics::Version::Candidate)];
        inner
            .metrics
            .observe_reconcile_in(series, &inner.options.name, version, took, &result);
        inner
            .activity
            .record(SystemTime::now(), &key, version, took, &result);
        let _enter = span.enter();
        let disposition = result::handle(
            &inner.queue,
            &key,
            item.priority(),
            &result,
            inner.options.max_retries,
        );
        match (&disposition, &result) {
            (Disposition::Terminal, Err(e)) => {
                inner
                    .metrics
                    .terminal_errors
                    .get_or_create(&ControllerVersionLabels {
                        controller: inner.options.name.clone(),
                        version: version.as_str().into(),
                    })
                    .inc();
                tracing::error!(error = %e, "reconcile failed for good; not retrying");
                inner.terminal.record(&inner.options.name, &key, e);
            }
            (_, Err(e)) => tracing::warn!(error = %e, "reconcile failed; retrying with backoff"),
            (d, Ok(_)) => tracing::debug!(disposition = ?d, "reconciled"),
        }
        drop(item);
    }
}

/// The running workers of a controller.
///
/// Dropped without [`shutdown`](Self::shutdown) or
/// [`detach`](Self::detach) running to their end (the task awaiting one
/// was aborted, or gave up at shutdown), the workers take no new key and
/// cancel the reconciles they hold (a guest is interrupted within one
/// epoch tick). Their tasks live on until those return, so each result is
/// handled as always: a cancelled key goes back to the queue with its
/// backoff, and none is lost with the task that held the workers.
pub struct Workers<R: Reconcile> {
    controller: Controller<R>,
    set: JoinSet<()>,
    /// Stops the workers without shutting the queue down.
    halt: CancellationToken,
}

impl<R: Reconcile> Workers<R> {
    /// Graceful shutdown: stop handing out keys, let in-flight reconciles
    /// finish for up to `timeout`, then cancel the ones still running (a
    /// guest is interrupted within one epoch tick) and wait for the workers.
    /// Returns true if everything finished within `timeout`.
    pub async fn shutdown(mut self, timeout: Duration) -> bool {
        let queue = self.controller.inner.queue.clone();
        let drained = tokio::time::timeout(timeout, queue.shut_down_with_drain())
            .await
            .is_ok();
        if !drained {
            tracing::warn!(
                controller = %self.controller.name(),
                "shutdown timeout reached; cancelling in-flight reconciles"
            );
            self.controller.inner.cancel.cancel();
            queue.shut_down();
        }
        while self.set.join_next().await.is_some() {}
        drained
    }

    /// Stops these workers but keeps the queue (its keys, delays and
    /// backoff counters) for another controller to take over: each worker
    /// finishes the key it holds, up to `timeout`, then in-flight reconciles
    /// are cancelled. Returns true if they all finished in time.
    pub async fn detach(mut self, timeout: Duration) -> bool {
        self.halt.cancel();
        let finished = tokio::time::timeout(timeout, async {
            while self.set.join_next().await.is_some() {}
        })
        .await
        .is_ok();
        if !finished {
            self.controller.inner.cancel.cancel();
            while self.set.join_next().await.is_some() {}
        }
        finished
    }

    /// Stops immediately: pending keys are dropped and in-flight reconciles
    /// cancelled.
    pub async fn abort(self) {
        self.shutdown(Duration::ZERO).await;
    }
}

impl<R: Reconcile> Drop for Workers<R> {
    fn drop(&mut self) {
        // A JoinSet aborts its tasks when dropped, which would drop a
        // reconcile midway: its key's result never handled, its guest never
        // told, the active-workers gauge left counting it.
        self.halt.cancel();
        self.controller.inner.cancel.cancel();
        self.set.detach_all();
    }
}

#[cfg(test)]
mod tests;
