//! MySQL / MariaDB: the control calls of `Client`. Each locks the rows it changes
//! (`FOR UPDATE`) in a transaction, so it and a worker's finalization of the same job
//! meet on the row lock: the second sees what the first did.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use sqlx::{Connection as _, MySql, MySqlPool, QueryBuilder};
use uuid::Uuid;

use super::super::driver::Control;
use super::worker_rows::delete_job_stats;
use super::{dt, push_ids, ts, BEGIN};
use crate::bus::wake;
use crate::error::Result;
use crate::model::status::{CANCELLED, ERROR, FATAL, FAULTED, UNPROCESSED};
use crate::model::{JobFilter, QueueState};
use crate::store::{CancelledRun, NewJob, Schema};

/// A live job as a cancel reads it.
#[derive(sqlx::FromRow)]
struct Live {
    task_lock_handle_id: i64,
    task_id: Uuid,
    task_type: String,
    task_source: String,
    task_queue: String,
    task_priority: i32,
    task_posted_at_ts: DateTime<Utc>,
    task_tenant: Option<String>,
    task_correlation_id: Option<String>,
    task_metadata: Option<String>,
    task_payload: Option<String>,
    task_max_attempts: i32,
    task_timeout_ms: Option<i64>,
    task_unique_key: Option<String>,
    task_unique_mode: Option<i16>,
    task_attempt: i32,
    task_locked_by: Option<String>,
    task_locked_until_ts: DateTime<Utc>,
    task_claimed_at_ts: Option<DateTime<Utc>>,
    task_lost_attempts: Option<String>,
    task_dependants: bool,
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
    let mut conn = pool.acquire().await?;
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
) -> Result<Vec<Uuid>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let q = schema.flat_table("tasks_queue_t");
    let r = schema.flat_table("task_results_t");
    let mut conn = pool.acquire().await?;
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
            task_correlation_id, task_metadata, task_unique_key, task_unique_mode, task_timeout_ms)
         SELECT task_id, task_type, task_source, task_payload, task_priority, task_posted_at_ts, "
    ));
    query
        .push_bind(dt(now))
        .push(format!(
            ", task_queue, JSON_LENGTH(task_errors),
                JSON_LENGTH(task_errors) + coalesce(task_max_attempts, {}), 1, task_tenant, task_correlation_id,
                task_metadata, CASE WHEN task_unique_mode IS NOT NULL THEN task_unique_key END, task_unique_mode,
                task_timeout_ms
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
             WHERE task_id IN (SELECT task_id FROM {} d) AND ",
            schema.flat_table("task_deps_t")
        ));
        push_ids(&mut query, "task_id", &back);
        query.build().execute(&mut *tx).await?;
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

    /// Puts the fatal or cancelled jobs among `ids` back in the queue (as on PostgreSQL);
    /// the ids put back.
    async fn retry(&self, schema: &Schema, ids: &[Uuid], now: DateTime<Utc>) -> Result<Vec<Uuid>> {
        let pool = self;
        again_on_conflict!(retry_once(pool, schema, ids, now))
    }

    /// Moves a waiting job's not-before time; false when it is not waiting, or waits on
    /// other jobs.
    async fn reschedule(&self, schema: &Schema, id: Uuid, at: DateTime<Utc>) -> Result<bool> {
        let pool = self;
        // Matched rows, not changed ones: a job due already at `at` counts.
        let mut conn = pool.acquire().await?;
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
                "UPDATE {} SET task_locked_until_ts = ? WHERE task_lock_handle_id = ?",
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

    /// Pauses or resumes a queue; whether that changed its state.
    async fn set_paused(
        &self,
        schema: &Schema,
        queue: &str,
        paused: bool,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let pool = self;
        let t = schema.flat_table("queues_t");
        let changed = if paused {
            // A row that runs is paused; else a new row is (a paused row stays as it is).
            let updated = sqlx::query(&format!(
                "UPDATE {t} SET queue_paused_at_ts = ?, queue_updated_at_ts = ?
                 WHERE queue_name = ? AND queue_paused_at_ts IS NULL"
            ))
            .bind(dt(now))
            .bind(dt(now))
            .bind(queue)
            .execute(pool)
            .await?
            .rows_affected();
            if updated > 0 {
                updated
            } else {
                sqlx::query(&format!(
                    "INSERT IGNORE INTO {t} (queue_name, queue_paused_at_ts, queue_updated_at_ts) VALUES (?, ?, ?)"
                ))
                .bind(queue)
                .bind(dt(now))
                .bind(dt(now))
                .execute(pool)
                .await?
                .rows_affected()
            }
        } else {
            sqlx::query(&format!(
                "UPDATE {t} SET queue_paused_at_ts = NULL, queue_updated_at_ts = ?
                 WHERE queue_name = ? AND queue_paused_at_ts IS NOT NULL"
            ))
            .bind(dt(now))
            .bind(queue)
            .execute(pool)
            .await?
            .rows_affected()
        };
        if changed > 0 {
            crate::bus::pauses_changed();
        }
        if changed > 0 && !paused {
            wake();
        }
        Ok(changed > 0)
    }

    /// Sets or (with `None`) removes a queue's concurrency limit across workers.
    async fn set_global_limit(
        &self,
        schema: &Schema,
        queue: &str,
        limit: Option<i32>,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let pool = self;
        let t = schema.flat_table("queues_t");
        let sql = if limit.is_some() {
            format!(
                "INSERT INTO {t} (queue_name, queue_global_limit, queue_updated_at_ts) VALUES (?, ?, ?)
                 ON DUPLICATE KEY UPDATE queue_global_limit = VALUES(queue_global_limit),
                    queue_updated_at_ts = VALUES(queue_updated_at_ts)"
            )
        } else {
            format!("UPDATE {t} SET queue_global_limit = NULL, queue_updated_at_ts = ? WHERE queue_name = ?")
        };
        let query = sqlx::query(&sql);
        let query = if limit.is_some() {
            query.bind(queue).bind(limit).bind(dt(now))
        } else {
            query.bind(dt(now)).bind(queue)
        };
        query.execute(pool).await?;
        crate::bus::pauses_changed();
        Ok(())
    }

    /// Live jobs per queue and state, with each queue's pause.
    async fn queue_states(&self, schema: &Schema, now: DateTime<Utc>) -> Result<Vec<QueueState>> {
        let pool = self;
        let live: Vec<(String, i64, i64, i64, i64)> = sqlx::query_as(&format!(
            "SELECT CAST(task_queue AS CHAR),
                count(CASE WHEN task_locked_by IS NULL AND task_locked_until_ts <= ? THEN 1 END),
                count(CASE WHEN task_locked_by IS NULL AND task_locked_until_ts > ?
                    AND coalesce(task_waiting_on, 0) = 0 THEN 1 END),
                count(CASE WHEN task_locked_by IS NOT NULL AND task_locked_until_ts > ? THEN 1 END),
                count(CASE WHEN task_waiting_on > 0 THEN 1 END)
             FROM {} GROUP BY task_queue",
            schema.flat_table("tasks_queue_t")
        ))
        .bind(dt(now))
        .bind(dt(now))
        .bind(dt(now))
        .fetch_all(pool)
        .await?;
        let controlled = sqlx::query_as(&format!(
            "SELECT CAST(queue_name AS CHAR), queue_paused_at_ts, CAST(queue_global_limit AS SIGNED) FROM {}",
            schema.flat_table("queues_t")
        ))
        .fetch_all(pool)
        .await?;
        Ok(crate::store::merge_queue_states(live, controlled))
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
        let pool = self;
        let table = if live {
            schema.flat_table("tasks_queue_t")
        } else {
            schema.flat_table("task_results_t")
        };
        let mut query =
            QueryBuilder::<MySql>::new(format!("SELECT task_id FROM {table} WHERE true"));
        if let Some(after) = after {
            query.push(" AND task_id > ").push_bind(after);
        }
        for (column, value) in [
            ("task_queue", &filter.queue),
            ("task_type", &filter.task_type),
            ("task_tenant", &filter.tenant),
            ("task_correlation_id", &filter.correlation_id),
        ] {
            if let Some(value) = value {
                query
                    .push(format!(" AND {column} = "))
                    .push_bind(value.clone());
            }
        }
        if live {
            match filter.running() {
                Some(true) => query.push(" AND task_locked_by IS NOT NULL"),
                Some(false) => query.push(" AND task_locked_by IS NULL"),
                None => &mut query,
            };
            query.push(filter.pending_clause());
        } else {
            match filter.status {
                Some(s) => query.push(" AND task_status = ").push_bind(s as i32),
                None => query.push(format!(" AND task_status IN ({FATAL}, {CANCELLED})")),
            };
        }
        query.push(" ORDER BY task_id LIMIT ").push_bind(limit);
        Ok(query.build_query_scalar().fetch_all(pool).await?)
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
        let pool = self;
        let column = crate::store::listing::group_column(by);
        let live = sqlx::query_as(&format!(
            "SELECT CAST({column} AS CHAR),
                count(CASE WHEN task_locked_by IS NULL AND task_attempt = 0 AND task_locked_until_ts <= ? THEN 1 END),
                count(CASE WHEN task_locked_by IS NULL AND task_attempt = 0 AND task_locked_until_ts > ?
                    AND coalesce(task_waiting_on, 0) = 0 THEN 1 END),
                count(CASE WHEN task_locked_by IS NULL AND task_attempt > 0 THEN 1 END),
                count(CASE WHEN task_locked_by IS NOT NULL THEN 1 END),
                count(CASE WHEN task_waiting_on > 0 THEN 1 END)
             FROM {} GROUP BY {column}",
            schema.flat_table("tasks_queue_t")
        ))
        .bind(dt(now))
        .bind(dt(now))
        .fetch_all(pool)
        .await?;
        let ended = sqlx::query_as(&format!(
            "SELECT CAST({column} AS CHAR), count(CASE WHEN task_status = {FATAL} THEN 1 END),
                count(CASE WHEN task_status = {CANCELLED} THEN 1 END)
             FROM {} WHERE task_status IN ({FATAL}, {CANCELLED}) GROUP BY {column}",
            schema.flat_table("task_results_t")
        ))
        .fetch_all(pool)
        .await?;
        Ok(crate::store::listing::merge_group_counts(live, ended))
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
                    NULL AS task_last_error_type, NULL AS task_last_error_message
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
    ) -> Result<Vec<crate::model::ErrorGroup>> {
        let pool = self;
        Ok(sqlx::query_as(&format!(
            "SELECT task_last_error_type AS kind, task_last_error_message AS message, count(*) AS jobs,
                min(task_last_processing_attempted_at_ts) AS first_seen,
                max(task_last_processing_attempted_at_ts) AS last_seen, max(task_id) AS sample
             FROM {} WHERE task_status IN ({ERROR}, {FAULTED}, {FATAL}) AND task_last_processing_attempted_at_ts >= ?
             GROUP BY task_last_error_type, task_last_error_message
             ORDER BY jobs DESC, last_seen DESC LIMIT ?",
            schema.flat_table("task_results_t")
        ))
        .bind(dt(since))
        .bind(limit)
        .fetch_all(pool)
        .await?)
    }

    /// The workers' rows with the jobs each holds (`Client::workers`).
    async fn workers(
        &self,
        schema: &Schema,
        now: DateTime<Utc>,
    ) -> Result<Vec<crate::model::WorkerInfo>> {
        let pool = self;
        let rows = sqlx::query_as(&format!("SELECT * FROM {}", schema.flat_table("workers_t")))
            .fetch_all(pool)
            .await?;
        let running = sqlx::query_as(&format!(
            "SELECT CAST(task_locked_by AS CHAR), count(*) FROM {}
             WHERE task_locked_by IS NOT NULL AND task_locked_until_ts > ? GROUP BY task_locked_by",
            schema.flat_table("tasks_queue_t")
        ))
        .bind(dt(now))
        .fetch_all(pool)
        .await?;
        Ok(crate::store::listing::workers_of(rows, running, now))
    }

    /// The stored run counts per minute since `since` (`Client::throughput`).
    async fn job_stats(
        &self,
        schema: &Schema,
        since: DateTime<Utc>,
        task_type: Option<&str>,
    ) -> Result<Vec<crate::model::StatRow>> {
        let pool = self;
        let filter = if task_type.is_some() {
            " AND task_type = ?"
        } else {
            ""
        };
        let sql = format!(
            "SELECT stat_minute_ts, CAST(task_type AS CHAR), stat_processed, stat_failed, stat_run_ms, stat_histogram
             FROM {} WHERE stat_minute_ts >= ?{filter} ORDER BY stat_minute_ts",
            schema.flat_table("job_stats_t")
        );
        let query = sqlx::query_as(&sql).bind(dt(since));
        let query = match task_type {
            Some(t) => query.bind(t),
            None => query,
        };
        Ok(query.fetch_all(pool).await?)
    }
}
