//! The worker's own rows (the driver contract's `WorkerRows`), as every backend writes
//! them (`store::worker_rows`).

use chrono::{DateTime, Utc};

use super::super::driver::WorkerRows;
use super::SqliteStore;
use crate::error::Result;
use crate::model::{StatBucket, WorkerUp};
use crate::store::{worker_rows, QueueControls};

impl WorkerRows for SqliteStore {
    async fn queue_controls(&self) -> Result<QueueControls> {
        worker_rows::queue_controls(&self.pool, &self.schema).await
    }

    async fn worker_up(&self, up: &WorkerUp, now: DateTime<Utc>) -> Result<()> {
        worker_rows::worker_up(&self.pool, &self.schema, &self.worker_id, up, now).await
    }

    async fn worker_seen(&self, now: DateTime<Utc>) -> Result<()> {
        worker_rows::worker_seen(&self.pool, &self.schema, &self.worker_id, now).await
    }

    async fn worker_down(&self) -> Result<()> {
        worker_rows::worker_down(&self.pool, &self.schema, &self.worker_id).await
    }

    async fn prune_job_stats(&self, before: DateTime<Utc>) -> Result<u64> {
        worker_rows::delete_job_stats(&self.pool, &self.schema, before).await
    }

    async fn write_job_stats(&self, buckets: &[(DateTime<Utc>, String, StatBucket)]) -> Result<()> {
        worker_rows::write_job_stats(&self.pool, &self.schema, &self.worker_id, buckets).await
    }
}
