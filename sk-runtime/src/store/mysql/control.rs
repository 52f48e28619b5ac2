//! MySQL / MariaDB: the control calls of `Client`. Each locks the rows it changes
//! (`FOR UPDATE`) in a transaction, so it and a worker's finalization of the same job
//! meet on the row lock: the second sees what the first did.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use sqlx::{Connection as _, MySql, MySqlPool, QueryBuilder};
use uuid::Uuid;

use super::super::driver::Control;
use super::{dt, push_ids, ts, BEGIN};
use crate::bus::wake;
use crate::error::Result;
use crate::model::from_row;
use crate::model::status::{CANCELLED, FATAL, UNPROCESSED};
use crate::model::{JobFilter, QueueState, TenantState};
use crate::store::queries;
use crate::store::worker_rows::delete_job_stats;
use crate::store::{CancelledRun, NewJob, Schema};

from_row! {
/// A live job as a cancel reads it.
struct Live {
    task_lock_handle_id: i64 = "task_lock_handle_id",
    task_id: Uuid = "task_id",
    task_type: String = "task_type",
    task_source: String = "task_source",
    task_queue: String = "task_queue",
    task_priority: i32 = "task_priority",
    task_posted_at_ts: DateTime<Utc> = "task_posted_at_ts",
    task_tenant: Option<String> = "task_tenant",
    task_correlation_id: Option<String> = "task_correlation_id",
    task_metadata: Option<String> = "task_metadata",
    task_payload: Option<String> = "task_payload",
    task_max_attempts: i32 = "task_max_attempts",
    task_timeout_ms: Option<i64> = "task_timeout_ms",
    task_unique_key: Option<String> = "task_unique_key",
    task_unique_mode: Option<i16> = "task_unique_mode",
    task_attempt: i32 = "task_attempt",
    task_locked_by: Option<String> = "task_locked_by",
    task_locked_until_ts: DateTime<Utc> = "task_locked_until_ts",
    task_claimed_at_ts: Option<DateTime<Utc>> = "task_claimed_at_ts",
    task_lost_attempts: Option<String> = "task_lost_attempts",
    task_dependants: bool = "task_dependants",
}
}

/// Runs `$call` again while InnoDB picks it as a deadlock victim or a lock wait runs out
/// (a worker finalizing the same jobs).
macro_rules! again_on_conflict {
    ($call:expr) => {{
        let mut tries = 0;
        loop {
            match $call.await {
                Err(e) if super::conflict(&e) && tries < 5 => tries += 1,
                done => break done,
            }
        }
    }};
}

