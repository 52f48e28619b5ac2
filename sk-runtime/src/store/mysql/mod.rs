//! MariaDB 10.6+ (not MySQL 8: the migrations use MariaDB's `IF [NOT] EXISTS` DDL):
//! migrations and every statement sk runs there.
//!
//! A claim is `SELECT … FOR UPDATE SKIP LOCKED` in a short transaction, then an `UPDATE`
//! of the rows it locked (there is no `UPDATE … RETURNING`): two workers never take the
//! same row, and neither waits for the other. Every worker transaction runs at READ
//! COMMITTED, so InnoDB takes no gap locks that would make enqueues wait for claims, and
//! a transaction InnoDB chose as a deadlock victim is run again. There is no LISTEN/NOTIFY:
//! an enqueue wakes this process's workers at once, other processes find new jobs at
//! their poll interval (200 ms by default here).
//!
//! Tables live in the connection's database, named as on SQLite ([`Schema::flat_table`]).

mod control;
pub(crate) mod flow;
mod partitions;

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlDatabaseError, MySqlPool};
use sqlx::pool::PoolConnection;
use sqlx::{Connection as _, Executor as _, MySql, QueryBuilder, Row as _};
use uuid::Uuid;

use super::driver::{Admin, Work};
use super::{
    ClaimedJob, Failure, Lease, LeasedRow, NewJob, ProbeFailure, Retired, ScheduleRow, Schema,
    Success,
};
use crate::bus::wake;
use crate::error::{Error, Result};
use crate::model::{Attempt, JobRecord, QueueCounts, QueuedJob};

/// Versioned migrations, applied in order; `__PREFIX__` is substituted.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "initial schema",
        include_str!("../../../migrations/mysql/0001_init.sql"),
    ),
    (
        2,
        "job control",
        include_str!("../../../migrations/mysql/0002_control.sql"),
    ),
    (
        3,
        "a concurrency limit per queue across workers",
        include_str!("../../../migrations/mysql/0003_global_limits.sql"),
    ),
    (
        4,
        "workflows: jobs that wait on other jobs",
        include_str!("../../../migrations/mysql/0004_workflows.sql"),
    ),
    (
        5,
        "a single enqueue in one statement",
        include_str!("../../../migrations/mysql/0005_enqueue_trigger.sql"),
    ),
    (
        6,
        "the queue table refuses a posting time sk could not read",
        include_str!("../../../migrations/mysql/0006_readable_queue_rows.sql"),
    ),
    (
        7,
        "less written per enqueued job: no enqueue trigger, no queue correlation index",
        include_str!("../../../migrations/mysql/0007_leaner_enqueue.sql"),
    ),
    (
        8,
        "three queue indexes: unique keys and leases in tables of their own",
        include_str!("../../../migrations/mysql/0008_three_queue_indexes.sql"),
    ),
];

/// The longest table name sk makes after its prefix (a retired results partition held
/// aside, `task_results_p20261122_0000`); MySQL names are at most 64 characters.
const LONGEST_NAME: usize = 27;

/// How long a pooled connection may take before the store asks why (as on PostgreSQL).
const ACQUIRE_WAIT: Duration = Duration::from_secs(2);

/// Every worker transaction: READ COMMITTED (module docs).
pub(crate) const BEGIN: &str = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION";

/// Rows per multi-row statement: at most 65,535 placeholders, 16 to a queue row.
const ROWS_PER_STATEMENT: usize = 2_000;
/// Rows per statement of `enqueue_uniform`, which binds one JSON array, not a row's
/// columns: only the payload bytes bound it.
const JSON_ROWS_PER_STATEMENT: usize = 10_000;
/// Bytes of payloads (of outputs and errors, in a completion) per multi-row statement,
/// well under the 16 MiB `max_allowed_packet` of MariaDB's defaults (MySQL's is 64 MiB).
/// A statement over it is refused and the connection closed, which looks like an outage:
/// a completion's batch was retried for ever.
const BYTES_PER_STATEMENT: usize = 4 << 20;

/// A time as a MySQL statement takes it: UTC, as a `DATETIME`. sqlx sends a
/// `DateTime<Utc>` as a `TIMESTAMP`, which MariaDB turns into NULL past that type's end
/// (2038-01-19): a job due later, or snoozed past it, was refused. Every time sk binds on
/// MySQL goes through this.
pub(crate) fn dt<T: Datetime>(at: T) -> T::Naive {
    at.naive()
}

/// What [`dt`] takes: a time, or an optional one.
pub(crate) trait Datetime {
    type Naive;
    fn naive(self) -> Self::Naive;
}

impl Datetime for DateTime<Utc> {
    type Naive = chrono::NaiveDateTime;
    fn naive(self) -> chrono::NaiveDateTime {
        self.naive_utc()
    }
}

impl Datetime for Option<DateTime<Utc>> {
    type Naive = Option<chrono::NaiveDateTime>;
    fn naive(self) -> Option<chrono::NaiveDateTime> {
        self.map(|at| at.naive_utc())
    }
}

