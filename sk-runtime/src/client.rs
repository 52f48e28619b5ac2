//! Enqueueing: one job or many, on a pool or inside the caller's transaction.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::job::Job;
use crate::store::{postgres, NewJob, Schema};

/// The longest queue name, source or unique key accepted (the columns' width).
pub(crate) const MAX_NAME_BYTES: usize = 255;
/// The default payload limit.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1024 * 1024;

/// A job with per-call overrides, ready to enqueue. Built by the generated methods
/// (`MyJob::new(..).with_priority(0)`) or with [`Enqueue::new`].
///
/// ```no_run
/// # use sk_runtime::{job, JobError};
/// # #[job] async fn send_welcome(user_id: i64) -> Result<(), JobError> { Ok(()) }
/// # async fn f(pool: sqlx::PgPool) -> sk_runtime::Result<()> {
/// let mut tx = pool.begin().await?;
/// // ... the application's own writes ...
/// SendWelcome::new(7)
///     .with_priority(-1)
///     .run_after(std::time::Duration::from_secs(60))
///     .enqueue(&mut *tx)
///     .await?;
/// tx.commit().await?; // the job exists only if the transaction commits
/// # Ok(()) }
/// ```
#[must_use = "nothing is stored until `.enqueue(..)` is awaited"]
pub struct Enqueue<J> {
    job: J,
    priority: Option<i32>,
    run_at: Option<DateTime<Utc>>,
    delay: Option<Duration>,
    queue: Option<String>,
    source: Option<String>,
    unique_key: Option<String>,
    tenant: Option<String>,
    correlation_id: Option<String>,
    metadata: Option<serde_json::Value>,
    schema: Option<Schema>,
    max_payload: usize,
}

impl<J: Job> From<J> for Enqueue<J> {
    fn from(job: J) -> Self {
        Enqueue::new(job)
    }
}

impl<J: Job> Enqueue<J> {
    /// Wraps a job value with its `#[job]` defaults.
    pub fn new(job: J) -> Self {
        Enqueue {
            job,
            priority: None,
            run_at: None,
            delay: None,
            queue: None,
            source: None,
            unique_key: None,
            tenant: None,
            correlation_id: None,
            metadata: None,
            schema: None,
            max_payload: DEFAULT_MAX_PAYLOAD_BYTES,
        }
    }

