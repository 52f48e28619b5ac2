//! Testing jobs: build a [`JobContext`] or [`Data`](crate::Data) for a unit test, run a
//! job value through its handler ([`Runner::perform`]), run every due job of a test
//! database inline ([`drain`]), and list what was enqueued ([`enqueued`]).
//!
//! ```
//! use sk_runtime::testing::{Outcome, Runner};
//! use sk_runtime::{job, Data, JobError};
//!
//! struct Rates { eur: f64 }
//!
//! #[job(max_attempts = 3)]
//! async fn convert(cents: i64, rates: Data<Rates>) -> Result<i64, JobError> {
//!     if cents < 0 {
//!         return Err(JobError::fatal("a negative amount"));
//!     }
//!     Ok((cents as f64 * rates.eur) as i64)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let runner = Runner::new().data(Rates { eur: 0.5 });
//! // Through the handler, as a worker runs it: payload round trip, injected data,
//! // timeout and panic handling, and what the worker would do next.
//! assert_eq!(runner.perform(Convert::new(300)).await.output::<i64>(), Some(150));
//! assert!(matches!(runner.perform(Convert::new(-1)).await, Outcome::Failed { .. }));
//!
//! // Or call the fn itself, with data built for the test.
//! assert_eq!(convert(10, Data::new(Rates { eur: 2.0 })).await.unwrap(), 20);
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::clock::{Clock, SharedClock, SystemClock};
use crate::error::{Error, JobError, Result};
use crate::job::{Job, JobContext, Runtime};
use crate::registry::{DataMap, HandlerInput};
use crate::store::{Pool, Schema};
use crate::transaction::TxSource;
pub use crate::worker::run::{Outcome, Run};
use crate::worker::Worker;

/// Runs job values through their handlers, without a queue: the worker's own run path
/// (payload round trip, injected arguments, timeout, panics caught, layers), with the
/// context and data a test gives. A job that takes a transaction, or enqueues through its context,
/// needs [`Runner::pool`]; its transaction commits when it succeeds.
pub struct Runner {
    data: DataMap,
    attempt: i32,
    max_attempts: Option<i32>,
    tenant: Option<String>,
    correlation_id: Option<String>,
    metadata: Option<serde_json::Value>,
    timeout: Option<Duration>,
    pool: Option<Pool>,
    schema: Schema,
    clock: SharedClock,
    layers: Vec<Arc<dyn crate::Layer>>,
    inputs: Option<Vec<Option<String>>>,
}

impl Default for Runner {
    fn default() -> Self {
        Self::new()
    }
}

impl Runner {
    /// A runner for attempt 1, without data, tenant, correlation id or database.
    pub fn new() -> Self {
        Runner {
            data: DataMap::default(),
            attempt: 1,
            max_attempts: None,
            tenant: None,
            correlation_id: None,
            metadata: None,
            timeout: None,
            inputs: None,
            pool: None,
            schema: Schema::default(),
            clock: Arc::new(SystemClock),
            layers: Vec::new(),
        }
    }

