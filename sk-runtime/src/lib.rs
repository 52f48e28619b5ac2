//! # sk — background jobs on PostgreSQL, SQLite or MySQL
//!
//! Mark an ordinary `async fn` with [`#[job]`](job); sk turns it into a typed,
//! serializable job with a generated `.enqueue()`, and [`Worker`]s claim and run those
//! jobs (with `FOR UPDATE SKIP LOCKED` on PostgreSQL and MySQL/MariaDB, under the write
//! lock on SQLite; cargo features `postgres`, the default, `sqlite` and `mysql`; the
//! backend is the pool you pass), honouring each job's priority, delay, retry,
//! timeout and cron schedule. Jobs can be enqueued inside the application's own
//! transaction; a job is finished exactly once, and a crashed worker's jobs come back
//! when their lease runs out.
//!
//! ```no_run
//! use sk_runtime::{job, JobContext, JobError};
//!
//! #[job(queue = "mail", priority = 10, max_attempts = 5, backoff = "exponential", timeout = "30s")]
//! async fn send_welcome(user_id: i64, template: String, ctx: JobContext) -> Result<(), JobError> {
//!     println!("attempt {} of welcome mail {template} to user {user_id}", ctx.attempt());
//!     Ok(())
//! }
//!
//! #[job(schedule = "0 0 3 * * *")] // every day at 03:00 UTC
//! async fn nightly_report() -> Result<(), JobError> {
//!     Ok(())
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/postgres").await?;
//!     sk_runtime::migrate(&pool, &Default::default()).await?;
//!
//!     let id = SendWelcome::new(42, "hello".into()).enqueue(&pool).await?;
//!     println!("enqueued {id}");
//!
//!     // Runs until Ctrl-C / SIGTERM, then stops gracefully.
//!     sk_runtime::Worker::builder(pool).concurrency(32).build()?.run().await?;
//!     Ok(())
//! }
//! ```
//!
//! ## Linking
//! Jobs register themselves at link time. A job defined in a library crate that the
//! worker binary never references may be dropped by the linker and then not registered;
//! the worker logs the task types it runs at start. To force-link a job crate, reference
//! it from the binary, e.g. `use my_jobs as _;`, or name one of its job types.

mod batch;
mod bus;
mod client;
mod clock;
mod enqueue;
mod error;
mod hooks;
mod job;
mod job_schema;
mod layer;
mod migrate;
mod model;
mod progress;
mod registry;
mod retry;
mod route;
mod sealed;
mod steps;
mod store;
pub mod telemetry;
pub mod testing;
mod transaction;
mod worker;
mod workflow;

pub use batch::{Batch, BatchDone, BatchIds};
pub use client::{
    BatchJobs, CancelOutcome, Client, JobUpdate, QueueInfo, ReprioritizeOutcome, RescheduleOutcome,
    RetryOutcome, ERROR_ROWS,
};
pub use clock::{Clock, ManualClock, SystemClock};

/// The bounds on every wait toward the database: each call of a worker, a client and the
/// dashboard runs under a deadline, and one that runs past it is dropped, its connection
/// closed ([`Error::TimedOut`]). `WorkerBuilder::call_timeout` sets a worker's.
pub mod bounds {
    pub use crate::store::bound::{CALL_TIMEOUT, CLIENT_TIMEOUT, MIGRATE_TIMEOUT, UPKEEP_TIMEOUT};
}
pub use enqueue::{Enqueue, EnqueueOutcome, Enqueued, DEFAULT_MAX_PAYLOAD_BYTES};
pub use error::{Error, JobError, Result};
pub use hooks::{add_enqueue_hook, EnqueueHook, Posting};
pub use job::{Data, Job, JobContext, JobOptions, StopReason, TenantKey, DEFAULT_MAX_ATTEMPTS};
pub use job_schema::{schema, SCHEMA_FORMAT};
pub use layer::{Layer, LayerFuture, Next};
pub use migrate::{migrate, migrations, set_seed_keys, Migration, SeedKeys};
pub use model::{
    Attempt, AttemptOutcome, AuditEntry, BatchCallback, BatchEvent, BatchRecord, CountBy,
    ErrorGroup, GroupCounts, JobFilter, JobPage, JobRecord, JobStatus, JobSummary, Per, Pruned,
    QueueCounts, QueueState, QueuedJob, RateLimit, RateState, TenantHold, TenantState, Throughput,
    UniqueMode, UpdateOutcome, WorkerInfo, WorkflowJob, WorkflowRecord, MAX_PAGE, MAX_RATE_WINDOW,
};
pub use progress::{MAX_PROGRESS_BYTES, PROGRESS_EVERY};
pub use retry::Backoff;
pub use route::{RouteBy, Router, Routes};
pub use sealed::{set_payload_keys, PayloadKeys};
pub use steps::{MAX_STEPS_BYTES, MAX_STEP_OUTPUT_BYTES};
#[cfg(feature = "postgres")]
pub use store::postgres::primary::{primary_pool, WATCH_EVERY};
pub use store::{Backend, Executor, Pool, Schema};
pub use worker::events::{JobEvent, JobEventKind, JobEvents};
pub use worker::schedule::{StoredSchedule, StoredSchedules};
pub use worker::{Worker, WorkerBuilder};
pub use workflow::{Accepts, Input, Inputs, Many, One, Workflow, WorkflowIds};

