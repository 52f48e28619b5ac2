//! The commands on batches: `sk batches` lists the newest, `sk batch ID` shows one with
//! its callbacks, and retries or cancels what is left of it.

use std::io::Write;

use sk_runtime::{BatchRecord, Client};
use uuid::Uuid;

use crate::output::{cells, print_json, print_table, say, table, text, time};
use crate::{fail, Failure};

/// A batch's state in a word: "running" while a job is live, else "finished".
pub(crate) fn batch_state(batch: &BatchRecord) -> &'static str {
    if batch.is_finished() {
        "finished"
    } else {
        "running"
    }
}

/// `sk batches`: the newest `limit` batches.
pub(crate) async fn batches(
    client: &Client,
    limit: u32,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let batches = client.batches(limit).await?;
    if json {
        return print_json(out, &batches);
    }
    let mut table = table(&[
        "id",
        "description",
        "state",
        "total",
        "pending",
        "succeeded",
        "failed",
        "cancelled",
        "created",
    ]);
    for b in &batches {
        table.add_row(cells([
            b.id.to_string(),
            text(b.description.as_deref()),
            batch_state(b).to_owned(),
            b.total.to_string(),
            b.pending.to_string(),
            b.succeeded.to_string(),
            b.failed.to_string(),
            b.cancelled.to_string(),
            time(Some(b.created_at)),
        ]));
    }
    print_table(out, table, batches.is_empty(), "no batches")
}

/// What `sk batch` does besides showing the batch.
#[derive(Debug, Clone, Copy)]
pub(crate) enum BatchAction {
    Show,
    Retry,
    Cancel,
}

/// `sk batch ID`: one batch with its callbacks; or its failed and cancelled jobs retried,
/// or its live jobs cancelled.
pub(crate) async fn batch(
    client: &Client,
    id: Uuid,
    action: BatchAction,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let record = client
        .batch(id)
        .await?
        .ok_or_else(|| fail(format!("no batch {id}"), 3))?;
    match action {
        BatchAction::Retry => {
            let n = client.retry_batch(id).await?;
            return say(out, json, &serde_json::json!({ "retried": n }), || {
                format!("retried {n} jobs of batch {id}")
            });
        }
        BatchAction::Cancel => {
            let n = client.cancel_batch(id).await?;
            return say(out, json, &serde_json::json!({ "cancelled": n }), || {
                format!("cancelled {n} jobs of batch {id}")
            });
        }
        BatchAction::Show => {}
    }
    if json {
        return print_json(out, &record);
    }
    let mut fields = table(&["field", "value"]);
    for (field, value) in [
        ("id", record.id.to_string()),
        ("description", text(record.description.as_deref())),
        ("state", batch_state(&record).to_owned()),
        ("total", record.total.to_string()),
        ("pending", record.pending.to_string()),
        ("succeeded", record.succeeded.to_string()),
        ("failed", record.failed.to_string()),
        ("cancelled", record.cancelled.to_string()),
        ("created", time(Some(record.created_at))),
        ("finished", time(record.finished_at)),
    ] {
        fields.add_row(cells([field.to_owned(), value]));
    }
    writeln!(out, "{fields}")?;
    let mut callbacks = table(&["callback", "job", "type", "posted"]);
    for c in &record.callbacks {
        callbacks.add_row(cells([
            c.event.name().to_owned(),
            c.job_id.to_string(),
            c.task_type.clone(),
            c.posted_at
                .map_or_else(|| "waiting".to_owned(), |at| time(Some(at))),
        ]));
    }
    print_table(out, callbacks, record.callbacks.is_empty(), "no callbacks")
}
