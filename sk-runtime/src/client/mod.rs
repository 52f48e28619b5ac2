//! The client handle, on one pool and schema or across several databases (`across`):
//! job control (`control`), lists, counts and statistics (`insight`), and the
//! read-only queue info (`info`).

mod across;
mod audit;
mod batches;
mod bulk;
mod by_name;
mod control;
mod events;
mod info;
mod insight;
mod update;
mod workflows;

pub use batches::BatchJobs;
pub use info::QueueInfo;
pub use insight::ERROR_ROWS;
pub use update::JobUpdate;

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::clock::{Clock, SystemClock};
use crate::model::JobStatus;
use crate::store::{Pool, Schema};

/// The operator's handle on sk's tables: control calls and queue info on one pool and
/// schema (set once), on every backend, or over several databases as one
/// ([`Client::across`]). Each call is safe against a worker finishing
/// the same job at the same moment: of the two, exactly one takes effect, and the call's
/// outcome says which.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool, id: uuid::Uuid) -> sk_runtime::Result<()> {
/// use sk_runtime::{CancelOutcome, Client};
///
/// let client = Client::new(pool);
/// match client.cancel(id).await? {
///     CancelOutcome::Cancelled => println!("cancelled before it ran"),
///     CancelOutcome::CancelledWhileRunning => println!("cancelled; its handler was asked to stop"),
///     CancelOutcome::AlreadyFinished(status) => println!("too late: it is {status:?}"),
///     other => println!("{other:?}"),
/// }
/// client.pause("mail").await?; // no worker starts a job of queue "mail" from now on
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) pool: Pool,
    /// Where the read-only insight calls go ([`Client::insight_from`]); the pool's own
    /// server when `None`.
    read: Option<Pool>,
    /// The other databases of a client across several ([`Client::across`]).
    more: Arc<[Pool]>,
    /// Where [`Client::enqueue_json`] stores a job, over its databases.
    routes: Arc<crate::route::Routes>,
    pub(crate) schema: Schema,
    clock: Arc<dyn Clock>,
    /// Who the audit trail says took this client's actions.
    actor: Arc<str>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("pool", &self.pool)
            .field("read", &self.read)
            .field("more", &self.more)
            .field("schema", &self.schema)
            .field("actor", &self.actor)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client on the default schema (`public`, prefix `sk_`).
    pub fn new(pool: impl Into<Pool>) -> Self {
        Client {
            pool: pool.into(),
            read: None,
            more: Arc::from([]),
            routes: Arc::new(crate::route::Routes::new(1).expect("one database")),
            schema: Schema::default(),
            clock: Arc::new(SystemClock),
            actor: audit::os_user().into(),
        }
    }

    /// Works on another schema/prefix.
    #[must_use]
    pub fn schema(mut self, schema: Schema) -> Self {
        self.schema = schema;
        self
    }

    /// Takes `now` from `clock` (the workers' clock, in tests).
    #[must_use]
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Names who takes this client's actions in the audit trail ([`Client::audit`]): by
    /// default `os:` and the OS user (`$USER`); `sk web` gives each request's
    /// `web:` and its user.
    #[must_use]
    pub fn actor(mut self, actor: impl Into<String>) -> Self {
        self.actor = actor.into().into();
        self
    }

    /// Sends the read-only insight calls to `replica` (a streaming replica of the
    /// client's database, or any server that holds the same rows): counts, lists, one
    /// job, error groups, throughput, workers, queues, tenants, batches, workflows and
    /// the audit trail. Every action, and every read an action decides on (a cancel reads
    /// the job it cancelled; a bulk action lists its jobs), stays on the client's own
    /// pool, the primary, as do [`Client::wait`] and [`Client::subscribe`].
    ///
    /// On a client across several databases, `replica` is database 0's.
    ///
    /// A replica lags by its replay delay ([`Client::replica_lag`]): a job enqueued a
    /// moment ago may not be listed yet, and one just finished may still show running.
    ///
    /// ```no_run
    /// # async fn f() -> sk_runtime::Result<()> {
    /// use sk_runtime::{Client, Pool};
    ///
    /// let primary = Pool::connect("postgres://app@db-1:5432,db-2:5432/app").await?;
    /// let replica = Pool::connect("postgres://app@db-2:5432/app").await?;
    /// let client = Client::new(primary).insight_from(replica);
    /// let counts = client.counts().await?; // read on the replica
    /// client.pause("mail").await?; // done on the primary
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn insight_from(mut self, replica: impl Into<Pool>) -> Self {
        self.read = Some(replica.into());
        self
    }

    /// Whether insight calls go to a pool of their own ([`Client::insight_from`]).
    pub fn reads_elsewhere(&self) -> bool {
        self.read.is_some()
    }

    /// How far the server insight calls read from is behind: `None` when they read the
    /// client's own database, or a server that is not a streaming replica (or a backend
    /// without replicas); zero while the replica has replayed all it received, else the
    /// time since the last transaction it replayed committed on the primary.
    ///
    /// # Errors
    /// The replica fails.
    pub async fn replica_lag(&self) -> crate::Result<Option<std::time::Duration>> {
        match &self.read {
            Some(read) => read.replay_lag().await,
            None => Ok(None),
        }
    }

    /// The pool insight calls read from.
    pub(crate) fn reader(&self) -> &Pool {
        self.read.as_ref().unwrap_or(&self.pool)
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }
}

