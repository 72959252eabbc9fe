//! The `workqueue_*` families: the hooks a [`WorkQueue`] reports through.
//!
//! [`WorkQueue`]: crate::control::workqueue::WorkQueue

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;

use super::labels::{NameLabel, QueueDepthLabels};
use super::registry::Metrics;
use crate::control::workqueue::{Priority, QueueMetrics};

impl Metrics {
    /// Hooks for the workqueue named `name`.
    pub fn queue(self: &Arc<Self>, name: &str) -> Arc<dyn QueueMetrics> {
        Arc::new(QueueMetricsHandle {
            metrics: self.clone(),
            label: NameLabel { name: name.into() },
            depth: Mutex::default(),
        })
    }
}

struct QueueMetricsHandle {
    metrics: Arc<Metrics>,
    label: NameLabel,
    /// The depth gauge of each priority seen: the queue reports depth on
    /// every add and get, which must not build label strings each time.
    depth: Mutex<Vec<(Priority, Gauge)>>,
}

impl QueueMetrics for QueueMetricsHandle {
    fn set_depth(&self, priority: Priority, depth: usize) {
        let mut gauges = self.depth.lock().unwrap_or_else(|e| e.into_inner());
        let gauge = match gauges.iter().find(|(p, _)| *p == priority) {
            Some((_, gauge)) => gauge,
            None => {
                let gauge = self
                    .metrics
                    .queue_depth
                    .get_or_create(&QueueDepthLabels {
                        name: self.label.name.clone(),
                        priority: priority.to_string(),
                    })
                    .clone();
                gauges.push((priority, gauge));
                &gauges.last().expect("just pushed").1
            }
        };
        gauge.set(depth as i64);
    }

    fn inc_adds(&self) {
        self.metrics.queue_adds.get_or_create(&self.label).inc();
    }

    fn inc_retries(&self) {
        self.metrics.queue_retries.get_or_create(&self.label).inc();
    }

    fn observe_queue_duration(&self, waited: Duration) {
        self.metrics
            .queue_duration
            .get_or_create(&self.label)
            .observe(waited.as_secs_f64());
    }

    fn observe_work_duration(&self, worked: Duration) {
        self.metrics
            .work_duration
            .get_or_create(&self.label)
            .observe(worked.as_secs_f64());
    }

    fn set_unfinished_work(&self, unfinished_seconds: f64, longest_running_seconds: f64) {
        self.metrics
            .unfinished_work
            .get_or_create(&self.label)
            .set(unfinished_seconds);
        self.metrics
            .longest_running
            .get_or_create(&self.label)
            .set(longest_running_seconds);
    }
}

#[cfg(test)]
mod tests {
    // Beside the metrics rather than the workqueue, so that the workqueue
    // never imports them (the module graph stays acyclic).
    use std::sync::Arc;
    use std::time::Duration;

    use super::Metrics;
    use crate::control::workqueue::ratelimit::ItemExponentialFailureRateLimiter;
    use crate::control::workqueue::{Priority, WorkQueue};

    const MS: Duration = Duration::from_millis(1);
    const SEC: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn depth_is_exposed_per_priority_label() {
        let metrics = Arc::new(Metrics::new());
        let q = WorkQueue::<&str>::new(
            "exposed",
            Box::new(ItemExponentialFailureRateLimiter::new(5 * MS, SEC)),
            metrics.queue("exposed"),
        );
        q.add_with_priority("a", Priority::LOW);
        q.add_with_priority("b", Priority::LOW);
        q.add("c");
        let text = metrics.encode();
        let line = |priority: &str| {
            text.lines()
                .find(|l| {
                    l.starts_with("workqueue_depth{")
                        && l.contains(r#"name="exposed""#)
                        && l.contains(&format!(r#"priority="{priority}""#))
                })
                .map(|l| l.rsplit(' ').next().unwrap().to_string())
        };
        assert_eq!(line("-100").as_deref(), Some("2"), "{text}");
        assert_eq!(line("0").as_deref(), Some("1"), "{text}");
        let _c = q.get().await.unwrap();
        let text = metrics.encode();
        assert!(
            text.lines().any(|l| l.starts_with("workqueue_depth{")
                && l.contains(r#"priority="0""#)
                && l.ends_with(" 0")),
            "{text}"
        );
    }
}