    /// Shared data for the job's `Data<T>` arguments, as [`WorkerBuilder::data`](crate::WorkerBuilder::data).
    #[must_use]
    pub fn data<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.data.insert(value);
        self
    }

    /// The run's attempt number (1 for the first run).
    #[must_use]
    pub fn attempt(mut self, attempt: i32) -> Self {
        self.attempt = attempt;
        self
    }

    /// Overrides the job type's attempt limit.
    #[must_use]
    pub fn max_attempts(mut self, attempts: i32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// The job's tenant.
    #[must_use]
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = Some(tenant.into());
        self
    }

    /// The job's correlation id.
    #[must_use]
    pub fn correlation_id(mut self, id: impl Into<String>) -> Self {
        self.correlation_id = Some(id.into());
        self
    }

    /// The job's metadata, a JSON object.
    #[must_use]
    pub fn metadata(mut self, metadata: serde_json::Value) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// Overrides the job type's run-time limit.
    #[must_use]
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// Runs the jobs through `layer`, inside the layers given before it, as
    /// [`WorkerBuilder::layer`](crate::WorkerBuilder::layer) does.
    #[must_use]
    pub fn layer(mut self, layer: impl crate::Layer) -> Self {
        self.layers.push(Arc::new(layer));
        self
    }

    /// A database for the job's transaction and for [`JobContext::enqueue`] (migrated,
    /// for the enqueues).
    #[must_use]
    pub fn pool(mut self, pool: impl Into<Pool>) -> Self {
        self.pool = Some(pool.into());
        self
    }

    /// The schema [`JobContext::enqueue`] writes to (default `public.sk_*`).
    #[must_use]
    pub fn schema(mut self, schema: Schema) -> Self {
        self.schema = schema;
        self
    }

    /// Adds the output of one job the job waited on, for its
    /// [`Input<T>`](crate::Input) or [`Inputs<T>`](crate::Inputs) argument (call it once
    /// per dependency, in order). Without it, the job runs as one enqueued on its own.
    ///
    /// # Panics
    /// The value does not serialize to JSON.
    #[must_use]
    pub fn input(mut self, output: impl serde::Serialize) -> Self {
        let json = serde_json::to_string(&output).expect("a job's output serializes to JSON");
        self.inputs.get_or_insert_with(Vec::new).push(Some(json));
        self
    }

    /// The clock of the job's enqueues and posted time (default: the system clock).
    #[must_use]
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// A context as the worker would give a run of `J`, to call the job fn directly.
    pub fn context<J: Job>(&self) -> JobContext {
        self.context_of(J::TASK_TYPE, &J::OPTIONS)
    }

    fn context_of(&self, task_type: &str, options: &crate::job::JobOptions) -> JobContext {
        JobContext {
            id: Uuid::now_v7(),
            task_type: task_type.into(),
            queue: options.queue.into(),
            attempt: self.attempt,
            max_attempts: self.max_attempts.unwrap_or(options.max_attempts),
            priority: options.priority,
            posted_at: self.clock.now(),
            attempted_at: self.clock.now(),
            tenant: self.tenant.as_deref().map(Into::into),
            correlation_id: self.correlation_id.as_deref().map(Into::into),
            metadata: self.metadata.clone().map(Arc::new),
            cancel: CancellationToken::new(),
            stop: Arc::default(),
            runtime: self.pool.as_ref().map(|pool| {
                Arc::new(Runtime {
                    pool: pool.clone(),
                    schema: self.schema.clone(),
                })
            }),
            writes: Arc::default(),
        }
    }

    /// Runs `job` through its handler once and says what a worker would do next.
    ///
    /// # Panics
    /// If `J` is not registered (it always is: `#[job]` registers it at link time).
    pub async fn perform<J: Job>(&self, job: J) -> Outcome {
        let registration = crate::registry::find(J::TASK_TYPE)
            .expect("every #[job] type registers itself at link time");
        match serde_json::to_string(&job) {
            Ok(payload) => self.run(registration, Some(payload)).await,
            Err(e) => Outcome::Failed {
                error: JobError::fatal(format!("the payload does not serialize: {e}")),
            },
        }
    }

    /// Runs a stored payload (a row's `task_payload`, as `sk job ID --json` prints it)
    /// through the handler of `task_type`, as a worker runs the row: a payload that does
    /// not match the job's arguments fails for good with an error of kind `"payload"`.
    /// For replaying a job of production in a test.
    ///
    /// ```
    /// # use sk_runtime::{job, JobError, testing::Runner};
    /// #[job]
    /// async fn resize(width: u32) -> Result<u32, JobError> { Ok(width / 2) }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> sk_runtime::Result<()> {
    /// let runner = Runner::new();
    /// assert_eq!(runner.perform_raw("resize", r#"{"width":640}"#).await?.output::<u32>(), Some(320));
    /// let refused = runner.perform_raw("resize", r#"{"width":-1}"#).await?;
    /// assert_eq!(refused.error().map(|e| e.kind()), Some("payload"));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// No job of `task_type` is linked into this binary.
    pub async fn perform_raw(&self, task_type: &str, payload: &str) -> Result<Outcome> {
        let registration = crate::registry::find(task_type).ok_or_else(|| {
            Error::invalid(
                "task type",
                format!(
                    "no #[job] named {task_type:?} is linked into this binary (it has: {})",
                    crate::registry::names().join(", ")
                ),
            )
        })?;
        Ok(self.run(registration, Some(payload.to_owned())).await)
    }

    async fn run(
        &self,
        registration: &'static crate::registry::Registration,
        mut payload: Option<String>,
    ) -> Outcome {
        // A stored payload's sealed arguments, opened as a worker would.
        if registration.options.encrypted {
            let keys = crate::sealed::process_keys();
            let task_type = registration.task_type;
            if let Err(error) =
                crate::sealed::open_claimed(keys.as_deref(), task_type, &mut payload)
            {
                return Outcome::Failed { error };
            }
        }
        let mut ctx = self.context_of(registration.task_type, &registration.options);
        if ctx.tenant.is_none() {
            // The tenant the job's arguments give it, as its enqueue would.
            let derived = payload.as_deref().map(registration.validate);
            ctx.tenant = derived.and_then(Result::ok).flatten().map(Into::into);
        }
        let max_attempts = ctx.max_attempts;
        let input = HandlerInput {
            payload,
            ctx,
            data: Arc::new(DataMap(self.data.0.clone())),
            transaction: self.pool.clone().map(TxSource::commit_only),
            inputs: self.inputs.clone(),
        };
        let limit = self.timeout.or(registration.options.timeout);
        let ctx = input.ctx.clone();
        let handler =
            crate::worker::executor::run_handler(registration, input, limit, self.clock.clone());
        let result = if self.layers.is_empty() {
            handler.await
        } else {
            let stack: crate::layer::Stack = self.layers.iter().cloned().collect();
            crate::layer::run(&stack, &ctx, Box::pin(handler)).await
        };
        Outcome::of(
            result,
            self.attempt,
            max_attempts,
            &registration.options.backoff,
        )
    }
}

