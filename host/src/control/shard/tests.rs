use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::Api;
use tokio_util::sync::CancellationToken;
use wasmctrl_testkit::eventually;

use super::*;

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
fn a_lease_expires_exactly_its_duration_after_its_renewal() {
    let renewed: Timestamp = "2025-01-01T00:00:10.900Z".parse().unwrap();
    let spec = LeaseSpec {
        holder_identity: Some("a".into()),
        renew_time: Some(MicroTime(renewed)),
        lease_duration_seconds: Some(2),
        ..LeaseSpec::default()
    };
    let at = |ms: i64| renewed + SignedDuration::from_millis(ms);
    assert!(!lease_expired(&spec, at(1_100)), "not at whole seconds");
    assert!(!lease_expired(&spec, at(1_999)));
    assert!(lease_expired(&spec, at(2_000)));
    let released = LeaseSpec {
        holder_identity: None,
        ..spec.clone()
    };
    assert!(lease_expired(&released, at(0)), "a released lease is free");
    assert_eq!(lease::whole_seconds(Duration::from_millis(1_500)), 2);
    assert_eq!(lease::whole_seconds(Duration::from_secs(15)), 15);
}

#[test]
fn members_are_the_recent_heartbeats() {
    let now: Timestamp = "2025-01-01T00:01:00Z".parse().unwrap();
    let text = r#"{"a":"2025-01-01T00:00:59.5Z","b":"2025-01-01T00:00:40Z","c":"not a time","":"2025-01-01T00:00:59Z"}"#;
    assert_eq!(
        live_members(Some(text), now, Duration::from_secs(15)),
        vec!["a".to_string()]
    );
    assert!(live_members(Some("[1,2]"), now, Duration::from_secs(15)).is_empty());
    assert!(live_members(None, now, Duration::from_secs(15)).is_empty());
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
        namespace: "default".into(),
        lease_name: "unit".into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1_300),
        retry_period: Duration::from_millis(100),
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
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let client = crate::control::client::client_for(&kubeconfig)
        .await
        .unwrap();
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
    assert_eq!(
        live_members(
            annotation.get(MEMBERS_ANNOTATION).map(String::as_str),
            Timestamp::now(),
            Duration::from_secs(2)
        ),
        Vec::<String>::new()
    );
    server.shutdown().await;
}
