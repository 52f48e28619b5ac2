//! Batches: jobs enqueued together and counted as their outcomes are recorded, with
//! callbacks that run once when the batch's event comes.
//!
//! ```no_run
//! use sk_runtime::{job, Batch, BatchDone, JobError};
//!
//! #[job(queue = "imports")]
//! async fn import_row(row: u32) -> Result<(), JobError> {
//!     Ok(())
//! }
//!
//! #[job]
//! async fn import_done(file: String, batch: BatchDone) -> Result<(), JobError> {
//!     println!("{file}: {} of {} rows imported", batch.succeeded, batch.total);
//!     Ok(())
//! }
//!
//! # async fn f(pool: sqlx::PgPool) -> sk_runtime::Result<()> {
//! let ids = Batch::new()
//!     .description("import of rows.csv")
//!     .add_all((0..10_000).map(ImportRow::new))
//!     .on_complete(ImportDone::new("rows.csv".into()))
//!     .enqueue(&pool)
//!     .await?;
//! println!("batch {}", ids.batch);
//! # Ok(()) }
//! ```
//!
//! A batch's jobs are counted in the transactions that record their outcomes: a few
//! statements per completed set of jobs, whatever the batch's size, and no round trip
//! per job. A callback is posted by the transaction that records the outcome bringing
//! its event, so it is posted once, or not at all if that transaction rolls back.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::enqueue::Enqueue;
use crate::error::{Error, JobError, Result};
use crate::job::{Job, Requirement};
use crate::model::BatchEvent;
use crate::registry::{HandlerInput, Inject};
use crate::store::{Backend, Executor, NewJob, Schema};

/// How a batch's job becomes a row to insert, once the enqueue's time is known.
type Build = Box<dyn FnOnce(DateTime<Utc>) -> Result<NewJob> + Send>;

fn build<J: Job>(job: impl Into<Enqueue<J>>) -> Build {
    let job: Enqueue<J> = job.into();
    Box::new(move |now| {
        if job.waits() {
            return Err(Error::invalid(
                "batch",
                format!(
                    "job `{}` waits on other jobs (`after`); a batch's jobs and callbacks wait on nothing",
                    J::TASK_TYPE
                ),
            ));
        }
        job.into_new_job(now)
    })
}

/// Jobs enqueued together and counted as one: [`on_success`](Batch::on_success) runs a
/// job once every job of the batch has succeeded, [`on_complete`](Batch::on_complete) once
/// every one has ended (succeeded, failed for good or cancelled), and
/// [`on_death`](Batch::on_death) at the first that fails for good. Each callback runs at
/// most once, and receives the batch's counts as a [`BatchDone`] argument. Nothing is
/// stored until [`Batch::enqueue`], which stores the batch in one transaction.
///
/// An operator's retry of a batch's job that failed for good or was cancelled counts it
/// as live again: if it then succeeds, and so has every other job, the success callback
/// runs (as Sidekiq's batches do). A callback that has run does not run again.
#[must_use = "nothing is stored until `.enqueue(..)` is awaited"]
pub struct Batch {
    jobs: Vec<Build>,
    callbacks: Vec<(BatchEvent, Build)>,
    description: Option<String>,
    schema: Option<Schema>,
}

impl Default for Batch {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("jobs", &self.jobs.len())
            .field(
                "callbacks",
                &self.callbacks.iter().map(|c| c.0).collect::<Vec<_>>(),
            )
            .field("description", &self.description)
            .finish()
    }
}

