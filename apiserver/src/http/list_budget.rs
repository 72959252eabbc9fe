//! The bytes of list answers on their way to clients at once. A list's
//! body is built whole before it is sent, and a client that asks and does
//! not read holds it until the write timeout closes its connection; without
//! a budget, a few hundred such clients of a large resource would hold
//! gigabytes. A list takes its share, estimated from the stored objects it
//! holds, before its body is built, and settles it at the body's real size.
//! Past the budget a list is answered 429 (retry, or list in pages with
//! `limit`), counted as `listBytes`.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;
use crate::metrics::{Limit, Metrics};

/// The bytes of list answers in flight at once, by default
/// ([`crate::Timeouts::max_list_bytes`]).
pub(crate) const MAX_LIST_BYTES: usize = 512 << 20;

/// An answer is handed to the connection in pieces of this size, so it
/// holds its share of the budget until its last piece is taken.
const PIECE: usize = 64 << 10;

/// The budget, in KiB.
pub(crate) struct ListBudget {
    permits: Arc<Semaphore>,
    kib: u32,
}

impl ListBudget {
    pub(crate) fn new(max_bytes: usize) -> Self {
        let kib = u32::try_from(max_bytes / 1024)
            .unwrap_or(u32::MAX)
            .clamp(1, Semaphore::MAX_PERMITS as u32);
        ListBudget {
            permits: Arc::new(Semaphore::new(kib as usize)),
            kib,
        }
    }

    /// A share of the budget for an answer of about `estimate` bytes, taken
    /// before the answer is built (so that many large lists at once are
    /// refused before they are built, not after), or 429 past the budget.
    /// A share larger than the whole budget takes all of it.
    pub(crate) fn reserve(
        &self,
        metrics: &Metrics,
        estimate: usize,
    ) -> Result<Reserved<'_>, ApiError> {
        let held = self
            .permits
            .clone()
            .try_acquire_many_owned(self.share(estimate))
            .map_err(|_| self.refused(metrics))?;
        Ok(Reserved { budget: self, held })
    }

    /// The permits an answer of `bytes` takes.
    fn share(&self, bytes: usize) -> u32 {
        u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(1, self.kib)
    }

    fn refused(&self, metrics: &Metrics) -> ApiError {
        metrics.exceeded(Limit::ListBytes);
        ApiError::Status {
            code: 429,
            reason: "TooManyRequests".into(),
            message: format!(
                "the server is sending {} MiB of list answers that their clients have not taken yet; retry shortly, or list in pages (limit)",
                self.kib / 1024
            ),
            details: Some(json!({"retryAfterSeconds": 1})),
        }
    }
}

/// A share of the budget taken for an answer being built.
pub(crate) struct Reserved<'a> {
    budget: &'a ListBudget,
    held: OwnedSemaphorePermit,
}

impl Reserved<'_> {
    /// `body` (JSON) as a 200 whose share of the budget, now its real size,
    /// is held until its last piece is handed on (or the connection drops
    /// it); 429 if it outgrew its share and the budget has no more.
    pub(crate) fn answer(self, metrics: &Metrics, body: Vec<u8>) -> Result<Response, ApiError> {
        let Reserved { budget, mut held } = self;
        let share = budget.share(body.len()) as usize;
        if share > held.num_permits() {
            let more = budget
                .permits
                .clone()
                .try_acquire_many_owned((share - held.num_permits()) as u32)
                .map_err(|_| budget.refused(metrics))?;
            held.merge(more);
        } else if share < held.num_permits() {
            drop(held.split(held.num_permits() - share));
        }
        let pieces = futures::stream::unfold(
            (Bytes::from(body), Some(held)),
            |(mut rest, held)| async move {
                if rest.is_empty() {
                    return None;
                }
                let piece = rest.split_to(rest.len().min(PIECE));
                Some((Ok::<_, std::convert::Infallible>(piece), (rest, held)))
            },
        );
        Ok(Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from_stream(pieces))
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_taken_before_the_answer_and_settled_at_its_size() {
        let metrics = Metrics::new();
        let budget = ListBudget::new(100 << 10);
        let free = || budget.permits.available_permits();
        // Estimated at 40 KiB, answered in 10: 30 KiB given back at once.
        let small = budget.reserve(&metrics, 40 << 10).unwrap();
        assert_eq!(free(), 60);
        let answer = small.answer(&metrics, vec![b' '; 10 << 10]).unwrap();
        assert_eq!(free(), 90);
        // Estimated at 50 KiB, grown to 95: more than is left, refused.
        let grown = budget.reserve(&metrics, 50 << 10).unwrap();
        let e = grown.answer(&metrics, vec![b' '; 95 << 10]).unwrap_err();
        assert!(e.to_string().contains("list in pages"), "{e}");
        assert_eq!(free(), 90, "a refused answer holds nothing");
        // Past the budget, a reservation is refused before anything is built.
        let _held = budget.reserve(&metrics, 90 << 10).unwrap();
        assert!(budget.reserve(&metrics, 1).is_err());
        assert_eq!(metrics.exceeded_count("listBytes"), 2);
        drop(answer);
        assert_eq!(free(), 10, "an answer dropped unsent gives its share back");
    }
}
