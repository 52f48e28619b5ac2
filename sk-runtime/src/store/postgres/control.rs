//! PostgreSQL: the control calls of `Client` (cancel, retry, reschedule, pause) and the
//! lookups they need. Each is one statement (or one transaction), and takes its rows by
//! primary key, so it meets a worker's finalization of the same job on the row lock: one
//! of the two takes effect.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::pooler::{kept, Held};

use super::super::driver::Control;
use crate::error::Result;
use crate::model::status::{CANCELLED, FATAL, UNPROCESSED};
use crate::model::{JobFilter, QueueState, TenantState};
use crate::store::queries;
use crate::store::worker_rows::delete_job_stats;
use crate::store::{NewJob, Schema, NULL_PRIORITY};

/// The ids a notification payload holds at most (a payload is under 8000 bytes).
const IDS_PER_NOTIFICATION: usize = 200;

/// Every worker, in this process and (by a notification) in others, reads the queues
/// table again (and, after a resume, claims).
async fn queues_changed(pool: &PgPool, schema: &Schema) -> Result<()> {
    crate::bus::pauses_changed();
    let mut held = Held::of(pool).await?;
    sqlx::query("SELECT pg_notify($1, 'pauses')")
        .bind(schema.control_channel())
        .execute(held.on())
        .await?;
    held.done().await?;
    Ok(())
}