    /// Overrides the priority (lower runs first).
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Runs no earlier than `at`.
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(at);
        self
    }

    /// Runs no earlier than `delay` after enqueue.
    pub fn run_after(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Puts the job on another queue.
    pub fn with_queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Records who posted the job (default `"app"`).
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Enqueues only if no job with this key was ever posted (until its result is pruned).
    pub fn with_unique_key(mut self, key: impl Into<String>) -> Self {
        self.unique_key = Some(key.into());
        self
    }

    /// Enqueues the job for `tenant` (seed 002); workers can be limited to tenants with
    /// [`WorkerBuilder::tenants`](crate::WorkerBuilder::tenants).
    pub fn with_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// Sets the job's correlation id (seed 002), to find every job of one request or
    /// workflow. Without one, a job enqueued from inside a running job's handler (on the
    /// handler's own task) inherits that job's correlation id.
    pub fn with_correlation_id(mut self, id: impl Into<String>) -> Self {
        self.correlation_id = Some(id.into());
        self
    }

    /// Attaches user metadata (seed 002's user-defined fields): a JSON object, stored with
    /// the job and shown in its context and record.
    pub fn with_metadata(mut self, metadata: serde_json::Value) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// Uses another schema/prefix than the default `public.sk_*`.
    pub fn with_schema(mut self, schema: &Schema) -> Self {
        self.schema = Some(schema.clone());
        self
    }

    /// Refuses payloads over `bytes` of JSON (default 1 MiB).
    pub fn with_max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = bytes;
        self
    }

    /// Stores the job and returns its id. The insert and its wake-up notification take
    /// effect when the executor's transaction commits (at once on a pool).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name or an oversized payload, [`Error::Serialize`],
    /// [`Error::Database`]; with a unique key that already exists,
    /// [`Error::Invalid`] naming the key.
    pub async fn enqueue<'e, E: PgExecutor<'e>>(self, executor: E) -> Result<Uuid> {
        let schema = self.schema.clone().unwrap_or_default();
        let now = Utc::now();
        let key = self.unique_key.clone();
        let job = self.into_new_job(now)?;
        postgres::enqueue_one(executor, &schema, job, now)
            .await?
            .ok_or_else(|| Error::invalid("unique key", format!("{key:?} was already enqueued")))
    }

    /// Stores many jobs in one statement (one round trip, one notification) and returns
    /// their ids in order. Jobs whose unique key already exists are skipped.
    ///
    /// # Errors
    /// As [`Enqueue::enqueue`]; if any job is invalid, none is stored.
    pub async fn enqueue_many<'e, E, I>(executor: E, jobs: I) -> Result<Vec<Uuid>>
    where
        E: PgExecutor<'e>,
        I: IntoIterator,
        I::Item: Into<Enqueue<J>>,
    {
        let now = Utc::now();
        let mut schema: Option<Schema> = None;
        let mut rows = Vec::new();
        for job in jobs {
            let job: Enqueue<J> = job.into();
            if schema.is_none() {
                schema = job.schema.clone();
            }
            rows.push(job.into_new_job(now)?);
        }
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let ids = rows.iter().map(|r| r.id).collect();
        postgres::enqueue_many(executor, &schema.unwrap_or_default(), rows, now).await?;
        Ok(ids)
    }

    fn into_new_job(self, now: DateTime<Utc>) -> Result<NewJob> {
        let payload = serde_json::to_string(&self.job).map_err(|source| Error::Serialize {
            task_type: J::TASK_TYPE,
            source,
        })?;
        if payload.len() > self.max_payload {
            return Err(Error::invalid(
                "payload",
                format!(
                    "job `{}` has a payload of {} bytes, over the limit of {} bytes",
                    J::TASK_TYPE,
                    payload.len(),
                    self.max_payload
                ),
            ));
        }
        let queue = self.queue.unwrap_or_else(|| J::OPTIONS.queue.to_owned());
        check_name("queue name", &queue)?;
        let source = self.source.unwrap_or_else(|| "app".to_owned());
        check_name("source", &source)?;
        if let Some(key) = &self.unique_key {
            check_name("unique key", key)?;
        }
        if let Some(tenant) = &self.tenant {
            check_name("tenant", tenant)?;
        }
        let correlation_id = self
            .correlation_id
            .or_else(crate::job::inherited_correlation_id);
        if let Some(id) = &correlation_id {
            check_name("correlation id", id)?;
        }
        let metadata = match self.metadata {
            None => None,
            Some(serde_json::Value::Object(map)) => {
                Some(serde_json::Value::Object(map).to_string())
            }
            Some(other) => {
                return Err(Error::invalid(
                    "metadata",
                    format!("must be a JSON object, not {other}"),
                ))
            }
        };
        let run_at = match (self.run_at, self.delay) {
            (Some(at), _) => at,
            (None, Some(delay)) => crate::clock::add(now, delay),
            (None, None) => now,
        };
        Ok(NewJob {
            id: Uuid::now_v7(),
            task_type: J::TASK_TYPE,
            source,
            payload,
            queue,
            priority: self.priority.unwrap_or(J::OPTIONS.priority),
            run_at,
            max_attempts: J::OPTIONS.max_attempts,
            unique_key: self.unique_key,
            tenant: self.tenant,
            correlation_id,
            metadata,
        })
    }
}

/// Queue names, sources and keys are stored as data (always bound, never spliced into
/// SQL); this only keeps them within the columns and readable.
pub(crate) fn check_name(what: &'static str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(what, "must not be empty"));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(Error::invalid(
            what,
            format!(
                "is {} bytes long, over the limit of {MAX_NAME_BYTES}",
                value.len()
            ),
        ));
    }
    if value.contains('\0') {
        return Err(Error::invalid(what, "must not contain a NUL byte"));
    }
    Ok(())
}
