//! A call's outbound exchanges, recorded for a transcript or played back
//! from one, so a replayed reconcile gets the answers the recorded one got
//! and nothing is sent.
//!
//! # What a recording holds
//! Each exchange as the guest saw it: the method and the normalized URL,
//! the request's headers as the guest wrote them (so a secret is its
//! `${secret:NAME}` placeholder, never its value), the status, and the
//! response's headers and body as the guest read them (already redacted:
//! a secret's value is `<secret:NAME>`). A body is kept up to
//! [`MAX_RECORDED_BODY`] bytes, as text (bytes that are not UTF-8 are
//! replaced); past it, `truncated` says so. At most [`MAX_EXCHANGES`] are
//! kept per call, then counted in `dropped`.
//!
//! # Replaying
//! A request is answered by the next recorded exchange of the same method
//! and URL, in order; with none left, it is refused as a divergence. A
//! replay sends nothing, whatever the plugin's grant.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

/// Exchanges kept per call.
pub const MAX_EXCHANGES: usize = 256;
/// Bytes of one response body kept.
pub const MAX_RECORDED_BODY: usize = 64 << 10;
/// Bytes of one header value kept.
const MAX_HEADER_VALUE: usize = 4096;
/// Headers of one request or response kept.
pub const MAX_RECORDED_HEADERS: usize = 256;

/// One outbound request and its answer, as a transcript holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpExchange {
    pub method: String,
    /// The URL as the host normalized it.
    pub url: String,
    /// The request's headers as the guest wrote them.
    #[serde(default)]
    pub request_headers: Vec<(String, String)>,
    pub status: u16,
    /// The response's headers as the guest got them.
    #[serde(default)]
    pub response_headers: Vec<(String, String)>,
    /// The response body as the guest read it (see the module docs).
    #[serde(default)]
    pub body: String,
    /// The body was longer than what is kept, or the guest stopped reading.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// Records a call's exchanges, or replays recorded ones.
#[derive(Debug)]
pub struct HttpTape {
    state: Mutex<TapeState>,
}

#[derive(Debug)]
enum TapeState {
    Recording {
        exchanges: Vec<Arc<Mutex<HttpExchange>>>,
        dropped: u64,
    },
    Replaying {
        exchanges: VecDeque<HttpExchange>,
        /// A request the recording does not answer is sent as usual
        /// (under the plugin's grant) instead of refused.
        live_otherwise: bool,
    },
}

/// Where a recorded exchange's body is written as the guest reads it.
#[derive(Debug, Clone)]
pub(crate) struct BodySlot(Arc<Mutex<HttpExchange>>);

impl BodySlot {
    pub(crate) fn append(&self, bytes: &[u8]) {
        let mut exchange = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let room = MAX_RECORDED_BODY.saturating_sub(exchange.body.len());
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(room)]);
        // A replaced byte takes three: the text may not fit where the bytes did.
        let mut end = text.len().min(room);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        if bytes.len() > room || end < text.len() {
            exchange.truncated = true;
        }
        exchange.body.push_str(&text[..end]);
    }
}

impl HttpTape {
    /// A tape that records every exchange (up to [`MAX_EXCHANGES`]).
    pub fn recording() -> Self {
        Self {
            state: Mutex::new(TapeState::Recording {
                exchanges: Vec::new(),
                dropped: 0,
            }),
        }
    }

    /// A tape that answers from `exchanges`, and refuses any other
    /// request: a replay sends nothing.
    pub fn replaying(exchanges: &[HttpExchange]) -> Self {
        Self {
            state: Mutex::new(TapeState::Replaying {
                exchanges: exchanges.iter().cloned().collect(),
                live_otherwise: false,
            }),
        }
    }

    /// A tape that answers from `exchanges` whole (a truncated body is
    /// not an answer), and lets any other request be sent as usual: a
    /// shadow candidate gets the stable version's answers instead of
    /// asking the outside world again.
    pub fn answering(exchanges: &[HttpExchange]) -> Self {
        Self {
            state: Mutex::new(TapeState::Replaying {
                exchanges: exchanges.iter().filter(|e| !e.truncated).cloned().collect(),
                live_otherwise: true,
            }),
        }
    }

    /// Whether a request the tape does not answer is sent as usual.
    pub(crate) fn live_otherwise(&self) -> bool {
        matches!(
            &*self.state.lock().unwrap_or_else(|e| e.into_inner()),
            TapeState::Replaying {
                live_otherwise: true,
                ..
            }
        )
    }

