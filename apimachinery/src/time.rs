//! Kubernetes API timestamps: RFC 3339 in UTC, in the two precisions the
//! API uses. `metav1.Time` (`creationTimestamp`, `lastTransitionTime`) is
//! whole seconds, `2026-12-05T00:00:00Z`; `metav1.MicroTime` (an Event's
//! `eventTime`, a Lease's `renewTime`) is microseconds,
//! `2026-12-05T00:00:00.000042Z`. Records meant for people and logs often
//! use milliseconds between the two, `2026-12-05T00:00:00.042Z`.
//!
//! Formatting truncates towards the past, as Go's `Time.Truncate` (which
//! the API server's serializers use) does, and clamps to what RFC 3339 can
//! write: from 0000-01-01T00:00:00Z to jiff's latest instant,
//! 9999-12-30T22:00:00.999999Z.

use std::time::SystemTime;

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::Offset;

/// Why a string is not an RFC 3339 timestamp.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} is not an RFC 3339 time (such as 2026-12-05T00:00:00Z): {reason}", quoted(.input))]
pub struct TimeError {
    /// The string given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

/// `"input"`, cut to 64 characters.
fn quoted(input: &str) -> String {
    match input.char_indices().nth(64) {
        Some((end, _)) => format!("{:?}…", &input[..end]),
        None => format!("{input:?}"),
    }
}

/// `time` as a `metav1.Time`: UTC, whole seconds
/// (`2026-12-05T00:00:00Z`).
pub fn format_seconds(time: SystemTime) -> String {
    format(time, 0)
}

/// `time` in milliseconds: UTC, always three fractional digits
/// (`2026-12-05T00:00:00.042Z`), as JavaScript's `toISOString` and most
/// log formats write it.
pub fn format_millis(time: SystemTime) -> String {
    format(time, 3)
}

/// `time` as a `metav1.MicroTime`: UTC, always six fractional digits
/// (`2026-12-05T00:00:00.000042Z`).
pub fn format_micros(time: SystemTime) -> String {
    format(time, 6)
}

/// `time` in UTC with `digits` (0, 3 or 6) fractional digits, truncated.
fn format(time: SystemTime, digits: u32) -> String {
    let (dt, micros) = civil(time);
    let whole = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        dt.year(),
        dt.month(),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second()
    );
    if digits == 0 {
        return format!("{whole}Z");
    }
    let fraction = micros / 10_i32.pow(6 - digits);
    format!("{whole}.{fraction:0width$}Z", width = digits as usize)
}

/// The UTC date and time of `time` and its microseconds, clamped to what
/// RFC 3339 and jiff can write.
fn civil(time: SystemTime) -> (DateTime, i32) {
    // Year 0000, RFC 3339's first.
    let earliest = Timestamp::constant(-62_167_219_200, 0);
    // Past jiff's range (±9999 years) is past RFC 3339's too.
    let ts = Timestamp::try_from(time)
        .unwrap_or(if time < SystemTime::UNIX_EPOCH {
            earliest
        } else {
            Timestamp::MAX
        })
        .max(earliest);
    // Whole seconds, then microseconds, both rounded towards the past
    // (`as_second` truncates towards 1970, `subsec_nanosecond` is
    // negative before it).
    let nanos = ts.subsec_nanosecond();
    let (second, micros) = if nanos < 0 {
        (ts.as_second() - 1, (nanos + 1_000_000_000) / 1000)
    } else {
        (ts.as_second(), nanos / 1000)
    };
    let whole = Timestamp::from_second(second).unwrap_or(ts);
    (Offset::UTC.to_datetime(whole), micros)
}

/// Reads an RFC 3339 timestamp: `YYYY-MM-DDTHH:MM:SS`, optionally a
/// fraction of up to nine digits, then `Z` or a `±HH:MM` offset (`T` and `Z`
/// may be lowercase). Both Kubernetes precisions read, as does any offset,
/// which is applied.
///
/// # Errors
///
/// A [`TimeError`] naming the input for anything else, including a date or
/// time out of range (`2026-02-30`, `25:00:00`).
pub fn parse(input: &str) -> Result<SystemTime, TimeError> {
    let fail = |reason: &str| TimeError {
        input: input.to_string(),
        reason: reason.to_string(),
    };
    check_shape(input.as_bytes()).map_err(fail)?;
    let ts: Timestamp = input
        .to_ascii_uppercase()
        .parse()
        .map_err(|e: jiff::Error| fail(&e.to_string()))?;
    Ok(SystemTime::from(ts))
}

