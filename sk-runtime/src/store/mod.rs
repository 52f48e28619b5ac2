//! The storage boundary. All SQL lives below this module, one module per backend with
//! its own migrations folder; the worker and the client speak only in the
//! backend-neutral types defined here.

mod driver;
pub(crate) mod listing;
#[cfg(feature = "mysql")]
pub(crate) mod mysql;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite;

use futures_util::future::BoxFuture;

use std::fmt;
use std::sync::{Arc, LazyLock};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::{Error, Result};

/// Where sk's tables live: a schema and a name prefix (default `public` and `sk_`, giving
/// `public.sk_tasks_queue_t`). Both must be lowercase SQL identifiers, so they can never
/// carry SQL into a statement. On SQLite and MySQL sk's tables live in the connection's
/// database, named as [`Schema::flat_table`] says.
///
/// ```
/// use sk_runtime::Schema;
///
/// let schema = Schema::new("jobs", "billing_").unwrap();
/// assert_eq!(schema.table("tasks_queue_t"), "jobs.billing_tasks_queue_t");
/// assert!(Schema::new("jobs; DROP TABLE x", "sk_").is_err());
/// ```
#[derive(Clone)]
pub struct Schema {
    schema: String,
    prefix: String,
    #[cfg(feature = "postgres")]
    pub(crate) sql: Arc<postgres::Statements>,
    #[cfg(feature = "sqlite")]
    pub(crate) sqlite: Arc<sqlite::Statements>,
    #[cfg(feature = "mysql")]
    pub(crate) mysql: Arc<mysql::Statements>,
}

static DEFAULT_SCHEMA: LazyLock<Schema> = LazyLock::new(|| {
    Schema::new("public", "sk_").expect("the default names are valid identifiers")
});

impl Default for Schema {
    fn default() -> Self {
        DEFAULT_SCHEMA.clone()
    }
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schema")
            .field("schema", &self.schema)
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl Schema {
    /// A schema name and a table-name prefix.
    ///
    /// # Errors
    /// A name is not a lowercase identifier (`[a-z_][a-z0-9_]*`, at most 30 bytes; the
    /// prefix may be empty).
    pub fn new(schema: &str, prefix: &str) -> Result<Self> {
        check_identifier("schema name", schema, false)?;
        check_identifier("table prefix", prefix, true)?;
        #[allow(unused_mut)]
        let mut s = Schema {
            schema: schema.to_owned(),
            prefix: prefix.to_owned(),
            #[cfg(feature = "postgres")]
            sql: Arc::default(),
            #[cfg(feature = "sqlite")]
            sqlite: Arc::default(),
            #[cfg(feature = "mysql")]
            mysql: Arc::default(),
        };
        #[cfg(feature = "postgres")]
        {
            s.sql = Arc::new(postgres::Statements::new(&s));
        }
        #[cfg(feature = "sqlite")]
        {
            s.sqlite = Arc::new(sqlite::Statements::new(&s));
        }
        #[cfg(feature = "mysql")]
        {
            s.mysql = Arc::new(mysql::Statements::new(&s));
        }
        Ok(s)
    }

    /// The qualified name of one of sk's tables, e.g. `table("tasks_queue_t")`.
    pub fn table(&self, name: &str) -> String {
        format!("{}.{}{}", self.schema, self.prefix, name)
    }

    /// A table's name on SQLite and MySQL (no schemas there): the prefix, after the
    /// schema name unless that is `public` (`jobs_sk_tasks_queue_t`).
    pub fn flat_table(&self, name: &str) -> String {
        format!("{}{name}", self.flat_prefix())
    }

    pub(crate) fn flat_prefix(&self) -> String {
        if self.schema == "public" {
            self.prefix.clone()
        } else {
            format!("{}_{}", self.schema, self.prefix)
        }
    }

    /// The LISTEN/NOTIFY channel (the seed's `sk_task_queue_item_added` by default).
    pub fn channel(&self) -> String {
        if self.schema == "public" {
            format!("{}task_queue_item_added", self.prefix)
        } else {
            format!("{}_{}task_queue_item_added", self.schema, self.prefix)
        }
    }

    /// The LISTEN/NOTIFY channel on which workers say jobs finished (`sk_task_done`),
    /// for `Client::wait`.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn done_channel(&self) -> String {
        self.channel().replace("task_queue_item_added", "task_done")
    }

    /// The LISTEN/NOTIFY channel of control calls to running jobs (`sk_task_control`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn control_channel(&self) -> String {
        self.channel()
            .replace("task_queue_item_added", "task_control")
    }

    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn schema_name(&self) -> &str {
        &self.schema
    }

    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }
}

pub(crate) fn check_identifier(what: &'static str, name: &str, may_be_empty: bool) -> Result<()> {
    let mut chars = name.chars();
    let valid_start = match chars.next() {
        None => may_be_empty,
        Some(c) => c.is_ascii_lowercase() || c == '_',
    };
    if !valid_start
        || !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        || name.len() > 30
    {
        return Err(Error::invalid(
            what,
            format!("{name:?} must be a lowercase identifier ([a-z_][a-z0-9_]*, at most 30 bytes)"),
        ));
    }
    Ok(())
}

/// The span of a results partition unless `WorkerBuilder::results_partition` says
/// otherwise: a day.
pub(crate) const RESULTS_PARTITION: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Checks a partition period: whole minutes, from an hour to a year.
pub(crate) fn check_period(period: std::time::Duration) -> Result<()> {
    if period < std::time::Duration::from_secs(3600)
        || period > std::time::Duration::from_secs(366 * 24 * 3600)
        || period.as_secs() % 60 != 0
        || period.subsec_nanos() != 0
    {
        return Err(Error::invalid(
            "results partition period",
            format!(
                "{} must be whole minutes, from 1 hour to 366 days",
                humantime::format_duration(period)
            ),
        ));
    }
    Ok(())
}

/// The smallest UUIDv7 of a millisecond: every id posted earlier sorts below it. The
/// results partitions' bounds are such ids, so a partition holds the jobs posted in its
/// span.
pub(crate) fn id_floor(at: DateTime<Utc>) -> Uuid {
    let millis = u64::try_from(at.timestamp_millis()).unwrap_or(0);
    let mut bytes = [0; 16];
    bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
    Uuid::from_bytes(bytes)
}

/// The millisecond of a UUIDv7 (of a partition bound).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn millis_of(id: Uuid) -> i64 {
    let mut bytes = [0; 8];
    bytes[2..].copy_from_slice(&id.as_bytes()[..6]);
    i64::from_be_bytes(bytes)
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) fn time_of(millis: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(millis).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Wakes this process's workers on backends without notifications (SQLite, MySQL):
/// every enqueue bumps it, every such worker's listener watches it. One for all databases
/// of the process: a wake-up for another database costs a worker one claim that finds
/// nothing.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
static WAKE: LazyLock<tokio::sync::watch::Sender<u64>> =
    LazyLock::new(|| tokio::sync::watch::channel(0).0);

#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) fn wake() {
    WAKE.send_modify(|n| *n = n.wrapping_add(1));
}