async fn cancel_once(
    pool: &MySqlPool,
    schema: &Schema,
    ids: &[Uuid],
    now: DateTime<Utc>,
) -> Result<Vec<(Uuid, bool)>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let q = schema.flat_table("tasks_queue_t");
    let r = schema.flat_table("task_results_t");
    let now_text = ts(now);
    let mut conn = crate::store::bound::Guarded::new(pool.acquire().await?);
    let mut tx = conn.begin_with(BEGIN).await?;
    let mut query = QueryBuilder::<MySql>::new(format!(
        "SELECT task_lock_handle_id, task_id, CAST(task_type AS CHAR) AS task_type, task_source,
            CAST(task_queue AS CHAR) AS task_queue, task_priority, task_posted_at_ts,
            CAST(task_tenant AS CHAR) AS task_tenant, CAST(task_correlation_id AS CHAR) AS task_correlation_id,
            task_metadata, task_payload, task_max_attempts, task_timeout_ms,
            CAST(task_unique_key AS CHAR) AS task_unique_key, task_unique_mode, task_attempt, task_locked_by,
            task_locked_until_ts, task_claimed_at_ts, task_lost_attempts, task_dependants
         FROM {q} WHERE "
    ));
    push_ids(&mut query, "task_id", ids);
    query.push(" ORDER BY task_id FOR UPDATE");
    let rows: Vec<Live> = query.build_query_as().fetch_all(&mut *tx).await?;
    let mut done = Vec::with_capacity(rows.len());
    let mut roots = Vec::new();
    for live in rows {
        sqlx::query(&format!("DELETE FROM {q} WHERE task_lock_handle_id = ?"))
            .bind(live.task_lock_handle_id)
            .execute(&mut *tx)
            .await?;
        let run = CancelledRun {
            lost: live.task_lost_attempts.as_deref(),
            holder: live.task_locked_by.as_deref(),
            attempt: live.task_attempt,
            started_at: live.task_claimed_at_ts.map(ts),
            lease_valid: live.task_locked_until_ts > now,
        };
        let (attempts, running, failed) = run.attempts(&now_text);
        let first = attempts
            .first()
            .and_then(|a| a.get("started_at"))
            .and_then(|s| s.as_str())
            .and_then(|s| s.parse::<DateTime<Utc>>().ok())
            .or(live.task_claimed_at_ts);
        let all = super::errors_with(&mut tx, schema, live.task_id, attempts).await?;
        sqlx::query(&format!(
            "INSERT INTO {r} (task_id, task_type, task_source, task_queue, task_priority, task_posted_at_ts,
                task_tenant, task_correlation_id, task_metadata, task_status, task_error_count,
                task_processing_finalized_at_ts, task_payload, task_max_attempts, task_timeout_ms, task_errors,
                task_last_locked_by, task_unique_key, task_unique_mode, task_first_processing_attempted_at_ts,
                task_last_processing_attempted_at_ts, task_last_error_type, task_last_error_message, task_last_error)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 7, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
                'cancelled', 'cancelled by an operator', 'cancelled: cancelled by an operator')
             ON DUPLICATE KEY UPDATE task_status = {CANCELLED},
                task_error_count = task_error_count + VALUES(task_error_count),
                task_processing_finalized_at_ts = VALUES(task_processing_finalized_at_ts),
                task_payload = VALUES(task_payload),
                task_metadata = VALUES(task_metadata),
                task_max_attempts = VALUES(task_max_attempts),
                task_timeout_ms = VALUES(task_timeout_ms),
                task_errors = VALUES(task_errors),
                task_last_locked_by = coalesce(VALUES(task_last_locked_by), task_last_locked_by),
                task_first_processing_attempted_at_ts =
                    coalesce(task_first_processing_attempted_at_ts, VALUES(task_first_processing_attempted_at_ts)),
                task_last_processing_attempted_at_ts =
                    coalesce(VALUES(task_last_processing_attempted_at_ts), task_last_processing_attempted_at_ts),
                task_last_error_type = VALUES(task_last_error_type),
                task_last_error_message = VALUES(task_last_error_message),
                task_last_error = VALUES(task_last_error)"
        ))
        .bind(live.task_id)
        .bind(&live.task_type)
        .bind(&live.task_source)
        .bind(&live.task_queue)
        .bind(live.task_priority)
        .bind(dt(live.task_posted_at_ts))
        .bind(&live.task_tenant)
        .bind(&live.task_correlation_id)
        .bind(&live.task_metadata)
        .bind(failed)
        .bind(dt(now))
        .bind(&live.task_payload)
        .bind(live.task_max_attempts)
        .bind(live.task_timeout_ms)
        .bind(all)
        .bind(&live.task_locked_by)
        .bind(&live.task_unique_key)
        .bind(live.task_unique_mode)
        .bind(dt(first))
        .bind(dt(live.task_claimed_at_ts))
        .execute(&mut *tx)
        .await?;
        done.push((live.task_id, running));
        if live.task_dependants {
            // The jobs waiting on it are cancelled with it, naming it.
            let message = crate::store::dependency_message(
                live.task_id,
                &live.task_type,
                true,
                "cancelled by an operator",
            );
            roots.push((live.task_id, message));
        }
    }
    super::flow::propagate(&mut tx, schema, roots, true, now).await?;
    tx.commit().await?;
    Ok(done)
}

