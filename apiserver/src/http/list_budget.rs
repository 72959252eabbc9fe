//! The bytes of list answers on their way to clients at once. A list's
//! body is built whole before it is sent, and a client that asks and does
//! not read holds it until the write timeout closes its connection; without
//! a budget, a few hundred such clients of a large resource would hold
//! gigabytes. Past the budget a list is answered 429 (retry, or list in
//! pages with `limit`), counted as `listBytes`.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::json;
use tokio::sync::Semaphore;

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

    /// `body` (JSON) as a 200 whose share of the budget is held until its
    /// last piece is handed on (or the connection drops it). An answer
    /// larger than the whole budget takes all of it, so it is sent alone.
    pub(crate) fn answer(&self, metrics: &Metrics, body: Vec<u8>) -> Result<Response, ApiError> {
        let share = u32::try_from(body.len().div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(1, self.kib);
        let Ok(held) = self.permits.clone().try_acquire_many_owned(share) else {
            metrics.exceeded(Limit::ListBytes);
            return Err(ApiError::Status {
                code: 429,
                reason: "TooManyRequests".into(),
                message: format!(
                    "the server is sending {} MiB of list answers that their clients have not taken yet; retry shortly, or list in pages (limit)",
                    self.kib / 1024
                ),
                details: Some(json!({"retryAfterSeconds": 1})),
            });
        };
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