#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) fn wake_ups() -> tokio::sync::watch::Receiver<u64> {
    WAKE.subscribe()
}

/// Cancelled jobs, for this process's workers to stop them at once if they run them (on
/// every backend; PostgreSQL tells other processes by a notification on
/// `Schema::control_channel`, the others by the next heartbeat).
static CANCELS: LazyLock<tokio::sync::broadcast::Sender<Uuid>> =
    LazyLock::new(|| tokio::sync::broadcast::channel(1024).0);

pub(crate) fn cancelled(ids: &[Uuid]) {
    for id in ids {
        let _ = CANCELS.send(*id);
    }
    // Cancelled jobs are final.
    jobs_finished();
}

pub(crate) fn cancels() -> tokio::sync::broadcast::Receiver<Uuid> {
    CANCELS.subscribe()
}

/// Bumped when a worker or a cancel of this process records final outcomes, so
/// `Client::wait` in this process looks again at once.
static FINISHED: LazyLock<tokio::sync::watch::Sender<u64>> =
    LazyLock::new(|| tokio::sync::watch::channel(0).0);

pub(crate) fn jobs_finished() {
    FINISHED.send_modify(|n| *n = n.wrapping_add(1));
}

/// Wakes `Client::wait` when jobs finish: those of this process's workers at once; on
/// PostgreSQL, those of any process through the done channel.
pub(crate) struct Finished {
    local: tokio::sync::watch::Receiver<u64>,
    #[cfg(feature = "postgres")]
    remote: Option<sqlx::postgres::PgListener>,
}

impl Finished {
    /// Starts listening (before the waiter's first look, so nothing is missed). Without a
    /// listener (another backend, or it cannot connect) the waiter polls.
    pub(crate) async fn new(pool: &Pool, schema: &Schema) -> Self {
        #[cfg(feature = "postgres")]
        let remote = match pool {
            Pool::Postgres(pool) => {
                let listen = async {
                    let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
                    listener.listen(&schema.done_channel()).await?;
                    Ok::<_, sqlx::Error>(listener)
                };
                listen
                    .await
                    .inspect_err(|e| tracing::debug!("sk: wait polls, cannot listen: {e}"))
                    .ok()
            }
            #[allow(unreachable_patterns)]
            _ => None,
        };
        #[cfg(not(feature = "postgres"))]
        let _ = (pool, schema);
        Finished {
            local: FINISHED.subscribe(),
            #[cfg(feature = "postgres")]
            remote,
        }
    }

    /// Marks job `id` as waited on, so that its completion notifies the done channel
    /// (PostgreSQL; the others have no notifications). Without the mark (the job is
    /// finished already, or the database fails) the waiter still looks after each poll.
    pub(crate) async fn mark(&self, pool: &Pool, schema: &Schema, id: uuid::Uuid) {
        #[cfg(feature = "postgres")]
        if let (Pool::Postgres(pool), Some(_)) = (pool, &self.remote) {
            let marked = sqlx::query(&format!(
                "UPDATE {} SET task_waited = true WHERE task_id = $1 AND NOT task_waited",
                schema.table("tasks_queue_t")
            ))
            .bind(id)
            .execute(pool)
            .await;
            if let Err(e) = marked {
                tracing::debug!("sk: wait polls, cannot mark job {id} as waited on: {e}");
            }
        }
        #[cfg(not(feature = "postgres"))]
        let _ = (pool, schema, id);
    }

    /// Returns when jobs finished somewhere, or after `at_most`.
    pub(crate) async fn next(&mut self, at_most: std::time::Duration) {
        let local = &mut self.local;
        #[cfg(feature = "postgres")]
        let slot = &mut self.remote;
        #[cfg(feature = "postgres")]
        let remote = async move {
            match slot.as_mut() {
                Some(listener) => {
                    if listener.try_recv().await.is_err() {
                        // Polls from now on.
                        *slot = None;
                    }
                }
                None => std::future::pending().await,
            }
        };
        #[cfg(not(feature = "postgres"))]
        let remote = std::future::pending::<()>();
        tokio::select! {
            _ = local.changed() => {}
            () = remote => {}
            () = tokio::time::sleep(at_most) => {}
        }
    }
}

/// Bumped when this process pauses or resumes a queue or sets its global limit, so its
/// workers read the queues table again at once (PostgreSQL also tells other processes, on the control channel).
static PAUSES: LazyLock<tokio::sync::watch::Sender<u64>> =
    LazyLock::new(|| tokio::sync::watch::channel(0).0);

pub(crate) fn pauses_changed() {
    PAUSES.send_modify(|n| *n = n.wrapping_add(1));
}

pub(crate) fn pauses() -> tokio::sync::watch::Receiver<u64> {
    PAUSES.subscribe()
}

/// What cancelling a live job records (SQLite, MySQL; PostgreSQL does the same in SQL):
/// its attempts whose lease ran out, then the run it stops (outcome "cancelled") or, when
/// that run's lease had run out too, a lost attempt. Also whether it was running, and how
/// many of those attempts failed.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) struct CancelledRun<'a> {
    pub(crate) lost: Option<&'a str>,
    pub(crate) holder: Option<&'a str>,
    pub(crate) attempt: i32,
    pub(crate) started_at: Option<String>,
    pub(crate) lease_valid: bool,
}

#[cfg(any(feature = "sqlite", feature = "mysql"))]
impl CancelledRun<'_> {
    pub(crate) fn attempts(&self, now: &str) -> (Vec<serde_json::Value>, bool, i64) {
        let mut all: Vec<serde_json::Value> = self
            .lost
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_default();
        let Some(holder) = self.holder else {
            let failed = all.len() as i64;
            return (all, false, failed);
        };
        let running = self.lease_valid;
        all.push(if running {
            serde_json::json!({
                "attempt": self.attempt, "worker": holder, "started_at": self.started_at,
                "ended_at": now, "outcome": "cancelled", "kind": "cancelled",
                "message": "cancelled while it ran", "recoverable": false,
            })
        } else {
            serde_json::json!({
                "attempt": self.attempt, "worker": holder, "started_at": self.started_at,
                "ended_at": now, "outcome": "lost", "kind": "worker_lost",
                "message": "worker lost: its lease ran out before it recorded an outcome (a crash, a stall or a lost connection)",
                "recoverable": true,
            })
        });
        let failed = all.len() as i64 - i64::from(running);
        (all, running, failed)
    }
}

/// The not-before time of a job that waits on others (a workflow's later stage): later
/// than any claim reaches. The success of its last dependency makes it due then.
pub(crate) const WAITING_UNTIL: DateTime<Utc> = match DateTime::from_timestamp(253_402_214_400, 0) {
    // 9999-12-31, within every backend's timestamp type.
    Some(at) => at,
    None => DateTime::<Utc>::MAX_UTC,
};

