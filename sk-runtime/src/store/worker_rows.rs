//! A worker's own rows, written once over the [`Dialect`] (the driver contract's
//! `WorkerRows`, which each backend's store implements with these): its announcement
//! (with its task types' schemas) and heartbeat, its run counts per minute, and the queue
//! controls it reads.

use chrono::{DateTime, Utc};

use super::dialect::{Arg, Dialect};
use super::{QueueControls, Schema};
use crate::error::Result;
use crate::model::{StatBucket, WorkerUp};
use crate::store::queries::Boxed;

/// The paused queues (every claim skips them), the fair ones, and those with a global,
/// a per-tenant or a rate limit.
pub(crate) fn queue_controls<'a, D: Dialect>(
    pool: &'a sqlx::Pool<D>,
    schema: &'a Schema,
) -> Boxed<'a, QueueControls>
where
    (String, bool, bool, bool, bool): for<'r> sqlx::FromRow<'r, D::Row>,
    (String, String): for<'r> sqlx::FromRow<'r, D::Row>,
{
    Box::pin(async move {
        let sql = format!(
            "SELECT {}, queue_paused_at_ts IS NOT NULL, queue_global_limit IS NOT NULL,
                queue_tenant_limit IS NOT NULL, queue_fair_at_ts IS NOT NULL
             FROM {}
             WHERE queue_paused_at_ts IS NOT NULL OR queue_global_limit IS NOT NULL
                OR queue_tenant_limit IS NOT NULL OR queue_fair_at_ts IS NOT NULL
             ORDER BY queue_name",
            D::text("queue_name"),
            D::table(schema, "queues_t")
        );
        let (rated, rated_types, tenant_rated) = super::rates::names(pool, schema).await?;
        let mut controls =
            QueueControls::from_rows(D::fetch_all(pool, &sql, &[]).await?, rated, rated_types);
        // A queue with a rate limit per tenant is claimed as one with a limit of running
        // jobs per tenant: tenant by tenant, under its locks.
        controls.tenant_capped.extend(tenant_rated.iter().cloned());
        controls.tenant_capped.sort();
        controls.tenant_capped.dedup();
        controls.tenant_rated = tenant_rated;
        Ok(controls)
    })
}

/// Announces worker `id` (and forgets workers, and their metrics rows, not seen for a
/// day: a live worker writes its rows every maintenance interval), then publishes its
/// task types' schemas.
pub(crate) async fn worker_up<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
    id: &str,
    up: &WorkerUp,
    now: DateTime<Utc>,
) -> Result<()> {
    let table = D::table(schema, "workers_t");
    let sql = format!(
        "INSERT INTO {table} (worker_id, worker_host, worker_pid, worker_queues, worker_task_types,
            worker_concurrency, worker_heartbeat_ms, worker_started_at_ts, worker_seen_at_ts,
            worker_default_queues)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9) {}",
        D::upsert(
            "worker_id",
            &[
                "worker_host",
                "worker_pid",
                "worker_queues",
                "worker_task_types",
                "worker_concurrency",
                "worker_heartbeat_ms",
                "worker_started_at_ts",
                "worker_seen_at_ts",
                "worker_default_queues",
            ]
        )
    );
    let args = [
        Arg::Text(Some(id)),
        Arg::Text(Some(&up.host)),
        Arg::Int4(Some(up.pid)),
        Arg::Text(up.queues.as_deref()),
        Arg::Text(Some(&up.task_types)),
        Arg::Int4(Some(up.concurrency)),
        Arg::Int(Some(up.heartbeat_ms)),
        Arg::Time(now),
        Arg::Text(Some(&up.default_queues)),
    ];
    D::execute(pool, &sql, &args).await?;
    let day_ago = [Arg::Time(now - chrono::Duration::days(1))];
    let sql = format!("DELETE FROM {table} WHERE worker_seen_at_ts < $1");
    D::execute(pool, &sql, &day_ago).await?;
    let sql = format!(
        "DELETE FROM {} WHERE metric_last_updated < $1",
        D::table(schema, "metrics_t")
    );
    D::execute(pool, &sql, &day_ago).await?;
    super::task_types::publish(pool, schema, id, &up.schemas, now).await
}

/// Stamps worker `id`'s row.
pub(crate) async fn worker_seen<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
    id: &str,
    now: DateTime<Utc>,
) -> Result<()> {
    let sql = format!(
        "UPDATE {} SET worker_seen_at_ts = $1 WHERE worker_id = $2",
        D::table(schema, "workers_t")
    );
    D::execute(pool, &sql, &[Arg::Time(now), Arg::Text(Some(id))]).await?;
    Ok(())
}

/// Removes worker `id`'s row.
pub(crate) async fn worker_down<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
    id: &str,
) -> Result<()> {
    let sql = format!(
        "DELETE FROM {} WHERE worker_id = $1",
        D::table(schema, "workers_t")
    );
    D::execute(pool, &sql, &[Arg::Text(Some(id))]).await?;
    Ok(())
}

