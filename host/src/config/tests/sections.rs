//! The host-wide sections: `leaderElection`, `runtime.guestCpu`, `cache`,
//! `webhook`.

use super::*;

#[test]
fn lease_timings_default_in_client_go_proportions() {
    let c = parse(&FULL.replace("retryPeriod: 1s ", "")).unwrap();
    let le = &c.leader_election;
    assert_eq!(le.lease_duration, Duration::from_secs(10));
    assert!(le.retry_period < le.renew_deadline && le.renew_deadline < le.lease_duration);
}

#[test]
fn guest_cpu_has_defaults_and_is_bounded() {
    let c = parse(FULL).unwrap();
    assert_eq!(c.runtime.guest_cpu.burst, Duration::from_millis(50));
    assert_eq!(c.runtime.guest_cpu.share, 100);
    let with = |guest_cpu: &str| {
        let text = FULL.replace(
            "shutdownTimeout: 45s",
            &format!("shutdownTimeout: 45s\nruntime: {{ guestCpu: {guest_cpu} }}"),
        );
        parse(&text)
    };
    let c = with("{ burst: 20ms, share: 0.25 }").unwrap();
    assert_eq!(c.runtime.guest_cpu.burst, Duration::from_millis(20));
    assert_eq!(c.runtime.guest_cpu.share, 250);
    assert_eq!(with("{ share: 2 }").unwrap().runtime.guest_cpu.share, 2000);
    for (bad, named) in [
        ("{ share: 1m }", "runtime.guestCpu.share"),
        ("{ share: lots }", "invalid CPU quantity"),
        ("{ burst: 0 }", "runtime.guestCpu.burst"),
        ("{ bursts: 1s }", "bursts"),
    ] {
        let err = with(bad).unwrap_err().to_string();
        assert!(err.contains(named), "{bad}: {err}");
    }
}

#[test]
fn the_cache_strips_managed_fields_unless_told_to_keep_them() {
    let c = parse(FULL).unwrap();
    assert!(c.cache.strip_managed_fields);
    let with = |cache: &str| {
        let text = FULL.replace(
            "shutdownTimeout: 45s",
            &format!("shutdownTimeout: 45s\ncache: {cache}"),
        );
        parse(&text)
    };
    let keep = with("{ stripManagedFields: false }").unwrap();
    assert!(!keep.cache.strip_managed_fields);
    for (bad, named) in [
        ("{ stripManagedFields: sometimes }", "stripManagedFields"),
        ("{ managedFields: false }", "managedFields"),
    ] {
        let err = with(bad).unwrap_err().to_string();
        assert!(err.contains(named), "{bad}: {err}");
    }
}

#[test]
fn webhook_configurations_are_applied_again_every_ten_minutes_unless_told() {
    let with = |webhook: &str| {
        let text = FULL.replace(
            "shutdownTimeout: 45s",
            &format!("shutdownTimeout: 45s\nwebhook: {webhook}"),
        );
        parse(&text)
    };
    let c = with(r#"{ bind: "127.0.0.1:0" }"#).unwrap();
    let webhook = c.webhook.unwrap();
    assert_eq!(webhook.reapply_interval, Duration::from_secs(600));
    let c = with(r#"{ bind: "127.0.0.1:0", reapplyInterval: 30s }"#).unwrap();
    assert_eq!(c.webhook.unwrap().reapply_interval, Duration::from_secs(30));
    let err = with(r#"{ bind: "127.0.0.1:0", reapplyInterval: 100ms }"#)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("webhook.reapplyInterval") && err.contains("shorter than 1s"),
        "{err}"
    );
}
