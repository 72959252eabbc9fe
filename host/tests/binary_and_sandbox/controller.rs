//! The controller loop driving a real plugin: a runaway guest is stopped at
//! its deadline while other keys keep being reconciled.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmctrl::TrapKind;
use wasmctrl::control::controller::{Controller, ControllerOptions, TracingTerminalErrors};
use wasmctrl::control::metrics::Metrics;
use wasmctrl::control::workqueue::WorkQueue;
use wasmctrl::control::workqueue::ratelimit::default_controller_rate_limiter;
use wasmctrl::sandbox::{Limits, Plugin, RuntimeConfig};
use wasmctrl::{Action, ObjectKey, Reconcile, ReconcileError, ReconcileRequest};
use wasmctrl_plugin_artifacts as artifacts;
use wasmctrl_testkit::eventually;

type Entry = (String, Instant, Instant, Result<Action, ReconcileError>);

#[derive(Clone)]
struct Recording {
    plugin: Arc<Plugin>,
    log: Arc<Mutex<Vec<Entry>>>,
    /// Names of the keys whose reconcile has started.
    started: Arc<Mutex<Vec<String>>>,
}

impl Reconcile for Recording {
    async fn reconcile(&self, request: ReconcileRequest) -> Result<Action, ReconcileError> {
        let name = request.key.name.clone();
        let started = Instant::now();
        self.started.lock().unwrap().push(name.clone());
        let result = self.plugin.reconcile(request).await;
        self.log
            .lock()
            .unwrap()
            .push((name, started, Instant::now(), result.clone()));
        result
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_guest_is_stopped_while_other_keys_keep_being_reconciled() {
    let metrics = Arc::new(Metrics::new());
    let runtime = crate::runtime_with(RuntimeConfig {
        max_instances: 8,
        ..RuntimeConfig::default()
    });
    let plugin = crate::load(
        &runtime,
        "misbehave",
        artifacts::MISBEHAVE,
        Limits::default(),
    )
    .await;
    let recording = Recording {
        plugin,
        log: Arc::default(),
        started: Arc::default(),
    };
    let queue = WorkQueue::new(
        "misbehave",
        Box::new(default_controller_rate_limiter()),
        metrics.queue("misbehave"),
    );
    // Long enough that the other worker certainly reconciles a key while
    // the runaway guest runs, however slowly this machine schedules it.
    let timeout = Duration::from_secs(1);
    let options = ControllerOptions {
        max_concurrent_reconciles: 2,
        reconcile_timeout: timeout,
        ..ControllerOptions::new("misbehave")
    };
    let controller = Controller::new(
        options,
        queue.clone(),
        recording.clone(),
        metrics.clone(),
        Arc::new(TracingTerminalErrors),
    );
    queue.add(ObjectKey::namespaced("default", "loop"));
    let workers = controller.start();
    // The other keys arrive once the runaway reconcile is under way, so they
    // cannot all be done before it starts.
    let started = recording.started.clone();
    eventually(
        "the runaway reconcile to start",
        Duration::from_secs(20),
        || {
            let started = started.lock().unwrap().iter().any(|k| k == "loop");
            std::future::ready(started.then_some(()))
        },
    )
    .await;
    for i in 0..20 {
        queue.add(ObjectKey::namespaced("default", format!("k{i}")));
    }

    let log = recording.log.clone();
    eventually("every key reconciled", Duration::from_secs(20), || {
        let log = log.lock().unwrap();
        let done = log.iter().any(|e| e.0 == "loop")
            && log.iter().filter(|e| e.0.starts_with('k')).count() == 20;
        std::future::ready(done.then_some(()))
    })
    .await;

    let entries = log.lock().unwrap().clone();
    let (_, loop_start, loop_end, loop_result) =
        entries.iter().find(|e| e.0 == "loop").unwrap().clone();
    assert!(
        matches!(
            loop_result,
            Err(ReconcileError::Trap {
                kind: TrapKind::Deadline,
                ..
            })
        ),
        "{loop_result:?}"
    );
    let took = loop_end - loop_start;
    assert!(took >= timeout, "{took:?}");
    // Two 1 ms ticks is the design bound (the deadline benchmark measures
    // it); the slack only absorbs a loaded CI machine's scheduling.
    assert!(
        took < timeout + Duration::from_secs(2),
        "the worker was held for {took:?}"
    );
    // The other worker kept going while the runaway guest ran.
    let during = entries
        .iter()
        .filter(|e| e.0.starts_with('k') && e.2 <= loop_end && e.1 >= loop_start)
        .count();
    assert!(
        during > 0,
        "no other key was reconciled during the runaway reconcile"
    );
    assert!(
        entries
            .iter()
            .filter(|e| e.0.starts_with('k'))
            .all(|e| e.3 == Ok(Action::done()))
    );

    let drained = workers.shutdown(Duration::from_secs(5)).await;
    assert!(drained, "processing {}", queue.processing_len());
    assert_eq!(queue.processing_len(), 0);
    let text = metrics.encode();
    assert!(
        text.contains(r#"controller_runtime_reconcile_timeouts_total{controller="misbehave",version="stable"}"#),
        "{text}"
    );
    assert!(
        text.contains(
            r#"controller_runtime_reconcile_total{controller="misbehave",result="success",version="stable"} 20"#
        ),
        "{text}"
    );
}