/// Every run of a [`drain`], in order.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Drained {
    /// The runs, in the order they ran.
    pub runs: Vec<Run>,
}

impl Drained {
    /// How many runs succeeded.
    pub fn succeeded(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Succeeded { .. }))
    }

    /// How many runs failed and will run again.
    pub fn retried(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Retry { .. }))
    }

    /// How many runs failed for good.
    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Failed { .. }))
    }

    /// The runs of one task type.
    pub fn of_type<'a>(&'a self, task_type: &'a str) -> impl Iterator<Item = &'a Run> + 'a {
        self.runs.iter().filter(move |r| r.task_type == task_type)
    }

    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.runs.iter().filter(|r| f(&r.outcome)).count()
    }
}

/// The most runs one [`drain`] makes before it calls the queue endless.
pub const MAX_DRAIN_RUNS: usize = 100_000;

/// Runs `worker`'s due jobs here, one at a time, until none is due at its clock's "now",
/// including the jobs those jobs enqueue; returns the runs in order. Each run is a
/// worker's: claimed (by priority, then due time, then id), run with the worker's data,
/// timeouts and panic handling, and recorded (success, retry at its backoff, failure).
/// With a [`ManualClock`](crate::ManualClock) on the worker, a retry or a delayed job waits
/// until the test moves the clock and drains again; the jobs the drained jobs enqueue
/// take their time from it too, while a job the test enqueues itself takes the system
/// time, so start the clock after those enqueues (or move it past them). Cron schedules
/// do not tick in a drain. Migrates first, unless the worker was built with
/// `auto_migrate(false)`.
///
/// ```no_run
/// # use sk_runtime::{job, JobContext, JobError, ManualClock, Worker};
/// # #[job] async fn welcome(user: i64) {}
/// # #[job] async fn signup(user: i64, ctx: JobContext) -> Result<(), JobError> {
/// #     ctx.enqueue(Welcome::new(user)).await?; Ok(()) }
/// # async fn f(pool: sqlx::PgPool) -> sk_runtime::Result<()> {
/// Signup::new(7).enqueue(&pool).await?;
/// let clock = ManualClock::new(chrono::Utc::now());
/// let worker = Worker::builder(pool.clone()).clock(clock.clone()).build()?;
/// let drained = sk_runtime::testing::drain(&worker).await?;
/// assert_eq!(drained.succeeded(), 2); // signup, then the welcome it enqueued
/// # Ok(()) }
/// ```
///
/// # Errors
/// The database fails; [`Error::Invalid`] after [`MAX_DRAIN_RUNS`] runs (a job that
/// enqueues itself without end).
pub async fn drain(worker: &Worker) -> Result<Drained> {
    let shared = worker.shared();
    if shared.config.auto_migrate {
        shared.store.migrate().await?;
    }
    let mut drained = Drained::default();
    while let Some(run) = crate::worker::run_one_due(shared).await? {
        drained.runs.push(run);
        if drained.runs.len() >= MAX_DRAIN_RUNS {
            return Err(Error::invalid(
                "drain",
                format!("{MAX_DRAIN_RUNS} runs and jobs are still due: does a job enqueue itself without end?"),
            ));
        }
    }
    Ok(drained)
}