/// Times in the JSON sk writes (attempts), as on SQLite: `2026-11-22T10:39:48.123456Z`.
fn ts(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// The same format in SQL, for a `DATETIME(6)` column.
const SQL_TS: &str = "'%Y-%m-%dT%H:%i:%s.%fZ'";

/// A UUIDv7 of `at`: the id of a rerun or a periodic job's next run.
fn uuid_v7(at: DateTime<Utc>) -> Uuid {
    let secs = u64::try_from(at.timestamp()).unwrap_or(0);
    Uuid::new_v7(uuid::Timestamp::from_unix(
        uuid::NoContext,
        secs,
        at.timestamp_subsec_nanos(),
    ))
}

/// The server's error number, if `error` is one.
fn number(error: &sqlx::Error) -> Option<u16> {
    error
        .as_database_error()
        .and_then(|e| e.try_downcast_ref::<MySqlDatabaseError>())
        .map(MySqlDatabaseError::number)
}

/// A duplicate key (1062).
fn duplicate(error: &sqlx::Error) -> bool {
    number(error) == Some(1062)
}

/// A transaction InnoDB rolled back to break a deadlock (1213), or one that waited too
/// long for a row lock (1205): run it again.
fn conflict(error: &Error) -> bool {
    matches!(error, Error::Database(e) if matches!(number(e), Some(1213 | 1205)))
}

/// The statements of one schema, formatted once.
#[derive(Default)]
pub(crate) struct Statements {
    queue: String,
    results: String,
    /// The live jobs' unique keys (migration 8).
    unique_keys: String,
    insert_queue: String,
    /// `insert_queue` of a job without a results row yet (`enqueue_one`).
    insert_plain: String,
    insert_result: String,
    enqueue_unique: String,
    success: String,
    success_again: String,
    failure: String,
    stats: String,
    counts_by_status: String,
    counts_live: String,
    peek: String,
    job: String,
}

/// The columns of a new queue row, in the order `bind_new!` binds them (`NEW_VALUES`),
/// then `task_has_result`: 1 when the results row is written with it, 0 when the job's
/// first outcome will write it.
const NEW_COLUMNS: &str = "task_id, task_type, task_source, task_payload, task_priority,
    task_posted_at_ts, task_locked_until_ts, task_queue, task_max_attempts, task_tenant,
    task_correlation_id, task_metadata, task_unique_key, task_unique_mode, task_every_ms, task_timeout_ms,
    task_has_result";
const NEW_VALUES: &str = "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?";
/// The columns of a new results row, in the order `bind_result!` binds them.
const RESULT_COLUMNS: &str = "task_id, task_type, task_source, task_queue, task_priority,
    task_unique_key, task_unique_mode, task_posted_at_ts, task_tenant, task_correlation_id, task_metadata,
    task_status";
/// What a results row repeats of its queue row.
const JOB_COLUMNS: &str =
    "task_id, task_type, task_source, task_queue, task_priority, task_posted_at_ts,
    task_tenant, task_correlation_id, task_metadata";
/// A queue row as a finalization reads it (`Row`). A posting time that is no date (the
/// 30th of February, written under `ALLOW_INVALID_DATES` past the table's check, a day
/// past its month's last) is read as the claim's time, so the job's failure is recorded.
const QUEUE_ROW: &str = "task_lock_handle_id, task_id, CAST(task_type AS CHAR) AS task_type, task_source,
    CAST(task_queue AS CHAR) AS task_queue, task_priority,
    IF(DAYOFMONTH(task_posted_at_ts) > DAYOFMONTH(LAST_DAY(task_posted_at_ts)), task_claimed_at_ts,
        task_posted_at_ts) AS task_posted_at_ts,
    CAST(task_tenant AS CHAR) AS task_tenant, CAST(task_correlation_id AS CHAR) AS task_correlation_id,
    task_metadata, task_claimed_at_ts, task_lost_attempts, task_payload, task_max_attempts,
    CAST(task_unique_key AS CHAR) AS task_unique_key, task_unique_mode, task_rerun, task_every_ms,
    task_timeout_ms, task_dependants, task_waiting_on IS NOT NULL AS task_fed";
/// The upsert of a success into a results row (left to right: MySQL's assignments see the
/// values set before them, so nothing here reads a column set earlier in the list).
/// How a failure updates a results row that exists (`failure` rows, multi-row).
const FAILURE_UPDATE: &str = "task_status = VALUES(task_status),
    task_error_count = task_error_count + VALUES(task_error_count),
    task_last_error_type = VALUES(task_last_error_type),
    task_last_error_message = VALUES(task_last_error_message),
    task_last_error_detail = VALUES(task_last_error_detail),
    task_last_error = VALUES(task_last_error),
    task_last_error_is_recoverable = VALUES(task_last_error_is_recoverable),
    task_processing_time_milliseconds = VALUES(task_processing_time_milliseconds),
    task_processing_finalized_at_ts = VALUES(task_processing_finalized_at_ts),
    task_payload = VALUES(task_payload),
    task_last_locked_by = VALUES(task_last_locked_by),
    task_errors = VALUES(task_errors),
    task_output = NULL,
    task_max_attempts = VALUES(task_max_attempts),
    task_timeout_ms = VALUES(task_timeout_ms),
    task_first_processing_attempted_at_ts =
        coalesce(task_first_processing_attempted_at_ts, VALUES(task_first_processing_attempted_at_ts)),
    task_last_processing_attempted_at_ts = VALUES(task_last_processing_attempted_at_ts)";
const SUCCESS_UPDATE: &str = "task_status = 3,
    task_processing_time_milliseconds = VALUES(task_processing_time_milliseconds),
    task_processing_finalized_at_ts = VALUES(task_processing_finalized_at_ts),
    task_last_locked_by = VALUES(task_last_locked_by),
    task_output = VALUES(task_output),
    task_first_processing_attempted_at_ts =
        coalesce(task_first_processing_attempted_at_ts, VALUES(task_first_processing_attempted_at_ts)),
    task_last_processing_attempted_at_ts = VALUES(task_last_processing_attempted_at_ts)";

impl Statements {
    pub(crate) fn new(schema: &Schema) -> Self {
        let q = schema.flat_table("tasks_queue_t");
        let r = schema.flat_table("task_results_t");
        let s = schema.flat_table("task_execution_time_stats_t");
        Statements {
            queue: q.clone(),
            results: r.clone(),
            unique_keys: schema.flat_table("unique_keys_t"),
            insert_queue: format!("INSERT INTO {q} ({NEW_COLUMNS}) VALUES ({NEW_VALUES}, 1)"),
            insert_plain: format!("INSERT INTO {q} ({NEW_COLUMNS}) VALUES ({NEW_VALUES}, 0)"),
            insert_result: format!(
                "INSERT INTO {r} ({RESULT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)"
            ),
            // The live job holding a key is changed as the new job's mode says
            // (`UniqueMode`). Binds: mode, mode, mode, payload, mode, not-before,
            // every, id. No assignment reads a column assigned before it.
            enqueue_unique: format!(
                "UPDATE {q} SET
                    task_rerun = task_rerun OR (? = 2 AND task_locked_by IS NOT NULL),
                    task_payload = CASE WHEN (? = 3 AND task_locked_by IS NULL) OR ? = 2
                        THEN ? ELSE task_payload END,
                    task_locked_until_ts = CASE WHEN ? = 3 AND task_locked_by IS NULL
                        THEN ? ELSE task_locked_until_ts END,
                    task_every_ms = coalesce(?, task_every_ms)
                 WHERE task_id = ?"
            ),
            success: format!(
                "INSERT INTO {r} ({JOB_COLUMNS}, task_status, task_processing_time_milliseconds,
                    task_processing_finalized_at_ts, task_last_locked_by, task_output,
                    task_first_processing_attempted_at_ts, task_last_processing_attempted_at_ts)"
            ),
            // A success after lost attempts: their count and the whole list of failed
            // attempts (`errors_with`) go into the record too.
            success_again: format!(
                "INSERT INTO {r} ({JOB_COLUMNS}, task_status, task_processing_time_milliseconds,
                    task_processing_finalized_at_ts, task_last_locked_by, task_output,
                    task_first_processing_attempted_at_ts, task_last_processing_attempted_at_ts,
                    task_error_count, task_errors)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 3, ?, ?, ?, ?, ?, ?, ?, ?)
                 ON DUPLICATE KEY UPDATE task_error_count = task_error_count + VALUES(task_error_count),
                    task_errors = VALUES(task_errors), {SUCCESS_UPDATE}"
            ),
            failure: format!(
                "INSERT INTO {r} ({JOB_COLUMNS}, task_status, task_error_count, task_last_error_type,
                    task_last_error_message, task_last_error_detail, task_last_error, task_last_error_is_recoverable,
                    task_processing_time_milliseconds, task_processing_finalized_at_ts, task_payload,
                    task_last_locked_by, task_errors, task_output, task_first_processing_attempted_at_ts,
                    task_last_processing_attempted_at_ts, task_max_attempts, task_timeout_ms)"
            ),
            // The average first: it reads the totals before they are added to.
            stats: format!(
                "INSERT INTO {s} (et_payload_type, et_owner_process_id, et_avg_execution_time,
                    et_fastest_execution_time, et_longest_execution_time, et_total_execution_time,
                    et_n_execution_cycles, et_last_execution_time, et_last_updated_ts)
                 VALUES (?, ?, ? DIV ?, ?, ?, ?, ?, ?, ?)
                 ON DUPLICATE KEY UPDATE
                    et_avg_execution_time = (et_total_execution_time + VALUES(et_total_execution_time))
                        DIV (et_n_execution_cycles + VALUES(et_n_execution_cycles)),
                    et_total_execution_time = et_total_execution_time + VALUES(et_total_execution_time),
                    et_n_execution_cycles = et_n_execution_cycles + VALUES(et_n_execution_cycles),
                    et_fastest_execution_time = LEAST(et_fastest_execution_time, VALUES(et_fastest_execution_time)),
                    et_longest_execution_time = GREATEST(et_longest_execution_time, VALUES(et_longest_execution_time)),
                    et_last_execution_time = VALUES(et_last_execution_time),
                    et_last_updated_ts = VALUES(et_last_updated_ts)"
            ),
            // The jobs waiting for their first outcome without a results row count as
            // unprocessed (as on PostgreSQL).
            counts_by_status: format!(
                "SELECT task_status, CAST(sum(n) AS SIGNED) FROM (
                    SELECT task_status, count(*) AS n FROM {r} GROUP BY task_status
                    UNION ALL SELECT 1, count(*) FROM {q} WHERE task_has_result = 0
                 ) c GROUP BY task_status HAVING sum(n) > 0"
            ),
            counts_live: format!(
                "SELECT
                    count(CASE WHEN task_locked_by IS NULL AND task_locked_until_ts <= ? THEN 1 END),
                    count(CASE WHEN task_locked_by IS NULL AND task_locked_until_ts > ?
                        AND coalesce(task_waiting_on, 0) = 0 THEN 1 END),
                    count(CASE WHEN task_locked_by IS NOT NULL AND task_locked_until_ts > ? THEN 1 END),
                    count(CASE WHEN task_locked_by IS NOT NULL AND task_locked_until_ts <= ? THEN 1 END),
                    count(CASE WHEN task_waiting_on > 0 THEN 1 END)
                 FROM {q}"
            ),
            peek: format!(
                "SELECT task_id, CAST(task_type AS CHAR) AS task_type, CAST(task_queue AS CHAR) AS task_queue,
                    task_priority, task_attempt, task_max_attempts, task_locked_until_ts, task_posted_at_ts
                 FROM {q} WHERE task_locked_by IS NULL
                 ORDER BY task_priority, task_locked_until_ts, task_lock_handle_id LIMIT ?"
            ),
            // As on PostgreSQL: a leased queue row means the job runs now; results hold
            // what happened before. The queue row's lost attempts follow the recorded ones
            // (`lost`, appended in `job`). Binds: id, now.
            job: format!(
                "SELECT k.id AS task_id, CAST(coalesce(r.task_type, q.task_type) AS CHAR) AS task_type,
                    coalesce(r.task_source, q.task_source) AS task_source,
                    CAST(coalesce(r.task_queue, q.task_queue) AS CHAR) AS task_queue,
                    coalesce(q.task_payload, r.task_payload) AS task_payload,
                    CAST(CASE WHEN q.task_locked_by IS NOT NULL AND q.task_locked_until_ts > ? THEN 2
                         ELSE coalesce(r.task_status, 1) END AS SIGNED) AS task_status,
                    coalesce(q.task_priority, r.task_priority) AS task_priority,
                    CAST(coalesce(r.task_error_count, 0) + coalesce(JSON_LENGTH(q.task_lost_attempts), 0) AS SIGNED)
                        AS task_error_count, r.task_last_error_type,
                    r.task_last_error_message, r.task_last_error_detail,
                    r.task_last_error_is_recoverable,
                    coalesce(r.task_processing_time_milliseconds, 0) AS task_processing_time_milliseconds,
                    coalesce(r.task_posted_at_ts, q.task_posted_at_ts) AS task_posted_at_ts,
                    coalesce(r.task_first_processing_attempted_at_ts,
                        STR_TO_DATE(JSON_UNQUOTE(JSON_EXTRACT(q.task_lost_attempts, '$[0].started_at')), {SQL_TS}),
                        q.task_claimed_at_ts) AS task_first_processing_attempted_at_ts,
                    CASE WHEN q.task_locked_by IS NOT NULL THEN q.task_claimed_at_ts
                         ELSE r.task_last_processing_attempted_at_ts END AS task_last_processing_attempted_at_ts,
                    r.task_processing_finalized_at_ts,
                    q.task_attempt, q.task_max_attempts, q.task_locked_until_ts, q.task_locked_by,
                    coalesce(r.task_errors, '[]') AS task_errors, q.task_lost_attempts AS lost,
                    r.task_last_locked_by, r.task_output,
                    CAST(coalesce(r.task_tenant, q.task_tenant) AS CHAR) AS task_tenant,
                    CAST(coalesce(r.task_correlation_id, q.task_correlation_id) AS CHAR) AS task_correlation_id,
                    coalesce(r.task_metadata, q.task_metadata) AS task_metadata,
                    CAST(coalesce(r.task_unique_key, q.task_unique_key) AS CHAR) AS task_unique_key,
                    coalesce(r.task_unique_mode, q.task_unique_mode) AS task_unique_mode
                 FROM (SELECT ? AS id) k
                 LEFT JOIN {r} r ON r.task_id = k.id
                 LEFT JOIN {q} q ON q.task_id = k.id
                 WHERE r.task_id IS NOT NULL OR q.task_id IS NOT NULL"
            ),
        }
    }
}

