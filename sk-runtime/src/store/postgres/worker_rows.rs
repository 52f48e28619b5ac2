//! The worker's own rows (the driver contract's `WorkerRows`): its announcement and
//! heartbeat, its run counts per minute, and the queue controls it reads.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::super::driver::WorkerRows;
use super::PgStore;
use crate::error::Result;
use crate::store::{QueueControls, Schema};

/// Deletes the run counts of minutes before `before`.
pub(super) async fn delete_job_stats(
    pool: &PgPool,
    schema: &Schema,
    before: DateTime<Utc>,
) -> Result<u64> {
    Ok(sqlx::query(&format!(
        "DELETE FROM {} WHERE stat_minute_ts < $1",
        schema.table("job_stats_t")
    ))
    .bind(before)
    .execute(pool)
    .await?
    .rows_affected())
}

impl WorkerRows for PgStore {
    /// The paused queues (every claim skips them) and those with a global limit.
    async fn queue_controls(&self) -> Result<QueueControls> {
        let (pool, schema) = (&self.pool, &self.schema);
        let rows = sqlx::query_as(&format!(
            "SELECT queue_name, queue_paused_at_ts IS NOT NULL, queue_global_limit IS NOT NULL FROM {}
             WHERE queue_paused_at_ts IS NOT NULL OR queue_global_limit IS NOT NULL ORDER BY queue_name",
            schema.table("queues_t")
        ))
        .fetch_all(pool)
        .await?;
        Ok(QueueControls::from_rows(rows))
    }

    /// Announces worker `id` (and forgets workers not seen for a day).
    async fn worker_up(&self, up: &crate::model::WorkerUp, now: DateTime<Utc>) -> Result<()> {
        let (pool, schema, id) = (&self.pool, &self.schema, &self.worker_id);
        let table = schema.table("workers_t");
        sqlx::query(&format!(
            "INSERT INTO {table} (worker_id, worker_host, worker_pid, worker_queues, worker_task_types,
                worker_concurrency, worker_heartbeat_ms, worker_started_at_ts, worker_seen_at_ts)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
             ON CONFLICT (worker_id) DO UPDATE SET worker_host = EXCLUDED.worker_host, worker_pid = EXCLUDED.worker_pid,
                    worker_queues = EXCLUDED.worker_queues, worker_task_types = EXCLUDED.worker_task_types,
                    worker_concurrency = EXCLUDED.worker_concurrency, worker_heartbeat_ms = EXCLUDED.worker_heartbeat_ms,
                    worker_started_at_ts = EXCLUDED.worker_started_at_ts, worker_seen_at_ts = EXCLUDED.worker_seen_at_ts"
        ))
        .bind(id)
        .bind(&up.host)
        .bind(up.pid)
        .bind(&up.queues)
        .bind(&up.task_types)
        .bind(up.concurrency)
        .bind(up.heartbeat_ms)
        .bind(now)
        .bind(now)
        .execute(pool)
        .await?;
        sqlx::query(&format!("DELETE FROM {table} WHERE worker_seen_at_ts < $1"))
            .bind(now - chrono::Duration::days(1))
            .execute(pool)
            .await?;
        // The metrics rows of workers gone for a day (a live worker writes its rows every
        // maintenance interval).
        sqlx::query(&format!(
            "DELETE FROM {} WHERE metric_last_updated < $1",
            schema.table("metrics_t")
        ))
        .bind(now - chrono::Duration::days(1))
        .execute(pool)
        .await?;
        Ok(())
    }

    /// Stamps worker `id`'s row.
    async fn worker_seen(&self, now: DateTime<Utc>) -> Result<()> {
        let (pool, schema, id) = (&self.pool, &self.schema, &self.worker_id);
        sqlx::query(&format!(
            "UPDATE {} SET worker_seen_at_ts = $1 WHERE worker_id = $2",
            schema.table("workers_t")
        ))
        .bind(now)
        .bind(id)
        .execute(pool)
        .await?;
        Ok(())
    }

    /// Removes worker `id`'s row.
    async fn worker_down(&self) -> Result<()> {
        let (pool, schema, id) = (&self.pool, &self.schema, &self.worker_id);
        sqlx::query(&format!(
            "DELETE FROM {} WHERE worker_id = $1",
            schema.table("workers_t")
        ))
        .bind(id)
        .execute(pool)
        .await?;
        Ok(())
    }

    /// Deletes the run counts of minutes before `before`.
    async fn prune_job_stats(&self, before: DateTime<Utc>) -> Result<u64> {
        delete_job_stats(&self.pool, &self.schema, before).await
    }

    /// Writes worker `owner`'s run counts per minute and task type (absolute values).
    async fn write_job_stats(
        &self,
        buckets: &[(DateTime<Utc>, String, crate::model::StatBucket)],
    ) -> Result<()> {
        let (pool, schema, owner) = (&self.pool, &self.schema, &self.worker_id);
        let sql = format!(
            "INSERT INTO {} (stat_minute_ts, task_type, stat_owner, stat_processed, stat_failed, stat_run_ms,
                stat_histogram) VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (stat_minute_ts, task_type, stat_owner) DO UPDATE SET stat_processed = EXCLUDED.stat_processed, stat_failed = EXCLUDED.stat_failed, stat_run_ms = EXCLUDED.stat_run_ms, stat_histogram = EXCLUDED.stat_histogram",
            schema.table("job_stats_t")
        );
        let mut tx = pool.begin().await?;
        for (minute, task_type, bucket) in buckets {
            sqlx::query(&sql)
                .bind(*minute)
                .bind(task_type)
                .bind(owner)
                .bind(bucket.processed)
                .bind(bucket.failed)
                .bind(bucket.run_ms)
                .bind(bucket.histogram_json())
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}
