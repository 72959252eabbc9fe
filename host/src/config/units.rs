//! The units a config is written in: durations (`250ms`, `1h30m`), byte
//! quantities (`64Mi`), CPU quantities (`100m`); their parsing, their
//! deserializers, and range checks that say a value back in the units a
//! user writes.

use std::ops::RangeInclusive;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub(super) const MILLI: Duration = Duration::from_millis(1);
pub(super) const SECOND: Duration = Duration::from_secs(1);
pub(super) const HOUR: Duration = Duration::from_secs(3600);
pub(super) const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);
/// No duration in a config may be longer: arithmetic on deadlines and
/// timers can then never overflow.
const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `v` within `range`; a refusal shows the bounds and `v` as `show` writes
/// them.
fn between<T: PartialOrd + Copy>(
    v: T,
    range: RangeInclusive<T>,
    show: impl Fn(T) -> String,
) -> Result<(), String> {
    let (min, max) = range.into_inner();
    if v < min || v > max {
        return Err(format!(
            "must be between {} and {} (got {})",
            show(min),
            show(max),
            show(v)
        ));
    }
    Ok(())
}

/// `d` within `range`, said in the units a user writes.
pub(super) fn within(d: Duration, range: RangeInclusive<Duration>) -> Result<(), String> {
    between(d, range, show_duration)
}

/// A duration as a user writes it (`90s`, `5m`, `250ms`).
pub fn show_duration(d: Duration) -> String {
    match d.as_millis() {
        0 => "0".into(),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

/// `n` within `range`.
pub(super) fn count(n: u64, range: RangeInclusive<u64>) -> Result<(), String> {
    between(n, range, |n| n.to_string())
}

/// A number of bytes `n` within `range`, said as quantities (`1Mi`).
pub(super) fn bytes_within(n: u64, range: RangeInclusive<u64>) -> Result<(), String> {
    between(n, range, show_quantity)
}

/// A number of bytes as a user writes it: with the largest binary suffix
/// that divides it (`64Ki`, `4Gi`).
fn show_quantity(n: u64) -> String {
    match n {
        0 => "0".into(),
        n if n % (1 << 30) == 0 => format!("{}Gi", n >> 30),
        n if n % (1 << 20) == 0 => format!("{}Mi", n >> 20),
        n if n % (1 << 10) == 0 => format!("{}Ki", n >> 10),
        n => n.to_string(),
    }
}

pub(super) fn rate(r: f64, max: f64) -> Result<(), String> {
    if !(r.is_finite() && r > 0.0 && r <= max) {
        return Err(format!(
            "must be a positive number of at most {max} (got {r})"
        ));
    }
    Ok(())
}

/// Parses a Go-style duration: `250ms`, `10s`, `5m`, `1h30m`, `1.5s`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("invalid duration {s:?}: missing unit (ns, us, ms, s, m, h)"))?;
        if num_end == 0 {
            return Err(format!("invalid duration {s:?}: expected a number"));
        }
        let value: f64 = rest[..num_end]
            .parse()
            .map_err(|_| format!("invalid duration {s:?}: bad number {:?}", &rest[..num_end]))?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            unit => {
                return Err(format!(
                    "invalid duration {s:?}: unknown unit {unit:?} (expected ns, us, ms, s, m, h)"
                ));
            }
        };
        total += value * seconds;
        rest = &rest[unit_end..];
    }
    if !(total.is_finite() && total <= MAX_DURATION.as_secs_f64()) {
        return Err(format!("duration {s:?} is longer than 100 years"));
    }
    Ok(Duration::from_secs_f64(total))
}

/// Parses a Kubernetes quantity of bytes: `64Mi`, `1Gi`, `500M`, `1048576`.
pub fn parse_quantity(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let value: u64 = num.parse().map_err(|_| {
        format!("invalid quantity {s:?}: expected a whole number with an optional suffix")
    })?;
    let factor: u64 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        other => {
            return Err(format!(
                "invalid quantity {s:?}: unknown suffix {other:?} (expected Ki, Mi, Gi, k, M, G)"
            ));
        }
    };
    value
        .checked_mul(factor)
        .ok_or_else(|| format!("quantity {s:?} is too large"))
}

/// Parses a Kubernetes CPU quantity into millicores: `100m`, `0.5`, `2`.
pub fn parse_cpu(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let (number, scale) = match t.strip_suffix('m') {
        Some(n) => (n, 1.0),
        None => (t, 1000.0),
    };
    let ok = !number.is_empty()
        && number.chars().all(|c| c.is_ascii_digit() || c == '.')
        && number.chars().filter(|&c| c == '.').count() <= 1;
    let value: f64 = if ok { number.parse().ok() } else { None }.ok_or_else(|| {
        format!("invalid CPU quantity {s:?}: expected cores (0.5, 2) or millicores (100m)")
    })?;
    let millis = (value * scale).round();
    if !(millis >= 1.0 && millis <= f64::from(u32::MAX)) {
        return Err(format!(
            "CPU quantity {s:?} is out of range (1m to {} cores)",
            u32::MAX / 1000
        ));
    }
    Ok(millis as u32)
}

pub(super) fn cpu<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum CpuRepr {
        Text(String),
        Cores(f64),
    }
    match CpuRepr::deserialize(d)? {
        CpuRepr::Text(s) => parse_cpu(&s),
        CpuRepr::Cores(n) => parse_cpu(&n.to_string()),
    }
    .map_err(serde::de::Error::custom)
}

/// A duration written as a string (`10s`) or a number of seconds.
#[derive(Deserialize)]
#[serde(untagged)]
enum DurationRepr {
    Text(String),
    Seconds(u64),
}

pub(super) fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    match DurationRepr::deserialize(d)? {
        DurationRepr::Text(s) => parse_duration(&s).map_err(serde::de::Error::custom),
        DurationRepr::Seconds(n) if n <= MAX_DURATION.as_secs() => Ok(Duration::from_secs(n)),
        DurationRepr::Seconds(n) => Err(serde::de::Error::custom(format!(
            "duration of {n} seconds is longer than 100 years"
        ))),
    }
}

pub(super) fn optional_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

#[derive(Deserialize)]
#[serde(untagged)]
enum QuantityRepr {
    Text(String),
    Bytes(u64),
}

pub(super) fn optional_quantity<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    quantity(d).map(Some)
}

pub(super) fn quantity<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match QuantityRepr::deserialize(d)? {
        QuantityRepr::Text(s) => parse_quantity(&s).map_err(serde::de::Error::custom),
        QuantityRepr::Bytes(n) => Ok(n),
    }
}
