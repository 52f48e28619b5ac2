//! Workflows: jobs that run after other jobs have succeeded and receive their outputs.
//!
//! A job that waits on others is enqueued at once, in the state
//! [`JobStatus::Pending`](crate::JobStatus::Pending), and becomes due in the transaction
//! that records the success of its last dependency. It receives their outputs (each
//! dependency's `Ok` value) through an [`Input<T>`] argument (one dependency) or an
//! [`Inputs<T>`] argument (any number, in the order given). A dependency that fails for
//! good or is cancelled ends its dependants in the same transaction, fatal or cancelled,
//! naming it; and theirs in turn.
//!
//! [`Workflow`] builds stages in order, each waiting on the whole stage before it, and
//! checks at compile time that a stage takes what the stage before it returns;
//! [`Enqueue::after`](crate::Enqueue::after) makes any job wait on jobs by id.
//!
//! ```no_run
//! use sk_runtime::{job, Input, Inputs, JobError, Workflow};
//!
//! #[job(queue = "images")]
//! async fn resize(path: String) -> Result<String, JobError> {
//!     Ok(format!("{path}.thumb"))
//! }
//!
//! #[job(queue = "albums")]
//! async fn build_album(name: String, thumbs: Inputs<String>) -> Result<usize, JobError> {
//!     Ok(thumbs.len())
//! }
//!
//! #[job]
//! async fn announce(count: Input<usize>) -> Result<(), JobError> {
//!     println!("an album of {} pictures", *count);
//!     Ok(())
//! }
//!
//! # async fn f(pool: sqlx::PgPool, paths: Vec<String>) -> sk_runtime::Result<()> {
//! let ids = Workflow::fan_out(paths.into_iter().map(Resize::new))
//!     .then(BuildAlbum::new("summer".into()))
//!     .then(Announce::new())
//!     .enqueue(&pool)
//!     .await?;
//! println!("the album is job {}", ids.stages[1][0]);
//! # Ok(()) }
//! ```

use std::marker::PhantomData;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use uuid::Uuid;

use crate::enqueue::Enqueue;
use crate::error::{JobError, Result};
use crate::job::Job;
use crate::job::Requirement;
use crate::registry::{HandlerInput, Inject};
use crate::store::{Backend, Executor, NewJob, Schema};

/// The output of the one job this job waited on, as a job fn's argument: a job that
/// takes it runs after exactly one other (`Workflow::then` after a one-job stage, or
/// `Enqueue::after` with one id). Derefs to the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input<T>(T);

