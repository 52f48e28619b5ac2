//! Enqueueing: one job or many, on a pool or inside the caller's transaction.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::job::Job;
use crate::model::{check_name, UniqueMode};
use crate::store::{with_keeps, Backend, Executor, NewJob, Schema};

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
    unique_mode: Option<UniqueMode>,
    tenant: Option<String>,
    correlation_id: Option<String>,
    metadata: Option<serde_json::Value>,
    /// Seed 002's retry group and external id, kept in the metadata under those keys.
    retry_group: Option<String>,
    external_id: Option<String>,
    schema: Option<Schema>,
    max_payload: usize,
    max_attempts: Option<i32>,
    timeout: Option<Duration>,
    /// Jobs this one waits on (`Enqueue::after`).
    after: Vec<Uuid>,
}

impl<J: Job> From<J> for Enqueue<J> {
    fn from(job: J) -> Self {
        Enqueue::new(job)
    }
}

impl<J: Job> Enqueue<J> {
    /// Wraps a job value with its `#[job]` defaults (and the tenant its arguments give
    /// it, [`Job::tenant`]).
    pub fn new(job: J) -> Self {
        let tenant = job.tenant();
        Enqueue {
            job,
            priority: None,
            run_at: None,
            delay: None,
            queue: None,
            source: None,
            unique_key: None,
            unique_mode: None,
            tenant,
            correlation_id: None,
            metadata: None,
            retry_group: None,
            external_id: None,
            schema: None,
            max_payload: DEFAULT_MAX_PAYLOAD_BYTES,
            max_attempts: None,
            timeout: None,
            after: Vec::new(),
        }
    }

    /// Runs the job once all the jobs `ids` have succeeded, with their outputs as its
    /// [`Input<T>`](crate::Input) (one id) or [`Inputs<T>`](crate::Inputs) (in the order
    /// given); until then it is [`JobStatus::Pending`](crate::JobStatus::Pending). If one
    /// of them fails for good or is cancelled, so is this job, naming it. A dependency
    /// that succeeded already counts as done. See [`Workflow`](crate::Workflow) for stages
    /// checked at compile time.
    ///
    /// [`Enqueue::enqueue`] refuses a dependency that failed, was cancelled or does not
    /// exist, and a job that waits with a unique key or a run-at time of its own.
    pub fn after(mut self, ids: impl IntoIterator<Item = Uuid>) -> Self {
        self.after.extend(ids);
        self
    }

    /// Overrides the priority (lower runs first).
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Runs no earlier than `at`, which is at most 9999-12-31T23:59:59.999999Z (a later
    /// time is refused at enqueue with [`Error::Invalid`]).
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(at);
        self
    }

    /// Runs no earlier than `delay` after enqueue; a delay that ends after
    /// 9999-12-31T23:59:59.999999Z, the latest time sk stores, waits until then.
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

    /// Gives the job a unique key: while a job with this key is live (waiting, retrying or
    /// running), enqueueing another one does what the [`UniqueMode`] says (default
    /// [`UniqueMode::Skip`]: nothing, and `enqueue` returns the live job's id). Once the
    /// job has finished, the key is free again.
    pub fn with_unique_key(mut self, key: impl Into<String>) -> Self {
        self.unique_key = Some(key.into());
        self
    }

    /// What a duplicate of the unique key does (see [`UniqueMode`]); needs
    /// [`Enqueue::with_unique_key`].
    pub fn with_unique_mode(mut self, mode: UniqueMode) -> Self {
        self.unique_mode = Some(mode);
        self
    }

