//! What a controller did lately, for people: its recent reconciles, its
//! last errors with their keys, and per ten seconds over the last five
//! minutes how many reconciles ran, how many failed and how long they took.
//! The status page reads it; Prometheus has the full series.
//!
//! Written here rather than read back from the metrics: prometheus-client
//! histograms cannot be read by label, and the page wants keys and error
//! messages, which are never metric labels. Everything is bounded: a fixed
//! number of entries, keys and messages cut to [`MAX_TEXT`] bytes, and a
//! fixed-size histogram per bucket, so a thousand controllers hold a few
//! MiB.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::control::metrics::Version;
use crate::control::reconcile::{Action, ObjectKey, ReconcileError};

/// Recent reconciles kept.
pub const RECENT: usize = 20;
/// Last errors kept.
pub const ERRORS: usize = 10;
/// Bytes of a key or an error message kept (cut on a character boundary).
pub const MAX_TEXT: usize = 256;
/// Seconds a bucket of the series covers.
pub const BUCKET_SECONDS: u64 = 10;
/// Buckets kept: five minutes.
pub const BUCKETS: usize = 30;
/// Upper bounds of the duration histogram: 2^i microseconds, the last one
/// open (about 8 minutes and more).
const DURATION_BINS: usize = 30;

/// One reconcile as the page lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// Seconds since the Unix epoch, with milliseconds.
    pub at: f64,
    pub key: String,
    /// `stable` or `candidate`.
    pub version: &'static str,
    /// `success`, `requeue`, `requeue_after` or `error`.
    pub result: &'static str,
    /// The error, cut to [`MAX_TEXT`] bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub millis: f64,
}

/// The reconciles of one ten-second bucket.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Which bucket: seconds since the epoch / [`BUCKET_SECONDS`].
    index: u64,
    reconciles: u32,
    errors: u32,
    durations: [u32; DURATION_BINS],
}

impl Bucket {
    fn empty(index: u64) -> Self {
        Self {
            index,
            reconciles: 0,
            errors: 0,
            durations: [0; DURATION_BINS],
        }
    }
}

#[derive(Debug, Default)]
struct State {
    recent: VecDeque<Outcome>,
    errors: VecDeque<Outcome>,
    /// Oldest first; buckets with no reconcile are absent.
    buckets: VecDeque<Bucket>,
}

/// A controller's recent activity (see the module docs).
#[derive(Debug, Default)]
pub struct Activity {
    state: Mutex<State>,
}

/// What [`Activity::summary`] reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActivitySummary {
    /// Reconciles per second over the last minute.
    pub rate: f64,
    /// Failed reconciles in the last minute.
    pub errors_last_minute: u32,
    /// The 99th percentile of reconcile time over the last minute, in
    /// milliseconds (the upper bound of its power-of-two bin); None without
    /// reconciles.
    pub p99_millis: Option<f64>,
    /// Reconciles per bucket over the last five minutes, oldest first.
    pub series: Vec<u32>,
    /// Failed reconciles per bucket, aligned with `series`.
    pub error_series: Vec<u32>,
    /// Newest first.
    pub recent: Vec<Outcome>,
    /// Newest first.
    pub errors: Vec<Outcome>,
}

impl Activity {
    /// Notes one finished reconcile of `key`, at `at`.
    pub fn record(
        &self,
        at: SystemTime,
        key: &ObjectKey,
        version: Version,
        took: Duration,
        result: &Result<Action, ReconcileError>,
    ) {
        let since_epoch = at.duration_since(UNIX_EPOCH).unwrap_or_default();
        let outcome = Outcome {
            at: (since_epoch.as_millis() as f64) / 1000.0,
            key: cut(&key.to_string()),
            version: version.as_str(),
            result: match result {
                Ok(a) if a.requeue_after.is_some() => "requeue_after",
                Ok(a) if a.requeue => "requeue",
                Ok(_) => "success",
                Err(_) => "error",
            },
            error: result.as_ref().err().map(|e| cut(&e.to_string())),
            millis: took.as_secs_f64() * 1000.0,
        };
        let index = since_epoch.as_secs() / BUCKET_SECONDS;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let bucket = match state.buckets.back_mut() {
            Some(b) if b.index == index => b,
            // A clock stepped back: counted in the newest bucket.
            Some(b) if b.index > index => b,
            _ => {
                state.buckets.push_back(Bucket::empty(index));
                while state.buckets.len() > BUCKETS {
                    state.buckets.pop_front();
                }
                state.buckets.back_mut().expect("just pushed")
            }
        };
        bucket.reconciles += 1;
        bucket.durations[bin(took)] += 1;
        if outcome.error.is_some() {
            bucket.errors += 1;
            push_bounded(&mut state.errors, outcome.clone(), ERRORS);
        }
        push_bounded(&mut state.recent, outcome, RECENT);
    }

