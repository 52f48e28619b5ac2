//! What a job is: its type's options, the context it runs with, and shared data.

use std::any::{Any, TypeId};
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::error::JobError;
use crate::retry::Backoff;

/// The default number of attempts (first run plus retries) of a job.
pub const DEFAULT_MAX_ATTEMPTS: i32 = 25;

/// Implemented by every type `#[job]` generates; not meant to be implemented by hand.
pub trait Job: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The stable name stored in `task_type`.
    const TASK_TYPE: &'static str;
    /// The defaults from the `#[job(...)]` attribute.
    const OPTIONS: JobOptions;
    /// What a run returns on success (the fn's `Ok` type; `()` for none): the input of
    /// the jobs that wait on it ([`Workflow`](crate::Workflow)).
    type Output;

    /// The tenant the job's arguments give it (`#[job(tenant = account_id)]`: that
    /// argument, as text), which [`Enqueue`](crate::Enqueue) posts it with unless
    /// [`Enqueue::with_tenant`](crate::Enqueue::with_tenant) says otherwise; `None`
    /// without the attribute.
    fn tenant(&self) -> Option<String> {
        None
    }
}

/// An argument a job's tenant can be derived from (`#[job(tenant = arg)]`): text, an
/// integer, a UUID, or an `Option` of one (`None`: no tenant).
pub trait TenantKey {
    /// The tenant, as text.
    fn tenant_key(&self) -> Option<String>;
}

impl TenantKey for str {
    fn tenant_key(&self) -> Option<String> {
        Some(self.to_owned())
    }
}

impl TenantKey for String {
    fn tenant_key(&self) -> Option<String> {
        Some(self.clone())
    }
}

impl TenantKey for uuid::Uuid {
    fn tenant_key(&self) -> Option<String> {
        Some(self.to_string())
    }
}

impl<T: TenantKey + ?Sized> TenantKey for &T {
    fn tenant_key(&self) -> Option<String> {
        (**self).tenant_key()
    }
}

impl<T: TenantKey> TenantKey for Option<T> {
    fn tenant_key(&self) -> Option<String> {
        self.as_ref().and_then(TenantKey::tenant_key)
    }
}

macro_rules! integer_tenant_keys {
    ($($t:ty),*) => {
        $(impl TenantKey for $t {
            fn tenant_key(&self) -> Option<String> {
                Some(self.to_string())
            }
        })*
    };
}
integer_tenant_keys!(i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize);

/// A job type's defaults, from its `#[job(...)]` attribute.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct JobOptions {
    /// Queue name (default `"default"`).
    pub queue: &'static str,
    /// Lower runs first (default 0).
    pub priority: i32,
    /// First run plus retries (default [`DEFAULT_MAX_ATTEMPTS`]).
    pub max_attempts: i32,
    /// Delay before each retry.
    pub backoff: Backoff,
    /// Longest a run may take before it counts as a (recoverable) failure; none by default.
    pub timeout: Option<Duration>,
    /// `#[job(encrypted)]`: its arguments are stored sealed with the process's payload
    /// keys ([`PayloadKeys`](crate::PayloadKeys)) and opened only by a worker.
    pub encrypted: bool,
}

impl JobOptions {
    /// These options with sealed arguments (`#[job(encrypted)]`; used by the generated
    /// code).
    #[must_use]
    pub const fn sealed(mut self) -> Self {
        self.encrypted = true;
        self
    }
}

/// Builds a [`JobOptions`] (used by the generated code).
pub const fn options(
    queue: &'static str,
    priority: i32,
    max_attempts: Option<i32>,
    backoff: Backoff,
    timeout: Option<Duration>,
) -> JobOptions {
    let max_attempts = match max_attempts {
        Some(n) => n,
        None => DEFAULT_MAX_ATTEMPTS,
    };
    JobOptions {
        queue,
        priority,
        max_attempts,
        backoff,
        timeout,
        encrypted: false,
    }
}

