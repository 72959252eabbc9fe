//! The operator's behaviour, natively (`cargo test -p dns`): the SDK's fake
//! API server holds the DNSRecords, canned HTTP answers play the provider,
//! and every call is held to the plugin's declared permissions.

use wasmctrl_sdk::serde_json::{Value, json};
use wasmctrl_sdk::testing::FakeCluster;
use wasmctrl_sdk::{Action, Api, ObjectKey, Patch, http};

use super::*;

const NS: &str = "default";
const ENDPOINT: &str = "http://127.0.0.1:8053";
const URL: &str = "http://127.0.0.1:8053/zones/example.com/records/www";
const PLACEHOLDER: &str = "Bearer ${secret:dns-token}";

fn key() -> ObjectKey {
    ObjectKey::namespaced(NS, "www")
}

fn records() -> Api<DNSRecord> {
    Api::namespaced(NS)
}

/// A cluster whose plugin settings name the provider, with the DNSRecord
/// `www` (an A record) in it.
fn cluster() -> FakeCluster {
    let cluster = FakeCluster::new();
    cluster.set_settings(json!({"endpoint": ENDPOINT, "zone": "example.com"}));
    let spec = DNSRecordSpec {
        name: "www".into(),
        type_: "A".into(),
        value: "192.0.2.1".into(),
        ttl: 300,
    };
    records().create(&DNSRecord::new("www", spec)).unwrap();
    cluster
}

fn reconcile(cluster: &FakeCluster) -> Result<Action, Error> {
    cluster.reconcile::<DnsReconciler>(&key())
}

fn remote(value: &str) -> Vec<u8> {
    json!({"type": "A", "value": value, "ttl": 300})
        .to_string()
        .into_bytes()
}

