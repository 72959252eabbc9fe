//! The `controller_runtime_reconcile_*` families a controller updates per
//! reconcile.

use std::sync::OnceLock;
use std::time::Duration;

use super::per_plugin::PluginFamily;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

use super::labels::{ControllerVersionLabels, ResultLabels};
use super::registry::Metrics;
use super::version::Version;
use crate::control::reconcile::{ReconcileError, TrapKind};

/// One controller's `controller_runtime_reconcile_*` series, each looked
/// up in its family on first use and kept: a lookup builds the label
/// strings and hashes them under the family's lock, on every reconcile.
/// A controller holds one per [`Version`].
#[derive(Default)]
pub struct ReconcileSeries {
    /// By outcome: success, requeue, requeue_after, error.
    total: [OnceLock<Counter>; 4],
    time: OnceLock<Histogram>,
    errors: OnceLock<Counter>,
    timeouts: OnceLock<Counter>,
    panics: OnceLock<Counter>,
}

const OUTCOMES: [&str; 4] = ["success", "requeue", "requeue_after", "error"];

impl Metrics {
    /// Records one finished reconcile of `controller`, run by `version`,
    /// through the series `series` keeps for that pair (always the same
    /// pair for one `series`).
    pub fn observe_reconcile_in(
        &self,
        series: &ReconcileSeries,
        controller: &str,
        version: Version,
        took: Duration,
        result: &Result<crate::Action, ReconcileError>,
    ) {
        let label = || ControllerVersionLabels {
            controller: controller.into(),
            version: version.as_str().into(),
        };
        let outcome = match result {
            Ok(a) if a.requeue_after.is_some() => 2,
            Ok(a) if a.requeue => 1,
            Ok(_) => 0,
            Err(_) => 3,
        };
        series.total[outcome]
            .get_or_init(|| {
                self.reconcile_total
                    .get_or_create(&ResultLabels {
                        controller: controller.into(),
                        result: OUTCOMES[outcome].into(),
                        version: version.as_str().into(),
                    })
                    .clone()
            })
            .inc();
        series
            .time
            .get_or_init(|| self.reconcile_time.get_or_create(&label()).clone())
            .observe(took.as_secs_f64());
        if let Err(e) = result {
            let count =
                |cell: &OnceLock<Counter>,
                 family: &PluginFamily<ControllerVersionLabels, Counter>| {
                    cell.get_or_init(|| family.get_or_create(&label()).clone())
                        .inc();
                };
            count(&series.errors, &self.reconcile_errors);
            match e.trap_kind() {
                Some(TrapKind::Deadline) => count(&series.timeouts, &self.reconcile_timeouts),
                Some(_) => count(&series.panics, &self.reconcile_panics),
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Action;

    #[test]
    fn a_kept_series_counts_each_outcome_under_its_own_labels() {
        let metrics = Metrics::new();
        let stable = ReconcileSeries::default();
        let candidate = ReconcileSeries::default();
        let ms = Duration::from_millis(1);
        let deadline = ReconcileError::Trap {
            kind: TrapKind::Deadline,
            message: "deadline".into(),
        };
        let stack = ReconcileError::Trap {
            kind: TrapKind::Stack,
            message: "stack".into(),
        };
        for result in [
            Ok(Action::done()),
            Ok(Action::done()),
            Ok(Action::requeue_after(Duration::from_secs(5))),
            Err(deadline),
            Err(stack),
            Err(ReconcileError::Transient("later".into())),
        ] {
            metrics.observe_reconcile_in(&stable, "web", Version::Stable, ms, &result);
        }
        metrics.observe_reconcile_in(
            &candidate,
            "web",
            Version::Candidate,
            ms,
            &Ok(Action::done()),
        );
        let text = metrics.encode();
        let value = |prefix: &str, labels: &[&str]| -> String {
            text.lines()
                .find(|l| l.starts_with(prefix) && labels.iter().all(|x| l.contains(x)))
                .unwrap_or_else(|| panic!("no {prefix} {labels:?} in\n{text}"))
                .rsplit(' ')
                .next()
                .unwrap()
                .to_string()
        };
        let total = "controller_runtime_reconcile_total{";
        let stable_label = r#"version="stable""#;
        assert_eq!(value(total, &[r#"result="success""#, stable_label]), "2");
        assert_eq!(
            value(total, &[r#"result="requeue_after""#, stable_label]),
            "1"
        );
        assert_eq!(value(total, &[r#"result="error""#, stable_label]), "3");
        assert_eq!(
            value(total, &[r#"result="success""#, r#"version="candidate""#]),
            "1"
        );
        assert!(
            !text.contains(r#"result="requeue""#),
            "no requeue happened:\n{text}"
        );
        assert_eq!(
            value(
                "controller_runtime_reconcile_errors_total{",
                &[stable_label]
            ),
            "3"
        );
        assert_eq!(
            value(
                "controller_runtime_reconcile_timeouts_total{",
                &[stable_label]
            ),
            "1"
        );
        assert_eq!(
            value(
                "controller_runtime_reconcile_panics_total{",
                &[stable_label]
            ),
            "1"
        );
        assert_eq!(
            value(
                "controller_runtime_reconcile_time_seconds_count{",
                &[stable_label]
            ),
            "6"
        );
    }
}