/// What became of each dependency of a job being enqueued, in order: `Some(output)` for
/// one that succeeded already, `None` for one still live. `live` are the ids among
/// `deps` still in the queue (now marked as having dependants); `ended` the results rows
/// of the others: id, task type, status, output.
///
/// # Errors
/// A dependency that failed or was cancelled already, or that does not exist.
pub(crate) fn dependency_states(
    deps: &[Uuid],
    live: &[Uuid],
    ended: &[(Uuid, String, i32, Option<String>)],
) -> Result<Vec<Option<Option<String>>>> {
    deps.iter()
        .map(|dep| {
            if live.contains(dep) {
                return Ok(None);
            }
            match ended.iter().find(|e| e.0 == *dep) {
                Some((_, _, 3, output)) => Ok(Some(output.clone())),
                Some((_, task_type, status, _)) => Err(crate::Error::invalid(
                    "dependency",
                    format!(
                        "job {dep} ({task_type}) cannot be waited on: it {}",
                        match crate::model::JobStatus::from_code(*status) {
                            crate::model::JobStatus::Fatal => "failed for good",
                            crate::model::JobStatus::Cancelled => "was cancelled",
                            _ => "left the queue without succeeding (taken by a seed consumer)",
                        }
                    ),
                )),
                None => Err(crate::Error::invalid(
                    "dependency",
                    format!("there is no job {dep} to wait on"),
                )),
            }
        })
        .collect()
}

/// Checks the jobs of one stage that wait on `deps` (deduplicated in place, first
/// place kept): no unique key, period or run-at time of their own.
pub(crate) fn check_dependants(
    jobs: &[NewJob],
    deps: &mut Vec<Uuid>,
    now: DateTime<Utc>,
) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    deps.retain(|d| seen.insert(*d));
    for job in jobs {
        let what = if job.unique_key.is_some() {
            "a unique key"
        } else if job.every_ms.is_some() {
            "a period"
        } else if job.run_at > now {
            "a run-at time"
        } else {
            continue;
        };
        return Err(crate::Error::invalid(
            "dependency",
            format!(
                "job `{}` waits on other jobs and runs when they have succeeded; it cannot also have {what}",
                job.task_type
            ),
        ));
    }
    Ok(())
}

/// The message a dependant records when its dependency `id` of `task_type` ended with
/// `status` (fatal or cancelled) for `reason`.
pub(crate) fn dependency_message(
    id: Uuid,
    task_type: &str,
    cancelled: bool,
    reason: &str,
) -> String {
    if cancelled {
        format!("dependency {id} ({task_type}) was cancelled: {reason}")
    } else {
        format!("dependency {id} ({task_type}) failed: {reason}")
    }
}

/// The error kind a dependant records when a dependency ended without succeeding.
pub(crate) fn dependency_kind(cancelled: bool) -> &'static str {
    if cancelled {
        "dependency_cancelled"
    } else {
        "dependency_failed"
    }
}

/// A job to insert.
pub(crate) struct NewJob {
    pub(crate) id: Uuid,
    pub(crate) task_type: std::borrow::Cow<'static, str>,
    pub(crate) source: String,
    pub(crate) payload: String,
    pub(crate) queue: String,
    pub(crate) priority: i32,
    pub(crate) run_at: DateTime<Utc>,
    pub(crate) max_attempts: i32,
    pub(crate) unique_key: Option<String>,
    /// `None` with a key: mode "once" (the scheduler's ticks).
    pub(crate) unique_mode: Option<crate::model::UniqueMode>,
    pub(crate) tenant: Option<String>,
    pub(crate) correlation_id: Option<String>,
    /// A JSON object.
    pub(crate) metadata: Option<String>,
    /// A periodic job's period, in milliseconds (`#[job(every)]`).
    pub(crate) every_ms: Option<i64>,
    /// A run-time limit over the job type's own, in milliseconds (`with_timeout`).
    pub(crate) timeout_ms: Option<i64>,
}

/// Whether the jobs of a batch differ in nothing but id and payload, none with a unique
/// key (the usual `enqueue_many`): a store then sends those two per job and the rest once.
pub(crate) fn uniform(jobs: &[NewJob]) -> bool {
    let Some(first) = jobs.first() else {
        return false;
    };
    jobs.iter().all(|j| {
        j.unique_key.is_none()
            && j.task_type == first.task_type
            && j.source == first.source
            && j.queue == first.queue
            && j.priority == first.priority
            && j.run_at == first.run_at
            && j.max_attempts == first.max_attempts
            && j.tenant == first.tenant
            && j.correlation_id == first.correlation_id
            && j.metadata == first.metadata
            && j.every_ms == first.every_ms
            && j.timeout_ms == first.timeout_ms
    })
}

/// What a claim asks for: up to `limit` due jobs of these task types (and queues,
/// tenants), none of the `paused` queues, leased until `lease_until`.
#[derive(Clone, Copy)]
pub(crate) struct Claim<'a> {
    pub(crate) task_types: &'a [String],
    pub(crate) queues: Option<&'a [String]>,
    pub(crate) tenants: Option<&'a [String]>,
    pub(crate) paused: &'a [String],
    /// `queues` is one queue with a concurrency limit across workers: the claim takes
    /// the queue's row lock and at most the limit less the queue's running jobs.
    pub(crate) capped: bool,
    pub(crate) limit: i64,
    pub(crate) now: DateTime<Utc>,
    pub(crate) lease_until: DateTime<Utc>,
}

/// A pool's open connections, its most, and how long it waits for one.
fn pool_state<DB: sqlx::Database>(pool: &sqlx::Pool<DB>) -> (u32, u32, std::time::Duration) {
    let options = pool.options();
    (
        pool.size(),
        options.get_max_connections(),
        options.get_acquire_timeout(),
    )
}

/// The error of a pool that gave no connection within `waited` while a direct connection
/// succeeds: exhausted when all its connections were open (and busy), stalled when it had
/// room (its new connections failed: "give the pool more connections" with 4 of 37 open
/// sent an operator the wrong way during an outage).
pub(crate) fn pool_timed_out(waited: std::time::Duration, size: u32, max: u32) -> Error {
    if size >= max {
        Error::PoolExhausted { waited, size, max }
    } else {
        Error::PoolStalled { waited, size, max }
    }
}

