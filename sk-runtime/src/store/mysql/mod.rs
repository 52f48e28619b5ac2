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
//!
//! The module's rooms, the same in each backend: `sql` (the statements of a schema,
//! formatted once), `migrate`, `enqueue`, `admin` and `control` (the driver contract's
//! `Admin` and `Control` on the pool), `work` (`Work`, on the worker's store; its
//! `WorkerRows` is `store::worker_rows::worker_rows_of!`), `dialect`, `flow` (jobs that
//! wait on others), `partitions` and
//! `store` (the worker store and the rows it reads back).

mod control;
mod dialect;
pub(crate) mod flow;
mod partitions;

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlDatabaseError, MySqlPool};
use sqlx::{Connection as _, Executor as _, MySql, QueryBuilder, Row as _};
use uuid::Uuid;

use super::driver::{Admin, Work};
use super::{
    fair, rates, tenants, ClaimedJob, Failure, Lease, LeasedRow, NewJob, ProbeFailure, RatedClaim,
    Retired, ScheduleRow, Schema, Success,
};
use crate::bus::wake;
use crate::error::{Error, Result};
use crate::model::{Attempt, JobRecord, QueueCounts, QueuedJob};

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

/// `column IN (?, ?, ...)` over `ids`.
pub(super) fn push_ids(query: &mut QueryBuilder<'_, MySql>, column: &str, ids: &[Uuid]) {
    query.push(format!("{column} IN ("));
    let mut list = query.separated(", ");
    for id in ids {
        list.push_bind(*id);
    }
    query.push(")");
}

mod admin;
mod enqueue;
mod migrate;
mod sql;
mod store;
mod work;

pub(crate) use enqueue::*;
// An enqueue on the application's executor: as any other (`postgres::post_one` tells
// its prepared statements apart).
pub(crate) use enqueue::enqueue_unique as post_unique;
pub(crate) use enqueue::{enqueue_many as post_many, enqueue_one as post_one};

/// This backend's connections always keep their prepared statements.
pub(crate) fn pool_keeps<DB: sqlx::Database>(_pool: &sqlx::Pool<DB>) -> Option<bool> {
    None
}
pub(crate) use migrate::*;
pub(crate) use sql::*;
pub(crate) use store::*;
