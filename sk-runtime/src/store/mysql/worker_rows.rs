//! The worker's own rows (the driver contract's `WorkerRows`): its announcement and
//! heartbeat, its run counts per minute, and the queue controls it reads.

use super::super::driver::WorkerRows;
use super::dt;
use super::MySqlStore;
use crate::error::Result;
use crate::store::{QueueControls, Schema};
use chrono::{DateTime, Utc};
use sqlx::MySqlPool;

/// Deletes the run counts of minutes before `before`.
pub(super) async fn delete_job_stats(
    pool: &MySqlPool,
    schema: &Schema,
    before: DateTime<Utc>,
) -> Result<u64> {
    Ok(sqlx::query(&format!(
        "DELETE FROM {} WHERE stat_minute_ts < ?",
        schema.flat_table("job_stats_t")
    ))
    .bind(dt(before))
    .execute(pool)
    .await?
    .rows_affected())
}

impl WorkerRows for MySqlStore {
    /// The paused queues (every claim skips them) and those with a global limit.
    async fn queue_controls(&self) -> Result<QueueControls> {
        let (pool, schema) = (&self.pool, &self.schema);
        let rows = sqlx::query_as(&format!(
            "SELECT CAST(queue_name AS CHAR), queue_paused_at_ts IS NOT NULL, queue_global_limit IS NOT NULL FROM {}
             WHERE queue_paused_at_ts IS NOT NULL OR queue_global_limit IS NOT NULL ORDER BY queue_name",
            schema.flat_table("queues_t")
        ))
        .fetch_all(pool)
        .await?;
        Ok(QueueControls::from_rows(rows))
    }

    /// Announces worker `id` (and forgets workers not seen for a day).
    async fn worker_up(&self, up: &crate::model::WorkerUp, now: DateTime<Utc>) -> Result<()> {
        let (pool, schema, id) = (&self.pool, &self.schema, &self.worker_id);
        let table = schema.flat_table("workers_t");
        sqlx::query(&format!(
            "INSERT INTO {table} (worker_id, worker_host, worker_pid, worker_queues, worker_task_types,
                worker_concurrency, worker_heartbeat_ms, worker_started_at_ts, worker_seen_at_ts)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON DUPLICATE KEY UPDATE worker_host = VALUES(worker_host), worker_pid = VALUES(worker_pid),
                    worker_queues = VALUES(worker_queues), worker_task_types = VALUES(worker_task_types),
                    worker_concurrency = VALUES(worker_concurrency), worker_heartbeat_ms = VALUES(worker_heartbeat_ms),
                    worker_started_at_ts = VALUES(worker_started_at_ts), worker_seen_at_ts = VALUES(worker_seen_at_ts)"
        ))
        .bind(id)
        .bind(&up.host)
        .bind(up.pid)
        .bind(&up.queues)
        .bind(&up.task_types)
        .bind(up.concurrency)
        .bind(up.heartbeat_ms)
        .bind(dt(now))
        .bind(dt(now))
        .execute(pool)
        .await?;
        sqlx::query(&format!("DELETE FROM {table} WHERE worker_seen_at_ts < ?"))
            .bind(dt(now - chrono::Duration::days(1)))
            .execute(pool)
            .await?;
        // The metrics rows of workers gone for a day (a live worker writes its rows every
        // maintenance interval).
        sqlx::query(&format!(
            "DELETE FROM {} WHERE metric_last_updated < ?",
            schema.flat_table("metrics_t")
        ))
        .bind(dt(now - chrono::Duration::days(1)))
        .execute(pool)
        .await?;
        Ok(())
    }

    /// Stamps worker `id`'s row.
    async fn worker_seen(&self, now: DateTime<Utc>) -> Result<()> {
        let (pool, schema, id) = (&self.pool, &self.schema, &self.worker_id);
        sqlx::query(&format!(
            "UPDATE {} SET worker_seen_at_ts = ? WHERE worker_id = ?",
            schema.flat_table("workers_t")
        ))
        .bind(dt(now))
        .bind(id)
        .execute(pool)
        .await?;
        Ok(())
    }

    /// Removes worker `id`'s row.
    async fn worker_down(&self) -> Result<()> {
        let (pool, schema, id) = (&self.pool, &self.schema, &self.worker_id);
        sqlx::query(&format!(
            "DELETE FROM {} WHERE worker_id = ?",
            schema.flat_table("workers_t")
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
                stat_histogram) VALUES (?, ?, ?, ?, ?, ?, ?)
             ON DUPLICATE KEY UPDATE stat_processed = VALUES(stat_processed), stat_failed = VALUES(stat_failed), stat_run_ms = VALUES(stat_run_ms), stat_histogram = VALUES(stat_histogram)",
            schema.flat_table("job_stats_t")
        );
        let mut tx = pool.begin().await?;
        for (minute, task_type, bucket) in buckets {
            sqlx::query(&sql)
                .bind(dt(*minute))
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
