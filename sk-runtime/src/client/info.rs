//! Queue info: counts per status, a peek at the head of the queue, one job by id.

use uuid::Uuid;

use crate::clock::{Clock, SystemClock};
use crate::error::Result;
use crate::model::{JobRecord, QueueCounts, QueuedJob};
use crate::store::{Pool, Schema};

/// Read-only views of the queue for operators and tests.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> sk_runtime::Result<()> {
/// use sk_runtime::{JobStatus, QueueInfo};
///
/// let info = QueueInfo::new(pool);
/// let counts = info.counts().await?;
/// println!("{} waiting, {} fatal", counts.available, counts.status(JobStatus::Fatal));
/// for job in info.peek(10).await? {
///     println!("next: {} {} (priority {})", job.id, job.task_type, job.priority);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct QueueInfo {
    pool: Pool,
    schema: Schema,
    clock: std::sync::Arc<dyn Clock>,
}

impl QueueInfo {
    /// Queue info on the default schema.
    pub fn new(pool: impl Into<crate::Pool>) -> Self {
        QueueInfo {
            pool: pool.into(),
            schema: Schema::default(),
            clock: std::sync::Arc::new(SystemClock),
        }
    }

    /// Reads another schema/prefix.
    #[must_use]
    pub fn schema(mut self, schema: Schema) -> Self {
        self.schema = schema;
        self
    }

    /// Uses `clock` to tell available from scheduled jobs.
    #[must_use]
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = std::sync::Arc::new(clock);
        self
    }

    /// Counts per status, and the live queue by state.
    ///
    /// # Errors
    /// The database fails.
    pub async fn counts(&self) -> Result<QueueCounts> {
        self.pool.counts(&self.schema, self.clock.now()).await
    }

    /// The next `limit` waiting jobs in the order workers take them (delayed ones included,
    /// by their not-before time).
    ///
    /// # Errors
    /// The database fails.
    pub async fn peek(&self, limit: i64) -> Result<Vec<QueuedJob>> {
        self.pool.peek(&self.schema, limit).await
    }

    /// Status and result of one job; `None` if no such job was ever posted (or its result
    /// was pruned).
    ///
    /// # Errors
    /// The database fails.
    pub async fn job(&self, id: Uuid) -> Result<Option<JobRecord>> {
        self.pool.job(&self.schema, id, self.clock.now()).await
    }
}
