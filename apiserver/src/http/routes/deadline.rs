//! A request's deadline, as kube-apiserver's: the client's `?timeout=` (a
//! Go duration, as `kubectl --request-timeout` sends it), at most the
//! server's request timeout, which is also the default. Every request but
//! a watch has one. When it passes, the request is answered 504: a write
//! drops what it still awaited (admission webhooks above all), each
//! webhook called with no more than the time left; a list stops parsing
//! objects for its selector.
//!
//! Go's `time.ParseDuration` is written here because the API's wire format
//! is Go's: no crate parses exactly that grammar.

use std::time::Duration;

use tokio::time::Instant;

use super::params::Query;
use crate::error::ApiError;
use crate::values::go_quote;

/// kube-apiserver's default `--request-timeout`: the longest a request
/// may take, whatever its `?timeout=` asks.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest `?timeout=` value read; a duration never needs more.
const MAX_TIMEOUT_TEXT: usize = 64;

/// When a request that began at `started` must be answered: `?timeout=` if it
/// is positive and shorter than [`REQUEST_TIMEOUT`], else that. A value
/// that is not a Go duration is a 400, worded as upstream's.
pub(super) fn request_deadline(q: &Query, started: Instant) -> Result<Instant, ApiError> {
    let asked = match q.get("timeout") {
        None | Some("") => None,
        Some(text) => Some(go_duration(text).ok_or_else(|| {
            let shown: String = text.chars().take(MAX_TIMEOUT_TEXT).collect();
            ApiError::BadRequest(format!(
                "invalid timeout specified in the request URL - time: invalid duration {}",
                go_quote(&shown)
            ))
        })?),
    };
    let timeout = asked
        .filter(|t| !t.is_zero() && *t < REQUEST_TIMEOUT)
        .unwrap_or(REQUEST_TIMEOUT);
    Ok(started + timeout)
}

/// A Go duration (`300ms`, `1.5h`, `2h45m`, `-1s`); a negative one is zero
/// here, as a deadline already passed. `None` for anything else.
fn go_duration(text: &str) -> Option<Duration> {
    if text.len() > MAX_TIMEOUT_TEXT {
        return None;
    }
    let (negative, mut rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    if rest.is_empty() {
        return None;
    }
    let mut nanos: f64 = 0.0;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..number_end];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_end..];
        nanos += value * unit;
    }
    // Go's durations end at about 292 years; longer is its overflow error.
    if !nanos.is_finite() || nanos > i64::MAX as f64 {
        return None;
    }
    Some(if negative {
        Duration::ZERO
    } else {
        Duration::from_nanos(nanos as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_read_as_go_reads_them() {
        for (text, want) in [
            ("10s", Duration::from_secs(10)),
            ("1m30s", Duration::from_secs(90)),
            ("1.5s", Duration::from_millis(1500)),
            ("300ms", Duration::from_millis(300)),
            ("2h", Duration::from_secs(7200)),
            ("1µs", Duration::from_micros(1)),
            ("0", Duration::ZERO),
            ("-5s", Duration::ZERO),
            ("+2s", Duration::from_secs(2)),
        ] {
            assert_eq!(go_duration(text), Some(want), "{text}");
        }
        for bad in [
            "",
            "10",
            "s",
            "1x",
            "1..5s",
            ".s",
            "-",
            "9999999999h",
            &"1s".repeat(40),
        ] {
            assert_eq!(go_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_request_waits_at_most_the_request_timeout() {
        let now = Instant::now();
        let deadline = |query: &str| request_deadline(&Query::parse(Some(query)), now);
        assert_eq!(deadline("").unwrap(), now + REQUEST_TIMEOUT);
        assert_eq!(
            deadline("timeout=2s").unwrap(),
            now + Duration::from_secs(2)
        );
        assert_eq!(deadline("timeout=5m").unwrap(), now + REQUEST_TIMEOUT);
        assert_eq!(deadline("timeout=0s").unwrap(), now + REQUEST_TIMEOUT);
        let ApiError::BadRequest(message) = deadline("timeout=soon").unwrap_err() else {
            panic!("not a 400");
        };
        assert_eq!(
            message,
            "invalid timeout specified in the request URL - time: invalid duration \"soon\""
        );
    }
}