/// A job this worker now holds a lease on.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ClaimedJob {
    pub(crate) task_id: Uuid,
    pub(crate) task_type: String,
    /// The seed's column is nullable text: another producer may leave it empty.
    pub(crate) task_payload: Option<String>,
    pub(crate) task_attempt: i32,
    pub(crate) task_max_attempts: i32,
    pub(crate) task_priority: i32,
    pub(crate) task_queue: String,
    pub(crate) task_posted_at_ts: DateTime<Utc>,
    pub(crate) task_tenant: Option<String>,
    pub(crate) task_correlation_id: Option<String>,
    pub(crate) task_metadata: Option<String>,
    /// A run-time limit given at enqueue, in milliseconds.
    pub(crate) task_timeout_ms: Option<i64>,
    /// Set (0) for a job that waited on others: its inputs are their outputs.
    pub(crate) task_waiting_on: Option<i32>,
    /// The claim's time (set by the producer, not read from the row).
    #[sqlx(skip)]
    pub(crate) claimed_at: Option<DateTime<Utc>>,
    /// Why sk cannot read the rest of the row (a value another producer wrote that no
    /// check refused): the job ends fatal with this reason without running, alone, and
    /// the other jobs of its claim run.
    #[sqlx(skip)]
    pub(crate) unreadable: Option<Box<str>>,
}

impl ClaimedJob {
    /// A claimed row of which only the lease (`id`, `attempt`) and the task type could
    /// be read; `reason` says what could not.
    pub(crate) fn unreadable(id: Uuid, task_type: String, attempt: i32, reason: String) -> Self {
        ClaimedJob {
            task_id: id,
            task_type,
            task_payload: None,
            task_attempt: attempt,
            task_max_attempts: attempt.max(1),
            task_priority: 0,
            task_queue: String::new(),
            task_posted_at_ts: DateTime::<Utc>::UNIX_EPOCH,
            task_tenant: None,
            task_correlation_id: None,
            task_metadata: None,
            task_timeout_ms: None,
            task_waiting_on: None,
            claimed_at: None,
            unreadable: Some(reason.into()),
        }
    }
}

/// Decodes one claimed row on its own, so one row sk cannot read never costs the rest of
/// its claim: such a row comes back [`ClaimedJob::unreadable`] when its id, attempt and
/// task type can be read, and as an error (for this row alone) when they cannot. A
/// decoder that panics (sqlx's PostgreSQL time past chrono's range, `infinity`) is a
/// reason like another. `attempt_offset` is added to the row's attempt (MySQL reads the
/// row before its lease is written).
pub(crate) fn claimed_row<'r, R>(row: &'r R, attempt_offset: i32) -> Result<ClaimedJob>
where
    R: sqlx::Row,
    ClaimedJob: sqlx::FromRow<'r, R>,
    &'static str: sqlx::ColumnIndex<R>,
    Uuid: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i32: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        <ClaimedJob as sqlx::FromRow<'r, R>>::from_row(row)
    }));
    let reason = match decoded {
        Ok(Ok(mut job)) => {
            job.task_attempt += attempt_offset;
            return Ok(job);
        }
        Ok(Err(e)) => e.to_string(),
        Err(panic) => panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .map_or_else(
                || "a value out of the range sk reads".to_owned(),
                |m| format!("a value out of the range sk reads ({m})"),
            ),
    };
    let id: Uuid = row.try_get("task_id")?;
    let attempt: i32 = row.try_get("task_attempt")?;
    let task_type: String = row.try_get("task_type")?;
    Ok(ClaimedJob::unreadable(
        id,
        task_type,
        attempt + attempt_offset,
        reason,
    ))
}

/// Logs a claimed row of which not even the lease can be read (`claimed_row`'s error): it
/// is left to its lease. (MySQL leases a row only after reading it, and leaves such a row
/// alone.)
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) fn unleasable(error: &Error) {
    tracing::error!("sk: a claimed row whose id, attempt or task type cannot be read is left to its lease: {error}");
}

/// The fencing token of one claim: a finalization must present both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Lease {
    pub(crate) id: Uuid,
    pub(crate) attempt: i32,
}

/// `items` cut into consecutive parts of at most `max_items` items and `max_bytes` bytes
/// by `size`, or of one item where that alone is more; none for no items.
pub(crate) fn parts<T>(
    items: &[T],
    max_items: usize,
    max_bytes: usize,
    size: impl Fn(&T) -> usize,
) -> Vec<std::ops::Range<usize>> {
    let mut parts = Vec::with_capacity(1);
    let (mut start, mut bytes) = (0, 0);
    for (i, item) in items.iter().enumerate() {
        let n = size(item);
        if i > start && (i - start >= max_items || bytes + n > max_bytes) {
            parts.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += n;
    }
    if start < items.len() {
        parts.push(start..items.len());
    }
    parts
}

/// Whether the database refused a write for the rows it holds (a data or constraint
/// error: a value it cannot store, a trigger or check that rejects the row), not for its
/// own state (unreachable, read-only, a deadlock or lock wait, out of space). Such a
/// write fails the same way each time it is tried, so retrying it cannot help.
pub(crate) fn refused_for_its_rows(e: &crate::Error) -> bool {
    let crate::Error::Database(sqlx::Error::Database(db)) = e else {
        return false;
    };
    if !matches!(db.kind(), sqlx::error::ErrorKind::Other) {
        return true;
    }
    // SQLSTATE classes 22 (data exception), 23 (integrity constraint violation) and, on
    // PostgreSQL, 54 (a program limit: a row or index entry too large).
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    let class = |state: &str| matches!(state.get(..2), Some("22" | "23"));
    #[cfg(feature = "postgres")]
    if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        return class(pg.code()) || pg.code().starts_with("54");
    }
    #[cfg(feature = "mysql")]
    if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        // Incorrect value (1292, 1366), out of range (1264), truncated (1265), too long
        // (1406) and invalid JSON (3140) carry SQLSTATE HY000 on MySQL.
        return my.code().is_some_and(class)
            || matches!(my.number(), 1264 | 1265 | 1292 | 1366 | 1406 | 3140);
    }
    #[cfg(feature = "sqlite")]
    if let Some(lite) = db.try_downcast_ref::<sqlx::sqlite::SqliteError>() {
        // The primary result code of the extended one: SQLITE_TOOBIG, SQLITE_CONSTRAINT
        // (a trigger's RAISE included), SQLITE_MISMATCH.
        let code = sqlx::error::DatabaseError::code(lite)
            .and_then(|c| c.parse::<i32>().ok())
            .unwrap_or_default();
        return matches!(code & 0xff, 18..=20);
    }
    false
}

/// A successful run to record.
pub(crate) struct Success {
    pub(crate) lease: Lease,
    pub(crate) millis: i64,
    /// The handler's `Ok` value as JSON, unless it returned `()`.
    pub(crate) output: Option<String>,
}

/// A failed run to record.
pub(crate) struct Failure {
    pub(crate) lease: Lease,
    pub(crate) millis: i64,
    pub(crate) status: crate::model::JobStatus,
    /// `Some` to retry at that time, `None` to finalize.
    pub(crate) retry_at: Option<DateTime<Utc>>,
    pub(crate) kind: String,
    pub(crate) message: String,
    pub(crate) detail: Option<String>,
    pub(crate) recoverable: bool,
}