async fn retry_once(
    pool: &MySqlPool,
    schema: &Schema,
    ids: &[Uuid],
    now: DateTime<Utc>,
    heal: bool,
) -> Result<Vec<Uuid>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let q = schema.flat_table("tasks_queue_t");
    let r = schema.flat_table("task_results_t");
    let d = schema.flat_table("task_deps_t");
    let m = schema.flat_table("batch_jobs_t");
    let mut conn = crate::store::bound::Guarded::new(pool.acquire().await?);
    let mut tx = conn.begin_with(BEGIN).await?;
    let mut query = QueryBuilder::<MySql>::new(format!(
        "SELECT task_id FROM {r} WHERE task_status IN ({FATAL}, {CANCELLED}) AND task_payload IS NOT NULL AND "
    ));
    push_ids(&mut query, "task_id", ids);
    query.push(" ORDER BY task_id FOR UPDATE");
    let candidates: Vec<Uuid> = query.build_query_scalar().fetch_all(&mut *tx).await?;
    if candidates.is_empty() {
        tx.commit().await?;
        return Ok(Vec::new());
    }
    // A job whose unique key another live job holds is skipped; a fatal or cancelled job
    // has no queue row, so the candidates in the queue now are the ones put back.
    let mut query = QueryBuilder::<MySql>::new(format!(
        "SELECT CAST(task_unique_key AS CHAR), task_id FROM {r}
         WHERE task_unique_mode IS NOT NULL AND task_unique_key IS NOT NULL AND "
    ));
    push_ids(&mut query, "task_id", &candidates);
    let keyed: Vec<(String, Uuid)> = query.build_query_as().fetch_all(&mut *tx).await?;
    let wanted: Vec<(&str, Uuid)> = keyed.iter().map(|(k, id)| (k.as_str(), *id)).collect();
    let held = super::take_keys(&mut tx, schema, &wanted).await?;
    let refused: HashSet<Uuid> = wanted
        .iter()
        .zip(held)
        .filter(|((_, own), holder)| holder != own)
        .map(|((_, own), _)| *own)
        .collect();
    let candidates: Vec<Uuid> = candidates
        .into_iter()
        .filter(|id| !refused.contains(id))
        .collect();
    if candidates.is_empty() {
        tx.commit().await?;
        return Ok(Vec::new());
    }
    let mut query = QueryBuilder::<MySql>::new(format!(
        "INSERT IGNORE INTO {q} (task_id, task_type, task_source, task_payload, task_priority, task_posted_at_ts,
            task_locked_until_ts, task_queue, task_attempt, task_max_attempts, task_has_result, task_tenant,
            task_correlation_id, task_metadata, task_unique_key, task_unique_mode, task_timeout_ms,
            task_dependants)
         SELECT task_id, task_type, task_source, task_payload, task_priority, task_posted_at_ts, "
    ));
    query
        .push_bind(dt(now))
        .push(format!(
            ", task_queue, JSON_LENGTH(task_errors),
                JSON_LENGTH(task_errors) + coalesce(task_max_attempts, {}), 1, task_tenant, task_correlation_id,
                task_metadata, CASE WHEN task_unique_mode IS NOT NULL THEN task_unique_key END, task_unique_mode,
                task_timeout_ms,
                -- Its success settles the jobs that waited on it (`flow::settle`), and
                -- moves its batch's count (`store::batch`).
                EXISTS (SELECT 1 FROM {d} a WHERE a.dep_task_id = {r}.task_id)
                    OR EXISTS (SELECT 1 FROM {m} b WHERE b.task_id = {r}.task_id)
             FROM {r} WHERE ",
            crate::DEFAULT_MAX_ATTEMPTS
        ));
    push_ids(&mut query, "task_id", &candidates);
    query.push(" ORDER BY task_id");
    query.build().execute(&mut *tx).await?;
    let mut query = QueryBuilder::<MySql>::new(format!("SELECT task_id FROM {q} WHERE "));
    push_ids(&mut query, "task_id", &candidates);
    query.push(" ORDER BY task_id");
    let back: Vec<Uuid> = query.build_query_scalar().fetch_all(&mut *tx).await?;
    if !back.is_empty() {
        let mut query = QueryBuilder::<MySql>::new(format!(
            "UPDATE {r} SET task_status = {UNPROCESSED}, task_processing_finalized_at_ts = NULL, task_payload = NULL WHERE "
        ));
        push_ids(&mut query, "task_id", &back);
        query.build().execute(&mut *tx).await?;
        // A job that waited on others runs again with their outputs (migration 4).
        let mut query = QueryBuilder::<MySql>::new(format!(
            "UPDATE {q} SET task_waiting_on = 0
             WHERE task_id IN (SELECT task_id FROM {d} d) AND "
        ));
        push_ids(&mut query, "task_id", &back);
        query.build().execute(&mut *tx).await?;
        super::flow::tally(&mut tx, schema, &back, UNPROCESSED, now).await?;
        if heal {
            super::flow::revive(&mut tx, schema, back.clone(), now).await?;
        }
    }
    tx.commit().await?;
    if !back.is_empty() {
        wake();
    }
    Ok(back)
}