/// Binds a new queue row's values (`NEW_COLUMNS` without `task_has_result`).
macro_rules! bind_new {
    ($query:expr, $job:expr, $now:expr, $mode:expr) => {
        $query
            .bind($job.id)
            .bind(&*$job.task_type)
            .bind(&$job.source)
            .bind(&$job.payload)
            .bind($job.priority)
            .bind($now)
            .bind(dt($job.run_at))
            .bind(&$job.queue)
            .bind($job.max_attempts)
            .bind(&$job.tenant)
            .bind(&$job.correlation_id)
            .bind(&$job.metadata)
            .bind(&$job.unique_key)
            .bind($mode)
            .bind($job.every_ms)
            .bind($job.timeout_ms)
    };
}

/// Binds a new results row's values (`RESULT_COLUMNS` without `task_status`).
macro_rules! bind_result {
    ($query:expr, $job:expr, $now:expr, $mode:expr) => {
        $query
            .bind($job.id)
            .bind(&*$job.task_type)
            .bind(&$job.source)
            .bind(&$job.queue)
            .bind($job.priority)
            .bind(&$job.unique_key)
            .bind($mode)
            .bind($now)
            .bind(&$job.tenant)
            .bind(&$job.correlation_id)
            .bind(&$job.metadata)
    };
}

/// Refuses a schema whose table names would pass MySQL's 64 characters.
fn check_length(schema: &Schema) -> Result<()> {
    let prefix = schema.flat_prefix();
    if prefix.len() + LONGEST_NAME > 64 {
        return Err(Error::invalid(
            "schema",
            format!(
                "on MySQL the tables are named {prefix}…, which leaves too little of MySQL's 64 characters: keep the schema name and prefix under {} characters together",
                64 - LONGEST_NAME
            ),
        ));
    }
    Ok(())
}

pub(crate) async fn migrate_to(pool: &MySqlPool, schema: &Schema, target: i32) -> Result<()> {
    check_length(schema)?;
    let mut conn = pool.acquire().await?;
    let lock = format!("sk-migrate:{}", schema.flat_prefix());
    let locked: Option<i32> = sqlx::query_scalar("SELECT GET_LOCK(?, 60)")
        .bind(&lock)
        .fetch_one(&mut *conn)
        .await?;
    if locked != Some(1) {
        return Err(Error::invalid(
            "migration",
            "another process held the migration lock for 60 s",
        ));
    }
    let applied = apply(&mut conn, schema, target).await;
    let released = sqlx::query("SELECT RELEASE_LOCK(?)")
        .bind(&lock)
        .execute(&mut *conn)
        .await;
    applied?;
    released?;
    Ok(())
}

async fn apply(conn: &mut MySqlConnection, schema: &Schema, target: i32) -> Result<()> {
    let versions = schema.flat_table("schema_migrations_t");
    (&mut *conn)
        .execute(
            format!(
                "CREATE TABLE IF NOT EXISTS {versions} (
                     version INT NOT NULL PRIMARY KEY,
                     description VARCHAR(255) NOT NULL,
                     applied_at DATETIME(6) NOT NULL
                 ) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4"
            )
            .as_str(),
        )
        .await?;
    let current: Option<i32> = sqlx::query_scalar(&format!("SELECT max(version) FROM {versions}"))
        .fetch_one(&mut *conn)
        .await?;
    let current = current.unwrap_or(0);
    let known = MIGRATIONS.last().map_or(0, |m| m.0);
    if current > known {
        return Err(Error::SchemaTooNew {
            found: current,
            known,
        });
    }
    for (version, description, sql) in MIGRATIONS.iter().filter(|m| m.0 > current && m.0 <= target)
    {
        let sql = sql.replace("__PREFIX__", &schema.flat_prefix());
        (&mut *conn)
            .execute(sql.as_str())
            .await
            .map_err(|source| Error::Migration {
                version: *version,
                source,
            })?;
        sqlx::query(&format!(
            "INSERT INTO {versions} (version, description, applied_at) VALUES (?, ?, ?)"
        ))
        .bind(version)
        .bind(description)
        .bind(dt(Utc::now()))
        .execute(&mut *conn)
        .await?;
        tracing::info!(version, description, "sk: applied migration (MySQL)");
    }
    Ok(())
}