/// Checks the characters of `date-time` in RFC 3339 section 5.6, leaving
/// the ranges of the fields to jiff.
fn check_shape(s: &[u8]) -> Result<(), &'static str> {
    let digits = |range: std::ops::Range<usize>| {
        s.get(range)
            .is_some_and(|d| d.iter().all(u8::is_ascii_digit))
    };
    let at = |i: usize, c: &[u8]| s.get(i).is_some_and(|b| c.contains(b));
    if !(digits(0..4) && at(4, b"-") && digits(5..7) && at(7, b"-") && digits(8..10)) {
        return Err("the date must be YYYY-MM-DD");
    }
    if !at(10, b"Tt") {
        return Err("the date and time must be separated by 'T'");
    }
    if !(digits(11..13) && at(13, b":") && digits(14..16) && at(16, b":") && digits(17..19)) {
        return Err("the time must be HH:MM:SS");
    }
    let mut rest = &s[19..];
    if let Some(fraction) = rest.strip_prefix(b".") {
        let n = fraction.iter().take_while(|b| b.is_ascii_digit()).count();
        if !(1..=9).contains(&n) {
            return Err("a fraction of a second has 1 to 9 digits");
        }
        rest = &fraction[n..];
    }
    match rest {
        b"Z" | b"z" => Ok(()),
        [b'+' | b'-', h1, h2, b':', m1, m2]
            if [h1, h2, m1, m2].iter().all(|b| b.is_ascii_digit()) =>
        {
            Ok(())
        }
        _ => Err("the time must end in 'Z' or an offset such as +02:00"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_seconds(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            format_seconds(at(1_735_787_045, 999_999_999)),
            "2025-01-02T03:04:05Z"
        );
        assert_eq!(format_seconds(at(1_796_428_800, 0)), "2026-12-05T00:00:00Z");
        assert_eq!(
            format_micros(at(951_782_400, 42_000)),
            "2000-02-29T00:00:00.000042Z"
        );
        assert_eq!(
            format_micros(at(1_796_428_800, 123_456_789)),
            "2026-12-05T00:00:00.123456Z"
        );
        assert_eq!(format_micros(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            format_millis(at(1_796_428_800, 123_999_999)),
            "2026-12-05T00:00:00.123Z"
        );
        assert_eq!(format_millis(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn before_1970_truncates_towards_the_past() {
        let t = UNIX_EPOCH - Duration::from_nanos(1);
        assert_eq!(format_seconds(t), "1969-12-31T23:59:59Z");
        assert_eq!(format_micros(t), "1969-12-31T23:59:59.999999Z");
        assert_eq!(format_millis(t), "1969-12-31T23:59:59.999Z");
        let t = UNIX_EPOCH - Duration::from_micros(1_500_000);
        assert_eq!(format_micros(t), "1969-12-31T23:59:58.500000Z");
    }

    #[test]
    fn out_of_range_clamps_to_what_rfc_3339_can_write() {
        let far = Duration::from_secs(400 * 366 * 86_400 * 100);
        assert_eq!(format_seconds(UNIX_EPOCH + far), "9999-12-30T22:00:00Z");
        assert_eq!(
            format_micros(UNIX_EPOCH + far),
            "9999-12-30T22:00:00.999999Z"
        );
        assert_eq!(format_millis(UNIX_EPOCH + far), "9999-12-30T22:00:00.999Z");
        let early = Duration::from_secs(2000 * 366 * 86_400);
        assert_eq!(format_seconds(UNIX_EPOCH - early), "0000-01-01T00:00:00Z");
    }

    #[test]
    fn parses_both_precisions_and_offsets() {
        assert_eq!(parse("1970-01-02T00:00:01Z"), Ok(at(86_401, 0)));
        assert_eq!(parse("2025-01-02T03:04:05Z"), Ok(at(1_735_787_045, 0)));
        assert_eq!(
            parse("2000-02-29T00:00:00.000042Z"),
            Ok(at(951_782_400, 42_000))
        );
        assert_eq!(parse("2026-12-03T12:00:00.000Z"), Ok(at(1_796_299_200, 0)));
        assert_eq!(
            parse("2025-01-02T05:04:05+02:00"),
            parse("2025-01-02T03:04:05Z")
        );
        assert_eq!(parse("2025-01-02t03:04:05z"), parse("2025-01-02T03:04:05Z"));
        assert_eq!(
            parse("1969-12-31T23:59:59.5Z"),
            Ok(UNIX_EPOCH - Duration::from_millis(500))
        );
    }

    #[test]
    fn refuses_what_is_not_rfc_3339() {
        for bad in [
            "",
            "2025-01-02",
            "2025-01-02T03:04Z",
            "2025-01-02 03:04:05Z",
            "2025-01-02T03:04:05",
            "2025-01-02T03:04:05.Z",
            "2025-01-02T03:04:05.1234567890Z",
            "2025-01-02T03:04:05+0200",
            "2025-01-02T03:04:05Z ",
            "2025-02-30T00:00:00Z",
            "2025-01-02T25:00:00Z",
            "+002025-01-02T03:04:05Z",
            "yesterday",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
        let e = parse("2025-01-02").unwrap_err().to_string();
        assert_eq!(
            e,
            "\"2025-01-02\" is not an RFC 3339 time (such as 2026-12-05T00:00:00Z): the date and time must be separated by 'T'"
        );
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        // Bounded for CI (256 cases each); PROPTEST_CASES=100000 for a long run.
        proptest! {
            #[test]
            fn formats_round_trip_at_their_precision(
                secs in 0u64..253_402_207_200,
                nanos in 0u32..1_000_000_000,
            ) {
                let t = at(secs, nanos);
                prop_assert_eq!(parse(&format_seconds(t)), Ok(at(secs, 0)));
                prop_assert_eq!(parse(&format_micros(t)), Ok(at(secs, nanos / 1000 * 1000)));
                prop_assert_eq!(parse(&format_millis(t)), Ok(at(secs, nanos / 1_000_000 * 1_000_000)));
                prop_assert_eq!(format_seconds(t).len(), 20);
                prop_assert_eq!(format_millis(t).len(), 24);
                prop_assert_eq!(format_micros(t).len(), 27);
            }

            #[test]
            fn parse_never_panics(s in "\\PC{0,40}|[0-9T:Z.+-]{0,30}") {
                let _ = parse(&s);
            }
        }
    }
}
