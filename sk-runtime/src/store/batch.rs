//! Batches, written once for every backend: a batch's rows at its enqueue, the count of
//! its jobs' outcomes in the transactions that record them, and the callbacks that count
//! brings due (migration 23 on PostgreSQL, 14 on SQLite, 16 on MySQL).
//!
//! A job of a batch is marked as a job others wait on (`task_dependants`), so every path
//! that ends one, or brings one back, already passes its id to the workflow step of its
//! transaction (`flow::settle`, `flow::propagate`, `flow::revive`, a retry); that step
//! calls [`tally`] with the state the jobs are now in. The tally locks the batches' rows
//! in id order, moves each job's row of `batch_jobs_t` to the new state, applies the
//! differences to the batches' counts, and returns the callbacks whose event came, marked
//! as posted: the caller inserts them in the same transaction. A set of jobs costs a few
//! statements, whatever its size; a callback is posted once, by the transaction that
//! brought its event, or not at all if that transaction rolls back.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::FromRow;
use uuid::Uuid;

use super::dialect::{Arg, Boxed, Dialect};
use super::{NewJob, Schema};
use crate::error::{Error, Result};
use crate::model::status::{CANCELLED, FATAL, PROCESSED, UNPROCESSED};
use crate::model::BatchEvent;

/// Ids per statement when a batch's jobs are recorded (a JSON array of 10,000 ids is
/// 340 KB, inside every backend's packet size).
pub(crate) const IDS_PER_STATEMENT: usize = 10_000;

/// Ids as the JSON array of simple hex ids that [`Dialect::id_rows`] reads.
pub(crate) fn id_list(ids: &[Uuid]) -> String {
    let hex: Vec<String> = ids.iter().map(|id| id.simple().to_string()).collect();
    serde_json::to_string(&hex).expect("a list of strings serializes")
}

/// A callback as stored until its event comes: the job to post, its id chosen at the
/// batch's enqueue.
#[derive(Debug, Serialize, Deserialize)]
struct StoredCallback {
    id: Uuid,
    task_type: String,
    source: String,
    payload: String,
    queue: String,
    priority: i32,
    max_attempts: i32,
    tenant: Option<String>,
    correlation_id: Option<String>,
    metadata: Option<String>,
    timeout_ms: Option<i64>,
}

impl StoredCallback {
    fn of(job: &NewJob) -> Self {
        Self {
            id: job.id,
            task_type: job.task_type.to_string(),
            source: job.source.clone(),
            payload: job.payload.clone(),
            queue: job.queue.clone(),
            priority: job.priority,
            max_attempts: job.max_attempts,
            tenant: job.tenant.clone(),
            correlation_id: job.correlation_id.clone(),
            metadata: job.metadata.clone(),
            timeout_ms: job.timeout_ms,
        }
    }

    /// The job to post at `now`, its metadata holding the batch's counts under `batch`.
    fn into_job(self, counts: &Counts, event: BatchEvent, now: DateTime<Utc>) -> NewJob {
        let mut metadata = self
            .metadata
            .as_deref()
            .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok())
            .filter(serde_json::Value::is_object)
            .unwrap_or_else(|| serde_json::json!({}));
        metadata["batch"] = serde_json::json!({
            "id": counts.id,
            "event": event.name(),
            "total": counts.total,
            "succeeded": counts.succeeded,
            "failed": counts.failed,
            "cancelled": counts.cancelled,
        });
        NewJob {
            id: self.id,
            task_type: self.task_type.into(),
            source: self.source,
            payload: self.payload,
            queue: self.queue,
            priority: self.priority,
            run_at: now,
            max_attempts: self.max_attempts,
            unique_key: None,
            unique_mode: None,
            tenant: self.tenant,
            correlation_id: self.correlation_id,
            metadata: Some(metadata.to_string()),
            every_ms: None,
            timeout_ms: self.timeout_ms,
        }
    }
}

/// Refuses a job that cannot be in a batch (`callback`: as one of its callbacks).
pub(crate) fn check_job(job: &NewJob, callback: bool, now: DateTime<Utc>) -> Result<()> {
    let what = if job.unique_key.is_some() {
        "a unique key"
    } else if job.every_ms.is_some() {
        "a period"
    } else if callback && job.run_at > now {
        "a run-at time (a callback runs when its event comes)"
    } else {
        return Ok(());
    };
    let role = if callback {
        "a batch's callback"
    } else {
        "a job of a batch"
    };
    Err(Error::invalid(
        "batch",
        format!("job `{}` is {role} and cannot have {what}", job.task_type),
    ))
}

