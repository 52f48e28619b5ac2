//! SQLite: the control calls of `Client`. Each runs in a `BEGIN IMMEDIATE` transaction,
//! so it and a worker's finalization of the same job take the write lock one after the
//! other: the second sees what the first did.

use chrono::{DateTime, Utc};
use sqlx::{Connection as _, SqlitePool};
use uuid::Uuid;

use super::super::driver::Control;
use super::{id_list, ts};
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
    task_id: Uuid = "task_id",
    task_type: String = "task_type",
    task_source: String = "task_source",
    task_queue: String = "task_queue",
    task_priority: i32 = "task_priority",
    task_posted_at_ts: String = "task_posted_at_ts",
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
    task_locked_until_ts: String = "task_locked_until_ts",
    task_claimed_at_ts: Option<String> = "task_claimed_at_ts",
    task_lost_attempts: Option<String> = "task_lost_attempts",
    task_dependants: bool = "task_dependants",
}
}

/// The JSON path of one object key, quoted (`$."a.b"`), so the key is data.
fn json_path(key: &str) -> String {
    format!("$.{}", serde_json::Value::String(key.to_owned()))
}

impl Control for SqlitePool {
    /// Cancels the live jobs among `ids` (as on PostgreSQL); the ids cancelled, and whether
    /// each was running.
    async fn cancel(
        &self,
        schema: &Schema,
        ids: &[Uuid],
        now: DateTime<Utc>,
    ) -> Result<Vec<(Uuid, bool)>> {
        let pool = self;
        let q = schema.flat_table("tasks_queue_t");
        let r = schema.flat_table("task_results_t");
        let now_text = ts(now);
        let mut conn = pool.acquire().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let mut done = Vec::new();
        let mut roots = Vec::new();
        for &id in ids {
            let Some(live): Option<Live> =
                sqlx::query_as(&format!("DELETE FROM {q} WHERE task_id = $1 RETURNING *"))
                    .bind(id)
                    .fetch_optional(&mut *tx)
                    .await?
            else {
                continue;
            };
            let run = CancelledRun {
                lost: live.task_lost_attempts.as_deref(),
                holder: live.task_locked_by.as_deref(),
                attempt: live.task_attempt,
                started_at: live.task_claimed_at_ts.clone(),
                lease_valid: live.task_locked_until_ts > now_text,
            };
            let (attempts, running, failed) = run.attempts(&now_text);
            let first = attempts
                .first()
                .and_then(|a| a.get("started_at"))
                .and_then(|s| s.as_str())
                .map(str::to_owned)
                .or_else(|| live.task_claimed_at_ts.clone());
            let all = super::errors_with(&mut tx, schema, id, attempts).await?;
            sqlx::query(&format!(
                "INSERT INTO {r} (task_id, task_type, task_source, task_queue, task_priority, task_posted_at_ts,
                    task_tenant, task_correlation_id, task_metadata, task_status, task_error_count,
                    task_processing_finalized_at_ts, task_payload, task_max_attempts, task_timeout_ms, task_errors,
                    task_last_locked_by, task_unique_key, task_unique_mode, task_first_processing_attempted_at_ts,
                    task_last_processing_attempted_at_ts, task_last_error_type, task_last_error_message, task_last_error)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 7, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20,
                    'cancelled', 'cancelled by an operator', 'cancelled: cancelled by an operator')
                 ON CONFLICT (task_id) DO UPDATE SET task_status = {CANCELLED},
                    task_error_count = task_error_count + excluded.task_error_count,
                    task_processing_finalized_at_ts = excluded.task_processing_finalized_at_ts,
                    task_payload = excluded.task_payload,
                    task_metadata = excluded.task_metadata,
                    task_max_attempts = excluded.task_max_attempts,
                    task_timeout_ms = excluded.task_timeout_ms,
                    task_errors = excluded.task_errors,
                    task_last_locked_by = coalesce(excluded.task_last_locked_by, task_last_locked_by),
                    task_first_processing_attempted_at_ts =
                        coalesce(task_first_processing_attempted_at_ts, excluded.task_first_processing_attempted_at_ts),
                    task_last_processing_attempted_at_ts =
                        coalesce(excluded.task_last_processing_attempted_at_ts, task_last_processing_attempted_at_ts),
                    task_last_error_type = excluded.task_last_error_type,
                    task_last_error_message = excluded.task_last_error_message,
                    task_last_error = excluded.task_last_error"
            ))
            .bind(id)
            .bind(&live.task_type)
            .bind(&live.task_source)
            .bind(&live.task_queue)
            .bind(live.task_priority)
            .bind(&live.task_posted_at_ts)
            .bind(&live.task_tenant)
            .bind(&live.task_correlation_id)
            .bind(&live.task_metadata)
            .bind(failed)
            .bind(&now_text)
            .bind(&live.task_payload)
            .bind(live.task_max_attempts)
            .bind(live.task_timeout_ms)
            .bind(all)
            .bind(&live.task_locked_by)
            .bind(&live.task_unique_key)
            .bind(live.task_unique_mode)
            .bind(first)
            .bind(&live.task_claimed_at_ts)
            .execute(&mut *tx)
            .await?;
            done.push((live.task_id, running));
            if live.task_dependants {
                // The jobs waiting on it are cancelled with it, naming it.
                let message = crate::store::dependency_message(
                    id,
                    &live.task_type,
                    true,
                    "cancelled by an operator",
                );
                roots.push((id, message));
            }
        }
        super::flow::propagate(&mut tx, schema, roots, true, now).await?;
        tx.commit().await?;
        Ok(done)
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
        let q = schema.flat_table("tasks_queue_t");
        let r = schema.flat_table("task_results_t");
        let d = schema.flat_table("task_deps_t");
        let m = schema.flat_table("batch_jobs_t");
        let mut conn = pool.acquire().await?;
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let back: Vec<Uuid> = sqlx::query_scalar(&format!(
            "INSERT INTO {q} (task_id, task_type, task_source, task_payload, task_priority, task_posted_at_ts,
                task_locked_until_ts, task_queue, task_attempt, task_max_attempts, task_has_result, task_tenant,
                task_correlation_id, task_metadata, task_unique_key, task_unique_mode, task_timeout_ms,
                task_dependants)
             SELECT task_id, task_type, task_source, task_payload, task_priority, task_posted_at_ts, $2, task_queue,
                json_array_length(task_errors), json_array_length(task_errors) + coalesce(task_max_attempts, {}),
                1, task_tenant, task_correlation_id, task_metadata,
                CASE WHEN task_unique_mode IS NOT NULL THEN task_unique_key END, task_unique_mode, task_timeout_ms,
                -- Its success settles the jobs that waited on it (`flow::settle`), and
                -- moves its batch's count (`store::batch`).
                EXISTS (SELECT 1 FROM {d} a WHERE a.dep_task_id = {r}.task_id)
                    OR EXISTS (SELECT 1 FROM {m} b WHERE b.task_id = {r}.task_id)
             FROM {r}
             WHERE task_id IN (SELECT unhex(value) FROM json_each($1)) AND task_status IN ({FATAL}, {CANCELLED})
                AND task_payload IS NOT NULL
             ORDER BY task_id
             ON CONFLICT DO NOTHING
             RETURNING task_id",
            crate::DEFAULT_MAX_ATTEMPTS
        ))
        .bind(id_list(ids))
        .bind(ts(now))
        .fetch_all(&mut *tx)
        .await?;
        sqlx::query(&format!(
            "UPDATE {r} SET task_status = {UNPROCESSED}, task_processing_finalized_at_ts = NULL, task_payload = NULL
             WHERE task_id IN (SELECT unhex(value) FROM json_each($1))"
        ))
        .bind(id_list(&back))
        .execute(&mut *tx)
        .await?;
        // A job that waited on others runs again with their outputs (migration 4).
        sqlx::query(&format!(
            "UPDATE {q} SET task_waiting_on = 0
             WHERE task_id IN (SELECT unhex(value) FROM json_each($1))
                AND EXISTS (SELECT 1 FROM {d} d WHERE d.task_id = {q}.task_id)"
        ))
        .bind(id_list(&back))
        .execute(&mut *tx)
        .await?;
        super::flow::tally(&mut tx, schema, &back, UNPROCESSED, now).await?;
        if heal && !back.is_empty() {
            super::flow::revive(&mut tx, schema, back.clone(), now).await?;
        }
        tx.commit().await?;
        if !back.is_empty() {
            wake();
        }
        Ok(back)
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
        let changed = sqlx::query(&format!(
            "UPDATE {} SET task_locked_until_ts = $2, task_version = task_version + 1
             WHERE task_id = $1 AND task_locked_by IS NULL AND coalesce(task_waiting_on, 0) = 0",
            schema.flat_table("tasks_queue_t")
        ))
        .bind(id)
        .bind(ts(at))
        .execute(pool)
        .await?
        .rows_affected();
        if changed > 0 {
            wake();
        }
        Ok(changed > 0)
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
        super::enqueue_one(pool, schema, job, now).await?;
        Ok(())
    }

    /// `Client::prune`: what the workers' retention deletes, with `before` as its cutoff.
    async fn prune(&self, schema: &Schema, before: DateTime<Utc>) -> Result<crate::model::Pruned> {
        let pool = self;
        let results = schema.flat_table("task_results_t");
        let statement = format!(
            "DELETE FROM {results} WHERE task_id IN (
                SELECT task_id FROM {results}
                WHERE task_processing_finalized_at_ts IS NOT NULL AND task_processing_finalized_at_ts < $1
                  AND task_id NOT IN (SELECT task_id FROM {})
                LIMIT 1000)",
            schema.flat_table("tasks_queue_t")
        );
        let mut rows = 0;
        loop {
            // A statement at a time: workers' claims go between them.
            let n = sqlx::query(&statement)
                .bind(ts(before))
                .execute(pool)
                .await?
                .rows_affected();
            rows += n;
            if n < 1000 {
                break;
            }
        }
        crate::store::batch::delete_finished(pool, schema, before).await?;
        crate::store::workflows::forget_pruned(pool, schema).await?;
        Ok(crate::model::Pruned {
            rows,
            partitions: Vec::new(),
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
        let now = ts(now);
        let (q, r) = (
            schema.flat_table("tasks_queue_t"),
            schema.flat_table("task_results_t"),
        );
        // As on PostgreSQL: the jobs with a results row, and those waiting for their first
        // outcome without one, whose `r` the queue row stands in for.
        let mut query = sqlx::QueryBuilder::<sqlx::Sqlite>::new("SELECT * FROM (");
        let branches = [
            format!("{r} r LEFT JOIN {q} q ON q.task_id = r.task_id WHERE true"),
            format!(
                "(SELECT task_id, task_type, task_queue, {UNPROCESSED} AS task_status, task_priority, task_tenant,
                    task_correlation_id, task_metadata, task_posted_at_ts,
                    NULL AS task_processing_finalized_at_ts,
                    json_array_length(coalesce(task_lost_attempts, '[]')) AS task_error_count,
                    NULL AS task_last_error_type, NULL AS task_last_error_message, NULL AS task_last_error
                  FROM {q} WHERE NOT task_has_result) r
                 JOIN {q} q ON q.task_id = r.task_id
                 WHERE NOT EXISTS (SELECT 1 FROM {r} x WHERE x.task_id = r.task_id)"
            ),
        ];
        crate::store::listing::push_job_list!(
            query,
            branches,
            str::to_owned,
            filter,
            after,
            limit,
            now,
            |query, key, value| {
                // Seed 002's keys (text) as their indexes name them (migration 7).
                if let Some(key) = crate::model::seed_002_key(&key) {
                    query.push(format!(
                        " AND {} = ",
                        <sqlx::Sqlite as crate::store::dialect::Dialect>::metadata_key("r.", key)
                    ));
                } else {
                    // As text, as PostgreSQL's `->>` gives it (booleans as true/false).
                    let path = json_path(&key);
                    query
                        .push(" AND CASE json_type(r.task_metadata, ")
                        .push_bind(path.clone())
                        .push(") WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' ELSE CAST(json_extract(r.task_metadata, ")
                        .push_bind(path)
                        .push(") AS TEXT) END = ");
                }
                query.push_bind(value);
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
        crate::store::batch::records::<sqlx::Sqlite>(self, schema, ids, limit).await
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
        crate::store::batch::job_ids::<sqlx::Sqlite>(self, schema, id, status, after, limit).await
    }
}
