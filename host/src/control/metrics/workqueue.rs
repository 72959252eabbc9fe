//! The `workqueue_*` families: the hooks a [`WorkQueue`] reports through.
//!
//! [`WorkQueue`]: crate::control::workqueue::WorkQueue

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::labels::{NameLabel, QueueDepthLabels};
use super::registry::Metrics;
use crate::control::workqueue::{Priority, QueueMetrics};

impl Metrics {
    /// Hooks for the workqueue named `name`.
    pub fn queue(self: &Arc<Self>, name: &str) -> Arc<dyn QueueMetrics> {
        Arc::new(QueueMetricsHandle {
            metrics: self.clone(),
            label: NameLabel { name: name.into() },
            series: Series::default(),
            depth: Mutex::default(),
        })
    }
}

/// The queue's series, each looked up in its family on first use and kept:
/// a queue reports on every add, get and done, and a family lookup hashes
/// the label set under the family's lock.
#[derive(Default)]
struct Series {
    adds: OnceLock<Counter>,
    retries: OnceLock<Counter>,
    queue_duration: OnceLock<Histogram>,
    work_duration: OnceLock<Histogram>,
    unfinished_work: OnceLock<Gauge<f64, AtomicU64>>,
    longest_running: OnceLock<Gauge<f64, AtomicU64>>,
    depth_normal: OnceLock<Gauge>,
    depth_low: OnceLock<Gauge>,
}

struct QueueMetricsHandle {
    metrics: Arc<Metrics>,
    label: NameLabel,
    series: Series,
    /// The depth gauge of each other priority seen.
    depth: Mutex<Vec<(Priority, Gauge)>>,
}

impl QueueMetricsHandle {
    fn depth_gauge(&self, priority: Priority) -> Gauge {
        self.metrics
            .queue_depth
            .get_or_create(&QueueDepthLabels {
                name: self.label.name.clone(),
                priority: priority.to_string(),
            })
            .clone()
    }
}

impl QueueMetrics for QueueMetricsHandle {
    fn set_depth(&self, priority: Priority, depth: usize) {
        let depth = depth as i64;
        let known = match priority {
            Priority::NORMAL => &self.series.depth_normal,
            Priority::LOW => &self.series.depth_low,
            _ => {
                let mut gauges = self.depth.lock().unwrap_or_else(|e| e.into_inner());
                match gauges.iter().find(|(p, _)| *p == priority) {
                    Some((_, gauge)) => {
                        gauge.set(depth);
                    }
                    None => {
                        let gauge = self.depth_gauge(priority);
                        gauge.set(depth);
                        gauges.push((priority, gauge));
                    }
                }
                return;
            }
        };
        known.get_or_init(|| self.depth_gauge(priority)).set(depth);
    }

    fn inc_adds(&self) {
        let m = &self.metrics;
        self.series
            .adds
            .get_or_init(|| m.queue_adds.get_or_create(&self.label).clone())
            .inc();
    }

    fn inc_retries(&self) {
        let m = &self.metrics;
        self.series
            .retries
            .get_or_init(|| m.queue_retries.get_or_create(&self.label).clone())
            .inc();
    }

    fn observe_queue_duration(&self, waited: Duration) {
        let m = &self.metrics;
        self.series
            .queue_duration
            .get_or_init(|| m.queue_duration.get_or_create(&self.label).clone())
            .observe(waited.as_secs_f64());
    }

    fn observe_work_duration(&self, worked: Duration) {
        let m = &self.metrics;
        self.series
            .work_duration
            .get_or_init(|| m.work_duration.get_or_create(&self.label).clone())
            .observe(worked.as_secs_f64());
    }

    fn set_unfinished_work(&self, unfinished_seconds: f64, longest_running_seconds: f64) {
        let m = &self.metrics;
        self.series
            .unfinished_work
            .get_or_init(|| m.unfinished_work.get_or_create(&self.label).clone())
            .set(unfinished_seconds);
        self.series
            .longest_running
            .get_or_init(|| m.longest_running.get_or_create(&self.label).clone())
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