impl Control for MySqlPool {
    /// Cancels the live jobs among `ids` (as on PostgreSQL); the ids cancelled, and whether
    /// each was running.
    async fn cancel(
        &self,
        schema: &Schema,
        ids: &[Uuid],
        now: DateTime<Utc>,
    ) -> Result<Vec<(Uuid, bool)>> {
        let pool = self;
        again_on_conflict!(cancel_once(pool, schema, ids, now))
    }

    /// Puts the fatal or cancelled jobs among `ids` back in the queue and, with `heal`,
    /// the jobs they ended (as on PostgreSQL); the ids put back.
    async fn retry(
        &self,
        schema: &Schema,
        ids: &[Uuid],
        now: DateTime<Utc>,
        heal: bool,
    ) -> Result<Vec<Uuid>> {
        let pool = self;
        again_on_conflict!(retry_once(pool, schema, ids, now, heal))
    }

    /// Moves a waiting job's not-before time; false when it is not waiting, or waits on
    /// other jobs.
    async fn reprioritize(&self, schema: &Schema, id: Uuid, priority: i32) -> Result<bool> {
        queries::reprioritize(self, schema, id, priority).await
    }

    /// `Client::run_now_where`: the waiting jobs among `ids` made due at `at`.
    async fn reschedule_many(
        &self,
        schema: &Schema,
        ids: &[Uuid],
        at: DateTime<Utc>,
    ) -> Result<u64> {
        let moved = crate::store::bulk::reschedule(self, schema, ids, at).await?;
        if moved > 0 {
            wake();
        }
        Ok(moved)
    }

    /// `Client::delete_where`: the ended jobs among `ids` deleted.
    async fn delete_ended(&self, schema: &Schema, ids: &[Uuid]) -> Result<u64> {
        crate::store::bulk::delete_ended(self, schema, ids).await
    }

    async fn workflows(
        &self,
        schema: &Schema,
        id: Option<Uuid>,
        limit: i64,
    ) -> Result<Vec<crate::model::WorkflowRecord>> {
        crate::store::workflows::records(self, schema, id, limit).await
    }

    async fn workflow_jobs(
        &self,
        schema: &Schema,
        id: Uuid,
        now: DateTime<Utc>,
    ) -> Result<Vec<crate::model::WorkflowJobRow>> {
        crate::store::workflows::jobs(self, schema, id, now).await
    }

    async fn record_audit(&self, schema: &Schema, entry: &crate::model::AuditEntry) -> Result<()> {
        crate::store::bulk::record(self, schema, entry).await
    }