/// What a running job knows about itself; take it as an argument of the job fn.
///
/// ```
/// use sk_runtime::{job, JobContext, JobError};
///
/// #[job]
/// async fn long_export(ctx: JobContext) -> Result<(), JobError> {
///     for _chunk in 0..100 {
///         if ctx.is_cancelled() {
///             // The worker is stopping: hand the job back without using an attempt;
///             // another worker (or this one after a restart) runs it again.
///             return Err(JobError::interrupted());
///         }
///         // ... export one chunk ...
///     }
///     tracing::info!(id = %ctx.id(), attempt = ctx.attempt(), "export done");
///     Ok(())
/// }
/// ```
#[derive(Debug, Clone)]
pub struct JobContext {
    pub(crate) id: Uuid,
    pub(crate) task_type: Arc<str>,
    pub(crate) queue: Arc<str>,
    pub(crate) attempt: i32,
    pub(crate) max_attempts: i32,
    pub(crate) priority: i32,
    pub(crate) posted_at: DateTime<Utc>,
    pub(crate) attempted_at: DateTime<Utc>,
    pub(crate) tenant: Option<Arc<str>>,
    pub(crate) correlation_id: Option<Arc<str>>,
    pub(crate) metadata: Option<Arc<serde_json::Value>>,
    pub(crate) cancel: CancellationToken,
    pub(crate) stop: Arc<std::sync::OnceLock<StopReason>>,
    /// The worker's database, for enqueues from the job; `None` in a unit test's context
    /// built without a pool.
    pub(crate) runtime: Option<Arc<Runtime>>,
    /// This run's own writes to its job: progress and steps.
    pub(crate) writes: Arc<RunWrites>,
}

/// What a run writes to its job while it runs, in one allocation per run: its progress
/// (`JobContext::progress`, in `progress.rs`) and its steps' outputs
/// (`JobContext::step`, in `steps.rs`).
#[derive(Debug, Default)]
pub(crate) struct RunWrites {
    pub(crate) progress: std::sync::Mutex<ProgressState>,
    /// The outputs of the job's steps that succeeded, in this run or an earlier one
    /// (read from its metadata at the first step); held across each write so that the
    /// writes land in the order they were made.
    pub(crate) steps: tokio::sync::Mutex<Option<serde_json::Map<String, serde_json::Value>>>,
    /// Whether the run holds a row of the queue to record its steps on (a worker's run);
    /// a test runner's run keeps them in memory.
    pub(crate) leased: bool,
    /// Whether the run's job takes a transaction (on SQLite, the one writer then).
    pub(crate) transaction: bool,
}

impl RunWrites {
    /// The writes of a worker's run, of a job that takes a transaction or not.
    pub(crate) fn leased(transaction: bool) -> Self {
        RunWrites {
            leased: true,
            transaction,
            ..RunWrites::default()
        }
    }

    /// Whether a progress value waits to be written.
    pub(crate) fn progress_pending(&self) -> bool {
        self.progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pending
            .is_some()
    }
}

#[derive(Debug, Default)]
pub(crate) struct ProgressState {
    pub(crate) written_at: Option<std::time::Instant>,
    /// The latest value not written yet, and whether a write of it is due already.
    pub(crate) pending: Option<String>,
    pub(crate) armed: bool,
}

/// Why the worker asked a job to stop ([`JobContext::stop_reason`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// The worker is stopping gracefully: the job has the grace period to finish, or it
    /// can return [`JobError::interrupted`](crate::JobError::interrupted) to be run again
    /// elsewhere without using an attempt.
    Shutdown,
    /// The job's lease ran out and another worker may hold it now; whatever this run
    /// returns is not recorded.
    LeaseLost,
    /// An operator cancelled the job ([`Client::cancel`](crate::Client::cancel)): it is
    /// recorded as cancelled already and is not retried; whatever this run returns is
    /// not recorded. (A cancel from another process on SQLite or MySQL reaches the worker
    /// as a lost lease, at its next heartbeat.)
    Cancelled,
}