/// Inserts one job without a unique key; `None` when a job with its id exists. One
/// statement and one row: as on PostgreSQL, the job is its queue row alone until its
/// first outcome writes its results row (the job list and the counts read the queue).
pub(crate) async fn enqueue_one(
    conn: &mut MySqlConnection,
    schema: &Schema,
    job: NewJob,
    now: DateTime<Utc>,
) -> Result<Option<Uuid>> {
    let mode = job.unique_mode.map(|m| m as i16);
    match bind_new!(sqlx::query(&schema.mysql.insert_plain), job, dt(now), mode)
        .execute(&mut *conn)
        .await
    {
        Ok(_) => {
            wake();
            Ok(Some(job.id))
        }
        Err(e) if duplicate(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Inserts one job with a unique key of mode skip, restart or replace; the id of the new
/// or live job, whether it is new, and whether the live job is running.
///
/// The key lives in `unique_keys_t` (migration 8). The live job's queue row is locked
/// before its key's row, the order in which its finalization takes them (the queue row's
/// delete removes the key in a trigger), so the two do not deadlock; only a key that
/// changes hands between the first read and the lock is taken the other way round.
pub(crate) async fn enqueue_unique(
    conn: &mut MySqlConnection,
    schema: &Schema,
    job: NewJob,
    mode: crate::model::UniqueMode,
    now: DateTime<Utc>,
) -> Result<(Uuid, bool, bool)> {
    let key = job.unique_key.as_deref().unwrap_or_default();
    let sql = &schema.mysql;
    let mut tx = conn.begin().await?;
    let seen: Option<Uuid> = sqlx::query_scalar(&format!(
        "SELECT task_id FROM {} WHERE task_unique_key = ?",
        sql.unique_keys
    ))
    .bind(key)
    .fetch_optional(&mut *tx)
    .await?;
    let mut running = None;
    if let Some(seen) = seen {
        running = running_of(&mut tx, schema, seen).await?;
    }
    let holder = take_keys(&mut tx, schema, &[(key, job.id)]).await?[0];
    if holder == job.id {
        bind_new!(
            sqlx::query(&sql.insert_queue),
            job,
            dt(now),
            Some(mode as i16)
        )
        .execute(&mut *tx)
        .await?;
        bind_result!(
            sqlx::query(&sql.insert_result),
            job,
            dt(now),
            Some(mode as i16)
        )
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        wake();
        return Ok((job.id, true, false));
    }
    // The live job read first holds the key (its row is locked), or the key changed
    // hands in between and the holder's row is locked now.
    let running = match running {
        Some(running) if seen == Some(holder) => running,
        _ => running_of(&mut tx, schema, holder).await?.ok_or_else(|| {
            Error::invalid(
                "unique key",
                format!("the job {holder} holding the key {key:?} is not in the queue"),
            )
        })?,
    };
    let mode = mode as i16;
    sqlx::query(&sql.enqueue_unique)
        .bind(mode)
        .bind(mode)
        .bind(mode)
        .bind(&job.payload)
        .bind(mode)
        .bind(dt(job.run_at))
        .bind(job.every_ms)
        .bind(holder)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    wake();
    Ok((holder, false, running))
}

/// Locks a live job's queue row; whether it is running, `None` if it is not in the queue.
async fn running_of(conn: &mut MySqlConnection, schema: &Schema, id: Uuid) -> Result<Option<bool>> {
    Ok(sqlx::query_scalar(&format!(
        "SELECT task_locked_by IS NOT NULL FROM {} WHERE task_id = ? FOR UPDATE",
        schema.mysql.queue
    ))
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?)
}

/// Takes the unique keys of `wanted` (key, id) that no live job holds, in the caller's
/// transaction: a key goes to the first id that asks for it. The holder of each key, in
/// `wanted`'s order; the keys' rows stay locked until the transaction ends. A key is free
/// once its job leaves the queue (migration 8's trigger removes it with the queue row).
///
/// Keys are matched by the database, as its unique index compares them: under
/// `utf8mb4_bin`, MariaDB's padding collation, `"k"` and `"k "` are one key, and the
/// holder read back may be spelt as the other.
async fn take_keys(
    conn: &mut MySqlConnection,
    schema: &Schema,
    wanted: &[(&str, Uuid)],
) -> Result<Vec<Uuid>> {
    let table = &schema.mysql.unique_keys;
    let mut held = Vec::with_capacity(wanted.len());
    for part in wanted.chunks(ROWS_PER_STATEMENT) {
        let mut query =
            QueryBuilder::<MySql>::new(format!("INSERT INTO {table} (task_unique_key, task_id) "));
        query.push_values(part, |mut row, (key, id)| {
            row.push_bind(*key).push_bind(*id);
        });
        query.push(" ON DUPLICATE KEY UPDATE task_id = task_id");
        query.build().execute(&mut *conn).await?;
        let keys: Vec<&str> = part.iter().map(|(key, _)| *key).collect();
        let keys = serde_json::to_string(&keys).expect("a list of strings serializes");
        let holders: Vec<Uuid> = sqlx::query_scalar(&format!(
            "SELECT u.task_id FROM JSON_TABLE(?, '$[*]' COLUMNS (i FOR ORDINALITY,
                k VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) w
             JOIN {table} u ON u.task_unique_key = w.k ORDER BY w.i FOR UPDATE"
        ))
        .bind(keys)
        .fetch_all(&mut *conn)
        .await?;
        // Every key has its row now, locked by this transaction.
        if holders.len() != part.len() {
            return Err(sqlx::Error::Protocol(format!(
                "{} of {} unique keys read back after taking them",
                holders.len(),
                part.len()
            ))
            .into());
        }
        held.extend(holders);
    }
    Ok(held)
}

/// Inserts many jobs, in statements of up to [`ROWS_PER_STATEMENT`] rows, all in one
/// transaction (or a savepoint of the caller's); the ids in order (a duplicate key's place
/// holds the live job's id, or the first of the batch with that key).
pub(crate) async fn enqueue_many(
    conn: &mut MySqlConnection,
    schema: &Schema,
    jobs: Vec<NewJob>,
    now: DateTime<Utc>,
) -> Result<Vec<Uuid>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    if super::uniform(&jobs) {
        return enqueue_uniform(conn, schema, &jobs, now).await;
    }
    let keyed = jobs.iter().any(|j| j.unique_key.is_some());
    let mut tx = conn.begin().await?;
    if !keyed {
        // Queue rows only, as `enqueue_one`.
        for chunk in chunks(&jobs) {
            queue_rows(chunk, schema, now, false)
                .build()
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        wake();
        return Ok(jobs.iter().map(|j| j.id).collect());
    }
    // With keys (mode skip), the keys first: a key a live job (or an earlier job of the
    // batch) holds leaves that job as it is, and only the jobs that hold their keys, or
    // have none, go in, each with its results row.
    let wanted: Vec<(&str, Uuid)> = jobs
        .iter()
        .filter_map(|j| Some((j.unique_key.as_deref()?, j.id)))
        .collect();
    let held = take_keys(&mut tx, schema, &wanted).await?;
    let holder: HashMap<Uuid, Uuid> = wanted.iter().map(|(_, id)| *id).zip(held).collect();
    let id_of = |j: &NewJob| holder.get(&j.id).copied().unwrap_or(j.id);
    let new: Vec<&NewJob> = jobs.iter().filter(|j| id_of(j) == j.id).collect();
    for chunk in chunks(&new) {
        queue_rows(chunk, schema, now, true)
            .build()
            .execute(&mut *tx)
            .await?;
    }
    for chunk in chunks(&new) {
        let mut query = QueryBuilder::<MySql>::new(format!(
            "INSERT INTO {} ({RESULT_COLUMNS}) ",
            schema.mysql.results
        ));
        query.push_values(chunk, |mut row, job| {
            row.push_bind(job.id)
                .push_bind(&*job.task_type)
                .push_bind(&job.source)
                .push_bind(&job.queue)
                .push_bind(job.priority)
                .push_bind(&job.unique_key)
                .push_bind(job.unique_key.as_ref().map(|_| 1i16))
                .push_bind(dt(now))
                .push_bind(&job.tenant)
                .push_bind(&job.correlation_id)
                .push_bind(&job.metadata)
                .push_unseparated(", 1");
        });
        query.build().execute(&mut *tx).await?;
    }
    tx.commit().await?;
    wake();
    Ok(jobs.iter().map(id_of).collect())
}

/// `enqueue_many` of a batch whose jobs differ only in id and payload (`store::uniform`):
/// per statement, the ids and payloads travel as one JSON array read by `JSON_TABLE`, in
/// its order (so the lock handles follow the caller's), and the rest is bound once. Queue
/// rows only, as `enqueue_one`.
async fn enqueue_uniform(
    conn: &mut MySqlConnection,
    schema: &Schema,
    jobs: &[NewJob],
    now: DateTime<Utc>,
) -> Result<Vec<Uuid>> {
    let job = &jobs[0];
    let mut tx = conn.begin().await?;
    for chunk in chunks_up_to(jobs, JSON_ROWS_PER_STATEMENT) {
        let rows: Vec<(String, &str)> = chunk
            .iter()
            .map(|j| (j.id.simple().to_string(), j.payload.as_str()))
            .collect();
        let rows = serde_json::to_string(&rows).expect("a list of string pairs serializes");
        sqlx::query(&format!(
            "INSERT INTO {} ({NEW_COLUMNS})
             SELECT UNHEX(j.id), ?, ?, j.payload, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?, ?, 0
             FROM JSON_TABLE(?, '$[*]' COLUMNS (ord FOR ORDINALITY, id CHAR(32) PATH '$[0]',
                payload LONGTEXT PATH '$[1]')) j
             ORDER BY j.ord",
            schema.mysql.queue
        ))
        .bind(&*job.task_type)
        .bind(&job.source)
        .bind(job.priority)
        .bind(dt(now))
        .bind(dt(job.run_at))
        .bind(&job.queue)
        .bind(job.max_attempts)
        .bind(&job.tenant)
        .bind(&job.correlation_id)
        .bind(&job.metadata)
        .bind(job.every_ms)
        .bind(job.timeout_ms)
        .bind(&rows)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    wake();
    Ok(jobs.iter().map(|j| j.id).collect())
}

/// A multi-row insert of queue rows; with `keyed`, of jobs that took their keys
/// (`take_keys`), which get their results rows in the same transaction (without, a job's
/// first outcome writes it). A job whose id is in the queue already is left as it is.
fn queue_rows<'a, J: Borrow<NewJob>>(
    jobs: &'a [J],
    schema: &Schema,
    now: DateTime<Utc>,
    keyed: bool,
) -> QueryBuilder<'a, MySql> {
    let mut query = QueryBuilder::<MySql>::new(format!(
        "INSERT INTO {} ({NEW_COLUMNS}) ",
        schema.mysql.queue
    ));
    query.push_values(jobs, |mut row, job| {
        let job = job.borrow();
        row.push_bind(job.id)
            .push_bind(&*job.task_type)
            .push_bind(&job.source)
            .push_bind(&job.payload)
            .push_bind(job.priority)
            .push_bind(dt(now))
            .push_bind(dt(job.run_at))
            .push_bind(&job.queue)
            .push_bind(job.max_attempts)
            .push_bind(&job.tenant)
            .push_bind(&job.correlation_id)
            .push_bind(&job.metadata)
            .push_bind(&job.unique_key)
            .push_bind(job.unique_key.as_ref().map(|_| 1i16))
            .push_bind(job.every_ms)
            .push_bind(job.timeout_ms)
            .push_unseparated(if keyed { ", 1" } else { ", 0" });
    });
    if keyed {
        query.push(" ON DUPLICATE KEY UPDATE task_unique_key = task_unique_key");
    }
    query
}

/// Splits a batch (of jobs or references to them) by row count and payload size (the
/// limits above).
fn chunks<J: Borrow<NewJob>>(jobs: &[J]) -> Vec<&[J]> {
    chunks_up_to(jobs, ROWS_PER_STATEMENT)
}

/// `chunks` of at most `rows` rows.
fn chunks_up_to<J: Borrow<NewJob>>(jobs: &[J], rows: usize) -> Vec<&[J]> {
    super::parts(jobs, rows, BYTES_PER_STATEMENT, |job| {
        job.borrow().payload.len()
    })
    .into_iter()
    .map(|part| &jobs[part])
    .collect()
}

/// A queue row as it was when its run ended (`QUEUE_ROW`).
#[derive(sqlx::FromRow)]
struct Row {
    task_lock_handle_id: i64,
    task_id: Uuid,
    task_type: String,
    task_source: String,
    task_queue: String,
    task_priority: i32,
    task_posted_at_ts: DateTime<Utc>,
    task_tenant: Option<String>,
    task_correlation_id: Option<String>,
    task_metadata: Option<String>,
    task_claimed_at_ts: Option<DateTime<Utc>>,
    task_lost_attempts: Option<String>,
    task_payload: Option<String>,
    task_max_attempts: i32,
    task_unique_key: Option<String>,
    task_unique_mode: Option<i16>,
    task_rerun: bool,
    task_every_ms: Option<i64>,
    task_timeout_ms: Option<i64>,
    /// Other jobs wait on it.
    task_dependants: bool,
    /// It waited on others (their outputs are its inputs).
    task_fed: bool,
}

impl LeasedRow for Row {
    type Time = DateTime<Utc>;
    fn task_id(&self) -> Uuid {
        self.task_id
    }
    fn lost_attempts(&self) -> Option<&str> {
        self.task_lost_attempts.as_deref()
    }
    fn claimed_at(&self) -> Option<DateTime<Utc>> {
        self.task_claimed_at_ts
    }
    fn parse_time(text: &str) -> Option<DateTime<Utc>> {
        text.parse().ok()
    }
    fn time_text(time: DateTime<Utc>) -> String {
        ts(time)
    }
}

impl Row {
    /// The bytes of text its results row takes from it (the payload aside).
    fn bytes(&self) -> usize {
        let len = |text: &Option<String>| text.as_ref().map_or(0, String::len);
        self.task_type.len()
            + self.task_source.len()
            + self.task_queue.len()
            + len(&self.task_tenant)
            + len(&self.task_correlation_id)
            + len(&self.task_metadata)
    }

    /// Whether a job is posted after its outcome: a restart, or a periodic job's next run.
    fn posts_again(&self) -> bool {
        self.task_rerun || self.task_every_ms.is_some()
    }
}

/// Per task type: total and count, fastest, longest and last run time (seed 001).
#[derive(Default)]
struct Stats(HashMap<String, (i64, i64, i64, i64, i64)>);

impl Stats {
    fn add(&mut self, task_type: &str, ms: i64) {
        let e = self
            .0
            .entry(task_type.to_owned())
            .or_insert((0, 0, i64::MAX, i64::MIN, 0));
        e.0 += ms;
        e.1 += 1;
        e.2 = e.2.min(ms);
        e.3 = e.3.max(ms);
        e.4 = ms;
    }
}

/// Runs `$body` (a worker transaction on `$conn`) again while InnoDB picks it as a
/// deadlock victim or a lock wait runs out.
macro_rules! retrying {
    ($store:expr, $what:literal, |$conn:ident| $body:block) => {{
        let mut conn = $store.acquire().await?;
        let mut tries = 0;
        loop {
            let $conn: &mut MySqlConnection = &mut conn;
            let result: Result<_> = async { $body }.await;
            match result {
                Err(e) if conflict(&e) && tries < 5 => {
                    tries += 1;
                    tracing::debug!("sk: {} met a lock conflict, running it again: {e}", $what);
                }
                done => break done,
            }
        }
    }};
}

/// The failed attempts recorded for `id` followed by `more`, as a JSON array.
async fn errors_with(
    tx: &mut MySqlConnection,
    schema: &Schema,
    id: Uuid,
    more: Vec<serde_json::Value>,
) -> Result<String> {
    let recorded: Option<String> = sqlx::query_scalar(&format!(
        "SELECT task_errors FROM {} WHERE task_id = ?",
        schema.mysql.results
    ))
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    let mut all: Vec<serde_json::Value> = recorded
        .as_deref()
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_default();
    all.extend(more);
    Ok(serde_json::Value::Array(all).to_string())
}

/// The worker's view of the store on MySQL.
#[derive(Clone)]
pub(crate) struct MySqlStore {
    pub(crate) pool: MySqlPool,
    pub(crate) schema: Schema,
    pub(crate) worker_id: String,
}

/// `host:port` (or the socket path) and database of a connection's options.
fn address(options: &MySqlConnectOptions) -> String {
    let place = match options.get_socket() {
        Some(socket) => socket.display().to_string(),
        None => format!("{}:{}", options.get_host(), options.get_port()),
    };
    match options.get_database() {
        Some(db) => format!("{place}/{db}"),
        None => place,
    }
}

/// `[id, attempt]` pairs in a row-constructor `IN` list.
fn push_leases(query: &mut QueryBuilder<'_, MySql>, leases: &[Lease]) {
    query.push("(task_id, task_attempt) IN (");
    let mut list = query.separated(", ");
    for lease in leases {
        list.push("(")
            .push_bind_unseparated(lease.id)
            .push_unseparated(", ")
            .push_bind_unseparated(lease.attempt)
            .push_unseparated(")");
    }
    query.push(")");
}

impl MySqlStore {
    fn sql(&self) -> &Statements {
        &self.schema.mysql
    }

    /// Where the pool connects, for messages.
    pub(crate) fn address(&self) -> String {
        address(&self.pool.connect_options())
    }

    /// The server's `max_connections` and the connections open now.
    pub(crate) async fn connection_room(&self) -> Result<(i64, i64)> {
        let mut conn = self.acquire().await?;
        let limit: i64 = sqlx::query_scalar("SELECT CAST(@@max_connections AS SIGNED)")
            .fetch_one(&mut *conn)
            .await?;
        // `SHOW STATUS` answers on MariaDB and MySQL 8 alike (their tables differ).
        let (_, open): (String, String) =
            sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Threads_connected'")
                .fetch_one(&mut *conn)
                .await?;
        Ok((limit, open.parse().unwrap_or(0)))
    }

    /// A pooled connection, or within [`ACQUIRE_WAIT`] an error that says why there is none.
    async fn acquire(&self) -> Result<PoolConnection<MySql>> {
        match tokio::time::timeout(ACQUIRE_WAIT, self.pool.acquire()).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(sqlx::Error::PoolTimedOut)) | Err(_) => Err(match self.probe().await {
                Err(ProbeFailure::Transient(e) | ProbeFailure::Permanent(e)) => e,
                Ok(()) => super::pool_timed_out(
                    ACQUIRE_WAIT,
                    self.pool.size(),
                    self.pool.options().get_max_connections(),
                ),
            }),
            Ok(Err(sqlx::Error::Io(io))) => Err(Error::Connect {
                address: self.address(),
                cause: io.to_string(),
            }),
            Ok(Err(e)) => Err(e.into()),
        }
    }

    /// Posts a restart or a periodic job's next run after `row`'s outcome (as on
    /// PostgreSQL: a new job with the same key, payload and period). Whether it posted one.
    async fn again(&self, tx: &mut MySqlConnection, row: &Row, now: DateTime<Utc>) -> Result<bool> {
        if !row.task_rerun && row.task_every_ms.is_none() {
            return Ok(false);
        }
        let run_at = match row.task_every_ms {
            Some(ms) if !row.task_rerun => crate::clock::add_millis(now, ms),
            _ => now,
        };
        let id = uuid_v7(now);
        sqlx::query(&self.sql().insert_result)
            .bind(id)
            .bind(&row.task_type)
            .bind(&row.task_source)
            .bind(&row.task_queue)
            .bind(row.task_priority)
            .bind(&row.task_unique_key)
            .bind(row.task_unique_mode)
            .bind(dt(now))
            .bind(&row.task_tenant)
            .bind(&row.task_correlation_id)
            .bind(&row.task_metadata)
            .execute(&mut *tx)
            .await?;
        sqlx::query(&self.sql().insert_queue)
            .bind(id)
            .bind(&row.task_type)
            .bind(&row.task_source)
            .bind(&row.task_payload)
            .bind(row.task_priority)
            .bind(dt(now))
            .bind(dt(run_at))
            .bind(&row.task_queue)
            .bind(row.task_max_attempts)
            .bind(&row.task_tenant)
            .bind(&row.task_correlation_id)
            .bind(&row.task_metadata)
            .bind(&row.task_unique_key)
            .bind(row.task_unique_mode)
            .bind(row.task_every_ms)
            .bind(row.task_timeout_ms)
            .execute(&mut *tx)
            .await?;
        Ok(true)
    }

    async fn write_stats(
        &self,
        tx: &mut MySqlConnection,
        stats: Stats,
        now: DateTime<Utc>,
    ) -> Result<()> {
        let mut types: Vec<_> = stats.0.into_iter().collect();
        types.sort_by(|a, b| a.0.cmp(&b.0));
        for (task_type, (total, n, fastest, longest, last)) in types {
            sqlx::query(&self.sql().stats)
                .bind(task_type)
                .bind(&self.worker_id)
                .bind(total)
                .bind(n)
                .bind(fastest)
                .bind(longest)
                .bind(total)
                .bind(n)
                .bind(last)
                .bind(dt(now))
                .execute(&mut *tx)
                .await?;
        }
        Ok(())
    }

    /// The queue rows this worker holds under these claims, locked (fenced: a row whose
    /// attempt moved on is not this claim's).
    async fn held(&self, tx: &mut MySqlConnection, leases: &[Lease]) -> Result<Vec<Row>> {
        // Through the job-id index, in id order, as the client's single-job statements
        // (`WHERE task_id = ?`) do: a scan of the primary key would lock it before the
        // id index, the other order, and a retry or cancel of a job in the batch would
        // deadlock with it.
        let mut query = QueryBuilder::<MySql>::new(format!(
            "SELECT {QUEUE_ROW} FROM {} FORCE INDEX ({}tasks_queue_task_id) WHERE task_locked_by = ",
            self.sql().queue,
            self.schema.flat_prefix()
        ));
        query.push_bind(&self.worker_id).push(" AND ");
        push_leases(&mut query, leases);
        query.push(" ORDER BY task_id FOR UPDATE");
        Ok(query.build_query_as().fetch_all(&mut *tx).await?)
    }

    /// Deletes queue rows by lock handle.
    async fn delete(&self, tx: &mut MySqlConnection, rows: &[&Row]) -> Result<()> {
        let mut query = QueryBuilder::<MySql>::new(format!(
            "DELETE FROM {} WHERE task_lock_handle_id IN (",
            self.sql().queue
        ));
        let mut list = query.separated(", ");
        for row in rows {
            list.push_bind(row.task_lock_handle_id);
        }
        query.push(")");
        query.build().execute(&mut *tx).await?;
        Ok(())
    }

    /// Records one successful run inside the job's own transaction (the caller commits);
    /// false when the lease was lost (fenced), and the caller then rolls back.
    pub(crate) async fn complete_in(
        &self,
        tx: &mut MySqlConnection,
        done: &Success,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let (held, _posted) = self
            .complete_on(tx, std::slice::from_ref(done), now)
            .await?;
        // A rerun or next run it posted is found by the next poll.
        Ok(!held.is_empty())
    }

    /// The statements of a completion, in a transaction: the ids whose lease was held,
    /// and whether a job was posted (a rerun, a periodic job's next run).
    async fn complete_on(
        &self,
        tx: &mut MySqlConnection,
        done: &[Success],
        now: DateTime<Utc>,
    ) -> Result<(Vec<Uuid>, bool)> {
        let leases: Vec<Lease> = done.iter().map(|s| s.lease).collect();
        let by_id: HashMap<Uuid, &Success> = done.iter().map(|s| (s.lease.id, s)).collect();
        let rows = self.held(&mut *tx, &leases).await?;
        if rows.is_empty() {
            return Ok((Vec::new(), false));
        }
        self.delete(&mut *tx, &rows.iter().collect::<Vec<_>>())
            .await?;
        // Rows with lost attempts need their whole list of failed attempts written;
        // the rest go in one statement.
        let (lost, common): (Vec<&Row>, Vec<&Row>) =
            rows.iter().partition(|r| r.task_lost_attempts.is_some());
        let mut stats = Stats::default();
        let size =
            |row: &&Row| by_id[&row.task_id].output.as_ref().map_or(0, String::len) + row.bytes();
        for part in super::parts(&common, ROWS_PER_STATEMENT, BYTES_PER_STATEMENT, size) {
            let mut query = QueryBuilder::<MySql>::new(&self.sql().success);
            query.push(" ");
            query.push_values(&common[part], |mut v, row| {
                let s = by_id[&row.task_id];
                v.push_bind(row.task_id)
                    .push_bind(&row.task_type)
                    .push_bind(&row.task_source)
                    .push_bind(&row.task_queue)
                    .push_bind(row.task_priority)
                    .push_bind(dt(row.task_posted_at_ts))
                    .push_bind(&row.task_tenant)
                    .push_bind(&row.task_correlation_id)
                    .push_bind(&row.task_metadata)
                    .push("3")
                    .push_bind(s.millis)
                    .push_bind(dt(now))
                    .push_bind(&self.worker_id)
                    .push_bind(s.output.as_deref())
                    .push_bind(dt(row.task_claimed_at_ts))
                    .push_bind(dt(row.task_claimed_at_ts));
            });
            query.push(format!(" ON DUPLICATE KEY UPDATE {SUCCESS_UPDATE}"));
            query.build().execute(&mut *tx).await?;
        }
        for row in lost {
            let s = by_id[&row.task_id];
            let lost = row.lost();
            let first = row.first_started(&lost);
            let lost_count = lost.len() as i64;
            let errors = errors_with(&mut *tx, &self.schema, row.task_id, lost).await?;
            sqlx::query(&self.sql().success_again)
                .bind(row.task_id)
                .bind(&row.task_type)
                .bind(&row.task_source)
                .bind(&row.task_queue)
                .bind(row.task_priority)
                .bind(dt(row.task_posted_at_ts))
                .bind(&row.task_tenant)
                .bind(&row.task_correlation_id)
                .bind(&row.task_metadata)
                .bind(s.millis)
                .bind(dt(now))
                .bind(&self.worker_id)
                .bind(s.output.as_deref())
                .bind(dt(first))
                .bind(dt(row.task_claimed_at_ts))
                .bind(lost_count)
                .bind(errors)
                .execute(&mut *tx)
                .await?;
        }
        // Restarts and periodic jobs' next runs.
        let mut posted = false;
        for row in rows.iter().filter(|r| r.posts_again()) {
            posted |= self.again(&mut *tx, row, now).await?;
        }
        for row in &rows {
            stats.add(&row.task_type, by_id[&row.task_id].millis);
        }
        self.write_stats(&mut *tx, stats, now).await?;
        // Jobs others wait on, and jobs that waited.
        let outputs: Vec<(Uuid, Option<&str>)> = rows
            .iter()
            .filter(|r| r.task_dependants)
            .map(|r| (r.task_id, by_id[&r.task_id].output.as_deref()))
            .collect();
        let fed: Vec<Uuid> = rows
            .iter()
            .filter(|r| r.task_fed)
            .map(|r| r.task_id)
            .collect();
        if !outputs.is_empty() || !fed.is_empty() {
            posted |= flow::settle(&mut *tx, &self.schema, &outputs, &fed, now).await?;
        }
        Ok((rows.iter().map(|r| r.task_id).collect(), posted))
    }

    /// The statements of `fail`, in a transaction: the ids whose lease was held.
    async fn fail_on(
        &self,
        tx: &mut MySqlConnection,
        failures: &[Failure],
        now: DateTime<Utc>,
    ) -> Result<HashSet<Uuid>> {
        let leases: Vec<Lease> = failures.iter().map(|f| f.lease).collect();
        let by_id: HashMap<Uuid, &Failure> = failures.iter().map(|f| (f.lease.id, f)).collect();
        let rows = self.held(&mut *tx, &leases).await?;
        if rows.is_empty() {
            return Ok(HashSet::new());
        }
        let (retried, last): (Vec<&Row>, Vec<&Row>) = rows
            .iter()
            .partition(|r| by_id[&r.task_id].retry_at.is_some());
        if !last.is_empty() {
            self.delete(&mut *tx, &last).await?;
        }
        if !retried.is_empty() {
            // The rows wait again, each until its retry time; their lost attempts move to
            // the results rows.
            let mut query = QueryBuilder::<MySql>::new(format!(
                "UPDATE {} SET task_locked_until_ts = CASE task_lock_handle_id",
                self.sql().queue
            ));
            for row in &retried {
                query
                    .push(" WHEN ")
                    .push_bind(row.task_lock_handle_id)
                    .push(" THEN ")
                    .push_bind(dt(by_id[&row.task_id].retry_at));
            }
            query.push(
                " END, task_locked_by = NULL, task_lost_attempts = NULL, task_has_result = 1
                 WHERE task_lock_handle_id IN (",
            );
            let mut list = query.separated(", ");
            for row in &retried {
                list.push_bind(row.task_lock_handle_id);
            }
            query.push(")");
            query.build().execute(&mut *tx).await?;
        }
        // Each results row's list of failed attempts gets this one (and the lost ones).
        let mut query = QueryBuilder::<MySql>::new(format!(
            "SELECT task_id, task_errors FROM {} WHERE task_id IN (",
            self.schema.mysql.results
        ));
        let mut list = query.separated(", ");
        for row in &rows {
            list.push_bind(row.task_id);
        }
        query.push(")");
        let recorded: HashMap<Uuid, Option<String>> = query
            .build_query_as::<(Uuid, Option<String>)>()
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .collect();
        let values = super::failed_runs(&rows, &by_id, &recorded, &self.worker_id, ts(now));
        let size = |run: &super::FailedRun<'_, Row>| {
            let f = run.failure;
            let payload = match f.retry_at {
                None => run.row.task_payload.as_ref().map_or(0, String::len),
                Some(_) => 0,
            };
            run.row.bytes()
                + payload
                + run.log.len()
                + f.kind.len()
                + f.message.len()
                + f.detail.as_ref().map_or(0, String::len)
        };
        for part in super::parts(&values, ROWS_PER_STATEMENT, BYTES_PER_STATEMENT, size) {
            let mut query = QueryBuilder::<MySql>::new(&self.sql().failure);
            query.push(" ");
            query.push_values(&values[part], |mut v, run| {
                let (row, f) = (run.row, run.failure);
                let last_run = f.retry_at.is_none();
                v.push_bind(row.task_id)
                    .push_bind(&row.task_type)
                    .push_bind(&row.task_source)
                    .push_bind(&row.task_queue)
                    .push_bind(row.task_priority)
                    .push_bind(dt(row.task_posted_at_ts))
                    .push_bind(&row.task_tenant)
                    .push_bind(&row.task_correlation_id)
                    .push_bind(&row.task_metadata)
                    .push_bind(f.status as i32)
                    .push_bind(run.failed)
                    .push_bind(&f.kind)
                    .push_bind(&f.message)
                    .push_bind(&f.detail)
                    .push_bind(f.seed_error())
                    .push_bind(f.recoverable)
                    .push_bind(f.millis)
                    .push_bind(dt(last_run.then_some(now)))
                    // A job that failed for good keeps its payload, to inspect or re-post.
                    .push_bind(if last_run {
                        row.task_payload.as_deref()
                    } else {
                        None
                    })
                    .push_bind(&self.worker_id)
                    .push_bind(run.log.as_str())
                    .push("NULL")
                    .push_bind(dt(run.first))
                    .push_bind(dt(row.task_claimed_at_ts))
                    .push_bind(row.task_max_attempts)
                    .push_bind(row.task_timeout_ms);
            });
            query.push(format!(" ON DUPLICATE KEY UPDATE {FAILURE_UPDATE}"));
            query.build().execute(&mut *tx).await?;
        }
        // Periodic jobs' next runs, and jobs others wait on, which end with this one.
        let mut roots = Vec::new();
        for row in &last {
            self.again(&mut *tx, row, now).await?;
            if row.task_dependants {
                let message = super::dependency_message(
                    row.task_id,
                    &row.task_type,
                    false,
                    &by_id[&row.task_id].message,
                );
                roots.push((row.task_id, message));
            }
        }
        if !roots.is_empty() {
            flow::propagate(&mut *tx, &self.schema, roots, false, now).await?;
        }
        let mut stats = Stats::default();
        for row in &rows {
            stats.add(&row.task_type, by_id[&row.task_id].millis);
        }
        self.write_stats(&mut *tx, stats, now).await?;
        Ok(rows.iter().map(|r| r.task_id).collect())
    }

    /// Which of the ids (a JSON array of hex ids) this worker recorded as succeeded
    /// (`Store::succeeded_here`), by the results table's primary key.
    pub(crate) async fn succeeded_here(&self, ids: &str) -> Result<Vec<Uuid>> {
        Ok(sqlx::query_scalar(&format!(
            "SELECT task_id FROM {} WHERE task_id IN
                (SELECT UNHEX(id) FROM JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(32) PATH '$')) AS ids)
             AND task_status = ? AND task_last_locked_by = ?",
            self.schema.mysql.results
        ))
        .bind(ids)
        .bind(crate::model::JobStatus::Processed as i32)
        .bind(&self.worker_id)
        .fetch_all(&self.pool)
        .await?)
    }
}