/// The `Ready` condition's status, reason and message.
fn ready() -> (String, String, String) {
    let obj = records().get("www").unwrap();
    let status = obj.status.expect("a status");
    let c = conditions::get(&status.conditions, READY).expect("a Ready condition");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn sent(cluster: &FakeCluster) -> Vec<(String, String)> {
    cluster
        .http_requests()
        .into_iter()
        .map(|r| (r.method, r.url))
        .collect()
}

fn body(request: &http::Request) -> Value {
    wasmctrl_sdk::serde_json::from_slice(&request.body).unwrap()
}

/// The first reconcile: the record is missing, so it is put.
fn create_www(cluster: &FakeCluster) {
    cluster.answer_http("GET", URL, 404, b"");
    cluster.answer_http("PUT", URL, 200, &remote("192.0.2.1"));
    assert_eq!(reconcile(cluster), Ok(Action::requeue_after(RESYNC)));
}

#[test]
fn a_missing_record_is_created_and_the_object_is_ready() {
    let cluster = cluster();
    create_www(&cluster);

    assert_eq!(
        sent(&cluster),
        [("GET".into(), URL.into()), ("PUT".into(), URL.into())]
    );
    let put = &cluster.http_requests()[1];
    assert_eq!(
        body(put),
        json!({"type": "A", "value": "192.0.2.1", "ttl": 300})
    );
    let obj = records().get("www").unwrap();
    assert_eq!(obj.meta().finalizers, Some(vec![FINALIZER.to_string()]));
    let status = obj.status.unwrap();
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(
        status.record,
        Some(Location {
            zone: "example.com".into(),
            name: "www".into()
        })
    );
    assert_eq!(ready().0, "True");
    assert_eq!(ready().1, "Synced");
    assert_eq!(cluster.events().len(), 1);
    assert_eq!(cluster.events()[0].body["reason"], "Created");
}

#[test]
fn a_record_in_sync_is_only_read() {
    let cluster = cluster();
    create_www(&cluster);
    let version = records().get("www").unwrap().metadata.resource_version;

    cluster.answer_http("GET", URL, 200, &remote("192.0.2.1"));
    assert_eq!(reconcile(&cluster), Ok(Action::requeue_after(RESYNC)));
    assert_eq!(sent(&cluster).len(), 3, "one more GET, no PUT");
    assert_eq!(
        records().get("www").unwrap().metadata.resource_version,
        version,
        "no status write"
    );
    assert_eq!(cluster.events().len(), 1, "no event");
}

#[test]
fn a_record_changed_at_the_provider_is_put_back() {
    let cluster = cluster();
    create_www(&cluster);

    cluster.answer_http("GET", URL, 200, &remote("203.0.113.66"));
    cluster.answer_http("PUT", URL, 200, &remote("192.0.2.1"));
    assert_eq!(reconcile(&cluster), Ok(Action::requeue_after(RESYNC)));
    let requests = cluster.http_requests();
    assert_eq!(requests[3].method, "PUT");
    assert_eq!(body(&requests[3])["value"], "192.0.2.1");
    assert_eq!(cluster.events()[1].body["reason"], "Updated");

    // A body that is no record at all differs too.
    cluster.answer_http("GET", URL, 200, b"<html>");
    cluster.answer_http("PUT", URL, 200, &remote("192.0.2.1"));
    assert_eq!(reconcile(&cluster), Ok(Action::requeue_after(RESYNC)));
    assert_eq!(cluster.http_requests()[5].method, "PUT");
}

#[test]
fn a_changed_spec_is_put_and_observed() {
    let cluster = cluster();
    create_www(&cluster);
    records()
        .patch("www", &Patch::Merge(json!({"spec": {"ttl": 60}})))
        .unwrap();

    cluster.answer_http("GET", URL, 200, &remote("192.0.2.1"));
    cluster.answer_http("PUT", URL, 200, b"{}");
    assert_eq!(reconcile(&cluster), Ok(Action::requeue_after(RESYNC)));
    assert_eq!(body(&cluster.http_requests()[3])["ttl"], 60);
    let status = records().get("www").unwrap().status.unwrap();
    assert_eq!(status.observed_generation, Some(2));
    assert_eq!(status.conditions[0].observed_generation, Some(2));
}

#[test]
fn a_renamed_record_removes_the_old_one() {
    let cluster = cluster();
    create_www(&cluster);
    records()
        .patch("www", &Patch::Merge(json!({"spec": {"name": "web"}})))
        .unwrap();

    let new = "http://127.0.0.1:8053/zones/example.com/records/web";
    cluster.answer_http("DELETE", URL, 204, b"");
    cluster.answer_http("GET", new, 404, b"");
    cluster.answer_http("PUT", new, 200, b"{}");
    assert_eq!(reconcile(&cluster), Ok(Action::requeue_after(RESYNC)));
    assert_eq!(
        sent(&cluster)[2..],
        [
            ("DELETE".into(), URL.into()),
            ("GET".into(), new.into()),
            ("PUT".into(), new.into())
        ]
    );
    let status = records().get("www").unwrap().status.unwrap();
    assert_eq!(status.record.unwrap().name, "web");
}

#[test]
fn a_record_whose_zone_moved_is_removed_from_the_old_zone() {
    let cluster = cluster();
    create_www(&cluster);
    cluster.set_settings(json!({"endpoint": ENDPOINT, "zone": "example.org"}));

    let moved = "http://127.0.0.1:8053/zones/example.org/records/www";
    cluster.answer_http("DELETE", URL, 404, b"");
    cluster.answer_http("GET", moved, 404, b"");
    cluster.answer_http("PUT", moved, 200, b"{}");
    assert_eq!(reconcile(&cluster), Ok(Action::requeue_after(RESYNC)));
    assert_eq!(sent(&cluster)[2], ("DELETE".into(), URL.into()));
    let status = records().get("www").unwrap().status.unwrap();
    assert_eq!(status.record.unwrap().zone, "example.org");
}

#[test]
fn deletion_removes_the_record_then_the_finalizer() {
    for answer in [204, 404] {
        let cluster = cluster();
        create_www(&cluster);
        records().delete("www").unwrap();
        assert!(records().get("www").unwrap().is_deleting(), "held");

        cluster.answer_http("DELETE", URL, answer, b"");
        assert_eq!(reconcile(&cluster), Ok(Action::done()), "{answer}");
        assert_eq!(sent(&cluster)[2], ("DELETE".into(), URL.into()));
        assert!(records().get_opt("www").unwrap().is_none(), "{answer}");

        // The deletion event brings the key once more: nothing to do.
        assert_eq!(reconcile(&cluster), Ok(Action::done()));
        assert_eq!(sent(&cluster).len(), 3);
    }
}

#[test]
fn a_provider_refusing_or_down_is_a_transient_error_in_the_status() {
    for code in [401, 503] {
        let cluster = cluster();
        cluster.answer_http("GET", URL, code, br#"{"error":"no"}"#);
        let err = reconcile(&cluster).unwrap_err();
        assert!(!err.is_permanent(), "{err}");
        assert!(err.message().contains(&code.to_string()), "{err}");
        let (status, reason, message) = ready();
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "ProviderError")
        );
        assert!(message.contains(&format!("answered {code}")), "{message}");
        assert_eq!(cluster.events()[0].body["type"], "Warning");

        // Retried: still failing, no second event; then it recovers.
        cluster.answer_http("GET", URL, code, b"");
        assert!(reconcile(&cluster).is_err());
        assert_eq!(cluster.events().len(), 1);
        create_www(&cluster);
        assert_eq!(ready().1, "Synced");
    }
}