/// Records batch `id` of the jobs `ids` (inserted in this transaction) with its
/// `callbacks`.
pub(crate) fn create<'a, D: Dialect>(
    conn: &'a mut D::Connection,
    schema: &'a Schema,
    id: Uuid,
    description: Option<&'a str>,
    ids: &'a [Uuid],
    callbacks: &'a [(BatchEvent, NewJob)],
    now: DateTime<Utc>,
) -> Boxed<'a, ()> {
    Box::pin(async move {
        let total = i32::try_from(ids.len())
            .map_err(|_| Error::invalid("batch", "a batch holds at most 2,147,483,647 jobs"))?;
        let sql = format!(
            "INSERT INTO {} (batch_id, batch_description, batch_total, batch_pending, batch_created_at_ts)
             VALUES ($1, $2, $3, $3, $4)",
            D::table(schema, "batches_t")
        );
        let args = [
            Arg::Id(Some(id)),
            Arg::Text(description),
            Arg::Int4(Some(total)),
            Arg::Time(now),
        ];
        D::execute_on(conn, &sql, &args).await?;
        let members = format!(
            "INSERT INTO {} (task_id, batch_id, job_status) SELECT i.id, $2, {UNPROCESSED} FROM ({}) AS i",
            D::table(schema, "batch_jobs_t"),
            D::id_rows("$1")
        );
        // A job of a batch is one whose outcome others wait on (module docs).
        let marked = D::update_listed(
            &D::table(schema, "tasks_queue_t"),
            "task_dependants = true",
            "task_id",
            "$1",
            "true",
        );
        for chunk in ids.chunks(IDS_PER_STATEMENT) {
            let list = id_list(chunk);
            D::execute_on(conn, &members, &[Arg::Text(Some(&list)), Arg::Id(Some(id))]).await?;
            D::execute_on(conn, &marked, &[Arg::Text(Some(&list))]).await?;
        }
        let sql = format!(
            "INSERT INTO {} (batch_id, callback_event, task_id, task_type, callback_job)
             VALUES ($1, $2, $3, $4, $5)",
            D::table(schema, "batch_callbacks_t")
        );
        for (event, job) in callbacks {
            let stored = serde_json::to_string(&StoredCallback::of(job)).map_err(|e| {
                Error::invalid("batch", format!("a callback does not serialize: {e}"))
            })?;
            let args = [
                Arg::Id(Some(id)),
                Arg::Int4(Some(event.code())),
                Arg::Id(Some(job.id)),
                Arg::Text(Some(&job.task_type)),
                Arg::Text(Some(&stored)),
            ];
            D::execute_on(conn, &sql, &args).await?;
        }
        Ok(())
    })
}

/// A batch's counts as the tally moves them.
#[derive(Debug)]
struct Counts {
    id: Uuid,
    total: i64,
    pending: i64,
    succeeded: i64,
    failed: i64,
    cancelled: i64,
}

impl Counts {
    fn of_state(&mut self, status: i64) -> &mut i64 {
        match i32::try_from(status).unwrap_or(UNPROCESSED) {
            PROCESSED => &mut self.succeeded,
            FATAL => &mut self.failed,
            CANCELLED => &mut self.cancelled,
            _ => &mut self.pending,
        }
    }

    /// Whether `event` has come.
    fn brings(&self, event: BatchEvent) -> bool {
        match event {
            BatchEvent::Success => self.pending == 0 && self.succeeded == self.total,
            BatchEvent::Complete => self.pending == 0,
            BatchEvent::Death => self.failed > 0,
        }
    }
}

