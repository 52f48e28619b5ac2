//! Metrics through the [`metrics`] facade: sk records them, the application chooses where
//! they go by installing a recorder (or none: then recording costs an atomic load).
//! [`install_prometheus`] (cargo feature `prometheus`) is one such recorder, with an
//! HTTP endpoint of its own.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `sk_jobs_enqueued_total` | counter | `task_type`, `queue` | jobs posted through `enqueue`, `enqueue_many`, `Client::enqueue_json` (counted when the insert succeeds, also when the caller's transaction later rolls back) |
//! | `sk_jobs_completed_total` | counter | `task_type`, `queue` | runs that succeeded and were recorded |
//! | `sk_jobs_retried_total` | counter | `task_type`, `queue` | runs that failed and will run again |
//! | `sk_jobs_failed_total` | counter | `task_type`, `queue` | runs that failed for good |
//! | `sk_jobs_cancelled_total` | counter | `task_type`, `queue` | running jobs stopped by a cancel (on this worker) |
//! | `sk_job_run_seconds` | histogram | `task_type`, `queue` | run time of each recorded run |
//! | `sk_job_queue_wait_seconds` | histogram | `task_type`, `queue` | from posting to the first start (includes a scheduled delay) |
//! | `sk_queue_jobs` | gauge | `queue`, `state` | jobs by state, read every [`WorkerBuilder::queue_depth_metrics`](crate::WorkerBuilder::queue_depth_metrics) interval |

use metrics::{counter, gauge, histogram};

/// A job's outcome, as counted.
#[derive(Clone, Copy)]
pub(crate) enum Outcome {
    Completed,
    Retried,
    Failed,
    Cancelled,
}

pub(crate) fn enqueued(task_type: &str, queue: &str, n: u64) {
    counter!("sk_jobs_enqueued_total", "task_type" => task_type.to_owned(), "queue" => queue.to_owned())
        .increment(n);
}

/// One run's end: its outcome, and its run time unless it was cancelled.
pub(crate) fn finished(outcome: Outcome, task_type: &'static str, queue: &str, millis: i64) {
    let labels = [
        ("task_type", task_type.to_owned()),
        ("queue", queue.to_owned()),
    ];
    let name = match outcome {
        Outcome::Completed => "sk_jobs_completed_total",
        Outcome::Retried => "sk_jobs_retried_total",
        Outcome::Failed => "sk_jobs_failed_total",
        Outcome::Cancelled => "sk_jobs_cancelled_total",
    };
    counter!(name, &labels).increment(1);
    if !matches!(outcome, Outcome::Cancelled) {
        histogram!("sk_job_run_seconds", &labels).record(millis as f64 / 1000.0);
    }
}

/// The time a job waited from posting to its first start.
pub(crate) fn waited(task_type: &'static str, queue: &str, seconds: f64) {
    histogram!("sk_job_queue_wait_seconds", "task_type" => task_type, "queue" => queue.to_owned())
        .record(seconds.max(0.0));
}

/// Jobs of one queue by state.
pub(crate) fn depth(counts: &[crate::GroupCounts]) {
    for c in counts {
        let queue = c.key.clone().unwrap_or_default();
        for (state, n) in [
            ("available", c.available),
            ("scheduled", c.scheduled),
            ("retrying", c.retrying),
            ("running", c.running),
            ("fatal", c.fatal),
            ("cancelled", c.cancelled),
        ] {
            gauge!("sk_queue_jobs", "queue" => queue.clone(), "state" => state).set(n as f64);
        }
    }
}

/// Installs a Prometheus recorder as the process's metrics recorder and serves its
/// scrape endpoint (`GET /metrics`, or any path) on `address`, from a thread of its own.
/// Pair it with [`WorkerBuilder::queue_depth_metrics`](crate::WorkerBuilder::queue_depth_metrics)
/// for the queue depth gauge.
///
/// ```no_run
/// sk_runtime::telemetry::install_prometheus("0.0.0.0:9464".parse().unwrap())?;
/// # Ok::<(), sk_runtime::Error>(())
/// ```
///
/// # Errors
/// [`crate::Error::Invalid`]: a recorder is installed already, or the address cannot be
/// bound.
#[cfg(feature = "prometheus")]
pub fn install_prometheus(address: std::net::SocketAddr) -> crate::Result<()> {
    use metrics_exporter_prometheus::Matcher;
    // Histograms (not summaries), so that Prometheus can add them up across workers.
    const BUCKETS: &[f64] = &[
        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
        900.0, 3600.0,
    ];
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(address)
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), BUCKETS)
        .map_err(|e| crate::Error::invalid("prometheus exporter", e.to_string()))?
        .install()
        .map_err(|e| crate::Error::invalid("prometheus exporter", format!("{address}: {e}")))
}
