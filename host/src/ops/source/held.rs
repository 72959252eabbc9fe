//! The bytes of components that loads hold in memory together: one
//! [`Budget`] for all WasmReconciler objects, so that however many objects
//! are written at once, their downloads and cached copies (each up to
//! `maxSize`, read whole before they are compiled) hold at most
//! `pluginsFrom.maxLoadingBytes`.
//!
//! A load takes its share as its bytes arrive, inside [`holding`]: each
//! chunk of a download and each cached copy read is [`charge`]d to the
//! load's account, which gives everything back when the load ends (its
//! plugin compiled, or the load failed or was stopped). A load that would
//! pass the budget is refused at once as unavailable, and its object is
//! loaded again with its backoff. It is not made to wait: a download its
//! author stalls holds only the bytes it received, so stalled downloads
//! hold up no other object's load until they have been sent the budget.
//!
//! Loads of the host config's plugins are not charged: whoever writes the
//! config chooses their sizes.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::metrics::gauge::Gauge;

use crate::control::metrics::{SourceRefusal, count_source_refusal};

/// Bytes that loads may hold together.
#[derive(Debug)]
pub struct Budget {
    limit: u64,
    used: AtomicU64,
    /// The bytes held now, as `wasmctrl_object_component_bytes` shows.
    gauge: Gauge,
}

impl Budget {
    /// A budget of `limit` bytes, whose use `gauge` shows.
    pub fn new(limit: u64, gauge: Gauge) -> Arc<Self> {
        Arc::new(Budget {
            limit,
            used: AtomicU64::new(0),
            gauge,
        })
    }

    /// Bytes held now.
    #[cfg(test)]
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    fn take(&self, n: u64) -> Result<(), Exhausted> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&after| after <= self.limit)
            })
            .map_err(|_| {
                count_source_refusal(SourceRefusal::LoadingBytes);
                Exhausted { limit: self.limit }
            })?;
        self.gauge.inc_by(n as i64);
        Ok(())
    }

    fn give_back(&self, n: u64) {
        self.used.fetch_sub(n, Ordering::AcqRel);
        self.gauge.dec_by(n as i64);
    }
}

/// A load refused because the loads under way hold the whole budget.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "the WasmReconciler objects' loads under way hold {limit} bytes of components, all that pluginsFrom.maxLoadingBytes allows at once; this load is tried again later"
)]
pub struct Exhausted {
    limit: u64,
}

/// One load's share of a [`Budget`], given back when it is dropped.
struct Account {
    budget: Arc<Budget>,
    held: AtomicU64,
}

impl Drop for Account {
    fn drop(&mut self) {
        self.budget.give_back(*self.held.get_mut());
    }
}

tokio::task_local! {
    static ACCOUNT: Account;
}

/// Runs `load` with its bytes charged to `budget`, and gives them back
/// when it ends.
pub async fn holding<F: Future>(budget: Arc<Budget>, load: F) -> F::Output {
    let account = Account {
        budget,
        held: AtomicU64::new(0),
    };
    ACCOUNT.scope(account, load).await
}

/// Charges `n` bytes about to be held to the load this task runs, if it
/// runs one inside [`holding`].
pub(crate) fn charge(n: u64) -> Result<(), Exhausted> {
    ACCOUNT
        .try_with(|account| {
            account.budget.take(n)?;
            account.held.fetch_add(n, Ordering::Relaxed);
            Ok(())
        })
        .unwrap_or(Ok(()))
}

/// [`charge`] for a load from `origin`, a refusal as that source's
/// [`SourceError::Busy`].
pub(crate) fn charge_for(origin: &str, n: u64) -> Result<(), super::SourceError> {
    charge(n).map_err(|e| super::SourceError::Busy {
        origin: origin.to_string(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn loads_share_one_budget_and_give_it_back_when_they_end() {
        let gauge = Gauge::default();
        let budget = Budget::new(100, gauge.clone());
        let (holding_60, release) = tokio::sync::oneshot::channel::<()>();
        let (charged, was_charged) = tokio::sync::oneshot::channel();
        let first = tokio::spawn(holding(budget.clone(), async move {
            charge(40).unwrap();
            charge(20).unwrap();
            charged.send(()).unwrap();
            let _ = release.await;
        }));
        was_charged.await.unwrap();
        assert_eq!((budget.used(), gauge.get()), (60, 60));
        let refused = holding(budget.clone(), async { charge(41) }).await;
        let e = refused.unwrap_err().to_string();
        assert!(
            e.contains("hold 100 bytes") && e.contains("maxLoadingBytes"),
            "{e}"
        );
        // What a refused load took before its refusal is given back too.
        holding(budget.clone(), async {
            charge(30).unwrap();
            assert!(charge(20).is_err());
        })
        .await;
        assert_eq!(budget.used(), 60);
        holding_60.send(()).unwrap();
        first.await.unwrap();
        assert_eq!((budget.used(), gauge.get()), (0, 0));
        // Outside a load nothing is charged.
        charge(1 << 40).unwrap();
        assert_eq!(budget.used(), 0);
    }
}