/// Counts the jobs `ids` of any batch as now in `status` (live, succeeded, fatal or
/// cancelled), in the transaction that put them there, and returns the callbacks whose
/// event came, marked as posted, for the caller to insert. Ids of no batch cost one
/// statement.
pub(crate) fn tally<'a, D: Dialect>(
    conn: &'a mut D::Connection,
    schema: &'a Schema,
    ids: &'a [Uuid],
    status: i32,
    now: DateTime<Utc>,
) -> Boxed<'a, Vec<NewJob>>
where
    (Uuid,): for<'r> FromRow<'r, D::Row>,
    (Uuid, i64, i64, i64, i64, i64): for<'r> FromRow<'r, D::Row>,
    (Uuid, i64, i64): for<'r> FromRow<'r, D::Row>,
    (i64, String): for<'r> FromRow<'r, D::Row>,
{
    Box::pin(async move {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let b = D::table(schema, "batches_t");
        let m = D::table(schema, "batch_jobs_t");
        let c = D::table(schema, "batch_callbacks_t");
        let listed = D::id_rows("$1");
        let list = id_list(ids);
        // The batches of these jobs (a job's batch never changes), read through a join
        // from the ids: MariaDB ran the same `IN (SELECT … JSON_TABLE …)` as a scan of
        // every batch's jobs now and then (1,400 jobs/s against 14,000).
        let of_jobs = format!(
            "SELECT DISTINCT m.batch_id FROM ({listed}) AS listed JOIN {m} m ON m.task_id = listed.id"
        );
        let mut touched: Vec<(Uuid,)> =
            D::fetch_all_on(conn, &of_jobs, &[Arg::Text(Some(&list))]).await?;
        if touched.is_empty() {
            return Ok(Vec::new());
        }
        // Each batch's row locked in id order: two transactions counting jobs of the same
        // batches take turns, and the second reads the first's counts and states.
        touched.sort_unstable();
        let lock = format!(
            "SELECT batch_id, {}, {}, {}, {}, {} FROM {b} WHERE batch_id = $1{}",
            D::bigint("batch_total"),
            D::bigint("batch_pending"),
            D::bigint("batch_succeeded"),
            D::bigint("batch_failed"),
            D::bigint("batch_cancelled"),
            D::for_update(),
        );
        let mut batches: Vec<Counts> = Vec::with_capacity(touched.len());
        for (batch,) in touched {
            let rows: Vec<(Uuid, i64, i64, i64, i64, i64)> =
                D::fetch_all_on(conn, &lock, &[Arg::Id(Some(batch))]).await?;
            batches.extend(rows.into_iter().map(
                |(id, total, pending, succeeded, failed, cancelled)| Counts {
                    id,
                    total,
                    pending,
                    succeeded,
                    failed,
                    cancelled,
                },
            ));
        }
        let moved_sql = format!(
            "SELECT m.batch_id, {}, {} FROM ({listed}) AS listed JOIN {m} m ON m.task_id = listed.id
             WHERE m.job_status <> $2 GROUP BY m.batch_id, m.job_status",
            D::bigint("m.job_status"),
            D::bigint("count(*)"),
        );
        let args = [Arg::Text(Some(&list)), Arg::Int4(Some(status))];
        let moved: Vec<(Uuid, i64, i64)> = D::fetch_all_on(conn, &moved_sql, &args).await?;
        if moved.is_empty() {
            return Ok(Vec::new());
        }
        let sql = D::update_listed(&m, "job_status = $2", "task_id", "$1", "job_status <> $2");
        D::execute_on(conn, &sql, &args).await?;
        for (batch, was, n) in &moved {
            if let Some(counts) = batches.iter_mut().find(|b| b.id == *batch) {
                *counts.of_state(*was) -= n;
                *counts.of_state(i64::from(status)) += n;
            }
        }
        let update = format!(
            "UPDATE {b} SET batch_pending = $2, batch_succeeded = $3, batch_failed = $4, batch_cancelled = $5,
                batch_finished_at_ts = CASE WHEN $2 = 0 THEN coalesce(batch_finished_at_ts, $6) END
             WHERE batch_id = $1"
        );
        let waiting = format!(
            "SELECT {}, callback_job FROM {c} WHERE batch_id = $1 AND callback_fired_at_ts IS NULL",
            D::bigint("callback_event")
        );
        let fired = format!(
            "UPDATE {c} SET callback_fired_at_ts = $3 WHERE batch_id = $1 AND callback_event = $2"
        );
        let mut posts = Vec::new();
        batches.retain(|counts| moved.iter().any(|(batch, _, _)| *batch == counts.id));
        for counts in &batches {
            let as_i32 = |n: i64| Arg::Int4(Some(i32::try_from(n).unwrap_or(i32::MAX)));
            let args = [
                Arg::Id(Some(counts.id)),
                as_i32(counts.pending),
                as_i32(counts.succeeded),
                as_i32(counts.failed),
                as_i32(counts.cancelled),
                Arg::Time(now),
            ];
            D::execute_on(conn, &update, &args).await?;
            let callbacks: Vec<(i64, String)> =
                D::fetch_all_on(conn, &waiting, &[Arg::Id(Some(counts.id))]).await?;
            for (code, job) in callbacks {
                let Some(event) = BatchEvent::from_code(code) else {
                    continue;
                };
                if !counts.brings(event) {
                    continue;
                }
                let stored: StoredCallback = serde_json::from_str(&job).map_err(|e| {
                    Error::invalid(
                        "batch",
                        format!(
                            "batch {}: its {} callback does not read: {e}",
                            counts.id,
                            event.name()
                        ),
                    )
                })?;
                let args = [
                    Arg::Id(Some(counts.id)),
                    Arg::Int4(Some(event.code())),
                    Arg::Time(now),
                ];
                D::execute_on(conn, &fired, &args).await?;
                posts.push(stored.into_job(counts, event, now));
            }
        }
        Ok(posts)
    })
}

/// A batch's row as read: id, description, counts, created and finished at.
type BatchRow = (
    Uuid,
    Option<String>,
    i64,
    i64,
    i64,
    i64,
    i64,
    DateTime<Utc>,
    Option<DateTime<Utc>>,
);

