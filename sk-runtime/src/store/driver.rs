//! The driver contract: what a backend must do, as traits, and the dispatch from the
//! backend-neutral [`Pool`] and [`Store`] to the backend they hold, written once.
//!
//! A backend implements four traits:
//! - [`Admin`] and [`Control`] on its pool type (`sqlx::PgPool`, `SqlitePool`,
//!   `MySqlPool`): migrations, queue info, stored schedules (`Admin`), and the client's
//!   control and insight calls (`Control`), each on the schema it is given;
//! - [`Work`] and [`WorkerRows`] on its worker store (`PgStore`, ...), which holds the
//!   pool, the schema and the worker's id: the pipeline's claim, completions, failures,
//!   leases, ticks and upkeep (`Work`), and the worker's own rows (`WorkerRows`).
//!
//! Each trait is declared by [`driver!`] from one list of operations, which also gives
//! `Pool` or `Store` a method per operation that calls the trait's method of the backend
//! it holds. A backend that misses an operation, or gives one another signature, does not
//! compile. The conformance suite (`tests/store/`) runs each operation on every backend.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    Claim, ClaimedJob, Failure, Lease, NewJob, Pool, ProbeFailure, QueueControls, QueueFlag,
    QueueLimit, Retired, ScheduleRow, Schema, Store, Success, TableHealth,
};
use crate::error::Result;
use crate::model::{
    AuditEntry, BatchRecord, CountBy, ErrorRow, GroupCounts, JobFilter, JobRecord, JobSummary,
    Pruned, QueueCounts, QueueState, QueuedJob, StatBucket, StatRow, TenantState, UniqueMode,
    WorkerInfo, WorkerUp, WorkflowJobRow, WorkflowRecord,
};