/// Turns an `async fn` into a background job.
///
/// The fn stays callable as it is. Beside it, `#[job]` generates a type named in
/// PascalCase (`send_welcome` → `SendWelcome`) whose fields are the fn's payload
/// arguments (serialized with serde, so each must be `Serialize + DeserializeOwned`),
/// with `new(..)`, `enqueue(executor)`, `enqueue_many(executor, jobs)` and per-call
/// overrides (`with_priority`, `run_at`, `run_after`, `with_queue`, `with_source`,
/// `with_unique_key`, `with_unique_mode`, `with_max_payload`, `with_schema`, `with_tenant`,
/// `with_correlation_id`, `with_metadata`, `with_max_attempts`, `with_timeout`) that
/// return an [`Enqueue`]. The
/// type is `Clone` (so each payload argument must be) and `Debug` (showing each field as
/// its JSON). The job registers itself at link time.
///
/// Arguments of type [`JobContext`] or [`Data<T>`](Data) are injected by the worker and
/// are not part of the payload. The fn returns `()` or `Result<T, E>` with `T: Serialize`:
/// a success stores `T` as the job's output, read back typed with [`JobRecord::output`].
/// The error is a [`JobError`], anything `Into<JobError>` (every `std::error::Error` is),
/// or an error that is only `Display + Debug` such as `anyhow::Error` or
/// `Box<dyn Error + Send + Sync>`: its `Display` is the recorded message, its `Debug` (with
/// anyhow, the chain of causes) the detail, its type name the kind.
///
/// A payload argument may carry serde's field attributes (`#[serde(default)]`, `alias`,
/// `rename`, `with`, `skip_serializing_if`, …): they are taken off the fn and put on the
/// generated type's field. See [Arguments that evolve](#arguments-that-evolve).
///
/// # Keys
/// | key | value | default |
/// |---|---|---|
/// | `name` | the stable `task_type` stored with each job | the fn's name |
/// | `queue` | queue name | `"default"` |
/// | `priority` | integer, lower runs first | `0` |
/// | `max_attempts` | first run plus retries, at least 1 | `25` |
/// | `backoff` | `"exponential"`, `"linear"`, `"constant"`, or a path to a `fn(u32) -> Duration` | `"exponential"` |
/// | `backoff_base` | first (or constant) delay, a duration like `"2s"` | `"1s"` |
/// | `backoff_max` | cap of the delay | `"1h"` |
/// | `timeout` | a duration; a run over it is a recoverable failure | none |
/// | `schedule` | a cron expression (5 fields, or 6/7 with seconds first); only on fns without payload arguments | none |
/// | `timezone` | the IANA zone of `schedule`'s ticks, like `"Europe/Paris"` (an unknown zone fails [`WorkerBuilder::build`]) | `"UTC"` |
/// | `overlap` | `true` lets a cron tick start while the last one still runs; by default such a tick is skipped | `false` |
/// | `missed` | `"run_once"` runs the latest tick missed while no worker ran (once across workers) when a worker starts; `"skip"` counts ticks from the start | `"skip"` |
/// | `every` | a duration: the job runs again this long after each run ends, one run at a time across all workers; only on fns without payload arguments, not with `schedule` | none |
/// | `after` | with `every`: `"end"` counts the period from when each run ends (a fixed delay); `"due"` from when it was due (a fixed rate, seed 003's `next_run_time + period`): runs start a period apart however long each takes, still one at a time; a run longer than the period makes the next due at once, and of the slots it passed only the latest runs | `"end"` |
///
/// Mistakes are compile errors pointing at the offending token: an unknown or duplicated
/// key, a literal of the wrong type, a cron expression that does not parse, a fn that is
/// not `async`, takes `self`, is generic, or has an argument that is not serializable.
///
/// # Examples
/// Every key:
/// ```
/// use sk_runtime::{job, JobError};
///
/// #[job(name = "billing.charge", queue = "billing", priority = -5, max_attempts = 3,
///       backoff = "linear", backoff_base = "10s", backoff_max = "5m", timeout = "2m")]
/// async fn charge(invoice_id: i64, cents: u64) -> Result<(), JobError> {
///     if cents == 0 {
///         return Err(JobError::fatal("nothing to charge"));
///     }
///     Ok(())
/// }
///
/// #[job(schedule = "*/15 * * * *")] // every 15 minutes
/// async fn refresh_rates() {}
///
/// fn custom(attempt: u32) -> std::time::Duration {
///     std::time::Duration::from_secs(u64::from(attempt) * 30)
/// }
///
/// #[job(backoff = custom)]
/// async fn sync_account(account: String) -> Result<(), std::io::Error> {
///     Ok(())
/// }
///
/// use sk_runtime::Job as _;
/// assert_eq!(Charge::TASK_TYPE, "billing.charge");
/// assert_eq!(Charge::OPTIONS.max_attempts, 3);
/// assert_eq!(RefreshRates::TASK_TYPE, "refresh_rates");
/// let _job = SyncAccount::new("acme".into());
/// ```
///
/// # Arguments that evolve
/// The payload is stored as a JSON object with one key per payload argument, and a job
/// enqueued by an older build is read by the newer one. So that it still reads:
/// - **a new argument** gets `#[serde(default)]` (or `default = "path"`), the value older
///   payloads lack;
/// - **a renamed argument** keeps reading the old key with `#[serde(alias = "old")]` (or
///   keeps writing it with `rename = "old"`, for workers of the older build still running);
/// - **a removed argument** needs nothing: unknown keys are ignored;
/// - **a changed meaning or type** is a new job: give the new fn its own name (`name =
///   "charge.v2"`) and keep the old fn, turned into a forwarder to the new code, until
///   `sk jobs --type charge --state available` lists none of the old jobs.
///
/// A payload that does not read is a fatal failure of the job with the reason recorded,
/// never a retry loop.
///
/// ```
/// use sk_runtime::{job, JobError};
///
/// // Version 1 was `async fn send_digest(uid: i64)`.
/// #[job]
/// async fn send_digest(
///     #[serde(alias = "uid")] user_id: i64,          // renamed
///     #[serde(default = "english")] locale: String,   // added
///     #[serde(default, with = "as_text")] batch: u64, // stored as a string
/// ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
///     if locale.is_empty() {
///         return Err(format!("user {user_id}: no locale (batch {batch})").into());
///     }
///     Ok(())
/// }
///
/// fn english() -> String {
///     "en".into()
/// }
///
/// mod as_text {
///     use serde::{Deserialize, Deserializer, Serializer};
///     pub fn serialize<S: Serializer>(n: &u64, s: S) -> Result<S::Ok, S::Error> {
///         s.serialize_str(&n.to_string())
///     }
///     pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
///         String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
///     }
/// }
///
/// // A job that version 1 enqueued still reads:
/// let old: SendDigest = serde_json::from_str(r#"{"uid": 7}"#).unwrap();
/// assert_eq!((old.user_id, old.locale.as_str(), old.batch), (7, "en", 0));
/// let now = serde_json::to_string(&SendDigest::new(7, "fr".into(), 12)).unwrap();
/// assert_eq!(now, r#"{"user_id":7,"locale":"fr","batch":"12"}"#);
/// ```
///
/// # The schema of its arguments
/// `#[job]` also derives the JSON Schema (draft 2020-12) of the job's payload, as serde
/// reads it: a renamed argument under its new name, an alias as a second name, an
/// `Option` or a `default` not required, an argument read `with` a function of its own as
/// any JSON, and an argument of a type without [`schemars::JsonSchema`] as any JSON (the
/// worker checks it when it runs; derive `JsonSchema` on the type to describe it).
/// [`schema()`] returns every linked job's as one document, `sk schema` prints it, and a
/// worker publishes its jobs' to the database at start, for producers in other languages
/// (docs/clients.md).
pub use sk_macros::job;