/// Where a job runs: the worker's pool and schema, so that the job can enqueue
/// others through [`JobContext::enqueue`] on the same database.
pub(crate) struct Runtime {
    pub(crate) pool: crate::Pool,
    pub(crate) schema: crate::Schema,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("backend", &self.pool.backend_name())
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

/// What a job's handler task carries for the enqueues it makes.
pub(crate) struct Scope {
    pub(crate) correlation_id: Option<Arc<str>>,
    pub(crate) clock: crate::clock::SharedClock,
}

tokio::task_local! {
    /// The job whose handler is running on this task: a job enqueued here inherits its
    /// correlation id and takes `now` from its worker's clock.
    pub(crate) static CURRENT: Scope;
}

/// The correlation id a job enqueued here inherits: that of the job running on this task.
pub(crate) fn inherited_correlation_id() -> Option<String> {
    CURRENT
        .try_with(|c| c.correlation_id.as_deref().map(str::to_owned))
        .ok()
        .flatten()
}

/// "Now" for an enqueue: the clock of the worker whose job runs on this task (a test's
/// manual clock), else the system's.
pub(crate) fn enqueue_now() -> DateTime<Utc> {
    CURRENT
        .try_with(|c| c.clock.now())
        .unwrap_or_else(|_| Utc::now())
}

impl JobContext {
    /// The job's id, as returned by `enqueue`.
    pub fn id(&self) -> Uuid {
        self.id
    }
    /// The task type.
    pub fn task_type(&self) -> &str {
        &self.task_type
    }
    /// The queue the job was taken from.
    pub fn queue(&self) -> &str {
        &self.queue
    }
    /// This run's number: 1 for the first run, 2 for the first retry, ...
    pub fn attempt(&self) -> i32 {
        self.attempt
    }
    /// The job's attempt limit.
    pub fn max_attempts(&self) -> i32 {
        self.max_attempts
    }
    /// The job's priority.
    pub fn priority(&self) -> i32 {
        self.priority
    }
    /// When the job was enqueued.
    pub fn posted_at(&self) -> DateTime<Utc> {
        self.posted_at
    }
    /// When this attempt was claimed, by the worker's clock (the job record's last attempt
    /// time).
    pub fn attempted_at(&self) -> DateTime<Utc> {
        self.attempted_at
    }
    /// The tenant it was enqueued for, if any.
    pub fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }
    /// Its correlation id, if any: given at enqueue, or inherited from the job that
    /// enqueued it.
    pub fn correlation_id(&self) -> Option<&str> {
        self.correlation_id.as_deref()
    }
    /// Its metadata (a JSON object), if any.
    pub fn metadata(&self) -> Option<&serde_json::Value> {
        self.metadata.as_deref()
    }
    /// Whether the worker asked this job to stop (graceful shutdown, a lost lease, or an
    /// operator's cancel; [`JobContext::stop_reason`] says which). A job that stops on a
    /// shutdown returns [`JobError::interrupted`](crate::JobError::interrupted) and keeps
    /// its attempt.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Why the worker asked this job to stop; `None` while it has not.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.cancel
            .is_cancelled()
            .then(|| self.stop.get().copied().unwrap_or(StopReason::Shutdown))
    }
    /// Completes when the worker asks this job to stop: a graceful shutdown began (the job
    /// then has the grace period to finish) or its lease was lost to another worker.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await;
    }

    /// A job to enqueue from this one: on the worker's schema, for this job's tenant, with
    /// this job's correlation id (each can still be overridden). Enqueue it with
    /// [`JobContext::enqueue`] on the worker's pool, or with [`Enqueue::enqueue`] on the
    /// job's transaction, so that it exists only if this job completes:
    ///
    /// ```
    /// use sk_runtime::{job, JobContext, JobError, sqlx};
    ///
    /// #[job]
    /// async fn resize(image: i64, width: u32) -> Result<(), JobError> {
    ///     Ok(())
    /// }
    ///
    /// #[job]
    /// async fn uploaded(image: i64, ctx: JobContext) -> Result<(), JobError> {
    ///     // On the worker's pool: stored at once.
    ///     ctx.enqueue(Resize::new(image, 640)).await?;
    ///     Ok(())
    /// }
    ///
    /// #[job]
    /// async fn imported(
    ///     image: i64,
    ///     ctx: JobContext,
    ///     tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    /// ) -> Result<(), JobError> {
    ///     sqlx::query("UPDATE images SET imported = true WHERE id = $1")
    ///         .bind(image)
    ///         .execute(&mut **tx)
    ///         .await?;
    ///     // In the job's transaction: exists only if this job completes.
    ///     ctx.job(Resize::new(image, 640)).enqueue(&mut **tx).await?;
    ///     Ok(())
    /// }
    /// ```
    ///
    /// [`Enqueue::enqueue`]: crate::Enqueue::enqueue
    pub fn job<J: Job>(&self, job: J) -> crate::Enqueue<J> {
        let mut next = crate::Enqueue::new(job);
        if let Some(runtime) = &self.runtime {
            next = next.with_schema(&runtime.schema);
        }
        if let Some(tenant) = &self.tenant {
            next = next.with_tenant(&**tenant);
        }
        if let Some(id) = &self.correlation_id {
            next = next.with_correlation_id(&**id);
        }
        next
    }

    /// Enqueues `job` on the worker's pool and schema, for this job's tenant and with its
    /// correlation id ([`JobContext::job`]); returns its id.
    ///
    /// # Errors
    /// As [`Enqueue::enqueue`](crate::Enqueue::enqueue); [`Error::Invalid`](crate::Error::Invalid)
    /// for a context built by a test without a pool
    /// (`testing::Runner::pool`).
    pub async fn enqueue<J: Job>(&self, job: J) -> crate::Result<Uuid> {
        let Some(runtime) = &self.runtime else {
            return Err(crate::Error::invalid(
                "job context",
                "this context has no database to enqueue on: give the test runner a pool (testing::Runner::pool)",
            ));
        };
        let next = self.job(job);
        match &runtime.pool {
            #[cfg(feature = "postgres")]
            crate::Pool::Postgres(pool) => next.enqueue(pool).await,
            #[cfg(feature = "sqlite")]
            crate::Pool::Sqlite(pool) => next.enqueue(pool).await,
            #[cfg(feature = "mysql")]
            crate::Pool::MySql(pool) => next.enqueue(pool).await,
        }
    }

    /// Records where this run has got to, in the application's own words (seed 002's
    /// `sub_state`, at most 64 characters): written to the job at once, kept on its record
    /// after it ends ([`JobRecord::sub_state`](crate::JobRecord::sub_state)), and a filter
    /// of the job list ([`JobFilter::sub_state`](crate::JobFilter::sub_state),
    /// `sk jobs --sub-state`). Kept in the job's metadata under `sub_state`; this
    /// context's [`metadata`](Self::metadata) still shows the metadata the run began with.
    ///
    /// # Errors
    /// [`Error::Invalid`](crate::Error::Invalid) for an empty or too long sub-state or a
    /// context without a database, and when this run no longer holds the job (its lease
    /// was lost or it was cancelled: nothing is written); the database's error.
    pub async fn set_sub_state(&self, sub_state: &str) -> crate::Result<()> {
        crate::model::check_seed_002("sub-state", sub_state, crate::model::SUB_STATE_CHARS)?;
        let Some(runtime) = &self.runtime else {
            return Err(crate::Error::invalid(
                "job context",
                "this context has no database to write the sub-state to: give the test runner a pool (testing::Runner::pool)",
            ));
        };
        let run = (self.id, self.attempt);
        let held = runtime
            .pool
            .set_running_metadata(&runtime.schema, run, "sub_state", sub_state, false)
            .await?;
        if held {
            Ok(())
        } else {
            Err(crate::Error::invalid(
                "sub-state",
                format!("run {} of job {} no longer holds it (its lease was lost, or it was cancelled or finished); nothing written", self.attempt, self.id),
            ))
        }
    }
}

