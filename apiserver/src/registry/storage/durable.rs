//! Staged writes with persistence: the handle a request waits on until its
//! write is durable, and the persister's queue.

use std::sync::Arc;

use tokio::sync::watch;

use super::event::Event;

/// Resolves once a staged write is durable and visible (`Ok`) or was
/// discarded because it could not be persisted (`Err` with the reason).
#[derive(Debug, Clone)]
pub(crate) struct Durable(watch::Receiver<Option<Result<(), Arc<str>>>>);

impl Durable {
    /// Waits for the outcome.
    pub(crate) async fn wait(mut self) -> Result<(), Arc<str>> {
        match self.0.wait_for(Option::is_some).await {
            Ok(outcome) => outcome.clone().unwrap_or(Ok(())),
            Err(_) => Err("persistence stopped before the write was durable".into()),
        }
    }
}

/// The persister's side of a [`Durable`]: resolves it exactly once.
#[derive(Debug)]
pub(crate) struct DurableSender(watch::Sender<Option<Result<(), Arc<str>>>>);

impl DurableSender {
    pub(crate) fn resolve(self, outcome: Result<(), Arc<str>>) {
        self.0.send_replace(Some(outcome));
    }
}

pub(super) fn durable_pair() -> (DurableSender, Durable) {
    let (tx, rx) = watch::channel(None);
    (DurableSender(tx), Durable(rx))
}

/// Work for the persister, queued in resourceVersion order.
#[derive(Debug)]
pub(crate) enum PersistOp {
    /// A staged write; `done` is resolved after it is durable and applied,
    /// or after it was discarded.
    Write {
        event: Arc<Event>,
        /// The store's failure epoch when it was staged; a write staged
        /// before a failed batch is discarded (it may build on that batch).
        epoch: u64,
        done: DurableSender,
    },
    /// A resourceVersion bump with no object (forced expiry).
    Rv { rv: u64, epoch: u64 },
}

impl PersistOp {
    pub(crate) fn epoch(&self) -> u64 {
        match self {
            PersistOp::Write { epoch, .. } | PersistOp::Rv { epoch, .. } => *epoch,
        }
    }

    /// The bytes of object JSON it writes.
    pub(crate) fn bytes(&self) -> usize {
        match self {
            PersistOp::Write { event, .. } => event.object.len(),
            PersistOp::Rv { .. } => 0,
        }
    }
}