    /// The activity as of `now`.
    pub fn summary(&self, now: SystemTime) -> ActivitySummary {
        let now_index =
            now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() / BUCKET_SECONDS;
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let first = now_index.saturating_sub(BUCKETS as u64 - 1);
        let mut series = vec![0; BUCKETS];
        let mut error_series = vec![0; BUCKETS];
        let mut last_minute = [0u32; DURATION_BINS];
        let (mut count, mut errors) = (0u32, 0u32);
        let minute_buckets = 60 / BUCKET_SECONDS;
        for b in state
            .buckets
            .iter()
            .filter(|b| (first..=now_index).contains(&b.index))
        {
            let slot = (b.index - first) as usize;
            series[slot] = b.reconciles;
            error_series[slot] = b.errors;
            if now_index - b.index < minute_buckets {
                count += b.reconciles;
                errors += b.errors;
                for (sum, n) in last_minute.iter_mut().zip(b.durations) {
                    *sum += n;
                }
            }
        }
        ActivitySummary {
            rate: f64::from(count) / 60.0,
            errors_last_minute: errors,
            p99_millis: percentile(&last_minute, 0.99),
            series,
            error_series,
            recent: state.recent.iter().rev().cloned().collect(),
            errors: state.errors.iter().rev().cloned().collect(),
        }
    }
}

fn push_bounded(list: &mut VecDeque<Outcome>, outcome: Outcome, cap: usize) {
    if list.len() == cap {
        list.pop_front();
    }
    list.push_back(outcome);
}

/// `text` cut to [`MAX_TEXT`] bytes on a character boundary, marked `…`.
fn cut(text: &str) -> String {
    if text.len() <= MAX_TEXT {
        return text.to_string();
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The histogram bin of `took`: the first `i` with `took` ≤ 2^i µs.
fn bin(took: Duration) -> usize {
    let micros = took.as_micros().max(1);
    let bin = (u128::BITS - (micros - 1).leading_zeros()) as usize;
    bin.min(DURATION_BINS - 1)
}

/// The upper bound, in milliseconds, of the bin holding quantile `q`.
fn percentile(bins: &[u32; DURATION_BINS], q: f64) -> Option<f64> {
    let total: u64 = bins.iter().map(|&n| u64::from(n)).sum();
    if total == 0 {
        return None;
    }
    let rank = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, &n) in bins.iter().enumerate() {
        seen += u64::from(n);
        if seen >= rank {
            return Some((1u64 << i) as f64 / 1000.0);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::namespaced("default", name)
    }

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn the_last_minute_gives_rate_errors_and_p99() {
        let activity = Activity::default();
        let t0 = 1_000_000;
        for i in 0..99 {
            activity.record(
                at(t0 + i % 50),
                &key("a"),
                Version::Stable,
                Duration::from_micros(900),
                &Ok(Action::done()),
            );
        }
        activity.record(
            at(t0 + 55),
            &key("slow"),
            Version::Candidate,
            Duration::from_millis(40),
            &Err(ReconcileError::Transient("down".into())),
        );
        let s = activity.summary(at(t0 + 59));
        assert_eq!(s.rate, 100.0 / 60.0);
        assert_eq!(s.errors_last_minute, 1);
        // 99 of 100 under 1.024 ms: the 99th is the last of them.
        assert_eq!(s.p99_millis, Some(1.024));
        assert_eq!(s.series.iter().sum::<u32>(), 100);
        assert_eq!(s.error_series.iter().sum::<u32>(), 1);
        assert_eq!(s.recent.len(), RECENT);
        assert_eq!(s.recent[0].key, "default/slow");
        assert_eq!(s.errors[0].error.as_deref(), Some("transient error: down"));
        assert_eq!(s.errors[0].version, "candidate");
        // Five minutes later it has all aged out of the minute.
        let later = activity.summary(at(t0 + 400));
        assert_eq!((later.rate, later.p99_millis), (0.0, None));
        assert_eq!(later.series.iter().sum::<u32>(), 0);
        assert_eq!(later.recent.len(), RECENT, "the lists keep the last ones");
    }

    #[test]
    fn everything_kept_is_bounded() {
        let activity = Activity::default();
        let long = "é".repeat(10_000);
        for i in 0..1_000u64 {
            activity.record(
                at(i * 7),
                &key(&format!("k{i}")),
                Version::Stable,
                Duration::from_secs(3600),
                &Err(ReconcileError::Permanent(long.clone())),
            );
        }
        let state = activity.state.lock().unwrap();
        assert_eq!(state.recent.len(), RECENT);
        assert_eq!(state.errors.len(), ERRORS);
        assert_eq!(state.buckets.len(), BUCKETS);
        let message = state.errors[0].error.as_ref().unwrap();
        assert!(
            message.len() <= MAX_TEXT + '…'.len_utf8(),
            "{}",
            message.len()
        );
        assert_eq!(
            state.buckets.back().unwrap().durations[DURATION_BINS - 1],
            1
        );
    }

    #[test]
    fn bins_are_powers_of_two_microseconds() {
        assert_eq!(bin(Duration::ZERO), 0);
        assert_eq!(bin(Duration::from_micros(1)), 0);
        assert_eq!(bin(Duration::from_micros(2)), 1);
        assert_eq!(bin(Duration::from_micros(3)), 2);
        assert_eq!(bin(Duration::from_micros(1024)), 10);
        assert_eq!(bin(Duration::from_micros(1025)), 11);
    }
}