/// Shared application data registered with [`WorkerBuilder::data`](crate::WorkerBuilder::data);
/// take `Data<T>` as an argument of a job fn to receive it. A worker refuses to start when
/// a registered job asks for data it was not given.
///
/// ```
/// use sk_runtime::{job, Data, JobError};
///
/// struct Mailer { from: String }
///
/// #[job(queue = "mail")]
/// async fn send_mail(to: String, mailer: Data<Mailer>) -> Result<(), JobError> {
///     println!("{} -> {to}", mailer.from);
///     Ok(())
/// }
/// ```
pub struct Data<T: ?Sized>(Arc<T>);

impl<T> Data<T> {
    /// Shared data holding `value`, for calling a job fn in a unit test.
    pub fn new(value: T) -> Self {
        Data(Arc::new(value))
    }
}

impl<T: ?Sized> From<Arc<T>> for Data<T> {
    fn from(shared: Arc<T>) -> Self {
        Data(shared)
    }
}

impl<T: ?Sized> Data<T> {
    /// The shared `Arc`.
    pub fn into_inner(self) -> Arc<T> {
        self.0
    }
}

impl<T: ?Sized> Clone for Data<T> {
    fn clone(&self) -> Self {
        Data(self.0.clone())
    }
}

impl<T: ?Sized> Deref for Data<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Send + Sync + 'static> Data<T> {
    pub(crate) fn downcast(any: Arc<dyn Any + Send + Sync>) -> Option<Self> {
        any.downcast::<T>().ok().map(Data)
    }
}

/// What a run produced: the handler's `Ok` value as JSON (`None` for `()`), or its error.
pub type JobOutcome = Result<Option<String>, JobError>;

/// What a job needs of its worker: a `Data<T>`, or a backend for its transaction.
#[derive(Debug, Clone, Copy)]
pub struct Requirement {
    pub(crate) type_id: TypeId,
    pub(crate) type_name: &'static str,
    /// Set for a transaction: the backend's name; `type_id` is then the backend's.
    pub(crate) backend: Option<&'static str>,
}

impl Requirement {
    /// A transaction of backend `DB`.
    pub(crate) fn backend<DB: crate::store::Backend>() -> Self {
        Requirement {
            type_id: TypeId::of::<DB>(),
            type_name: std::any::type_name::<DB>(),
            backend: Some(<DB as crate::store::Backend>::NAME),
        }
    }
}
