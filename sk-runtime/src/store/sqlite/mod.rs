//! SQLite: migrations and every statement sk runs on an embedded database file.
//!
//! SQLite has one writer at a time per file, across processes, and no `SKIP LOCKED`:
//! sk relies on that writer lock instead. A claim picks the due rows, then leases those
//! still due in one `UPDATE`, which takes the write lock before it reads and checks each
//! row again: two claims (of this process or another one on the same file) lease one
//! after the other and the second sees the first's leases, so a job is never claimed
//! twice under one lease, and a claim that lost rows to another claim between its steps
//! claims again at once. (A claim of a queue with a global limit is one
//! `UPDATE … RETURNING`, so the count of its running jobs is taken under the write lock
//! too.) Every write that spans several
//! statements (a batch of completions, a failure, a tick) runs in a `BEGIN IMMEDIATE`
//! transaction, which takes the lock first too; a writer that finds the lock taken waits
//! for the connection's `busy_timeout`. Within a process, an enqueue wakes the workers at
//! once; other processes find new jobs at their poll interval.
//!
//! Times are bound as fixed-width UTC text (`ts`), so text order is time order.
//!
//! The module's rooms, the same in each backend: `sql` (the statements of a schema,
//! formatted once), `migrate`, `enqueue`, `admin` and `control` (the driver contract's
//! `Admin` and `Control` on the pool), `work` (`Work`, on the worker's store; its
//! `WorkerRows` is `store::worker_rows::worker_rows_of!`), `dialect`, `flow` (jobs that
//! wait on others), `store` (the worker
//! store: turns to write, checkpoints, decoding a claim) and `rows`.

mod control;
mod dialect;
pub(crate) mod flow;

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqlitePool};
use sqlx::{Connection as _, Executor as _, Row as _, Sqlite};
use uuid::Uuid;

use super::driver::{Admin, Work};
use super::{
    fair, rates, tenants, ClaimedJob, Failure, Lease, LeasedRow, NewJob, ProbeFailure, RatedClaim,
    Retired, ScheduleRow, Schema, Success,
};
use crate::bus::wake;
use crate::error::{Error, Result};
use crate::model::{Attempt, JobRecord, QueueCounts, QueuedJob};

/// A time as sk stores it on SQLite: `2026-11-22T10:39:48.123456Z`.
pub(crate) fn ts(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// Binds a new queue row's `$1` to `$15` (`NEW_COLUMNS` without `task_has_result`).
macro_rules! bind_new {
    ($query:expr, $job:expr, $now:expr, $mode:expr) => {
        $query
            .bind($job.id)
            .bind(&*$job.task_type)
            .bind($job.source)
            .bind($job.payload)
            .bind($job.priority)
            .bind(ts($now))
            .bind(ts($job.run_at))
            .bind($job.queue)
            .bind($job.max_attempts)
            .bind($job.tenant)
            .bind($job.correlation_id)
            .bind($job.metadata)
            .bind($job.unique_key)
            .bind($mode)
            .bind($job.every_ms)
            .bind($job.timeout_ms)
    };
}

/// The ids as a JSON array of hex strings, for `json_each`.
pub(super) fn id_list(ids: &[Uuid]) -> String {
    let hex: Vec<String> = ids.iter().map(|id| id.simple().to_string()).collect();
    serde_json::to_string(&hex).unwrap_or_else(|_| "[]".to_owned())
}

mod admin;
mod enqueue;
mod migrate;
mod rows;
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
use rows::*;
pub(crate) use sql::*;
pub(crate) use store::*;