/// What [`Client::cancel`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelOutcome {
    /// The job was waiting (or delayed, or waiting for a retry); it left the queue and is
    /// recorded as cancelled.
    Cancelled,
    /// The job was running: it is recorded as cancelled (and will not be retried), and
    /// its handler was asked to stop ([`JobContext::stop_reason`] is
    /// [`StopReason::Cancelled`]); whatever the run returns is not recorded. The worker
    /// running it learns at once on PostgreSQL and within this process, and at its next
    /// heartbeat elsewhere.
    ///
    /// [`JobContext::stop_reason`]: crate::JobContext::stop_reason
    /// [`StopReason::Cancelled`]: crate::StopReason::Cancelled
    CancelledWhileRunning,
    /// The job had finished already (processed, fatal or cancelled); nothing changed.
    AlreadyFinished(JobStatus),
    /// No job with this id exists.
    NotFound,
}

/// What [`Client::retry`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryOutcome {
    /// The fatal or cancelled job is back in its queue, due now, with a fresh attempt
    /// budget (as many attempts as it had at first); its history is kept.
    Retried,
    /// The job was waiting (for its not-before time or a retry); it is due now.
    MadeDue,
    /// The job is running now; nothing changed.
    Running,
    /// The job succeeded; its payload is not kept, so it cannot run again: enqueue a new
    /// one.
    Succeeded,
    /// Another live job holds the job's unique key now; nothing changed.
    KeyHeld,
    /// The job failed for good but its payload was not kept (posted by another producer
    /// without one); nothing changed.
    NoPayload,
    /// No job with this id exists.
    NotFound,
}

/// What [`Client::reprioritize`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReprioritizeOutcome {
    /// The live job has the new priority (it may have had it already).
    Reprioritized,
    /// The job has finished; its priority is on record as it ran.
    Finished(JobStatus),
    /// No job with this id exists.
    NotFound,
}

/// What [`Client::run_now`] and [`Client::reschedule`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RescheduleOutcome {
    /// The waiting job's not-before time is changed.
    Rescheduled,
    /// The job is running now; nothing changed.
    Running,
    /// The job has finished (see [`Client::retry`] to run a failed one again).
    Finished(JobStatus),
    /// The job waits on other jobs and runs when they have succeeded; nothing changed.
    WaitingOnDependencies,
    /// No job with this id exists.
    NotFound,
}