    /// Enqueues the job for `tenant` (seed 002), in place of the one its arguments give it
    /// (`#[job(tenant = arg)]`); workers can be limited to tenants with
    /// [`WorkerBuilder::tenants`](crate::WorkerBuilder::tenants), and a queue's fair claims
    /// and limits per tenant share and count by it.
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
    /// the job and shown in its context and record. Anything else, or one with a NUL
    /// character in a string or key (PostgreSQL's `jsonb` cannot store it), is refused at
    /// enqueue with [`Error::Invalid`].
    pub fn with_metadata(mut self, metadata: serde_json::Value) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// Puts the job in a retry group (seed 002's `retry_group`, at most 40 characters):
    /// [`Client::retry_group`](crate::Client::retry_group) and `sk retry --retry-group`
    /// put every job of the group that failed for good or was cancelled back in the queue
    /// at once. Kept in the job's metadata under `retry_group`.
    pub fn with_retry_group(mut self, group: impl Into<String>) -> Self {
        self.retry_group = Some(group.into());
        self
    }

    /// Gives the job an external id (seed 002's string id, at most 40 characters), to
    /// find it by with [`JobFilter::external_id`](crate::JobFilter::external_id) or
    /// `sk jobs --external-id`, an index lookup. Not unique: two jobs may carry one id
    /// (a unique key, `with_unique_key`, is what refuses a second). Kept in the job's
    /// metadata under `external_id`; the job's own id stays a UUIDv7, which the results'
    /// time partitions are cut by.
    pub fn with_external_id(mut self, id: impl Into<String>) -> Self {
        self.external_id = Some(id.into());
        self
    }