impl<T> Input<T> {
    /// The value.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> std::ops::Deref for Input<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The outputs of every job this job waited on, in the order they were given (a fan-in),
/// as a job fn's argument. Derefs to a slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inputs<T>(Vec<T>);

impl<T> Inputs<T> {
    /// The values.
    pub fn into_inner(self) -> Vec<T> {
        self.0
    }
}

impl<T> std::ops::Deref for Inputs<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T> IntoIterator for Inputs<T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// The inputs of a run, decoded as `T`: a fatal error if the job did not wait on other
/// jobs or an output does not decode.
fn decode_all<T: DeserializeOwned>(
    input: &HandlerInput,
    argument: &str,
) -> Result<Vec<T>, JobError> {
    let task_type = &input.ctx.task_type;
    let Some(outputs) = &input.inputs else {
        return Err(JobError::fatal(format!(
            "`{task_type}` takes {argument}: it runs after other jobs (a Workflow stage, or Enqueue::after), and this one was enqueued on its own"
        ))
        .with_kind("dependency"));
    };
    outputs
        .iter()
        .enumerate()
        .map(|(i, output)| {
            serde_json::from_str(output.as_deref().unwrap_or("null")).map_err(|e| {
                JobError::fatal(format!(
                    "`{task_type}`: the output of its dependency {} does not decode as {argument}: {e}",
                    i + 1
                ))
                .with_kind("dependency")
            })
        })
        .collect()
}

impl<T: DeserializeOwned> Inject for Input<T> {
    fn inject(input: &HandlerInput) -> Result<Self, JobError> {
        let argument = format!("Input<{}>", std::any::type_name::<T>());
        let all = decode_all::<T>(input, &argument)?;
        let waited = all.len();
        match <[T; 1]>::try_from(all) {
            Ok([one]) => Ok(Input(one)),
            Err(_) => Err(JobError::fatal(format!(
                "`{}` takes {argument}, the output of one job, and waited on {waited}; take Inputs<T> for any number",
                input.ctx.task_type
            ))
            .with_kind("dependency")),
        }
    }
    fn requirement() -> Option<Requirement> {
        None
    }
}

impl<T: DeserializeOwned> Inject for Inputs<T> {
    fn inject(input: &HandlerInput) -> Result<Self, JobError> {
        let argument = format!("Inputs<{}>", std::any::type_name::<T>());
        decode_all(input, &argument).map(Inputs)
    }
    fn requirement() -> Option<Requirement> {
        None
    }
}

/// A stage of one job: the next stage's jobs may take its output as [`Input<T>`].
#[derive(Debug)]
pub enum One {}

/// A stage of any number of jobs: the next stage's jobs take their outputs as
/// [`Inputs<T>`].
#[derive(Debug)]
pub enum Many {}

/// Whether a job can follow a stage whose jobs return `O` (`N`: [`One`] job or
/// [`Many`]). `#[job]` implements it: a job that takes `Input<O>` follows one job
/// returning `O`; a job that takes `Inputs<O>` follows any stage returning `O`; a job
/// that takes neither follows any stage (it only waits).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot follow a stage whose jobs return `{O}` ({N})",
    label = "its `Input<T>` or `Inputs<T>` argument does not take what the stage before returns",
    note = "a job that takes `Input<T>` follows one job returning `T`; after many jobs (`fan_out`), take `Inputs<T>`"
)]
pub trait Accepts<O, N> {}

/// How a stage's job becomes a row to insert, once the enqueue's time is known.
type Build = Box<dyn FnOnce(DateTime<Utc>) -> Result<NewJob> + Send>;

fn build<J: Job>(job: impl Into<Enqueue<J>>) -> Build {
    let job: Enqueue<J> = job.into();
    Box::new(move |now| job.into_new_job(now))
}

/// Jobs in stages: each stage's jobs wait on every job of the stage before and receive
/// their outputs. The type says what the last stage returns (`O`) and whether it is one
/// job or many (`N`), so a stage that does not take what the one before returns is a
/// compile error. Nothing is stored until [`Workflow::enqueue`], which stores every stage
/// in one transaction.
///
/// Seed 003's pipeline, stages in order each on its own queue:
///
/// ```no_run
/// # use sk_runtime::{job, Input, JobError, Workflow};
/// # #[job(queue = "fetch")] async fn fetch(url: String) -> Result<String, JobError> { Ok(url) }
/// # #[job(queue = "parse")] async fn parse(page: Input<String>) -> Result<Vec<String>, JobError> { Ok(vec![]) }
/// # #[job(queue = "store")] async fn store(links: Input<Vec<String>>) -> Result<(), JobError> { Ok(()) }
/// # async fn f(pool: sqlx::PgPool) -> sk_runtime::Result<()> {
/// Workflow::start(Fetch::new("https://example.com".into()))
///     .then(Parse::new())
///     .then(Store::new())
///     .enqueue(&pool).await?;
/// # Ok(()) }
/// ```
#[must_use = "nothing is stored until `.enqueue(..)` is awaited"]
pub struct Workflow<O, N> {
    stages: Vec<Vec<Build>>,
    schema: Option<Schema>,
    _stage: PhantomData<fn() -> (O, N)>,
}

/// The ids of a workflow's jobs, stage by stage, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkflowIds {
    /// The workflow's own id, for [`Client::workflow`](crate::Client::workflow) and the
    /// dashboard's page of it.
    pub workflow: Uuid,
    /// One list per stage.
    pub stages: Vec<Vec<Uuid>>,
}