/// A callback's row as read: batch, event, job id, task type, posted at.
type CallbackRow = (Uuid, i64, Uuid, String, Option<DateTime<Utc>>);

/// The batches with ids `ids`, or the newest `limit` when `ids` is `None`, newest first,
/// each with its callbacks.
pub(crate) fn records<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
    ids: Option<&'a [Uuid]>,
    limit: i64,
) -> Boxed<'a, Vec<crate::model::BatchRecord>>
where
    BatchRow: for<'r> FromRow<'r, D::Row>,
    CallbackRow: for<'r> FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let list = ids.map(id_list);
        let sql = format!(
            "SELECT batch_id, batch_description, {}, {}, {}, {}, {}, batch_created_at_ts, batch_finished_at_ts
             FROM {} WHERE {} ORDER BY batch_created_at_ts DESC, batch_id DESC LIMIT $2",
            D::bigint("batch_total"),
            D::bigint("batch_pending"),
            D::bigint("batch_succeeded"),
            D::bigint("batch_failed"),
            D::bigint("batch_cancelled"),
            D::table(schema, "batches_t"),
            if ids.is_some() {
                format!("batch_id IN ({})", D::id_rows("$1"))
            } else {
                "$1 IS NULL".to_owned()
            },
        );
        let args = [Arg::Text(list.as_deref()), Arg::Int(Some(limit))];
        let rows: Vec<BatchRow> = D::fetch_all(pool, &sql, &args).await?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let found: Vec<Uuid> = rows.iter().map(|r| r.0).collect();
        let found = id_list(&found);
        let sql = format!(
            "SELECT batch_id, {}, task_id, {}, callback_fired_at_ts FROM {}
             WHERE batch_id IN ({}) ORDER BY callback_event",
            D::bigint("callback_event"),
            D::text("task_type"),
            D::table(schema, "batch_callbacks_t"),
            D::id_rows("$1"),
        );
        let callbacks: Vec<CallbackRow> =
            D::fetch_all(pool, &sql, &[Arg::Text(Some(&found))]).await?;
        Ok(rows
            .into_iter()
            .map(|r| crate::model::BatchRecord {
                id: r.0,
                description: r.1,
                total: r.2,
                pending: r.3,
                succeeded: r.4,
                failed: r.5,
                cancelled: r.6,
                created_at: r.7,
                finished_at: r.8,
                callbacks: callbacks
                    .iter()
                    .filter(|c| c.0 == r.0)
                    .filter_map(|c| {
                        Some(crate::model::BatchCallback {
                            event: BatchEvent::from_code(c.1)?,
                            job_id: c.2,
                            task_type: c.3.clone(),
                            posted_at: c.4,
                        })
                    })
                    .collect(),
            })
            .collect())
    })
}

/// The ids of batch `id`'s jobs in `status` (any, when `None`), a page at a time in id
/// order after `after`.
pub(crate) fn job_ids<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
    id: Uuid,
    status: Option<i32>,
    after: Option<Uuid>,
    limit: i64,
) -> Boxed<'a, Vec<Uuid>>
where
    (Uuid,): for<'r> FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let sql = format!(
            "SELECT task_id FROM {} WHERE batch_id = $1 AND ($2 IS NULL OR job_status = $2)
                AND ($3 IS NULL OR task_id > $3)
             ORDER BY task_id LIMIT $4",
            D::table(schema, "batch_jobs_t"),
        );
        let args = [
            Arg::Id(Some(id)),
            Arg::Int4(status),
            Arg::Id(after),
            Arg::Int(Some(limit)),
        ];
        let rows: Vec<(Uuid,)> = D::fetch_all(pool, &sql, &args).await?;
        Ok(rows.into_iter().map(|r| r.0).collect())
    })
}

/// Deletes the batches whose last job ended before `before`, with their jobs' and
/// callbacks' rows (kept as long as the results, `Client::prune` and a worker's
/// retention); how many batches.
pub(crate) async fn delete_finished<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
    before: DateTime<Utc>,
) -> Result<u64> {
    let b = D::table(schema, "batches_t");
    let finished = format!("SELECT batch_id FROM {b} WHERE batch_finished_at_ts < $1");
    for table in ["batch_jobs_t", "batch_callbacks_t"] {
        let sql = format!(
            "DELETE FROM {} WHERE batch_id IN ({finished})",
            D::table(schema, table)
        );
        D::execute(pool, &sql, &[Arg::Time(before)]).await?;
    }
    let sql = format!("DELETE FROM {b} WHERE batch_finished_at_ts < $1");
    D::execute(pool, &sql, &[Arg::Time(before)]).await
}