/// A queue row read under a lease, as the SQLite and MySQL stores hold it (their times
/// differ: text on SQLite, `DateTime` on MySQL): what a run's results row takes from it.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) trait LeasedRow {
    /// A time as the backend binds it.
    type Time;
    fn task_id(&self) -> Uuid;
    /// Attempts whose lease ran out, as the JSON array the claim noted.
    fn lost_attempts(&self) -> Option<&str>;
    /// When this run was claimed.
    fn claimed_at(&self) -> Option<Self::Time>;
    fn parse_time(text: &str) -> Option<Self::Time>;
    fn time_text(time: Self::Time) -> String;

    /// The attempts whose lease ran out since the last recorded outcome.
    fn lost(&self) -> Vec<serde_json::Value> {
        self.lost_attempts()
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_default()
    }

    /// When the job first started: its first lost attempt, or this run.
    fn first_started(&self, lost: &[serde_json::Value]) -> Option<Self::Time> {
        lost.first()
            .and_then(|a| a.get("started_at"))
            .and_then(|s| s.as_str())
            .and_then(Self::parse_time)
            .or_else(|| self.claimed_at())
    }
}

/// A failed run's values for its results row.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) struct FailedRun<'a, R: LeasedRow> {
    pub(crate) row: &'a R,
    pub(crate) failure: &'a Failure,
    /// When the job first started.
    pub(crate) first: Option<R::Time>,
    /// The attempts that failed: this one and the lost ones.
    pub(crate) failed: i64,
    /// The attempt log after this run (`Failure::attempt_log`).
    pub(crate) log: String,
}

/// The results-row values of the failed runs of `rows` (`by_id`: their failures;
/// `recorded`: the attempt logs their results rows hold), ended at `now` by `worker`.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) fn failed_runs<'a, R: LeasedRow>(
    rows: &'a [R],
    by_id: &std::collections::HashMap<Uuid, &'a Failure>,
    recorded: &std::collections::HashMap<Uuid, Option<String>>,
    worker: &str,
    now: String,
) -> Vec<FailedRun<'a, R>> {
    rows.iter()
        .map(|row| {
            let failure = by_id[&row.task_id()];
            let lost = row.lost();
            let first = row.first_started(&lost);
            let failed = 1 + lost.len() as i64;
            let log = failure.attempt_log(
                recorded.get(&row.task_id()).and_then(|r| r.as_deref()),
                lost,
                worker,
                row.claimed_at().map(R::time_text),
                now.clone(),
            );
            FailedRun {
                row,
                failure,
                first,
                failed,
                log,
            }
        })
        .collect()
}

impl Failure {
    /// The job's attempt log after this failure, as JSON text: the attempts its results
    /// row holds (`recorded`), the lost ones since (`lost`), then this run's, which
    /// `worker` started at `started_at`. (PostgreSQL builds it in SQL.)
    #[cfg(any(feature = "sqlite", feature = "mysql"))]
    pub(crate) fn attempt_log(
        &self,
        recorded: Option<&str>,
        lost: Vec<serde_json::Value>,
        worker: &str,
        started_at: Option<String>,
        ended_at: String,
    ) -> String {
        let mut log: Vec<serde_json::Value> = recorded
            .and_then(|r| serde_json::from_str(r).ok())
            .unwrap_or_default();
        log.extend(lost);
        log.push(serde_json::json!({
            "attempt": self.lease.attempt,
            "worker": worker,
            "started_at": started_at,
            "ended_at": ended_at,
            "outcome": if self.retry_at.is_none() { "fatal" } else { "retried" },
            "kind": self.kind,
            "message": self.message,
            "detail": self.detail,
            "recoverable": self.recoverable,
        }));
        serde_json::Value::Array(log).to_string()
    }

    /// The seed's one-column `task_last_error`: type, message and detail as text.
    pub(crate) fn seed_error(&self) -> String {
        match &self.detail {
            Some(detail) => format!("{}: {}\n{detail}", self.kind, self.message),
            None => format!("{}: {}", self.kind, self.message),
        }
    }
}

/// A connection pool of a [`Backend`]: what the worker, queue info, stored schedules and
/// [`migrate`](crate::migrate) take. Made from a `sqlx::PgPool`, `sqlx::SqlitePool` or
/// `sqlx::MySqlPool`
/// (pass the pool, or a reference); the backend follows from the pool.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Pool {
    /// PostgreSQL (cargo feature `postgres`).
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
    /// SQLite (cargo feature `sqlite`).
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqlitePool),
    /// MySQL 8 or MariaDB 10.6+ (cargo feature `mysql`).
    #[cfg(feature = "mysql")]
    MySql(sqlx::MySqlPool),
}

/// `From` a backend's pool and a reference to it.
macro_rules! pool_from {
    ($feature:literal, $variant:ident, $pool:ty) => {
        #[cfg(feature = $feature)]
        impl From<$pool> for Pool {
            fn from(pool: $pool) -> Self {
                Pool::$variant(pool)
            }
        }

        #[cfg(feature = $feature)]
        impl From<&$pool> for Pool {
            fn from(pool: &$pool) -> Self {
                Pool::$variant(pool.clone())
            }
        }
    };
}

pool_from!("postgres", Postgres, sqlx::PgPool);
pool_from!("sqlite", Sqlite, sqlx::SqlitePool);
pool_from!("mysql", MySql, sqlx::MySqlPool);

impl Pool {
    /// Connects to the database a URL names, on the backend its scheme says:
    /// `postgres://` (or `postgresql://`), `sqlite:` and `mysql://` (or `mariadb://`).
    /// For tools and scripts; an application usually builds its own sqlx pool.
    ///
    /// ```no_run
    /// # async fn f() -> sk_runtime::Result<()> {
    /// let pool = sk_runtime::Pool::connect("postgres://postgres@127.0.0.1:5432/app").await?;
    /// let client = sk_runtime::Client::new(pool);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`](crate::Error::Invalid) for a URL of no known scheme or of a
    /// backend this build leaves out (its cargo feature is off);
    /// [`Error::Connect`](crate::Error::Connect) when the database cannot be reached, with
    /// the address (never the password) and the cause.
    pub async fn connect(url: &str) -> Result<Pool> {
        let scheme = url.split(':').next().unwrap_or_default();
        let connect_error = |e: sqlx::Error| crate::Error::Connect {
            address: without_password(url),
            cause: e.to_string(),
        };
        // One direct connection first: a pool retries a refused connection in silence
        // until its timeout, this one says why at once.
        match scheme {
            #[cfg(feature = "postgres")]
            "postgres" | "postgresql" => {
                probe::<sqlx::PgConnection>(url)
                    .await
                    .map_err(connect_error)?;
                Ok(Pool::Postgres(
                    sqlx::PgPool::connect_lazy(url).map_err(connect_error)?,
                ))
            }
            #[cfg(feature = "sqlite")]
            "sqlite" => {
                probe::<sqlx::SqliteConnection>(url)
                    .await
                    .map_err(connect_error)?;
                Ok(Pool::Sqlite(
                    sqlx::SqlitePool::connect_lazy(url).map_err(connect_error)?,
                ))
            }
            #[cfg(feature = "mysql")]
            "mysql" | "mariadb" => {
                let url = url.replacen("mariadb:", "mysql:", 1);
                probe::<sqlx::MySqlConnection>(&url)
                    .await
                    .map_err(connect_error)?;
                Ok(Pool::MySql(
                    sqlx::MySqlPool::connect_lazy(&url).map_err(connect_error)?,
                ))
            }
            // Reached only when the backend's feature is off.
            #[allow(unreachable_patterns)]
            "postgres" | "postgresql" | "sqlite" | "mysql" | "mariadb" => {
                Err(crate::Error::invalid(
                    "database url",
                    format!("this build of sk has no {scheme} backend (its cargo feature is off)"),
                ))
            }
            _ => Err(crate::Error::invalid(
                "database url",
                format!(
                    "{:?} names no known database: use postgres://, sqlite: or mysql://",
                    without_password(url)
                ),
            )),
        }
    }
}