/// `column IN (?, ?, ...)` over `ids`.
pub(super) fn push_ids(query: &mut QueryBuilder<'_, MySql>, column: &str, ids: &[Uuid]) {
    query.push(format!("{column} IN ("));
    let mut list = query.separated(", ");
    for id in ids {
        list.push_bind(*id);
    }
    query.push(")");
}

impl Admin for MySqlPool {
    /// Brings the schema to the newest version, one worker at a time (a named lock). MySQL
    /// commits each DDL statement on its own: a migration interrupted halfway is finished by
    /// the next run (its statements are `IF NOT EXISTS`).
    async fn migrate(&self, schema: &Schema) -> Result<()> {
        let pool = self;
        migrate_to(pool, schema, i32::MAX).await
    }

    /// This build's migrations, each with when it was applied to `schema` (`None`: not yet).
    async fn migrations(
        &self,
        schema: &Schema,
    ) -> Result<Vec<(i32, &'static str, Option<DateTime<Utc>>)>> {
        let pool = self;
        let versions = schema.flat_table("schema_migrations_t");
        let applied: Vec<(i32, DateTime<Utc>)> =
            match sqlx::query_as(&format!("SELECT version, applied_at FROM {versions}"))
                .fetch_all(pool)
                .await
            {
                Ok(rows) => rows,
                Err(e) if super::no_such_table(&e) => Vec::new(),
                Err(e) => return Err(e.into()),
            };
        Ok(MIGRATIONS
            .iter()
            .map(|&(version, description, _)| {
                let at = applied
                    .iter()
                    .find(|(v, _)| *v == version)
                    .map(|(_, at)| *at);
                (version, description, at)
            })
            .collect())
    }

