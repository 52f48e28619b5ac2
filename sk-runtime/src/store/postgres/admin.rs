//! The admin side of the driver contract on a pool: migrations, queue info, stored
//! schedules; a replica's replay lag.

use super::pooler::Held;
use super::*;
use crate::store::queries;

impl Admin for PgPool {
    /// Brings the schema to the newest version. Concurrent callers serialize on an advisory
    /// lock, so several workers starting at once apply each migration exactly once.
    /// Then creates the results partitions for now and the next days, so jobs enqueued before
    /// a worker starts land in them.
    async fn migrate(&self, schema: &Schema) -> Result<()> {
        let pool = self;
        migrate_to(pool, schema, i32::MAX).await?;
        partitions::ensure(pool, schema, Utc::now(), partitions::default_span(), None).await?;
        Ok(())
    }

    async fn set_seed_keys(&self, schema: &Schema, keys: crate::migrate::SeedKeys) -> Result<()> {
        migrate::set_seed_keys(self, schema, keys).await
    }

    /// This build's migrations, each with when it was applied to `schema` (`None`: not yet).
    async fn migrations(
        &self,
        schema: &Schema,
    ) -> Result<Vec<(i32, &'static str, Option<DateTime<Utc>>)>> {
        queries::migrations(self, schema, MIGRATIONS).await
    }

    async fn counts(&self, schema: &Schema, now: DateTime<Utc>) -> Result<QueueCounts> {
        queries::counts(self, schema, &schema.sql.counts_by_status, now).await
    }

    async fn peek(&self, schema: &Schema, limit: i64) -> Result<Vec<QueuedJob>> {
        queries::peek(self, schema, limit).await
    }

    async fn task_types(&self, schema: &Schema) -> Result<Vec<(String, String)>> {
        crate::store::task_types::list(self, schema).await
    }

    async fn job(
        &self,
        schema: &Schema,
        id: Uuid,
        now: DateTime<Utc>,
    ) -> Result<Option<JobRecord>> {
        let mut held = Held::of(self).await?;
        let record = sqlx::query_as(&schema.sql.job)
            .bind(id)
            .bind(now)
            .fetch_optional(held.on())
            .await?;
        held.done().await?;
        Ok(record)
    }

    /// Adds or replaces a stored schedule.
    async fn schedule_put(&self, schema: &Schema, row: &ScheduleRow) -> Result<()> {
        queries::schedule_put(self, schema, row).await
    }

    /// Removes a stored schedule; false if there was none of that name. Waits for a tick of
    /// it being enqueued (`schedule_hold`); none is enqueued after this returns.
    async fn schedule_remove(&self, schema: &Schema, name: &str) -> Result<bool> {
        queries::schedule_remove(self, schema, name).await
    }

    /// Every stored schedule, by name.
    async fn schedule_list(&self, schema: &Schema) -> Result<Vec<ScheduleRow>> {
        queries::schedule_list(self, schema).await
    }
}

/// A streaming replica's replay lag (`Pool::replay_lag`): `None` on a primary.
pub(crate) async fn replay_lag(pool: &PgPool) -> Result<Option<Duration>> {
    let seconds: Option<f64> = sqlx::query_scalar(
        "SELECT CASE WHEN NOT pg_is_in_recovery() THEN NULL
                     WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
                     ELSE greatest(extract(epoch FROM now() - pg_last_xact_replay_timestamp()), 0)
                END::float8",
    )
    .fetch_one(Held::of(pool).await?.on())
    .await?;
    Ok(seconds.map(Duration::from_secs_f64))
}
