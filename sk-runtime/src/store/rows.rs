//! The rows the store and the worker pass each other: a job to post, a claim and what it
//! leased, a lease, an outcome to record, a stored schedule, a table's health.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::Result;
use crate::model::from_row;

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
    /// `queues` is one fair queue: the claim shares itself among the queue's tenants
    /// with due jobs, taken in turn from the first after this one (`store::fair`), and
    /// fills the rest in the queue's order.
    pub(crate) fair: Option<&'a str>,
    /// `queues` is one queue with a limit of running jobs per tenant: the claim takes
    /// the queue's row lock and each tenant's jobs up to its room, in turn from the one
    /// after `fair` (`store::fair::claim_per_tenant`).
    pub(crate) tenant_capped: bool,
    /// Only jobs without a tenant (what a claim per tenant takes last).
    pub(crate) untenanted: bool,
    pub(crate) limit: i64,
    pub(crate) now: DateTime<Utc>,
    pub(crate) lease_until: DateTime<Utc>,
}

from_row! {
/// A job this worker now holds a lease on.
#[derive(Debug)]
pub(crate) struct ClaimedJob {
    pub(crate) task_id: Uuid = "task_id",
    pub(crate) task_type: String = "task_type",
    /// The seed's column is nullable text: another producer may leave it empty.
    pub(crate) task_payload: Option<String> = "task_payload",
    pub(crate) task_attempt: i32 = "task_attempt",
    pub(crate) task_max_attempts: i32 = "task_max_attempts",
    pub(crate) task_priority: i32 = "task_priority",
    pub(crate) task_queue: String = "task_queue",
    pub(crate) task_posted_at_ts: DateTime<Utc> = "task_posted_at_ts",
    pub(crate) task_tenant: Option<String> = "task_tenant",
    pub(crate) task_correlation_id: Option<String> = "task_correlation_id",
    pub(crate) task_metadata: Option<String> = "task_metadata",
    /// A run-time limit given at enqueue, in milliseconds.
    pub(crate) task_timeout_ms: Option<i64> = "task_timeout_ms",
    /// Set (0) for a job that waited on others: its inputs are their outputs.
    pub(crate) task_waiting_on: Option<i32> = "task_waiting_on",
    /// The claim's time (set by the producer, not read from the row).
    pub(crate) claimed_at: Option<DateTime<Utc>> = [skip],
    /// Why sk cannot read the rest of the row (a value another producer wrote that no
    /// check refused): the job ends fatal with this reason without running, alone, and
    /// the other jobs of its claim run.
    pub(crate) unreadable: Option<Box<str>> = [skip],
}
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
pub(crate) fn unleasable(error: &crate::Error) {
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

/// Whether a statement failed waiting for a lock another connection holds (SQLite's
/// busy or locked database, a lock wait timeout, a deadlock or serialization failure):
/// the same statement may pass once the other connection is done.
pub(crate) fn lock_wait(e: &crate::Error) -> bool {
    matches!(e, crate::Error::Database(e) if sqlx_lock_wait(e))
}

/// `lock_wait` of an error as sqlx returns it.
pub(crate) fn sqlx_lock_wait(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else {
        return false;
    };
    #[cfg(feature = "postgres")]
    if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        return matches!(pg.code(), "55P03" | "40P01" | "40001");
    }
    #[cfg(feature = "mysql")]
    if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return matches!(my.number(), 1205 | 1213);
    }
    #[cfg(feature = "sqlite")]
    if let Some(lite) = db.try_downcast_ref::<sqlx::sqlite::SqliteError>() {
        let code = sqlx::error::DatabaseError::code(lite)
            .and_then(|c| c.parse::<i32>().ok())
            .unwrap_or_default();
        // SQLITE_BUSY and SQLITE_LOCKED, with their extended codes.
        return matches!(code & 0xff, 5 | 6);
    }
    false
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
        // (1406) and invalid JSON (MySQL's 3140, MariaDB's 4036 to 4040: a JSON function
        // of a virtual column over text that is not JSON) carry SQLSTATE HY000.
        return my.code().is_some_and(class)
            || matches!(
                my.number(),
                1264 | 1265 | 1292 | 1366 | 1406 | 3140 | 4036..=4040
            );
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
    /// Whether it gets a results row when nothing needs one: false under a result
    /// retention of zero (`WorkerBuilder::result_retention`), where a success without
    /// output leaves none unless its key, lost attempts, next run or workflow needs it.
    pub(crate) keep: bool,
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

from_row! {
/// A stored schedule's row (`StoredSchedules`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScheduleRow {
    pub(crate) schedule_name: String = "schedule_name",
    pub(crate) task_type: String = "task_type",
    pub(crate) task_payload: String = "task_payload",
    pub(crate) schedule_cron: String = "schedule_cron",
    pub(crate) schedule_overlap: bool = "schedule_overlap",
    pub(crate) schedule_updated_at_ts: DateTime<Utc> = "schedule_updated_at_ts",
}
}

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