    /// Overrides the job type's attempt limit (first run plus retries) for this job.
    /// [`Enqueue::enqueue`] refuses a limit below 1.
    pub fn with_max_attempts(mut self, attempts: i32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// Overrides the job type's run-time limit (`#[job(timeout)]`, or the worker's
    /// default) for this job: a run over it is a recoverable failure. [`Enqueue::enqueue`]
    /// refuses a zero limit.
    pub fn with_timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
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

    /// Stores the job and returns its id: the new job's, or, when its unique key is held
    /// by a live job, that job's. The insert and its wake-up notification take effect when
    /// the executor's transaction commits (at once on a pool).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name, a unique mode without a key or an oversized
    /// payload, [`Error::Serialize`], [`Error::Database`].
    pub async fn enqueue<'e, E: Executor<'e>>(self, executor: E) -> Result<Uuid> {
        Ok(self.enqueue_outcome(executor).await?.id)
    }

    /// As [`Enqueue::enqueue`], and says what happened: a new job, or what a duplicate
    /// unique key did to the live job.
    ///
    /// ```no_run
    /// # use sk_runtime::{job, EnqueueOutcome, UniqueMode};
    /// # #[job] async fn rebuild_index(doc: i64) {}
    /// # async fn f(pool: sqlx::PgPool) -> sk_runtime::Result<()> {
    /// // Seed 003's restart-on-update: the document changed, so index it (again).
    /// let done = RebuildIndex::new(7)
    ///     .with_unique_key("index:7")
    ///     .with_unique_mode(UniqueMode::Restart)
    ///     .enqueue_outcome(&pool)
    ///     .await?;
    /// match done.outcome {
    ///     EnqueueOutcome::Inserted => println!("queued {}", done.id),
    ///     EnqueueOutcome::RerunScheduled => println!("{} runs once more after this run", done.id),
    ///     other => println!("{} is waiting already ({other:?})", done.id),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Enqueue::enqueue`].
    pub async fn enqueue_outcome<'e, E: Executor<'e>>(self, executor: E) -> Result<Enqueued> {
        let now = crate::job::enqueue_now();
        self.prepare(now, None)?.post(executor, now).await
    }

    /// The row to store, checked, with what it waits on and its schema (`schema` when the
    /// call names none).
    pub(crate) fn prepare(
        mut self,
        now: DateTime<Utc>,
        schema: Option<&Schema>,
    ) -> Result<Prepared<J>> {
        let schema = self
            .schema
            .take()
            .or_else(|| schema.cloned())
            .unwrap_or_default();
        let after = std::mem::take(&mut self.after);
        Ok(Prepared {
            job: self.into_new_job(now)?,
            after,
            schema,
            kind: std::marker::PhantomData,
        })
    }

    /// Stores many jobs in one statement (one round trip, one notification) and returns
    /// their ids in order. A job whose unique key a live job holds (or an earlier job of
    /// the batch) is not stored, and its place holds that job's id: every id returned is
    /// of a stored job. Unique keys here use [`UniqueMode::Skip`].
    ///
    /// # Errors
    /// As [`Enqueue::enqueue`]; [`Error::Invalid`] for a unique mode other than skip
    /// (enqueue those one at a time). If any job is invalid, none is stored.
    pub async fn enqueue_many<'e, E, I>(executor: E, jobs: I) -> Result<Vec<Uuid>>
    where
        E: Executor<'e>,
        I: IntoIterator,
        I::Item: Into<Enqueue<J>>,
    {
        let now = crate::job::enqueue_now();
        let (schema, rows) = Self::rows_of(jobs, now, None)?;
        Self::post_rows(executor, &schema, rows, now).await
    }

    /// The rows of `jobs`, checked (none with `after`; unique keys of mode skip only),
    /// and their schema: the first job's, else `schema`, else the default.
    pub(crate) fn rows_of<I>(
        jobs: I,
        now: DateTime<Utc>,
        schema: Option<&Schema>,
    ) -> Result<(Schema, Vec<NewJob>)>
    where
        I: IntoIterator,
        I::Item: Into<Enqueue<J>>,
    {
        let mut named: Option<Schema> = None;
        let mut rows = Vec::new();
        for job in jobs {
            let job: Enqueue<J> = job.into();
            if named.is_none() {
                named = job.schema.clone();
            }
            if !job.after.is_empty() {
                return Err(Error::invalid(
                    "dependency",
                    "enqueue_many takes jobs that wait on nothing; enqueue a job with `after` on its own, or use a Workflow",
                ));
            }
            rows.push(job.into_new_job(now)?);
        }
        if let Some(mode) = rows
            .iter()
            .filter_map(|r| r.unique_mode)
            .find(|m| *m != UniqueMode::Skip)
        {
            return Err(Error::invalid(
                "unique mode",
                format!("enqueue_many takes unique keys of mode Skip only, not {mode:?}; enqueue those jobs one at a time"),
            ));
        }
        let schema = named.or_else(|| schema.cloned()).unwrap_or_default();
        Ok((schema, rows))
    }

    /// Stores `rows` (from [`Enqueue::rows_of`]) in one statement.
    pub(crate) async fn post_rows<'e, E: Executor<'e>>(
        executor: E,
        schema: &Schema,
        rows: Vec<NewJob>,
        now: DateTime<Utc>,
    ) -> Result<Vec<Uuid>> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let mut queues: Vec<(String, u64)> = Vec::new();
        for row in &rows {
            match queues.iter_mut().find(|(q, _)| *q == row.queue) {
                Some((_, n)) => *n += 1,
                None => queues.push((row.queue.clone(), 1)),
            }
        }
        let keep = executor.keeps_statements();
        let many = <E::Database as Backend>::enqueue_many(executor, schema, rows, now);
        let ids = with_keeps(keep, many).await?;
        for (queue, n) in &queues {
            crate::telemetry::enqueued(J::TASK_TYPE, queue, *n);
        }
        Ok(ids)
    }

    /// Whether it waits on other jobs (`after`), which a batch's job cannot.
    pub(crate) fn waits(&self) -> bool {
        !self.after.is_empty()
    }