/// Opens and closes one connection.
#[cfg(any(feature = "postgres", feature = "sqlite", feature = "mysql"))]
async fn probe<C: sqlx::Connection>(url: &str) -> std::result::Result<(), sqlx::Error> {
    C::connect(url).await?.close().await
}

/// A database URL without its password, for messages.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((user, host)) if user.contains(':') => {
            let name = user.split(':').next().unwrap_or_default();
            format!("{scheme}://{name}:***@{host}")
        }
        _ => url.to_owned(),
    }
}

/// What every claim obeys from the queues table, as a worker last read it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct QueueControls {
    /// Queues an operator paused: no claim takes their jobs.
    pub(crate) paused: Vec<String>,
    /// Queues with a concurrency limit across workers: each claimed on its own, under
    /// its row's lock.
    pub(crate) capped: Vec<String>,
}

impl QueueControls {
    /// From rows of the queues table: (name, paused, has a global limit).
    pub(crate) fn from_rows(rows: Vec<(String, bool, bool)>) -> Self {
        let mut controls = QueueControls::default();
        for (name, paused, capped) in rows {
            if capped {
                controls.capped.push(name.clone());
            }
            if paused {
                controls.paused.push(name);
            }
        }
        controls
    }
}

/// Checks a global limit and turns it into the column's value.
pub(crate) fn global_limit_value(limit: Option<u32>) -> Result<Option<i32>> {
    limit
        .map(|n| match i32::try_from(n) {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(crate::Error::invalid(
                "global limit",
                format!("{n} is not between 1 and {}", i32::MAX),
            )),
        })
        .transpose()
}

/// Queue states from live counts per queue (available, scheduled, running) and the
/// queues table's rows (name, pause time, global limit), by name.
pub(crate) fn merge_queue_states(
    live: Vec<(String, i64, i64, i64, i64)>,
    controlled: Vec<(String, Option<DateTime<Utc>>, Option<i64>)>,
) -> Vec<crate::model::QueueState> {
    let mut by_name: std::collections::BTreeMap<String, crate::model::QueueState> = live
        .into_iter()
        .map(|(name, available, scheduled, running, pending)| {
            let state = crate::model::QueueState {
                name: name.clone(),
                paused_at: None,
                global_limit: None,
                available,
                scheduled,
                running,
                pending,
            };
            (name, state)
        })
        .collect();
    for (name, paused_at, global_limit) in controlled {
        let state = by_name
            .entry(name.clone())
            .or_insert_with(|| crate::model::QueueState {
                name,
                paused_at: None,
                global_limit: None,
                available: 0,
                scheduled: 0,
                running: 0,
                pending: 0,
            });
        state.paused_at = paused_at;
        state.global_limit = global_limit.and_then(|n| u32::try_from(n).ok());
    }
    by_name.into_values().collect()
}

impl Pool {
    /// The backend's name in messages.
    pub(crate) fn backend_name(&self) -> &'static str {
        match self {
            #[cfg(feature = "postgres")]
            Pool::Postgres(_) => <sqlx::Postgres as Backend>::NAME,
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(_) => <sqlx::Sqlite as Backend>::NAME,
            #[cfg(feature = "mysql")]
            Pool::MySql(_) => <sqlx::MySql as Backend>::NAME,
        }
    }

    /// How often a worker polls unless told otherwise: on MySQL, without notifications
    /// from other processes, more often.
    pub(crate) fn default_poll_interval(&self) -> std::time::Duration {
        match self {
            #[cfg(feature = "mysql")]
            Pool::MySql(_) => std::time::Duration::from_millis(200),
            #[allow(unreachable_patterns)]
            _ => std::time::Duration::from_secs(1),
        }
    }

    /// The worker's store on this pool.
    pub(crate) fn store(self, schema: Schema, worker_id: String) -> Store {
        match self {
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => Store::Postgres(postgres::PgStore {
                pool,
                schema,
                worker_id,
                partitions: Default::default(),
            }),
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool) => Store::Sqlite(sqlite::SqliteStore {
                pool,
                schema,
                worker_id,
                writer: Default::default(),
                checkpointing: Default::default(),
                since_checkpoint: Default::default(),
            }),
            #[cfg(feature = "mysql")]
            Pool::MySql(pool) => Store::MySql(mysql::MySqlStore {
                pool,
                schema,
                worker_id,
            }),
        }
    }
}

/// A stored schedule's row (`StoredSchedules`).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct ScheduleRow {
    pub(crate) schedule_name: String,
    pub(crate) task_type: String,
    pub(crate) task_payload: String,
    pub(crate) schedule_cron: String,
    pub(crate) schedule_overlap: bool,
    pub(crate) schedule_updated_at_ts: DateTime<Utc>,
}

mod sealed {
    pub trait Sealed {}
    #[cfg(feature = "postgres")]
    impl Sealed for sqlx::Postgres {}
    #[cfg(feature = "sqlite")]
    impl Sealed for sqlx::Sqlite {}
    #[cfg(feature = "mysql")]
    impl Sealed for sqlx::MySql {}
}