/// What the fuzz targets of `fuzz/` reach that is not public; only with `--cfg fuzzing`.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::worker::schedule::fuzz_ticks;
}

/// The sqlx this sk is built on: its pools and transactions are the ones sk's API takes,
/// so an application can use them without matching sk's sqlx version by hand.
pub use sqlx;

/// The schemars whose `JsonSchema` gives a `#[job]` argument of an application's own type
/// its schema (`sk_runtime::schema`); a type without one is let through as any JSON.
pub use schemars;

#[cfg(not(any(feature = "postgres", feature = "sqlite", feature = "mysql")))]
compile_error!(
    "sk-runtime needs a backend: enable its cargo feature `postgres` (the default), `sqlite` or `mysql`"
);

/// The worker side of the store's driver contract, for its conformance suite
/// (`tests/store/`); not a public API.
#[doc(hidden)]
pub mod __driver {
    pub use crate::store::conformance::{Claimed, Driver};
}

#[doc(hidden)]
pub mod __private {
    //! What the code generated by `#[job]` uses; not a public API.
    pub use crate::job::{options, Job, JobOutcome, Requirement};
    pub use crate::job_schema::{ArgsSchema, SchemaTag, ViaJsonSchema, ViaNoSchema};
    pub use crate::registry::{
        validate, HandlerFuture, HandlerInput, HandlerResult, Inject, IntoJobResult, JobReturn,
        Registration, ResultTag, ViaDisplay, ViaIntoJobResult,
    };
    pub use crate::transaction::{JobTransaction, TxSource};
    pub use crate::workflow::{Accepts, Many, One};
    pub use inventory;
    pub use schemars::SchemaGenerator;
    pub use serde;
    pub use serde_json;
    pub use std::time::Duration;
    pub use uuid::Uuid;