    async fn audit(
        &self,
        schema: &Schema,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<crate::model::AuditEntry>> {
        crate::store::bulk::entries(self, schema, before, limit).await
    }

    async fn reschedule(&self, schema: &Schema, id: Uuid, at: DateTime<Utc>) -> Result<bool> {
        let pool = self;
        // Matched rows, not changed ones: a job due already at `at` counts.
        let mut conn = crate::store::bound::Guarded::new(pool.acquire().await?);
        let mut tx = conn.begin_with(BEGIN).await?;
        let waiting: Option<i64> = sqlx::query_scalar(&format!(
            "SELECT task_lock_handle_id FROM {} WHERE task_id = ? AND task_locked_by IS NULL
                AND coalesce(task_waiting_on, 0) = 0 FOR UPDATE",
            schema.flat_table("tasks_queue_t")
        ))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(handle) = waiting {
            sqlx::query(&format!(
                "UPDATE {} SET task_locked_until_ts = ?, task_version = task_version + 1 WHERE task_lock_handle_id = ?",
                schema.flat_table("tasks_queue_t")
            ))
            .bind(dt(at))
            .bind(handle)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        if waiting.is_some() {
            wake();
        }
        Ok(waiting.is_some())
    }

    /// Turns a queue's switch (a pause, fair claims) on or off; whether it changed.
    async fn set_queue_flag(
        &self,
        schema: &Schema,
        flag: crate::store::QueueFlag,
        queue: &str,
        on: bool,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let changed = queries::set_queue_flag(self, schema, flag, queue, on, now).await?;
        if changed {
            crate::bus::pauses_changed();
            if flag == crate::store::QueueFlag::Paused && !on {
                wake();
            }
        }
        Ok(changed)
    }

    /// Sets or (with `None`) removes a queue's concurrency limit across workers, of the
    /// whole queue or of each of its tenants.
    async fn set_queue_limit(
        &self,
        schema: &Schema,
        kind: crate::store::QueueLimit,
        queue: &str,
        limit: Option<i32>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        queries::set_queue_limit(self, schema, kind, queue, limit, now).await?;
        crate::bus::pauses_changed();
        Ok(())
    }

    /// Sets or (with `None`) lifts a queue's or a job type's rate limit across workers.
    async fn set_rate_limit(
        &self,
        schema: &Schema,
        scope: &'static str,
        name: &str,
        limit: Option<crate::model::RateLimit>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        crate::store::rates::set(self, schema, scope, name, limit, now).await?;
        crate::bus::pauses_changed();
        Ok(())
    }

    /// Live jobs per queue and state, with each queue's pause.
    async fn queue_states(&self, schema: &Schema, now: DateTime<Utc>) -> Result<Vec<QueueState>> {
        queries::queue_states(self, schema, now).await
    }

    /// A queue's tenants, with what its limits per tenant leave each.
    async fn tenant_states(
        &self,
        schema: &Schema,
        queue: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<TenantState>> {
        crate::store::tenants::states(self, schema, queue, now).await
    }

    /// Up to `limit` ids of the jobs `filter` takes, after `after` in id order (as on
    /// PostgreSQL).
    async fn find_ids(
        &self,
        schema: &Schema,
        filter: &JobFilter,
        live: bool,
        after: Option<Uuid>,
        limit: i64,
    ) -> Result<Vec<Uuid>> {
        queries::find_ids(self, schema, filter, live, after, limit).await
    }

    /// Enqueues one job on the pool (`Client::enqueue_json`).
    async fn post(&self, schema: &Schema, job: NewJob, now: DateTime<Utc>) -> Result<()> {
        let pool = self;
        super::enqueue_one(&mut *pool.acquire().await?, schema, job, now).await?;
        Ok(())
    }

    /// `Client::prune`: what the workers' retention deletes, with `before` as its cutoff.
    async fn prune(&self, schema: &Schema, before: DateTime<Utc>) -> Result<crate::model::Pruned> {
        let pool = self;
        let retired = super::partitions::retire(
            pool,
            schema,
            before,
            None,
            true,
            &tokio_util::sync::CancellationToken::new(),
        )
        .await?;
        crate::store::batch::delete_finished(pool, schema, before).await?;
        crate::store::workflows::forget_pruned(pool, schema).await?;
        Ok(crate::model::Pruned {
            rows: retired.rows,
            partitions: retired.dropped,
            run_counts: delete_job_stats(pool, schema, before).await?,
        })
    }

    /// Jobs by queue, task type or tenant and state (`Client::count_by`).
    async fn count_by(
        &self,
        schema: &Schema,
        by: crate::model::CountBy,
        now: DateTime<Utc>,
    ) -> Result<Vec<crate::model::GroupCounts>> {
        queries::count_by(self, schema, by, now).await
    }

    /// One page of the job list (`Client::jobs`).
    async fn list_jobs(
        &self,
        schema: &Schema,
        filter: &JobFilter,
        after: Option<Uuid>,
        limit: i64,
        now: DateTime<Utc>,
    ) -> Result<Vec<crate::model::JobSummary>> {
        let pool = self;
        let (q, r) = (
            schema.flat_table("tasks_queue_t"),
            schema.flat_table("task_results_t"),
        );
        // As on PostgreSQL: the jobs with a results row, and those waiting for their first
        // outcome without one, whose `r` the queue row stands in for.
        let mut query = QueryBuilder::<MySql>::new("SELECT * FROM (");
        let branches = [
            format!("{r} r LEFT JOIN {q} q ON q.task_id = r.task_id WHERE true"),
            format!(
                "(SELECT task_id, task_type, task_queue, {UNPROCESSED} AS task_status, task_priority, task_tenant,
                    task_correlation_id, task_metadata, task_posted_at_ts,
                    CAST(NULL AS DATETIME(6)) AS task_processing_finalized_at_ts,
                    CAST(coalesce(JSON_LENGTH(task_lost_attempts), 0) AS SIGNED) AS task_error_count,
                    NULL AS task_last_error_type, NULL AS task_last_error_message, NULL AS task_last_error
                  FROM {q} WHERE task_has_result = 0) r
                 JOIN {q} q ON q.task_id = r.task_id
                 WHERE NOT EXISTS (SELECT 1 FROM {r} x WHERE x.task_id = r.task_id)"
            ),
        ];
        crate::store::listing::push_job_list!(
            query,
            branches,
            |column| format!("CAST({column} AS CHAR)"),
            filter,
            after,
            limit,
            dt(now),
            |query, key, value| {
                query
                    .push(" AND JSON_UNQUOTE(JSON_EXTRACT(r.task_metadata, ")
                    .push_bind(format!("$.{}", serde_json::Value::String(key)))
                    .push(")) = ")
                    .push_bind(value);
            }
        );
        Ok(query.build_query_as().fetch_all(pool).await?)
    }

    /// The jobs whose last run failed since `since`, grouped by error (`Client::error_groups`).
    async fn error_groups(
        &self,
        schema: &Schema,
        since: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<crate::model::ErrorRow>> {
        queries::error_groups(self, schema, since, limit).await
    }

    /// The workers' rows with the jobs each holds (`Client::workers`).
    async fn workers(
        &self,
        schema: &Schema,
        now: DateTime<Utc>,
    ) -> Result<Vec<crate::model::WorkerInfo>> {
        queries::workers(self, schema, now).await
    }

    /// The stored run counts per minute since `since` (`Client::throughput`).
    async fn job_stats(
        &self,
        schema: &Schema,
        since: DateTime<Utc>,
        task_type: Option<&str>,
    ) -> Result<Vec<crate::model::StatRow>> {
        queries::job_stats(self, schema, since, task_type).await
    }

    /// Batches by id, or the newest (`Client::batches`).
    async fn batches(
        &self,
        schema: &Schema,
        ids: Option<&[Uuid]>,
        limit: i64,
    ) -> Result<Vec<crate::model::BatchRecord>> {
        crate::store::batch::records::<sqlx::MySql>(self, schema, ids, limit).await
    }

    /// A batch's jobs in a state (`Client::batch_jobs`).
    async fn batch_jobs(
        &self,
        schema: &Schema,
        id: Uuid,
        status: Option<i32>,
        after: Option<Uuid>,
        limit: i64,
    ) -> Result<Vec<Uuid>> {
        crate::store::batch::job_ids::<sqlx::MySql>(self, schema, id, status, after, limit).await
    }
}