    async fn counts(&self, schema: &Schema, now: DateTime<Utc>) -> Result<QueueCounts> {
        let pool = self;
        let mut counts = QueueCounts::default();
        for row in sqlx::query(&schema.mysql.counts_by_status)
            .fetch_all(pool)
            .await?
        {
            let status: i32 = row.try_get(0)?;
            let n: i64 = row.try_get(1)?;
            counts
                .by_status
                .push((crate::model::JobStatus::from_code(status), n));
        }
        let row = sqlx::query(&schema.mysql.counts_live)
            .bind(dt(now))
            .bind(dt(now))
            .bind(dt(now))
            .bind(dt(now))
            .fetch_one(pool)
            .await?;
        counts.available = row.try_get(0)?;
        counts.scheduled = row.try_get(1)?;
        counts.running = row.try_get(2)?;
        counts.lease_expired = row.try_get(3)?;
        counts.pending = row.try_get(4)?;
        Ok(counts)
    }

    async fn peek(&self, schema: &Schema, limit: i64) -> Result<Vec<QueuedJob>> {
        let pool = self;
        Ok(sqlx::query_as(&schema.mysql.peek)
            .bind(limit)
            .fetch_all(pool)
            .await?)
    }

    async fn job(
        &self,
        schema: &Schema,
        id: Uuid,
        now: DateTime<Utc>,
    ) -> Result<Option<JobRecord>> {
        let pool = self;
        let Some(row) = sqlx::query(&schema.mysql.job)
            .bind(dt(now))
            .bind(id)
            .fetch_optional(pool)
            .await?
        else {
            return Ok(None);
        };
        let mut record = <JobRecord as sqlx::FromRow<_>>::from_row(&row)?;
        let lost: Option<String> = row.try_get("lost")?;
        if let Some(lost) = lost {
            let lost: Vec<Attempt> = serde_json::from_str(&lost).map_err(|e| {
                Error::Database(sqlx::Error::Decode(
                    format!("task_lost_attempts of job {id}: {e}").into(),
                ))
            })?;
            record.failed_attempts.extend(lost);
        }
        Ok(Some(record))
    }