    /// The instant type of `run_at`.
    pub type DateTime = chrono::DateTime<chrono::Utc>;

    /// Applies migrations up to `version` only, to test upgrades from an older schema.
    ///
    /// # Errors
    /// As [`crate::migrate`].
    #[cfg(feature = "postgres")]
    pub async fn migrate_to(
        pool: &sqlx::PgPool,
        schema: &crate::Schema,
        version: i32,
    ) -> crate::Result<()> {
        crate::store::postgres::migrate_to(pool, schema, version).await
    }

    /// [`migrate_to`] on SQLite.
    ///
    /// # Errors
    /// As [`crate::migrate`].
    #[cfg(feature = "sqlite")]
    pub async fn migrate_sqlite_to(
        pool: &sqlx::SqlitePool,
        schema: &crate::Schema,
        version: i32,
    ) -> crate::Result<()> {
        crate::store::sqlite::migrate_to(pool, schema, version).await
    }

    /// [`migrate_to`] on MySQL or MariaDB.
    ///
    /// # Errors
    /// As [`crate::migrate`].
    #[cfg(feature = "mysql")]
    pub async fn migrate_mysql_to(
        pool: &sqlx::MySqlPool,
        schema: &crate::Schema,
        version: i32,
    ) -> crate::Result<()> {
        crate::store::mysql::migrate_to(pool, schema, version).await
    }

    /// Compiles only when `T` can be a payload field.
    pub fn assert_payload<T: serde::Serialize + serde::de::DeserializeOwned>() {}

    /// Shows a payload field as its JSON, for the generated `Debug`.
    pub struct DebugJson<'a, T>(pub &'a T);

    impl<T: serde::Serialize> std::fmt::Debug for DebugJson<'_, T> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match serde_json::to_string(self.0) {
                Ok(json) => f.write_str(&json),
                Err(e) => write!(f, "<does not serialize: {e}>"),
            }
        }
    }
}
