//! `/metrics`: the queues' state as Prometheus gauges.

use std::fmt::Write as _;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use sk_runtime::CountBy;

use super::{Failure, Shared};

/// The queues' state as Prometheus gauges, read through the client (workers export
/// their own counters and histograms: docs/operations.md).
pub(super) async fn metrics(State(app): Shared) -> Result<Response, Failure> {
    let client = &app.client;
    let counts = client.count_by(CountBy::Queue).await?;
    let queues = client.queues().await?;
    let workers = client.workers().await?;
    let mut text = String::from(
        "# HELP sk_queue_jobs Jobs of a queue by state (fatal and cancelled: still in the results).\n\
         # TYPE sk_queue_jobs gauge\n",
    );
    for c in &counts {
        let queue = label(c.key.as_deref().unwrap_or_default());
        for (state, n) in [
            ("available", c.available),
            ("scheduled", c.scheduled),
            ("pending", c.pending),
            ("retrying", c.retrying),
            ("running", c.running),
            ("fatal", c.fatal),
            ("cancelled", c.cancelled),
        ] {
            let _ = writeln!(
                text,
                "sk_queue_jobs{{queue=\"{queue}\",state=\"{state}\"}} {n}"
            );
        }
    }
    text.push_str(
        "# HELP sk_queue_paused 1 while an operator has paused the queue.\n# TYPE sk_queue_paused gauge\n",
    );
    for q in &queues {
        let _ = writeln!(
            text,
            "sk_queue_paused{{queue=\"{}\"}} {}",
            label(&q.name),
            u8::from(q.paused_at.is_some())
        );
    }
    let alive = workers.iter().filter(|w| w.alive).count();
    let _ = write!(
        text,
        "# HELP sk_workers Workers by whether they heartbeat lately.\n# TYPE sk_workers gauge\n\
         sk_workers{{alive=\"true\"}} {alive}\nsk_workers{{alive=\"false\"}} {}\n",
        workers.len() - alive
    );
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

/// A Prometheus label value.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
