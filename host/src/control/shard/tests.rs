use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use tokio_util::sync::CancellationToken;
use wasmctrl_testkit::eventually;

use super::members::{Heartbeats, Membership};
use super::*;
use crate::control::lease::testing::{LeaseServer, Timeline};
use crate::control::lease::{Clock, LeaseClaim, LeaseRecord, LeaseSettings};

fn request(key: ObjectKey) -> ReconcileRequest {
    ReconcileRequest {
        key,
        attempt: 0,
        timeout: Duration::from_secs(5),
        cancel: CancellationToken::new(),
    }
}

/// The first key (of `prefix-<n>` in namespace `ns`) that falls in `shard`.
fn key_in(shards: &Shards, shard: u32) -> ObjectKey {
    (0..)
        .map(|n| ObjectKey::namespaced("ns", format!("k-{n}")))
        .find(|k| shards.shard_of(k) == shard)
        .unwrap()
}

#[test]
fn a_key_hashes_to_the_same_shard_everywhere() {
    // FNV-1a 64 of "namespace/name" (fixed values: changing the hash would
    // move every key during a rolling upgrade).
    assert_eq!(
        shard_of(&ObjectKey::namespaced("default", "hello"), 12),
        (0xc634_9b2a_1e8f_40c1_u64 % 12) as u32
    );
    assert_eq!(shard_of(&ObjectKey::namespaced("probe", "cm-0"), 12), 11);
    assert_eq!(shard_of(&ObjectKey::cluster("node-1"), 12), 3);
    assert_eq!(shard_of(&ObjectKey::cluster("node-1"), 7), 0);
    assert_eq!(shard_of(&ObjectKey::cluster("anything"), 1), 0);
}

#[test]
fn keys_spread_evenly_over_the_shards() {
    let mut per_shard = [0u32; 12];
    for n in 0..3000 {
        per_shard[shard_of(&ObjectKey::namespaced("probe", format!("cm-{n}")), 12) as usize] += 1;
    }
    // 250 expected each; FNV over sequential names stays within ±30%.
    assert!(
        per_shard.iter().all(|&c| (175..=325).contains(&c)),
        "{per_shard:?}"
    );
}

#[test]
fn fair_shares_sum_to_the_shards_from_any_common_view() {
    for shards in [1u32, 2, 7, 12, 256] {
        for replicas in 1..=9 {
            let live: Vec<String> = (0..replicas).map(|i| format!("host-{i}")).collect();
            let shares: Vec<usize> = live
                .iter()
                .map(|me| fair_share(shards, &live, me))
                .collect();
            assert_eq!(shares.iter().sum::<usize>(), shards as usize);
            let (min, max) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
            assert!(max - min <= 1, "{shards} over {replicas}: {shares:?}");
        }
    }
    // A replica missing from the view (its heartbeat not written yet)
    // counts itself.
    assert_eq!(fair_share(12, &["a".into(), "b".into()], "c"), 4);
    assert_eq!(fair_share(12, &[], "c"), 12);
}