/// Deletes the run counts of minutes before `before`.
pub(crate) async fn delete_job_stats<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
    before: DateTime<Utc>,
) -> Result<u64> {
    let sql = format!(
        "DELETE FROM {} WHERE stat_minute_ts < $1",
        D::table(schema, "job_stats_t")
    );
    D::execute(pool, &sql, &[Arg::Time(before)]).await
}

/// Deletes the logs of starts per tenant (`tenant_starts_t`) last written before
/// `before` whose hold, if any, has ended at `now`. With `before` a longest window
/// ([`MAX_RATE_WINDOW`](crate::MAX_RATE_WINDOW)) ago, such a log holds no start in any
/// window, so a tenant's next claim starts it afresh as if it were kept.
pub(crate) async fn delete_idle_tenant_logs<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
    before: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<u64> {
    let sql = format!(
        "DELETE FROM {} WHERE starts_updated_at_ts < $1
            AND (starts_held_until_ts IS NULL OR starts_held_until_ts <= $2)",
        D::table(schema, "tenant_starts_t")
    );
    D::execute(pool, &sql, &[Arg::Time(before), Arg::Time(now)]).await
}

/// Writes worker `owner`'s run counts per minute and task type (absolute values), in
/// one transaction.
pub(crate) async fn write_job_stats<D: Dialect>(
    pool: &sqlx::Pool<D>,
    schema: &Schema,
    owner: &str,
    buckets: &[(DateTime<Utc>, String, StatBucket)],
) -> Result<()> {
    let sql = format!(
        "INSERT INTO {} (stat_minute_ts, task_type, stat_owner, stat_processed, stat_failed, stat_run_ms,
            stat_histogram) VALUES ($1, $2, $3, $4, $5, $6, $7) {}",
        D::table(schema, "job_stats_t"),
        D::upsert(
            "stat_minute_ts, task_type, stat_owner",
            &["stat_processed", "stat_failed", "stat_run_ms", "stat_histogram"]
        )
    );
    // On a connection of its own, closed if the call runs past its bound (MySQL's
    // `BEGIN` is not safe to cut: `bound::detached`).
    let mut conn = super::bound::Guarded::new(pool.acquire().await?);
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    for (minute, task_type, bucket) in buckets {
        let histogram = bucket.histogram_json();
        let args = [
            Arg::Time(*minute),
            Arg::Text(Some(task_type)),
            Arg::Text(Some(owner)),
            Arg::Int(Some(bucket.processed)),
            Arg::Int(Some(bucket.failed)),
            Arg::Int(Some(bucket.run_ms)),
            Arg::Text(Some(&histogram)),
        ];
        D::execute_on(&mut tx, &sql, &args).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// `WorkerRows` for a backend's worker store `$store` (its `pool`, `schema` and
/// `worker_id`) by the functions above: every backend writes its own rows alike.
macro_rules! worker_rows_of {
    ($store:ty) => {
        impl $crate::store::driver::WorkerRows for $store {
            async fn queue_controls(&self) -> $crate::error::Result<$crate::store::QueueControls> {
                $crate::store::worker_rows::queue_controls(&self.pool, &self.schema).await
            }

            async fn worker_up(
                &self,
                up: &$crate::model::WorkerUp,
                now: chrono::DateTime<chrono::Utc>,
            ) -> $crate::error::Result<()> {
                $crate::store::worker_rows::worker_up(
                    &self.pool,
                    &self.schema,
                    &self.worker_id,
                    up,
                    now,
                )
                .await
            }

            async fn worker_seen(
                &self,
                now: chrono::DateTime<chrono::Utc>,
            ) -> $crate::error::Result<()> {
                $crate::store::worker_rows::worker_seen(
                    &self.pool,
                    &self.schema,
                    &self.worker_id,
                    now,
                )
                .await
            }

            async fn worker_down(&self) -> $crate::error::Result<()> {
                $crate::store::worker_rows::worker_down(&self.pool, &self.schema, &self.worker_id)
                    .await
            }

            async fn prune_job_stats(
                &self,
                before: chrono::DateTime<chrono::Utc>,
            ) -> $crate::error::Result<u64> {
                // Finished batches go with the results they counted.
                $crate::store::batch::delete_finished(&self.pool, &self.schema, before).await?;
                $crate::store::workflows::forget_pruned(&self.pool, &self.schema).await?;
                $crate::store::worker_rows::delete_job_stats(&self.pool, &self.schema, before).await
            }

            async fn prune_tenant_logs(
                &self,
                before: chrono::DateTime<chrono::Utc>,
                now: chrono::DateTime<chrono::Utc>,
            ) -> $crate::error::Result<u64> {
                $crate::store::worker_rows::delete_idle_tenant_logs(
                    &self.pool,
                    &self.schema,
                    before,
                    now,
                )
                .await
            }

            async fn write_job_stats(
                &self,
                buckets: &[(
                    chrono::DateTime<chrono::Utc>,
                    String,
                    $crate::model::StatBucket,
                )],
            ) -> $crate::error::Result<()> {
                $crate::store::worker_rows::write_job_stats(
                    &self.pool,
                    &self.schema,
                    &self.worker_id,
                    buckets,
                )
                .await
            }
        }
    };
}
pub(crate) use worker_rows_of;