    pub(crate) fn into_new_job(mut self, now: DateTime<Utc>) -> Result<NewJob> {
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
        if self.unique_key.is_none() && self.unique_mode.is_some() {
            return Err(Error::invalid(
                "unique mode",
                "needs a unique key (`with_unique_key`)",
            ));
        }
        let unique_mode = self
            .unique_key
            .as_ref()
            .map(|_| self.unique_mode.unwrap_or(UniqueMode::Skip));
        if let Some(tenant) = &self.tenant {
            check_name("tenant", tenant)?;
        }
        let correlation_id = self
            .correlation_id
            .or_else(crate::job::inherited_correlation_id);
        if let Some(id) = &correlation_id {
            check_name("correlation id", id)?;
        }
        let mut seed_002 = serde_json::Map::new();
        if let Some(group) = self.retry_group {
            crate::model::check_seed_002("retry group", &group, crate::model::SEED_002_ID_CHARS)?;
            seed_002.insert("retry_group".into(), group.into());
        }
        if let Some(id) = self.external_id {
            crate::model::check_seed_002("external id", &id, crate::model::SEED_002_ID_CHARS)?;
            seed_002.insert("external_id".into(), id.into());
        }
        if !seed_002.is_empty() {
            self.metadata = match self.metadata.take() {
                None => Some(serde_json::Value::Object(seed_002)),
                Some(serde_json::Value::Object(mut map)) => {
                    map.extend(seed_002);
                    Some(serde_json::Value::Object(map))
                }
                // Refused below, as any metadata that is not an object.
                other => other,
            };
        }
        let metadata = match self.metadata.map(metadata_map).transpose()? {
            #[cfg(not(feature = "opentelemetry"))]
            None => None,
            #[cfg(feature = "opentelemetry")]
            None => crate::telemetry::trace_context(serde_json::Map::new())
                .map(|map| serde_json::Value::Object(map).to_string()),
            #[cfg(not(feature = "opentelemetry"))]
            Some(map) => Some(serde_json::Value::Object(map).to_string()),
            #[cfg(feature = "opentelemetry")]
            Some(map) => {
                let map = crate::telemetry::trace_context(map.clone()).unwrap_or(map);
                Some(serde_json::Value::Object(map).to_string())
            }
        };
        let max_attempts = self.max_attempts.unwrap_or(J::OPTIONS.max_attempts);
        if max_attempts < 1 {
            return Err(Error::invalid(
                "max attempts",
                format!("{max_attempts}: a job needs at least 1 attempt"),
            ));
        }
        let timeout_ms = match self.timeout {
            None => None,
            Some(limit) if limit.is_zero() => {
                return Err(Error::invalid("timeout", "must be longer than zero"))
            }
            Some(limit) => Some(i64::try_from(limit.as_millis()).unwrap_or(i64::MAX).max(1)),
        };
        let run_at = match (self.run_at, self.delay) {
            (Some(at), _) => crate::clock::storable("run at", at)?,
            (None, Some(delay)) => crate::clock::add(now, delay),
            (None, None) => now,
        };
        let mut job = NewJob {
            id: Uuid::now_v7(),
            task_type: J::TASK_TYPE.into(),
            source,
            payload,
            queue,
            priority: self.priority.unwrap_or(J::OPTIONS.priority),
            run_at,
            max_attempts,
            unique_key: self.unique_key,
            unique_mode,
            tenant: self.tenant,
            correlation_id,
            metadata,
            every_ms: None,
            timeout_ms,
        };
        crate::hooks::apply(&mut job)?;
        crate::sealed::seal_new_job(&mut job, J::OPTIONS.encrypted)?;
        Ok(job)
    }
}

/// One job ready to store ([`Enqueue::prepare`]): its row, the jobs it waits on, its
/// schema.
pub(crate) struct Prepared<J> {
    pub(crate) job: NewJob,
    pub(crate) after: Vec<Uuid>,
    pub(crate) schema: Schema,
    kind: std::marker::PhantomData<J>,
}

impl<J: Job> Prepared<J> {
    /// Stores the job on `executor`.
    pub(crate) async fn post<'e, E: Executor<'e>>(
        self,
        executor: E,
        now: DateTime<Utc>,
    ) -> Result<Enqueued> {
        let Prepared {
            job, after, schema, ..
        } = self;
        let queue = job.queue.clone();
        let done = if after.is_empty() {
            Self::insert(executor, &schema, job, now).await?
        } else {
            let ids =
                <E::Database as Backend>::enqueue_after(executor, &schema, vec![job], after, now)
                    .await?;
            Enqueued {
                id: ids[0],
                outcome: EnqueueOutcome::Inserted,
            }
        };
        if done.outcome == EnqueueOutcome::Inserted {
            crate::telemetry::enqueued(J::TASK_TYPE, &queue, 1);
        }
        Ok(done)
    }

