//! The rows an outcome writes and reads back: the results row, the statistics, the errors of a run.

use super::*;
use crate::model::from_row;

from_row! {
/// A queue row as it was when its run ended: a JSON object of `Statements::failed_rows`
/// (the id in hex), or a row of the completion's temp table of rows that take its rare
/// path.
#[derive(serde::Deserialize)]
pub(super) struct Row {
    pub(super) task_id: Uuid = "task_id",
    pub(super) task_type: String = "task_type",
    pub(super) task_source: String = "task_source",
    pub(super) task_queue: String = "task_queue",
    /// Read wide, so a row past the table's checks (`PRAGMA ignore_check_constraints`)
    /// still ends; written back held to `i32`, as every other reader takes it.
    pub(super) task_priority: i64 = "task_priority",
    pub(super) task_posted_at_ts: String = "task_posted_at_ts",
    pub(super) task_tenant: Option<String> = "task_tenant",
    pub(super) task_correlation_id: Option<String> = "task_correlation_id",
    pub(super) task_metadata: Option<String> = "task_metadata",
    pub(super) task_claimed_at_ts: Option<String> = "task_claimed_at_ts",
    pub(super) task_lost_attempts: Option<String> = "task_lost_attempts",
    pub(super) task_payload: Option<String> = "task_payload",
    pub(super) task_max_attempts: i64 = "task_max_attempts",
    pub(super) task_unique_key: Option<String> = "task_unique_key",
    pub(super) task_unique_mode: Option<i16> = "task_unique_mode",
    pub(super) task_rerun: bool = "task_rerun",
    pub(super) task_every_ms: Option<i64> = "task_every_ms",
    pub(super) task_timeout_ms: Option<i64> = "task_timeout_ms",
    /// Other jobs wait on it.
    pub(super) task_dependants: bool = "task_dependants",
    /// It waited on others (their outputs are its inputs).
    pub(super) task_fed: bool = [default "task_fed"],
}
}

impl LeasedRow for Row {
    type Time = String;
    fn task_id(&self) -> Uuid {
        self.task_id
    }
    fn lost_attempts(&self) -> Option<&str> {
        self.task_lost_attempts.as_deref()
    }
    fn claimed_at(&self) -> Option<String> {
        self.task_claimed_at_ts.clone()
    }
    fn parse_time(text: &str) -> Option<String> {
        Some(text.to_owned())
    }
    fn time_text(time: String) -> String {
        time
    }
}

/// Per task type: total and count, fastest, longest and last run time (seed 001).
#[derive(Default)]
pub(super) struct Stats(pub(super) HashMap<String, (i64, i64, i64, i64, i64)>);

impl Stats {
    pub(super) fn add(&mut self, task_type: &str, ms: i64) {
        let e = self
            .0
            .entry(task_type.to_owned())
            .or_insert((0, 0, i64::MAX, i64::MIN, 0));
        e.0 += ms;
        e.1 += 1;
        e.2 = e.2.min(ms);
        e.3 = e.3.max(ms);
        e.4 = ms;
    }
}

/// The failed attempts recorded for `id` followed by `more`, as a JSON array.
pub(super) async fn errors_with(
    tx: &mut SqliteConnection,
    schema: &Schema,
    id: Uuid,
    more: Vec<serde_json::Value>,
) -> Result<String> {
    let recorded: Option<String> = sqlx::query_scalar(&format!(
        "SELECT task_errors FROM {} WHERE task_id = $1",
        schema.sqlite.results
    ))
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    let mut all: Vec<serde_json::Value> = recorded
        .as_deref()
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_default();
    all.extend(more);
    Ok(serde_json::Value::Array(all).to_string())
}