/// Declares a trait of async operations (each future `Send`) and the methods of the enum
/// `$on` that call the operation on whichever backend the enum holds.
macro_rules! driver {
    ($(#[$doc:meta])* trait $trait:ident on $on:ident {
        $( $(#[$meta:meta])* fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty; )*
    }) => {
        $(#[$doc])*
        pub(crate) trait $trait {
            $(
                $(#[$meta])*
                fn $name(&self $(, $arg: $ty)*) -> impl std::future::Future<Output = $ret> + Send;
            )*
        }

        impl $on {
            $(
                $(#[$meta])*
                pub(crate) async fn $name(&self $(, $arg: $ty)*) -> $ret {
                    let call = stringify!($name);
                    let bound = self.bound_of(call);
                    let address = || self.address();
                    match self {
                        #[cfg(feature = "postgres")]
                        $on::Postgres(backend) => {
                            super::bound::bounded(call, bound, address, $trait::$name(backend $(, $arg)*)).await
                        }
                        #[cfg(feature = "sqlite")]
                        $on::Sqlite(backend) => {
                            super::bound::bounded(call, bound, address, $trait::$name(backend $(, $arg)*)).await
                        }
                        #[cfg(feature = "mysql")]
                        $on::MySql(backend) => {
                            super::bound::bounded(call, bound, address, $trait::$name(backend $(, $arg)*)).await
                        }
                    }
                }
            )*
        }
    };
}

driver! {
    /// Migrations, queue info and stored schedules, on a pool and a schema.
    trait Admin on Pool {
        /// Brings the schema to this build's version.
        fn migrate(&self, schema: &Schema) -> Result<()>;
        /// Keys the metrics and stats tables per process or per name (`SeedKeys`).
        fn set_seed_keys(&self, schema: &Schema, keys: crate::migrate::SeedKeys) -> Result<()>;
        /// This build's migrations, each with when it was applied (`None`: not yet).
        fn migrations(
            &self,
            schema: &Schema,
        ) -> Result<Vec<(i32, &'static str, Option<DateTime<Utc>>)>>;
        /// Jobs by status, live and ended.
        fn counts(&self, schema: &Schema, now: DateTime<Utc>) -> Result<QueueCounts>;
        /// The head of the queue, in claim order.
        fn peek(&self, schema: &Schema, limit: i64) -> Result<Vec<QueuedJob>>;
        /// The task types the workers published, each with its schema document, by name.
        fn task_types(&self, schema: &Schema) -> Result<Vec<(String, String)>>;
        /// One job's whole record, as it stands at `now`.
        fn job(&self, schema: &Schema, id: Uuid, now: DateTime<Utc>) -> Result<Option<JobRecord>>;
        /// Adds or replaces a stored schedule.
        fn schedule_put(&self, schema: &Schema, row: &ScheduleRow) -> Result<()>;
        /// Removes a stored schedule; whether there was one.
        fn schedule_remove(&self, schema: &Schema, name: &str) -> Result<bool>;
        /// The stored schedules, by name.
        fn schedule_list(&self, schema: &Schema) -> Result<Vec<ScheduleRow>>;
    }
}

driver! {
    /// The client's control and insight calls, on a pool and a schema. Each control call
    /// is fenced against a worker finishing the same job: of the two, one takes effect.
    trait Control on Pool {
        /// Cancels the jobs; per job, whether it was running (else it was waiting).
        fn cancel(&self, schema: &Schema, ids: &[Uuid], now: DateTime<Utc>) -> Result<Vec<(Uuid, bool)>>;
        /// Puts the fatal or cancelled jobs back in the queue and, with `heal`, the jobs they
        /// ended as dependencies, waiting on them again; the ids put back (not those revived).
        fn retry(&self, schema: &Schema, ids: &[Uuid], now: DateTime<Utc>, heal: bool) -> Result<Vec<Uuid>>;
        /// Moves a waiting job's not-before time; whether it was waiting.
        fn reschedule(&self, schema: &Schema, id: Uuid, at: DateTime<Utc>) -> Result<bool>;
        /// Moves the not-before time of the waiting jobs among `ids`; how many moved.
        fn reschedule_many(&self, schema: &Schema, ids: &[Uuid], at: DateTime<Utc>) -> Result<u64>;
        /// Deletes the ended jobs among `ids`; how many.
        fn delete_ended(&self, schema: &Schema, ids: &[Uuid]) -> Result<u64>;
        /// Adds an entry to the audit trail.
        fn record_audit(&self, schema: &Schema, entry: &AuditEntry) -> Result<()>;
        /// The audit trail before entry `before`, newest first.
        fn audit(&self, schema: &Schema, before: Option<i64>, limit: i64) -> Result<Vec<AuditEntry>>;
        /// Sets a live job's priority; whether its queue row changed (a job already at that
        /// priority may read as unchanged on MySQL, which counts changed rows).
        fn reprioritize(&self, schema: &Schema, id: Uuid, priority: i32) -> Result<bool>;
        /// Turns a queue's switch on or off (a pause, fair claims); whether that changed
        /// it.
        fn set_queue_flag(
            &self,
            schema: &Schema,
            flag: QueueFlag,
            queue: &str,
            on: bool,
            now: DateTime<Utc>,
        ) -> Result<bool>;
        /// Sets or lifts a queue's limit of running jobs across workers (of the whole
        /// queue or of each of its tenants).
        fn set_queue_limit(
            &self,
            schema: &Schema,
            kind: QueueLimit,
            queue: &str,
            limit: Option<i32>,
            now: DateTime<Utc>,
        ) -> Result<()>;
        /// Sets or lifts the rate limit across workers of a queue or a job type (`scope`,
        /// `store::rates::QUEUE` or `TYPE`).
        fn set_rate_limit(
            &self,
            schema: &Schema,
            scope: &'static str,
            name: &str,
            limit: Option<crate::model::RateLimit>,
            now: DateTime<Utc>,
        ) -> Result<()>;
        /// Every queue with jobs, a paused state or a limit.
        fn queue_states(&self, schema: &Schema, now: DateTime<Utc>) -> Result<Vec<QueueState>>;
        /// A queue's tenants with live jobs or starts in their window, by name, with what
        /// its limits per tenant leave each.
        fn tenant_states(&self, schema: &Schema, queue: &str, now: DateTime<Utc>) -> Result<Vec<TenantState>>;
        /// The ids a filter takes, live jobs or ended ones, newest first, a page at a time.
        fn find_ids(
            &self,
            schema: &Schema,
            filter: &JobFilter,
            live: bool,
            after: Option<Uuid>,
            limit: i64,
        ) -> Result<Vec<Uuid>>;
        /// Posts one job (the client's enqueue by name).
        fn post(&self, schema: &Schema, job: NewJob, now: DateTime<Utc>) -> Result<()>;
        /// Deletes the ended jobs finalized before `before`.
        fn prune(&self, schema: &Schema, before: DateTime<Utc>) -> Result<Pruned>;
        /// Jobs by queue, task type or tenant, and state.
        fn count_by(&self, schema: &Schema, by: CountBy, now: DateTime<Utc>) -> Result<Vec<GroupCounts>>;
        /// The jobs a filter takes, newest first, a page at a time.
        fn list_jobs(
            &self,
            schema: &Schema,
            filter: &JobFilter,
            after: Option<Uuid>,
            limit: i64,
            now: DateTime<Utc>,
        ) -> Result<Vec<JobSummary>>;
        /// Jobs whose last run failed, by task type, queue, error and hour, largest first.
        fn error_groups(
            &self,
            schema: &Schema,
            since: DateTime<Utc>,
            limit: i64,
        ) -> Result<Vec<ErrorRow>>;
        /// The workers that announced themselves, with the jobs each holds.
        fn workers(&self, schema: &Schema, now: DateTime<Utc>) -> Result<Vec<WorkerInfo>>;
        /// The batches with those ids, or the newest `limit`, newest first.
        fn batches(&self, schema: &Schema, ids: Option<&[Uuid]>, limit: i64) -> Result<Vec<BatchRecord>>;
        /// The ids of a batch's jobs in a state (any, when `None`), a page at a time in
        /// id order.
        fn batch_jobs(
            &self,
            schema: &Schema,
            id: Uuid,
            status: Option<i32>,
            after: Option<Uuid>,
            limit: i64,
        ) -> Result<Vec<Uuid>>;
        /// Workflow `id`, or the newest `limit`, newest first.
        fn workflows(&self, schema: &Schema, id: Option<Uuid>, limit: i64) -> Result<Vec<WorkflowRecord>>;
        /// The jobs of workflow `id` by stage, with their states now.
        fn workflow_jobs(&self, schema: &Schema, id: Uuid, now: DateTime<Utc>) -> Result<Vec<WorkflowJobRow>>;
        /// The run counts per minute since `since`, of one task type or all.
        fn job_stats(
            &self,
            schema: &Schema,
            since: DateTime<Utc>,
            task_type: Option<&str>,
        ) -> Result<Vec<StatRow>>;
    }
}

driver! {
    /// The worker's pipeline: claims, outcomes, leases, ticks and upkeep, on the worker's
    /// pool and schema, fenced by the worker's id.
    trait Work on Store {
        /// Leases the due jobs a claim asks for.
        fn claim(&self, claim: &Claim<'_>) -> Result<Vec<ClaimedJob>>;
        /// Leases the due jobs a claim asks for under the rate limits `keys` (scope and
        /// name, a queue's before a job type's; and the global limit of its one queue if
        /// `claim.capped`), no more than each limit lets start now, and records their
        /// starts against each in the same transaction.
        fn claim_rated(&self, claim: &Claim<'_>, keys: &[(&'static str, &str)]) -> Result<super::RatedClaim>;
        /// Records successful runs (fenced); the ids whose lease was still held.
        fn complete(&self, done: &[Success], now: DateTime<Utc>) -> Result<Vec<Uuid>>;
        /// The outputs of a waiting job's dependencies, in order (`None`: one that has not
        /// succeeded, which a retry of the job can meet).
        fn inputs(&self, id: Uuid) -> Result<Vec<Option<Option<String>>>>;
        /// Records failed runs, to retry or final (fenced), in one transaction; per
        /// failure, false when its lease was lost.
        fn fail(&self, failures: &[Failure], now: DateTime<Utc>) -> Result<Vec<bool>>;
        /// Hands jobs back without using an attempt (a graceful stop, or a snooze until
        /// `at`).
        fn give_back(&self, leases: &[Lease], at: DateTime<Utc>) -> Result<u64>;
        /// Extends the leases still held; the ids of those.
        fn extend(&self, leases: &[Lease], until: DateTime<Utc>) -> Result<Vec<Uuid>>;
        /// Posts one job with a unique key of that mode: its id, whether it is new, and
        /// whether the live job it met is running.
        fn enqueue_unique(
            &self,
            job: NewJob,
            mode: UniqueMode,
            now: DateTime<Utc>,
        ) -> Result<(Uuid, bool, bool)>;
        /// Posts a cron tick once across workers; false if it was not posted.
        fn enqueue_tick(
            &self,
            job: NewJob,
            live_key: Option<&str>,
            stored: Option<(&str, DateTime<Utc>)>,
            now: DateTime<Utc>,
        ) -> Result<bool>;
        /// The schedules stored in the database.
        fn stored_schedules(&self) -> Result<Vec<ScheduleRow>>;
        /// Brings the schema to this build's version.
        fn migrate(&self) -> Result<()>;
        /// Creates the results partitions ahead; their names.
        fn ensure_partitions(&self, now: DateTime<Utc>, span: super::PartitionSpan) -> Result<Vec<String>>;
        /// Retires the results past the retention (`within`: by rows inside a partition
        /// too, for a retention shorter than a partition's span).
        fn retire_partitions(
            &self,
            cutoff: DateTime<Utc>,
            archive: Option<&str>,
            within: bool,
            stopping: &tokio_util::sync::CancellationToken,
        ) -> Result<Retired>;
        /// Dead and live rows of the hot tables.
        fn table_health(&self) -> Result<Vec<TableHealth>>;
        /// Vacuums one table unless another worker does; whether this one did.
        fn vacuum(&self, table: &str) -> Result<bool>;
        /// Writes this worker's metrics.
        fn write_metrics(&self, metrics: &[(&str, i64)], now: DateTime<Utc>) -> Result<()>;
        /// One connection attempt outside the pool, saying why it failed.
        fn probe(&self) -> std::result::Result<(), ProbeFailure>;
    }
}

driver! {
    /// The worker's own rows: its announcement and heartbeat, its run counts per minute,
    /// and the queue controls it reads.
    trait WorkerRows on Store {
        /// The paused queues and those with a global limit.
        fn queue_controls(&self) -> Result<QueueControls>;
        /// Announces this worker (`Client::workers`).
        fn worker_up(&self, up: &WorkerUp, now: DateTime<Utc>) -> Result<()>;
        /// Stamps this worker's row.
        fn worker_seen(&self, now: DateTime<Utc>) -> Result<()>;
        /// Removes this worker's row (a graceful stop).
        fn worker_down(&self) -> Result<()>;
        /// Deletes the run counts of minutes before `before`.
        fn prune_job_stats(&self, before: DateTime<Utc>) -> Result<u64>;
        /// Deletes the logs of starts per tenant last written before `before` that hold
        /// no tenant shut at `now`.
        fn prune_tenant_logs(&self, before: DateTime<Utc>, now: DateTime<Utc>) -> Result<u64>;
        /// Writes this worker's run counts per minute and task type.
        fn write_job_stats(&self, buckets: &[(DateTime<Utc>, String, StatBucket)]) -> Result<()>;
    }
}
