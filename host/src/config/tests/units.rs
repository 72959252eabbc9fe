//! Durations, quantities and CPU quantities as a user writes them.

use std::time::Duration;

use super::*;

#[test]
fn durations_and_quantities() {
    assert_eq!(parse_duration("5ms"), Ok(Duration::from_millis(5)));
    assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
    assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
    assert!(parse_duration("10").is_err());
    assert!(parse_duration("").is_err());
    assert_eq!(parse_quantity("64Mi"), Ok(64 << 20));
    assert_eq!(parse_quantity("1Gi"), Ok(1 << 30));
    assert_eq!(parse_quantity("500M"), Ok(500_000_000));
    assert_eq!(parse_quantity("4096"), Ok(4096));
    assert!(parse_quantity("-1").is_err());
}

#[test]
fn cpu_quantities_are_millicores() {
    assert_eq!(parse_cpu("100m"), Ok(100));
    assert_eq!(parse_cpu("0.5"), Ok(500));
    assert_eq!(parse_cpu("2"), Ok(2000));
    for bad in [
        "",
        "m",
        "-1",
        "1.2.3",
        "1e3",
        "0",
        "0.0001",
        "10k",
        "99999999999",
    ] {
        let err = parse_cpu(bad).unwrap_err();
        assert!(err.contains(&format!("{bad:?}")), "{bad}: {err}");
    }
}

#[test]
fn byte_ranges_are_said_in_quantities() {
    use crate::config::units::bytes_within;
    assert_eq!(
        bytes_within(1 << 19, (1 << 20)..=(4 << 30)),
        Err("must be between 1Mi and 4Gi (got 512Ki)".to_string())
    );
    assert_eq!(
        bytes_within(1, (64 << 10)..=(256 << 20)),
        Err("must be between 64Ki and 256Mi (got 1)".to_string())
    );
    assert_eq!(bytes_within(1 << 10, (1 << 10)..=(4 << 30)), Ok(()));
}