#[test]
fn a_failed_put_or_delete_is_retried() {
    let cluster = cluster();
    cluster.answer_http("GET", URL, 404, b"");
    cluster.answer_http("PUT", URL, 503, b"");
    assert!(!reconcile(&cluster).unwrap_err().is_permanent());
    assert_eq!(records().get("www").unwrap().status.unwrap().record, None);

    create_www(&cluster);
    records().delete("www").unwrap();
    cluster.answer_http("DELETE", URL, 401, b"");
    let err = reconcile(&cluster).unwrap_err();
    assert!(
        !err.is_permanent() && err.message().contains("401"),
        "{err}"
    );
    let obj = records().get("www").unwrap();
    assert_eq!(
        obj.meta().finalizers,
        Some(vec![FINALIZER.to_string()]),
        "kept"
    );
    assert_eq!(ready().1, "ProviderError");
}

#[test]
fn no_answer_at_all_is_a_transient_error_too() {
    let cluster = cluster();
    // No canned answer: the request fails as one the host refused.
    let err = reconcile(&cluster).unwrap_err();
    assert!(!err.is_permanent(), "{err}");
    assert_eq!(ready().1, "ProviderError");
}

#[test]
fn every_request_names_the_secret_and_carries_no_token() {
    let cluster = cluster();
    create_www(&cluster);
    records().delete("www").unwrap();
    cluster.answer_http("DELETE", URL, 204, b"");
    reconcile(&cluster).unwrap();

    let requests = cluster.http_requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        let auth: Vec<_> = request
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("authorization"))
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(auth, [PLACEHOLDER], "{} {}", request.method, request.url);
    }

    // Another secret name in the settings is the one named.
    let cluster = FakeCluster::new();
    cluster.set_settings(json!({"endpoint": ENDPOINT, "zone": "example.com", "secret": "other"}));
    records()
        .create(&DNSRecord::new(
            "www",
            DNSRecordSpec {
                name: "www".into(),
                type_: "TXT".into(),
                value: "hello".into(),
                ttl: 60,
            },
        ))
        .unwrap();
    cluster.answer_http("GET", URL, 404, b"");
    cluster.answer_http("PUT", URL, 200, b"{}");
    reconcile(&cluster).unwrap();
    for request in cluster.http_requests() {
        assert!(
            request
                .headers
                .contains(&("authorization".into(), "Bearer ${secret:other}".into()))
        );
    }
}

#[test]
fn bad_settings_or_names_are_permanent_errors() {
    let cluster = cluster();
    for settings in [
        json!({"zone": "example.com"}),
        json!({"endpoint": "ftp://x", "zone": "example.com"}),
        json!({"endpoint": ENDPOINT, "zone": "a/b"}),
        json!({"endpoint": ENDPOINT, "zone": "example.com", "secret": "x}"}),
        json!({"endpoint": ENDPOINT, "zone": "example.com", "zonee": "x"}),
    ] {
        cluster.set_settings(settings.clone());
        let err = reconcile(&cluster).unwrap_err();
        assert!(err.is_permanent(), "{settings}: {err}");
    }
    assert!(cluster.http_requests().is_empty());

    cluster.set_settings(json!({"endpoint": format!("{ENDPOINT}/"), "zone": "example.com"}));
    records()
        .patch("www", &Patch::Merge(json!({"spec": {"name": "../admin"}})))
        .unwrap();
    let err = reconcile(&cluster).unwrap_err();
    assert!(err.is_permanent(), "{err}");
    assert!(cluster.http_requests().is_empty(), "nothing sent");
    assert_eq!(ready().1, "InvalidSpec");

    // A trailing slash of the endpoint is not doubled.
    records()
        .patch("www", &Patch::Merge(json!({"spec": {"name": "www"}})))
        .unwrap();
    create_www(&cluster);
}

#[test]
fn a_missing_object_needs_nothing() {
    let cluster = FakeCluster::new();
    assert_eq!(reconcile(&cluster), Ok(Action::done()));
    assert!(cluster.http_requests().is_empty());
}

#[test]
fn the_declared_permissions_are_exactly_the_ones_used() {
    let cluster = cluster();
    create_www(&cluster);
    records().delete("www").unwrap();
    cluster.answer_http("DELETE", URL, 204, b"");
    reconcile(&cluster).unwrap();
    assert_eq!(cluster.unused_permissions::<DnsReconciler>(), []);
}