/// A database sk runs on, chosen by the pool or transaction you pass: `sqlx::Postgres`
/// (cargo feature `postgres`, the default), `sqlx::Sqlite` (feature `sqlite`) or
/// `sqlx::MySql` (feature `mysql`, for MySQL 8 and MariaDB 10.6+). Sealed:
/// its methods are sk's own store.
#[allow(private_interfaces)]
pub trait Backend: sqlx::Database + sealed::Sealed {
    // Boxed futures: an opaque future returned by a trait method could not be shown to be
    // `Send` for every lifetime, which an enqueue inside a spawned task needs.
    #[doc(hidden)]
    fn enqueue_one<'e, 'a, E>(
        executor: E,
        schema: &'a Schema,
        job: NewJob,
        now: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<Option<Uuid>>>
    where
        E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
        'e: 'a;

    #[doc(hidden)]
    fn enqueue_unique<'e, 'a, E>(
        executor: E,
        schema: &'a Schema,
        job: NewJob,
        mode: crate::model::UniqueMode,
        now: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<(Uuid, bool, bool)>>
    where
        E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
        'e: 'a;

    #[doc(hidden)]
    fn enqueue_many<'e, 'a, E>(
        executor: E,
        schema: &'a Schema,
        jobs: Vec<NewJob>,
        now: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<Vec<Uuid>>>
    where
        E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
        'e: 'a;

    /// Inserts jobs that wait on `deps` (all of them, in that order) in one transaction.
    #[doc(hidden)]
    fn enqueue_after<'e, 'a, E>(
        executor: E,
        schema: &'a Schema,
        jobs: Vec<NewJob>,
        deps: Vec<Uuid>,
        now: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<Vec<Uuid>>>
    where
        E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
        'e: 'a;

    /// The backend's name in messages.
    #[doc(hidden)]
    const NAME: &'static str;

    /// Begins a job's transaction on `pool`; `None` when the pool is of another backend.
    #[doc(hidden)]
    fn begin_job(pool: &Pool) -> Option<BoxFuture<'_, Result<sqlx::Transaction<'static, Self>>>>;

    /// Records a job's success inside its transaction; false when the lease was lost.
    #[doc(hidden)]
    fn complete_in<'a>(
        store: &'a Store,
        tx: &'a mut Self::Connection,
        done: &'a Success,
        now: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<bool>>;
}

/// What `.enqueue()` takes: a pool (`&pool`), a connection (`&mut conn`) or a transaction
/// (`&mut tx`, or `&mut *tx`) of a [`Backend`], so a job can be enqueued inside the
/// application's own transaction (it is stored, and its workers woken, only if that
/// transaction commits). Anything sqlx can acquire a connection from: a backend whose
/// enqueue takes more than one statement runs them on that one connection.
pub trait Executor<'e>: sqlx::Acquire<'e, Database: Backend> + Send {}

impl<'e, T> Executor<'e> for T
where
    T: sqlx::Acquire<'e> + Send,
    T::Database: Backend,
{
}

/// `Backend` for a sqlx database, by the enqueue functions of its store module.
macro_rules! backend {
    ($feature:literal, $db:ty, $module:ident, $variant:ident, $name:literal, $begin:expr) => {
        #[cfg(feature = $feature)]
        #[allow(private_interfaces)]
        impl Backend for $db {
            const NAME: &'static str = $name;

            fn begin_job(
                pool: &Pool,
            ) -> Option<BoxFuture<'_, Result<sqlx::Transaction<'static, Self>>>> {
                #[allow(unreachable_patterns)]
                match pool {
                    Pool::$variant(pool) => {
                        Some(Box::pin(async move { Ok(pool.begin_with($begin).await?) }))
                    }
                    _ => None,
                }
            }

            fn complete_in<'a>(
                store: &'a Store,
                tx: &'a mut Self::Connection,
                done: &'a Success,
                now: DateTime<Utc>,
            ) -> BoxFuture<'a, Result<bool>> {
                Box::pin(async move {
                    #[allow(unreachable_patterns)]
                    match store {
                        Store::$variant(store) => store.complete_in(tx, done, now).await,
                        _ => Err(crate::Error::invalid(
                            "transaction",
                            concat!(
                                "a job's ",
                                $name,
                                " transaction on a worker of another backend"
                            ),
                        )),
                    }
                })
            }

            fn enqueue_one<'e, 'a, E>(
                executor: E,
                schema: &'a Schema,
                job: NewJob,
                now: DateTime<Utc>,
            ) -> BoxFuture<'a, Result<Option<Uuid>>>
            where
                E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
                'e: 'a,
            {
                Box::pin(async move {
                    let mut conn = executor.acquire().await?;
                    $module::enqueue_one(&mut *conn, schema, job, now).await
                })
            }

            fn enqueue_unique<'e, 'a, E>(
                executor: E,
                schema: &'a Schema,
                job: NewJob,
                mode: crate::model::UniqueMode,
                now: DateTime<Utc>,
            ) -> BoxFuture<'a, Result<(Uuid, bool, bool)>>
            where
                E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
                'e: 'a,
            {
                Box::pin(async move {
                    let mut conn = executor.acquire().await?;
                    $module::enqueue_unique(&mut *conn, schema, job, mode, now).await
                })
            }

            fn enqueue_many<'e, 'a, E>(
                executor: E,
                schema: &'a Schema,
                jobs: Vec<NewJob>,
                now: DateTime<Utc>,
            ) -> BoxFuture<'a, Result<Vec<Uuid>>>
            where
                E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
                'e: 'a,
            {
                Box::pin(async move {
                    let mut conn = executor.acquire().await?;
                    $module::enqueue_many(&mut *conn, schema, jobs, now).await
                })
            }

            fn enqueue_after<'e, 'a, E>(
                executor: E,
                schema: &'a Schema,
                jobs: Vec<NewJob>,
                mut deps: Vec<Uuid>,
                now: DateTime<Utc>,
            ) -> BoxFuture<'a, Result<Vec<Uuid>>>
            where
                E: sqlx::Acquire<'e, Database = Self> + Send + 'a,
                'e: 'a,
            {
                Box::pin(async move {
                    check_dependants(&jobs, &mut deps, now)?;
                    let mut conn = executor.acquire().await?;
                    $module::flow::enqueue_after(&mut *conn, schema, jobs, deps, now).await
                })
            }
        }
    };
}

backend!(
    "postgres",
    sqlx::Postgres,
    postgres,
    Postgres,
    "PostgreSQL",
    "BEGIN"
);
// The write lock from the start: a deferred transaction that reads, then writes after
// another connection committed, fails at once (SQLITE_BUSY_SNAPSHOT).
backend!(
    "sqlite",
    sqlx::Sqlite,
    sqlite,
    Sqlite,
    "SQLite",
    "BEGIN IMMEDIATE"
);
// READ COMMITTED, as every worker transaction (the mysql module's docs).
backend!("mysql", sqlx::MySql, mysql, MySql, "MySQL", mysql::BEGIN);

/// Tuple counts of one of sk's tables.
pub(crate) struct TableHealth {
    /// Its qualified name.
    pub(crate) name: String,
    pub(crate) is_queue: bool,
    pub(crate) live: i64,
    pub(crate) dead: i64,
    /// Rows inserted, updated or deleted since the table's statistics were taken.
    pub(crate) changed: i64,
    /// Whether the table has statistics at all.
    pub(crate) analyzed: bool,
}

/// Whether `error` says a table does not exist (PostgreSQL, MySQL or SQLite).
#[allow(dead_code)] // Not every backend combination reads it.
pub(crate) fn no_such_table(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(e) => {
            matches!(e.code().as_deref(), Some("42P01" | "42S02"))
                || e.message().contains("no such table")
        }
        _ => false,
    }
}

/// Why a direct connection attempt failed.
pub(crate) enum ProbeFailure {
    /// Waiting can cure it: refused, reset, timed out, the server starting up or full.
    Transient(Error),
    /// It needs a change of configuration: authentication, an unknown database, TLS.
    Permanent(Error),
}

/// What a retirement pass did.
#[derive(Debug, Default)]
pub(crate) struct Retired {
    pub(crate) dropped: Vec<String>,
    pub(crate) archived: Vec<String>,
    /// Past the retention, kept for live jobs (or jobs finished less than the retention
    /// ago); their rows finished before the cutoff were pruned one by one.
    pub(crate) held: Vec<String>,
    /// Rows pruned one by one, in held partitions and the default one.
    pub(crate) rows: u64,
}

/// The worker's store: one variant per backend (cargo features), each method a `match`,
/// so the worker's pipeline (claim, execute, finalize, heartbeats, schedules, upkeep) is
/// the same code on every backend, with static dispatch.
#[derive(Clone)]
pub(crate) enum Store {
    #[cfg(feature = "postgres")]
    Postgres(postgres::PgStore),
    #[cfg(feature = "sqlite")]
    Sqlite(sqlite::SqliteStore),
    #[cfg(feature = "mysql")]
    MySql(mysql::MySqlStore),
}

impl Store {
    /// The store's pool and schema, for the client calls a worker makes itself.
    pub(crate) fn client_side(&self) -> (Pool, &Schema) {
        match self {
            #[cfg(feature = "postgres")]
            Store::Postgres(s) => (Pool::Postgres(s.pool.clone()), &s.schema),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(s) => (Pool::Sqlite(s.pool.clone()), &s.schema),
            #[cfg(feature = "mysql")]
            Store::MySql(s) => (Pool::MySql(s.pool.clone()), &s.schema),
        }
    }

