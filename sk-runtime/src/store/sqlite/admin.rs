//! The admin side of the driver contract on a pool: migrations, queue info, stored schedules.

use super::*;
use crate::store::queries;

impl Admin for SqlitePool {
    async fn set_seed_keys(&self, _schema: &Schema, keys: crate::migrate::SeedKeys) -> Result<()> {
        crate::migrate::per_process_only(keys)
    }

    /// Brings the schema to the newest version: in a `BEGIN IMMEDIATE` transaction, so
    /// workers starting at once apply each migration exactly once. Puts the file in WAL mode
    /// (readers never wait for the writer; the mode stays with the file).
    async fn migrate(&self, schema: &Schema) -> Result<()> {
        let pool = self;
        migrate_to(pool, schema, i32::MAX).await
    }

    /// This build's migrations, each with when it was applied to `schema` (`None`: not yet).
    async fn migrations(
        &self,
        schema: &Schema,
    ) -> Result<Vec<(i32, &'static str, Option<DateTime<Utc>>)>> {
        queries::migrations(self, schema, MIGRATIONS).await
    }

    async fn counts(&self, schema: &Schema, now: DateTime<Utc>) -> Result<QueueCounts> {
        queries::counts(self, schema, &schema.sqlite.counts_by_status, now).await
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
        let pool = self;
        let Some(row) = sqlx::query(&schema.sqlite.job)
            .bind(id)
            .bind(ts(now))
            .fetch_optional(pool)
            .await?
        else {
            return Ok(None);
        };
        let mut record = <JobRecord as sqlx::FromRow<_>>::from_row(&row)?;
        let lost: Option<String> = row.try_get("lost")?;
        if let Some(lost) = lost {
            let lost: Vec<Attempt> = from_json(&lost, &format!("task_lost_attempts of job {id}"))?;
            record.failed_attempts.extend(lost);
        }
        Ok(Some(record))
    }

    /// Adds or replaces a stored schedule.
    async fn schedule_put(&self, schema: &Schema, row: &ScheduleRow) -> Result<()> {
        queries::schedule_put(self, schema, row).await
    }

    /// Removes a stored schedule; false if there was none of that name. A tick is enqueued
    /// in a write transaction that checks the schedule first, so none is enqueued after this.
    async fn schedule_remove(&self, schema: &Schema, name: &str) -> Result<bool> {
        queries::schedule_remove(self, schema, name).await
    }

    /// Every stored schedule, by name.
    async fn schedule_list(&self, schema: &Schema) -> Result<Vec<ScheduleRow>> {
        queries::schedule_list(self, schema).await
    }
}