/// The ids of a batch and of its jobs and callbacks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchIds {
    /// The batch's id (`Client::batch`).
    pub batch: Uuid,
    /// Its jobs' ids, in the order added.
    pub jobs: Vec<Uuid>,
    /// Each callback's event and the id its job will have once posted.
    pub callbacks: Vec<(BatchEvent, Uuid)>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Batch {
            jobs: Vec::new(),
            callbacks: Vec::new(),
            description: None,
            schema: None,
        }
    }

    /// What the batch is, shown with it (`sk batch`, the dashboard).
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = Some(text.into());
        self
    }

    /// Adds a job.
    // Named as Sidekiq's and Oban's batches name it; a batch is no sum.
    #[allow(clippy::should_implement_trait)]
    pub fn add<J: Job>(mut self, job: impl Into<Enqueue<J>>) -> Self {
        self.jobs.push(build(job));
        self
    }

    /// Adds jobs of one type.
    pub fn add_all<J, I>(mut self, jobs: I) -> Self
    where
        J: Job,
        I: IntoIterator,
        I::Item: Into<Enqueue<J>>,
    {
        self.jobs.extend(jobs.into_iter().map(build));
        self
    }

    fn on<J: Job>(mut self, event: BatchEvent, job: impl Into<Enqueue<J>>) -> Self {
        self.callbacks.retain(|(e, _)| *e != event);
        self.callbacks.push((event, build(job)));
        self
    }

    /// Runs `job` once every job of the batch has succeeded (replacing an earlier success
    /// callback).
    pub fn on_success<J: Job>(self, job: impl Into<Enqueue<J>>) -> Self {
        self.on(BatchEvent::Success, job)
    }

    /// Runs `job` once every job of the batch has ended: succeeded, failed for good or
    /// been cancelled.
    pub fn on_complete<J: Job>(self, job: impl Into<Enqueue<J>>) -> Self {
        self.on(BatchEvent::Complete, job)
    }

    /// Runs `job` when a job of the batch first fails for good.
    pub fn on_death<J: Job>(self, job: impl Into<Enqueue<J>>) -> Self {
        self.on(BatchEvent::Death, job)
    }

    /// Stores the batch in another schema/prefix than the default `public.sk_*`.
    pub fn with_schema(mut self, schema: &Schema) -> Self {
        self.schema = Some(schema.clone());
        self
    }

    /// Stores the batch, its jobs (due as their options say) and its callbacks, in one
    /// transaction (a savepoint of the executor's own, if it is one).
    ///
    /// # Errors
    /// As [`Enqueue::enqueue`](crate::Enqueue::enqueue); [`Error::Invalid`] for a batch
    /// without jobs, a job with a unique key, a period or `after`, and a callback with
    /// a run-at time. Nothing is stored then.
    pub async fn enqueue<'e, E: Executor<'e>>(self, executor: E) -> Result<BatchIds> {
        let schema = self.schema.unwrap_or_default();
        let now = crate::job::enqueue_now();
        if self.jobs.is_empty() {
            return Err(Error::invalid(
                "batch",
                "a batch needs at least one job (`add`)",
            ));
        }
        let jobs = self
            .jobs
            .into_iter()
            .map(|build| build(now))
            .collect::<Result<Vec<NewJob>>>()?;
        for job in &jobs {
            crate::store::batch::check_job(job, false, now)?;
        }
        let mut callbacks = Vec::with_capacity(self.callbacks.len());
        for (event, build) in self.callbacks {
            let job = build(now)?;
            crate::store::batch::check_job(&job, true, now)?;
            callbacks.push((event, job));
        }
        callbacks.sort_by_key(|(event, _)| event.code());
        let counts: Vec<(String, String)> = jobs
            .iter()
            .map(|j| (j.task_type.to_string(), j.queue.clone()))
            .collect();
        let batch = Uuid::now_v7();
        let posted: Vec<(BatchEvent, Uuid)> = callbacks.iter().map(|(e, j)| (*e, j.id)).collect();
        let keep = executor.keeps_statements();
        let mut tx = executor.begin().await?;
        let many = <E::Database as Backend>::enqueue_many(&mut tx, &schema, jobs, now);
        let ids = crate::store::with_keeps(keep, many).await?;
        <E::Database as Backend>::create_batch(
            &mut tx,
            &schema,
            batch,
            self.description,
            ids.clone(),
            callbacks,
            now,
        )
        .await?;
        tx.commit().await?;
        for (task_type, queue) in counts {
            crate::telemetry::enqueued(&task_type, &queue, 1);
        }
        Ok(BatchIds {
            batch,
            jobs: ids,
            callbacks: posted,
        })
    }
}

/// A batch's counts, as a callback's argument: the batch's state when the outcome that
/// brought the callback's event was recorded. Not part of the payload; a job that takes
/// it and runs other than as a callback fails for good (kind `batch`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[non_exhaustive]
pub struct BatchDone {
    /// The batch's id.
    pub id: Uuid,
    /// The event this callback waited for.
    #[serde(deserialize_with = "event_named")]
    pub event: BatchEvent,
    /// The batch's jobs.
    pub total: i64,
    /// Those that had succeeded.
    pub succeeded: i64,
    /// Those that had failed for good.
    pub failed: i64,
    /// Those that had been cancelled.
    pub cancelled: i64,
}

fn event_named<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<BatchEvent, D::Error> {
    let name = <String as serde::Deserialize>::deserialize(d)?;
    BatchEvent::from_name(&name)
        .ok_or_else(|| serde::de::Error::custom(format!("no batch event `{name}`")))
}

impl BatchDone {
    /// The batch's counts in a job's metadata (under `batch`), if it runs as a callback.
    pub(crate) fn of(metadata: Option<&serde_json::Value>) -> Option<Self> {
        serde_json::from_value(metadata?.get("batch")?.clone()).ok()
    }
}

impl Inject for BatchDone {
    fn inject(input: &HandlerInput) -> Result<Self, JobError> {
        BatchDone::of(input.ctx.metadata()).ok_or_else(|| {
            JobError::fatal(format!(
                "`{}` takes BatchDone: it runs as a batch's callback (Batch::on_success, on_complete, on_death), and this one was enqueued on its own",
                input.ctx.task_type
            ))
            .with_kind("batch")
        })
    }
    fn requirement() -> Option<Requirement> {
        None
    }
}
