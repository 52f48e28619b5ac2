//! Metrics through the [`metrics`] facade: sk records them, the application chooses where
//! they go by installing a recorder (or none: then recording costs building the
//! metric's key, a copy of the queue's name, and an atomic load).
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
//! | `sk_claims_held_total` | counter | `queue`, `task_type`, `limit` | claims a limit held back (`limit="rate"`: the rate limit of the queue or of the job type, the other label `""`, let fewer jobs start than were due and wanted; the claim waits for the window to open; `limit="tenant"`: the claim passed over tenants with due jobs at their limit per tenant) |
//! | `sk_queue_jobs` | gauge | `queue`, `state` | jobs by state, read every [`WorkerBuilder::queue_depth_metrics`](crate::WorkerBuilder::queue_depth_metrics) interval |
//!
//! # OpenTelemetry
//!
//! Every job runs in a `tracing` span named `sk.job` (fields `id`, `task_type`, `queue`,
//! `attempt`, `tenant`, `correlation_id`); with `tracing-opentelemetry` in the
//! application's subscriber, those spans are OpenTelemetry spans. With the cargo feature
//! `opentelemetry`, a job also continues the trace that enqueued it: `enqueue` writes the
//! current span's context into the job's metadata under `sk_trace`, through the global
//! propagator (`opentelemetry::global::set_text_map_propagator`, e.g. W3C trace context),
//! and the worker makes it the parent of the job's `sk.job` span. Without a propagator
//! or an active trace, nothing is written.

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
pub(crate) fn finished(
    outcome: Outcome,
    task_type: &'static str,
    queue: &std::sync::Arc<str>,
    millis: i64,
) {
    // Both labels are shared, not copied: the task type is borrowed for ever, the queue
    // is counted (with no recorder installed the key is still built: one allocation,
    // its label list).
    let name = match outcome {
        Outcome::Completed => "sk_jobs_completed_total",
        Outcome::Retried => "sk_jobs_retried_total",
        Outcome::Failed => "sk_jobs_failed_total",
        Outcome::Cancelled => "sk_jobs_cancelled_total",
    };
    counter!(name, "task_type" => task_type, "queue" => queue.clone()).increment(1);
    if !matches!(outcome, Outcome::Cancelled) {
        histogram!("sk_job_run_seconds", "task_type" => task_type, "queue" => queue.clone())
            .record(millis as f64 / 1000.0);
    }
}

/// A claim that a rate limit held back: its queue's (`queue`, else "") or its job
/// type's (`task_type`, else "").
pub(crate) fn rate_held(queue: &str, task_type: &str) {
    counter!("sk_claims_held_total", "queue" => queue.to_owned(), "task_type" => task_type.to_owned(), "limit" => "rate")
        .increment(1);
}

/// A claim of `queue` that passed over tenants with due jobs at their limit per tenant.
pub(crate) fn tenant_held(queue: &str) {
    counter!("sk_claims_held_total", "queue" => queue.to_owned(), "task_type" => "", "limit" => "tenant")
        .increment(1);
}

/// The time a job waited from posting to its first start.
pub(crate) fn waited(task_type: &'static str, queue: &std::sync::Arc<str>, seconds: f64) {
    histogram!("sk_job_queue_wait_seconds", "task_type" => task_type, "queue" => queue.clone())
        .record(seconds.max(0.0));
}

/// Jobs of each queue by state. A queue read before (in `known`) that has no job left
/// is set to zero, not left at its last count.
pub(crate) fn depth(counts: &[crate::GroupCounts], known: &mut Vec<String>) {
    let now: Vec<String> = counts
        .iter()
        .map(|c| c.key.clone().unwrap_or_default())
        .collect();
    for gone in known.iter().filter(|q| !now.contains(q)) {
        depth(
            &[crate::GroupCounts {
                key: Some(gone.clone()),
                ..Default::default()
            }],
            &mut Vec::new(),
        );
    }
    *known = now;
    for c in counts {
        let queue = c.key.clone().unwrap_or_default();
        for (state, n) in [
            ("available", c.available),
            ("scheduled", c.scheduled),
            ("pending", c.pending),
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

/// `metadata` with the current span's trace context under `sk_trace`; `None` when there
/// is no trace to continue (no propagator installed, or no active span).
#[cfg(feature = "opentelemetry")]
pub(crate) fn trace_context(
    mut metadata: serde_json::Map<String, serde_json::Value>,
) -> Option<serde_json::Map<String, serde_json::Value>> {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let context = tracing::Span::current().context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = std::collections::HashMap::new();
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&context, &mut carrier));
    if carrier.is_empty() {
        return None;
    }
    let carrier = carrier
        .into_iter()
        .map(|(k, v)| (k, serde_json::Value::String(v)))
        .collect();
    metadata.insert("sk_trace".to_owned(), serde_json::Value::Object(carrier));
    Some(metadata)
}

/// Makes the trace context in a job's metadata (`sk_trace`) the parent of its span.
#[cfg(feature = "opentelemetry")]
pub(crate) fn continue_trace(span: &tracing::Span, metadata: Option<&str>) {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let Some(carrier) = metadata
        .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok())
        .and_then(|m| m.get("sk_trace").cloned())
        .and_then(|t| serde_json::from_value::<std::collections::HashMap<String, String>>(t).ok())
    else {
        return;
    };
    let parent = opentelemetry::global::get_text_map_propagator(|p| p.extract(&carrier));
    let _ = span.set_parent(parent);
}