impl WorkflowIds {
    /// The ids of the last stage.
    pub fn last(&self) -> &[Uuid] {
        self.stages.last().map_or(&[], Vec::as_slice)
    }
}

impl Workflow<(), Many> {
    /// A workflow whose first stage is one job.
    pub fn start<J: Job>(job: impl Into<Enqueue<J>>) -> Workflow<J::Output, One> {
        Workflow {
            stages: vec![vec![build(job)]],
            schema: None,
            _stage: PhantomData,
        }
    }

    /// A workflow whose first stage is many jobs of one type (run in parallel).
    pub fn fan_out<J, I>(jobs: I) -> Workflow<J::Output, Many>
    where
        J: Job,
        I: IntoIterator,
        I::Item: Into<Enqueue<J>>,
    {
        Workflow {
            stages: vec![jobs.into_iter().map(build).collect()],
            schema: None,
            _stage: PhantomData,
        }
    }
}

impl<O, N> Workflow<O, N> {
    /// Adds a stage of one job, run once every job of the stage before has succeeded.
    pub fn then<J>(mut self, job: impl Into<Enqueue<J>>) -> Workflow<J::Output, One>
    where
        J: Job + Accepts<O, N>,
    {
        self.stages.push(vec![build(job)]);
        self.retype()
    }

    /// Adds a stage of many jobs of one type, each run once every job of the stage
    /// before has succeeded.
    pub fn then_fan_out<J, I>(mut self, jobs: I) -> Workflow<J::Output, Many>
    where
        J: Job + Accepts<O, N>,
        I: IntoIterator,
        I::Item: Into<Enqueue<J>>,
    {
        self.stages.push(jobs.into_iter().map(build).collect());
        self.retype()
    }

    /// Stores the workflow in another schema/prefix than the default `public.sk_*`.
    pub fn with_schema(mut self, schema: &Schema) -> Self {
        self.schema = Some(schema.clone());
        self
    }

    fn retype<P, M>(self) -> Workflow<P, M> {
        Workflow {
            stages: self.stages,
            schema: self.schema,
            _stage: PhantomData,
        }
    }

    /// Stores every stage in one transaction (a savepoint of the executor's own, if it
    /// is one): the first stage's jobs are due as their options say, the others wait.
    /// Returns the jobs' ids, stage by stage.
    ///
    /// # Errors
    /// As [`Enqueue::enqueue`](crate::Enqueue::enqueue); [`Error::Invalid`](crate::Error::Invalid)
    /// for a later stage's job with a unique key or a run-at time (it runs when the stage
    /// before has succeeded). Nothing is stored then.
    pub async fn enqueue<'e, E: Executor<'e>>(self, executor: E) -> Result<WorkflowIds> {
        let schema = self.schema.unwrap_or_default();
        let now = crate::job::enqueue_now();
        let keep = executor.keeps_statements();
        let mut tx = executor.begin().await?;
        let mut stages: Vec<Vec<Uuid>> = Vec::with_capacity(self.stages.len());
        let mut counts = Vec::new();
        for stage in self.stages {
            let jobs = stage
                .into_iter()
                .map(|build| build(now))
                .collect::<Result<Vec<NewJob>>>()?;
            counts.extend(jobs.iter().map(|j| (j.task_type.clone(), j.queue.clone())));
            let ids = match stages.last() {
                None => {
                    let many = <E::Database as Backend>::enqueue_many(&mut tx, &schema, jobs, now);
                    crate::store::with_keeps(keep, many).await?
                }
                Some(before) => {
                    <E::Database as Backend>::enqueue_after(
                        &mut tx,
                        &schema,
                        jobs,
                        before.clone(),
                        now,
                    )
                    .await?
                }
            };
            stages.push(ids);
        }
        let workflow = Uuid::now_v7();
        <E::Database as Backend>::create_workflow(&mut tx, &schema, workflow, stages.clone(), now)
            .await?;
        tx.commit().await?;
        for (task_type, queue) in counts {
            crate::telemetry::enqueued(&task_type, &queue, 1);
        }
        Ok(WorkflowIds { workflow, stages })
    }
}
