//! Per-iteration samples and their order statistics.

use std::time::Duration;

/// Durations of single iterations, in nanoseconds.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    nanos: Vec<u64>,
}

impl Samples {
    pub fn with_capacity(n: usize) -> Self {
        Self {
            nanos: Vec::with_capacity(n),
        }
    }

    pub fn push(&mut self, d: Duration) {
        self.nanos
            .push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    pub fn extend(&mut self, other: &Samples) {
        self.nanos.extend_from_slice(&other.nanos);
    }

    pub fn summary(&self) -> Summary {
        let mut sorted = self.nanos.clone();
        sorted.sort_unstable();
        Summary {
            median: quantile(&sorted, 0.5),
            p99: quantile(&sorted, 0.99),
            min: sorted.first().copied().unwrap_or(0),
            max: sorted.last().copied().unwrap_or(0),
            count: sorted.len(),
        }
    }
}

/// Order statistics of a sample set, in nanoseconds.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub median: u64,
    pub p99: u64,
    pub min: u64,
    pub max: u64,
    pub count: usize,
}

impl Summary {
    pub fn median_us(&self) -> f64 {
        self.median as f64 / 1e3
    }

    pub fn p99_us(&self) -> f64 {
        self.p99 as f64 / 1e3
    }
}

/// The nearest-rank quantile: the smallest sample with at least `q` of the
/// samples at or below it (the median of an even count is its lower middle).
fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Rounds to `digits` decimals, so JSON output stays readable.
pub fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

/// The 1-, 5- and 15-minute load averages, for the record.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

/// The median of `v` (the lower one of an even count; 0 when empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        0.0
    } else {
        v[(v.len() - 1) / 2]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(nanos: &[u64]) -> Samples {
        Samples {
            nanos: nanos.to_vec(),
        }
    }

    #[test]
    fn nearest_rank_quantiles() {
        let s = samples(&(1..=100).rev().collect::<Vec<_>>()).summary();
        assert_eq!(
            (s.median, s.p99, s.min, s.max, s.count),
            (50, 99, 1, 100, 100)
        );
        let s = samples(&[7]).summary();
        assert_eq!((s.median, s.p99), (7, 7));
        let s = samples(&[]).summary();
        assert_eq!((s.median, s.p99, s.count), (0, 0, 0));
    }

    #[test]
    fn rounding() {
        assert_eq!(round(1.23456, 2), 1.23);
        assert_eq!(round(0.005_01, 2), 0.01);
    }
}