    /// The exchanges recorded so far.
    pub fn exchanges(&self) -> Vec<HttpExchange> {
        match &*self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            TapeState::Recording { exchanges, .. } => exchanges
                .iter()
                .map(|e| e.lock().unwrap_or_else(|e| e.into_inner()).clone())
                .collect(),
            TapeState::Replaying { .. } => Vec::new(),
        }
    }

    /// Exchanges past [`MAX_EXCHANGES`] that were not recorded.
    pub fn dropped(&self) -> u64 {
        match &*self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            TapeState::Recording { dropped, .. } => *dropped,
            TapeState::Replaying { .. } => 0,
        }
    }

    pub(crate) fn is_replaying(&self) -> bool {
        matches!(
            &*self.state.lock().unwrap_or_else(|e| e.into_inner()),
            TapeState::Replaying { .. }
        )
    }

    /// The next recorded answer to `method url`, taken off the tape.
    pub(crate) fn answer(&self, method: &str, url: &str) -> Option<HttpExchange> {
        match &mut *self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            TapeState::Replaying { exchanges, .. } => {
                let i = exchanges
                    .iter()
                    .position(|e| e.method == method && e.url == url)?;
                exchanges.remove(i)
            }
            TapeState::Recording { .. } => None,
        }
    }

    /// Records an exchange whose response head arrived; its body is
    /// written through the slot returned (None: past the bound, or not
    /// recording).
    pub(crate) fn record(&self, mut exchange: HttpExchange) -> Option<BodySlot> {
        match &mut *self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            TapeState::Recording { exchanges, dropped } => {
                if exchanges.len() >= MAX_EXCHANGES {
                    *dropped += 1;
                    return None;
                }
                exchange.request_headers.truncate(MAX_RECORDED_HEADERS);
                exchange.response_headers.truncate(MAX_RECORDED_HEADERS);
                for (_, v) in exchange
                    .request_headers
                    .iter_mut()
                    .chain(exchange.response_headers.iter_mut())
                {
                    cut(v);
                }
                let slot = Arc::new(Mutex::new(exchange));
                exchanges.push(slot.clone());
                Some(BodySlot(slot))
            }
            TapeState::Replaying { .. } => None,
        }
    }
}

/// `headers` as text pairs (bytes that are not UTF-8 replaced).
pub(crate) fn header_pairs(headers: &http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

fn cut(value: &mut String) {
    if value.len() > MAX_HEADER_VALUE {
        let mut end = MAX_HEADER_VALUE;
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        value.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(url: &str, status: u16) -> HttpExchange {
        HttpExchange {
            method: "GET".into(),
            url: url.into(),
            request_headers: vec![("authorization".into(), "Bearer ${secret:t}".into())],
            status,
            response_headers: Vec::new(),
            body: String::new(),
            truncated: false,
        }
    }

    #[test]
    fn a_recording_keeps_bodies_to_their_bound_and_exchanges_to_theirs() {
        let tape = HttpTape::recording();
        let slot = tape.record(exchange("http://a/x", 200)).unwrap();
        slot.append(b"hello ");
        slot.append(&vec![b'x'; MAX_RECORDED_BODY]);
        let kept = tape.exchanges();
        assert_eq!(kept[0].body.len(), MAX_RECORDED_BODY);
        assert!(kept[0].truncated && kept[0].body.starts_with("hello "));
        for _ in 1..MAX_EXCHANGES {
            tape.record(exchange("http://a/x", 200)).unwrap();
        }
        assert!(tape.record(exchange("http://a/x", 200)).is_none());
        assert_eq!(tape.dropped(), 1);
    }

    #[test]
    fn a_replay_answers_each_request_from_its_own_recording_in_order() {
        let tape = HttpTape::replaying(&[
            exchange("http://a/x", 200),
            exchange("http://a/y", 404),
            exchange("http://a/x", 503),
        ]);
        assert_eq!(tape.answer("GET", "http://a/y").unwrap().status, 404);
        assert_eq!(tape.answer("GET", "http://a/x").unwrap().status, 200);
        assert_eq!(tape.answer("GET", "http://a/x").unwrap().status, 503);
        assert!(tape.answer("GET", "http://a/x").is_none());
        assert!(tape.answer("PUT", "http://a/y").is_none());
    }
}
