//! The `controller_runtime_reconcile_*` families a controller updates per
//! reconcile.

use std::time::Duration;

use super::labels::{ControllerVersionLabels, ResultLabels};
use super::registry::Metrics;
use super::version::Version;
use crate::control::reconcile::{ReconcileError, TrapKind};

impl Metrics {
    /// Creates `controller`'s reconcile counters at zero, as
    /// controller-runtime does when a controller starts, so a dashboard or
    /// an alert on errors reads 0 rather than no data until the first one.
    pub fn init_controller(&self, controller: &str) {
        let label = ControllerVersionLabels {
            controller: controller.into(),
            version: Version::Stable.as_str().into(),
        };
        for result in ["success", "error", "requeue", "requeue_after"] {
            let _ = self.reconcile_total.get_or_create(&ResultLabels {
                controller: controller.into(),
                result: result.into(),
                version: label.version.clone(),
            });
        }
        let _ = self.reconcile_errors.get_or_create(&label);
        let _ = self.reconcile_panics.get_or_create(&label);
        let _ = self.reconcile_timeouts.get_or_create(&label);
        let _ = self.terminal_errors.get_or_create(&label);
    }

    /// Records one finished reconcile of `controller`, run by `version`.
    pub fn observe_reconcile(
        &self,
        controller: &str,
        version: Version,
        took: Duration,
        result: &Result<crate::Action, ReconcileError>,
    ) {
        let label = ControllerVersionLabels {
            controller: controller.into(),
            version: version.as_str().into(),
        };
        let outcome = match result {
            Ok(a) if a.requeue_after.is_some() => "requeue_after",
            Ok(a) if a.requeue => "requeue",
            Ok(_) => "success",
            Err(_) => "error",
        };
        self.reconcile_total
            .get_or_create(&ResultLabels {
                controller: controller.into(),
                result: outcome.into(),
                version: version.as_str().into(),
            })
            .inc();
        self.reconcile_time
            .get_or_create(&label)
            .observe(took.as_secs_f64());
        if let Err(e) = result {
            self.reconcile_errors.get_or_create(&label).inc();
            match e.trap_kind() {
                Some(TrapKind::Deadline) => {
                    self.reconcile_timeouts.get_or_create(&label).inc();
                }
                Some(_) => {
                    self.reconcile_panics.get_or_create(&label).inc();
                }
                None => {}
            }
        }
    }
}
