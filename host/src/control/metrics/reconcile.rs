//! The `controller_runtime_reconcile_*` families a controller updates per
//! reconcile.

use std::time::Duration;

use super::labels::{ControllerVersionLabels, ResultLabels};
use super::registry::Metrics;
use super::version::Version;
use crate::control::reconcile::{ReconcileError, TrapKind};

impl Metrics {
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