    async fn insert<'e, E: Executor<'e>>(
        executor: E,
        schema: &Schema,
        job: NewJob,
        now: DateTime<Utc>,
    ) -> Result<Enqueued> {
        // A pool behind a transaction pooler says so: its statements then run unnamed, in
        // a transaction (`postgres::post_one`).
        let keep = executor.keeps_statements();
        with_keeps(keep, Self::insert_on(executor, schema, job, now)).await
    }

    async fn insert_on<'e, E: Executor<'e>>(
        executor: E,
        schema: &Schema,
        job: NewJob,
        now: DateTime<Utc>,
    ) -> Result<Enqueued> {
        match job.unique_mode {
            Some(mode) => {
                let (id, inserted, running) =
                    <E::Database as Backend>::enqueue_unique(executor, schema, job, mode, now)
                        .await?;
                let outcome = match (inserted, mode, running) {
                    (true, _, _) => EnqueueOutcome::Inserted,
                    (false, UniqueMode::Restart, true) => EnqueueOutcome::RerunScheduled,
                    (false, UniqueMode::Restart | UniqueMode::Replace, false) => {
                        EnqueueOutcome::Updated
                    }
                    (false, _, _) => EnqueueOutcome::Duplicate,
                };
                Ok(Enqueued { id, outcome })
            }
            None => {
                let id = job.id;
                <E::Database as Backend>::enqueue_one(executor, schema, job, now).await?;
                Ok(Enqueued {
                    id,
                    outcome: EnqueueOutcome::Inserted,
                })
            }
        }
    }
}

/// What [`Enqueue::enqueue_outcome`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EnqueueOutcome {
    /// A new job was stored.
    Inserted,
    /// A live job holds the key; it was left as it was ([`UniqueMode::Skip`], or
    /// [`UniqueMode::Replace`] while it runs).
    Duplicate,
    /// A waiting job with the key took the new payload (and, for replace, run-at).
    Updated,
    /// The running job with the key runs once more after the current run.
    RerunScheduled,
}

/// The job an enqueue stored or found, and what it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Enqueued {
    /// The new job's id, or that of the live job holding the unique key.
    pub id: Uuid,
    /// What happened.
    pub outcome: EnqueueOutcome,
}

/// Whether a string or key anywhere in `value` holds a NUL character.
/// `metadata` as sk takes it, at enqueue and in `Client::update`: a JSON object without a
/// NUL character; anything else is refused with [`Error::Invalid`].
pub(crate) fn metadata_map(
    metadata: serde_json::Value,
) -> Result<serde_json::Map<String, serde_json::Value>> {
    if has_nul(&metadata) {
        return Err(Error::invalid(
            "metadata",
            "holds a NUL character (\\u0000), which PostgreSQL's jsonb cannot store; sk refuses it on every backend",
        ));
    }
    match metadata {
        serde_json::Value::Object(map) => Ok(map),
        other => Err(Error::invalid(
            "metadata",
            format!("must be a JSON object, not {other}"),
        )),
    }
}

fn has_nul(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::String(s) => s.contains('\0'),
        serde_json::Value::Array(items) => items.iter().any(has_nul),
        serde_json::Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_nul_is_found_in_any_string_or_key_and_its_escape_as_text_is_not_one() {
        use serde_json::json;
        assert!(super::has_nul(&json!({"a": [1, {"b": "x\u{0}"}]})));
        assert!(super::has_nul(&json!({"a\u{0}": null})));
        assert!(!super::has_nul(&json!({"a": "\\u0000", "b": [0, "0"]})));
    }
}