/// The waiting jobs of type `J` in `pool`'s default schema, oldest first, as values:
/// what a test asserts was enqueued.
///
/// ```no_run
/// # use sk_runtime::job;
/// # #[job] async fn welcome(user: i64) {}
/// # async fn f(pool: sqlx::PgPool) -> sk_runtime::Result<()> {
/// Welcome::new(7).enqueue(&pool).await?;
/// let waiting = sk_runtime::testing::enqueued::<Welcome>(&pool).await?;
/// assert_eq!(waiting.iter().map(|w| w.user).collect::<Vec<_>>(), [7]);
/// # Ok(()) }
/// ```
///
/// # Errors
/// The database fails; [`Error::Invalid`] for a stored payload that does not read as `J`
/// (or, sealed, does not open with the process's payload keys).
pub async fn enqueued<J: Job>(pool: impl Into<Pool>) -> Result<Vec<J>> {
    let pool = pool.into();
    let client = crate::Client::new(pool.clone());
    let info = crate::QueueInfo::new(pool);
    let filter = crate::JobFilter::new().task_type(J::TASK_TYPE);
    let mut ids = Vec::new();
    let mut after = None;
    loop {
        let page = client.jobs(&filter, after, crate::MAX_PAGE).await?;
        // Waiting: new or retrying, not running, not ended.
        ids.extend(
            page.jobs
                .iter()
                .filter(|j| !j.status().is_final() && j.status() != crate::JobStatus::Processing)
                .map(|j| j.id),
        );
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let mut jobs = Vec::with_capacity(ids.len());
    for id in ids.into_iter().rev() {
        let Some(record) = info.job(id).await? else {
            continue; // it ran since
        };
        // Sealed arguments (`#[job(encrypted)]`) opened with the process's keys.
        let mut payload = record.payload;
        if J::OPTIONS.encrypted {
            let keys = crate::sealed::process_keys();
            crate::sealed::open_claimed(keys.as_deref(), J::TASK_TYPE, &mut payload)
                .map_err(|e| Error::invalid("payload", format!("job {id}: {}", e.message())))?;
        }
        let payload = payload.unwrap_or_default();
        jobs.push(serde_json::from_str(&payload).map_err(|e| {
            Error::invalid(
                "payload",
                format!("job {id} of `{}` does not read: {e}", J::TASK_TYPE),
            )
        })?);
    }
    Ok(jobs)
}