#[test]
fn members_are_the_heartbeats_seen_changing_within_their_lifetime() {
    let t = Timeline::new();
    let clock = t.clock(0);
    let lifetime = Duration::from_secs(15);
    let mut seen = Heartbeats::default();
    // Times are for people: an hour-old or future heartbeat counts from
    // when it is seen, and malformed entries are left out.
    let text = r#"{"a":"2025-01-01T00:00:59.5Z","b":"2099-01-01T00:00:40Z","c":"not a time","":"2025-01-01T00:00:59Z"}"#;
    let entries = seen.note(Some(text), clock.now());
    assert_eq!(entries.keys().collect::<Vec<_>>(), ["a", "b"]);
    let alive = |seen: &Heartbeats| {
        ["a", "b", "c"]
            .into_iter()
            .filter(|id| seen.alive(id, lifetime, clock.now()))
            .collect::<Vec<_>>()
    };
    assert_eq!(alive(&seen), ["a", "b"]);
    t.advance(Duration::from_secs(10));
    // "a" beats again (at an earlier time, even), "b" does not.
    seen.note(
        Some(r#"{"a":"2025-01-01T00:00:01Z","b":"2099-01-01T00:00:40Z"}"#),
        clock.now(),
    );
    t.advance(Duration::from_secs(5));
    assert_eq!(alive(&seen), ["a"]);
    // An entry removed from the annotation is forgotten.
    seen.note(Some("{}"), clock.now());
    assert!(alive(&seen).is_empty());
    assert!(seen.note(Some("[1,2]"), clock.now()).is_empty());
    assert!(seen.note(None, clock.now()).is_empty());
}

#[tokio::test]
async fn only_keys_of_held_shards_are_reconciled_under_their_fence() {
    let shards = Arc::new(Shards::new(4));
    let (mine, theirs) = (key_in(&shards, 1), key_in(&shards, 2));
    shards.take(1, Instant::now() + Duration::from_secs(60));
    assert!(shards.admits(&mine));
    assert!(!shards.admits(&theirs));

    let calls = AtomicUsize::new(0);
    let call = |_: ReconcileRequest| async {
        calls.fetch_add(1, Ordering::SeqCst);
        assert!(request_allowed(), "a held shard's fence is open");
        Ok(Action::requeue())
    };
    assert_eq!(
        shards.reconcile(request(theirs), call).await.unwrap(),
        Action::done(),
        "another replica's key is skipped"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(
        shards.reconcile(request(mine.clone()), call).await.unwrap(),
        Action::requeue()
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(
        request_allowed(),
        "outside a sharded reconcile nothing is fenced"
    );

    // A tenure whose renewals stopped: its fence closes while a reconcile runs.
    shards.extend(1, Instant::now() + Duration::from_millis(50));
    let result = shards
        .reconcile(request(mine.clone()), |_| async {
            assert!(request_allowed());
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok::<_, ReconcileError>(Action {
                requeue: request_allowed(),
                requeue_after: None,
            })
        })
        .await
        .unwrap();
    assert!(
        !result.requeue,
        "requests are refused once the fence closed"
    );
    assert!(!shards.admits(&mine), "nor do new keys start");
}

#[tokio::test]
async fn a_draining_shard_waits_for_its_reconciles_and_a_lost_one_cancels_them() {
    let shards = Arc::new(Shards::new(2));
    let key = key_in(&shards, 0);
    shards.take(0, Instant::now() + Duration::from_secs(60));
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let (finish, finish_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn({
        let shards = shards.clone();
        let key = key.clone();
        async move {
            shards
                .reconcile(request(key), |_| async move {
                    started_tx.send(()).unwrap();
                    finish_rx.await.unwrap();
                    Ok(Action::done())
                })
                .await
        }
    });
    started.await.unwrap();
    shards.stop_accepting(0);
    assert_eq!(shards.status().draining, vec![0]);
    assert!(!shards.admits(&key), "a draining shard takes no new keys");
    assert_eq!(shards.in_flight(0), 1);
    assert!(!shards.wait_idle(&[0], Duration::from_millis(50)).await);
    finish.send(()).unwrap();
    assert!(shards.wait_idle(&[0], Duration::from_secs(5)).await);
    running.await.unwrap().unwrap();

    // A lost shard: the reconcile's cancel token fires.
    shards.take(0, Instant::now() + Duration::from_secs(60));
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let running = tokio::spawn({
        let shards = shards.clone();
        async move {
            shards
                .reconcile(request(key), |r| async move {
                    started_tx.send(()).unwrap();
                    r.cancel.cancelled().await;
                    Err(ReconcileError::Cancelled)
                })
                .await
        }
    });
    started.await.unwrap();
    shards.end(0, true);
    assert!(matches!(
        running.await.unwrap(),
        Err(ReconcileError::Cancelled)
    ));
    assert_eq!(shards.status().held, Vec::<u32>::new());
}

/// A coordinator running in this process against `client`.
fn coordinator(identity: &str) -> ShardCoordinator {
    ShardCoordinator {
        lease: LeaseSettings {
            namespace: "default".into(),
            lease_name: "unit".into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(2),
            renew_deadline: Duration::from_millis(1_300),
            retry_period: Duration::from_millis(100),
        },
    }
}

fn holder(lease: &Lease) -> Option<String> {
    lease.spec.as_ref()?.holder_identity.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_moves_to_a_new_replica_only_after_its_reconciles_finished() {
    let server = wasmctrl_apiserver::ApiServer::start(wasmctrl_apiserver::Config::default())
        .await
        .unwrap();
    let client = wasmctrl_testkit::client::client_for(&server.kubeconfig()).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let stop = CancellationToken::new();
    let spawn = |identity: &str, shards: Arc<Shards>| {
        let taken = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = taken.clone();
        let acquired: AcquiredShards =
            Arc::new(move |s: &[u32]| record.lock().unwrap().extend_from_slice(s));
        let task =
            tokio::spawn(coordinator(identity).run(client.clone(), shards, acquired, stop.clone()));
        (taken, task)
    };

    // Alone, "a" takes both shards.
    let a = Arc::new(Shards::new(2));
    let (a_taken, a_task) = spawn("a", a.clone());
    eventually("a to hold both shards", Duration::from_secs(10), || async {
        (a.status().held == vec![0, 1]).then_some(())
    })
    .await;
    let mut taken = a_taken.lock().unwrap().clone();
    taken.sort();
    assert_eq!(taken, vec![0, 1], "acquisitions are reported");

    // A reconcile of shard 1 runs when "b" joins: "b"'s share is shard 1
    // (a gives its highest away), which waits for the reconcile.
    let key = key_in(&a, 1);
    let (finish, finish_rx) = tokio::sync::oneshot::channel::<()>();
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let running = tokio::spawn({
        let a = a.clone();
        async move {
            a.reconcile(request(key), |_| async move {
                started_tx.send(()).unwrap();
                finish_rx.await.unwrap();
                Ok(Action::done())
            })
            .await
        }
    });
    started.await.unwrap();
    let b = Arc::new(Shards::new(2));
    let (_, b_task) = spawn("b", b.clone());
    eventually("a to drain shard 1", Duration::from_secs(10), || async {
        (a.status().draining == vec![1]).then_some(())
    })
    .await;
    // Five renewals later (rounds in which b looked for a free shard), the
    // Lease is still a's.
    let renewed = |lease: &Lease| lease.spec.as_ref().and_then(|s| s.renew_time.clone());
    let mut last = renewed(&leases.get("unit-shard-1").await.unwrap());
    for _ in 0..5 {
        let lease = eventually("a renewal of shard 1", Duration::from_secs(10), || async {
            let lease = leases.get("unit-shard-1").await.ok()?;
            (renewed(&lease) != last).then_some(lease)
        })
        .await;
        last = renewed(&lease);
        assert_eq!(holder(&lease).as_deref(), Some("a"));
        assert!(b.status().held.is_empty());
    }
    finish.send(()).unwrap();
    running.await.unwrap().unwrap();
    eventually("b to take shard 1", Duration::from_secs(10), || async {
        (b.status().held == vec![1] && a.status().held == vec![0]).then_some(())
    })
    .await;
    assert!(a.status().draining.is_empty());

    // Stopping releases every Lease and leaves the members Lease.
    stop.cancel();
    a_task.await.unwrap();
    b_task.await.unwrap();
    for name in ["unit-shard-0", "unit-shard-1"] {
        assert_eq!(holder(&leases.get(name).await.unwrap()), None, "{name}");
    }
    let members = leases.get("unit-members").await.unwrap();
    let annotation = members.metadata.annotations.unwrap_or_default();
    assert!(
        Heartbeats::default()
            .note(
                annotation.get(MEMBERS_ANNOTATION).map(String::as_str),
                Instant::now()
            )
            .is_empty()
    );
    server.shutdown().await;
}

const LEASE: Duration = Duration::from_secs(10);
const RETRY: Duration = Duration::from_secs(1);

/// Two replicas whose wall clocks are `skew_a` and `skew_b` seconds off
/// heartbeat every retry period on their own clocks: each stays a member
/// in the other's view while it beats, and "a" is dropped by "b" exactly
/// `LEASE` after "b" saw its last heartbeat.
async fn members_are_judged_on_the_observer_s_clock(skew_a: i64, skew_b: i64) {
    let server = LeaseServer::start().await;
    let name = format!("members-{}-{}", skew_a + 100_000, skew_b + 100_000);
    let t = Timeline::new();
    let (clock_a, clock_b) = (t.clock(skew_a), t.clock(skew_b));
    let member = |identity, clock| Membership {
        api: &server.leases,
        name: &name,
        identity,
        lifetime: LEASE,
        clock,
        heartbeats: Heartbeats::default(),
    };
    let (mut a, mut b) = (member("a", &clock_a), member("b", &clock_b));
    let both = vec!["a".to_string(), "b".to_string()];
    for _ in 0..30 {
        t.advance(RETRY);
        a.heartbeat().await.unwrap();
        assert_eq!(b.heartbeat().await.unwrap(), both);
        assert_eq!(a.heartbeat().await.unwrap(), both);
    }
    // "a" stops; "b" saw its last heartbeat in the round it was written.
    for second in 1..LEASE.as_secs() {
        t.advance(RETRY);
        assert_eq!(b.heartbeat().await.unwrap(), both, "{second} s after");
    }
    t.advance(RETRY);
    assert_eq!(b.heartbeat().await.unwrap(), vec!["b".to_string()]);
    // Its entry is gone from the annotation too.
    let lease = server.leases.get(&name).await.unwrap();
    let annotation = lease.metadata.annotations.unwrap_or_default();
    let text = annotation
        .get(MEMBERS_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    assert!(!text.contains("\"a\""), "{text}");
}

/// "a" renews a shard Lease every retry period, "b" tries to take it, each
/// on its own clock: "b" takes it exactly `LEASE` after it last saw "a"'s
/// record change, never while "a" renews.
async fn a_shard_lease_is_judged_on_the_taker_s_clock(skew_a: i64, skew_b: i64) {
    let server = LeaseServer::start().await;
    let name = format!("unit-shard-{}-{}", skew_a + 100_000, skew_b + 100_000);
    let t = Timeline::new();
    let (clock_a, clock_b) = (t.clock(skew_a), t.clock(skew_b));
    let claim = |identity, clock| LeaseClaim {
        api: &server.leases,
        name: &name,
        identity,
        duration: LEASE,
        clock,
    };
    let (a, b) = (claim("a", &clock_a), claim("b", &clock_b));
    let (mut seen_a, mut seen_b): (LeaseRecord, LeaseRecord) = (None, None);
    for _ in 0..30 {
        t.advance(RETRY);
        assert!(a.acquire_or_renew(&mut seen_a).await.unwrap());
        b.observe(&mut seen_b).await.unwrap();
        assert!(!b.acquire_or_renew(&mut seen_b).await.unwrap());
    }
    for second in 1..LEASE.as_secs() {
        t.advance(RETRY);
        b.observe(&mut seen_b).await.unwrap();
        assert!(
            !b.acquire_or_renew(&mut seen_b).await.unwrap(),
            "{second} s after"
        );
    }
    t.advance(RETRY);
    assert!(b.acquire_or_renew(&mut seen_b).await.unwrap());
    let lease = server.leases.get(&name).await.unwrap();
    assert_eq!(holder(&lease).as_deref(), Some("b"));
    // "a" finds it taken.
    assert!(!a.acquire_or_renew(&mut seen_a).await.unwrap());
}

#[tokio::test]
async fn replicas_an_hour_apart_keep_members_and_leases_while_they_renew() {
    members_are_judged_on_the_observer_s_clock(-3_600, 3_600).await;
    members_are_judged_on_the_observer_s_clock(3_600, -3_600).await;
    a_shard_lease_is_judged_on_the_taker_s_clock(-3_600, 3_600).await;
    a_shard_lease_is_judged_on_the_taker_s_clock(3_600, -3_600).await;
}

#[tokio::test]
async fn replicas_skewed_by_more_than_the_lease_keep_members_and_leases_while_they_renew() {
    members_are_judged_on_the_observer_s_clock(0, 25).await;
    members_are_judged_on_the_observer_s_clock(25, 0).await;
    a_shard_lease_is_judged_on_the_taker_s_clock(0, 25).await;
    a_shard_lease_is_judged_on_the_taker_s_clock(25, 0).await;
}