    /// This worker's id, as stored in leases and metrics.
    pub(crate) fn worker_id(&self) -> &str {
        match self {
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => &store.worker_id,
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => &store.worker_id,
            #[cfg(feature = "mysql")]
            Store::MySql(store) => &store.worker_id,
        }
    }

    /// The server's connection limit for clients like sk and how many connections it
    /// has open now (`None` for SQLite, which has no server).
    pub(crate) async fn connection_room(&self) -> Result<Option<(i64, i64)>> {
        match self {
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => store.connection_room().await.map(Some),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(_) => Ok(None),
            #[cfg(feature = "mysql")]
            Store::MySql(store) => store.connection_room().await.map(Some),
        }
    }

    /// `error` with its cause, when it is a pool's timeout (sqlx's says only that it timed
    /// out, as the listener's reconnect and a read of the stored schedules met it): the
    /// database's own error from a direct connection, or how the pool stood.
    pub(crate) async fn explained(&self, error: Error) -> Error {
        if !matches!(error, Error::Database(sqlx::Error::PoolTimedOut)) {
            return error;
        }
        match self.probe().await {
            Err(ProbeFailure::Transient(e) | ProbeFailure::Permanent(e)) => e,
            Ok(()) => {
                let (size, max, waited) = match self {
                    #[cfg(feature = "postgres")]
                    Store::Postgres(s) => pool_state(&s.pool),
                    #[cfg(feature = "sqlite")]
                    Store::Sqlite(s) => pool_state(&s.pool),
                    #[cfg(feature = "mysql")]
                    Store::MySql(s) => pool_state(&s.pool),
                };
                pool_timed_out(waited, size, max)
            }
        }
    }

    /// Which of `ids` this worker recorded as succeeded: a completion retried after its
    /// reply was lost (a dropped connection after the commit) finds its own result, not a
    /// lease lost to another worker. Results rows by primary key.
    pub(crate) async fn succeeded_here(&self, ids: &[Uuid]) -> Result<Vec<Uuid>> {
        let ids: Vec<String> = ids.iter().map(|id| id.simple().to_string()).collect();
        let list = serde_json::to_string(&ids).unwrap_or_else(|_| "[]".to_owned());
        match self {
            #[cfg(feature = "postgres")]
            Store::Postgres(s) => s.succeeded_here(&list).await,
            #[cfg(feature = "sqlite")]
            Store::Sqlite(s) => s.succeeded_here(&list).await,
            #[cfg(feature = "mysql")]
            Store::MySql(s) => s.succeeded_here(&list).await,
        }
    }

    /// How many connections the store's pool may open.
    pub(crate) fn pool_max(&self) -> u32 {
        match self {
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => store.pool.options().get_max_connections(),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => store.pool.options().get_max_connections(),
            #[cfg(feature = "mysql")]
            Store::MySql(store) => store.pool.options().get_max_connections(),
        }
    }

    /// Where the store connects, for messages.
    pub(crate) fn address(&self) -> String {
        match self {
            #[cfg(feature = "postgres")]
            Store::Postgres(store) => store.address(),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(store) => store.address(),
            #[cfg(feature = "mysql")]
            Store::MySql(store) => store.address(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::pool_timed_out;
    use crate::error::Error;

    /// A pool with room that gave no connection is not "too small": during an outage the
    /// line said "give the pool more connections" with 4 of 37 open.
    #[test]
    fn a_pool_with_room_is_not_called_too_small() {
        let wait = Duration::from_secs(2);
        assert!(matches!(
            pool_timed_out(wait, 37, 37),
            Error::PoolExhausted {
                size: 37,
                max: 37,
                ..
            }
        ));
        let stalled = pool_timed_out(wait, 4, 37);
        assert!(matches!(
            stalled,
            Error::PoolStalled {
                size: 4,
                max: 37,
                ..
            }
        ));
        let said = stalled.to_string();
        assert!(
            said.contains("though it had room (4 open, at most 37)"),
            "{said}"
        );
        assert!(!said.contains("more connections"), "{said}");
    }

    /// sqlx's bare "pool timed out" (the listener's reconnect, a read of the stored
    /// schedules) is explained by a direct connection: here the database is away.
    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn a_pool_timeout_is_explained_by_its_cause() {
        let pool = sqlx::PgPool::connect_lazy("postgres://sk@127.0.0.1:1/app").unwrap();
        let store = super::Pool::from(pool).store(super::Schema::default(), "w".into());
        let said = store
            .explained(Error::Database(sqlx::Error::PoolTimedOut))
            .await
            .to_string();
        assert!(
            said.starts_with("cannot reach the database at 127.0.0.1:1/app: ")
                && said.contains("refused"),
            "{said}"
        );
        let other = store.explained(Error::JobNotFound(uuid::Uuid::nil())).await;
        assert!(matches!(other, Error::JobNotFound(_)), "{other}");
    }
}