impl Control for PgPool {
    /// Cancels the live jobs among `ids`: their queue rows go, their results rows record
    /// status 7 (cancelled) with the payload and limits (for a retry), and a running one's
    /// attempt is recorded as cancelled; its worker is told on the control channel. The ids
    /// cancelled, and whether each was running.
    async fn cancel(
        &self,
        schema: &Schema,
        ids: &[Uuid],
        now: DateTime<Utc>,
    ) -> Result<Vec<(Uuid, bool)>> {
        let pool = self;
        let q = schema.table("tasks_queue_t");
        let r = schema.table("task_results_t");
        let lost_message = "'worker lost: its lease ran out before it recorded an outcome (a crash, a stall or a lost connection)'";
        let mut tx = pool.begin().await?;
        let rows: Vec<(Uuid, bool, String, bool)> = sqlx::query_as(&format!(
            "WITH gone AS (
                DELETE FROM {q} WHERE task_id = ANY($1)
                RETURNING *
            ), rows AS (
                SELECT *, task_locked_by IS NOT NULL AND task_locked_until_ts > $2 AS running,
                    coalesce(task_lost_attempts, '[]') || CASE WHEN task_locked_by IS NULL THEN '[]'::jsonb
                        WHEN task_locked_until_ts > $2 THEN jsonb_build_array(jsonb_build_object(
                            'attempt', task_attempt, 'worker', task_locked_by, 'started_at', task_claimed_at_ts,
                            'ended_at', $2::timestamptz, 'outcome', 'cancelled', 'kind', 'cancelled',
                            'message', 'cancelled while it ran', 'recoverable', false))
                        ELSE jsonb_build_array(jsonb_build_object(
                            'attempt', task_attempt, 'worker', task_locked_by, 'started_at', task_claimed_at_ts,
                            'ended_at', $2::timestamptz, 'outcome', 'lost', 'kind', 'worker_lost',
                            'message', {lost_message}, 'recoverable', true)) END AS attempts
                FROM gone
            ), res AS (
                INSERT INTO {r} AS r (task_id, task_type, task_source, task_queue, task_priority, task_posted_at_ts,
                    task_status, task_error_count, task_processing_finalized_at_ts, task_payload, task_max_attempts,
                    task_timeout_ms, task_errors, task_last_locked_by, task_tenant, task_correlation_id, task_metadata,
                    task_unique_key, task_unique_mode, task_first_processing_attempted_at_ts,
                    task_last_processing_attempted_at_ts, task_last_error_type, task_last_error_message, task_last_error)
                SELECT task_id, task_type, task_source, task_queue, coalesce(task_priority, {NULL_PRIORITY}),
                    task_posted_at_ts, 7,
                    jsonb_array_length(attempts) - CASE WHEN running THEN 1 ELSE 0 END, $2, task_payload,
                    task_max_attempts, task_timeout_ms, attempts, task_locked_by, task_tenant, task_correlation_id,
                    task_metadata, task_unique_key, task_unique_mode,
                    coalesce((attempts -> 0 ->> 'started_at')::timestamptz, task_claimed_at_ts), task_claimed_at_ts,
                    'cancelled', 'cancelled by an operator', 'cancelled: cancelled by an operator'
                FROM rows
                ON CONFLICT (task_id) DO UPDATE SET task_status = {CANCELLED},
                    task_error_count = r.task_error_count + EXCLUDED.task_error_count,
                    task_processing_finalized_at_ts = EXCLUDED.task_processing_finalized_at_ts,
                    task_payload = EXCLUDED.task_payload,
                    task_metadata = EXCLUDED.task_metadata,
                    task_max_attempts = EXCLUDED.task_max_attempts,
                    task_timeout_ms = EXCLUDED.task_timeout_ms,
                    task_errors = r.task_errors || EXCLUDED.task_errors,
                    task_last_locked_by = coalesce(EXCLUDED.task_last_locked_by, r.task_last_locked_by),
                    task_first_processing_attempted_at_ts =
                        coalesce(r.task_first_processing_attempted_at_ts, EXCLUDED.task_first_processing_attempted_at_ts),
                    task_last_processing_attempted_at_ts =
                        coalesce(EXCLUDED.task_last_processing_attempted_at_ts, r.task_last_processing_attempted_at_ts),
                    task_last_error_type = EXCLUDED.task_last_error_type,
                    task_last_error_message = EXCLUDED.task_last_error_message,
                    task_last_error = EXCLUDED.task_last_error
            )
            SELECT task_id, running, task_type, task_dependants FROM rows ORDER BY task_id"
        ))
        .bind(ids)
        .bind(now)
        .fetch_all(kept(&mut tx))
        .await?;
        // The jobs waiting on a cancelled one are cancelled with it, naming it.
        let roots: Vec<(Uuid, String)> = rows
            .iter()
            .filter(|row| row.3)
            .map(|(id, _, task_type, _)| {
                let message = crate::store::dependency_message(
                    *id,
                    task_type,
                    true,
                    "cancelled by an operator",
                );
                (*id, message)
            })
            .collect();
        super::flow::propagate(&mut tx, schema, roots, true, now).await?;
        let rows: Vec<(Uuid, bool)> = rows
            .into_iter()
            .map(|(id, running, _, _)| (id, running))
            .collect();
        let running: Vec<String> = rows
            .iter()
            .filter(|(_, running)| *running)
            .map(|(id, _)| id.to_string())
            .collect();
        for chunk in running.chunks(IDS_PER_NOTIFICATION) {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(schema.control_channel())
                .bind(format!("cancel:{}", chunk.join(",")))
                .execute(kept(&mut tx))
                .await?;
        }
        tx.commit().await?;
        Ok(rows)
    }

    /// Puts the fatal or cancelled jobs among `ids` back in the queue, due at `now`, with a
    /// fresh attempt budget; a job whose unique key another live job holds stays as it is.
    /// With `heal`, the jobs they ended as dependencies come back too, waiting on them
    /// (`flow::revive`). The ids put back.
    async fn retry(
        &self,
        schema: &Schema,
        ids: &[Uuid],
        now: DateTime<Utc>,
        heal: bool,
    ) -> Result<Vec<Uuid>> {
        let mut tx = self.begin().await?;
        let q = schema.table("tasks_queue_t");
        let r = schema.table("task_results_t");
        let d = schema.table("task_deps_t");
        let m = schema.table("batch_jobs_t");
        let seed002 = "task_tenant, task_correlation_id, task_metadata";
        let back: Vec<Uuid> = sqlx::query_scalar(&format!(
            "WITH back AS (
                INSERT INTO {q} (task_id, task_type, task_source, task_payload, task_priority, task_posted_at_ts,
                    task_locked_until_ts, task_queue, task_attempt, task_max_attempts, task_has_result, {seed002},
                    task_unique_key, task_unique_mode, task_timeout_ms, task_dependants, task_waiting_on)
                SELECT task_id, task_type, task_source, task_payload, task_priority, task_posted_at_ts, $2, task_queue,
                    jsonb_array_length(task_errors), jsonb_array_length(task_errors) + coalesce(task_max_attempts, {}),
                    true, {seed002}, CASE WHEN task_unique_mode IS NOT NULL THEN task_unique_key END, task_unique_mode,
                    task_timeout_ms,
                    -- Its success settles the jobs that waited on it (`flow::settle`).
                    -- A job of a batch, whose count it moves (`store::batch`).
                    EXISTS (SELECT 1 FROM {d} a WHERE a.dep_task_id = {r}.task_id)
                        OR EXISTS (SELECT 1 FROM {m} b WHERE b.task_id = {r}.task_id),
                    -- A job that waited on others runs again with their outputs (migration 9).
                    CASE WHEN EXISTS (SELECT 1 FROM {d} w WHERE w.task_id = {r}.task_id) THEN 0 END
                FROM {r}
                WHERE task_id = ANY($1) AND task_status IN ({FATAL}, {CANCELLED}) AND task_payload IS NOT NULL
                ORDER BY task_id
                ON CONFLICT DO NOTHING
                RETURNING task_id
            ), res AS (
                UPDATE {r} r SET task_status = {UNPROCESSED}, task_processing_finalized_at_ts = NULL, task_payload = NULL
                FROM back WHERE r.task_id = back.task_id
            )
            SELECT task_id FROM back, (SELECT pg_notify($3, '')) AS notify",
            crate::DEFAULT_MAX_ATTEMPTS
        ))
        .bind(ids)
        .bind(now)
        .bind(schema.channel())
        .fetch_all(kept(&mut tx))
        .await?;
        super::flow::tally(&mut tx, schema, &back, UNPROCESSED, now).await?;
        if heal && !back.is_empty() {
            super::flow::revive(&mut tx, schema, back.clone(), now).await?;
        }
        tx.commit().await?;
        Ok(back)
    }

    /// Moves a waiting job's not-before time; false when it is not waiting, or waits on
    /// other jobs (it runs when they have succeeded).
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
            let mut held = Held::of(self).await?;
            sqlx::query("SELECT pg_notify($1, '')")
                .bind(schema.channel())
                .execute(held.on())
                .await?;
            held.done().await?;
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
        let mut held = Held::of(self).await?;
        let found: Option<Uuid> = sqlx::query_scalar(&format!(
            "UPDATE {} SET task_locked_until_ts = $2, task_version = task_version + 1
             WHERE task_id = $1 AND task_locked_by IS NULL AND coalesce(task_waiting_on, 0) = 0
             RETURNING task_id",
            schema.table("tasks_queue_t")
        ))
        .bind(id)
        .bind(at)
        .fetch_optional(held.on())
        .await?;
        if found.is_some() {
            sqlx::query("SELECT pg_notify($1, '')")
                .bind(schema.channel())
                .execute(held.on())
                .await?;
        }
        held.done().await?;
        Ok(found.is_some())
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
            queues_changed(self, schema).await?;
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
        queues_changed(self, schema).await
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
        queues_changed(self, schema).await
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

    /// Up to `limit` ids of the jobs `filter` takes, after `after` in id order: live jobs
    /// (`live`) from the queue table, else fatal and cancelled ones from the results.
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
        let mut held = Held::of(self).await?;
        super::enqueue_one(held.on(), schema, job, now).await?;
        held.done().await?;
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
        // Two branches under one filter, each newest first and limited, merged: the jobs with
        // a results row, and the jobs still waiting for their first outcome without one (a
        // job without a unique key, or one another producer posted), whose `r` the queue row
        // stands in for.
        let mut query = sqlx::QueryBuilder::<sqlx::Postgres>::new("SELECT * FROM (");
        let branches = [
            format!(
                "{} r LEFT JOIN {} q ON q.task_id = r.task_id WHERE true",
                schema.table("task_results_t"),
                schema.table("tasks_queue_t")
            ),
            format!(
                "{q} q CROSS JOIN LATERAL (SELECT q.task_id, q.task_type, q.task_queue, {UNPROCESSED} AS task_status,
                    coalesce(q.task_priority, {NULL_PRIORITY}) AS task_priority, q.task_tenant, q.task_correlation_id,
                    q.task_metadata, q.task_posted_at_ts,
                    NULL::timestamptz AS task_processing_finalized_at_ts,
                    jsonb_array_length(coalesce(q.task_lost_attempts, '[]')) AS task_error_count,
                    NULL::text AS task_last_error_type, NULL::text AS task_last_error_message,
                    NULL::text AS task_last_error) r
                 WHERE NOT q.task_has_result AND NOT EXISTS (SELECT 1 FROM {r} x WHERE x.task_id = q.task_id)",
                q = schema.table("tasks_queue_t"),
                r = schema.table("task_results_t")
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
                // Seed 002's keys as their indexes name them (migration 16).
                if let Some(key) = crate::model::seed_002_key(&key) {
                    query.push(format!(
                        " AND {} = ",
                        <sqlx::Postgres as crate::store::dialect::Dialect>::metadata_key("r.", key)
                    ));
                } else {
                    query
                        .push(" AND r.task_metadata ->> ")
                        .push_bind(key)
                        .push(" = ");
                }
                query.push_bind(value);
            }
        );
        let mut held = Held::of(pool).await?;
        let jobs = query.build_query_as().fetch_all(held.on()).await?;
        held.done().await?;
        Ok(jobs)
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
        crate::store::batch::records::<sqlx::Postgres>(self, schema, ids, limit).await
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
        crate::store::batch::job_ids::<sqlx::Postgres>(self, schema, id, status, after, limit).await
    }
}