    /// Adds or replaces a stored schedule.
    async fn schedule_put(&self, schema: &Schema, row: &ScheduleRow) -> Result<()> {
        let pool = self;
        sqlx::query(&format!(
            "INSERT INTO {} (schedule_name, task_type, task_payload, schedule_cron, schedule_overlap,
                schedule_updated_at_ts)
             VALUES (?, ?, ?, ?, ?, ?)
             ON DUPLICATE KEY UPDATE task_type = VALUES(task_type), task_payload = VALUES(task_payload),
                schedule_cron = VALUES(schedule_cron), schedule_overlap = VALUES(schedule_overlap),
                schedule_updated_at_ts = VALUES(schedule_updated_at_ts)",
            schema.flat_table("schedules_t")
        ))
        .bind(&row.schedule_name)
        .bind(&row.task_type)
        .bind(&row.task_payload)
        .bind(&row.schedule_cron)
        .bind(row.schedule_overlap)
        .bind(dt(row.schedule_updated_at_ts))
        .execute(pool)
        .await?;
        Ok(())
    }

    /// Removes a stored schedule; false if there was none of that name. A tick reads its
    /// schedule under a shared lock, so none is enqueued after this.
    async fn schedule_remove(&self, schema: &Schema, name: &str) -> Result<bool> {
        let pool = self;
        let done = sqlx::query(&format!(
            "DELETE FROM {} WHERE schedule_name = ?",
            schema.flat_table("schedules_t")
        ))
        .bind(name)
        .execute(pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Every stored schedule, by name.
    async fn schedule_list(&self, schema: &Schema) -> Result<Vec<ScheduleRow>> {
        let pool = self;
        Ok(sqlx::query_as(&format!(
            "SELECT CAST(schedule_name AS CHAR) AS schedule_name, CAST(task_type AS CHAR) AS task_type,
                task_payload, schedule_cron, schedule_overlap, schedule_updated_at_ts
             FROM {} ORDER BY schedule_name",
            schema.flat_table("schedules_t")
        ))
        .fetch_all(pool)
        .await?)
    }
}

impl Work for MySqlStore {
    async fn claim(&self, claim: &super::Claim<'_>) -> Result<Vec<ClaimedJob>> {
        let super::Claim {
            task_types,
            queues,
            tenants,
            paused,
            capped,
            limit,
            now,
            lease_until,
        } = *claim;
        let capped = match queues {
            Some([queue]) if capped => Some(queue),
            _ => None,
        };
        let queue = &self.sql().queue;
        let worker = &self.worker_id;
        retrying!(self, "a claim", |conn| {
            let mut tx = conn.begin_with(BEGIN).await?;
            // A queue with a limit across workers: its row's lock makes claimers of it
            // take turns; each counts the running jobs after the one before committed.
            let limit = match capped {
                Some(capped) => {
                    let cap: Option<Option<i64>> = sqlx::query_scalar(&format!(
                        "SELECT CAST(queue_global_limit AS SIGNED) FROM {} WHERE queue_name = ? FOR UPDATE",
                        self.schema.flat_table("queues_t")
                    ))
                    .bind(capped)
                    .fetch_optional(&mut *tx)
                    .await?;
                    match cap.flatten() {
                        Some(cap) => {
                            // The leased jobs, as migration 8's triggers keep them.
                            let running: i64 = sqlx::query_scalar(&format!(
                                "SELECT count(*) FROM {} WHERE task_queue = ? AND task_locked_until_ts > ?",
                                self.schema.flat_table("running_t")
                            ))
                            .bind(capped)
                            .bind(dt(now))
                            .fetch_one(&mut *tx)
                            .await?;
                            limit.min(cap - running)
                        }
                        None => limit,
                    }
                }
                None => limit,
            };
            if limit <= 0 {
                tx.commit().await?;
                return Ok(Vec::new());
            }
            let mut query = QueryBuilder::<MySql>::new(format!(
                    "SELECT task_lock_handle_id, task_id, CAST(task_type AS CHAR) AS task_type, task_payload,
                        task_attempt, task_max_attempts, task_priority, CAST(task_queue AS CHAR) AS task_queue,
                        task_posted_at_ts, CAST(task_tenant AS CHAR) AS task_tenant,
                        CAST(task_correlation_id AS CHAR) AS task_correlation_id, task_metadata,
                        task_timeout_ms, task_waiting_on, task_locked_by IS NOT NULL AS held
                     FROM {queue} WHERE task_locked_until_ts <= "
                ));
            query.push_bind(dt(now));
            if !paused.is_empty() {
                query.push(" AND task_queue NOT IN (");
                let mut items = query.separated(", ");
                for queue in paused {
                    items.push_bind(queue);
                }
                query.push(")");
            }
            for (column, list) in [
                ("task_type", Some(task_types)),
                ("task_queue", queues),
                ("task_tenant", tenants),
            ] {
                let Some(list) = list else { continue };
                query.push(format!(" AND {column} IN ("));
                let mut items = query.separated(", ");
                for item in list {
                    items.push_bind(item);
                }
                query.push(")");
            }
            query.push(" ORDER BY task_priority, task_locked_until_ts, task_lock_handle_id LIMIT ");
            query.push_bind(limit);
            query.push(" FOR UPDATE SKIP LOCKED");
            let rows = query.build().fetch_all(&mut *tx).await?;
            if rows.is_empty() {
                tx.commit().await?;
                return Ok(Vec::new());
            }
            let mut jobs = Vec::with_capacity(rows.len());
            let mut handles = Vec::with_capacity(rows.len());
            let mut expired = false;
            for row in &rows {
                // Each row on its own: one sk cannot read ends alone (a row of which
                // not even the lease can be read is not leased, and named in the log).
                let job = match super::claimed_row(row, 1) {
                    Ok(job) => job,
                    Err(e) => {
                        tracing::error!("sk: a due row whose id, attempt or task type cannot be read is left alone: {e}");
                        continue;
                    }
                };
                handles.push(row.try_get::<i64, _>("task_lock_handle_id")?);
                expired |= row.try_get::<bool, _>("held")?;
                jobs.push(job);
            }
            if handles.is_empty() {
                tx.commit().await?;
                return Ok(jobs);
            }
            // The lost attempt is recorded first: the assignments after it change
            // what it reads.
            let lost = if expired {
                format!(
                        "task_lost_attempts = CASE WHEN task_locked_by IS NULL THEN task_lost_attempts
                            ELSE JSON_ARRAY_APPEND(coalesce(task_lost_attempts, '[]'), '$', JSON_OBJECT(
                                'attempt', task_attempt, 'worker', task_locked_by,
                                'started_at', DATE_FORMAT(task_claimed_at_ts, {SQL_TS}), 'ended_at', '{}',
                                'outcome', 'lost', 'kind', 'worker_lost', 'message',
                                'worker lost: its lease ran out before it recorded an outcome (a crash, a stall or a lost connection)',
                                'recoverable', true)) END, ",
                        ts(now)
                    )
            } else {
                String::new()
            };
            let mut update = QueryBuilder::<MySql>::new(format!("UPDATE {queue} SET {lost}"));
            update
                .push("task_locked_until_ts = ")
                .push_bind(dt(lease_until))
                .push(", task_locked_by = ")
                .push_bind(worker)
                .push(", task_attempt = task_attempt + 1, task_claimed_at_ts = ")
                .push_bind(dt(now))
                .push(" WHERE task_lock_handle_id IN (");
            let mut list = update.separated(", ");
            for handle in handles {
                list.push_bind(handle);
            }
            update.push(")");
            update.build().execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(jobs)
        })
    }

    /// Finalizes successful runs (fenced); the ids whose lease was still held.
    async fn complete(&self, done: &[Success], now: DateTime<Utc>) -> Result<Vec<Uuid>> {
        if done.is_empty() {
            return Ok(Vec::new());
        }
        let (held, posted): (Vec<Uuid>, bool) = retrying!(self, "a completion", |conn| {
            let mut tx = conn.begin_with(BEGIN).await?;
            let done = self.complete_on(&mut tx, done, now).await?;
            tx.commit().await?;
            Ok(done)
        })?;
        if posted {
            wake();
        }
        Ok(held)
    }

    /// The outputs of job `id`'s dependencies, in order.
    async fn inputs(&self, id: Uuid) -> Result<Vec<Option<Option<String>>>> {
        let mut conn = self.pool.acquire().await?;
        flow::inputs(&mut conn, &self.schema, id).await
    }

    /// Records failed runs (retry or final) in one transaction, a few statements for the
    /// whole batch; per failure, false when its lease was lost (fenced).
    async fn fail(&self, failures: &[Failure], now: DateTime<Utc>) -> Result<Vec<bool>> {
        if failures.is_empty() {
            return Ok(Vec::new());
        }
        let held: HashSet<Uuid> = retrying!(self, "failures", |conn| {
            let mut tx = conn.begin_with(BEGIN).await?;
            let held = self.fail_on(&mut tx, failures, now).await?;
            tx.commit().await?;
            Ok(held)
        })?;
        if !held.is_empty() {
            wake();
        }
        Ok(failures
            .iter()
            .map(|f| held.contains(&f.lease.id))
            .collect())
    }

    /// Releases leases at once (graceful stop), without using up an attempt.
    async fn give_back(&self, leases: &[Lease], now: DateTime<Utc>) -> Result<u64> {
        if leases.is_empty() {
            return Ok(0);
        }
        let mut query = QueryBuilder::<MySql>::new(format!(
            "UPDATE {} SET task_locked_until_ts = ",
            self.sql().queue
        ));
        query
            .push_bind(dt(now))
            .push(
                ", task_locked_by = NULL, task_attempt = task_attempt - 1 WHERE task_locked_by = ",
            )
            .push_bind(&self.worker_id)
            .push(" AND ");
        push_leases(&mut query, leases);
        let n = query
            .build()
            .execute(&mut *self.acquire().await?)
            .await?
            .rows_affected();
        wake();
        Ok(n)
    }

    /// Extends the leases still held; their ids (a missing one was lost).
    async fn extend(&self, leases: &[Lease], until: DateTime<Utc>) -> Result<Vec<Uuid>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        retrying!(self, "a heartbeat", |conn| {
            let mut tx = conn.begin_with(BEGIN).await?;
            let rows = self.held(&mut tx, leases).await?;
            if !rows.is_empty() {
                let mut query = QueryBuilder::<MySql>::new(format!(
                    "UPDATE {} SET task_locked_until_ts = ",
                    self.sql().queue
                ));
                query
                    .push_bind(dt(until))
                    .push(" WHERE task_lock_handle_id IN (");
                let mut list = query.separated(", ");
                for row in &rows {
                    list.push_bind(row.task_lock_handle_id);
                }
                query.push(")");
                query.build().execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok(rows.iter().map(|r| r.task_id).collect())
        })
    }

    /// Posts one job with a unique key of mode `mode` (the periodic jobs' first runs).
    async fn enqueue_unique(
        &self,
        job: NewJob,
        mode: crate::model::UniqueMode,
        now: DateTime<Utc>,
    ) -> Result<(Uuid, bool, bool)> {
        enqueue_unique(&mut *self.acquire().await?, &self.schema, job, mode, now).await
    }

    /// Posts a cron tick once across workers (its id comes from its key); with
    /// `live_key`, only while no earlier tick holding that key is live; with `stored`, only
    /// while that stored schedule exists as it was read (read under a shared lock, so a
    /// removal waits for this and none is posted after it). False if it was not posted.
    async fn enqueue_tick(
        &self,
        job: NewJob,
        live_key: Option<&str>,
        stored: Option<(&str, DateTime<Utc>)>,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let mut conn = self.acquire().await?;
        let mut tx = conn.begin_with(BEGIN).await?;
        if let Some((name, updated_at)) = stored {
            let exists: Option<i32> = sqlx::query_scalar(&format!(
                "SELECT 1 FROM {} WHERE schedule_name = ? AND schedule_updated_at_ts = ? LOCK IN SHARE MODE",
                self.schema.flat_table("schedules_t")
            ))
            .bind(name)
            .bind(dt(updated_at))
            .fetch_optional(&mut *tx)
            .await?;
            if exists.is_none() {
                return Ok(false);
            }
        }
        if let Some(key) = live_key {
            if take_keys(&mut tx, &self.schema, &[(key, job.id)]).await?[0] != job.id {
                return Ok(false);
            }
        }
        // The results row keeps the tick's key; the queue row holds the live key (mode
        // skip) or none. Another worker posting the same tick meets its key: a duplicate.
        let posted = async {
            bind_result!(
                sqlx::query(&self.sql().insert_result),
                job,
                dt(now),
                None::<i16>
            )
            .execute(&mut *tx)
            .await?;
            let mut job = job;
            job.unique_key = live_key.map(str::to_owned);
            let mode = live_key.map(|_| crate::model::UniqueMode::Skip as i16);
            bind_new!(sqlx::query(&self.sql().insert_queue), job, dt(now), mode)
                .execute(&mut *tx)
                .await?;
            Ok::<_, sqlx::Error>(())
        }
        .await;
        match posted {
            Ok(()) => {}
            Err(e) if duplicate(&e) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
        tx.commit().await?;
        wake();
        Ok(true)
    }

    async fn stored_schedules(&self) -> Result<Vec<ScheduleRow>> {
        Admin::schedule_list(&self.pool, &self.schema).await
    }

    async fn migrate(&self) -> Result<()> {
        Admin::migrate(&self.pool, &self.schema).await
    }

    /// Splits the open-ended partition into the next periods' (seed 002).
    async fn ensure_partitions(&self, now: DateTime<Utc>, span: Duration) -> Result<Vec<String>> {
        partitions::ensure(&self.pool, &self.schema, now, span).await
    }

    /// Retires whole results partitions past the retention (`partitions::retire`).
    async fn retire_partitions(
        &self,
        cutoff: DateTime<Utc>,
        archive: Option<&str>,
        within: bool,
        stopping: &tokio_util::sync::CancellationToken,
    ) -> Result<Retired> {
        partitions::retire(&self.pool, &self.schema, cutoff, archive, within, stopping).await
    }

    /// InnoDB purges deleted rows itself: nothing to watch.
    async fn table_health(&self) -> Result<Vec<super::TableHealth>> {
        Ok(Vec::new())
    }

    async fn vacuum(&self, _table: &str) -> Result<bool> {
        Ok(false)
    }

    async fn write_metrics(&self, metrics: &[(&str, i64)], now: DateTime<Utc>) -> Result<()> {
        if metrics.is_empty() {
            return Ok(());
        }
        let mut query = QueryBuilder::<MySql>::new(format!(
            "INSERT INTO {} (metric_owner_process_id, metric_id, metric_category, metric_value,
                metric_last_updated) ",
            self.schema.flat_table("metrics_t")
        ));
        query.push_values(metrics, |mut row, (id, value)| {
            row.push_bind(&self.worker_id)
                .push_bind(*id)
                .push("'worker'")
                .push_bind(*value)
                .push_bind(dt(now));
        });
        query.push(
            " ON DUPLICATE KEY UPDATE metric_value = VALUES(metric_value),
                metric_last_updated = VALUES(metric_last_updated)",
        );
        query.build().execute(&mut *self.acquire().await?).await?;
        Ok(())
    }

    /// One connection attempt outside the pool, saying why it failed.
    async fn probe(&self) -> std::result::Result<(), ProbeFailure> {
        let options = self.pool.connect_options();
        let unreachable = |cause: String| Error::Connect {
            address: address(&options),
            cause,
        };
        let error =
            match tokio::time::timeout(ACQUIRE_WAIT, MySqlConnection::connect_with(&options)).await
            {
                Ok(Ok(conn)) => {
                    let _ = conn.close().await;
                    return Ok(());
                }
                Ok(Err(e)) => e,
                Err(_) => {
                    return Err(ProbeFailure::Transient(unreachable(format!(
                        "no answer within {}",
                        humantime::format_duration(ACQUIRE_WAIT)
                    ))))
                }
            };
        Err(match &error {
            sqlx::Error::Io(io) => ProbeFailure::Transient(unreachable(io.to_string())),
            sqlx::Error::Protocol(_) | sqlx::Error::PoolTimedOut | sqlx::Error::WorkerCrashed => {
                ProbeFailure::Transient(unreachable(error.to_string()))
            }
            // 1040 too many connections, 1053 shutting down, 1203 user's connection limit.
            sqlx::Error::Database(db) => match number(&error) {
                Some(1040 | 1053 | 1203) => {
                    ProbeFailure::Transient(unreachable(db.message().to_owned()))
                }
                _ => ProbeFailure::Permanent(unreachable(db.message().to_owned())),
            },
            _ => ProbeFailure::Permanent(unreachable(error.to_string())),
        })
    }
}
